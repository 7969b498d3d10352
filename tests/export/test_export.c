/* qsweep's compressed-tensors export read back by qsweep's loader (worker/export/export.h,
 * worker/checkpoint/fp4_checkpoint.c), on the 3-block test Llama and the GPL-3 byte tokens of
 * experiments/tiny.yaml:
 *   - every exported linear decodes to the engine's own fake-quantized weights, bit for bit;
 *   - the export evaluated against the source's baseline gives the eval job's metrics (perplexity,
 *     KL, top-1) digit for digit: W4A16 NVFP4, MXFP4, a mixed plan with lm_head, and MXFP4 W4A4
 *     (the export's activations quantized as the job's were);
 *   - GPTQ jobs (worker/method) the same way, from GPTQ's own codes and scales: every linear
 *     GPTQ made reads back to the FP32 weight the job evaluated with, bit for bit, in
 *     compressed-tensors (NVFP4, MXFP4 with act_order, a per-linear plan), ModelOpt and GGUF;
 *     in NVFP4, round-to-nearest of those values gives other values on some linears (the
 *     scales written are GPTQ's, not the amax rule's on its output);
 *   - what the format cannot hold is refused naming the linear, and a refused or failed export
 *     leaves nothing behind.
 * Usage: test_export [smollm2] (smollm2: the round trips of all three layouts, and a GPTQ one
 *        as GGUF, on SmolLM2-135M's GGUF)
 *        test_export write FORMAT DIR DUMP: exports every linear of the test model in FORMAT to
 *        DIR and writes what qsweep reads back for them (FP32, HF names and row order) to the
 *        safetensors file DUMP, for the independent readers (ct_check.sh); FORMAT mxfp4-gguf:
 *        tests/checkpoint/fixtures/tiny_quant.gguf with block 0 in MXFP4 exported as GGUF
 *        (block 1 keeps its Q4_0, Q4_1, Q8_0, F16, BF16 linears), every tensor dumped
 *        (gguf_check.sh).
 *        FORMAT modelopt: every block linear NVFP4 W4A4, q/k/v and gate/up fused, calibrated
 *        on the last 2 chunks (modelopt_check.sh).
 *        FORMAT gptq-F (F one of the above): the same job made by GPTQ, calibrated on the last
 *        2 chunks (ids folded into the model's vocabulary); gptq-modelopt quantizes o and down
 *        only (GPTQ's own tensor scales fit no fused group) and dumps those.
 *        test_export peer SOURCE OUT TOKENS CTX CHUNKS: SOURCE (a GGUF) with every block linear
 *        in MXFP4 W4A16 exported as GGUF to OUT; prints qsweep's perplexity over the first
 *        CHUNKS chunks of TOKENS of the source, of the job (the policy applied) and of the
 *        export read back (equal to the job's, or exit 1), for bench/peer/
 *        llama_cpp_export_ppl.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "eval.h"
#include "export.h"
#include "format.h"
#include "forward.h"
#include "gptq.h"
#include "method_spec.h"
#include "model.h"
#include "policy.h"
#include "quant.h"
#include "st_writer.h"
#include "tokens.h"

static const char *model_path = QW_SOURCE_DIR "/tests/engine/data/llama3_gqa";
static const char *tokens_path = QW_SOURCE_DIR "/experiments/data/gpl3.bytes.tokens";
static int ctx = 64, max_chunks = 8;
static char workdir[256];
/* ModelOpt's calibration chunks: the last calib_n whole chunks of the token file */
enum { calib_n = 2 };
static uint32_t *calib;

/* calib from tokens_path (once). */
static const uint32_t *calibration(void) {
    if (calib) return calib;
    qw_tokens t = {0};
    qs_error err = {0};
    if (qw_tokens_load(tokens_path, &t, &err)) fail_msg("%s", err.msg);
    size_t total = t.n / (size_t)ctx;
    assert_true(total >= (size_t)max_chunks + calib_n);
    calib = malloc((size_t)calib_n * (size_t)ctx * sizeof *calib);
    assert_non_null(calib);
    memcpy(calib, t.ids + (total - calib_n) * (size_t)ctx, (size_t)calib_n * (size_t)ctx * 4);
    qw_tokens_free(&t);
    return calib;
}

