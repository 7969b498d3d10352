/* The format table (formats are data, not copies). */
#include "format.h"

#include <string.h>

/* clang-format off */
static const qk_format formats[] = {
    /* name          elem             rule              storage         block rows tensor group */
    {"bf16",         &qk_codec_bf16, QK_RULE_IDENTITY, QK_STORE_NONE,  0,    1,   0,     0},
    {"nvfp4",        &qk_codec_e2m1, QK_RULE_NVFP4,    QK_STORE_E4M3,  16,   1,   1,     0},
    {"nvfp4_2d",     &qk_codec_e2m1, QK_RULE_NVFP4,    QK_STORE_E4M3,  16,   16,  1,     0},
    {"mxfp4",        &qk_codec_e2m1, QK_RULE_MX,       QK_STORE_E8M0,  32,   1,   0,     0},
    {"mxfp6_e2m3",   &qk_codec_e2m3, QK_RULE_MX,       QK_STORE_E8M0,  32,   1,   0,     0},
    {"mxfp6_e3m2",   &qk_codec_e3m2, QK_RULE_MX,       QK_STORE_E8M0,  32,   1,   0,     0},
    {"mxfp8_e4m3",   &qk_codec_e4m3, QK_RULE_MX,       QK_STORE_E8M0,  32,   1,   0,     0},
    {"mxfp8_e5m2",   &qk_codec_e5m2, QK_RULE_MX,       QK_STORE_E8M0,  32,   1,   0,     0},
    {"fp8_e4m3",     &qk_codec_e4m3, QK_RULE_TENSOR,   QK_STORE_NONE,  0,    1,   1,     0},
    {"int8_channel", &qk_codec_int8, QK_RULE_ABSMAX,   QK_STORE_F32,   0,    1,   0,     0},
    {"int4_group",   &qk_codec_int4, QK_RULE_ABSMAX,   QK_STORE_F32,   128,  1,   0,     1},
};
/* clang-format on */

size_t qk_format_count(void) {
    return sizeof formats / sizeof formats[0];
}

const qk_format *qk_format_at(size_t i) {
    return i < qk_format_count() ? &formats[i] : NULL;
}

const qk_format *qk_format_by_name(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < qk_format_count(); i++)
        if (strcmp(formats[i].name, name) == 0) return &formats[i];
    return NULL;
}

const char *qk_format_name(const qk_format *fmt) {
    return fmt ? fmt->name : NULL;
}
