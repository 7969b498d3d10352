/* A weight's version (kernels/quant.h qk_packed.version; weights.h qw_weight.version for a
 * method's FP32 weight) moves whenever its contents do:
 * the CUDA backend's device copies are current while the version is the one they were uploaded
 * from (ops_cuda_impl.h), so a writer that changes codes or scales and leaves the version would
 * leave a stale copy on the device. Here a CPU backend whose table also hashes every packed
 * weight it is given, in full (codes, scales, tensor scale), fails the test when a weight it
 * saw before comes back with the same version and other bytes; the model's writers (policies,
 * tensor-parallel ranks, methods) run under it, and a write behind the version's back is caught
 * by it. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format.h"
#include "method_apply.h"
#include "model.h"
#include "model_internal.h"
#include "ops.h"
#include "policy.h"
#include "weights.h"

/* ---- the watching backend: the CPU table with linear, lm_head and embedding checking first */

typedef struct seen_packed {
    const void *key;
    uint64_t version, hash;
} seen_packed;

static struct {
    pthread_mutex_t mu; /* tensor-parallel ranks run concurrently */
    seen_packed seen[512];
    int n_seen;
    long checked, stale; /* packed weights hashed; same version, other bytes */
    char first[256];     /* the first stale weight */
} watch = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* FNV-1a over everything a device copy is made from. */
static uint64_t packed_hash(const qk_packed *p) {
    uint64_t h = 14695981039346656037ull;
    h = fnv(h, &p->fmt, sizeof p->fmt);
    h = fnv(h, &p->rows, sizeof p->rows);
    h = fnv(h, &p->k, sizeof p->k);
    h = fnv(h, &p->tensor_scale, sizeof p->tensor_scale);
    h = fnv(h, &p->tensor_scale_exp2, sizeof p->tensor_scale_exp2);
    h = fnv(h, p->codes, p->rows * p->row_bytes);
    if (p->scales) h = fnv(h, p->scales, p->rows * p->blocks_per_row);
    if (p->scales_f32) h = fnv(h, p->scales_f32, p->rows * p->blocks_per_row * sizeof(float));
    return h;
}

static void watch_reset(void) {
    pthread_mutex_lock(&watch.mu);
    watch.n_seen = 0;
    watch.checked = watch.stale = 0;
    watch.first[0] = '\0';
    pthread_mutex_unlock(&watch.mu);
}

/* Packed weights by their qk_packed, FP32 weights by their values' address (as the CUDA
 * cache keys them, ops_cuda_weights.cu) with qw_weight.version. */
static void watch_weight(const qw_weight *w) {
    const void *key;
    uint64_t version, h;
    char what[96];
    if (w->form == QW_WEIGHT_PACKED) {
        const qk_packed *p = w->packed;
        key = p;
        version = p->version;
        h = packed_hash(p);
        snprintf(what, sizeof what, "%s [%zu x %zu]", qk_format_name(p->fmt), p->rows, p->k);
    } else if (w->form == QW_WEIGHT_F32) {
        key = w->f32;
        version = w->version;
        h = fnv(14695981039346656037ull, w->f32, (size_t)(w->rows * w->cols) * sizeof(float));
        snprintf(what, sizeof what, "f32 [%lld x %lld]", (long long)w->rows, (long long)w->cols);
    } else {
        return;
    }
    pthread_mutex_lock(&watch.mu);
    seen_packed *e = NULL;
    for (int i = 0; i < watch.n_seen && !e; i++)
        if (watch.seen[i].key == key) e = &watch.seen[i];
    if (e && e->version == version && e->hash != h && watch.stale++ == 0)
        snprintf(watch.first, sizeof watch.first, "%s at %p: version %llu kept", what, key,
                 (unsigned long long)version);
    if (!e && watch.n_seen < (int)(sizeof watch.seen / sizeof watch.seen[0]))
        e = &watch.seen[watch.n_seen++];
    if (e) *e = (seen_packed){.key = key, .version = version, .hash = h};
    watch.checked++;
    pthread_mutex_unlock(&watch.mu);
}

