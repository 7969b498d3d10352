/* SmolLM2-135M on the CUDA backend against the CPU backend, same model, same tokens (4 chunks
 * of 512 tokens of tests/engine/data/gpl3.smollm2.tokens, as engine_smollm2_ppl):
 * - FP32 GEMM path: perplexity within 1e-3 relative of the CPU's, and top-1 agreement of the
 *   next-token argmax with the CPU's baseline of at least 99.5%;
 * - a second evaluation on the same model (the worker's model cache) uploads no weight again
 *   and gives the same perplexity bit for bit;
 * - BF16 GEMM path: printed, and held to the looser 1e-2 relative (activations in BF16).
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
#include "tokens.h"

static char gguf[1024];

static void eval_or_fail(qs_status st, const qs_error *err) {
    if (st != QS_OK) fail_msg("%s", err->msg);
}

static void smollm2_cuda_matches_cpu(void **state) {
    (void)state;
    char dir[512], base[600], tok[1024];
    snprintf(tok, sizeof tok, "%s/gpl3.smollm2.tokens", engine_data_dir());
    assert_int_equal(make_temp_dir(dir, sizeof dir), 0);
    snprintf(base, sizeof base, "%s/cpu.baseline", dir);
    qs_error err = {0};
    qw_checkpoint *ck;
    qw_model *m;
    qw_tokens t;
    eval_or_fail(qw_checkpoint_open(gguf, &ck, &err), &err);
    eval_or_fail(qw_model_create(ck, 512, 0, &m, &err), &err);
    eval_or_fail(qw_tokens_load(tok, &t, &err), &err);
    qw_eval_options o = {.ctx = 512, .max_chunks = 4, .bos_id = -1};
    qw_eval_metrics rc, rg, rg2, rb;
    eval_or_fail(qw_eval_baseline(m, &t, &o, base, &rc, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "cpu");

    eval_or_fail(qw_model_use_cuda(m, 0, QW_CUDA_GEMM_FP32, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "fp32");
    eval_or_fail(qw_eval_compare(m, &t, &o, base, &rg, &err), &err);
    double rel = fabs(rg.ppl - rc.ppl) / rc.ppl;
    printf("%s: cpu ppl %.6f, cuda fp32 ppl %.6f, relative %.2e (tol 1e-3); top-1 agreement "
           "%.4f (>= 0.995); KL mean %.3g max %.3g\n",
           rel <= 1e-3 && rg.top1 >= 0.995 ? "OK" : "NOT OK", rc.ppl, rg.ppl, rel, rg.top1,
           rg.kl_mean, rg.kl_max);
    assert_true(rel <= 1e-3);
    assert_true(rg.top1 >= 0.995);

    qw_cuda_cache_stats s0, s1;
    qw_model_cuda_cache_stats(m, &s0);
    eval_or_fail(qw_eval_compare(m, &t, &o, base, &rg2, &err), &err);
    qw_model_cuda_cache_stats(m, &s1);
    printf("weight cache: %zu uploads, %zu hits, %.1f MB on the device; second run: %zu new "
           "uploads\n",
           s1.uploads, s1.hits, s1.bytes / 1e6, s1.uploads - s0.uploads);
    assert_int_equal(s1.uploads, s0.uploads);
    assert_true(s1.hits > s0.hits);
    assert_true(rg2.ppl == rg.ppl);

    eval_or_fail(qw_model_use_cuda(m, 0, QW_CUDA_GEMM_BF16, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "bf16");
    eval_or_fail(qw_eval_compare(m, &t, &o, base, &rb, &err), &err);
    double relb = fabs(rb.ppl - rc.ppl) / rc.ppl;
    printf("cuda bf16 ppl %.6f, relative %.2e (tol 1e-2); top-1 agreement %.4f\n", rb.ppl, relb,
           rb.top1);
    assert_true(relb <= 1e-2);

    eval_or_fail(qw_model_use_cpu(m, &err), &err);
    assert_string_equal(qw_model_gemm_path(m), "cpu");
    qw_eval_metrics_free(&rc);
    qw_eval_metrics_free(&rg);
    qw_eval_metrics_free(&rg2);
    qw_eval_metrics_free(&rb);
    qw_tokens_free(&t);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    remove_temp_dir(dir);
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
        printf("gpu_smollm2: %s absent (tools/fetch_smollm2.sh; on a device machine put it in "
               "shared/models/ or name it by QSWEEP_SMOLLM2): skipped\n",
               gguf);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm2_cuda_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
