/* Storage types of checkpoint tensors and their conversion to FP32.
 * Block layouts: ggml-common.h (block_q8_0, block_q4_0, block_q4_1, QK8_0 = QK4_0 = QK4_1 = 32);
 * formulas: ggml-quants.c dequantize_row_q8_0 / q4_0 / q4_1. */
#include "checkpoint_internal.h"

#include <string.h>

#define QW_BLOCK 32 /* elements per ggml Q8_0/Q4_0/Q4_1 block */

typedef struct qw_dtype_desc {
    const char *name;
    int block;       /* elements per block (1 for plain types) */
    int block_bytes; /* bytes per block */
} qw_dtype_desc;

static const qw_dtype_desc qw_dtypes[] = {
    [QW_DT_F32] = {"F32", 1, 4},
    [QW_DT_F16] = {"F16", 1, 2},
    [QW_DT_BF16] = {"BF16", 1, 2},
    [QW_DT_Q8_0] = {"Q8_0", QW_BLOCK, 2 + QW_BLOCK},
    [QW_DT_Q4_0] = {"Q4_0", QW_BLOCK, 2 + QW_BLOCK / 2},
    [QW_DT_Q4_1] = {"Q4_1", QW_BLOCK, 4 + QW_BLOCK / 2},
};

const char *qw_dtype_name(qw_dtype dt) {
    return qw_dtypes[dt].name;
}

size_t qw_dtype_bytes(qw_dtype dt, int64_t numel, int *overflow) {
    const qw_dtype_desc *d = &qw_dtypes[dt];
    uint64_t blocks = (uint64_t)numel / (uint64_t)d->block;
    if (numel < 0 || blocks > SIZE_MAX / (uint64_t)d->block_bytes) {
        *overflow = 1;
        return 0;
    }
    return (size_t)blocks * (size_t)d->block_bytes;
}

static float qw_bits_to_f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IEEE 754 binary16 to binary32, exact (every binary16 value is representable). */
static float qw_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return qw_bits_to_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp != 0) return qw_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return qw_bits_to_f32(sign);
    /* Subnormal: man x 2^-24, exact in FP32. */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
}

static uint16_t qw_load_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* The 32 nibbles of a ggml Q4 block as floats: byte j holds element j (low nibble) and element
 * j + 16 (high). Two plain loops, so the compiler vectorises them and the caller's multiply-add
 * (the engine converts weights on every GEMM piece: it is a hot loop). */
static void qw_nibbles(const uint8_t *qs, float q[QW_BLOCK]) {
    for (int j = 0; j < QW_BLOCK / 2; j++)
        q[j] = (float)(qs[j] & 0x0f);
    for (int j = 0; j < QW_BLOCK / 2; j++)
        q[j + QW_BLOCK / 2] = (float)(qs[j] >> 4);
}

void qw_dtype_to_f32(qw_dtype dt, const uint8_t *src, int64_t n, float *dst) {
    switch (dt) {
    case QW_DT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case QW_DT_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = qw_f16_to_f32(qw_load_u16(src + 2 * i));
        break;
    case QW_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = qw_bits_to_f32((uint32_t)qw_load_u16(src + 2 * i) << 16);
        break;
    case QW_DT_Q8_0:
        for (int64_t b = 0; b < n / QW_BLOCK;
             b++, src += qw_dtypes[dt].block_bytes, dst += QW_BLOCK) {
            float d = qw_f16_to_f32(qw_load_u16(src));
            const int8_t *qs = (const int8_t *)(src + 2);
            for (int j = 0; j < QW_BLOCK; j++)
                dst[j] = (float)qs[j] * d;
        }
        break;
    case QW_DT_Q4_0:
        for (int64_t b = 0; b < n / QW_BLOCK;
             b++, src += qw_dtypes[dt].block_bytes, dst += QW_BLOCK) {
            float d = qw_f16_to_f32(qw_load_u16(src));
            float q[QW_BLOCK];
            qw_nibbles(src + 2, q);
            for (int j = 0; j < QW_BLOCK; j++)
                dst[j] = (q[j] - 8.0f) * d;
        }
        break;
    case QW_DT_Q4_1:
        for (int64_t b = 0; b < n / QW_BLOCK;
             b++, src += qw_dtypes[dt].block_bytes, dst += QW_BLOCK) {
            float d = qw_f16_to_f32(qw_load_u16(src));
            float m = qw_f16_to_f32(qw_load_u16(src + 2));
            float q[QW_BLOCK];
            qw_nibbles(src + 4, q);
            for (int j = 0; j < QW_BLOCK; j++)
                dst[j] = q[j] * d + m;
        }
        break;
    }
}
