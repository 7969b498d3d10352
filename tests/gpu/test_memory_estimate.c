/* The device memory estimate (worker/engine/memory_estimate.h) on the real Llama shapes
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

#include "master_gemm.h"
#include "memory_estimate.h"
#include "runstate.h"

#define GB80 80000000000ull /* an "80 GB" device, decimal: below an H100's 80 GiB */

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

static qw_mem_estimate est(const shape *s, qw_mem_fp4 fp4, int ctx, int tp) {
    qw_mem_plan p = {s->dtype, fp4, ctx, 1, tp};
    qw_mem_estimate e;
    qs_error err = {0};
    assert_int_equal(qw_mem_estimate_of(&s->cfg, &p, &e, &err), QS_OK);
    return e;
}

/* At one rank every weight is counted once: the published parameter counts come back. */
static void weights_count_the_published_parameters(void **state) {
    (void)state;
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &shapes[i];
        qw_mem_estimate e = est(s, QW_MEM_FP4_NONE, 4096, 1);
        uint64_t b = (uint64_t)qw_master_gemm_bytes(s->dtype), D = (uint64_t)s->cfg.dim;
        assert_int_equal(b, 2);
        uint64_t elems =
            e.linears / b + e.embed / 4 + e.lm_head / b + (2 * (uint64_t)s->cfg.n_layers + 1) * D;
        assert_int_equal(elems, s->params);
    }
}

/* The run part holds at least what the engine's run state allocates (runstate.h). */
static void run_part_covers_the_run_state(void **state) {
    (void)state;
    const shape *s = find("Llama-2-7b-hf");
    qw_mem_estimate e = est(s, QW_MEM_FP4_NONE, 512, 1);
    uint64_t rope = 512ull * (uint64_t)s->cfg.head_dim * 4;
    assert_true(e.run + rope >= qw_runstate_bytes(&s->cfg, 512, 1));
}

static void what_fits_one_80gb_device(void **state) {
    (void)state;
    /* 7B, 8B and 13B on one device, quantized (masters and FP4 forms both resident) or not */
    const char *one[] = {"Llama-2-7b-hf", "Meta-Llama-3-8B", "Llama-2-13b-hf"};
    for (int i = 0; i < 3; i++) {
        qw_mem_estimate u = est(find(one[i]), QW_MEM_FP4_NONE, 4096, 1);
        assert_true(qw_mem_fits(&u, GB80));
        qw_mem_estimate q = est(find(one[i]), QW_MEM_FP4_NVFP4, 4096, 1);
        assert_true(qw_mem_fits(&q, GB80));
        assert_true(q.fp4 > 0);
    }
    /* 70B: not on one device, per rank at tensor parallel 4 and 8 */
    const char *big[] = {"Llama-2-70b-hf", "Meta-Llama-3-70B"};
    for (int i = 0; i < 2; i++) {
        qw_mem_estimate e1 = est(find(big[i]), QW_MEM_FP4_NVFP4, 4096, 1);
        qw_mem_estimate e4 = est(find(big[i]), QW_MEM_FP4_NVFP4, 4096, 4);
        qw_mem_estimate e8 = est(find(big[i]), QW_MEM_FP4_NVFP4, 4096, 8);
        assert_false(qw_mem_fits(&e1, GB80));
        assert_true(qw_mem_fits(&e4, GB80));
        assert_true(qw_mem_fits(&e8, GB80));
        assert_true(e8.total < e4.total && e4.total < e1.total);
        qw_mem_estimate u1 = est(find(big[i]), QW_MEM_FP4_NONE, 4096, 1);
        assert_false(qw_mem_fits(&u1, GB80));
    }
    /* FP32 masters take 4 bytes an element, twice a 16-bit master's */
    shape f32 = *find("Llama-2-13b-hf");
    f32.dtype = QW_DT_F32;
    qw_mem_estimate e32 = est(&f32, QW_MEM_FP4_NONE, 4096, 1);
    qw_mem_estimate e16 = est(find("Llama-2-13b-hf"), QW_MEM_FP4_NONE, 4096, 1);
    assert_int_equal(e32.linears, 2 * e16.linears);
    /* MXFP4's one E8M0 per 32 is smaller than NVFP4's one E4M3 per 16 */
    assert_true(est(find("Llama-2-7b-hf"), QW_MEM_FP4_MXFP4, 4096, 1).fp4 <
                est(find("Llama-2-7b-hf"), QW_MEM_FP4_NVFP4, 4096, 1).fp4);
}

static void bad_input_names_the_field(void **state) {
    (void)state;
    const shape *s = find("Llama-2-7b-hf");
    qw_mem_estimate e;
    qs_error err = {0};
    qw_mem_plan p = {QW_DT_F16, QW_MEM_FP4_NONE, 4096, 1, 3};
    assert_int_equal(qw_mem_estimate_of(&s->cfg, &p, &e, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "tensor_parallel 3"));
    qw_config c = s->cfg;
    c.vocab_size = 0;
    p.tp = 1;
    assert_int_equal(qw_mem_estimate_of(&c, &p, &e, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "vocab_size"));
    p.ctx = 0;
    assert_int_equal(qw_mem_estimate_of(&s->cfg, &p, &e, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "ctx"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(weights_count_the_published_parameters),
        cmocka_unit_test(run_part_covers_the_run_state),
        cmocka_unit_test(what_fits_one_80gb_device),
        cmocka_unit_test(bad_input_names_the_field),
    };
    return cmocka_run_group_tests(tests, load, NULL);
}
