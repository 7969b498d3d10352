/* SmoothQuant's per-input-channel scales (Xiao et al., arXiv 2211.10438, eq. 4 and the
 * authors' smooth.py): s_j = max|X_j|^alpha / max|W_j|^(1-alpha), with both maxima and s
 * clamped below at 1e-5 as the reference code does. The weight's columns are multiplied by s
 * (W diag(s)) and the input's divided (X diag(s)^-1), leaving X W^T unchanged while moving
 * the activation outliers' range into the weight. */
#ifndef QK_SMOOTH_H
#define QK_SMOOTH_H

#include <stddef.h>

#include "error.h"

/* s[k] from act_amax[k] (max |X_j| over the calibration tokens) and the weight w [rows x k].
 * Errors: QS_EINVAL (alpha outside [0, 1], empty shapes, a non-finite act_amax naming j). */
qs_status qk_smooth_scales(const float *act_amax, const float *w, size_t rows, size_t k,
                           double alpha, float *s, qs_error *err);

/* x [rows x k]: each row multiplied (divide = 0) or divided (divide = 1) by s elementwise. */
void qk_smooth_apply(float *x, size_t rows, size_t k, const float *s, int divide);

#endif
