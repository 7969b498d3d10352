/* The device memory estimate (common/device_memory.h) on the real Llama shapes
 * (tests/gpu/data/llama_shapes.txt, from their public config.json): its element counts are the
 * published parameter counts, its run part covers the engine's run state, and it says what
 * fits one 80 GB device and what needs tensor parallelism. Pure: runs everywhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "device_memory.h"
#include "master_gemm.h"
#include "ops.h"
#include "runstate.h"

#define GB80 80000000000ll /* an "80 GB" device, decimal: below an H100's 80 GiB */

typedef struct shape {
    char name[64];
    qw_config cfg;
    qw_dtype dtype;
    uint64_t params;
} shape;

static shape shapes[8];
static int n_shapes;

static int load(void **state) {
    (void)state;
    FILE *f = fopen(QW_GPU_DATA "/llama_shapes.txt", "r");
    if (!f) return -1;
    char line[256];
    while (fgets(line, sizeof line, f) && n_shapes < 8) {
        if (line[0] == '#' || line[0] == '\n') continue;
        shape *s = &shapes[n_shapes];
        char dt[32];
        unsigned long long params;
        memset(s, 0, sizeof *s);
        if (sscanf(line, "%63s %d %d %d %d %d %d %31s %d %llu", s->name, &s->cfg.dim,
                   &s->cfg.hidden_dim, &s->cfg.n_layers, &s->cfg.n_heads, &s->cfg.n_kv_heads,
                   &s->cfg.vocab_size, dt, &s->cfg.tied_embeddings, &params) != 10) {
            fclose(f);
            return -1;
        }
        s->cfg.head_dim = s->cfg.dim / s->cfg.n_heads;
        s->cfg.max_seq_len = 4096;
        s->cfg.norm_eps = 1e-5f;
        s->cfg.rope_theta = 10000.0f;
        s->dtype = strcmp(dt, "float16") == 0 ? QW_DT_F16 : QW_DT_BF16;
        s->params = params;
        n_shapes++;
    }
    fclose(f);
    return n_shapes == 5 ? 0 : -1;
}

static const shape *find(const char *name) {
    for (int i = 0; i < n_shapes; i++)
        if (strcmp(shapes[i].name, name) == 0) return &shapes[i];
    fail_msg("no shape %s", name);
    return NULL;
}

/* The estimate's view of a config (as the grid's probe makes it). */
static qs_model_shape shape_of(const qw_config *c) {
    return (qs_model_shape){c->dim,     c->hidden_dim, c->n_layers,        c->n_heads,
                            c->n_kv_heads, c->head_dim, c->vocab_size, c->tied_embeddings != 0};
}

/* Block-linear elements of the whole model. */
static int64_t block_elements(const qw_config *c) {
    int64_t D = c->dim, E = c->head_dim;
    return (int64_t)c->n_layers * (2 * D * c->n_heads * E + 2 * D * c->n_kv_heads * E +
                                   3 * D * (int64_t)c->hidden_dim);
}

enum { NONE, NVFP4, MXFP4 };

/* Every block linear packed in fp4 (NVFP4 4.5 bits a weight, MXFP4 4.25: rows of whole blocks). */
static qs_mem_estimate est_as(const shape *s, qw_dtype dtype, int fp4, int ctx, int tp) {
    int64_t n = block_elements(&s->cfg);
    qs_mem_plan p = {.master_bytes = qw_master_gemm_bytes(dtype),
                     .packed_block_bytes = fp4 == NVFP4 ? n * 9 / 16 : fp4 == MXFP4 ? n * 17 / 32 : 0,
                     .ctx = ctx,
                     .batch = 1,
                     .tp = tp};
    qs_model_shape m = shape_of(&s->cfg);
    qs_mem_estimate e;
    qs_error err = {0};
    if (qs_mem_estimate_of(&m, &p, &e, &err)) fail_msg("%s: %s", s->name, err.msg);
    return e;
}

static qs_mem_estimate est(const shape *s, int fp4, int ctx, int tp) {
    return est_as(s, s->dtype, fp4, ctx, tp);
}

/* At one rank every weight is counted once: the published parameter counts come back. */
static void weights_count_the_published_parameters(void **state) {
    (void)state;
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &shapes[i];
        qs_mem_estimate e = est(s, NONE, 4096, 1);
        int64_t b = qw_master_gemm_bytes(s->dtype), D = s->cfg.dim;
        assert_int_equal(b, 2);
        int64_t elems =
            e.linears / b + e.embed / 4 + e.lm_head / b + (2 * (int64_t)s->cfg.n_layers + 1) * D;
        assert_int_equal(elems, s->params);
    }
}