static int setup(void **state) {
    (void)state;
    snprintf(workdir, sizeof workdir, "%s/qsweep-export-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(workdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    free(calib);
    calib = NULL;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Names in workdir, for checking that nothing was left behind. */
static int entries(void) {
    DIR *d = opendir(workdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static qw_quant_spec spec_of(const char *w, const char *a) {
    qw_quant_spec s = {0};
    s.weight = w ? qk_format_by_name(w) : NULL;
    s.act = a ? qk_format_by_name(a) : NULL;
    return s;
}

/* The engine's metrics of model m as it stands against the baseline file. */
static qw_eval_metrics compare(qw_model *m, const qw_tokens *t, const char *baseline) {
    qw_eval_options o = {.ctx = ctx, .max_chunks = (size_t)max_chunks, .bos_id = -1};
    qw_eval_metrics r = {0};
    qs_error err = {0};
    if (qw_eval_compare(m, t, &o, baseline, &r, &err) != QS_OK) fail_msg("%s", err.msg);
    return r;
}

/* w [rows x k] of linear i as the model reads it (heap). */
static float *linear_weights(qw_model *m, int i) {
    const qw_linear *L = qw_model_linear(m, i);
    float *w = malloc((size_t)L->out * (size_t)L->in * sizeof *w);
    qs_error err = {0};
    assert_non_null(w);
    if (qw_weight_rows_f32(&L->w, 0, L->out, w, &err)) fail_msg("%s", err.msg);
    return w;
}

/* Whether round-to-nearest of linear i's method-made weight w [out x in], in its own format,
 * gives other values than w: GPTQ's scales are then not what the amax rule picks from them. */
static int rtn_differs(qw_model *m, int i, const float *w) {
    const qw_linear *L = qw_model_linear(m, i);
    size_t n = (size_t)L->out * (size_t)L->in;
    float *r = malloc(n * sizeof *r);
    qs_error err = {0};
    assert_non_null(r);
    if (qk_fake_quant_into(L->spec.weight, &L->spec.weight_opt, w, r, (size_t)L->out, (size_t)L->in,
                           NULL, &err))
        fail_msg("%s", err.msg);
    int d = memcmp(r, w, n * sizeof *r) != 0;
    free(r);
    return d;
}

/* The round trip of policy p (and the activation-only policy `acts` for the export, NULL for
 * W4A16) with the method `plan` (NULL: round-to-nearest) applied after it, as the worker
 * applies it: export, read back, weights and metrics equal. Returns how many of the linears
 * the method made round-to-nearest of their own values would change (rtn_differs). */
static size_t round_trip_method(const char *name, const qw_policy *p, const qw_policy *acts,
                                qw_export_layout layout, const qw_method_plan *plan) {
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    qw_model *m = NULL;
    qw_tokens t = {0};
    if (qw_checkpoint_open(model_path, &ck, &err) || qw_model_create(ck, ctx, 0, &m, &err) ||
        qw_tokens_load(tokens_path, &t, &err))
        fail_msg("%s", err.msg);
    char baseline[512], out[512];
    snprintf(baseline, sizeof baseline, "%s/%s.qswblp", workdir, name);
    snprintf(out, sizeof out, "%s/%s", workdir, name);
    qw_eval_options o = {.ctx = ctx, .max_chunks = (size_t)max_chunks, .bos_id = -1};
    qw_eval_metrics base = {0};
    if (qw_eval_baseline(m, &t, &o, baseline, &base, &err)) fail_msg("%s", err.msg);
    if (qw_model_apply_policy(m, p, &err)) fail_msg("%s", err.msg);
    qw_method_state *ms = NULL;
    qw_method_info info;
    if (plan && qw_method_apply(m, plan, &ms, &info, &err)) fail_msg("%s", err.msg);
    qw_eval_metrics job = compare(m, &t, baseline);

    qw_export_request r = {.model_path = model_path,
                           .policy = p,
                           .method = plan,
                           .layout = layout,
                           .out_dir = out,
                           .calib = calibration(),
                           .calib_chunks = calib_n,
                           .calib_ctx = ctx};
    if (qw_export_write(&r, &err)) fail_msg("%s", err.msg);

    qw_checkpoint *ek = NULL;
    qw_model *em = NULL;
    char opened[600];
    snprintf(opened, sizeof opened, "%s%s", out, layout == QW_EXPORT_GGUF ? "/model.gguf" : "");
    if (qw_checkpoint_open(opened, &ek, &err) || qw_model_create(ek, ctx, 0, &em, &err))
        fail_msg("%s", err.msg);
    /* each quantized linear reads back as the engine's dequantized packed form, or as the
       method's weight where the method made it */
    size_t checked = 0, made = 0, differs = 0;
    for (int i = 0; i < qw_model_n_linears(m); i++) {
        int64_t axis, start, shape[2];
        const qk_packed *pk = qw_model_packed(m, -1, i, &axis, &start);
        if (!pk) continue;
        float *want = NULL;
        if (qw_method_made(ms, i)) {
            want = linear_weights(m, i);
            made++;
            differs += rtn_differs(m, i, want) != 0;
        }
        char lname[128], tname[160];
        qw_model_linear_name(m, i, lname, sizeof lname);
        snprintf(tname, sizeof tname, "%s.weight", lname);
        const float *got;
        int ndim;
        if (qw_checkpoint_tensor(ek, tname, &got, shape, &ndim, &err)) fail_msg("%s", err.msg);
        if (!want) {
            want = malloc(pk->rows * pk->k * sizeof *want);
            assert_non_null(want);
            if (qk_dequantize(pk, want, 0, &err)) fail_msg("%s", err.msg);
        }
        assert_int_equal(shape[0], pk->rows);
        assert_int_equal(shape[1], pk->k);
        for (size_t j = 0; j < pk->rows * pk->k; j++) /* GGUF: -0 reads +0 (see below) */
            if (!(got[j] == want[j]) ||
                ((layout != QW_EXPORT_GGUF || got[j] != 0) && memcmp(&got[j], &want[j], 4) != 0))
                fail_msg("%s: %s[%zu] differs from the job's weights", name, tname, j);
        free(want);
        checked++;
    }
    assert_true(checked > 0);
    if (acts && qw_model_apply_policy(em, acts, &err)) fail_msg("%s", err.msg);
    qw_eval_metrics back = compare(em, &t, baseline);
    printf("%s: job ppl %.17g kl_mean %.17g top1 %.17g | export ppl %.17g kl_mean %.17g top1 "
           "%.17g (%zu linears)\n",
           name, job.ppl, job.kl_mean, job.top1, back.ppl, back.kl_mean, back.top1, checked);
    if (plan) {
        printf("%s: %zu linears made by %s, %zu of them unlike round-to-nearest of their own "
               "values\n",
               name, made, plan->name, differs);
        assert_true(made > 0);
    }
    assert_true(job.ppl == back.ppl && job.nll == back.nll);
    assert_true(job.kl_mean == back.kl_mean && job.kl_max == back.kl_max);
    assert_true(job.kl_median == back.kl_median && job.kl_p99 == back.kl_p99);
    assert_true(job.top1 == back.top1);
    assert_true(job.kl_mean > 0); /* the policy changed the model: the test measures something */
    qw_eval_metrics_free(&job);
    qw_eval_metrics_free(&back);
    qw_eval_metrics_free(&base);
    qw_model_destroy(em);
    qw_checkpoint_close(ek);
    qw_method_state_free(ms);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    qw_tokens_free(&t);
    return differs;
}

static void round_trip_in(const char *name, const qw_policy *p, const qw_policy *acts,
                          qw_export_layout layout) {
    round_trip_method(name, p, acts, layout, NULL);
}

static void round_trip(const char *name, const qw_policy *p, const qw_policy *acts) {
    round_trip_in(name, p, acts, QW_EXPORT_COMPRESSED_TENSORS);
}

static qw_policy all_linears(int n_layers, const char *w, const char *a) {
    qw_policy p;
    qs_error err = {0};
    if (qw_policy_init(&p, n_layers, &err)) fail_msg("%s", err.msg);
    qw_quant_spec s = spec_of(w, a);
    if (qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err)) fail_msg("%s", err.msg);
    return p;
}

static int tied(void) {
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(model_path, &ck, &err)) fail_msg("%s", err.msg);
    int t = qw_checkpoint_config(ck)->tied_embeddings;
    qw_checkpoint_close(ck);
    return t;
}

static int n_layers(void) {
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(model_path, &ck, &err)) fail_msg("%s", err.msg);
    int n = qw_checkpoint_config(ck)->n_layers;
    qw_checkpoint_close(ck);
    return n;
}

static void nvfp4_w4a16_reads_back_to_the_jobs_metrics(void **state) {
    (void)state;
    qw_policy p = all_linears(n_layers(), "nvfp4", NULL);
    round_trip("nvfp4-w4a16", &p, NULL);
    qw_policy_free(&p);
}

static void mxfp4_gguf_reads_back_to_the_jobs_metrics(void **state) {
    (void)state;
    qw_policy p = all_linears(n_layers(), "mxfp4", NULL);
    round_trip_in("mxfp4-gguf", &p, NULL, QW_EXPORT_GGUF);
    qw_policy_free(&p);
}

static void mxfp4_w4a16_reads_back_to_the_jobs_metrics(void **state) {
    (void)state;
    qw_policy p = all_linears(n_layers(), "mxfp4", NULL);
    round_trip("mxfp4-w4a16", &p, NULL);
    qw_policy_free(&p);
}

static void mxfp4_w4a4_reads_back_to_the_jobs_metrics(void **state) {
    (void)state;
    int nl = n_layers();
    qw_policy p = all_linears(nl, "mxfp4", "mxfp4");
    qw_policy acts = all_linears(nl, NULL, "mxfp4");
    round_trip("mxfp4-w4a4", &p, &acts);
    qw_policy_free(&acts);
    qw_policy_free(&p);
}

/* A plan: q/k/v and lm_head NVFP4, gate/up/down MXFP4, o left unquantized, block 1's down
 * unquantized; two config groups and an ignore list. (SmolLM2 ties lm_head: it stays.) */
static qw_policy mixed_policy(int nl) {
    qw_policy p;
    qs_error err = {0};
    if (qw_policy_init(&p, nl, &err)) fail_msg("%s", err.msg);
    for (int l = 0; l < nl; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++) {
            if (k == QW_LINEAR_O || (l == 1 && k == QW_LINEAR_DOWN)) continue;
            *qw_policy_linear(&p, l, (qw_linear_kind)k) =
                spec_of(k <= QW_LINEAR_V ? "nvfp4" : "mxfp4", NULL);
        }
    if (!tied()) p.lm_head = spec_of("nvfp4", NULL); /* a tied head cannot be (export.h) */
    return p;
}

static void mixed_plan_reads_back_to_the_jobs_metrics(void **state) {
    (void)state;
    qw_policy p = mixed_policy(n_layers());
    round_trip("mixed", &p, NULL);
    qw_policy_free(&p);
}

/* GPTQ on the calibration chunks (the last calib_n of the token file, none of them scored). */
static qw_method_plan gptq_plan(int act_order) {
    qw_method_plan g = {.name = "gptq", .gptq = 1, .calib_chunks = calib_n, .ctx = ctx};
    g.gptq_opt.act_order = act_order;
    g.calib = calibration();
    return g;
}

static void gptq_nvfp4_reads_back_to_the_jobs_weights_and_metrics(void **state) {
    (void)state;
    qw_policy p = all_linears(n_layers(), "nvfp4", NULL);
    qw_method_plan g = gptq_plan(0);
    /* GPTQ's tensor scale comes from the unquantized weight and its block scales from the
       columns as they stood when their group began; round-to-nearest would take both from the
       quantized values, and on some linears lands elsewhere: the written scales are GPTQ's */
    assert_true(round_trip_method("gptq-nvfp4", &p, NULL, QW_EXPORT_COMPRESSED_TENSORS, &g) > 0);
    qw_policy_free(&p);
}

/* act_order: the static group scales (gptq.h), the codes written in the columns' own order.
 * (Here round-to-nearest of GPTQ's values happens to give them back: an E8M0 scale moves only
 * when a group's largest value leaves its binade, which GPTQ's updates do not do on this
 * model.) */
static void gptq_mxfp4_act_order_reads_back_to_the_jobs_weights_and_metrics(void **state) {
    (void)state;
    qw_policy p = all_linears(n_layers(), "mxfp4", NULL);
    qw_method_plan g = gptq_plan(1);
    round_trip_method("gptq-mxfp4", &p, NULL, QW_EXPORT_COMPRESSED_TENSORS, &g);
    qw_policy_free(&p);
}

/* A per-linear plan on the mixed plan's policy: GPTQ on q/k/v (NVFP4) and down (MXFP4),
 * round-to-nearest on gate/up (MXFP4) and lm_head; each written from the codes its own method
 * chose. */
static void gptq_per_linear_plan_reads_back_to_the_jobs_weights_and_metrics(void **state) {
    (void)state;
    int nl = n_layers();
    qw_policy p = mixed_policy(nl);
    qw_method_plan g = gptq_plan(0);
    const qw_method_plan **table = calloc((size_t)nl * QW_LINEAR_KINDS, sizeof *table);
    assert_non_null(table);
    for (int l = 0; l < nl; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            if (k != QW_LINEAR_GATE && k != QW_LINEAR_UP) table[l * QW_LINEAR_KINDS + k] = &g;
    qw_method_plan per = {.name = "per-linear",
                          .linear = table,
                          .n_linear = nl * QW_LINEAR_KINDS,
                          .calib = g.calib,
                          .calib_chunks = g.calib_chunks,
                          .ctx = ctx};
    round_trip_method("gptq-per-linear", &p, NULL, QW_EXPORT_COMPRESSED_TENSORS, &per);
    free(table);
    qw_policy_free(&p);
}

/* ModelOpt: GPTQ gives each linear its own tensor scale, which a fused q/k/v or gate/up
 * cannot hold (one weight_scale_2 a GEMM), so o and down, W4A4 NVFP4. */
static void gptq_modelopt_reads_back_to_the_jobs_weights_and_metrics(void **state) {
    (void)state;
    int nl = n_layers();
    qw_policy p, acts;
    qs_error err = {0};
    if (qw_policy_init(&p, nl, &err) || qw_policy_init(&acts, nl, &err)) fail_msg("%s", err.msg);
    for (int l = 0; l < nl; l++) {
        *qw_policy_linear(&p, l, QW_LINEAR_O) = spec_of("nvfp4", "nvfp4");
        *qw_policy_linear(&p, l, QW_LINEAR_DOWN) = spec_of("nvfp4", "nvfp4");
        *qw_policy_linear(&acts, l, QW_LINEAR_O) = spec_of(NULL, "nvfp4");
        *qw_policy_linear(&acts, l, QW_LINEAR_DOWN) = spec_of(NULL, "nvfp4");
    }
    qw_method_plan g = gptq_plan(0);
    round_trip_method("gptq-modelopt", &p, &acts, QW_EXPORT_MODELOPT, &g);
    /* q/k/v by GPTQ: three tensor scales for one GEMM */
    qw_policy f = all_linears(nl, "nvfp4", "nvfp4");
    char out[512];
    snprintf(out, sizeof out, "%s/gptq-modelopt-qkv", workdir);
    int before = entries();
    qw_export_request r = {.model_path = model_path,
                           .policy = &f,
                           .method = &g,
                           .out_dir = out,
                           .layout = QW_EXPORT_MODELOPT,
                           .calib = calibration(),
                           .calib_chunks = calib_n,
                           .calib_ctx = ctx};
    assert_int_equal(qw_export_write(&r, &err), QS_EUNSUPPORTED);
    if (!strstr(err.msg, "q_proj and ")) fail_msg("message \"%s\" lacks q_proj", err.msg);
    /* the way out it names is one a GPTQ job can take: a method refuses sensitivity.fuse */
    if (strstr(err.msg, "quantize with sensitivity.fuse") ||
        !strstr(err.msg, "leave q/k/v unquantized in the policy, or export as compressed-tensors"))
        fail_msg("message \"%s\" does not name a way out a GPTQ job can take", err.msg);
    assert_int_equal(entries(), before);
    qw_policy_free(&f);
    qw_policy_free(&acts);
    qw_policy_free(&p);
}

/* GGUF: tiny_quant.gguf with every block linear GPTQ'd in MXFP4 (calibrated on the byte tokens
 * folded into its vocabulary) reads back as the weights GPTQ made, bit for bit but for the sign
 * of zero (ggml's levels have no -0, see a_gguf_export_reads_back_to_the_engines_weights). */
static void gptq_gguf_reads_back_to_the_jobs_weights(void **state) {
    (void)state;
    const char *src = QW_SOURCE_DIR "/tests/checkpoint/fixtures/tiny_quant.gguf";
    char out[512], file[600];
    snprintf(out, sizeof out, "%s/gptq-gguf", workdir);
    snprintf(file, sizeof file, "%s/model.gguf", out);
    qs_error err = {0};
    qw_checkpoint *ck = NULL, *ek = NULL;
    qw_model *m = NULL;
    if (qw_checkpoint_open(src, &ck, &err) || qw_model_create(ck, ctx, 0, &m, &err))
        fail_msg("%s", err.msg);
    const qw_config *cfg = qw_checkpoint_config(ck);
    uint32_t *ids = malloc((size_t)calib_n * (size_t)ctx * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < (size_t)calib_n * (size_t)ctx; i++)
        ids[i] = calibration()[i] % (uint32_t)cfg->vocab_size;
    qw_method_plan g = gptq_plan(0);
    g.calib = ids;
    qw_policy p = all_linears(cfg->n_layers, "mxfp4", NULL);
    qw_method_state *ms = NULL;
    qw_method_info info;
    if (qw_model_apply_policy(m, &p, &err) || qw_method_apply(m, &g, &ms, &info, &err))
        fail_msg("%s", err.msg);
    qw_export_request r = {
        .model_path = src, .policy = &p, .method = &g, .layout = QW_EXPORT_GGUF, .out_dir = out};
    if (qw_export_write(&r, &err) || qw_checkpoint_open(file, &ek, &err)) fail_msg("%s", err.msg);
    int n = cfg->n_layers * QW_LINEAR_KINDS;
    for (int i = 0; i < n; i++) {
        assert_true(qw_method_made(ms, i));
        char lname[128], wname[160];
        qw_model_linear_name(m, i, lname, sizeof lname);
        snprintf(wname, sizeof wname, "%s.weight", lname);
        const float *b;
        int64_t shape[2];
        int nd;
        if (qw_checkpoint_tensor(ek, wname, &b, shape, &nd, &err)) fail_msg("%s", err.msg);
        float *want = linear_weights(m, i);
        for (int64_t j = 0; j < shape[0] * shape[1]; j++)
            if (!(b[j] == want[j]) || (b[j] != 0 && memcmp(&b[j], &want[j], sizeof *b) != 0))
                fail_msg("%s[%lld]: GGUF %a, GPTQ %a", wname, (long long)j, (double)b[j],
                         (double)want[j]);
        free(want);
    }
    printf("gptq-gguf: %d MXFP4 linears read back as GPTQ made them\n", n);
    qw_checkpoint_close(ek);
    qw_method_state_free(ms);
    qw_policy_free(&p);
    free(ids);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
}

/* GPTQ over block 0's linears in MXFP4 as GGUF (the smollm2 run: SmolLM2's GGUF; one block
 * keeps GPTQ to seconds there), evaluated. */
static void gptq_mxfp4_gguf_reads_back_to_the_jobs_weights_and_metrics(void **state) {
    (void)state;
    qw_policy p;
    qs_error err = {0};
    qw_quant_spec mx = spec_of("mxfp4", NULL);
    if (qw_policy_init(&p, n_layers(), &err) ||
        qw_policy_isolation(&p, QW_ISO_BLOCK, 0, 0, &mx, &err))
        fail_msg("%s", err.msg);
    qw_method_plan g = gptq_plan(0);
    round_trip_method("gptq-mxfp4-gguf", &p, NULL, QW_EXPORT_GGUF, &g);
    qw_policy_free(&p);
}

/* A method whose input transform no layout holds is refused by name, alone or as one linear
 * of a per-linear plan, before anything is written. */
static void methods_with_an_online_transform_are_refused_by_name(void **state) {
    (void)state;
    int nl = n_layers();
    qw_policy p = all_linears(nl, "nvfp4", NULL);
    qw_method_plan rot = {.name = "rotate16", .rotate = 16};
    qw_method_plan sq = {.name = "smoothquant", .smooth = 1, .alpha = 0.5};
    qw_method_plan mr = {.name = "mr-gptq", .rotate = -1, .gptq = 1};
    qw_method_plan g = gptq_plan(0);
    const qw_method_plan *table[2 * QW_LINEAR_KINDS] = {0};
    table[0] = &g;
    table[QW_LINEAR_KINDS + QW_LINEAR_UP] = &mr;
    qw_method_plan per = {.name = "per-linear", .linear = table, .n_linear = 2 * QW_LINEAR_KINDS};
    const struct {
        const qw_method_plan *plan;
        const char *needle;
    } cases[] = {
        {&rot, "export: method rotate16: it rotates each input"},
        {&sq, "export: method smoothquant: it divides each input"},
        {&mr, "export: method mr-gptq: it rotates"},
        {&per, "export: method mr-gptq (model.layers.1.mlp.up_proj): it rotates"},
    };
    char out[512];
    snprintf(out, sizeof out, "%s/refused-method", workdir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int before = entries();
        qs_error err = {0};
        qw_export_request r = {
            .model_path = model_path, .policy = &p, .method = cases[i].plan, .out_dir = out};
        assert_int_equal(qw_export_write(&r, &err), QS_EUNSUPPORTED);
        if (!strstr(err.msg, cases[i].needle))
            fail_msg("message \"%s\" lacks \"%s\"", err.msg, cases[i].needle);
        assert_int_equal(entries(), before);
    }
    qw_policy_free(&p);
}

/* qk_gptq's packed form decodes (qk_dequantize) to the values it returns, bit for bit: NVFP4,
 * NVFP4 2D and MXFP4, with and without act_order, on a layer whose Hessian couples its
 * columns; its NVFP4 tensor scale is the unquantized weight's (2688/amax)^-1. */
static void gptq_packed_form_decodes_to_its_values(void **state) {
    (void)state;
    enum { rows = 32, k = 64, t = 96 };
    static float w[rows * k], x[t * k], q[rows * k], y[rows * k];
    static double h[k * k];
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)t * k; i++) { /* correlated inputs: column j leans on j-1 */
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((double)(s >> 8) / (1 << 24) - 0.5) + (i % k ? 0.5f * x[i - 1] : 0.f);
    }
    for (size_t i = 0; i < (size_t)rows * k; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = (float)((double)(s >> 8) / (1 << 24) - 0.5) * (i % 7 == 0 ? 4.f : 1.f);
    }
    qk_gptq_hessian_add(h, k, x, t, 1);
    const char *fmts[] = {"nvfp4", "nvfp4_2d", "mxfp4"};
    qs_error err = {0};
    for (size_t f = 0; f < 3; f++)
        for (int ao = 0; ao < 2; ao++) {
            const qk_format *fmt = qk_format_by_name(fmts[f]);
            qk_quant_options o = {0};
            qk_packed pk;
            qk_gptq_options g = {.act_order = ao, .packed = &pk};
            memcpy(q, w, sizeof w);
            if (qk_gptq(fmt, &o, q, rows, k, h, &g, &err)) fail_msg("%s", err.msg);
            if (qk_dequantize(&pk, y, 1, &err)) fail_msg("%s", err.msg);
            for (size_t i = 0; i < (size_t)rows * k; i++)
                if (memcmp(&y[i], &q[i], sizeof *y) != 0)
                    fail_msg("%s act_order %d: [%zu] decodes to %a, GPTQ gave %a", fmts[f], ao, i,
                             (double)y[i], (double)q[i]);
            if (fmt->tensor_scale) {
                float amax = 0.f, enc, dec;
                for (size_t i = 0; i < (size_t)rows * k; i++)
                    amax = fmaxf(amax, fabsf(w[i]));
                qk_nvfp4_global_scales(amax, &enc, &dec);
                assert_true(pk.tensor_amax == amax && pk.tensor_scale == dec);
            }
            qk_packed_release(&pk);
        }
    /* a format of another rule has no packed form here */
    qk_packed pk;
    qk_gptq_options g = {.packed = &pk};
    memcpy(q, w, sizeof w);
    assert_int_equal(
        qk_gptq(qk_format_by_name("int4_group"), &(qk_quant_options){0}, q, rows, k, h, &g, &err),
        QS_EUNSUPPORTED);
    assert_null(pk.codes);
}

