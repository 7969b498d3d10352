/* Storage types of checkpoint tensors and their conversion to FP32: one descriptor per type
 * (name, ggml type number, block size, block bytes, block decoder).
 * Block layouts: ggml-common.h (block_q8_0, q4_0, q4_1, q5_0, q5_1 with 32 elements; block_q2_K
 * ... block_q8_K and block_iq4_xs with QK_K = 256; block_iq4_nl with 32). Decoding formulas:
 * ggml-quants.c dequantize_row_* of each type, cross-checked against gguf-py's gguf/quants.py.
 * Every product and sum is rounded to FP32 in the order those formulas give (the build forbids
 * contraction), so the values are the ones llama.cpp's CPU dequantization produces. */
#include "checkpoint_internal.h"

#include <string.h>

#define QW_BLOCK 32 /* elements per ggml Q8_0/Q4_0/Q4_1/IQ4_NL block */
#define QW_QK_K 256 /* elements per ggml K-quant super-block (QK_K) */

/* Decodes one block of `block` elements at src (block_bytes bytes) into dst. */
typedef void (*qw_block_decode)(const uint8_t *src, float *dst);

typedef struct qw_dtype_desc {
    const char *name;
    int ggml_type;          /* enum ggml_type (ggml.h); -1 when GGUF has no such type */
    int block;              /* elements per block (1 for plain types) */
    int block_bytes;        /* bytes per block */
    qw_block_decode decode; /* NULL for the plain types F32, F16, BF16 */
} qw_dtype_desc;

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

static float qw_load_f16(const uint8_t *p) {
    return qw_f16_to_f32(qw_load_u16(p));
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

/* block_q8_0: f16 d, int8 qs[32]; x = d*q. */
static void qw_decode_q8_0(const uint8_t *src, float *dst) {
    float d = qw_load_f16(src);
    const int8_t *qs = (const int8_t *)(src + 2);
    for (int j = 0; j < QW_BLOCK; j++)
        dst[j] = (float)qs[j] * d;
}

/* block_q4_0: f16 d, 16 bytes of nibbles; x = (q - 8)*d. */
static void qw_decode_q4_0(const uint8_t *src, float *dst) {
    float d = qw_load_f16(src);
    float q[QW_BLOCK];
    qw_nibbles(src + 2, q);
    for (int j = 0; j < QW_BLOCK; j++)
        dst[j] = (q[j] - 8.0f) * d;
}

/* block_q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q*d + m. */
static void qw_decode_q4_1(const uint8_t *src, float *dst) {
    float d = qw_load_f16(src);
    float m = qw_load_f16(src + 2);
    float q[QW_BLOCK];
    qw_nibbles(src + 4, q);
    for (int j = 0; j < QW_BLOCK; j++)
        dst[j] = q[j] * d + m;
}

/* block_q5_0 (22 bytes): f16 d, u32 qh (bit j: the fifth bit of element j), 16 bytes of nibbles
 * as Q4_0; x = (q - 16)*d. block_q5_1 (24 bytes): f16 d, f16 m, then the same; x = q*d + m. */
static void qw_decode_q5(const uint8_t *src, float *dst, int with_min) {
    float d = qw_load_f16(src), m = with_min ? qw_load_f16(src + 2) : 0.0f;
    const uint8_t *hp = src + (with_min ? 4 : 2), *qs = hp + 4;
    uint32_t qh =
        (uint32_t)hp[0] | (uint32_t)hp[1] << 8 | (uint32_t)hp[2] << 16 | (uint32_t)hp[3] << 24;
    for (int j = 0; j < QW_BLOCK / 2; j++) {
        int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        if (with_min) {
            dst[j] = (float)lo * d + m;
            dst[j + QW_BLOCK / 2] = (float)hi * d + m;
        } else {
            dst[j] = (float)(lo - 16) * d;
            dst[j + QW_BLOCK / 2] = (float)(hi - 16) * d;
        }
    }
}

static void qw_decode_q5_0(const uint8_t *src, float *dst) {
    qw_decode_q5(src, dst, 0);
}

static void qw_decode_q5_1(const uint8_t *src, float *dst) {
    qw_decode_q5(src, dst, 1);
}

/* block_q2_K (84 bytes): scales[16] (low nibble: scale, high nibble: min, of 16 elements each),
 * qs[64] (2-bit quants), f16 d, f16 dmin. Element order: two halves of 128; in half h, the
 * 2-bit field at shift 2j of qs[32h + l] (l < 32) is element 128h + 32j + l, and the 16
 * elements of sub-block 8h + 2j + l/16 share its scale. x = (d*sc)*q - dmin*m. */
static void qw_decode_q2_k(const uint8_t *src, float *dst) {
    const uint8_t *scales = src, *qs = src + 16;
    float d = qw_load_f16(src + 80), dmin = qw_load_f16(src + 82);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                uint8_t sc = scales[8 * h + 2 * j + l / 16];
                float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
                int q = (qs[32 * h + l] >> (2 * j)) & 3;
                dst[128 * h + 32 * j + l] = dl * (float)q - ml;
            }
}

