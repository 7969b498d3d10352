/* The fixed-order FP32 GEMM (gemm_fixed.h): a scalar reference, and AVX2 and AVX-512 paths
 * that pack op(B) into 16-column panels and run a register-blocked microkernel over them, each
 * lane one FMA chain over k in order. */
#include "gemm_fixed.h"

#include "fma_ports.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum {
    MAX_MR = 12,   /* rows of C per microkernel, at most */
    PW = 16,       /* columns per packed panel */
    MAX_PANELS = 4 /* panels per microkernel, at most (AVX-512: 4 x 16 = 64 columns) */
};

/* ---------------------------------------------------------------- ISA choice */

static qw_gemm_isa best_isa = QW_GEMM_ISA_SCALAR;
static qw_gemm_isa forced_isa = QW_GEMM_ISA_AUTO;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

static void detect(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        best_isa = QW_GEMM_ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best_isa = QW_GEMM_ISA_AVX2;
#endif
}

int qw_gemm_fixed_isa_supported(qw_gemm_isa isa) {
    pthread_once(&detect_once, detect);
    switch (isa) {
    case QW_GEMM_ISA_AUTO:
    case QW_GEMM_ISA_SCALAR:
        return 1;
    case QW_GEMM_ISA_AVX2:
        return best_isa >= QW_GEMM_ISA_AVX2;
    case QW_GEMM_ISA_AVX512:
        return best_isa >= QW_GEMM_ISA_AVX512;
    }
    return 0;
}

qs_status qw_gemm_fixed_force_isa(qw_gemm_isa isa, qs_error *err) {
    if (!qw_gemm_fixed_isa_supported(isa))
        return qs_error_set(err, QS_EINVAL, "gemm_fixed: this CPU has no %s path",
                            qw_gemm_isa_name(isa));
    forced_isa = isa;
    return QS_OK;
}

qw_gemm_isa qw_gemm_fixed_isa(void) {
    pthread_once(&detect_once, detect);
    return forced_isa != QW_GEMM_ISA_AUTO ? forced_isa : best_isa;
}

const char *qw_gemm_isa_name(qw_gemm_isa isa) {
    switch (isa) {
    case QW_GEMM_ISA_AUTO:
        return "auto";
    case QW_GEMM_ISA_SCALAR:
        return "scalar";
    case QW_GEMM_ISA_AVX2:
        return "avx2";
    case QW_GEMM_ISA_AVX512:
        return "avx512";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- scalar reference */

/* The definition itself, element by element (gemm_fixed.h). */
static void gemm_scalar(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    ptrdiff_t ars = transa ? 1 : lda, aks = transa ? lda : 1;
    ptrdiff_t bks = transb ? 1 : ldb, bjs = transb ? ldb : 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *cij = C + (size_t)i * ldc + j;
            float c = beta == 0.0f ? 0.0f : beta * *cij;
            const float *a = A + i * ars, *b = B + j * bjs;
            for (int k = 0; k < K; k++)
                c = fmaf(a[k * aks], b[k * bks], c);
            *cij = alpha == 1.0f ? c : alpha * c;
        }
}

/* ---------------------------------------------------------------- packing */

#if defined(__x86_64__)
/* 16 rows of 16 floats at src (row stride lds) into dst as their transpose, [16][16]: a data
 * move, so the GEMM's bits do not depend on it; it packs a full panel of a K-contiguous op(B)
 * in about a quarter of the scalar copy's time (unpack, then shuffles across 128-bit lanes). */
__attribute__((target("avx512f"))) static void transpose16(float *dst, const float *src,
                                                           size_t lds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
            t[8 * i + j + 4] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        _mm512_storeu_ps(dst + j * PW, _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88));
        _mm512_storeu_ps(dst + (j + 8) * PW, _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd));
    }
}
#endif

/* op(B) rows k0 .. k0+kc-1, columns j0 .. j0+nb-1 into ceil(nb/16) panels of [kc][16] floats
 * at dst (panel p at dst + p*kc*16), columns past nb zero. wide: full panels of a
 * K-contiguous op(B) go through transpose16 (AVX-512F CPUs). */
