/* Tensor-scale rules: NVFP4's global S_enc/S_dec (TransformerEngine) and FP8 per tensor,
 * with the tiny-amax policy of qk_tiny_amax; the block rules are inline in scale_rules.h. */
#include "scale_rules.h"

/* Whether amax_t is tiny for a tensor scale max_q / amax_t (qk_tiny_amax): that encode scale
 * is above 2^126 (or overflows), so its reciprocal would not be an FP32 normal number. */
static int amax_is_tiny(float amax_t, float max_q) {
    return amax_t > 0.0f && !(max_q / amax_t <= 0x1p126f);
}

void qk_nvfp4_global_scales(float amax_t, float *s_enc, float *s_dec) {
    qk_nvfp4_global_scales_core(amax_t, s_enc, s_dec);
}

/* Tensor scales: NVFP4's S_enc/S_dec, or the per-tensor FP8 rule with the same edge policy
 * (an all-zero tensor gets S_enc = 1), from the given or the tensor's own amax; for a tiny
 * amax under QK_TINY_EXACT, from amax_t * 2^exp2 in [1, 2) (frexpf: exact, subnormals too). */
void qk_plan_tensor_scales(qk_plan *p, const float *x, const qk_quant_options *opt) {
    if (p->fmt->rule != QK_RULE_NVFP4 && p->fmt->rule != QK_RULE_TENSOR) return;
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    p->amax_given = opt->tensor_amax_given;
    p->amax_t =
        opt->tensor_amax_given ? opt->tensor_amax : qk_tensor_amax(x, p->rows * p->k, p->threads);
    float max_q = p->fmt->rule == QK_RULE_NVFP4 ? 2688.0f : p->elem->max_value;
    p->tiny = amax_is_tiny(p->amax_t, max_q);
    float amax = p->amax_t;
    if (p->tiny && opt->tiny_amax == QK_TINY_EXACT) {
        int e2;
        (void)frexpf(amax, &e2); /* amax = f * 2^e2, f in [0.5, 1) */
        p->exp2 = 1 - e2;
        amax = times_pow2_up(amax, p->exp2);
    }
    if (p->fmt->rule == QK_RULE_NVFP4) {
        qk_nvfp4_global_scales(amax, &p->s_enc, &p->s_dec);
        p->s_enc_6 = p->s_enc * (1.0f / 6.0f);
        for (int c = 0; c < 128; c++)
            p->nv_enc[c] = fminf(1.0f / (qk_e4m3_value[c] * p->s_dec), FLT_MAX);
    } else {
        float e = fminf(p->elem->max_value / amax, FLT_MAX);
        if (amax == 0.0f || e == 0.0f) e = 1.0f;
        p->s_enc = e;
        p->s_dec = 1.0f / e;
    }
}