/* An export in layout that is refused: the error code and a part of its message; nothing left
 * behind. calib_chunks: the calibration chunks given (ModelOpt). */
static void refused_in(qw_export_layout layout, size_t calib_chunks, const qw_policy *p,
                       const char *out, qs_status code, const char *needle) {
    int before = entries();
    qs_error err = {0};
    qw_export_request r = {.model_path = model_path,
                           .policy = p,
                           .out_dir = out,
                           .layout = layout,
                           .calib = calibration(),
                           .calib_chunks = calib_chunks,
                           .calib_ctx = ctx};
    assert_int_equal(qw_export_write(&r, &err), code);
    if (!strstr(err.msg, needle)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
    assert_int_equal(entries(), before);
}

static void refused(const qw_policy *p, const char *out, qs_status code, const char *needle) {
    refused_in(QW_EXPORT_COMPRESSED_TENSORS, 0, p, out, code, needle);
}

/* Model m's tensor `name` as FP32 from its safetensors file (checkpoint_internal.h's parser),
 * NULL when absent; *ndim its rank. */
static const float *st_scalar(const qw_tensor_table *t, const char *name, int *ndim) {
    const qw_tensor_entry *e = qw_table_find(t, name);
    if (!e || e->dtype != QW_DT_F32 || e->raw || e->numel != 1) return NULL;
    *ndim = e->ndim;
    return (const float *)e->src;
}

/* The largest |x| of block 0's attention input over the calibration chunks, computed here from
 * the checkpoint's embeddings and input_layernorm (RMSNorm in double): the value ModelOpt's
 * input_scale of q/k/v is amax/(6*448) of. */
static double block0_input_amax(void) {
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    const float *emb, *g;
    int64_t s1[2], s2[2];
    int d1, d2;
    if (qw_checkpoint_open(model_path, &ck, &err) ||
        qw_checkpoint_tensor(ck, "model.embed_tokens.weight", &emb, s1, &d1, &err) ||
        qw_checkpoint_tensor(ck, "model.layers.0.input_layernorm.weight", &g, s2, &d2, &err))
        fail_msg("%s", err.msg);
    const int64_t D = s1[1];
    const double eps = qw_checkpoint_config(ck)->norm_eps;
    const uint32_t *tok = calibration();
    double amax = 0;
    for (size_t i = 0; i < (size_t)calib_n * (size_t)ctx; i++) {
        const float *x = emb + (size_t)tok[i] * (size_t)D;
        double ss = 0;
        for (int64_t j = 0; j < D; j++) ss += (double)x[j] * x[j];
        double r = 1.0 / sqrt(ss / (double)D + eps);
        for (int64_t j = 0; j < D; j++) amax = fmax(amax, fabs(x[j] * r * g[j]));
    }
    qw_checkpoint_close(ck);
    return amax;
}

/* ModelOpt's NVFP4 layout (modelopt_export.c): every block linear NVFP4 W4A4 with q/k/v and
 * gate/up sharing their amax (sensitivity.fuse), input scales calibrated on the last 2 chunks.
 * It reads back to the engine's weights bit for bit and, evaluated with its inputs quantized as
 * the job's were, to the job's metrics (round_trip_in); its files hold ModelOpt's names, scalar
 * F32 scales, an input_scale of amax/(6*448) equal (within 1e-6, summation order) to block 0's
 * attention input amax computed here from the embeddings, and the two configs. */
static void modelopt_w4a4_reads_back_to_the_jobs_metrics(void **state) {
    (void)state;
    int nl = n_layers();
    qw_policy p = all_linears(nl, "nvfp4", "nvfp4");
    p.fuse = QW_FUSE_QKV | QW_FUSE_GATE_UP;
    qw_policy acts = all_linears(nl, NULL, "nvfp4");
    round_trip_in("modelopt", &p, &acts, QW_EXPORT_MODELOPT);
    qw_policy_free(&acts);
    qw_policy_free(&p);
    char path[600];
    snprintf(path, sizeof path, "%s/modelopt/model.safetensors", workdir);
    qs_error err = {0};
    qw_mapped_file f = {0};
    qw_tensor_table t = {0};
    if (qw_map_file(path, &f, &err) || qw_safetensors_parse(path, f.data, f.size, 0, &t, &err))
        fail_msg("%s", err.msg);
    static const char *const kinds[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                        "mlp.down_proj"};
    float in_scale[7], w2[7];
    for (int b = 0; b < nl; b++)
        for (int k = 0; k < 7; k++) {
            char n[160];
            int nd = -1;
            snprintf(n, sizeof n, "model.layers.%d.%s.input_scale", b, kinds[k]);
            const float *v = st_scalar(&t, n, &nd);
            if (!v || nd != 0) fail_msg("%s: not one scalar F32", n);
            in_scale[k] = *v;
            assert_true(in_scale[k] > 0 && isfinite(in_scale[k]));
            snprintf(n, sizeof n, "model.layers.%d.%s.weight_scale_2", b, kinds[k]);
            if (!(v = st_scalar(&t, n, &nd)) || nd != 0) fail_msg("%s: not one scalar F32", n);
            w2[k] = *v;
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", b, kinds[k]);
            const qw_tensor_entry *e = qw_table_find(&t, n);
            assert_true(e && e->raw == QW_RAW_U8);
            snprintf(n, sizeof n, "model.layers.%d.%s.weight_scale", b, kinds[k]);
            e = qw_table_find(&t, n);
            assert_true(e && e->raw == QW_RAW_F8_E4M3);
        }
        /* (the last block's values are left in the arrays) */
    assert_true(w2[0] == w2[1] && w2[1] == w2[2] && w2[4] == w2[5]); /* fused: one scale */
    assert_true(in_scale[0] == in_scale[1] && in_scale[1] == in_scale[2]); /* one input */
    assert_true(in_scale[4] == in_scale[5]);
    int nd;
    double want = block0_input_amax() / (6.0 * 448.0);
    double got = *st_scalar(&t, "model.layers.0.self_attn.q_proj.input_scale", &nd);
    printf("modelopt: block 0 q input_scale %.9g, from the embeddings %.9g\n", got, want);
    assert_true(fabs(got - want) <= 1e-6 * want);
    /* excluded: kept as stored, or absent with tied embeddings (SmolLM2) */
    assert_true((qw_table_find(&t, "lm_head.weight") == NULL) == (tied() != 0));
    qw_table_free(&t);
    qw_unmap_file(&f);
    json_error_t je;
    snprintf(path, sizeof path, "%s/modelopt/hf_quant_config.json", workdir);
    json_t *hq = json_load_file(path, 0, &je);
    if (!hq) fail_msg("%s: %s", path, je.text);
    json_t *q = json_object_get(hq, "quantization");
    assert_string_equal(json_string_value(json_object_get(q, "quant_algo")), "NVFP4");
    assert_int_equal(json_integer_value(json_object_get(q, "group_size")), 16);
    json_t *ex = json_object_get(q, "exclude_modules");
    assert_true(json_array_size(ex) == 1 &&
                !strcmp(json_string_value(json_array_get(ex, 0)), "lm_head"));
    json_decref(hq);
    snprintf(path, sizeof path, "%s/modelopt/config.json", workdir);
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) fail_msg("%s: %s", path, je.text);
    json_t *qc = json_object_get(cfg, "quantization_config");
    assert_string_equal(json_string_value(json_object_get(qc, "quant_method")), "modelopt");
    assert_string_equal(json_string_value(json_object_get(qc, "quant_algo")), "NVFP4");
    json_t *g0 = json_object_get(json_object_get(qc, "config_groups"), "group_0");
    json_t *ia = json_object_get(g0, "input_activations");
    assert_true(json_is_false(json_object_get(ia, "dynamic")));
    json_decref(cfg);
}

