/* The engine's ops (ops.h) and weight forms (weights.h): a linear over weights in the
 * checkpoint's dtype or in packed FP4 gives exactly the bits of a GEMM over an FP32 copy (the
 * load-time copy, or the fake-quantized copy the engine held before), for any thread count; the
 * run state is one allocation; the small ops compute their formulas; RMSNorm's rows, summed side
 * by side, each give the one-row loop's bits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops.h"
#include "runstate.h"
#include "weights.h"

#ifndef QW_FIXTURES
#error "QW_FIXTURES (tests/checkpoint/fixtures) must be defined"
#endif

static float *rand_floats(size_t n, uint32_t seed) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
    return x;
}

/* Every block linear and the embeddings of GGUF Q8_0/Q4_0/Q4_1/F16/BF16 (rows permuted) and
 * BF16 safetensors checkpoints: qw_linear_forward on the stored weight equals
 * qw_matmul_forward on qw_checkpoint_tensor's FP32 copy, bit for bit, for 1, 2 and 3 threads. */
static void stored_weights_give_the_bits_of_the_fp32_copy(void **state) {
    (void)state;
    const char *cks[] = {QW_FIXTURES "/tiny_quant.gguf", QW_FIXTURES "/tiny_bf16",
                         QW_FIXTURES "/tiny_f16_sharded"};
    const int T = 37;
    for (size_t c = 0; c < 3; c++) {
        qw_checkpoint *ck = NULL;
        qs_error err = {0};
        if (qw_checkpoint_open(cks[c], &ck, &err) != QS_OK) fail_msg("%s", err.msg);
        qw_weights w;
        if (qw_weights_from_checkpoint(ck, &w, &err) != QS_OK) fail_msg("%s", err.msg);
        for (int l = 0; l < w.cfg.n_layers; l++)
            for (int k = 0; k < QW_LINEAR_KINDS; k++) {
                const qw_weight *W = &w.lin[k][l];
                assert_int_equal(W->form, QW_WEIGHT_STORED);
                char name[128];
                snprintf(name, sizeof name, "model.layers.%d.%s.weight", l,
                         qw_linear_module_name((qw_linear_kind)k));
                const float *copy;
                int64_t shape[2];
                int ndim;
                assert_int_equal(qw_checkpoint_tensor(ck, name, &copy, shape, &ndim, &err), QS_OK);
                int in = (int)W->cols, out = (int)W->rows;
                float *x = rand_floats((size_t)T * in, 7u + (uint32_t)k);
                float *want = malloc((size_t)T * out * sizeof *want);
                float *got = malloc((size_t)T * out * sizeof *got);
                qw_matmul_forward(want, x, copy, T, in, out, 1);
                for (int nt = 1; nt <= 3; nt++) {
                    float *scratch = malloc((size_t)nt * QW_GEMM_COLS * in * sizeof *scratch);
                    assert_int_equal(
                        qw_linear_forward(got, x, T, W, NULL, NULL, scratch, nt, &err), QS_OK);
                    if (memcmp(got, want, (size_t)T * out * sizeof *got) != 0)
                        fail_msg("%s: %s, %d threads: not the FP32 copy's bits", cks[c], name, nt);
                    free(scratch);
                }
                free(x);
                free(want);
                free(got);
            }
        /* The embedding lookup reads rows of the stored form. */
        const float *emb;
        int64_t shape[2];
        int ndim;
        assert_int_equal(
            qw_checkpoint_tensor(ck, "model.embed_tokens.weight", &emb, shape, &ndim, &err), QS_OK);
        uint32_t tok[4] = {0, 63, 5, 5};
        float *rows = malloc(4 * (size_t)w.cfg.dim * sizeof *rows);
        qw_embedding_forward(rows, tok, 4, &w.embed, 2);
        for (int t = 0; t < 4; t++)
            assert_memory_equal(rows + (size_t)t * w.cfg.dim, emb + (size_t)tok[t] * w.cfg.dim,
                                (size_t)w.cfg.dim * sizeof *rows);
        free(rows);
        qw_weights_release(&w);
        qw_checkpoint_close(ck);
    }
}

/* Packed weights (qk_quantize) through qw_linear_forward give the bits of qw_matmul_forward
 * over qk_fake_quant's FP32 copy, for each format family, stochastic rounding included, with
 * a ragged last GEMM piece (300 = 2*128 + 44 rows) and odd thread counts. */
