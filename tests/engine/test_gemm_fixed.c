/* The fixed-order GEMM (worker/engine/gemm_fixed.h): every ISA path this CPU has, forced in turn,
 * gives BIT FOR BIT the chain the header defines (c = beta*C, then c = fmaf(a_ik, b_kj, c) for
 * k = 0..K-1, then alpha*c), written out here as a plain loop; that chain is within the
 * FMA-chain error bound of a double-precision reference; and splitting the columns between 1 or
 * 2 threads in pieces of any width gives the bits of one call; so does every register tile and
 * K block the vector paths have, forced in turn (the tile a two-port AVX-512 core would choose
 * included, whatever this CPU's port count). Shapes are odd on purpose: M = 1, K not a multiple
 * of the vector width or of the K block, N not a multiple of the tile. */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemm_cpu.h"
#include "gemm_fixed.h"
#include "ops.h"

typedef struct shape {
    int M, N, K;
} shape;

static const shape shapes[] = {
    {1, 1, 1},     {1, 37, 19},    {7, 13, 5},     {6, 64, 256},   {2, 200, 17},
    {13, 70, 300}, {65, 129, 513}, {12, 128, 576}, {31, 16, 1000}, {5, 300, 33},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* alpha, beta pairs: the engine's (1, 0), accumulation (1, 1), attention's scale (0.125, 0) and
 * a general pair. */
static const float scalars[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.125f, 0.0f}, {-1.5f, 0.75f}};
enum { N_SCALARS = sizeof scalars / sizeof scalars[0] };

enum { PAD = 3 }; /* extra floats per row of every operand: leading dimensions > the width */

static uint32_t rng = 12345;
static float rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    uint32_t r = rng;
    /* one value in 64 is subnormal, so a flush to zero anywhere would show */
    if ((r & 63u) == 0) return (r & 64u ? -1.0f : 1.0f) * 1e-39f;
    return (float)(r >> 8) / 8388608.0f - 1.0f;
}

static void fill(float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = rnd();
}

/* The definition, written out: op(A)[i][k] and op(B)[k][j] as gemm_fixed.h reads them. */
static void chain_reference(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                            int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                c = fmaf(a, b, c);
            }
            C[(size_t)i * ldc + j] = alpha == 1.0f ? c : alpha * c;
        }
}

/* One problem: operands with padded rows, C filled with a guard value outside M x N. */
typedef struct problem {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C0; /* C0: C before the call */
} problem;

static void problem_make(problem *p, int ta, int tb, shape s, float alpha, float beta) {
    *p = (problem){ta, tb, s.M, s.N, s.K, 0, 0, s.N + PAD, alpha, beta, NULL, NULL, NULL};
    int arows = ta ? s.K : s.M, acols = ta ? s.M : s.K;
    int brows = tb ? s.N : s.K, bcols = tb ? s.K : s.N;
    p->lda = acols + PAD;
    p->ldb = bcols + PAD;
    p->A = malloc((size_t)arows * p->lda * sizeof(float));
    p->B = malloc((size_t)brows * p->ldb * sizeof(float));
    p->C0 = malloc((size_t)s.M * p->ldc * sizeof(float));
    assert_non_null(p->A);
    assert_non_null(p->B);
    assert_non_null(p->C0);
    fill(p->A, (size_t)arows * p->lda);
    fill(p->B, (size_t)brows * p->ldb);
    fill(p->C0, (size_t)s.M * p->ldc);
    for (int i = 0; i < s.M; i++)
        for (int j = s.N; j < p->ldc; j++)
            p->C0[(size_t)i * p->ldc + j] = 777.0f; /* never written */
}

static void problem_free(problem *p) {
    free(p->A);
    free(p->B);
    free(p->C0);
}

static float *run_fixed(const problem *p) {
    size_t n = (size_t)p->M * p->ldc;
    float *C = malloc(n * sizeof *C);
    assert_non_null(C);
    memcpy(C, p->C0, n * sizeof *C);
    qw_gemm_fixed(p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A, p->lda, p->B, p->ldb, p->beta, C,
                  p->ldc);
    return C;
}

