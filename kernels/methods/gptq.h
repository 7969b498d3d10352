/* GPTQ (Frantar et al., arXiv 2210.17323, Algorithm 1 and the authors' gptq.py) with a block
 * format's own group scales.
 *
 * For a linear W [rows x k] (rows = out_features, k = in_features) and calibration inputs
 * X [T x k], the Hessian of the layer's squared error is H = 2 X^T X [k x k]. Columns are
 * quantized in order; the error of column i, divided by [H^-1]_ii, is spread over the columns
 * not yet quantized through row i of U, the upper Cholesky factor of H^-1 (U^T U = H^-1), so
 * the remaining columns absorb it. Steps, as gptq.py takes them:
 *   - dead inputs (H_jj = 0): H_jj = 1 and W[:, j] = 0;
 *   - act_order: columns taken by decreasing H_jj;
 *   - dampening: H += damp * mean(diag H) * I (damp 0.01 by default);
 *   - lazy batches of `block` columns (128): updates inside a batch at once, to the columns after
 *     it once per batch (the same arithmetic in exact terms, fewer passes over W).
 * Group scales: the format's own rule (group_scale.h) on the group's columns as they are when
 * its first column is reached, i.e. with every earlier column's error already spread into them
 * (a group never straddles a lazy batch: the batch is a multiple of the group). With act_order
 * the columns of a physical group are no longer quantized together, so the scales are fixed up
 * front from the unquantized weights (gptq.py's static_groups). A per-tensor scale (NVFP4, FP8)
 * comes from the unquantized weight's amax. U is computed in double as U = J chol(J H J)^-1 J (J
 * the order reversal), which equals gptq.py's cholesky(cholesky_inverse(cholesky(H)),
 * upper=True) in exact arithmetic; the column updates run in FP32 as gptq.py's do. */
#ifndef QK_GPTQ_H
#define QK_GPTQ_H

#include <stddef.h>

#include "error.h"
#include "format.h"
#include "quant.h"

typedef struct qk_gptq_options {
    double damp;   /* fraction of mean(diag H) added to the diagonal; 0 = the default 0.01 */
    size_t block;  /* lazy batch in columns; 0 = the default 128 */
    int act_order; /* 1: columns by decreasing H_jj (static group scales) */
    int scale_search; /* 1: group scales by qk_scale_search (MR-GPTQ), else the amax rule */
    int threads;   /* 0 = all; the bits are the same for any value */
    qk_packed *packed; /* not NULL: gets the packed form GPTQ chose (an NVFP4 or MX rule only):
                          each element's code, each group's scale, the tensor scale; its decode
                          (qk_dequantize) is w as returned, bit for bit. Released by the caller */
} qk_gptq_options;

/* h [k x k] += 2 x^T x for x [t x k] (both triangles), in double, the same bits for any
 * threads (0 = all). */
void qk_gptq_hessian_add(double *h, size_t k, const float *x, size_t t, int threads);

/* Quantizes w [rows x k] in place to fmt's grid (the dequantized values) by GPTQ with the
 * Hessian h [k x k] (read only); with g->packed, also its codes and scales. Errors: QS_EINVAL
 * (empty shapes, h not positive definite after dampening, naming the column),
 * QS_EUNSUPPORTED (as qk_group_scales; g->packed for a format of another rule), QS_ENOMEM;
 * g->packed is then empty. */
qs_status qk_gptq(const qk_format *fmt, const qk_quant_options *opt, float *w, size_t rows,
                  size_t k, const double *h, const qk_gptq_options *g, qs_error *err);

/* sum over rows of (x w^T - x q^T)^2 for x [t x k]: the layer's reconstruction error on x. */
double qk_gptq_layer_error(const float *x, size_t t, const float *w, const float *q, size_t rows,
                           size_t k);

#endif
