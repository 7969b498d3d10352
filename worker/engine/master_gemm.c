/* The unquantized GEMM of a master dtype (master_gemm.h). */
#include "master_gemm.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

qw_master_gemm qw_master_gemm_of(qw_dtype dtype, int exact_bf16, int exact_f16) {
    static const qw_master_gemm bf16 = {QW_ELEM_BF16, QW_ELEM_BF16, 0, 2, "bf16"};
    static const qw_master_gemm f16 = {QW_ELEM_F16, QW_ELEM_F16, 0, 2, "fp16"};
    static const qw_master_gemm f32 = {QW_ELEM_F32, QW_ELEM_BF16, 1, 4, "fp32"};
    if (dtype == QW_DT_BF16) return bf16;
    if (dtype == QW_DT_F16) return f16;
    if (exact_bf16) return bf16;
    return exact_f16 ? f16 : f32;
}

int qw_master_gemm_bytes(qw_dtype dtype) {
    return qw_master_gemm_of(dtype, 0, 0).bytes;
}

int qw_f32_exact_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return (b & 0xffffu) == 0;
}

int qw_f32_exact_f16(float x) {
    if (!isfinite(x)) return 0;
    float a = fabsf(x);
    if (a == 0.0f) return 1;
    if (a > 65504.0f) return 0;
    /* FP16 holds 11 significant bits down to 2^-14, then multiples of 2^-24 */
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    float ulp = e - 1 >= -14 ? ldexpf(1.0f, e - 1 - 10) : ldexpf(1.0f, -24);
    return fmodf(a, ulp) == 0.0f;
}

const char *qw_gemm_elem_name(qw_gemm_elem e) {
    switch (e) {
    case QW_ELEM_BF16:
        return "BF16";
    case QW_ELEM_F16:
        return "F16";
    case QW_ELEM_F32:
        return "F32";
    }
    return "?";
}
