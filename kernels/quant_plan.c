/* The plan of one quantizer call: options checked, block shape, threads (docs/numerics.md
 * for the options' meanings). */
#include <omp.h>
#include <pthread.h>

#include "quant_plan.h"

float qk_e4m3_value[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_table_build(void) {
    for (uint32_t c = 0; c < 256; c++)
        qk_e4m3_value[c] = qk_codec_decode(&qk_codec_e4m3, c);
}

static qs_status check_options(const qk_format *fmt, const qk_quant_options *o, qs_error *err) {
    if ((unsigned)o->rounding > QK_ROUND_SR)
        return qs_error_set(err, QS_EINVAL, "kernels: options.rounding: unknown value %d",
                            (int)o->rounding);
    if ((unsigned)o->mx_rule > QK_MX_EVEN)
        return qs_error_set(err, QS_EINVAL, "kernels: options.mx_rule: unknown value %d",
                            (int)o->mx_rule);
    if ((unsigned)o->nvfp4_clamp > QK_NVFP4_CLAMP_ZERO_TO_ONE)
        return qs_error_set(err, QS_EINVAL, "kernels: options.nvfp4_clamp: unknown value %d",
                            (int)o->nvfp4_clamp);
    if ((unsigned)o->tiny_amax > QK_TINY_EXACT)
        return qs_error_set(err, QS_EINVAL, "kernels: options.tiny_amax: unknown value %d",
                            (int)o->tiny_amax);
    if (o->tiny_amax != QK_TINY_TE && !fmt->tensor_scale)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: options.tiny_amax: set for %s, which has no per-tensor "
                            "scale (only nvfp4, nvfp4_2d and fp8_e4m3 do)",
                            fmt->name);
    if (o->tensor_amax_given != 0 && o->tensor_amax_given != 1)
        return qs_error_set(err, QS_EINVAL, "kernels: options.tensor_amax_given: %d is not 0 or 1",
                            o->tensor_amax_given);
    if (o->tensor_amax_given && !fmt->tensor_scale)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: options.tensor_amax: given for %s, which has no per-tensor "
                            "scale (only nvfp4, nvfp4_2d and fp8_e4m3 do)",
                            fmt->name);
    if (o->tensor_amax_given && !(o->tensor_amax >= 0.0f && o->tensor_amax <= FLT_MAX))
        return qs_error_set(err, QS_EINVAL,
                            "kernels: options.tensor_amax: %g is not a finite value >= 0",
                            (double)o->tensor_amax);
    if (o->mx_rule != QK_MX_RCEIL && fmt->rule != QK_RULE_MX)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: options.mx_rule: set for %s, which is not an MX format",
                            fmt->name);
    if (o->nvfp4_clamp != QK_NVFP4_CLAMP_NONE && fmt->rule != QK_RULE_NVFP4)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: options.nvfp4_clamp: set for %s, which is not NVFP4",
                            fmt->name);
    if (o->group_size < 0 || (o->group_size != 0 && !fmt->group_option))
        return qs_error_set(err, QS_EINVAL,
                            "kernels: options.group_size: %d is not valid for %s (only "
                            "int4_group takes a group size, > 0)",
                            o->group_size, fmt->name);
    if (o->threads < 0)
        return qs_error_set(err, QS_EINVAL, "kernels: options.threads: %d is negative", o->threads);
    return QS_OK;
}

static size_t block_of(const qk_format *fmt, const qk_quant_options *o, size_t k) {
    if (fmt->block == 0) return k;
    if (fmt->group_option && o->group_size > 0) return (size_t)o->group_size;
    return (size_t)fmt->block;
}

/* Validates the call and fills the shape part of the plan (no pass over the data). */
qs_status qk_plan_shape(qk_plan *p, const qk_format *fmt, const qk_quant_options *opt, size_t rows,
                        size_t k, qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    if (!fmt) return qs_error_set(err, QS_EINVAL, "kernels: format is NULL");
    if (rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: %s: empty tensor (rows=%zu, k=%zu)",
                            fmt->name, rows, k);
    if (rows > SIZE_MAX / 8 / k)
        return qs_error_set(err, QS_EINVAL, "kernels: %s: shape %zu x %zu overflows", fmt->name,
                            rows, k);
    qs_status st = check_options(fmt, opt, err);
    if (st) return st;
    memset(p, 0, sizeof *p);
    p->fmt = fmt;
    p->elem = fmt->elem;
    p->rounding = opt->rounding;
    p->mx_rule = opt->mx_rule;
    p->clamp = opt->nvfp4_clamp;
    p->rows = rows;
    p->k = k;
    p->block = block_of(fmt, opt, k);
    p->nblk = (k + p->block - 1) / p->block;
    p->brows = (size_t)fmt->block_rows;
    p->seed = opt->seed;
    p->tensor_id = opt->tensor_id;
    p->step = opt->step;
    p->threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    p->s_enc = 1.0f;
    p->s_dec = 1.0f;
    if (p->elem->kind == QK_CODEC_MINIFLOAT)
        p->elem_nan = qk_codec_decode(p->elem, p->elem->nan_code);
    pthread_once(&e4m3_once, e4m3_table_build);
    return QS_OK;
}