static void pack_b(float *dst, int transb, const float *B, int ldb, int k0, int kc, int j0, int nb,
                   int wide) {
    int np = (nb + PW - 1) / PW;
    for (int p = 0; p < np; p++) {
        float *d = dst + (size_t)p * kc * PW;
        int jn = nb - p * PW < PW ? nb - p * PW : PW, jb = j0 + p * PW;
        if (transb) {
            const float *s[PW];
            for (int jj = 0; jj < jn; jj++)
                s[jj] = B + (size_t)(jb + jj) * ldb + k0;
            int k = 0;
#if defined(__x86_64__)
            if (wide && jn == PW)
                for (; k + PW <= kc; k += PW)
                    transpose16(d + (size_t)k * PW, s[0] + k, (size_t)ldb);
#else
            (void)wide;
#endif
            for (; k < kc; k++) {
                for (int jj = 0; jj < jn; jj++)
                    d[(size_t)k * PW + jj] = s[jj][k];
                for (int jj = jn; jj < PW; jj++)
                    d[(size_t)k * PW + jj] = 0.0f;
            }
        } else {
            for (int k = 0; k < kc; k++) {
                memcpy(d + (size_t)k * PW, B + (size_t)(k0 + k) * ldb + jb, (size_t)jn * sizeof *d);
                for (int jj = jn; jj < PW; jj++)
                    d[(size_t)k * PW + jj] = 0.0f;
            }
        }
    }
}

/* ---------------------------------------------------------------- microkernels */

#if defined(__x86_64__)

/* A microkernel: C tile [MR x np*16] at c (row stride ldc) over one K block of kc, op(A)'s rows
 * at a + r*rs (r < mr; rows mr..MR-1 repeat row mr-1, their results land in the caller's
 * discarded tile rows), element k of a row at k*ks; packed panels at b (panel p at b + p*ps,
 * its row k at k*16). load: 0 starts every chain at 0, 1 at C, 2 at beta * C; post != 1
 * multiplies the final chain value (alpha, on the last K block). MR is the kernel's own. */
typedef void (*kern_fn)(int kc, int mr, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *b,
                        ptrdiff_t ps, float *c, ptrdiff_t ldc, int load, float beta, float post);

/* AVX-512: MR rows x np zmm (np <= 4), MR x np accumulators, each one chain. */
__attribute__((target("avx512f"), always_inline)) static inline void
kern512(const int MR, const int np, int kc, int mr, const float *a, ptrdiff_t rs, ptrdiff_t ks,
        const float *b, ptrdiff_t ps, float *c, ptrdiff_t ldc, int load, float beta, float post) {
    const float *ar[MAX_MR];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
        ar[r] = a + (r < mr ? r : mr - 1) * rs;
    __m512 acc[MAX_MR][MAX_PANELS];
    __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            __m512 v = _mm512_setzero_ps();
            if (load) v = _mm512_loadu_ps(c + r * ldc + p * PW);
            if (load == 2) v = _mm512_mul_ps(vb, v);
            acc[r][p] = v;
        }
    /* The hot loop: per k, np panel vectors times MR broadcasts, one FMA per accumulator. */
    for (int k = 0; k < kc; k++) {
        __m512 bv[MAX_PANELS];
#pragma GCC unroll 4
        for (int p = 0; p < np; p++)
            bv[p] = _mm512_loadu_ps(b + p * ps + (size_t)k * PW);
        ptrdiff_t ko = k * ks;
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            __m512 av = _mm512_set1_ps(ar[r][ko]);
#pragma GCC unroll 4
            for (int p = 0; p < np; p++)
                acc[r][p] = _mm512_fmadd_ps(av, bv[p], acc[r][p]);
        }
    }
    __m512 vp = _mm512_set1_ps(post);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            __m512 v = acc[r][p];
            if (post != 1.0f) v = _mm512_mul_ps(vp, v);
            _mm512_storeu_ps(c + r * ldc + p * PW, v);
        }
}

#define KERN512(R, NP)                                                                             \
    __attribute__((target("avx512f"))) static void kern512_##R##_##NP(                             \
        int kc, int mr, const float *a, ptrdiff_t rs, ptrdiff_t ks, const float *b, ptrdiff_t ps,  \
        float *c, ptrdiff_t ldc, int load, float beta, float post) {                               \
        kern512(R, NP, kc, mr, a, rs, ks, b, ps, c, ldc, load, beta, post);                        \
    }
