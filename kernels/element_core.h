/* The element codec descriptor and its one encoder and decoder as __host__ __device__
 * functions: element.c's qk_codec_encode / qk_codec_decode and the GPU quantizers
 * (kernels/cuda/codec_core.h) run this one code, so CPU and GPU codes are the same bits.
 * Conventions and the codec table: element.h. */
#ifndef QK_ELEMENT_CORE_H
#define QK_ELEMENT_CORE_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a code with all exponent bits set means. */
typedef enum qk_codec_special {
    QK_SPECIAL_NONE = 0, /* every code is finite (E2M1, E2M3, E3M2) */
    QK_SPECIAL_E4M3 = 1, /* only S.1111.111 is NaN; no Inf (OCP FP8 E4M3) */
    QK_SPECIAL_IEEE = 2, /* all-ones exponent: mantissa 0 = Inf, else NaN (E5M2, FP16, BF16) */
} qk_codec_special;

typedef enum qk_codec_kind {
    QK_CODEC_MINIFLOAT = 0,
    QK_CODEC_INT = 1,
} qk_codec_kind;

/* One element type. For a minifloat with exponent field E and mantissa field M:
 * E > 0: value = 2^(E-bias) * (1 + M/2^man_bits); E == 0: value = 2^(1-bias) * M/2^man_bits.
 * For an integer codec the value is the signed integer, limited to +-int_max (symmetric). */
typedef struct qk_codec {
    const char *name; /* "e2m1", "e4m3", ... */
    qk_codec_kind kind;
    int bits;                 /* width of one code, sign included: 4, 6, 8 or 16 */
    int exp_bits;             /* minifloat exponent field width */
    int man_bits;             /* minifloat mantissa field width */
    int bias;                 /* minifloat exponent bias */
    qk_codec_special special; /* meaning of the all-ones exponent */
    uint32_t max_code;        /* code (sign bit clear) of the largest finite magnitude */
    uint32_t nan_code;        /* code produced for a NaN input */
    int int_max;              /* integer codecs: largest magnitude (127 for INT8, 7 for INT4) */
    float max_value;          /* largest finite magnitude, e.g. 6 for E2M1, 448 for E4M3 */
    int emax;                 /* exponent of the largest power of two <= max_value (OCP MX
                                 "emax_elem": 2 for E2M1, 8 for E4M3) */
} qk_codec;

#ifdef __cplusplus
}
#endif

/* x * 2^e for any e in -300..300, exact whenever the result is representable (two steps keep
 * each power of two inside qk_pow2f's -127..127). */
QK_HD float qk_times_pow2_hd(float x, int e) {
    while (e > 127) {
        x *= 0x1p127f;
        e -= 127;
    }
    while (e < -126) {
        x *= 0x1p-126f;
        e += 126;
    }
    return x * qk_pow2f(e);
}

/* element.h qk_codec_encode: the minifloat core, or the symmetric integer encoder
 * (saturating to +-int_max, NaN -> 0; RNE, RZ, SR by 32 random bits). */
QK_HD uint32_t qk_codec_encode_hd(const qk_codec *c, float x, qk_rounding rounding,
                                  uint32_t rbits) {
    if (c->kind != QK_CODEC_INT)
        return qk_minifloat_encode_core(c->bits, c->exp_bits, c->man_bits, c->bias, c->max_code,
                                        c->nan_code, x, rounding, rbits);
    if (x != x) return 0;
    float lim = (float)c->int_max;
    float r;
    if (rounding == QK_ROUND_RZ) {
        r = truncf(x);
    } else if (rounding == QK_ROUND_SR) {
        float f = floorf(x);
        double frac = (fabsf(x) > FLT_MAX) ? 0.0 : (double)(x - f);
        r = ((double)rbits * 0x1p-32 < frac) ? f + 1.0f : f;
    } else {
        r = rintf(x); /* round to nearest even (the default environment of nearbyintf) */
    }
    if (r > lim) r = lim;
    if (r < -lim) r = -lim;
    int v = (int)r;
    return (uint32_t)v & ((1u << c->bits) - 1u);
}

/* element.h qk_codec_decode: code -> FP32 value (NaN, +-Inf where the codec has them). */
QK_HD float qk_codec_decode_hd(const qk_codec *c, uint32_t code) {
    uint32_t mask = (c->bits == 32) ? 0xFFFFFFFFu : ((1u << c->bits) - 1u);
    code &= mask;
    if (c->kind == QK_CODEC_INT) {
        int32_t v = (int32_t)code;
        if (code >> (c->bits - 1)) v -= (int32_t)(1u << c->bits);
        return (float)v;
    }
    int m = c->man_bits;
    uint32_t sign = code >> (c->bits - 1);
    uint32_t mag = code & (mask >> 1);
    uint32_t ef = mag >> m;
    uint32_t man = mag & ((1u << m) - 1u);
    uint32_t ef_all = (1u << c->exp_bits) - 1u;
    float v;
    if (c->special == QK_SPECIAL_E4M3 && ef == ef_all && man == ((1u << m) - 1u))
        v = qk_float_of(0x7FC00000u);
    else if (c->special == QK_SPECIAL_IEEE && ef == ef_all)
        v = man ? qk_float_of(0x7FC00000u) : qk_float_of(0x7F800000u);
    else if (ef == 0)
        v = qk_times_pow2_hd((float)man, 1 - c->bias - m);
    else
        v = qk_times_pow2_hd((float)((1u << m) | man), (int)ef - c->bias - m);
    return sign ? -v : v;
}

#endif