static void packed_weights_give_the_bits_of_fake_quant(void **state) {
    (void)state;
    const char *names[] = {"nvfp4", "mxfp4", "nvfp4_2d", "int4_group", "fp8_e4m3", "mxfp6_e2m3",
                           "int8_channel", "nvfp4"};
    const int out = 300, in = 96, T = 21;
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        const qk_format *fmt = qk_format_by_name(names[f]);
        assert_non_null(fmt);
        qk_quant_options opt = {0};
        opt.tensor_id = 11;
        if (f == 7) {
            opt.rounding = QK_ROUND_SR;
            opt.seed = 99;
        }
        float *W = rand_floats((size_t)out * in, 3u + (uint32_t)f);
        float *fq = malloc((size_t)out * in * sizeof *fq);
        memcpy(fq, W, (size_t)out * in * sizeof *fq);
        qs_error err = {0};
        assert_int_equal(qk_fake_quant(fmt, &opt, fq, (size_t)out, (size_t)in, NULL, &err), QS_OK);
        qk_packed p;
        assert_int_equal(qk_packed_init(&p, fmt, &opt, (size_t)out, (size_t)in, &err), QS_OK);
        assert_int_equal(qk_quantize(fmt, &opt, W, (size_t)out, (size_t)in, &p, &err), QS_OK);
        qw_weight pw = qw_weight_from_packed(&p);
        /* any row range dequantizes to the fake-quantized rows */
        float rows[17 * 96];
        assert_int_equal(qw_weight_rows_f32(&pw, 5, 17, rows, &err), QS_OK);
        assert_memory_equal(rows, fq + 5 * in, sizeof rows);
        float *x = rand_floats((size_t)T * in, 5u);
        float *want = malloc((size_t)T * out * sizeof *want);
        float *got = malloc((size_t)T * out * sizeof *got);
        qw_matmul_forward(want, x, fq, T, in, out, 1);
        for (int nt = 1; nt <= 3; nt += 2) {
            float *scratch = malloc((size_t)nt * QW_GEMM_COLS * in * sizeof *scratch);
            assert_int_equal(qw_linear_forward(got, x, T, &pw, NULL, NULL, scratch, nt, &err),
                             QS_OK);
            if (memcmp(got, want, (size_t)T * out * sizeof *got) != 0)
                fail_msg("%s%s, %d threads: not the fake-quantized copy's bits", names[f],
                         f == 7 ? " (sr)" : "", nt);
            free(scratch);
        }
        /* the packed form is what it says: NVFP4 4.5 bits per weight */
        if (f == 0) assert_int_equal(qw_weight_bytes(&pw), (size_t)out * in / 2 + out * in / 16);
        qk_packed_release(&p);
        free(W);
        free(fq);
        free(x);
        free(want);
        free(got);
    }
}

/* An activation format fake-quantizes a copy of the input (rows = tokens) and leaves x as it
 * was; out of range rows are refused. */
static void activation_format_quantizes_a_copy_of_the_input(void **state) {
    (void)state;
    const int out = 130, in = 64, T = 9;
    float *W = rand_floats((size_t)out * in, 1u), *x = rand_floats((size_t)T * in, 2u);
    float *x0 = malloc((size_t)T * in * sizeof *x0), *xq = malloc((size_t)T * in * sizeof *xq);
    memcpy(x0, x, (size_t)T * in * sizeof *x0);
    qw_stored_tensor v = {QW_DT_F32, (const uint8_t *)W, out, in, (size_t)in * 4, 0};
    qw_weight w = qw_weight_from_view(&v);
    assert_int_equal(w.form, QW_WEIGHT_F32);
    qw_act_quant act = {qk_format_by_name("mxfp4"), {0}, NULL};
    float *got = malloc((size_t)T * out * sizeof *got), *want = malloc((size_t)T * out * sizeof *want);
    qs_error err = {0};
    assert_int_equal(qw_linear_forward(got, x, T, &w, &act, xq, NULL, 2, &err), QS_OK);
    assert_memory_equal(x, x0, (size_t)T * in * sizeof *x);
    assert_int_equal(qk_fake_quant(act.fmt, &act.opt, x0, (size_t)T, (size_t)in, NULL, &err), QS_OK);
    qw_matmul_forward(want, x0, W, T, in, out, 1);
    assert_memory_equal(got, want, (size_t)T * out * sizeof *got);
    assert_int_equal(qw_weight_rows_f32(&w, 120, 11, xq, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "rows 120..130 outside 0..129"));
    free(W), free(x), free(x0), free(xq), free(got), free(want);
}