static float *run_chain(const problem *p) {
    size_t n = (size_t)p->M * p->ldc;
    float *C = malloc(n * sizeof *C);
    assert_non_null(C);
    memcpy(C, p->C0, n * sizeof *C);
    chain_reference(p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A, p->lda, p->B, p->ldb, p->beta,
                    C, p->ldc);
    return C;
}

static const qw_gemm_isa isas[] = {QW_GEMM_ISA_SCALAR, QW_GEMM_ISA_AVX2, QW_GEMM_ISA_AVX512};

/* Every path, every transpose, every shape and scalar pair: the bits of the written-out chain,
 * and the guard columns untouched. */
static void test_every_isa_gives_the_chain_bit_for_bit(void **state) {
    (void)state;
    int ran = 0;
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        if (!qw_gemm_fixed_isa_supported(isas[ii])) {
            printf("skip %s: not on this CPU\n", qw_gemm_isa_name(isas[ii]));
            continue;
        }
        assert_int_equal(qw_gemm_fixed_force_isa(isas[ii], NULL), QS_OK);
        assert_int_equal(qw_gemm_fixed_isa(), isas[ii]);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int s = 0; s < N_SHAPES; s++)
                    for (int c = 0; c < N_SCALARS; c++) {
                        problem p;
                        problem_make(&p, ta, tb, shapes[s], scalars[c][0], scalars[c][1]);
                        float *got = run_fixed(&p), *want = run_chain(&p);
                        size_t n = (size_t)p.M * p.ldc;
                        if (memcmp(got, want, n * sizeof *got) != 0) {
                            for (size_t e = 0; e < n; e++)
                                if (memcmp(got + e, want + e, sizeof *got) != 0) {
                                    print_error("%s ta %d tb %d M %d N %d K %d alpha %g beta %g: "
                                                "element %zu is %a, the chain %a\n",
                                                qw_gemm_isa_name(isas[ii]), ta, tb, p.M, p.N, p.K,
                                                (double)p.alpha, (double)p.beta, e, (double)got[e],
                                                (double)want[e]);
                                    break;
                                }
                            fail();
                        }
                        free(got);
                        free(want);
                        problem_free(&p);
                    }
        printf("ok %s: %d shapes x 4 transposes x %d scalar pairs bit for bit\n",
               qw_gemm_isa_name(isas[ii]), N_SHAPES, N_SCALARS);
        ran++;
    }
    assert_true(ran >= 1);
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

/* Within the error bound of an FMA chain against a double reference: K + 2 roundings (beta's
 * multiply, K FMAs, alpha's multiply) of unit roundoff u = 2^-24 each, relative to
 * |alpha| (|beta C| + sum |a b|) (Higham, "Accuracy and Stability of Numerical Algorithms",
 * 2nd ed., section 3.1, gamma_n = n u / (1 - n u)), plus the subnormal spacing 2^-149 per step. */
static void test_within_the_fma_chain_bound_of_double(void **state) {
    (void)state;
    const double u = ldexp(1.0, -24);
    for (int s = 0; s < N_SHAPES; s++)
        for (int c = 0; c < N_SCALARS; c++) {
            problem p;
            problem_make(&p, 0, 1, shapes[s], scalars[c][0], scalars[c][1]);
            float *got = run_fixed(&p);
            double n = p.K + 2, gamma = n * u / (1.0 - n * u), worst = 0.0;
            for (int i = 0; i < p.M; i++)
                for (int j = 0; j < p.N; j++) {
                    double cin = p.C0[(size_t)i * p.ldc + j];
                    double ref = p.beta == 0.0f ? 0.0 : (double)p.beta * cin;
                    double mag = fabs(ref);
                    for (int k = 0; k < p.K; k++) {
                        double t =
                            (double)p.A[(size_t)i * p.lda + k] * (double)p.B[(size_t)j * p.ldb + k];
                        ref += t;
                        mag += fabs(t);
                    }
                    ref *= p.alpha;
                    mag *= fabs((double)p.alpha);
                    double err = fabs((double)got[(size_t)i * p.ldc + j] - ref);
                    double bound = gamma * mag + n * ldexp(1.0, -149);
                    if (err > bound)
                        fail_msg("M %d N %d K %d: C[%d][%d] error %g over the bound %g", p.M, p.N,
                                 p.K, i, j, err, bound);
                    worst = err / bound > worst ? err / bound : worst;
                }
            free(got);
            problem_free(&p);
            if (c == 0)
                printf("M %d N %d K %d: worst error %.3f of the bound\n", p.M, p.N, p.K, worst);
        }
}