/* The run part holds at least what the engine's run state allocates (runstate.h). */
static void run_part_covers_the_run_state(void **state) {
    (void)state;
    const shape *s = find("Llama-2-7b-hf");
    qs_mem_estimate e = est(s, NONE, 512, 1);
    assert_int_equal(QS_MEM_ATT_TILE, QW_ATT_TILE);
    int64_t rope = 512ll * s->cfg.head_dim * 4;
    assert_true(e.run + rope >= (int64_t)qw_runstate_bytes(&s->cfg, 512, 1));
}

/* Attention of head_dim <= 128 runs blocked (FlashAttention-2 style) and holds no T x T: the run
 * part grows linearly in ctx, so doubling ctx at most doubles it. A head wider than the blocked
 * kernel takes gets the cuBLAS fallback's H T T scores counted. */
static void run_part_holds_no_t_by_t_scores(void **state) {
    (void)state;
    const shape *s = find("Meta-Llama-3-8B");
    qs_mem_estimate e4 = est(s, NONE, 4096, 1), e8 = est(s, NONE, 8192, 1);
    assert_int_equal(e8.run, 2 * e4.run);
    shape wide = *s;
    wide.cfg.head_dim = 2 * QS_MEM_FLASH_MAX_HEAD_DIM;
    qs_mem_estimate w = est(&wide, NONE, 4096, 1);
    int64_t tt = 4096ll * 4096 * 4 * wide.cfg.n_heads;
    assert_true(w.run >= tt);
    assert_true(w.run - tt < e8.run);
}

static void what_fits_one_80gb_device(void **state) {
    (void)state;
    /* 7B, 8B and 13B on one device, quantized (masters and FP4 forms both resident) or not */
    const char *one[] = {"Llama-2-7b-hf", "Meta-Llama-3-8B", "Llama-2-13b-hf"};
    for (int i = 0; i < 3; i++) {
        qs_mem_estimate u = est(find(one[i]), NONE, 4096, 1);
        assert_true(qs_mem_fits(&u, GB80));
        qs_mem_estimate q = est(find(one[i]), NVFP4, 4096, 1);
        assert_true(qs_mem_fits(&q, GB80));
        assert_true(q.packed > 0);
    }
    /* 70B: not on one device, per rank at tensor parallel 4 and 8 */
    const char *big[] = {"Llama-2-70b-hf", "Meta-Llama-3-70B"};
    for (int i = 0; i < 2; i++) {
        qs_mem_estimate e1 = est(find(big[i]), NVFP4, 4096, 1);
        qs_mem_estimate e4 = est(find(big[i]), NVFP4, 4096, 4);
        qs_mem_estimate e8 = est(find(big[i]), NVFP4, 4096, 8);
        assert_false(qs_mem_fits(&e1, GB80));
        assert_true(qs_mem_fits(&e4, GB80));
        assert_true(qs_mem_fits(&e8, GB80));
        assert_true(e8.total < e4.total && e4.total < e1.total);
        qs_mem_estimate u1 = est(find(big[i]), NONE, 4096, 1);
        assert_false(qs_mem_fits(&u1, GB80));
    }
    /* FP32 masters take 4 bytes an element, twice a 16-bit master's */
    qs_mem_estimate e32 = est_as(find("Llama-2-13b-hf"), QW_DT_F32, NONE, 4096, 1);
    qs_mem_estimate e16 = est(find("Llama-2-13b-hf"), NONE, 4096, 1);
    assert_int_equal(e32.linears, 2 * e16.linears);
    /* MXFP4's one E8M0 per 32 is smaller than NVFP4's one E4M3 per 16 */
    assert_true(est(find("Llama-2-7b-hf"), MXFP4, 4096, 1).packed <
                est(find("Llama-2-7b-hf"), NVFP4, 4096, 1).packed);
}

static void bad_input_names_the_field(void **state) {
    (void)state;
    qs_model_shape m = shape_of(&find("Llama-2-7b-hf")->cfg);
    qs_mem_estimate e;
    qs_error err = {0};
    qs_mem_plan p = {.master_bytes = 2, .ctx = 4096, .batch = 1, .tp = 3};
    assert_int_equal(qs_mem_estimate_of(&m, &p, &e, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "tensor_parallel 3"));
    qs_model_shape c = m;
    c.vocab_size = 0;
    p.tp = 1;
    assert_int_equal(qs_mem_estimate_of(&c, &p, &e, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "vocab_size"));
    p.ctx = 0;
    assert_int_equal(qs_mem_estimate_of(&m, &p, &e, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "ctx"));
    p.ctx = 4096;
    p.packed_block_bytes = -1;
    assert_int_equal(qs_mem_estimate_of(&m, &p, &e, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "packed bytes"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(weights_count_the_published_parameters),
        cmocka_unit_test(run_part_covers_the_run_state),
        cmocka_unit_test(run_part_holds_no_t_by_t_scores),
        cmocka_unit_test(what_fits_one_80gb_device),
        cmocka_unit_test(bad_input_names_the_field),
    };
    return cmocka_run_group_tests(tests, load, NULL);
}
