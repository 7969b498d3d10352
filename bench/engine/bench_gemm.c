/* bench_gemm: qsweep's fixed-order GEMM (worker/engine/gemm_fixed.h) against cblas_sgemm on the
 * engine's GEMM shapes, at 1 thread or more, side by side in one run, with the core's FP32 FMA
 * peak (fma_peak.h) measured in the same run.
 *
 * Shapes: SmolLM2-135M's at T tokens (default 512): dim 576, hidden 1536, kv 192 (3 heads x
 * 64), vocab 49152; the linears y[T x out] = x[T x in] W^T cut into the engine's pieces of
 * QW_GEMM_COLS (128) output columns, one call each, as worker/engine/ops_cpu.c runs them; lm_head
 * on the scored half of the chunk (T/2 rows); attention's last query tile (64 rows against T keys:
 * S = Q K^T, then P V). The "forward" row weights the shapes as one forward runs them (per block:
 * q, k, v, o, gate, up, down and every head's attention tiles; lm_head once).
 *
 * Each shape is run for both GEMMs alternately, REPS rounds; every call is timed, and a shape's
 * time is the sum of its calls' best times over the rounds (with threads, spread over them
 * longest first), so a preemption on a shared machine spoils one call of one round, not the shape.
 * The ratio is fixed over OpenBLAS GFLOP/s (> 1: the fixed GEMM is faster). With THREADS > 1 a
 * linear's pieces are split between THREADS OpenMP threads, and their rows too where the engine
 * splits them (fewer than 4 pieces a thread), each call single-threaded (OpenBLAS's own threads
 * off); attention's tile runs whole, one copy per thread at once (the engine's heads). OpenBLAS's
 * kernel family is its choice for this CPU unless OPENBLAS_CORETYPE says otherwise: run it as the
 * environment is and with `env -u OPENBLAS_CORETYPE` to see both. The fixed GEMM's path, the
 * 512-bit FMA port count it measured (worker/engine/fma_ports.h) and the register tile it chose
 * from them are printed; --tile MRxPANELS/KC forces a tile (qw_gemm_fixed_force_tile) to compare
 * tiles on one CPU. The FMA peak at THREADS threads is measured before the shapes and again after
 * them; the larger is the one the ratios use, so a load that came and went lowers neither. Starts
 * and ends with the load average.
 *
 * Usage: bench_gemm [T=512] [reps=5] [threads=1] [--tile MRxPANELS/KC] */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fma_peak.h"
#include "fma_ports.h"
#include "loadavg.h"
#include "gemm_fixed.h"
#include "ops.h"

typedef struct gshape {
    const char *name;
    int M, N, K, transb; /* C[M x N] = A[M x K] op(B); transb 1: B [N x K] (W^T), 0: B [K x N] */
    int pieces;          /* 1: cut into QW_GEMM_COLS-column calls as the engine's linears */
    double per_forward;  /* how many of it one forward runs */
} gshape;

/* Row blocks per piece on nt threads, as worker/engine/ops_cpu.c's row_blocks splits a linear
 * under the fixed GEMM: with fewer than 4 pieces per thread, rows too, in blocks of at least 96
 * rows, so the threads get equal shares. */
static int row_blocks(const gshape *s, int npieces, int nt) {
    if (nt < 2 || !s->pieces) return 1;
    int want = (4 * nt + npieces - 1) / npieces, most = s->M / 96;
    return want < 1 ? 1 : want < most ? want : most < 1 ? 1 : most;
}

/* Tasks of one pass: every piece's row blocks; an unpieced shape (attention's tile), one copy
 * per thread, as the engine runs heads in parallel. */
static int n_tasks(const gshape *s, int nt) {
    if (!s->pieces) return nt;
    int npieces = (s->N + QW_GEMM_COLS - 1) / QW_GEMM_COLS;
    return npieces * row_blocks(s, npieces, nt);
}

/* One pass over the shape: every task once (a piece's row block), as the engine schedules
 * them; task q's time lowers best[q] (when best is not NULL). Row blocks are multiples of the
 * fixed GEMM's tile height but the last. */
static void run(int fixed, const gshape *s, const float *A, const float *B, float *C, int nt,
                double *best) {
    int w = s->pieces ? QW_GEMM_COLS : s->N, npieces = s->pieces ? (s->N + w - 1) / w : nt;
    int nb = n_tasks(s, nt) / npieces, mr = qw_gemm_fixed_tile().mr;
    mr = mr > 0 ? mr : 1;
    int step = ((s->M + nb - 1) / nb + mr - 1) / mr * mr;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int q = 0; q < npieces * nb; q++) {
        int c0 = s->pieces ? q % npieces * w : 0, n = s->N - c0 < w ? s->N - c0 : w;
        int r0 = q / npieces * step, r1 = r0 + step < s->M ? r0 + step : s->M;
        if (r1 <= r0) continue;
        const float *a = A + (size_t)r0 * s->K;
        const float *b = s->transb ? B + (size_t)c0 * s->K : B + c0;
        float *c = C + (size_t)r0 * s->N + c0 + (s->pieces ? 0 : (size_t)q * s->M * s->N);
        int ldb = s->transb ? s->K : s->N;
        double t0 = qs_clock_s();
        if (fixed)
            qw_gemm_fixed(0, s->transb, r1 - r0, n, s->K, 1.0f, a, s->K, b, ldb, 0.0f, c, s->N);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, s->transb ? CblasTrans : CblasNoTrans, r1 - r0,
                        n, s->K, 1.0f, a, s->K, b, ldb, 0.0f, c, s->N);
        double dt = qs_clock_s() - t0;
        if (best && dt < best[q]) best[q] = dt;
    }
}