static qw_ops watch_ops;

static void watch_embedding(qw_backend *b, qw_tensor *x, const uint32_t *tokens,
                            const qw_weight *table) {
    watch_weight(table);
    qw_ops_cpu()->embedding(b, x, tokens, table);
}

static qs_status watch_linear(qw_backend *b, qw_tensor *y, const qw_tensor *x, const qw_weight *w,
                              const qw_act_quant *act, float *xq, qs_error *err) {
    watch_weight(w);
    return qw_ops_cpu()->linear(b, y, x, w, act, xq, err);
}

static qs_status watch_lm_head(qw_backend *b, qw_tensor *logits, const qw_tensor *x,
                               const qw_weight *w, const qw_act_quant *act, float *xq,
                               qs_error *err) {
    watch_weight(w);
    return qw_ops_cpu()->lm_head(b, logits, x, w, act, xq, err);
}

static const qw_ops *watching_ops(void) {
    watch_ops = *qw_ops_cpu();
    watch_ops.name = "cpu-watch";
    watch_ops.embedding = watch_embedding;
    watch_ops.linear = watch_linear;
    watch_ops.lm_head = watch_lm_head;
    return &watch_ops;
}

/* Tensor-parallel ranks (model.h qw_model_set_tp_backends) on the watching table. */
static qs_status watch_rank(qw_backend *b, int rank, int threads, int max_in, void *ctx,
                            int *device, qs_error *err) {
    (void)rank;
    (void)ctx;
    *device = -1;
    qs_status st = qw_backend_cpu_init(b, threads, max_in, err);
    if (st == QS_OK) b->ops = watching_ops();
    return st;
}

/* ---- the model and its writers */

enum { CTX = 32 };
static uint32_t tokens[4 * CTX]; /* chunk 0 scored, 1..3 the methods' calibration */

static qw_model *watched_model(void) {
    qw_model *m;
    qs_error err = {0};
    if (qw_model_create_synthetic("synthetic:tiny-llama3:7", CTX, 2, &m, &err))
        fail_msg("%s", err.msg);
    uint32_t s = 2463534242u, V = (uint32_t)qw_model_config(m)->vocab_size;
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        tokens[i] = s % V;
    }
    m->rank.be.ops = watching_ops();
    watch_reset();
    return m;
}

static void destroy(qw_model *m) {
    m->rank.be.ops = qw_ops_cpu();
    qw_model_destroy(m);
}

static void forward(qw_model *m, const char *what) {
    const float *l;
    qs_error err = {0};
    if (qw_model_forward(m, tokens, CTX, &l, &err)) fail_msg("%s: %s", what, err.msg);
}

/* Every block linear, lm_head and the embeddings in fmt with opt. */
static void apply(qw_model *m, const char *fmt, qk_quant_options opt) {
    qw_policy p;
    qs_error err = {0};
    qw_quant_spec s = {.weight = qk_format_by_name(fmt), .weight_opt = opt};
    assert_non_null(s.weight);
    assert_int_equal(qw_policy_init(&p, qw_model_config(m)->n_layers, &err), QS_OK);
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err), QS_OK);
    p.lm_head = s;
    p.embed = s;
    if (qw_model_apply_policy(m, &p, &err)) fail_msg("%s: %s", fmt, err.msg);
    qw_policy_free(&p);
}

static void assert_nothing_stale(const char *what) {
    if (watch.stale)
        fail_msg("%s: %ld stale weights, first %s", what, watch.stale, watch.first);
}

/* One after another on the same slots (each re-quantized at the same address): the same format
 * with other rounding seeds, other formats, then the first policy again. */
typedef struct policy_case {
    const char *fmt;
    qk_quant_options opt;
} policy_case;

