/* A format's block scales frozen, then applied to other values: the primitive GPTQ needs, which
 * picks a group's scale once (from the weights as they are when the group starts) and then
 * quantizes the group's columns one at a time, after each has absorbed the error of the last.
 *
 * The scales come from the numeric core itself (qk_quantize on the group's columns, so every
 * format's own rule: NVFP4's E4M3 block scale under the tensor scale, MX's E8M0 rule, INT's
 * absmax); qk_group_scale_apply then quantizes a value with one row's frozen scale in exactly the
 * operand order of that rule (format.h), so a value quantized with the scale its own block would
 * get comes back bit for bit as qk_fake_quant gives it. */
#ifndef QK_GROUP_SCALE_H
#define QK_GROUP_SCALE_H

#include <stddef.h>

#include "error.h"
#include "format.h"
#include "quant.h"

/* One row's frozen scale of one group. */
typedef struct qk_group_scale {
    float enc;  /* element encode multiplier (NVFP4 E_b, MX 2^-s, per-tensor S_enc) */
    float dec;  /* block decode scale (NVFP4 sb, MX 2^s, INT scale; 1 for per-tensor) */
    int divide; /* INT absmax: the element is x / dec, not x * enc */
} qk_group_scale;

/* Columns of one group of fmt under opt: the block size along k, opt->group_size for the
 * group-wise INT format, and k for the per-row and per-tensor formats (block 0). */
size_t qk_group_cols(const qk_format *fmt, const qk_quant_options *opt, size_t k);

/* Scales of the group x [rows x cols] (row-major, row stride ld floats), one per row, into
 * out[rows], with the per-tensor scale of a tensor whose amax is tensor_amax (formats with one;
 * ignored otherwise); *s_dec gets that tensor decode scale (1 without one). For 2D formats the
 * rows of one 16-row block share their scale. Errors: QS_EUNSUPPORTED for stochastic rounding
 * and for QK_TINY_EXACT on a tiny tensor (a frozen scale cannot carry their extra state), the
 * numeric core's errors, QS_ENOMEM. */
qs_status qk_group_scales(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                          size_t rows, size_t cols, size_t ld, float tensor_amax,
                          qk_group_scale *out, float *s_dec, qs_error *err);

/* x quantized with scale g and dequantized: elem(x * enc) * dec * s_dec (x / dec for INT),
 * rounded by opt->rounding (RNE or RZ). */
float qk_group_scale_apply(const qk_format *fmt, const qk_quant_options *opt,
                           const qk_group_scale *g, float s_dec, float x);

#endif
