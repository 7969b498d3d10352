/* Element codecs: the codec table; the one encoder and decoder are element_core.h's, shared
 * with CUDA. Rules and sources: element.h and docs/numerics.md sections 1.2, 2.3, 3.2, 4.4. */
#include "element.h"
#include "element_core.h"

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

uint32_t qk_codec_encode(const qk_codec *c, float x, qk_rounding rounding, uint32_t rbits) {
    return qk_codec_encode_hd(c, x, rounding, rbits);
}

float qk_codec_decode(const qk_codec *c, uint32_t code) {
    return qk_codec_decode_hd(c, code);
}

uint8_t qk_e8m0_encode(float x, qk_e8m0_rounding rounding) {
    return qk_e8m0_encode_core(x, rounding == QK_E8M0_RP);
}

float qk_e8m0_decode(uint8_t code) {
    return qk_e8m0_value_core(code);
}

uint8_t qk_mx_scale_code(float amax, qk_mx_scale_rule rule, const qk_codec *elem) {
    return qk_mx_scale_code_core(amax, rule, elem->emax, elem->man_bits, elem->max_value);
}