/* The shape's time from its tasks' best times: the longest thread when each task, longest
 * first, goes to the least loaded thread (what the engine's dynamic schedule approaches). */
static double shape_time(const double *best, int ntasks, int nt) {
    double load[64] = {0}, worst = 0.0;
    nt = nt < 64 ? nt : 64;
    char *done = calloc((size_t)ntasks, 1);
    for (int n = 0; done && n < ntasks; n++) {
        int q = -1, t = 0;
        for (int i = 0; i < ntasks; i++)
            if (!done[i] && (q < 0 || best[i] > best[q])) q = i;
        for (int i = 1; i < nt; i++)
            t = load[i] < load[t] ? i : t;
        done[q] = 1;
        load[t] += best[q];
        worst = load[t] > worst ? load[t] : worst;
    }
    free(done);
    return worst;
}

/* The best FMA peak at nt threads of the ISAs measured, printing each. */
static double peak_at(int nt, const char *when) {
    fma_peak pk[2];
    int npk = fma_peak_measure(nt, pk);
    double peak = 0.0;
    printf("FP32 FMA peak at %d thread%s, %s:", nt, nt > 1 ? "s" : "", when);
    for (int i = 0; i < npk; i++) {
        printf(" %s %.1f GF/s", pk[i].isa, pk[i].gflops);
        peak = pk[i].gflops > peak ? pk[i].gflops : peak;
    }
    printf("%s\n", npk ? "" : " not measured");
    return peak;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int pos[3] = {512, 5, 1}, npos = 0;
    qw_gemm_tile force = {0, 0, 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tile") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%d/%d", &force.mr, &force.panels, &force.kc) != 3) {
                fprintf(stderr, "bench_gemm: --tile '%s': expected MRxPANELS/KC\n", argv[i]);
                return 2;
            }
        } else if (npos < 3) {
            pos[npos++] = atoi(argv[i]);
        } else {
            npos = 4;
        }
    }
    int T = pos[0], reps = pos[1], nt = pos[2];
    if (T < 2 || reps < 1 || nt < 1 || npos > 3) {
        fprintf(stderr, "usage: bench_gemm [T>=2] [reps>=1] [threads>=1] [--tile MRxPANELS/KC]\n");
        return 2;
    }
    if (force.mr > 0) {
        qs_error err = {0};
        if (qw_gemm_fixed_force_tile(&force, &err) != QS_OK) {
            fprintf(stderr, "bench_gemm: --tile: %s\n", err.msg);
            return 2;
        }
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
        size_t c = (size_t)s->M * s->N * (s->pieces ? 1 : nt); /* a copy per thread */
        if (c > cmax) cmax = c;
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
    qw_fma_probe fp = qw_fma_ports();
    qw_gemm_tile tl = qw_gemm_fixed_tile();
    printf("fixed-order GEMM path: %s; 512-bit FMA ports %d (measured: zmm/ymm FLOP rate %.2f); "
           "tile %d x %d (%d panels), K block %d%s\n",
           qw_gemm_isa_name(qw_gemm_fixed_isa()), fp.ports, fp.zmm_vs_ymm, tl.mr, tl.panels * 16,
           tl.panels, tl.kc, force.mr > 0 ? " (forced)" : "");
    printf("%d thread%s; T %d; best of %d alternating rounds\n", nt, nt > 1 ? "s" : "", T, reps);
    double peak = peak_at(nt, "before");
    double best[NS][2];
    for (int i = 0; i < NS; i++) {
        const gshape *s = &shapes[i];
        int ntasks = n_tasks(s, nt);
        double *pb = malloc(2 * (size_t)ntasks * sizeof *pb);
        if (!pb) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        for (int q = 0; q < 2 * ntasks; q++)
            pb[q] = 1e30;
        run(0, s, A, B, C, nt, NULL); /* warm-up: pages, caches */
        run(1, s, A, B, C, nt, NULL);
        for (int r = 0; r < reps; r++)
            for (int fixed = 0; fixed < 2; fixed++)
                run(fixed, s, A, B, C, nt, pb + fixed * ntasks);
        for (int fixed = 0; fixed < 2; fixed++)
            best[i][fixed] = shape_time(pb + fixed * ntasks, ntasks, nt);
        free(pb);
    }
    double after = peak_at(nt, "after");
    peak = after > peak ? after : peak;
    printf("\n%-20s %5s %6s %5s %4s %13s %10s %14s %13s %10s\n", "shape", "M", "N", "K", "op",
           "openblas GF/s", "fixed GF/s", "fixed/openblas", "openblas/peak", "fixed/peak");
    double fw_flops = 0.0, fw_blas = 0.0, fw_fixed = 0.0; /* one forward's FLOPs and seconds */
    for (int i = 0; i < NS; i++) {
        const gshape *s = &shapes[i];
        double fl = 2.0 * s->M * s->N * s->K * (s->pieces ? 1 : nt);
        double gb = fl / best[i][0] * 1e-9, gx = fl / best[i][1] * 1e-9;
        printf("%-20s %5d %6d %5d %4s %13.1f %10.1f %14.3f %13.3f %10.3f\n", s->name, s->M, s->N,
               s->K, s->transb ? "A B^T" : "A B", gb, gx, gx / gb, peak > 0 ? gb / peak : 0.0,
               peak > 0 ? gx / peak : 0.0);
        int copies = s->pieces ? 1 : nt;
        fw_flops += s->per_forward * fl / copies;
        fw_blas += s->per_forward * best[i][0] / copies;
        fw_fixed += s->per_forward * best[i][1] / copies;
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
