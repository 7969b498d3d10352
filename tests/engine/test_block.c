/* The one Llama block (block.h) on the CPU backend: its two modes (evaluation: in place, tiled
 * attention; training: saved activations, whole-sequence attention) compute the same block,
 * and ranks run in lockstep give each rank the bits it gets alone. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "block.h"
#include "ops.h"

static float *rand_floats(size_t n, uint32_t seed, float scale, float offset) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * scale + offset;
    }
    return x;
}

/* A block of GQA shape (4 heads over 2 kv heads) and T = 70 tokens: past one attention tile
 * (QW_ATT_TILE), so the evaluation's tiled attention crosses a tile boundary. */
enum { D = 64, F = 96, H = 4, G = 2, E = 16, T = 70, N_KINDS = 7 };

typedef struct fixture {
    qw_config cfg;
    float *w[N_KINDS]; /* [out x in] per kind */
    float *norm1, *norm2;
    float *cosb, *sinb;
} fixture;

static void fixture_init(fixture *f, uint32_t seed) {
    memset(f, 0, sizeof *f);
    f->cfg = (qw_config){.dim = D,
                         .hidden_dim = F,
                         .n_layers = 1,
                         .n_heads = H,
                         .n_kv_heads = G,
                         .head_dim = E,
                         .vocab_size = 32,
                         .max_seq_len = T,
                         .norm_eps = 1e-5f,
                         .rope_theta = 10000.0f};
    const int outs[N_KINDS] = {H * E, G * E, G * E, D, F, F, D};
    const int ins[N_KINDS] = {D, D, D, H * E, D, D, F};
    for (int k = 0; k < N_KINDS; k++)
        f->w[k] = rand_floats((size_t)outs[k] * ins[k], seed + 17u * (uint32_t)k,
                              2.0f / sqrtf((float)ins[k]), 0.0f);
    f->norm1 = rand_floats(D, seed + 200, 0.5f, 1.0f);
    f->norm2 = rand_floats(D, seed + 201, 0.5f, 1.0f);
    f->cosb = malloc((size_t)T * (E / 2) * sizeof(float));
    f->sinb = malloc((size_t)T * (E / 2) * sizeof(float));
    qw_rope_tables(&f->cfg, T, f->cosb, f->sinb);
}

static void fixture_free(fixture *f) {
    for (int k = 0; k < N_KINDS; k++)
        free(f->w[k]);
    free(f->norm1);
    free(f->norm2);
    free(f->cosb);
    free(f->sinb);
}

/* The hooks' state: one fixture (weights) per rank and the rank's backend. */
typedef struct hook_ctx {
    fixture *f[2];
    qw_backend *be[2];
} hook_ctx;

/* y = x W^T, the plain FP32 linear (the same GEMM in both modes). */
static qs_status plain_linear(void *user, int rank, int layer, int kind, float *y, const float *x,
                              int rows, qs_error *err) {
    (void)layer;
    hook_ctx *h = user;
    const int outs[N_KINDS] = {H * E, G * E, G * E, D, F, F, D};
    const int ins[N_KINDS] = {D, D, D, H * E, D, D, F};
    qw_backend *be = h->be[rank];
    return be->ops->gemm_abt(be, y, x, h->f[rank]->w[kind], rows, outs[kind], ins[kind], 0.0f, err);
}

/* Buffers of one evaluation-mode block (in place on x). */
typedef struct eval_bufs {
    float *x, *xb, *q, *k, *v, *scores, *att, *hb, *hb2, *ybuf;
} eval_bufs;

static qw_block_io eval_io(qw_backend *be, const fixture *f, eval_bufs *b, const float *x0) {
    b->x = malloc((size_t)T * D * sizeof(float));
    memcpy(b->x, x0, (size_t)T * D * sizeof(float));
    b->xb = malloc((size_t)T * D * sizeof(float));
    b->q = malloc((size_t)T * H * E * sizeof(float));
    b->k = malloc((size_t)T * G * E * sizeof(float));
    b->v = malloc((size_t)T * G * E * sizeof(float));
    b->scores = malloc((size_t)be->threads * QW_ATT_TILE * T * sizeof(float));
    b->att = malloc((size_t)T * H * E * sizeof(float));
    b->hb = malloc((size_t)T * F * sizeof(float));
    b->hb2 = malloc((size_t)T * F * sizeof(float));
    b->ybuf = malloc((size_t)T * D * sizeof(float));
    return (qw_block_io){.be = be,
                         .cfg = &f->cfg,
                         .B = 1,
                         .T = T,
                         .norm1 = f->norm1,
                         .norm2 = f->norm2,
                         .rope_cos = f->cosb,
                         .rope_sin = f->sinb,
                         .res = b->x,
                         .ln1 = b->xb,
                         .q = b->q,
                         .k = b->k,
                         .v = b->v,
                         .scores = b->scores,
                         .att = b->att,
                         .mid = b->x,
                         .ln2 = b->xb,
                         .g = b->hb,
                         .u = b->hb2,
                         .h = b->hb,
                         .ybuf = b->ybuf,
                         .out = b->x};
}

