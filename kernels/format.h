/* Block formats as data: one qk_format row per format drives the one block quantizer
 * (quant_ref.c, fast paths beside it). A new format is one row in format.c.
 * Facts: docs/numerics.md sections 2 (MX), 3 (NVFP4); kernels/README.md for the baseline
 * formats. */
#ifndef QK_FORMAT_H
#define QK_FORMAT_H

#include "element.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a block's scale is chosen and stored. */
typedef enum qk_scale_rule {
    QK_RULE_IDENTITY = 0, /* no quantization ("bf16": the unquantized reference) */
    QK_RULE_NVFP4 = 1,    /* TransformerEngine order (docs/numerics.md 3.3): S_enc = 2688/amax_t,
                             sb = E4M3_RNE(amax_b * (S_enc * (1/6))), E_b = 1/(sb * S_dec),
                             q = elem(x * E_b), x' = (elem(q) * sb) * S_dec */
    QK_RULE_MX = 2,       /* OCP MX (docs/numerics.md 2.2-2.3): E8M0 scale 2^s from the options' MX
                             rule, q = elem(x * 2^-s), x' = elem(q) * 2^s */
    QK_RULE_TENSOR = 3,   /* one FP32 scale per tensor, TransformerEngine FP8 current scaling:
                             S_enc = max_value/amax_t, q = elem(x * S_enc), x' = elem(q) * S_dec */
    QK_RULE_ABSMAX = 4,   /* FP32 scale per block, symmetric integer quantization:
                             scale = amax_b / int_max, q = round(x / scale), x' = q * scale */
} qk_scale_rule;

/* How the block scales are stored in qk_packed. */
typedef enum qk_scale_storage {
    QK_STORE_NONE = 0, /* no block scales */
    QK_STORE_E4M3 = 1, /* one byte per block, E4M3 with sign 0 ("UE4M3") */
    QK_STORE_E8M0 = 2, /* one byte per block, E8M0 */
    QK_STORE_F32 = 3,  /* one FP32 decode scale per block */
} qk_scale_storage;

/* One block format. */
struct qk_format {
    const char *name;         /* canonical lowercase name, see qk_format_by_name */
    const qk_codec *elem;     /* element codec */
    qk_scale_rule rule;       /* scale rule */
    qk_scale_storage storage; /* block-scale storage */
    int block;                /* elements per block along k; 0 = the whole row (per channel or
                                 per tensor); for QK_RULE_ABSMAX with group_option set, the
                                 default group size that qk_quant_options.group_size overrides */
    int block_rows;           /* rows sharing one block scale: 1 (1D) or 16 (2D, NVFP4 weights) */
    int tensor_scale;         /* 1 when an FP32 per-tensor scale multiplies at decode */
    int group_option;         /* 1 when qk_quant_options.group_size applies (INT4 group-wise) */
};

/* Number of formats in the table and the i-th one (0 <= i < qk_format_count()), for tests
 * and for tools that list what qsweep supports. */
size_t qk_format_count(void);
const qk_format *qk_format_at(size_t i);

#ifdef __cplusplus
}
#endif

#endif
