/* Block formats as data: one row of format.c per format drives the one quantizer
 * (quant_ref.c). Facts: docs/numerics.md 2 (MX), 3 (NVFP4); kernels/README.md. */
#ifndef QK_FORMAT_H
#define QK_FORMAT_H

#include "element.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a block's scale is chosen (x': the decoded value). */
typedef enum qk_scale_rule {
    QK_RULE_IDENTITY = 0, /* no quantization ("bf16") */
    QK_RULE_NVFP4 = 1,    /* TransformerEngine (docs/numerics.md 3.3): S_enc = 2688/amax_t,
                             sb = E4M3_RNE(amax_b * (S_enc * (1/6))), E_b = 1/(sb * S_dec),
                             x' = (elem(x * E_b) * sb) * S_dec */
    QK_RULE_MX = 2,       /* OCP MX (docs/numerics.md 2.2-2.3): x' = elem(x * 2^-s) * 2^s */
    QK_RULE_TENSOR = 3,   /* TE FP8 current scaling: S_enc = max/amax_t, x' = elem(x*S_enc)*S_dec */
    QK_RULE_ABSMAX = 4,   /* symmetric integers: s = amax_b/int_max, x' = round(x / s) * s */
} qk_scale_rule;

typedef enum qk_scale_storage {
    QK_STORE_NONE = 0,
    QK_STORE_E4M3 = 1, /* a byte a block, E4M3 with sign 0 ("UE4M3") */
    QK_STORE_E8M0 = 2, /* a byte a block */
    QK_STORE_F32 = 3,  /* an FP32 decode scale a block */
} qk_scale_storage;

struct qk_format {
    const char *name; /* qk_format_by_name's */
    const qk_codec *elem;
    qk_scale_rule rule;
    qk_scale_storage storage;
    int block;        /* elements per block along k, 0 = the row (group_option: the default) */
    int block_rows;   /* rows sharing a block scale: 1, or 16 (2D, NVFP4 weights) */
    int tensor_scale; /* 1: an FP32 tensor scale multiplies at decode */
    int group_option; /* 1: qk_quant_options.group_size applies (int4_group) */
};

/* The table's formats, i < qk_format_count(), for tests and listings. */
size_t qk_format_count(void);
const qk_format *qk_format_at(size_t i);

#ifdef __cplusplus
}
#endif

#endif