/* The 6-bit scale s (0..63) of sub-block j (0..15) in a block_q3_K's 12 scale bytes: low 4 bits
 * in the low (j < 8) or high (j >= 8) nibble of byte j % 8, high 2 bits in bits 2*(j/4) of byte
 * 8 + j % 4 (the kmask unpacking of dequantize_row_q3_K). */
static int qw_q3_k_scale(const uint8_t *sc, int j) {
    int lo = j < 8 ? sc[j] & 0xf : sc[j - 8] >> 4;
    int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | hi << 4;
}

/* block_q3_K (110 bytes): hmask[32] (high bits), qs[64] (low 2 bits), scales[12] (16 6-bit
 * scales, offset 32), f16 d. Order as Q2_K; the high bit of element 128h + 32j + l is bit
 * 4h + j of hmask[l], and a clear bit subtracts 4. x = (d*(s - 32))*(q - 4*!hbit). */
static void qw_decode_q3_k(const uint8_t *src, float *dst) {
    const uint8_t *hmask = src, *qs = src + 32, *scales = src + 96;
    float d = qw_load_f16(src + 108);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                float dl = d * (float)(qw_q3_k_scale(scales, 8 * h + 2 * j + l / 16) - 32);
                int q = (qs[32 * h + l] >> (2 * j)) & 3;
                if (!(hmask[l] & (1u << (4 * h + j)))) q -= 4;
                dst[128 * h + 32 * j + l] = dl * (float)q;
            }
}

/* Scale and min (6 bits each) of sub-block j (0..7) of a block_q4_K/q5_K's 12 scale bytes
 * (ggml-quants.c get_scale_min_k4): j < 4: low 6 bits of bytes j and j + 4; j >= 4: the
 * nibbles of byte j + 4, with bytes j - 4 and j giving the top 2 bits. */
static void qw_k4_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* block_q4_K (144 bytes): f16 d, f16 dmin, scales[12], qs[128]. Four chunks of 64 elements; in
 * chunk c, qs[32c + l] holds element 64c + l (low nibble, sub-block 2c) and 64c + 32 + l (high,
 * sub-block 2c + 1). x = (d*sc)*q - dmin*m. */
static void qw_decode_q4_k(const uint8_t *src, float *dst) {
    float d = qw_load_f16(src), dmin = qw_load_f16(src + 2);
    const uint8_t *scales = src + 4, *qs = src + 16;
    for (int c = 0; c < 4; c++)
        for (int half = 0; half < 2; half++) {
            int sc, m;
            qw_k4_scale_min(scales, 2 * c + half, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = half ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xf;
                dst[64 * c + 32 * half + l] = dl * (float)q - ml;
            }
        }
}

/* block_q5_K (176 bytes): f16 d, f16 dmin, scales[12], qh[32], qs[128]. As Q4_K, with a fifth
 * bit (+16) for element 64c + 32*half + l in bit 2c + half of qh[l]. */
static void qw_decode_q5_k(const uint8_t *src, float *dst) {
    float d = qw_load_f16(src), dmin = qw_load_f16(src + 2);
    const uint8_t *scales = src + 4, *qh = src + 16, *qs = src + 48;
    for (int c = 0; c < 4; c++)
        for (int half = 0; half < 2; half++) {
            int sc, m;
            qw_k4_scale_min(scales, 2 * c + half, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = half ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xf;
                if (qh[l] & (1u << (2 * c + half))) q += 16;
                dst[64 * c + 32 * half + l] = dl * (float)q - ml;
            }
        }
}

