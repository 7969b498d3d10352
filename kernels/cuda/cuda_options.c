/* The GPU quantizers' option check (qk_cuda_options.h). */
#include "qk_cuda_options.h"

#include <float.h>

qs_status qk_cuda_check_options(const qk_format *fmt, const qk_quant_options *opt, qs_error *err) {
    if ((unsigned)opt->rounding > QK_ROUND_SR)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: options.rounding: unknown value %d",
                            (int)opt->rounding);
    if (opt->reference_only)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels/cuda: options.reference_only is CPU-only");
    if (opt->tiny_amax != QK_TINY_TE)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels/cuda: options.tiny_amax = exact is CPU-only");
    if ((unsigned)opt->mx_rule > QK_MX_EVEN ||
        (opt->mx_rule != QK_MX_RCEIL && fmt->rule != QK_RULE_MX))
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: options.mx_rule: invalid for %s",
                            fmt->name);
    if ((unsigned)opt->nvfp4_clamp > QK_NVFP4_CLAMP_ZERO_TO_ONE ||
        (opt->nvfp4_clamp != QK_NVFP4_CLAMP_NONE && fmt->rule != QK_RULE_NVFP4))
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: options.nvfp4_clamp: invalid for %s",
                            fmt->name);
    if (opt->tensor_amax_given && (opt->tensor_amax_given != 1 || !fmt->tensor_scale ||
                                   !(opt->tensor_amax >= 0.0f && opt->tensor_amax <= FLT_MAX)))
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: options.tensor_amax: invalid for %s (a finite value "
                            ">= 0, for a format with a tensor scale)",
                            fmt->name);
    if (opt->group_size < 0 || (opt->group_size != 0 && !fmt->group_option))
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: options.group_size: not valid for %s",
                            fmt->name);
    return QS_OK;
}