/* Column pieces of any width, handed to 1 or 2 threads, give the bits of one whole call (made
 * on the CPU's own path) on every path: each element is its own chain, whoever computes it. */
static void test_pieces_and_threads_do_not_change_bits(void **state) {
    (void)state;
    static const int widths[] = {1, 16, 48, 64, 128, 200};
    shape s = {37, 515, 300};
    problem p;
    problem_make(&p, 0, 1, s, 1.0f, 0.0f);
    float *whole = run_fixed(&p);
    size_t n = (size_t)p.M * p.ldc;
    float *C = malloc(n * sizeof *C);
    assert_non_null(C);
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        if (!qw_gemm_fixed_isa_supported(isas[ii])) continue;
        assert_int_equal(qw_gemm_fixed_force_isa(isas[ii], NULL), QS_OK);
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
            for (int nt = 1; nt <= 2; nt++) {
                memcpy(C, p.C0, n * sizeof *C);
                int width = widths[w], pieces = (p.N + width - 1) / width;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
                for (int q = 0; q < pieces; q++) {
                    int c0 = q * width, c1 = c0 + width < p.N ? c0 + width : p.N;
                    qw_gemm_fixed(0, 1, p.M, c1 - c0, p.K, 1.0f, p.A, p.lda,
                                  p.B + (size_t)c0 * p.ldb, p.ldb, 0.0f, C + c0, p.ldc);
                }
                if (memcmp(C, whole, n * sizeof *C) != 0)
                    fail_msg("%s: pieces of %d columns on %d threads differ from one call",
                             qw_gemm_isa_name(isas[ii]), width, nt);
            }
    }
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
    free(C);
    free(whole);
    problem_free(&p);
}

/* Under the fixed selection the engine's GEMM entries (qw_matmul_forward's pieces of
 * QW_GEMM_COLS columns, qw_train_gemm_abt's with beta 1) give the bits of one qw_gemm_fixed call
 * for 1 and 2 threads, and the recorded path names no CPU. */
static void test_engine_gemms_under_the_fixed_selection(void **state) {
    (void)state;
    shape s = {29, 300, 577};
    problem p;
    problem_make(&p, 0, 1, s, 1.0f, 1.0f);
    assert_int_equal(p.lda, s.K + PAD);
    int T = s.M, in = s.K, out = s.N;
    float *x = malloc((size_t)T * in * sizeof *x), *W = malloc((size_t)out * in * sizeof *W);
    float *want = malloc((size_t)T * out * sizeof *want),
          *got = malloc((size_t)T * out * sizeof *got);
    assert_non_null(x);
    assert_non_null(W);
    assert_non_null(want);
    assert_non_null(got);
    for (int t = 0; t < T; t++)
        memcpy(x + (size_t)t * in, p.A + (size_t)t * p.lda, (size_t)in * sizeof *x);
    for (int o = 0; o < out; o++)
        memcpy(W + (size_t)o * in, p.B + (size_t)o * p.ldb, (size_t)in * sizeof *W);
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    assert_string_equal(qw_backend_cpu_path(), "cpu-qsweep-fixed2");
    qw_gemm_fixed(0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, want, out);
    for (int nt = 1; nt <= 2; nt++) {
        memset(got, 0xff, (size_t)T * out * sizeof *got);
        qw_matmul_forward(got, x, W, T, in, out, nt);
        assert_memory_equal(got, want, (size_t)T * out * sizeof *got);
    }
    /* beta 1: the chain starts at C (gradient accumulation) */
    for (size_t e = 0; e < (size_t)T * out; e++)
        want[e] = 0.5f;
    qw_gemm_fixed(0, 1, T, out, in, 1.0f, x, in, W, in, 1.0f, want, out);
    for (int nt = 1; nt <= 2; nt++) {
        for (size_t e = 0; e < (size_t)T * out; e++)
            got[e] = 0.5f;
        qw_train_gemm_abt(got, x, W, T, out, in, 1.0f, nt);
        assert_memory_equal(got, want, (size_t)T * out * sizeof *got);
    }
    qw_cpu_gemm_force(QW_CPU_GEMM_OPENBLAS);
    assert_non_null(strstr(qw_backend_cpu_path(), "cpu-openblas-"));
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    free(x);
    free(W);
    free(want);
    free(got);
    problem_free(&p);
}