/* What ModelOpt's NVFP4 cannot hold: W4A16 (it always quantizes inputs), MXFP4, q/k/v with
 * their own scales (one weight_scale_2 per fused GEMM), and no calibration; nothing left. */
static void modelopt_refusals(void **state) {
    (void)state;
    int nl = n_layers();
    char out[512];
    snprintf(out, sizeof out, "%s/modelopt-refused", workdir);
    const qw_export_layout mo = QW_EXPORT_MODELOPT;
    qw_policy p = all_linears(nl, "nvfp4", NULL);
    p.fuse = QW_FUSE_QKV | QW_FUSE_GATE_UP;
    refused_in(mo, calib_n, &p, out, QS_EUNSUPPORTED, "always quantizes the input");
    qw_policy_free(&p);
    p = all_linears(nl, "mxfp4", "mxfp4");
    refused_in(mo, calib_n, &p, out, QS_EUNSUPPORTED, "format mxfp4: ModelOpt's NVFP4 layout");
    qw_policy_free(&p);
    p = all_linears(nl, "nvfp4", "nvfp4");
    refused_in(mo, calib_n, &p, out, QS_EUNSUPPORTED, "one weight_scale_2");
    p.fuse = QW_FUSE_QKV | QW_FUSE_GATE_UP;
    refused_in(mo, 0, &p, out, QS_EINVAL, "give calibration chunks");
    qw_policy_free(&p);
    p = all_linears(nl, "nvfp4", "nvfp4");
    p.fuse = QW_FUSE_QKV | QW_FUSE_GATE_UP;
    *qw_policy_linear(&p, 1, QW_LINEAR_K) = spec_of(NULL, NULL);
    refused_in(mo, calib_n, &p, out, QS_EUNSUPPORTED, "quantize all of it or none");
    qw_policy_free(&p);
}

