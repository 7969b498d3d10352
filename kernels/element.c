/* Element codecs: one minifloat encoder (numerics.h, shared with CUDA) and decoder and one
 * integer encoder driven by qk_codec descriptors. Rules and sources: element.h and docs/numerics.md
 * sections 1.2, 2.3, 3.2, 4.4. */
#include "element.h"
#include "numerics.h"

#include <math.h>
#include <string.h>

/* clang-format off */
/*                                name    kind                bits e  m  bias special          max     nan     imax max_value  emax */
const qk_codec qk_codec_e2m1 = {"e2m1", QK_CODEC_MINIFLOAT, 4, 2, 1, 1, QK_SPECIAL_NONE, 0x7, 0x7, 0, 6.0f, 2};
const qk_codec qk_codec_e4m3 = {"e4m3", QK_CODEC_MINIFLOAT, 8, 4, 3, 7, QK_SPECIAL_E4M3, 0x7E, 0x7F, 0, 448.0f, 8};
const qk_codec qk_codec_e5m2 = {"e5m2", QK_CODEC_MINIFLOAT, 8, 5, 2, 15, QK_SPECIAL_IEEE, 0x7B, 0x7F, 0, 57344.0f, 15};
const qk_codec qk_codec_e2m3 = {"e2m3", QK_CODEC_MINIFLOAT, 6, 2, 3, 1, QK_SPECIAL_NONE, 0x1F, 0x1F, 0, 7.5f, 2};
const qk_codec qk_codec_e3m2 = {"e3m2", QK_CODEC_MINIFLOAT, 6, 3, 2, 3, QK_SPECIAL_NONE, 0x1F, 0x1F, 0, 28.0f, 4};
const qk_codec qk_codec_fp16 = {"fp16", QK_CODEC_MINIFLOAT, 16, 5, 10, 15, QK_SPECIAL_IEEE, 0x7BFF, 0x7E00, 0, 65504.0f, 15};
const qk_codec qk_codec_bf16 = {"bf16", QK_CODEC_MINIFLOAT, 16, 8, 7, 127, QK_SPECIAL_IEEE, 0x7F7F, 0x7FC0, 0, 0x1.FEp127f, 127};
const qk_codec qk_codec_int8 = {"int8", QK_CODEC_INT, 8, 0, 0, 0, QK_SPECIAL_NONE, 127, 0, 127, 127.0f, 6};
const qk_codec qk_codec_int4 = {"int4", QK_CODEC_INT, 4, 0, 0, 0, QK_SPECIAL_NONE, 7, 0, 7, 7.0f, 2};
/* clang-format on */

const qk_codec *qk_codec_by_name(const char *name) {
    static const qk_codec *const all[] = {&qk_codec_e2m1, &qk_codec_e4m3, &qk_codec_e5m2,
                                          &qk_codec_e2m3, &qk_codec_e3m2, &qk_codec_fp16,
                                          &qk_codec_bf16, &qk_codec_int8, &qk_codec_int4};
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

static uint32_t minifloat_encode(const qk_codec *c, float x, qk_rounding rounding, uint32_t rbits) {
    return qk_minifloat_encode_core(c->bits, c->exp_bits, c->man_bits, c->bias, c->max_code,
                                    c->nan_code, x, rounding, rbits);
}

/* Integer encoder: symmetric, saturating to +-int_max; NaN gives 0. */
static uint32_t int_encode(const qk_codec *c, float x, qk_rounding rounding, uint32_t rbits) {
    if (isnan(x)) return 0;
    float lim = (float)c->int_max;
    float r;
    switch (rounding) {
    case QK_ROUND_RZ:
        r = truncf(x);
        break;
    case QK_ROUND_SR: {
        float f = floorf(x);
        /* x - f is exact for |x| < 2^24 and 0 beyond (x is then an integer) */
        double frac = isinf(x) ? 0.0 : (double)(x - f);
        r = ((double)rbits * 0x1p-32 < frac) ? f + 1.0f : f;
        break;
    }
    case QK_ROUND_RNE:
    default:
        r = nearbyintf(x); /* the default FP environment rounds to nearest even */
        break;
    }
    if (r > lim) r = lim;
    if (r < -lim) r = -lim;
    int v = (int)r;
    return (uint32_t)v & ((1u << c->bits) - 1u);
}

uint32_t qk_codec_encode(const qk_codec *c, float x, qk_rounding rounding, uint32_t rbits) {
    if (c->kind == QK_CODEC_INT) return int_encode(c, x, rounding, rbits);
    return minifloat_encode(c, x, rounding, rbits);
}

float qk_codec_decode(const qk_codec *c, uint32_t code) {
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
    if (c->special == QK_SPECIAL_E4M3 && ef == ef_all && man == ((1u << m) - 1u)) {
        v = NAN;
    } else if (c->special == QK_SPECIAL_IEEE && ef == ef_all) {
        v = man ? NAN : INFINITY;
    } else if (ef == 0) {
        v = ldexpf((float)man, 1 - c->bias - m);
    } else {
        v = ldexpf((float)((1u << m) | man), (int)ef - c->bias - m);
    }
    return sign ? -v : v;
}

uint8_t qk_e8m0_encode(float x, qk_e8m0_rounding rounding) {
    return qk_e8m0_encode_core(x, rounding == QK_E8M0_RP);
}

float qk_e8m0_decode(uint8_t code) {
    if (code == 0xFF) return NAN;
    return ldexpf(1.0f, (int)code - 127);
}

uint8_t qk_mx_scale_code(float amax, qk_mx_scale_rule rule, const qk_codec *elem) {
    return qk_mx_scale_code_core(amax, rule, elem->emax, elem->man_bits, elem->max_value);
}