/* qw_matmul_forward splits a linear's rows between threads in blocks of the tile's height when
 * it has few pieces (200 rows, 3 pieces, 2 threads: 2 row blocks): under each tile the choice
 * names, forced, the bits of one call on the CPU's own tile. */
static void test_row_blocks_under_every_chosen_tile(void **state) {
    (void)state;
    enum { T = 200, IN = 77, OUT = 300 };
    float *x = malloc((size_t)T * IN * sizeof *x), *W = malloc((size_t)OUT * IN * sizeof *W);
    float *want = malloc((size_t)T * OUT * sizeof *want),
          *got = malloc((size_t)T * OUT * sizeof *got);
    assert_non_null(x);
    assert_non_null(W);
    assert_non_null(want);
    assert_non_null(got);
    fill(x, (size_t)T * IN);
    fill(W, (size_t)OUT * IN);
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    qw_gemm_fixed(0, 1, T, OUT, IN, 1.0f, x, IN, W, IN, 0.0f, want, OUT);
    qw_gemm_isa isa = qw_gemm_fixed_isa();
    for (int ports = 1; ports <= 2; ports++) {
        qw_gemm_tile t = qw_gemm_fixed_tile_for(isa, ports);
        if (t.mr == 0) continue;
        assert_int_equal(qw_gemm_fixed_force_tile(&t, NULL), QS_OK);
        for (int nt = 1; nt <= 2; nt++) {
            memset(got, 0xff, (size_t)T * OUT * sizeof *got);
            qw_matmul_forward(got, x, W, T, IN, OUT, nt);
            if (memcmp(got, want, (size_t)T * OUT * sizeof *got) != 0)
                fail_msg("%s tile %d x %d panels, K block %d, %d threads: not one call's bits",
                         qw_gemm_isa_name(isa), t.mr, t.panels, t.kc, nt);
        }
    }
    assert_int_equal(qw_gemm_fixed_force_tile(NULL, NULL), QS_OK);
    free(x);
    free(W);
    free(want);
    free(got);
}

/* A path the CPU lacks is refused, not silently replaced. */
static void test_forcing_a_missing_isa_is_refused(void **state) {
    (void)state;
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        qs_error err = {0};
        qs_status st = qw_gemm_fixed_force_isa(isas[ii], &err);
        if (qw_gemm_fixed_isa_supported(isas[ii])) {
            assert_int_equal(st, QS_OK);
        } else {
            assert_int_equal(st, QS_EINVAL);
            assert_non_null(strstr(err.msg, qw_gemm_isa_name(isas[ii])));
        }
    }
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

/* Every microkernel family and panel count of each path this CPU has, at the tile choice's K
 * blocks and at odd ones, forced in turn: the bits of the written-out chain on every shape,
 * transpose and scalar pair. */
