/* The CPU engine's GEMM entry and its once-per-process choice (gemm_cpu.h). */
#include "gemm_cpu.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_fixed.h"

static qw_cpu_gemm kind = QW_CPU_GEMM_OPENBLAS;
static int env_bad; /* QSWEEP_CPU_GEMM names no GEMM */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void read_env(void) {
    const char *v = getenv("QSWEEP_CPU_GEMM");
    if (!v || !*v || strcmp(v, "openblas") == 0)
        kind = QW_CPU_GEMM_OPENBLAS;
    else if (strcmp(v, "fixed") == 0)
        kind = QW_CPU_GEMM_FIXED;
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
                            "QSWEEP_CPU_GEMM '%s': expected 'openblas' (the default) or 'fixed'",
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
