/* MR-GPTQ's scale choice (Egiazarian et al., arXiv 2509.23202; the authors' FP-Quant,
 * src/quantization/quantizer.py, the "mse" observer): instead of the format's amax rule, each
 * group's scale is the best of a ladder of shrunken amax values.
 *
 * Candidate i (i = 0..QK_SCALE_SEARCH_STEPS-1) is the format's own rule (group_scale.h) applied
 * to the group's amax times f_i = fl32(1 - i * QK_SCALE_SEARCH_SHRINK / QK_SCALE_SEARCH_STEPS),
 * so i = 0 is the amax rule itself; its error is sum |x - Q(x)|^QK_SCALE_SEARCH_NORM over the
 * group's values (in double, column order), Q quantizing with the candidate's scale as the
 * format stores it (E4M3 under the tensor scale, E8M0, FP32). The lowest error wins; on a tie
 * the earlier candidate (the larger scale) stays. A 2D format (block_rows 16) picks one
 * candidate per 16-row block from the block's summed error. The tensor scale is not searched. */
#ifndef QK_SCALE_SEARCH_H
#define QK_SCALE_SEARCH_H

#include <stddef.h>

#include "error.h"
#include "format.h"
#include "group_scale.h"
#include "quant.h"

#define QK_SCALE_SEARCH_STEPS 100  /* FP-Quant's scale_search_iters */
#define QK_SCALE_SEARCH_SHRINK 0.8 /* FP-Quant's max_scale_shrink_factor */
#define QK_SCALE_SEARCH_NORM 2.4   /* FP-Quant's error_norm */

/* The searched scales of the group x [rows x cols] (row stride ld), as qk_group_scales gives the
 * amax rule's (same arguments, errors and s_dec). */
qs_status qk_scale_search(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                          size_t rows, size_t cols, size_t ld, float tensor_amax,
                          qk_group_scale *out, float *s_dec, qs_error *err);

/* sum over x [cols] of |x - Q(x)|^QK_SCALE_SEARCH_NORM with scale g: the search's error. */
double qk_scale_search_error(const qk_format *fmt, const qk_quant_options *opt,
                             const qk_group_scale *g, float s_dec, const float *x, size_t cols);

#endif