static void test_every_tile_gives_the_chain_bit_for_bit(void **state) {
    (void)state;
    static const qw_gemm_tile tiles[] = {
        {4, 1, 256}, {4, 2, 96},  {4, 3, 7},  {4, 4, 64},   {6, 1, 256},  {6, 2, 13},
        {6, 3, 128}, {6, 4, 256}, {6, 4, 96}, {6, 4, 1},    {8, 1, 64},   {8, 2, 33},
        {8, 3, 128}, {8, 3, 256}, {12, 1, 5}, {12, 2, 128}, {12, 2, 256},
    };
    enum { NT = sizeof tiles / sizeof tiles[0] };
    int ran[NT * 2] = {0};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int s = 0; s < N_SHAPES; s++)
                for (int c = 0; c < N_SCALARS; c++) {
                    problem p;
                    problem_make(&p, ta, tb, shapes[s], scalars[c][0], scalars[c][1]);
                    float *want = run_chain(&p);
                    size_t n = (size_t)p.M * p.ldc;
                    for (int ii = 0; ii < 2; ii++) {
                        qw_gemm_isa isa = ii ? QW_GEMM_ISA_AVX512 : QW_GEMM_ISA_AVX2;
                        if (!qw_gemm_fixed_isa_supported(isa)) continue;
                        assert_int_equal(qw_gemm_fixed_force_isa(isa, NULL), QS_OK);
                        for (int t = 0; t < NT; t++) {
                            qw_gemm_tile tl = tiles[t];
                            if (isa == QW_GEMM_ISA_AVX2) tl.panels = 1;
                            if (!qw_gemm_fixed_tile_supported(isa, &tl)) continue;
                            assert_int_equal(qw_gemm_fixed_force_tile(&tl, NULL), QS_OK);
                            qw_gemm_tile now = qw_gemm_fixed_tile();
                            assert_memory_equal(&now, &tl, sizeof tl);
                            float *got = run_fixed(&p);
                            if (memcmp(got, want, n * sizeof *got) != 0)
                                fail_msg("%s tile %d x %d panels, K block %d: ta %d tb %d M %d N "
                                         "%d K %d alpha %g beta %g: not the chain's bits",
                                         qw_gemm_isa_name(isa), tl.mr, tl.panels, tl.kc, ta, tb,
                                         p.M, p.N, p.K, (double)p.alpha, (double)p.beta);
                            free(got);
                            ran[t * 2 + ii]++;
                        }
                    }
                    free(want);
                    problem_free(&p);
                }
    int total = 0;
    for (int t = 0; t < NT; t++)
        for (int ii = 0; ii < 2; ii++)
            if (ran[t * 2 + ii]) {
                printf("ok %s tile %d x %d panels, K block %d: %d problems bit for bit\n",
                       ii ? "avx512" : "avx2", tiles[t].mr, ii ? tiles[t].panels : 1, tiles[t].kc,
                       ran[t * 2 + ii]);
                total++;
            }
    /* on a CPU with a vector path, its chosen tiles ran */
    if (qw_gemm_fixed_isa_supported(QW_GEMM_ISA_AVX512)) assert_true(total >= NT);
    if (qw_gemm_fixed_isa_supported(QW_GEMM_ISA_AVX2)) assert_true(total >= 1);
    assert_int_equal(qw_gemm_fixed_force_tile(NULL, NULL), QS_OK);
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

/* Forces path isa and, t >= 0, tiles[t] (t -1: the path's own tile); 0 when this CPU lacks the
 * path or the path has no such tile (the scalar path has none), nothing forced then. */
static int force_path_tile(qw_gemm_isa isa, int t, const qw_gemm_tile *tiles) {
    if (!qw_gemm_fixed_isa_supported(isa)) return 0;
    if (t >= 0 && (isa == QW_GEMM_ISA_SCALAR || !qw_gemm_fixed_tile_supported(isa, &tiles[t])))
        return 0;
    assert_int_equal(qw_gemm_fixed_force_isa(isa, NULL), QS_OK);
    if (t >= 0) assert_int_equal(qw_gemm_fixed_force_tile(&tiles[t], NULL), QS_OK);
    return 1;
}

/* op(B) packed once by qw_gemm_fixed_pack_b holds op(B)[k][j] at panel j/16, row k, lane j%16
 * and zeros past N; qw_gemm_fixed_packed over it gives the written-out chain's bits on every
 * path, under every tile of the table above's kinds (K blocks that split the packed panels
 * included), for both transposes of A and of the B it was packed from. */