KERN512(4, 1)
KERN512(4, 2)
KERN512(4, 3)
KERN512(4, 4)
KERN512(6, 1)
KERN512(6, 2)
KERN512(6, 3)
KERN512(6, 4)
KERN512(8, 1)
KERN512(8, 2)
KERN512(8, 3)
KERN512(12, 1)
KERN512(12, 2)

/* AVX2: 6 rows x one panel (2 ymm), 12 accumulators. */
__attribute__((target("avx2,fma"))) static void kern256(int kc, int mr, const float *a,
                                                        ptrdiff_t rs, ptrdiff_t ks, const float *b,
                                                        ptrdiff_t ps, float *c, ptrdiff_t ldc,
                                                        int load, float beta, float post) {
    enum { MR = 6 };
    (void)ps;
    const float *ar[MR];
    for (int r = 0; r < MR; r++)
        ar[r] = a + (r < mr ? r : mr - 1) * rs;
    __m256 acc[MR][2];
    __m256 vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256 v = _mm256_setzero_ps();
            if (load) v = _mm256_loadu_ps(c + r * ldc + h * 8);
            if (load == 2) v = _mm256_mul_ps(vb, v);
            acc[r][h] = v;
        }
    /* The hot loop: per k, 2 panel vectors times 6 broadcasts. */
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b + (size_t)k * PW),
               b1 = _mm256_loadu_ps(b + (size_t)k * PW + 8);
        ptrdiff_t ko = k * ks;
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 av = _mm256_set1_ps(ar[r][ko]);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    __m256 vp = _mm256_set1_ps(post);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256 v = acc[r][h];
            if (post != 1.0f) v = _mm256_mul_ps(vp, v);
            _mm256_storeu_ps(c + r * ldc + h * 8, v);
        }
}

/* One microkernel family: the path, its rows, and kern[n-1] taking n <= panels panels. */
typedef struct kern_set {
    qw_gemm_isa isa;
    int mr, panels;
    kern_fn kern[MAX_PANELS];
} kern_set;

static const kern_set kern_sets[] = {
    {QW_GEMM_ISA_AVX512, 4, 4, {kern512_4_1, kern512_4_2, kern512_4_3, kern512_4_4}},
    {QW_GEMM_ISA_AVX512, 6, 4, {kern512_6_1, kern512_6_2, kern512_6_3, kern512_6_4}},
    {QW_GEMM_ISA_AVX512, 8, 3, {kern512_8_1, kern512_8_2, kern512_8_3, NULL}},
    {QW_GEMM_ISA_AVX512, 12, 2, {kern512_12_1, kern512_12_2, NULL, NULL}},
    {QW_GEMM_ISA_AVX2, 6, 1, {kern256, NULL, NULL, NULL}},
};
enum { N_KERN_SETS = sizeof kern_sets / sizeof kern_sets[0] };

/* The family running tile on isa, or NULL. */
static const kern_set *kern_set_for(qw_gemm_isa isa, const qw_gemm_tile *t) {
    if (t->kc < 1 || t->kc > QW_GEMM_FIXED_KC || t->panels < 1) return NULL;
    for (int i = 0; i < N_KERN_SETS; i++)
        if (kern_sets[i].isa == isa && kern_sets[i].mr == t->mr && t->panels <= kern_sets[i].panels)
            return &kern_sets[i];
    return NULL;
}

/* ---------------------------------------------------------------- blocked driver */

/* The vector paths: per N block of NC columns and K block of kc, op(B) packed once (or read
 * from Bp, op(B) already packed whole with bkw >= K rows a panel: panel p at Bp + p*bkw*16), then
 * per group of t.panels panels every t.mr-row block of A over it: the group's packed panels
 * (t.panels x kc x 64 bytes) stay in L1, where they fit, while op(A)'s rows stream past. Edge tiles
 * (fewer than mr rows or a partly filled last panel) run in a local tile and are copied out. */