/* The run state's buffers lie inside its one allocation, 64-byte aligned, without overlap. */
static void run_state_is_one_allocation(void **state) {
    (void)state;
    qw_config c = {.dim = 96, .hidden_dim = 200, .n_layers = 2, .n_heads = 6, .n_kv_heads = 2,
                   .head_dim = 16, .vocab_size = 333, .norm_eps = 1e-5f, .rope_theta = 1e4f};
    qw_backend b;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&b, 3, 200, &err), QS_OK);
    qw_runstate s;
    assert_int_equal(qw_runstate_init(&s, &b, &c, 50, 3, &err), QS_OK);
    const int T = 50, D = 96, F = 200, HE = 96, GE = 32, V = 333;
    struct {
        float *p;
        size_t n;
    } bufs[] = {{s.rope_cos, (size_t)T * 8}, {s.rope_sin, (size_t)T * 8}, {s.x, (size_t)T * D},
                {s.xb, (size_t)T * D},       {s.q, (size_t)T * HE},       {s.k, (size_t)T * GE},
                {s.v, (size_t)T * GE},       {s.att, (size_t)T * HE},
                {s.scores, 3 * (size_t)QW_ATT_TILE * T},
                {s.hb, (size_t)T * F},       {s.hb2, (size_t)T * F},      {s.ybuf, (size_t)T * D},
                {s.actq, (size_t)T * F},     {s.logits, (size_t)T * V}};
    size_t nb = sizeof bufs / sizeof bufs[0];
    const char *lo = s.storage_, *hi = lo + s.bytes;
    for (size_t i = 0; i < nb; i++) {
        const char *a = (const char *)bufs[i].p, *e = a + bufs[i].n * sizeof(float);
        assert_true(a >= lo && e <= hi);
        assert_int_equal((uintptr_t)a % 64, 0);
        for (size_t j = 0; j < nb; j++) {
            if (i == j) continue;
            const char *a2 = (const char *)bufs[j].p, *e2 = a2 + bufs[j].n * sizeof(float);
            assert_true(e <= a2 || e2 <= a);
        }
    }
    assert_true(s.bytes <= qw_runstate_bytes(&c, 50, 3) + 64);
    /* RoPE tables: position 0 is the identity rotation */
    for (int i = 0; i < 8; i++) {
        assert_true(s.rope_cos[i] == 1.0f);
        assert_true(s.rope_sin[i] == 0.0f);
    }
    qw_runstate_release(&s, &b);
    qw_backend_release(&b);
}

/* RMSNorm over T rows (the forward sums several rows' squares in one loop) against the loop of
 * one row at a time written out, bit for bit, for row counts around the group size, in place
 * and out of place, at 1 and 2 threads. */
static void rmsnorm_rows_give_the_one_row_bits(void **state) {
    (void)state;
    enum { D = 67, TMAX = 9 };
    float x[TMAX * D], w[D], want[TMAX * D], got[TMAX * D], rw[TMAX], rg[TMAX];
    uint32_t u = 7u;
    for (int i = 0; i < TMAX * D; i++) {
        u ^= u << 13, u ^= u >> 17, u ^= u << 5;
        x[i] = ((float)(u >> 8) / 16777216.0f - 0.5f) * (float)(1 << (u % 9));
    }
    for (int i = 0; i < D; i++)
        w[i] = 1.0f + 0.01f * (float)i;
    for (int T = 1; T <= TMAX; T++) {
        for (int t = 0; t < T; t++) {
            double ss = 0.0;
            for (int i = 0; i < D; i++)
                ss += (double)x[t * D + i] * x[t * D + i];
            rw[t] = (float)(1.0 / sqrt(ss / D + 1e-5));
            for (int i = 0; i < D; i++)
                want[t * D + i] = w[i] * (x[t * D + i] * rw[t]);
        }
        for (int nt = 1; nt <= 2; nt++) {
            qw_rmsnorm_forward(got, rg, x, w, T, D, 1e-5f, nt);
            assert_memory_equal(got, want, (size_t)T * D * sizeof *got);
            assert_memory_equal(rg, rw, (size_t)T * sizeof *rg);
            memcpy(got, x, sizeof x);
            qw_rmsnorm_forward(got, NULL, got, w, T, D, 1e-5f, nt);
            assert_memory_equal(got, want, (size_t)T * D * sizeof *got);
        }
    }
}