static void test_a_packed_operand_gives_the_chain_bit_for_bit(void **state) {
    (void)state;
    static const qw_gemm_tile tiles[] = {{6, 4, 256}, {6, 4, 7},   {8, 3, 128},
                                         {12, 2, 33}, {6, 1, 256}, {4, 2, 1}};
    enum { NT = sizeof tiles / sizeof tiles[0] };
    int ran = 0;
    for (int tb = 0; tb < 2; tb++)
        for (int s = 0; s < N_SHAPES; s++) {
            problem p;
            problem_make(&p, 0, tb, shapes[s], 1.0f, 0.0f);
            size_t floats = qw_gemm_fixed_packed_floats(p.N, p.K);
            assert_int_equal(floats, (size_t)((p.N + 15) / 16) * 16 * p.K);
            float *Bp = malloc(floats * sizeof *Bp);
            assert_non_null(Bp);
            memset(Bp, 0xff, floats * sizeof *Bp); /* NaN: a lane left unwritten would show */
            qw_gemm_fixed_pack_b(tb, p.N, p.K, p.B, p.ldb, Bp);
            for (int j = 0; j < (p.N + 15) / 16 * 16; j++)
                for (int k = 0; k < p.K; k++) {
                    float want = j >= p.N ? 0.0f
                                 : tb     ? p.B[(size_t)j * p.ldb + k]
                                          : p.B[(size_t)k * p.ldb + j];
                    float got = Bp[(size_t)(j / 16) * p.K * 16 + (size_t)k * 16 + j % 16];
                    if (memcmp(&got, &want, sizeof got) != 0)
                        fail_msg("tb %d N %d K %d: packed (k %d, j %d) is %a, op(B) %a", tb, p.N,
                                 p.K, k, j, (double)got, (double)want);
                }
            for (int ta = 0; ta < 2; ta++)
                for (int c = 0; c < N_SCALARS; c++) {
                    problem q;
                    rng = 777u + (uint32_t)(s * 8 + c);
                    problem_make(&q, ta, tb, shapes[s], scalars[c][0], scalars[c][1]);
                    memcpy(q.B, p.B, (size_t)(tb ? p.N : p.K) * p.ldb * sizeof *q.B);
                    float *want = run_chain(&q);
                    size_t n = (size_t)q.M * q.ldc;
                    float *got = malloc(n * sizeof *got);
                    assert_non_null(got);
                    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
                        for (int t = -1; t < NT; t++) {
                            if (!force_path_tile(isas[ii], t, tiles)) continue;
                            memcpy(got, q.C0, n * sizeof *got);
                            qw_gemm_fixed_packed(ta, q.M, q.N, q.K, q.alpha, q.A, q.lda, Bp, q.beta,
                                                 got, q.ldc);
                            if (memcmp(got, want, n * sizeof *got) != 0)
                                fail_msg("%s tile %d: ta %d tb %d M %d N %d K %d alpha %g beta "
                                         "%g: packed operand not the chain's bits",
                                         qw_gemm_isa_name(isas[ii]), t, ta, tb, q.M, q.N, q.K,
                                         (double)q.alpha, (double)q.beta);
                            assert_int_equal(qw_gemm_fixed_force_tile(NULL, NULL), QS_OK);
                            ran++;
                        }
                    }
                    free(got);
                    free(want);
                    problem_free(&q);
                }
            free(Bp);
            problem_free(&p);
        }
    printf("ok packed operand: %d problems bit for bit\n", ran);
    assert_true(ran >= 2 * N_SHAPES * 2 * N_SCALARS);
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

/* A K range of an operand packed once (qw_gemm_fixed_packed_rows, as attention's query tiles
 * use the keys up to their last): rows k0 .. k0+K-1 of op(B) [Kw x Nw] packed whole, the first N
 * of its columns, give the written-out chain's bits over that range on every path and tile, for
 * both transposes of A and of the B it was packed from, the range starting in and across K
 * blocks and ending before, on or past a panel's last filled column. */