/* block_q6_K (210 bytes): ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], f16 d.
 * Two halves of 128; in half h, for l < 32 and k < 4, element 128h + 32k + l has its low
 * nibble in ql[64h + l + 32*(k & 1)] (low nibble for k < 2, high for k >= 2), its high bits at
 * bits 2k of qh[32h + l], and scale scales[8h + 2k + l/16]. x = (d*sc)*(q - 32). */
static void qw_decode_q6_k(const uint8_t *src, float *dst) {
    const uint8_t *ql = src, *qh = src + 128;
    const int8_t *scales = (const int8_t *)(src + 192);
    float d = qw_load_f16(src + 208);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                uint8_t lo = ql[64 * h + l + 32 * (k & 1)];
                int q = (k < 2 ? lo & 0xf : lo >> 4) | (((qh[32 * h + l] >> (2 * k)) & 3) << 4);
                float dl = d * (float)scales[8 * h + 2 * k + l / 16];
                dst[128 * h + 32 * k + l] = dl * (float)(q - 32);
            }
}

/* block_q8_K (292 bytes): f32 d, int8 qs[256], int16 bsums[16] (sums of 16 quants, for dot
 * products only); x = d*q. */
static void qw_decode_q8_k(const uint8_t *src, float *dst) {
    float d;
    memcpy(&d, src, sizeof d);
    const int8_t *qs = (const int8_t *)(src + 4);
    for (int j = 0; j < QW_QK_K; j++)
        dst[j] = d * (float)qs[j];
}

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml-common.h kvalues_iq4nl). */
static const int8_t qw_iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                           1,    13,   25,  38,  53,  69,  89,  113};

/* block_iq4_nl (18 bytes): f16 d, qs[16]; byte j holds element j (low nibble) and j + 16
 * (high). x = d*level[q]. */
static void qw_decode_iq4_nl(const uint8_t *src, float *dst) {
    float d = qw_load_f16(src);
    const uint8_t *qs = src + 2;
    for (int j = 0; j < QW_BLOCK / 2; j++) {
        dst[j] = d * (float)qw_iq4nl_levels[qs[j] & 0xf];
        dst[j + QW_BLOCK / 2] = d * (float)qw_iq4nl_levels[qs[j] >> 4];
    }
}

/* block_iq4_xs (136 bytes): f16 d, u16 scales_h, scales_l[4], qs[128]. Eight sub-blocks of 32
 * laid out as IQ4_NL blocks; sub-block b's 6-bit scale has its low 4 bits in nibble b % 2 of
 * scales_l[b/2] and its high 2 bits at bits 2b of scales_h. x = (d*(s - 32))*level[q]. */
static void qw_decode_iq4_xs(const uint8_t *src, float *dst) {
    float d = qw_load_f16(src);
    unsigned scales_h = qw_load_u16(src + 2);
    const uint8_t *scales_l = src + 4, *qs = src + 8;
    for (int b = 0; b < QW_QK_K / QW_BLOCK; b++, qs += 16, dst += QW_BLOCK) {
        int ls = ((scales_l[b / 2] >> (4 * (b % 2))) & 0xf) | (((scales_h >> (2 * b)) & 3) << 4);
        float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            dst[j] = dl * (float)qw_iq4nl_levels[qs[j] & 0xf];
            dst[j + 16] = dl * (float)qw_iq4nl_levels[qs[j] >> 4];
        }
    }
}

/* The E2M1 values doubled, as ggml stores them (ggml-common.h kvalues_mxfp4). */
static const int8_t qw_mxfp4_levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ggml_e8m0_to_fp32_half (ggml-impl.h): 2^(e - 128), the E8M0 scale halved to undo the doubled
 * levels; e < 2 gives the FP32 subnormals 2^-128 and 2^-127. */
