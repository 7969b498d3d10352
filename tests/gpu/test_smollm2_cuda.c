/* SmolLM2-135M on the CUDA backend against the CPU backend, same model, same tokens (4 chunks
 * of 512 tokens of tests/engine/data/gpl3.smollm2.tokens, as engine_smollm2_ppl):
 * - FP32 GEMM path: perplexity within 1e-4 relative of the CPU's, and top-1 agreement of the
 *   next-token argmax with the CPU's baseline of at least 99.5%;
 * - a second evaluation on the same model (the worker's model cache) uploads no weight again
 *   and gives the same perplexity bit for bit;
 * - BF16 GEMM path: printed, and held to the looser 1e-2 relative (activations in BF16);
 * - the worker's default (QW_CUDA_GEMM_LT): each unquantized linear in its master's own
 *   precision (master_gemm.h): "fp32" for the GGUF block types' FP32 values, "fp16" / "bf16"
 *   for 16-bit masters; activations rounded to BF16 or FP16 (ops_cuda_lt.cu), so 1e-2.
 * - the evaluation's scoring on the device (ops.h score_rows, qw_cuda_score_rows) against the
 *   CPU's through the eval path: the model quantized to NVFP4 weights (one W4A4 linear) and
 *   compared with the SQNR probe on, once on the CPU and once on CUDA (FP32 GEMM path): the
 *   perplexity within 1e-4 relative, KL mean within 1e-2 relative, top-1 agreement within
 *   0.005, and every linear's SQNR (the probe on the device) within 0.05 dB.
 * QSWEEP_SMOLLM2 may name the GGUF or a Hugging Face directory (tools/device-check.sh writes a
 * synthetic one of SmolLM2-135M's shape when the GGUF is absent).
 * Exits 77 (skipped) with a message when no CUDA device is visible or the GGUF is absent
 * (QSWEEP_SMOLLM2, else tools/fetch_smollm2.sh's cache). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "eval.h"
#include "golden.h"
#include "model.h"
#include "model_cuda.h"
#include "policy.h"
#include "quant.h"
#include "tokens.h"

static char gguf[1024];

static void eval_or_fail(qs_status st, const qs_error *err) {
    if (st != QS_OK) fail_msg("%s", err->msg);
}

/* The model, its tokens and a temporary folder for the CPU baseline, as both tests use them. */
typedef struct smol {
    char dir[512], base[600];
    qw_checkpoint *ck;
    qw_model *m;
    qw_tokens t;
} smol;

/* Opens the GGUF on the CPU backend (ctx 512, default threads) and loads the committed
 * SmolLM2 token ids; fails the test on any error. */
static void smol_open(smol *x) {
    char tok[1024];
    qs_error err = {0};
    snprintf(tok, sizeof tok, "%s/gpl3.smollm2.tokens", engine_data_dir());
    assert_int_equal(make_temp_dir(x->dir, sizeof x->dir), 0);
    snprintf(x->base, sizeof x->base, "%s/cpu.baseline", x->dir);
    eval_or_fail(qw_checkpoint_open(gguf, &x->ck, &err), &err);
    eval_or_fail(qw_model_create(x->ck, 512, 0, &x->m, &err), &err);
    eval_or_fail(qw_tokens_load(tok, &x->t, &err), &err);
}

static void smol_close(smol *x) {
    qw_tokens_free(&x->t);
    qw_model_destroy(x->m);
    qw_checkpoint_close(x->ck);
    remove_temp_dir(x->dir);
}