static void test_a_k_range_of_a_packing_gives_the_chain_bit_for_bit(void **state) {
    (void)state;
    static const qw_gemm_tile tiles[] = {{6, 4, 256}, {6, 4, 7}, {8, 3, 128}, {6, 1, 256}};
    static const int ranges[][3] = {/* Kw, Nw, k0 (K and N run over several values; M 13) */
                                    {128, 40, 0}, {128, 40, 32},  {128, 40, 96},
                                    {300, 33, 7}, {300, 33, 260}, {19, 17, 5}};
    enum { NT = sizeof tiles / sizeof tiles[0], NR = sizeof ranges / sizeof ranges[0] };
    const int M = 13;
    int ran = 0;
    for (int tb = 0; tb < 2; tb++)
        for (int r = 0; r < NR; r++) {
            int Kw = ranges[r][0], Nw = ranges[r][1], k0 = ranges[r][2];
            int ldb = tb ? Kw : Nw;
            float *B = malloc((size_t)Kw * Nw * sizeof *B);
            float *Bp = malloc(qw_gemm_fixed_packed_floats(Nw, Kw) * sizeof *Bp);
            assert_non_null(B);
            assert_non_null(Bp);
            fill(B, (size_t)Kw * Nw);
            qw_gemm_fixed_pack_b(tb, Nw, Kw, B, ldb, Bp);
            for (int K = 1; k0 + K <= Kw; K = K < 16 ? K + 15 : K * 2)
                for (int N = Nw; N >= 1; N = N > 16 ? 16 : N > 9 ? 9 : 0)
                    for (int ta = 0; ta < 2; ta++) {
                        int lda = ta ? M : K;
                        float *A = malloc((size_t)M * K * sizeof *A);
                        float *want = malloc((size_t)M * N * sizeof *want);
                        float *got = malloc((size_t)M * N * sizeof *got);
                        assert_non_null(A);
                        assert_non_null(want);
                        assert_non_null(got);
                        fill(A, (size_t)M * K);
                        fill(want, (size_t)M * N);
                        memcpy(got, want, (size_t)M * N * sizeof *got);
                        /* op(B) rows k0..: B's rows k0.. (no transpose) or columns k0.. */
                        const float *Bk = tb ? B + k0 : B + (size_t)k0 * ldb;
                        chain_reference(ta, tb, M, N, K, 0.5f, A, lda, Bk, ldb, 1.0f, want, N);
                        float *c0 = malloc((size_t)M * N * sizeof *c0);
                        assert_non_null(c0);
                        memcpy(c0, got, (size_t)M * N * sizeof *c0);
                        for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
                            for (int t = -1; t < NT; t++) {
                                if (!force_path_tile(isas[ii], t, tiles)) continue;
                                memcpy(got, c0, (size_t)M * N * sizeof *got);
                                qw_gemm_fixed_packed_rows(ta, M, N, K, 0.5f, A, lda,
                                                          Bp + (size_t)k0 * 16, Kw, 1.0f, got, N);
                                if (memcmp(got, want, (size_t)M * N * sizeof *got) != 0)
                                    fail_msg("%s tile %d: ta %d tb %d rows %d..%d of %d, N %d of "
                                             "%d: not the chain's bits",
                                             qw_gemm_isa_name(isas[ii]), t, ta, tb, k0, k0 + K - 1,
                                             Kw, N, Nw);
                                assert_int_equal(qw_gemm_fixed_force_tile(NULL, NULL), QS_OK);
                                ran++;
                            }
                        }
                        free(A), free(want), free(got), free(c0);
                    }
            free(B), free(Bp);
        }
    printf("ok K ranges of a packing: %d problems bit for bit\n", ran);
    assert_true(ran >= 2 * NR * 2);
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

/* The tile choice is a pure function of (path, 512-bit FMA ports), and every tile it names has a
 * microkernel: enough independent chains for FMA latency 4 times the ports (16 floats a zmm
 * chain, 8 a ymm one, two 256-bit pipes on every AVX2 core), a K block within the buffer, and on
 * a two-port core a packed panel group (panels x K block x 64 bytes) within half of a 48 KiB
 * L1D. Whatever this CPU measured, the tile in use is the function of its path and count. */
