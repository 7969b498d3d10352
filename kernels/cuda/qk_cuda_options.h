/* The quantizer options a GPU kernel accepts, checked on the host before any launch. Plain C,
 * built in every tree: fake_quant.cu and quantize_lt.cu call it, and it is tested on the CPU
 * (tests/kernels/test_cuda_options.c). */
#ifndef QK_CUDA_OPTIONS_H
#define QK_CUDA_OPTIONS_H

#include "format.h"
#include "error.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the GPU quantizers take options opt for format fmt: the CPU reference's options
 * (quant.h qk_quant_options) less the two only the CPU implements. fmt and opt non-NULL.
 * Returns QS_OK; QS_EUNSUPPORTED for reference_only or tiny_amax = exact (CPU-only);
 * QS_EINVAL for a value out of its enum, or valid only for another format: mx_rule other than
 * RCEIL outside the MX rule, nvfp4_clamp outside the NVFP4 rule, a given tensor_amax that is
 * not finite and >= 0 or whose format has no tensor scale, group_size < 0 or set where the
 * format has no group option. The message names the field as "options.<field>". */
qs_status qk_cuda_check_options(const qk_format *fmt, const qk_quant_options *opt, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