static void smollm2_cuda_matches_cpu(void **state) {
    (void)state;
    smol x;
    smol_open(&x);
    qw_model *m = x.m;
    const char *base = x.base;
    qs_error err = {0};
    qw_eval_options o = {.ctx = 512, .max_chunks = 4, .bos_id = -1};
    qw_eval_metrics rc, rg, rg2, rb;
    eval_or_fail(qw_eval_baseline(m, &x.t, &o, base, &rc, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "cpu");

    eval_or_fail(qw_model_use_cuda(m, 0, QW_CUDA_GEMM_FP32, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "fp32");
    eval_or_fail(qw_eval_compare(m, &x.t, &o, base, &rg, &err), &err);
    double rel = fabs(rg.ppl - rc.ppl) / rc.ppl;
    printf("%s: cpu ppl %.6f, cuda fp32 ppl %.6f, relative %.2e (tol 1e-4); top-1 agreement "
           "%.4f (>= 0.995); KL mean %.3g max %.3g\n",
           rel <= 1e-4 && rg.top1 >= 0.995 ? "OK" : "NOT OK", rc.ppl, rg.ppl, rel, rg.top1,
           rg.kl_mean, rg.kl_max);
    assert_true(rel <= 1e-4);
    assert_true(rg.top1 >= 0.995);

    qw_cuda_cache_stats s0, s1;
    qw_model_cuda_cache_stats(m, &s0);
    eval_or_fail(qw_eval_compare(m, &x.t, &o, base, &rg2, &err), &err);
    qw_model_cuda_cache_stats(m, &s1);
    printf("weight cache: %zu uploads, %zu hits, %.1f MB on the device; second run: %zu new "
           "uploads\n",
           s1.uploads, s1.hits, s1.bytes / 1e6, s1.uploads - s0.uploads);
    assert_int_equal(s1.uploads, s0.uploads);
    assert_true(s1.hits > s0.hits);
    assert_true(rg2.ppl == rg.ppl);

    eval_or_fail(qw_model_use_cuda(m, 0, QW_CUDA_GEMM_BF16, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "bf16");
    eval_or_fail(qw_eval_compare(m, &x.t, &o, base, &rb, &err), &err);
    double relb = fabs(rb.ppl - rc.ppl) / rc.ppl;
    printf("cuda bf16 ppl %.6f, relative %.2e (tol 1e-2); top-1 agreement %.4f\n", rb.ppl, relb,
           rb.top1);
    assert_true(relb <= 1e-2);

    qw_eval_metrics ra;
    eval_or_fail(qw_model_use_cuda(m, 0, QW_CUDA_GEMM_LT, &err), &err);
    qw_model_gemm_path_reset(m);
    eval_or_fail(qw_eval_compare(m, &x.t, &o, base, &ra, &err), &err);
    const char *path = qw_model_gemm_path(m);
    /* fp32, fp16 or bf16 GEMMs, on activations rounded to BF16 or FP16 (master_gemm.h), so
       the BF16 tolerance either way */
    double rela = fabs(ra.ppl - rc.ppl) / rc.ppl, tola = 1e-2;
    printf("cuda auto (gemm_path %s) ppl %.6f, relative %.2e (tol %.0e); top-1 agreement %.4f\n",
           path, ra.ppl, rela, tola, ra.top1);
    assert_true(!strcmp(path, "fp32") || !strcmp(path, "fp16") || !strcmp(path, "bf16"));
    assert_true(rela <= tola);
    qw_eval_metrics_free(&ra);

    eval_or_fail(qw_model_use_cpu(m, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "cpu");
    qw_eval_metrics_free(&rc);
    qw_eval_metrics_free(&rg);
    qw_eval_metrics_free(&rg2);
    qw_eval_metrics_free(&rb);
    smol_close(&x);
}

static void cuda_scoring_and_probe_match_cpu(void **state) {
    (void)state;
    smol x;
    smol_open(&x);
    qw_model *m = x.m;
    const char *base = x.base;
    qs_error err = {0};
    qw_eval_options o = {.ctx = 512, .max_chunks = 2, .bos_id = -1};
    qw_eval_metrics rb, rc, rg;
    eval_or_fail(qw_eval_baseline(m, &x.t, &o, base, &rb, &err), &err);
    const qw_config *cfg = qw_model_config(m);
    qw_policy pol;
    qw_quant_spec q = {.weight = qk_format_by_name("nvfp4")};
    assert_non_null(q.weight);
    eval_or_fail(qw_policy_init(&pol, cfg->n_layers, &err), &err);
    for (int l = 0; l < cfg->n_layers; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            *qw_policy_linear(&pol, l, (qw_linear_kind)k) = q;
    qw_policy_linear(&pol, 0, QW_LINEAR_DOWN)->act = q.weight;
    eval_or_fail(qw_model_apply_policy(m, &pol, &err), &err);
    o.sqnr = 1;
    eval_or_fail(qw_eval_compare(m, &x.t, &o, base, &rc, &err), &err);
    eval_or_fail(qw_model_use_cuda(m, 0, QW_CUDA_GEMM_FP32, &err), &err);
    eval_or_fail(qw_eval_compare(m, &x.t, &o, base, &rg, &err), &err);
    double rp = fabs(rg.ppl - rc.ppl) / rc.ppl, rk = fabs(rg.kl_mean - rc.kl_mean) / rc.kl_mean;
    double dt = fabs(rg.top1 - rc.top1), worst = 0.0;
    assert_int_equal(rg.n_sqnr, rc.n_sqnr);
    assert_true(rc.n_sqnr > 0);
    for (size_t i = 0; i < rc.n_sqnr; i++) {
        assert_string_equal(rg.sqnr[i].name, rc.sqnr[i].name);
        double d = fabs(rg.sqnr[i].sqnr_db - rc.sqnr[i].sqnr_db);
        worst = d > worst ? d : worst;
    }
    printf("%s: nvfp4 compare on cuda against cpu: ppl relative %.2e (1e-4), KL mean %.4g vs "
           "%.4g relative %.2e (1e-2), top-1 %.4f vs %.4f (0.005), %zu SQNRs, worst %.3f dB "
           "apart (0.05)\n",
           rp <= 1e-4 && rk <= 1e-2 && dt <= 0.005 && worst <= 0.05 ? "OK" : "NOT OK", rp,
           rg.kl_mean, rc.kl_mean, rk, rg.top1, rc.top1, rc.n_sqnr, worst);
    assert_true(rp <= 1e-4);
    assert_true(rk <= 1e-2);
    assert_true(dt <= 0.005);
    assert_true(worst <= 0.05);
    eval_or_fail(qw_model_use_cpu(m, &err), &err);
    qw_policy_free(&pol);
    qw_eval_metrics_free(&rb);
    qw_eval_metrics_free(&rc);
    qw_eval_metrics_free(&rg);
    smol_close(&x);
}

int main(void) {
    if (qw_cuda_available() == 0) {
        printf("gpu_smollm2: no CUDA device visible: skipped\n");
        return 77;
    }
    const char *env = getenv("QSWEEP_SMOLLM2");
    if (env && *env)
        snprintf(gguf, sizeof gguf, "%s", env);
    else
        smollm2_gguf_path(gguf, sizeof gguf);
    if (access(gguf, R_OK) != 0) {
        printf("gpu_smollm2: %s absent (tools/fetch_smollm2.sh fetches it, or name one by "
               "QSWEEP_SMOLLM2): skipped\n",
               gguf);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm2_cuda_matches_cpu),
        cmocka_unit_test(cuda_scoring_and_probe_match_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
