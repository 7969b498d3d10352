/* SmoothQuant scales (smooth.h). */
#include "smooth.h"

#include <math.h>

qs_status qk_smooth_scales(const float *act_amax, const float *w, size_t rows, size_t k,
                           double alpha, float *s, qs_error *err) {
    if (!(alpha >= 0.0 && alpha <= 1.0))
        return qs_error_set(err, QS_EINVAL, "methods: smoothquant: alpha %g is outside [0, 1]",
                            alpha);
    if (!rows || !k) return qs_error_set(err, QS_EINVAL, "methods: smoothquant: empty weight");
    for (size_t j = 0; j < k; j++) {
        if (!isfinite(act_amax[j]))
            return qs_error_set(err, QS_EINVAL,
                                "methods: smoothquant: activation max of channel %zu is not "
                                "finite",
                                j);
        float wm = 0.0f;
        for (size_t r = 0; r < rows; r++)
            wm = fmaxf(wm, fabsf(w[r * k + j]));
        double a = fmax(act_amax[j], 1e-5), b = fmax(wm, 1e-5);
        s[j] = (float)fmax(pow(a, alpha) / pow(b, 1.0 - alpha), 1e-5);
    }
    return QS_OK;
}

void qk_smooth_apply(float *x, size_t rows, size_t k, const float *s, int divide) {
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < k; j++)
            x[r * k + j] = divide ? x[r * k + j] / s[j] : x[r * k + j] * s[j];
}