static void test_the_tile_choice_is_a_function_of_path_and_ports(void **state) {
    (void)state;
    for (int ports = 1; ports <= 2; ports++) {
        qw_gemm_tile t = qw_gemm_fixed_tile_for(QW_GEMM_ISA_AVX512, ports);
        qw_gemm_tile again = qw_gemm_fixed_tile_for(QW_GEMM_ISA_AVX512, ports);
        assert_memory_equal(&t, &again, sizeof t);
        assert_true(qw_gemm_fixed_tile_supported(QW_GEMM_ISA_AVX512, &t) ||
                    !qw_gemm_fixed_isa_supported(QW_GEMM_ISA_AVX512));
        assert_true(t.mr * t.panels >= 4 * ports);
        assert_true(t.kc >= 1 && t.kc <= QW_GEMM_FIXED_KC);
        if (ports == 2) assert_true((size_t)t.panels * t.kc * 64 <= 24 * 1024);
        printf("avx512, %d port%s: tile %d x %d, K block %d\n", ports, ports > 1 ? "s" : "", t.mr,
               t.panels * 16, t.kc);
        qw_gemm_tile a = qw_gemm_fixed_tile_for(QW_GEMM_ISA_AVX2, ports);
        assert_int_equal(a.panels, 1);
        assert_true(a.mr * 2 >= 4 * 2);
        qw_gemm_tile none = qw_gemm_fixed_tile_for(QW_GEMM_ISA_SCALAR, ports);
        assert_int_equal(none.mr, 0);
    }
    qw_gemm_tile one = qw_gemm_fixed_tile_for(QW_GEMM_ISA_AVX512, 1),
                 two = qw_gemm_fixed_tile_for(QW_GEMM_ISA_AVX512, 2);
    assert_true(memcmp(&one, &two, sizeof one) != 0);
    int ports = qw_gemm_fixed_fma_ports();
    assert_true(ports == 1 || ports == 2);
    for (size_t ii = 1; ii < sizeof isas / sizeof isas[0]; ii++) {
        if (!qw_gemm_fixed_isa_supported(isas[ii])) continue;
        assert_int_equal(qw_gemm_fixed_force_isa(isas[ii], NULL), QS_OK);
        qw_gemm_tile now = qw_gemm_fixed_tile(), want = qw_gemm_fixed_tile_for(isas[ii], ports);
        assert_memory_equal(&now, &want, sizeof now);
    }
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

/* A tile no microkernel has is refused with its shape named, and the choice is left as it was. */
static void test_forcing_a_missing_tile_is_refused(void **state) {
    (void)state;
    static const qw_gemm_tile bad[] = {
        {5, 2, 64}, {6, 5, 64}, {12, 3, 64}, {6, 4, 0}, {6, 4, QW_GEMM_FIXED_KC + 1}};
    qw_gemm_tile before = qw_gemm_fixed_tile();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qs_error err = {0};
        assert_int_equal(qw_gemm_fixed_force_tile(&bad[i], &err), QS_EINVAL);
        char want[64];
        snprintf(want, sizeof want, "%d x %d-panel tile with K block %d", bad[i].mr, bad[i].panels,
                 bad[i].kc);
        assert_non_null(strstr(err.msg, want));
        qw_gemm_tile now = qw_gemm_fixed_tile();
        assert_memory_equal(&now, &before, sizeof now);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_isa_gives_the_chain_bit_for_bit),
        cmocka_unit_test(test_within_the_fma_chain_bound_of_double),
        cmocka_unit_test(test_pieces_and_threads_do_not_change_bits),
        cmocka_unit_test(test_engine_gemms_under_the_fixed_selection),
        cmocka_unit_test(test_row_blocks_under_every_chosen_tile),
        cmocka_unit_test(test_forcing_a_missing_isa_is_refused),
        cmocka_unit_test(test_every_tile_gives_the_chain_bit_for_bit),
        cmocka_unit_test(test_a_packed_operand_gives_the_chain_bit_for_bit),
        cmocka_unit_test(test_a_k_range_of_a_packing_gives_the_chain_bit_for_bit),
        cmocka_unit_test(test_the_tile_choice_is_a_function_of_path_and_ports),
        cmocka_unit_test(test_forcing_a_missing_tile_is_refused),
    };
    qw_gemm_tile t = qw_gemm_fixed_tile();
    printf("gemm_fixed: the CPU's own path is %s, 512-bit FMA ports %d, tile %d x %d, K block %d\n",
           qw_gemm_isa_name(qw_gemm_fixed_isa()), qw_gemm_fixed_fma_ports(), t.mr, t.panels * 16,
           t.kc);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