/* The small ops against their formulas, values written out. */
static void small_ops_compute_their_formulas(void **state) {
    (void)state;
    /* RMSNorm: x = (3, 4), mean(x^2) = 12.5, eps 0 */
    float x[2] = {3.0f, 4.0f}, w[2] = {1.0f, 2.0f}, o[2];
    qw_rmsnorm_forward(o, NULL, x, w, 1, 2, 0.0f, 1);
    float r = (float)(1.0 / sqrt(12.5));
    assert_true(o[0] == 3.0f * r && o[1] == 2.0f * (4.0f * r));
    /* SwiGLU: silu(0) = 0, silu(1) * 2 = 2 / (1 + e^-1) */
    float g[2] = {0.0f, 1.0f}, u[2] = {5.0f, 2.0f}, s[2];
    qw_swiglu_forward(s, g, u, 2, 1);
    assert_true(s[0] == 0.0f);
    assert_float_equal(s[1], 2.0 / (1.0 + exp(-1.0)), 1e-6);
    /* log-softmax of four equal logits: -ln 4 each, lse = ln 4 + the logit */
    float l[4] = {2.0f, 2.0f, 2.0f, 2.0f}, lp[4];
    assert_float_equal(qw_logsoftmax_row(l, 4, lp), 2.0 + log(4.0), 1e-12);
    for (int i = 0; i < 4; i++)
        assert_float_equal(lp[i], -log(4.0), 1e-6);
    /* SQNR sums: ref (1, 1, 1), y (1, 2, 3): signal 3, noise 0 + 1 + 4 */
    float y[3] = {1.0f, 2.0f, 3.0f}, ref[3] = {1.0f, 1.0f, 1.0f};
    double sig, noise;
    qw_sqnr_sums_forward(y, ref, 3, &sig, &noise);
    assert_true(sig == 3.0 && noise == 5.0);
    /* RoPE, E = 2, tables cos/sin of positions 0 and 1 at angle t: (1, 0) at position 1 turns
     * by 1 rad */
    float cs[2] = {1.0f, cosf(1.0f)}, sn[2] = {0.0f, sinf(1.0f)};
    float v2[4] = {0.0f, 0.0f, 1.0f, 0.0f};
    qw_rope_forward(v2, cs, sn, 1, 2, 1, 2, 1);
    assert_true(v2[2] == cosf(1.0f) && v2[3] == sinf(1.0f));
    /* residual: the table's add, in place */
    float a[2] = {1.0f, 2.0f}, bb[2] = {0.5f, -2.0f};
    qw_backend be;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&be, 2, 8, &err), QS_OK);
    assert_int_equal(be.ops->add(&be, a, a, bb, 2, &err), QS_OK);
    assert_true(a[0] == 1.5f && a[1] == 0.0f);
    qw_backend_release(&be);
}

/* The CPU table is complete and its linear is the free function. */
static void cpu_table_is_complete(void **state) {
    (void)state;
    const qw_ops *o = qw_ops_cpu();
    assert_string_equal(o->name, "cpu");
    assert_non_null(o->alloc);
    assert_non_null(o->free);
    assert_non_null(o->embedding);
    assert_non_null(o->rmsnorm);
    assert_non_null(o->rope);
    assert_non_null(o->attention);
    assert_non_null(o->swiglu);
    assert_non_null(o->add);
    assert_non_null(o->linear);
    assert_non_null(o->lm_head);
    assert_non_null(o->logsoftmax);
    assert_non_null(o->sqnr_sums);
    assert_non_null(o->score_rows);
    qw_backend b;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&b, 0, 8, &err), QS_EINVAL);
    assert_int_equal(qw_backend_cpu_init(&b, 2, 64, &err), QS_OK);
    const int out = 129, in = 64, T = 3;
    float *W = rand_floats((size_t)out * in, 9u), *x = rand_floats((size_t)T * in, 8u);
    float y1[3 * 129], y2[3 * 129];
    qw_stored_tensor v = {QW_DT_F32, (const uint8_t *)W, out, in, (size_t)in * 4, 0};
    qw_weight w = qw_weight_from_view(&v);
    qw_tensor ty = {y1, T, out}, tx = {x, T, in};
    assert_int_equal(o->linear(&b, &ty, &tx, &w, NULL, NULL, &err), QS_OK);
    qw_matmul_forward(y2, x, W, T, in, out, 1);
    assert_memory_equal(y1, y2, sizeof y1);
    free(W);
    free(x);
    qw_backend_release(&b);
}