static void unsupported_combinations_are_refused_naming_the_linear(void **state) {
    (void)state;
    int nl = n_layers();
    char out[512];
    snprintf(out, sizeof out, "%s/refused", workdir);
    qw_policy p = all_linears(nl, "fp8_e4m3", NULL);
    refused(&p, out, QS_EUNSUPPORTED, "model.layers.0.self_attn.q_proj: format fp8_e4m3");
    qw_policy_free(&p);
    p = all_linears(nl, "nvfp4", "nvfp4");
    refused(&p, out, QS_EUNSUPPORTED, "NVFP4 activations");
    qw_policy_free(&p);
    p = all_linears(nl, NULL, "mxfp4");
    refused(&p, out, QS_EUNSUPPORTED, "without its weights");
    qw_policy_free(&p);
    p = all_linears(nl, "nvfp4", NULL);
    p.embed = spec_of("nvfp4", NULL);
    refused(&p, out, QS_EUNSUPPORTED, "model.embed_tokens");
    qw_policy_free(&p);
    p = all_linears(nl + 1, "nvfp4", NULL);
    refused(&p, out, QS_EINVAL, "4-block model");
    qw_policy_free(&p);
    p = all_linears(nl, NULL, NULL);
    refused(&p, out, QS_EINVAL, "quantizes no linear");
    qw_policy_free(&p);
}

static void an_existing_folder_is_never_written_over(void **state) {
    (void)state;
    char out[512], probe[600];
    snprintf(out, sizeof out, "%s/exists", workdir);
    assert_int_equal(mkdir(out, 0755), 0);
    qw_policy p = all_linears(n_layers(), "nvfp4", NULL);
    refused(&p, out, QS_EINVAL, "already exists");
    snprintf(probe, sizeof probe, "%s/config.json", out);
    assert_int_equal(access(probe, F_OK), -1);
    rmdir(out);
    qw_policy_free(&p);
}

/* A write that fails part way (a full disk; here the file size limit, EFBIG) is an error naming
 * the file, and neither the target nor the temporary folder remains. */