static const policy_case policies[] = {
    {"nvfp4", {0}},
    {"nvfp4", {.rounding = QK_ROUND_SR, .seed = 1}},
    {"nvfp4", {.rounding = QK_ROUND_SR, .seed = 2}},
    {"mxfp4", {0}},
    {"nvfp4_2d", {0}},
    {"int4_group", {.group_size = 32}},
    {"nvfp4", {0}},
};
enum { N_POLICIES = sizeof policies / sizeof policies[0] };

/* The same for ranks, which refuse stochastic rounding (its stream is keyed by the whole
 * tensor's indices): MX's two scale rules instead. */
static const policy_case rank_policies[] = {
    {"nvfp4", {0}},
    {"mxfp4", {0}},
    {"mxfp4", {.mx_rule = QK_MX_FLOOR}},
    {"nvfp4_2d", {0}},
    {"int4_group", {.group_size = 32}},
    {"nvfp4", {0}},
};
enum { N_RANK_POLICIES = sizeof rank_policies / sizeof rank_policies[0] };

/* ---- the rules */

/* qk_packed_init, qk_quantize and qk_quantize_rows each give a version never given before, a
 * release empties it to 0, qk_packed_changed moves it. */
static void every_packed_write_gives_a_new_version(void **state) {
    (void)state;
    enum { ROWS = 32, K = 64 };
    float x[ROWS * K];
    for (int i = 0; i < ROWS * K; i++)
        x[i] = (float)((i * 37) % 23 - 11) / 8.0f;
    const qk_format *f = qk_format_by_name("nvfp4");
    qk_quant_options opt = {.tensor_amax_given = 1, .tensor_amax = 11.0f / 8.0f};
    qs_error err = {0};
    qk_packed p;
    uint64_t v[6];
    assert_int_equal(qk_packed_init(&p, f, &opt, ROWS, K, &err), QS_OK);
    v[0] = p.version;
    assert_int_equal(qk_quantize(f, &opt, x, ROWS, K, &p, &err), QS_OK);
    v[1] = p.version;
    assert_int_equal(qk_quantize_rows(f, &opt, x, 0, 16, &p, &err), QS_OK);
    v[2] = p.version;
    qk_packed_changed(&p);
    v[3] = p.version;
    qk_packed_release(&p);
    assert_int_equal(p.version, 0);
    assert_int_equal(qk_packed_init(&p, f, &opt, ROWS, K, &err), QS_OK); /* same address */
    v[4] = p.version;
    assert_int_equal(qk_quantize(f, &opt, x, ROWS, K, &p, &err), QS_OK);
    v[5] = p.version;
    for (int i = 0; i < 6; i++) {
        assert_true(v[i] != 0);
        for (int j = 0; j < i; j++)
            if (v[i] == v[j])
                fail_msg("write %d gave write %d's version %llu", i, j, (unsigned long long)v[i]);
    }
    /* a refused write leaves the version */
    assert_int_equal(qk_quantize_rows(f, &opt, x, ROWS, 4, &p, &err), QS_EINVAL);
    assert_int_equal(p.version, v[5]);
    qk_packed_release(&p);
}

/* The watch works: a code byte written behind the version's back, in the middle of a tensor,
 * is caught at the next forward; one followed by qk_packed_changed is not. */
static void a_write_that_keeps_the_version_is_caught(void **state) {
    (void)state;
    qw_model *m = watched_model();
    apply(m, "nvfp4", (qk_quant_options){0});
    forward(m, "nvfp4");
    assert_nothing_stale("nvfp4");
    qk_packed *p = &qw_model_linear(m, QW_LINEAR_UP)->packed; /* block 0's up */
    size_t mid = p->rows / 2 * p->row_bytes + p->row_bytes / 2 + 1;
    p->codes[mid] ^= 0x11;
    forward(m, "a code written");
    assert_int_equal(watch.stale, 1);
    p->codes[mid] ^= 0x11;
    qk_packed_changed(p);
    watch_reset();
    forward(m, "a code written back, its version moved");
    assert_nothing_stale("qk_packed_changed");
    destroy(m);
}

