/* The CPU engine's GEMM and exponential entries and their once-per-process choice
 * (gemm_cpu.h). */
#include "gemm_cpu.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "expf_fixed.h"
#include "gemm_fixed.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static qw_cpu_gemm kind = QW_CPU_GEMM_FIXED;
static int env_bad; /* QSWEEP_CPU_GEMM names no GEMM */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void read_env(void) {
    const char *v = getenv("QSWEEP_CPU_GEMM");
    if (!v || !*v || strcmp(v, "fixed") == 0)
        kind = QW_CPU_GEMM_FIXED;
    else if (strcmp(v, "openblas") == 0)
        kind = QW_CPU_GEMM_OPENBLAS;
    else
        env_bad = 1;
}

qw_cpu_gemm qw_cpu_gemm_kind(void) {
    pthread_once(&env_once, read_env);
    return kind;
}

qs_status qw_cpu_gemm_check(qs_error *err) {
    pthread_once(&env_once, read_env);
    if (env_bad)
        return qs_error_set(err, QS_EINVAL,
                            "QSWEEP_CPU_GEMM '%s': expected 'fixed' (the default) or 'openblas'",
                            getenv("QSWEEP_CPU_GEMM"));
    return QS_OK;
}

void qw_cpu_gemm_force(qw_cpu_gemm k) {
    pthread_once(&env_once, read_env);
    kind = k;
}

const char *qw_cpu_gemm_name(qw_cpu_gemm k) {
    return k == QW_CPU_GEMM_FIXED ? "fixed" : "openblas";
}

void qw_cpu_sgemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED) {
        qw_gemm_fixed(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

float qw_cpu_exp_shift_sum(float *x, size_t n, float shift) {
    if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED) return qw_expf_shift_sum(x, n, shift);
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - shift);
        sum += x[i];
    }
    return sum;
}

void qw_cpu_exp_shift_n(float *y, const float *x, size_t n, float shift) {
    if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED) {
        qw_expf_shift_n(y, x, n, shift);
        return;
    }
    for (size_t i = 0; i < n; i++)
        y[i] = expf(x[i] - shift);
}

void qw_cpu_silu_mul(float *out, const float *g, const float *u, size_t n) {
    if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED) {
        qw_silu_mul_n(out, g, u, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

#if defined(__x86_64__)
/* The largest of x[0..n-1] that is not a NaN, x[0] not one, n >= 16: 16 lanes of maxima
 * (each starting at x[0], so that no lane holds a NaN), then the lanes'. */
__attribute__((target("avx512f"))) static float max_avx512(const float *x, size_t n) {
    __m512 acc = _mm512_set1_ps(x[0]);
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        acc = _mm512_max_ps(_mm512_loadu_ps(x + j), acc); /* a NaN in x leaves acc */
    float m = _mm512_reduce_max_ps(acc);
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}
#endif

float qw_cpu_row_max(const float *x, size_t n) {
    float m = x[0];
    if (m != m) return m; /* a NaN first stays: nothing compares greater */
    size_t j = 1;
#if defined(__x86_64__)
    if (n >= 16 && __builtin_cpu_supports("avx512f")) {
        /* a NaN past x[0] never wins the scan, and max_ps skips it too; only the sign of a
         * zero maximum depends on order, settled below */
        m = max_avx512(x, n);
        j = n;
        if (m == 0.0f)
            for (size_t i = 0; i < n; i++)
                if (x[i] == 0.0f) return x[i]; /* the scan keeps the first zero */
    }
#endif
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

void qw_cpu_causal_softmax(float *S, int rows, int ncols, int t0, float *stats) {
    for (int r = 0; r < rows; r++) {
        float *row = S + (size_t)r * ncols;
        int last = t0 + r;
        float mx = qw_cpu_row_max(row, (size_t)last + 1);
        float inv = 1.0f / qw_cpu_exp_shift_sum(row, (size_t)last + 1, mx);
        if (stats) {
            stats[2 * r] = mx;
            stats[2 * r + 1] = inv;
        }
        for (int j = 0; j <= last; j++)
            row[j] *= inv;
        for (int j = last + 1; j < ncols; j++)
            row[j] = 0.0f;
    }
}