/* The evaluation's host scoring as eval.c computed it before the table had score_rows (the
 * reference the entry must reproduce bit for bit): NLL from qw_logsoftmax_row's lse, the
 * model's FP32 log-probs into a row buffer, KL in double in vocabulary order, top-1 as the
 * first index of each maximum. */
static void host_scores(const float *logits, int R, int V, const uint32_t *tgt, const float *ref,
                        double *nll, double *kl, unsigned char *hit) {
    float *lq = malloc((size_t)V * sizeof *lq);
    for (int r = 0; r < R; r++) {
        const float *l = logits + (size_t)r * V, *lp = ref + (size_t)r * V;
        nll[r] = qw_logsoftmax_row(l, V, NULL) - (double)l[tgt[r]];
        qw_logsoftmax_row(l, V, lq);
        double d = 0.0;
        int ap = 0, aq = 0;
        for (int i = 0; i < V; i++) {
            d += exp((double)lp[i]) * ((double)lp[i] - (double)lq[i]);
            if (lp[i] > lp[ap]) ap = i;
            if (l[i] > l[aq]) aq = i;
        }
        kl[r] = d;
        hit[r] = ap == aq;
    }
    free(lq);
}

/* score_rows of the CPU table gives the old host scoring's NLL, KL and top-1 bits for 1, 2 and
 * 3 threads, on rows where the baseline agrees (log-probs of nearby logits) and disagrees
 * (unrelated logits) on the top-1; without a baseline, KL is 0 and ref_argmax -1. */
static void cpu_score_rows_give_the_host_scoring_bits(void **state) {
    (void)state;
    const int R = 23, V = 1000;
    float *l = rand_floats((size_t)R * V, 21u), *other = rand_floats((size_t)R * V, 22u);
    float *ref = malloc((size_t)R * V * sizeof *ref);
    uint32_t tgt[23];
    for (int r = 0; r < R; r++) {
        float *o = other + (size_t)r * V;
        if (r % 2 == 0) /* a baseline close to the model: mostly the same top-1 */
            for (int i = 0; i < V; i++)
                o[i] = l[(size_t)r * V + i] + 0.01f * o[i];
        qw_logsoftmax_row(o, V, ref + (size_t)r * V);
        tgt[r] = (uint32_t)(r * 37 % V);
    }
    double nll0[23], kl0[23];
    unsigned char hit0[23];
    host_scores(l, R, V, tgt, ref, nll0, kl0, hit0);
    int hits = 0;
    for (int r = 0; r < R; r++)
        hits += hit0[r];
    assert_true(hits > 0 && hits < R); /* both cases occur */
    const qw_ops *o = qw_ops_cpu();
    for (int nt = 1; nt <= 3; nt++) {
        qw_backend b;
        qs_error err = {0};
        assert_int_equal(qw_backend_cpu_init(&b, nt, 8, &err), QS_OK);
        qw_tensor tl = {l, R, V};
        double nll[23], kl[23];
        int32_t am[23], ram[23];
        assert_int_equal(o->score_rows(&b, &tl, tgt, ref, nll, kl, am, ram, &err), QS_OK);
        assert_memory_equal(nll, nll0, sizeof nll);
        assert_memory_equal(kl, kl0, sizeof kl);
        for (int r = 0; r < R; r++)
            assert_int_equal(am[r] == ram[r], hit0[r]);
        assert_int_equal(o->score_rows(&b, &tl, NULL, NULL, NULL, kl, am, ram, &err), QS_OK);
        for (int r = 0; r < R; r++) {
            assert_true(kl[r] == 0.0);
            assert_int_equal(ram[r], -1);
        }
        uint32_t bad[23];
        memcpy(bad, tgt, sizeof bad);
        bad[5] = (uint32_t)V;
        assert_int_equal(o->score_rows(&b, &tl, bad, NULL, nll, NULL, NULL, NULL, &err), QS_EINVAL);
        assert_non_null(strstr(err.msg, "row 5"));
        qw_backend_release(&b);
    }
    free(l);
    free(other);
    free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stored_weights_give_the_bits_of_the_fp32_copy),
        cmocka_unit_test(rmsnorm_rows_give_the_one_row_bits),
        cmocka_unit_test(packed_weights_give_the_bits_of_fake_quant),
        cmocka_unit_test(activation_format_quantizes_a_copy_of_the_input),
        cmocka_unit_test(run_state_is_one_allocation),
        cmocka_unit_test(small_ops_compute_their_formulas),
        cmocka_unit_test(cpu_table_is_complete),
        cmocka_unit_test(cpu_score_rows_give_the_host_scoring_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