/* Policies (apply_policy.c) re-quantize the same slots: each of the model's packed weights is
 * hashed at every forward and none keeps its version with new bytes; every slot's version
 * moves with each policy. */
static void policies_move_the_version(void **state) {
    (void)state;
    qw_model *m = watched_model();
    const int n = qw_model_config(m)->n_layers * QW_LINEAR_KINDS + 2;
    uint64_t *last = calloc((size_t)n, sizeof *last);
    assert_non_null(last);
    for (int pi = 0; pi < N_POLICIES; pi++) {
        apply(m, policies[pi].fmt, policies[pi].opt);
        forward(m, policies[pi].fmt);
        for (int i = 0; i < n; i++) {
            uint64_t v = qw_model_linear(m, i)->packed.version;
            if (v == 0 || v == last[i])
                fail_msg("policy %d (%s): linear %d kept version %llu", pi, policies[pi].fmt, i,
                         (unsigned long long)v);
            last[i] = v;
        }
    }
    assert_nothing_stale("policies");
    assert_true(watch.checked >= (long)N_POLICIES * n);
    free(last);
    destroy(m);
}

/* Tensor-parallel ranks (shard.c) quantize their slices themselves: the policies on 2 ranks,
 * unsharded, then on 2 ranks made again, all on the watching table. */
static void tensor_parallel_ranks_move_the_version(void **state) {
    (void)state;
    qw_model *m = watched_model();
    qs_error err = {0};
    assert_int_equal(qw_model_set_tp_backends(m, watch_rank, NULL, NULL, &err), QS_OK);
    const int ranks[] = {2, 1, 2};
    for (int t = 0; t < 3; t++) {
        if (qw_model_set_tensor_parallel(m, ranks[t], &err)) fail_msg("%s", err.msg);
        for (int pi = 0; pi < N_RANK_POLICIES; pi++) {
            apply(m, rank_policies[pi].fmt, rank_policies[pi].opt);
            forward(m, rank_policies[pi].fmt);
        }
    }
    assert_nothing_stale("tensor-parallel ranks");
    assert_true(watch.checked > 0);
    assert_int_equal(qw_model_set_tensor_parallel(m, 1, &err), QS_OK);
    destroy(m);
}

/* Methods (worker/method) after a policy, and the policy after them: GPTQ keeping its packed
 * forms, MR-GPTQ, a rotation, SmoothQuant, one after another on the same model. */
static void methods_move_the_version(void **state) {
    (void)state;
    qw_model *m = watched_model();
    qw_method_plan plans[] = {
        {.name = "gptq", .gptq = 1, .packed = 1},
        {.name = "mr-gptq", .rotate = -1, .gptq = 1},
        {.name = "rotate16", .rotate = 16},
        {.name = "smoothquant", .smooth = 1, .alpha = 0.5},
    };
    const char *fmts[] = {"nvfp4", "mxfp4"};
    for (size_t fi = 0; fi < 2; fi++)
        for (size_t pi = 0; pi < sizeof plans / sizeof plans[0]; pi++) {
            qw_method_plan *p = &plans[pi];
            p->calib = tokens + CTX;
            p->calib_chunks = 3;
            p->ctx = CTX;
            apply(m, fmts[fi], (qk_quant_options){0});
            forward(m, "policy");
            qw_method_state *s = NULL;
            qw_method_info info;
            qs_error err = {0};
            if (qw_method_apply(m, p, &s, &info, &err)) fail_msg("%s: %s", p->name, err.msg);
            assert_true(info.linears > 0);
            forward(m, p->name);
            assert_int_equal(qw_model_apply_policy(m, NULL, &err), QS_OK);
            qw_method_state_free(s);
        }
    assert_nothing_stale("methods");
    assert_true(watch.checked > 0);
    destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_packed_write_gives_a_new_version),
        cmocka_unit_test(a_write_that_keeps_the_version_is_caught),
        cmocka_unit_test(policies_move_the_version),
        cmocka_unit_test(tensor_parallel_ranks_move_the_version),
        cmocka_unit_test(methods_move_the_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
