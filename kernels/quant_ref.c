/* The scalar reference quantizer: every format of format.c, every option; the fast paths
 * (quant_fast.c, pack_fast.c) are tested bit-identical to it. */
#include "scale_rules.h"

static void put_code(qk_packed *pk, size_t r, size_t c, uint32_t code) {
    uint8_t *row = pk->codes + r * pk->row_bytes;
    if (pk->fmt->elem->bits == 4) {
        if ((c & 1) == 0)
            row[c >> 1] = (uint8_t)code; /* clears the high nibble of the pair */
        else
            row[c >> 1] = (uint8_t)(row[c >> 1] | (code << 4));
    } else {
        row[c] = (uint8_t)code;
    }
}

/* Block amax over rows [r0, r0+h), columns [c0, c0+n). NaN and +-Inf are ignored (they
 * saturate in the element encoder) except for MX, where any non-finite element makes the
 * result NaN (so the block's scale becomes 0xFF). */
static float block_amax(const qk_plan *p, const float *x, size_t r0, size_t h, size_t c0,
                        size_t n) {
    float amax = 0.0f;
    int nonfinite = 0;
    for (size_t r = r0; r < r0 + h; r++) {
        const float *row = x + (r - p->xrow0) * p->k + c0;
        for (size_t i = 0; i < n; i++) {
            float a = fabsf(row[i]);
            if (a <= FLT_MAX)
                amax = a > amax ? a : amax;
            else
                nonfinite = 1;
        }
    }
    if (p->fmt->rule == QK_RULE_MX && nonfinite) return NAN;
    return amax;
}

/* Scalar reference for the row group [r0, r0+h): for every block column, amax over the
 * group's block, the block scale, then each element encoded (and SR bits drawn by its
 * row-major index in the whole tensor). Codes and scales go to pk when non-NULL; decoded
 * values to y when non-NULL. x and y hold rows from p->xrow0 on. y may alias x: a block is
 * read whole (amax) before any of it is written. */
void qk_quant_group_ref(const qk_plan *p, const float *x, size_t r0, size_t h, qk_packed *pk,
                        float *y, stats_acc *acc) {
    const qk_codec *elem = p->elem;
    sr_cache sr = {UINT64_MAX, {0, 0, 0, 0}};
    for (size_t b = 0; b < p->nblk; b++) {
        size_t c0 = b * p->block;
        size_t n = p->k - c0 < p->block ? p->k - c0 : p->block;
        float amax = block_amax(p, x, r0, h, c0, n);
        if (p->exp2) amax = times_pow2_up(amax, p->exp2);
        block_scale bs = scale_for(p, amax);
        int any_in = 0, any_out = 0;
        for (size_t r = r0; r < r0 + h; r++) {
            if (pk) {
                if (pk->scales) pk->scales[r * p->nblk + b] = bs.code;
                if (pk->scales_f32) pk->scales_f32[r * p->nblk + b] = bs.f32;
            }
            for (size_t i = 0; i < n; i++) {
                size_t c = c0 + i;
                float xin = x[(r - p->xrow0) * p->k + c];
                float s = scaled_input(&bs, p->exp2 ? times_pow2_up(xin, p->exp2) : xin);
                uint32_t rb = p->rounding == QK_ROUND_SR ? sr_bits_cached(p, &sr, r * p->k + c) : 0;
                uint32_t code = qk_codec_encode(elem, s, p->rounding, rb);
                if (pk) put_code(pk, r, c, code);
                float out = decoded_output(p, &bs, qk_codec_decode(elem, code));
                if (y) y[(r - p->xrow0) * p->k + c] = out;
                if (acc) {
                    double d = (double)out - (double)xin;
                    acc->sq_err += d * d;
                    acc->sq_sig += (double)xin * (double)xin;
                    acc->clipped += fabsf(s) > elem->max_value;
                    acc->nonfinite += !(fabsf(xin) <= FLT_MAX);
                    any_in |= xin != 0.0f;
                    any_out |= out != 0.0f;
                }
            }
        }
        if (acc) {
            acc->blocks++;
            acc->underflow += any_in && !any_out;
        }
    }
}