static void eval_free(eval_bufs *b) {
    float *p[] = {b->x, b->xb, b->q, b->k, b->v, b->scores, b->att, b->hb, b->hb2, b->ybuf};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

/* The evaluation mode and the training mode (save) of the block on the same input and weights:
 * the same function. They run different attention kernels (tiles of QW_ATT_TILE queries
 * against whole T x T GEMMs that keep the probabilities), which the ops do not promise to sum in
 * the same order, so the bound is FP32 rounding: 1e-5 of the output's largest magnitude after
 * RMSNorm and two sub-blocks (an error in the wiring, a swapped buffer or a skipped op, is of
 * order 1). */
static void eval_and_training_modes_agree(void **state) {
    (void)state;
    qs_error err = {0};
    qw_backend be;
    assert_int_equal(qw_backend_cpu_init(&be, 2, F, &err), QS_OK);
    fixture f;
    fixture_init(&f, 7);
    float *x0 = rand_floats((size_t)T * D, 99, 2.0f, 0.0f);
    hook_ctx hc = {{&f, &f}, {&be, &be}};
    qw_block_hooks hooks = {plain_linear, NULL, NULL, &hc};

    eval_bufs eb;
    qw_block_io ev = eval_io(&be, &f, &eb, x0);
    qw_block_io *evp = &ev;
    assert_int_equal(qw_block_forward(&evp, 1, 0, &hooks, &err), QS_OK);

    size_t nd = (size_t)T * D, nh = (size_t)T * H * E, ng = (size_t)T * G * E, nf = (size_t)T * F;
    size_t nsaved = qw_train_attention_saved_floats(&be, 1, T, H),
           nscratch = qw_train_attention_scratch_floats(&be, T, H, E);
    float *mem = calloc(nd * 6 + nh * 2 + ng * 2 + nf * 3 + nsaved + nscratch + 2 * (size_t)T,
                        sizeof(float));
    float *p = mem;
#define TAKE(n) (p += (n), p - (n))
    qw_block_io tr = {.be = &be,
                      .cfg = &f.cfg,
                      .B = 1,
                      .T = T,
                      .save = 1,
                      .norm1 = f.norm1,
                      .norm2 = f.norm2,
                      .rope_cos = f.cosb,
                      .rope_sin = f.sinb};
    tr.res = TAKE(nd);
    tr.ln1 = TAKE(nd);
    tr.rstd1 = TAKE((size_t)T);
    tr.q = TAKE(nh);
    tr.k = TAKE(ng);
    tr.v = TAKE(ng);
    tr.probs = TAKE(nsaved);
    tr.scores = TAKE(nscratch);
    tr.att = TAKE(nh);
    tr.mid = TAKE(nd);
    tr.ln2 = TAKE(nd);
    tr.rstd2 = TAKE((size_t)T);
    tr.g = TAKE(nf);
    tr.u = TAKE(nf);
    tr.h = TAKE(nf);
    tr.ybuf = TAKE(nd);
    tr.out = TAKE(nd);
#undef TAKE
    memcpy(tr.res, x0, nd * sizeof(float));
    qw_block_io *trp = &tr;
    assert_int_equal(qw_block_forward(&trp, 1, 0, &hooks, &err), QS_OK);

    double mx = 0.0, md = 0.0;
    for (size_t i = 0; i < nd; i++) {
        mx = fmax(mx, fabs((double)tr.out[i]));
        md = fmax(md, fabs((double)tr.out[i] - (double)eb.x[i]));
    }
    print_message("block modes: max |out| %.4g, max |difference| %.3g\n", mx, md);
    assert_true(mx > 0.1);
    assert_true(md <= 1e-5 * mx);
    /* the training mode kept its input and the residual after attention apart */
    for (size_t i = 0; i < nd; i++)
        assert_true(tr.res[i] == x0[i]);

    free(mem);
    eval_free(&eb);
    free(x0);
    fixture_free(&f);
    qw_backend_release(&be);
}

/* Two ranks of different weights in lockstep (n = 2, each rank its own linears) give each rank
 * the bits it gets when its block runs alone. */
static void lockstep_ranks_give_each_rank_its_own_bits(void **state) {
    (void)state;
    qs_error err = {0};
    qw_backend be[2];
    fixture f[2];
    for (int r = 0; r < 2; r++) {
        assert_int_equal(qw_backend_cpu_init(&be[r], 1 + r, F, &err), QS_OK);
        fixture_init(&f[r], 11u + 5u * (uint32_t)r);
    }
    float *x0 = rand_floats((size_t)T * D, 5, 2.0f, 0.0f);
    hook_ctx hc = {{&f[0], &f[1]}, {&be[0], &be[1]}};
    qw_block_hooks hooks = {plain_linear, NULL, NULL, &hc};
    eval_bufs both[2], alone;
    qw_block_io io[2] = {eval_io(&be[0], &f[0], &both[0], x0),
                         eval_io(&be[1], &f[1], &both[1], x0)};
    qw_block_io *iop[2] = {&io[0], &io[1]};
    assert_int_equal(qw_block_forward(iop, 2, 0, &hooks, &err), QS_OK);
    for (int r = 0; r < 2; r++) {
        hook_ctx solo = {{&f[r], &f[r]}, {&be[r], &be[r]}};
        qw_block_hooks sh = {plain_linear, NULL, NULL, &solo};
        qw_block_io one = eval_io(&be[r], &f[r], &alone, x0);
        qw_block_io *onep = &one;
        assert_int_equal(qw_block_forward(&onep, 1, 0, &sh, &err), QS_OK);
        assert_memory_equal(alone.x, both[r].x, (size_t)T * D * sizeof(float));
        assert_memory_not_equal(alone.x, x0, (size_t)T * D * sizeof(float));
        eval_free(&alone);
    }
    for (int r = 0; r < 2; r++) {
        eval_free(&both[r]);
        fixture_free(&f[r]);
        qw_backend_release(&be[r]);
    }
    free(x0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eval_and_training_modes_agree),
        cmocka_unit_test(lockstep_ranks_give_each_rank_its_own_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
