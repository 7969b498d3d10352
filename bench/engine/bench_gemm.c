/* bench_gemm: qsweep's fixed-order GEMM (worker/engine/gemm_fixed.h) against cblas_sgemm on the
 * engine's GEMM shapes, single-threaded, side by side in one run, with the core's FP32 FMA peak
 * (fma_peak.h) measured in the same run.
 *
 * Shapes: SmolLM2-135M's at T tokens (default 512): dim 576, hidden 1536, kv 192 (3 heads x
 * 64), vocab 49152; the linears y[T x out] = x[T x in] W^T cut into the engine's pieces of
 * QW_GEMM_COLS (128) output columns, one call each, as worker/engine/ops_cpu.c runs them; lm_head
 * on the scored half of the chunk (T/2 rows); attention's last query tile (64 rows against T keys:
 * S = Q K^T, then P V). The "forward" row weights the shapes as one forward runs them (per block:
 * q, k, v, o, gate, up, down and every head's attention tiles; lm_head once).
 *
 * Each shape is timed for both GEMMs alternately, REPS rounds, best round each; the ratio is
 * fixed over OpenBLAS GFLOP/s (> 1: the fixed GEMM is faster). OpenBLAS's kernel family is its
 * choice for this CPU unless OPENBLAS_CORETYPE says otherwise: run it as the environment is and
 * with `env -u OPENBLAS_CORETYPE` to see both. Starts and ends with the load average.
 *
 * Usage: bench_gemm [T=512] [reps=5] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fma_peak.h"
#include "loadavg.h"
#include "gemm_fixed.h"
#include "ops.h"

typedef struct gshape {
    const char *name;
    int M, N, K, transb; /* C[M x N] = A[M x K] op(B); transb 1: B [N x K] (W^T), 0: B [K x N] */
    int pieces;          /* 1: cut into QW_GEMM_COLS-column calls as the engine's linears */
    double per_forward;  /* how many of it one forward runs */
} gshape;