static void gemm_blocked(const kern_set *set, qw_gemm_tile t, int wide, int transa, int transb,
                         int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                         int ldb, const float *Bp, int bkw, float beta, float *C, int ldc) {
    _Alignas(64) float pack[QW_GEMM_FIXED_KC * QW_GEMM_FIXED_NC];
    _Alignas(64) float tile[MAX_MR * MAX_PANELS * PW];
    const int MR = t.mr, kw = t.panels;
    ptrdiff_t rs = transa ? 1 : lda, ks = transa ? lda : 1;
    for (int j0 = 0; j0 < N; j0 += QW_GEMM_FIXED_NC) {
        int nb = N - j0 < QW_GEMM_FIXED_NC ? N - j0 : QW_GEMM_FIXED_NC;
        int np = (nb + PW - 1) / PW;
        for (int k0 = 0; k0 < K; k0 += t.kc) {
            int kc = K - k0 < t.kc ? K - k0 : t.kc;
            const float *bk = pack;
            ptrdiff_t ps = (ptrdiff_t)kc * PW;
            if (Bp) {
                ps = (ptrdiff_t)bkw * PW;
                bk = Bp + (size_t)(j0 / PW) * ps + (size_t)k0 * PW;
            } else {
                pack_b(pack, transb, B, ldb, k0, kc, j0, nb, wide);
            }
            int load = k0 > 0 ? 1 : beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
            float post = k0 + kc == K ? alpha : 1.0f;
            for (int p0 = 0; p0 < np; p0 += kw) {
                int pn = np - p0 < kw ? np - p0 : kw;
                int cols = nb - p0 * PW < pn * PW ? nb - p0 * PW : pn * PW;
                const float *bp = bk + (size_t)p0 * ps;
                kern_fn kern = set->kern[pn - 1];
                for (int i0 = 0; i0 < M; i0 += MR) {
                    int mr = M - i0 < MR ? M - i0 : MR;
                    const float *a = A + (size_t)i0 * rs + (size_t)k0 * ks;
                    float *cp = C + (size_t)i0 * ldc + j0 + p0 * PW;
                    if (mr == MR && cols == pn * PW) {
                        kern(kc, mr, a, rs, ks, bp, ps, cp, ldc, load, beta, post);
                        continue;
                    }
                    int tw = pn * PW;
                    for (int r = 0; r < MR; r++)
                        for (int j = 0; j < tw; j++)
                            tile[r * tw + j] =
                                load && r < mr && j < cols ? cp[(size_t)r * ldc + j] : 0.0f;
                    kern(kc, mr, a, rs, ks, bp, ps, tile, tw, load, beta, post);
                    for (int r = 0; r < mr; r++)
                        memcpy(cp + (size_t)r * ldc, tile + r * tw, (size_t)cols * sizeof *cp);
                }
            }
        }
    }
}

#endif

/* ---------------------------------------------------------------- tile choice */

qw_gemm_tile qw_gemm_fixed_tile_for(qw_gemm_isa isa, int fma_ports) {
    switch (isa) {
    case QW_GEMM_ISA_AVX512:
        /* 24 chains either way, 3 to 6 times latency (4) x ports. One port: 6 x 64, the fewest
         * loads per FMA (10 per 24) and the longest K block (fewest C round trips); a packed
         * group (64 KiB) streams from L2 at 4 vectors per 24 cycles, which L2 keeps up with.
         * Two ports: the same stream would be twice as fast, so the group stays in L1: 8 x 48
         * of K 128 is 24 KiB, half of a 48 KiB L1D, at 11 loads per 24 FMAs (under 1 load a
         * cycle); and 8 rows divide the engine's T and attention's 64-row tiles. */
        return fma_ports >= 2 ? (qw_gemm_tile){8, 3, 128} : (qw_gemm_tile){6, 4, 256};
    case QW_GEMM_ISA_AVX2:
        /* 12 chains of 8 floats over two 256-bit pipes (latency 4-5 x 2 needs 8-10). */
        return (qw_gemm_tile){6, 1, QW_GEMM_FIXED_KC};
    case QW_GEMM_ISA_AUTO:
    case QW_GEMM_ISA_SCALAR:
        break;
    }
    return (qw_gemm_tile){0, 0, 0};
}