static float qw_e8m0_half(uint8_t e) {
    return qw_bits_to_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* block_mxfp4 (17 bytes): E8M0 e, qs[16]; byte j holds element j (low nibble) and j + 16
 * (high). x = kvalues_mxfp4[q] * 2^(e-128) (ggml-quants.c dequantize_row_mxfp4): exact. */
static void qw_decode_mxfp4(const uint8_t *src, float *dst) {
    float d = qw_e8m0_half(src[0]);
    const uint8_t *qs = src + 1;
    for (int j = 0; j < QW_BLOCK / 2; j++) {
        dst[j] = (float)qw_mxfp4_levels[qs[j] & 0xf] * d;
        dst[j + QW_BLOCK / 2] = (float)qw_mxfp4_levels[qs[j] >> 4] * d;
    }
}

static const qw_dtype_desc qw_dtypes[QW_DT_COUNT] = {
    [QW_DT_F32] = {"F32", 0, 1, 4, NULL},
    [QW_DT_F16] = {"F16", 1, 1, 2, NULL},
    [QW_DT_BF16] = {"BF16", 30, 1, 2, NULL},
    [QW_DT_Q8_0] = {"Q8_0", 8, QW_BLOCK, 2 + QW_BLOCK, qw_decode_q8_0},
    [QW_DT_Q4_0] = {"Q4_0", 2, QW_BLOCK, 2 + QW_BLOCK / 2, qw_decode_q4_0},
    [QW_DT_Q4_1] = {"Q4_1", 3, QW_BLOCK, 4 + QW_BLOCK / 2, qw_decode_q4_1},
    [QW_DT_Q2_K] = {"Q2_K", 10, QW_QK_K, 84, qw_decode_q2_k},
    [QW_DT_Q3_K] = {"Q3_K", 11, QW_QK_K, 110, qw_decode_q3_k},
    [QW_DT_Q4_K] = {"Q4_K", 12, QW_QK_K, 144, qw_decode_q4_k},
    [QW_DT_Q5_K] = {"Q5_K", 13, QW_QK_K, 176, qw_decode_q5_k},
    [QW_DT_Q6_K] = {"Q6_K", 14, QW_QK_K, 210, qw_decode_q6_k},
    [QW_DT_Q8_K] = {"Q8_K", 15, QW_QK_K, 292, qw_decode_q8_k},
    [QW_DT_IQ4_NL] = {"IQ4_NL", 20, QW_BLOCK, 18, qw_decode_iq4_nl},
    [QW_DT_IQ4_XS] = {"IQ4_XS", 23, QW_QK_K, 136, qw_decode_iq4_xs},
    [QW_DT_Q5_0] = {"Q5_0", 6, QW_BLOCK, 22, qw_decode_q5_0},
    [QW_DT_Q5_1] = {"Q5_1", 7, QW_BLOCK, 24, qw_decode_q5_1},
    [QW_DT_MXFP4] = {"MXFP4", 39, QW_BLOCK, 17, qw_decode_mxfp4},
};

const char *qw_dtype_name(qw_dtype dt) {
    return qw_dtypes[dt].name;
}

int qw_dtype_block(qw_dtype dt) {
    return qw_dtypes[dt].block;
}

int qw_dtype_block_bytes(qw_dtype dt) {
    return qw_dtypes[dt].block_bytes;
}

int qw_dtype_by_ggml(uint32_t ggml_type, qw_dtype *dt) {
    return qw_dtype_from_ggml(ggml_type, dt);
}

int qw_dtype_from_ggml(uint32_t ggml_type, qw_dtype *dt) {
    for (int i = 0; i < QW_DT_COUNT; i++)
        if (qw_dtypes[i].ggml_type >= 0 && (uint32_t)qw_dtypes[i].ggml_type == ggml_type) {
            *dt = (qw_dtype)i;
            return 1;
        }
    return 0;
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

void qw_dtype_to_f32(qw_dtype dt, const uint8_t *src, int64_t n, float *dst) {
    const qw_dtype_desc *d = &qw_dtypes[dt];
    switch (dt) {
    case QW_DT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case QW_DT_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = qw_f16_to_f32(qw_load_u16(src + 2 * i));
        return;
    case QW_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = qw_bits_to_f32((uint32_t)qw_load_u16(src + 2 * i) << 16);
        return;
    default:
        for (int64_t b = 0; b < n / d->block; b++, src += d->block_bytes, dst += d->block)
            d->decode(src, dst);
        return;
    }
}