/* One pass over the shape: every piece once. */
static void run(int fixed, const gshape *s, const float *A, const float *B, float *C) {
    int w = s->pieces ? QW_GEMM_COLS : s->N;
    for (int c0 = 0; c0 < s->N; c0 += w) {
        int n = s->N - c0 < w ? s->N - c0 : w;
        const float *b = s->transb ? B + (size_t)c0 * s->K : B + c0;
        int ldb = s->transb ? s->K : s->N;
        if (fixed)
            qw_gemm_fixed(0, s->transb, s->M, n, s->K, 1.0f, A, s->K, b, ldb, 0.0f, C + c0, s->N);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, s->transb ? CblasTrans : CblasNoTrans, s->M, n,
                        s->K, 1.0f, A, s->K, b, ldb, 0.0f, C + c0, s->N);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int T = argc > 1 ? atoi(argv[1]) : 512, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (T < 2 || reps < 1) {
        fprintf(stderr, "usage: bench_gemm [T>=2] [reps>=1]\n");
        return 2;
    }
    enum { D = 576, F = 1536, KV = 192, V = 49152, E = 64, H = 9, L = 30, TILE = QW_ATT_TILE };
    double tiles = 0.0; /* query tiles per head, for the attention weights */
    for (int t0 = 0; t0 < T; t0 += TILE)
        tiles += 1.0;
    int keys = T; /* the last tile's keys */
    const gshape shapes[] = {
        {"q_proj, o_proj", T, D, D, 1, 1, 2.0 * L},
        {"k_proj, v_proj", T, KV, D, 1, 1, 2.0 * L},
        {"gate_proj, up_proj", T, F, D, 1, 1, 2.0 * L},
        {"down_proj", T, D, F, 1, 1, 1.0 * L},
        {"lm_head (T/2 rows)", T - T / 2, V, D, 1, 1, 1.0},
        {"attention Q K^T", T < TILE ? T : TILE, keys, E, 1, 0, 0.5 * H * L * tiles},
        {"attention P V", T < TILE ? T : TILE, E, keys, 0, 0, 0.5 * H * L * tiles},
    };
    enum { NS = sizeof shapes / sizeof shapes[0] };
    size_t amax = 0, bmax = 0, cmax = 0;
    for (int i = 0; i < NS; i++) {
        const gshape *s = &shapes[i];
        if ((size_t)s->M * s->K > amax) amax = (size_t)s->M * s->K;
        if ((size_t)s->N * s->K > bmax) bmax = (size_t)s->N * s->K;
        if ((size_t)s->M * s->N > cmax) cmax = (size_t)s->M * s->N;
    }
    float *A = malloc(amax * sizeof *A), *B = malloc(bmax * sizeof *B),
          *C = malloc(cmax * sizeof *C);
    if (!A || !B || !C) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < amax; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        A[i] = (float)(x >> 8) / 8388608.0f - 1.0f;
    }
    for (size_t i = 0; i < bmax; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        B[i] = ((float)(x >> 8) / 8388608.0f - 1.0f) * 0.05f;
    }
    openblas_set_num_threads(1);
    bench_print_loadavg("at start");
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS core %s (%s); OPENBLAS_CORETYPE %s\n", openblas_get_corename(),
           openblas_get_config(), coretype ? coretype : "unset");
    printf("fixed-order GEMM path: %s; 1 thread; T %d; best of %d alternating rounds\n",
           qw_gemm_isa_name(qw_gemm_fixed_isa()), T, reps);
    fma_peak pk[2];
    int npk = fma_peak_measure(1, pk);
    double peak = 0.0;
    printf("FP32 FMA peak at 1 thread:");
    for (int i = 0; i < npk; i++) {
        printf(" %s %.1f GF/s", pk[i].isa, pk[i].gflops);
        peak = pk[i].gflops > peak ? pk[i].gflops : peak;
    }
    printf("%s\n\n", npk ? "" : " not measured");
    printf("%-20s %5s %6s %5s %4s %13s %10s %14s %13s %10s\n", "shape", "M", "N", "K", "op",
           "openblas GF/s", "fixed GF/s", "fixed/openblas", "openblas/peak", "fixed/peak");
    double fw_flops = 0.0, fw_blas = 0.0, fw_fixed = 0.0; /* one forward's FLOPs and seconds */
    for (int i = 0; i < NS; i++) {
        const gshape *s = &shapes[i];
        double best[2] = {1e30, 1e30};
        run(0, s, A, B, C); /* warm-up: pages, caches */
        run(1, s, A, B, C);
        for (int r = 0; r < reps; r++)
            for (int fixed = 0; fixed < 2; fixed++) {
                double t0 = qs_clock_s();
                run(fixed, s, A, B, C);
                double dt = qs_clock_s() - t0;
                best[fixed] = dt < best[fixed] ? dt : best[fixed];
            }
        double fl = 2.0 * s->M * s->N * s->K, gb = fl / best[0] * 1e-9, gx = fl / best[1] * 1e-9;
        printf("%-20s %5d %6d %5d %4s %13.1f %10.1f %14.3f %13.3f %10.3f\n", s->name, s->M, s->N,
               s->K, s->transb ? "A B^T" : "A B", gb, gx, gx / gb, peak > 0 ? gb / peak : 0.0,
               peak > 0 ? gx / peak : 0.0);
        fw_flops += s->per_forward * fl;
        fw_blas += s->per_forward * best[0];
        fw_fixed += s->per_forward * best[1];
    }
    double gb = fw_flops / fw_blas * 1e-9, gx = fw_flops / fw_fixed * 1e-9;
    printf("%-20s %5s %6s %5s %4s %13.1f %10.1f %14.3f %13.3f %10.3f\n", "forward (weighted)", "",
           "", "", "", gb, gx, gx / gb, peak > 0 ? gb / peak : 0.0, peak > 0 ? gx / peak : 0.0);
    printf("\n(forward: the shapes weighted by how often one forward of T tokens runs them; "
           "attention weighted by its last tile's cost, half of which the mean tile has)\n");
    bench_print_loadavg("at end");
    free(A);
    free(B);
    free(C);
    return 0;
}