static void a_failed_write_leaves_nothing(void **state) {
    (void)state;
    char out[512];
    snprintf(out, sizeof out, "%s/full", workdir);
    qw_policy p = all_linears(n_layers(), "nvfp4", NULL);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int before = entries();
    qs_error err = {0};
    qw_export_request r = {.model_path = model_path, .policy = &p, .out_dir = out};
    qs_status st = qw_export_write(&r, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    assert_int_equal(st, QS_EIO);
    if (!strstr(err.msg, "model.safetensors")) fail_msg("message \"%s\" names no file", err.msg);
    assert_int_equal(entries(), before);
    qw_policy_free(&p);
}

/* BF16 bits of an FP32 value, rounded to nearest even (finite values). */
static uint16_t bf16_rne(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* A checkpoint the compressed-tensors package wrote itself (tools/export/make_ct_fixture.py:
 * NVFP4 attention, MXFP4 MLP, its own qparams and compressors) loads in qsweep to the package's
 * codes x scales x 1/global_scale bit for bit, and within 1 BF16 ulp of its decompress() (MXFP4:
 * equal), the bound docs/export.md explains. */
static void a_checkpoint_the_reference_wrote_loads_to_its_values(void **state) {
    (void)state;
    const char *dir = QW_SOURCE_DIR "/tests/export/fixtures/ct_published";
    const char *exp = QW_SOURCE_DIR "/tests/export/fixtures/ct_published_expected.safetensors";
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    qw_mapped_file f = {0};
    qw_tensor_table want = {0};
    if (qw_checkpoint_open(dir, &ck, &err) || qw_map_file(exp, &f, &err) ||
        qw_safetensors_parse(exp, f.data, f.size, 0, &want, &err))
        fail_msg("%s", err.msg);
    size_t n_lin = 0, n_el = 0, n_diff = 0;
    for (size_t i = 0; i < want.n; i++) {
        const qw_tensor_entry *e = &want.v[i];
        size_t len = strlen(e->name);
        if (len < 7 || strcmp(e->name + len - 7, ".weight") != 0) continue;
        const float *got;
        int64_t shape[2];
        int ndim;
        if (qw_checkpoint_tensor(ck, e->name, &got, shape, &ndim, &err)) fail_msg("%s", err.msg);
        assert_int_equal(shape[0] * shape[1], e->numel);
        if (memcmp(got, e->src, e->nbytes) != 0)
            fail_msg("%s: differs from the package's codes x scales", e->name);
        char dn[200];
        snprintf(dn, sizeof dn, "%s_decompressed", e->name);
        const qw_tensor_entry *d = qw_table_find(&want, dn);
        assert_non_null(d);
        assert_int_equal(d->dtype, QW_DT_BF16);
        int mx = strstr(e->name, "mlp.") != NULL;
        for (int64_t j = 0; j < e->numel; j++) {
            uint16_t ref;
            memcpy(&ref, d->src + 2 * j, 2);
            int diff = abs((int)(int16_t)bf16_rne(got[j]) - (int)(int16_t)ref);
            if (diff > (mx ? 0 : 1))
                fail_msg("%s[%lld]: %d BF16 ulp from decompress()", e->name, (long long)j, diff);
            n_diff += diff != 0;
        }
        n_el += (size_t)e->numel;
        n_lin++;
    }
    printf("reference fixture: %zu linears, %zu weights equal the package's codes x scales; "
           "%zu differ from its decompress() by 1 BF16 ulp\n",
           n_lin, n_el, n_diff);
    assert_int_equal(n_lin, 7);
    qw_table_free(&want);
    qw_unmap_file(&f);
    qw_checkpoint_close(ck);
}

/* ModelOpt's layout of the same NVFP4 linears (fp4_checkpoint.c): qsweep's compressed-tensors
 * export rewritten as weight / weight_scale / weight_scale_2 = 1/global_scale with an
 * hf_quant_config.json reads back to the same FP32 weights. */
static void a_modelopt_checkpoint_reads_as_its_compressed_tensors_twin(void **state) {
    (void)state;
    char ct[512], mo[512], path[600];
    snprintf(ct, sizeof ct, "%s/ct-twin", workdir);
    snprintf(mo, sizeof mo, "%s/modelopt-twin", workdir);
    qs_error err = {0};
    qw_policy p = all_linears(n_layers(), "nvfp4", NULL);
    qw_export_request r = {.model_path = model_path, .policy = &p, .out_dir = ct};
    if (qw_export_write(&r, &err)) fail_msg("%s", err.msg);
    qw_policy_free(&p);
    snprintf(path, sizeof path, "%s/model.safetensors", ct);
    qw_mapped_file f = {0};
    qw_tensor_table tt = {0};
    if (qw_map_file(path, &f, &err) || qw_safetensors_parse(path, f.data, f.size, 0, &tt, &err))
        fail_msg("%s", err.msg);
    qw_st_writer w = {0};
    for (size_t i = 0; i < tt.n && !err.code; i++) {
        const qw_tensor_entry *e = &tt.v[i];
        char name[300];
        snprintf(name, sizeof name, "%s", e->name);
        char *suffix = strstr(name, ".weight_");
        int64_t shape[2] = {e->shape[0], e->ndim == 2 ? e->shape[1] : 0};
        static const char *const ST[] = {
            [QW_DT_F32] = "F32", [QW_DT_F16] = "F16", [QW_DT_BF16] = "BF16"};
        const char *dt = e->raw == QW_RAW_U8 ? "U8" : e->raw ? "F8_E4M3" : ST[e->dtype];
        if (suffix && !strcmp(suffix, ".weight_packed")) {
            strcpy(suffix, ".weight");
            qw_st_writer_add(&w, name, dt, 2, shape, e->src, e->nbytes, &err);
        } else if (suffix && !strcmp(suffix, ".weight_global_scale")) {
            strcpy(suffix, ".weight_scale_2");
            float gs, d;
            memcpy(&gs, e->src, 4);
            d = 1.0f / gs;
            qw_st_writer_add(&w, name, "F32", 1, shape, &d, 4, &err);
        } else {
            qw_st_writer_add(&w, name, dt, e->ndim, shape, e->src, e->nbytes, &err);
        }
    }
    assert_int_equal(mkdir(mo, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", mo);
    if (err.code || qw_st_writer_write(&w, path, &err)) fail_msg("%s", err.msg);
    qw_st_writer_free(&w);
    qw_table_free(&tt);
    qw_unmap_file(&f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cp '%s/config.json' '%s/' && printf '%%s' '{\"producer\": {\"name\": \"modelopt\"}, "
             "\"quantization\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16, "
             "\"exclude_modules\": [\"lm_head\"]}}' > '%s/hf_quant_config.json'",
             model_path, mo, mo);
    assert_int_equal(system(cmd), 0);
    qw_checkpoint *a = NULL, *b = NULL;
    if (qw_checkpoint_open(ct, &a, &err) || qw_checkpoint_open(mo, &b, &err))
        fail_msg("%s", err.msg);
    size_t n = 0;
    for (size_t i = 0; i < qw_checkpoint_tensor_count(a); i++) {
        const char *name = qw_checkpoint_tensor_name(a, i);
        size_t len = strlen(name);
        if (len < 12 || strcmp(name + len - 12, "_proj.weight") != 0) continue;
        const float *x, *y;
        int64_t s1[2], s2[2];
        int d1, d2;
        if (qw_checkpoint_tensor(a, name, &x, s1, &d1, &err) ||
            qw_checkpoint_tensor(b, name, &y, s2, &d2, &err))
            fail_msg("%s", err.msg);
        assert_true(s1[0] == s2[0] && s1[1] == s2[1]);
        if (memcmp(x, y, (size_t)(s1[0] * s1[1]) * sizeof *x) != 0)
            fail_msg("%s: the ModelOpt layout reads to other values", name);
        n++;
    }
    assert_int_equal(n, 21);
    qw_checkpoint_close(a);
    qw_checkpoint_close(b);
}

/* path's bytes (heap, NUL-terminated) and their count. */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)len + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

static void spill(const char *path, const char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* The reference fixture with `from` replaced by `to` in config.json (byte_at >= 0: the byte at
 * that offset of model.safetensors set to `byte`): opening it fails with code and needle. */
static void corrupted(const char *tag, const char *from, const char *to, long byte_at, int byte,
                      qs_status code, const char *needle) {
    const char *src = QW_SOURCE_DIR "/tests/export/fixtures/ct_published";
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", workdir, tag);
    assert_int_equal(mkdir(dir, 0755), 0);
    size_t n;
    snprintf(path, sizeof path, "%s/config.json", src);
    char *cfg = slurp(path, &n), *at = strstr(cfg, from);
    assert_non_null(at);
    size_t fl = strlen(from), tl = strlen(to);
    char *out = malloc(n - fl + tl + 1);
    assert_non_null(out);
    memcpy(out, cfg, (size_t)(at - cfg));
    memcpy(out + (at - cfg), to, tl);
    memcpy(out + (at - cfg) + tl, at + fl, n - (size_t)(at - cfg) - fl);
    snprintf(path, sizeof path, "%s/config.json", dir);
    spill(path, out, n - fl + tl);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    char *st = slurp(path, &n);
    if (byte_at >= 0) st[byte_at] = (char)byte;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    spill(path, st, n);
    free(cfg);
    free(out);
    free(st);
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    assert_int_equal(qw_checkpoint_open(dir, &ck, &err), code);
    if (!strstr(err.msg, needle)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
    assert_null(ck);
}

/* The byte offset in the fixture's model.safetensors of tensor `name`'s first byte. */
static long fixture_offset(const char *name) {
    const char *p = QW_SOURCE_DIR "/tests/export/fixtures/ct_published/model.safetensors";
    qw_mapped_file f = {0};
    qw_tensor_table t = {0};
    qs_error err = {0};
    if (qw_map_file(p, &f, &err) || qw_safetensors_parse(p, f.data, f.size, 0, &t, &err))
        fail_msg("%s", err.msg);
    const qw_tensor_entry *e = qw_table_find(&t, name);
    assert_non_null(e);
    long off = (long)e->offset;
    qw_table_free(&t);
    qw_unmap_file(&f);
    return off;
}

static void malformed_fp4_checkpoints_are_refused_by_name(void **state) {
    (void)state;
    corrupted("fmt", "\"mxfp4-pack-quantized\"", "\"int-quantized\"", -1, 0, QS_EUNSUPPORTED,
              "format \"int-quantized\" is not read");
    corrupted("method", "\"compressed-tensors\"", "\"gptq\"", -1, 0, QS_EUNSUPPORTED,
              "quant_method \"gptq\"");
    corrupted("target", "\"model.layers.0.mlp.up_proj\"", "\"model.layers.7.mlp.up_proj\"", -1, 0,
              QS_EFORMAT, "no config group");
    corrupted("nan", "\"lm_head\"", "\"lm_head\"",
              fixture_offset("model.layers.0.self_attn.k_proj.weight_scale") + 3, 0x7f, QS_EFORMAT,
              "model.layers.0.self_attn.k_proj.weight_scale\": scale byte 0x7f at element 3");
    corrupted("group", "\"group_size\": 32", "\"group_size\": 16", -1, 0, QS_EFORMAT,
              "group_size 32");
}

/* GGUF's MXFP4 type (ggml type 39) decodes to gguf-py's values bit for bit, on 64 random blocks
 * with the extreme exponents (tools/export/make_mxfp4_blocks.py). */
static void gguf_mxfp4_blocks_decode_as_gguf_py(void **state) {
    (void)state;
    size_t nb, nv;
    char *b = slurp(QW_SOURCE_DIR "/tests/export/fixtures/mxfp4_blocks.bin", &nb);
    char *v = slurp(QW_SOURCE_DIR "/tests/export/fixtures/mxfp4_values.bin", &nv);
    assert_int_equal(nb, 64 * 17);
    assert_int_equal(nv, 64 * 32 * sizeof(float));
    assert_int_equal(qw_dtype_block(QW_DT_MXFP4), 32);
    float got[64 * 32];
    qw_dtype_to_f32(QW_DT_MXFP4, (const uint8_t *)b, 64 * 32, got);
    for (int i = 0; i < 64 * 32; i++) {
        float want;
        memcpy(&want, v + 4 * i, 4);
        if (memcmp(&got[i], &want, 4) != 0)
            fail_msg("element %d (block %d, e 0x%02x): %a, gguf-py %a", i, i / 32,
                     (unsigned char)b[17 * (i / 32)], (double)got[i], (double)want);
    }
    qw_dtype dt;
    assert_true(qw_dtype_from_ggml(39, &dt) && dt == QW_DT_MXFP4);
    free(b);
    free(v);
}

/* The GGUF layout: a GGUF source (tests/checkpoint/fixtures/tiny_quant.gguf: Q4_0, Q4_1, Q8_0,
 * F16, BF16 linears) with every linear in MXFP4 reads back (ggml's MXFP4 type, q/k rows in
 * llama.cpp's permuted order) to the engine's dequantized packed weights (bit for bit, but for
 * the sign of zero: ggml's level table decodes the E2M1 code of -0 as +0), and every other
 * tensor to the source's values. */
static void a_gguf_export_reads_back_to_the_engines_weights(void **state) {
    (void)state;
    const char *src = QW_SOURCE_DIR "/tests/checkpoint/fixtures/tiny_quant.gguf";
    char out[512], file[600];
    snprintf(out, sizeof out, "%s/gguf", workdir);
    snprintf(file, sizeof file, "%s/model.gguf", out);
    qs_error err = {0};
    qw_checkpoint *ck = NULL, *ek = NULL;
    qw_model *m = NULL;
    if (qw_checkpoint_open(src, &ck, &err) || qw_model_create(ck, 8, 0, &m, &err))
        fail_msg("%s", err.msg);
    qw_policy p = all_linears(qw_checkpoint_config(ck)->n_layers, "mxfp4", NULL);
    if (qw_model_apply_policy(m, &p, &err)) fail_msg("%s", err.msg);
    qw_export_request r = {
        .model_path = src, .policy = &p, .layout = QW_EXPORT_GGUF, .out_dir = out};
    if (qw_export_write(&r, &err)) fail_msg("%s", err.msg);
    if (qw_checkpoint_open(file, &ek, &err)) fail_msg("%s", err.msg);
    size_t linears = 0, others = 0;
    for (size_t i = 0; i < qw_checkpoint_tensor_count(ck); i++) {
        const char *name = qw_checkpoint_tensor_name(ck, i);
        const float *a, *b;
        int64_t s1[2], s2[2];
        int d1, d2;
        if (qw_checkpoint_tensor(ck, name, &a, s1, &d1, &err) ||
            qw_checkpoint_tensor(ek, name, &b, s2, &d2, &err))
            fail_msg("%s", err.msg);
        assert_true(d1 == d2 && s1[0] == s2[0] && s1[1] == s2[1]);
        size_t n = (size_t)(s1[0] * s1[1]);
        int index = -1;
        for (int l = 0; l < qw_model_n_linears(m) - 1 && index < 0; l++) {
            char lname[128], wname[160];
            qw_model_linear_name(m, l, lname, sizeof lname);
            snprintf(wname, sizeof wname, "%s.weight", lname);
            if (!strcmp(wname, name)) index = l;
        }
        if (index < 0) {
            assert_memory_equal(a, b, n * sizeof *a);
            others++;
            continue;
        }
        int64_t axis, start;
        const qk_packed *pk = qw_model_packed(m, -1, index, &axis, &start);
        assert_non_null(pk);
        float *want = malloc(n * sizeof *want);
        assert_non_null(want);
        if (qk_dequantize(pk, want, 0, &err)) fail_msg("%s", err.msg);
        for (size_t j = 0; j < n; j++) /* ggml's levels have no -0: the code of -0 reads 0 */
            if (!(b[j] == want[j]) || (b[j] != 0 && memcmp(&b[j], &want[j], sizeof *b) != 0))
                fail_msg("%s[%zu]: MXFP4 GGUF %a, engine %a", name, j, (double)b[j],
                         (double)want[j]);
        free(want);
        linears++;
    }
    assert_int_equal(linears, 14);
    assert_true(others >= 3);
    qw_checkpoint_close(ek);
    qw_policy_free(&p);
    /* what GGUF cannot hold here */
    char o2[512];
    snprintf(o2, sizeof o2, "%s/gguf-refused", workdir);
    qw_policy q = all_linears(qw_checkpoint_config(ck)->n_layers, "nvfp4", NULL);
    qw_export_request r2 = {
        .model_path = src, .policy = &q, .layout = QW_EXPORT_GGUF, .out_dir = o2};
    assert_int_equal(qw_export_write(&r2, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "format nvfp4 has no GGUF tensor type"));
    assert_int_equal(access(o2, F_OK), -1);
    qw_policy_free(&q);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
}

/* test_export write FORMAT DIR DUMP (see the top). */
static int write_and_dump(const char *format, const char *dir, const char *dump) {
    qs_error err = {0};
    int gptq = strncmp(format, "gptq-", 5) == 0;
    if (gptq) format += 5;
    int gguf = strcmp(format, "mxfp4-gguf") == 0, mo = strcmp(format, "modelopt") == 0;
    if (gguf) model_path = QW_SOURCE_DIR "/tests/checkpoint/fixtures/tiny_quant.gguf";
    qw_policy p = all_linears(n_layers(), gguf ? "mxfp4" : mo ? "nvfp4" : format,
                              mo ? "nvfp4" : NULL);
    if (mo) p.fuse = QW_FUSE_QKV | QW_FUSE_GATE_UP; /* W4A4, fused groups sharing their amax */
    if (mo && gptq) { /* GPTQ's own tensor scales: o and down only, no fused group */
        qw_policy_free(&p);
        if (qw_policy_init(&p, n_layers(), &err)) {
            fprintf(stderr, "export_test write: %s\n", err.msg);
            return 1;
        }
        for (int l = 0; l < p.n_layers; l++) {
            *qw_policy_linear(&p, l, QW_LINEAR_O) = spec_of("nvfp4", "nvfp4");
            *qw_policy_linear(&p, l, QW_LINEAR_DOWN) = spec_of("nvfp4", "nvfp4");
        }
    }
    if (gguf) { /* block 0 in MXFP4, block 1 kept: Q4_0, Q4_1, Q8_0, F16, BF16 */
        qw_quant_spec mx = spec_of("mxfp4", NULL);
        qw_policy_free(&p);
        if (qw_policy_init(&p, n_layers(), &err) ||
            qw_policy_isolation(&p, QW_ISO_BLOCK, 0, 0, &mx, &err)) {
            fprintf(stderr, "export_test write: %s\n", err.msg);
            return 1;
        }
    }
    /* GPTQ calibrated on the last chunks, their ids folded into the model's vocabulary */
    qw_method_plan g = gptq_plan(0);
    uint32_t *ids = malloc((size_t)calib_n * (size_t)ctx * sizeof *ids);
    int vocab = 0;
    qw_checkpoint *sk = NULL;
    if (!ids || qw_checkpoint_open(model_path, &sk, &err)) {
        fprintf(stderr, "export_test write: %s\n", ids ? err.msg : "out of memory");
        free(ids);
        return 1;
    }
    vocab = qw_checkpoint_config(sk)->vocab_size;
    qw_checkpoint_close(sk);
    for (size_t i = 0; i < (size_t)calib_n * (size_t)ctx; i++)
        ids[i] = g.calib[i] % (uint32_t)vocab;
    g.calib = ids;
    qw_export_request r = {.model_path = model_path,
                           .policy = &p,
                           .method = gptq ? &g : NULL,
                           .out_dir = dir,
                           .layout = gguf ? QW_EXPORT_GGUF
                                     : mo ? QW_EXPORT_MODELOPT
                                          : QW_EXPORT_COMPRESSED_TENSORS,
                           .calib = calibration(),
                           .calib_chunks = calib_n,
                           .calib_ctx = ctx};
    qw_checkpoint *ek = NULL;
    qw_st_writer w = {0};
    char opened[600];
    snprintf(opened, sizeof opened, "%s%s", dir, gguf ? "/model.gguf" : "");
    qs_status st = qw_export_write(&r, &err);
    if (!st) st = qw_checkpoint_open(opened, &ek, &err);
    size_t n = st ? 0 : qw_checkpoint_tensor_count(ek);
    for (size_t i = 0; i < n && !st; i++) {
        const char *name = qw_checkpoint_tensor_name(ek, i);
        const float *x;
        int64_t shape[2];
        int ndim;
        size_t len = strlen(name);
        /* GGUF: every tensor (gguf_mxfp4_check.py decodes them all); else the linears */
        if (!gguf && (len < 12 || strcmp(name + len - 12, "_proj.weight") != 0)) continue;
        if (mo && gptq && !strstr(name, ".o_proj.") && !strstr(name, ".down_proj.")) continue;
        st = qw_checkpoint_tensor(ek, name, &x, shape, &ndim, &err);
        if (!st)
            st = qw_st_writer_add(&w, name, "F32", ndim, shape, x,
                                  (size_t)(shape[0] * shape[1]) * sizeof *x, &err);
    }
    if (!st) st = qw_st_writer_write(&w, dump, &err);
    qw_st_writer_free(&w);
    qw_checkpoint_close(ek);
    qw_policy_free(&p);
    free(ids);
    free(calib);
    calib = NULL;
    if (st) fprintf(stderr, "export_test write: %s\n", err.msg);
    return st ? 1 : 0;
}

/* test_export peer SOURCE OUT TOKENS CTX CHUNKS (see the top): qsweep's side of
 * bench/peer/llama_cpp_export_ppl.sh. */
static int peer_ppl(const char *src, const char *out, const char *tokens, int c, int chunks) {
    qs_error err = {0};
    qw_checkpoint *ck = NULL, *ek = NULL;
    qw_model *m = NULL, *em = NULL;
    qw_tokens t = {0};
    char file[4200];
    snprintf(file, sizeof file, "%s/model.gguf", out);
    qw_eval_options o = {.ctx = c, .max_chunks = (size_t)chunks, .bos_id = -1};
    qw_eval_metrics source = {0}, job = {0}, back = {0};
    qw_policy p = {0};
    qs_status st = qw_checkpoint_open(src, &ck, &err);
    if (!st) st = qw_model_create(ck, c, 0, &m, &err);
    if (!st) st = qw_tokens_load(tokens, &t, &err);
    if (!st) st = qw_policy_init(&p, qw_checkpoint_config(ck)->n_layers, &err);
    qw_quant_spec s = spec_of("mxfp4", NULL);
    if (!st) st = qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err);
    if (!st) st = qw_eval_baseline(m, &t, &o, NULL, &source, &err);
    if (!st) st = qw_model_apply_policy(m, &p, &err);
    if (!st) st = qw_eval_baseline(m, &t, &o, NULL, &job, &err);
    qw_export_request r = {
        .model_path = src, .policy = &p, .layout = QW_EXPORT_GGUF, .out_dir = out};
    if (!st) st = qw_export_write(&r, &err);
    if (!st) st = qw_checkpoint_open(file, &ek, &err);
    if (!st) st = qw_model_create(ek, c, 0, &em, &err);
    if (!st) st = qw_eval_baseline(em, &t, &o, NULL, &back, &err);
    if (!st) {
        printf("qsweep source ppl %.6f +/- %.5f\n", source.ppl, source.ppl_stderr);
        printf("qsweep mxfp4-w4a16 ppl %.6f +/- %.5f\n", job.ppl, job.ppl_stderr);
        printf("qsweep export ppl %.6f\n", back.ppl);
        printf("qsweep scored %zu\n", job.n_scored);
        if (job.ppl != back.ppl) {
            fprintf(stderr, "export_test peer: the export reads back to ppl %.17g, the job's is "
                    "%.17g\n", back.ppl, job.ppl);
            st = QS_EINVAL;
        }
    } else {
        fprintf(stderr, "export_test peer: %s\n", err.msg);
    }
    qw_eval_metrics_free(&source);
    qw_eval_metrics_free(&job);
    qw_eval_metrics_free(&back);
    qw_policy_free(&p);
    qw_model_destroy(em);
    qw_checkpoint_close(ek);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    qw_tokens_free(&t);
    return st ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "write") == 0)
        return write_and_dump(argv[2], argv[3], argv[4]);
    if (argc == 7 && strcmp(argv[1], "peer") == 0)
        return peer_ppl(argv[2], argv[3], argv[4], atoi(argv[5]), atoi(argv[6]));
    if (argc > 1 && strcmp(argv[1], "smollm2") == 0) {
        static char path[512];
        snprintf(path, sizeof path, "%s/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "");
        if (access(path, R_OK) != 0) {
            printf("skipped: %s is not there (tools/fetch_smollm2.sh fetches it)\n", path);
            return 0;
        }
        model_path = path;
        tokens_path = QW_SOURCE_DIR "/tests/engine/data/gpl3.smollm2.tokens";
        ctx = 256;
        max_chunks = 2;
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(nvfp4_w4a16_reads_back_to_the_jobs_metrics),
            cmocka_unit_test(mixed_plan_reads_back_to_the_jobs_metrics),
            cmocka_unit_test(mxfp4_gguf_reads_back_to_the_jobs_metrics),
            cmocka_unit_test(modelopt_w4a4_reads_back_to_the_jobs_metrics),
            cmocka_unit_test(gptq_mxfp4_gguf_reads_back_to_the_jobs_weights_and_metrics),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nvfp4_w4a16_reads_back_to_the_jobs_metrics),
        cmocka_unit_test(mxfp4_w4a16_reads_back_to_the_jobs_metrics),
        cmocka_unit_test(mxfp4_w4a4_reads_back_to_the_jobs_metrics),
        cmocka_unit_test(mixed_plan_reads_back_to_the_jobs_metrics),
        cmocka_unit_test(unsupported_combinations_are_refused_naming_the_linear),
        cmocka_unit_test(an_existing_folder_is_never_written_over),
        cmocka_unit_test(a_failed_write_leaves_nothing),
        cmocka_unit_test(a_checkpoint_the_reference_wrote_loads_to_its_values),
        cmocka_unit_test(a_modelopt_checkpoint_reads_as_its_compressed_tensors_twin),
        cmocka_unit_test(modelopt_w4a4_reads_back_to_the_jobs_metrics),
        cmocka_unit_test(modelopt_refusals),
        cmocka_unit_test(malformed_fp4_checkpoints_are_refused_by_name),
        cmocka_unit_test(gguf_mxfp4_blocks_decode_as_gguf_py),
        cmocka_unit_test(a_gguf_export_reads_back_to_the_engines_weights),
        cmocka_unit_test(gptq_packed_form_decodes_to_its_values),
        cmocka_unit_test(gptq_nvfp4_reads_back_to_the_jobs_weights_and_metrics),
        cmocka_unit_test(gptq_mxfp4_act_order_reads_back_to_the_jobs_weights_and_metrics),
        cmocka_unit_test(gptq_per_linear_plan_reads_back_to_the_jobs_weights_and_metrics),
        cmocka_unit_test(gptq_modelopt_reads_back_to_the_jobs_weights_and_metrics),
        cmocka_unit_test(gptq_gguf_reads_back_to_the_jobs_weights),
        cmocka_unit_test(methods_with_an_online_transform_are_refused_by_name),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