static qw_gemm_tile forced_tile; /* mr 0: none */

int qw_gemm_fixed_fma_ports(void) {
    return qw_fma_ports().ports;
}

qw_gemm_tile qw_gemm_fixed_tile(void) {
    qw_gemm_isa isa = qw_gemm_fixed_isa();
    if (forced_tile.mr > 0 && qw_gemm_fixed_tile_supported(isa, &forced_tile)) return forced_tile;
    return qw_gemm_fixed_tile_for(isa, isa == QW_GEMM_ISA_AVX512 ? qw_gemm_fixed_fma_ports() : 1);
}

int qw_gemm_fixed_tile_supported(qw_gemm_isa isa, const qw_gemm_tile *tile) {
#if defined(__x86_64__)
    return kern_set_for(isa, tile) != NULL;
#else
    (void)isa;
    (void)tile;
    return 0;
#endif
}

qs_status qw_gemm_fixed_force_tile(const qw_gemm_tile *tile, qs_error *err) {
    if (!tile) {
        forced_tile = (qw_gemm_tile){0, 0, 0};
        return QS_OK;
    }
    qw_gemm_isa isa = qw_gemm_fixed_isa();
    if (!qw_gemm_fixed_tile_supported(isa, tile))
        return qs_error_set(err, QS_EINVAL,
                            "gemm_fixed: the %s path has no %d x %d-panel tile with K block %d",
                            qw_gemm_isa_name(isa), tile->mr, tile->panels, tile->kc);
    forced_tile = *tile;
    return QS_OK;
}

void qw_gemm_fixed(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    qw_gemm_isa isa = qw_gemm_fixed_isa();
#if defined(__x86_64__)
    if (K > 0 && isa != QW_GEMM_ISA_SCALAR) {
        qw_gemm_tile t = qw_gemm_fixed_tile();
        const kern_set *set = kern_set_for(isa, &t);
        if (set) {
            gemm_blocked(set, t, isa == QW_GEMM_ISA_AVX512, transa, transb, M, N, K, alpha, A, lda,
                         B, ldb, NULL, 0, beta, C, ldc);
            return;
        }
    }
#endif
    gemm_scalar(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

size_t qw_gemm_fixed_packed_floats(int N, int K) {
    return N > 0 && K > 0 ? (size_t)((N + PW - 1) / PW) * (size_t)K * PW : 0;
}

void qw_gemm_fixed_pack_b(int transb, int N, int K, const float *B, int ldb, float *dst) {
    if (N <= 0 || K <= 0) return;
    pack_b(dst, transb, B, ldb, 0, K, 0, N, qw_gemm_fixed_isa_supported(QW_GEMM_ISA_AVX512));
}

void qw_gemm_fixed_packed(int transa, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *Bp, float beta, float *C, int ldc) {
    qw_gemm_fixed_packed_rows(transa, M, N, K, alpha, A, lda, Bp, K, beta, C, ldc);
}

void qw_gemm_fixed_packed_rows(int transa, int M, int N, int K, float alpha, const float *A,
                               int lda, const float *Bp, int bkw, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    qw_gemm_isa isa = qw_gemm_fixed_isa();
#if defined(__x86_64__)
    if (K > 0 && isa != QW_GEMM_ISA_SCALAR) {
        qw_gemm_tile t = qw_gemm_fixed_tile();
        const kern_set *set = kern_set_for(isa, &t);
        if (set) {
            gemm_blocked(set, t, 0, transa, 0, M, N, K, alpha, A, lda, NULL, 0, Bp, bkw, beta, C,
                         ldc);
            return;
        }
    }
#endif
    /* The definition, element (k, j) of op(B) at panel j/16, row k, lane j%16. */
    ptrdiff_t ars = transa ? 1 : lda, aks = transa ? lda : 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *cij = C + (size_t)i * ldc + j;
            float c = beta == 0.0f ? 0.0f : beta * *cij;
            const float *a = A + i * ars, *b = Bp + (size_t)(j / PW) * bkw * PW + j % PW;
            for (int k = 0; k < K; k++)
                c = fmaf(a[k * aks], b[(size_t)k * PW], c);
            *cij = alpha == 1.0f ? c : alpha * c;
        }
}
