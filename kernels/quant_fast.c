/* Fake-quant fast paths, each tested bit-identical to the reference (quant_ref.c): 1D
 * minifloat blocks (NVFP4, MX, FP8 per tensor; RNE, SR for E2M1, statistics), batches of 16
 * NVFP4/MX blocks (RNE, no statistics: the hot case), NVFP4 2D and the integer formats. */
#include "scale_rules.h"

/* Fast path for fake-quant in 1D blocks of minifloat elements: NVFP4, every MX format and
 * FP8 per tensor with RNE, and the E2M1 formats (NVFP4, MXFP4) with stochastic rounding; in
 * place on row r. Per block: the amax by bits, the block scale (the reference's scale_for;
 * NVFP4 with the fast E4M3 cast and the per-call E_b table), then a branch-free element loop
 * that the compiler vectorises: qk_e2m1_rne_value / e2m1_sr_value_f32 (qk_e2m1_sr_value's
 * value) for E2M1, qk_minifloat_rne_value for the others; SR bits (one Philox word an
 * element, a block of 4 words per 4 elements) are drawn before the loop from a span of up to
 * 256 words that ends with the row's last Philox block (qk_sr_words). The value is
 * (elem * dec) * s_dec with dec = 1 per tensor and s_dec = 1 for MX, both exact, so the bits
 * equal qk_quant_group_ref's (tested).
 * Per-tensor scaling runs over the row in chunks of QK_FAST_CHUNK with one scale.
 * Statistics, when asked for, keep a copy of the chunk's input. */

/* qk_e2m1_sr_value's decision in single precision and integers, so that it vectorises:
 * fr = (|s| - lo) / q is exact in [0, 1) (lo the grid multiple below |s|, q a power of two),
 * fr * 2^32 is exact and below 2^32, so floor(fr * 2^32) is its truncation to 32 bits and
 * rbits < floor(fr * 2^32) is an integer comparison. A NaN fraction (|s| = Inf) is taken as 0:
 * such a value saturates to 6 either way. The same value for every input (tested against the
 * reference quantizer). */
static inline float e2m1_sr_value_f32(float s, uint32_t rbits) {
    float a = fabsf(s);
    float q = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
    float iq = a < 2.0f ? 2.0f : (a < 4.0f ? 1.0f : 0.5f); /* 1 / q, exact: x * iq is x / q */
    float lo = floorf(a * iq) * q;
    float fr = (a - lo) * iq;
    fr = fr == fr ? fr : 0.0f;
    uint32_t thr = (uint32_t)(fr * 0x1p32f);
    float v = lo + (rbits < thr ? q : 0.0f);
    v = v < 6.0f ? v : 6.0f;
    return (s != s) ? 6.0f : copysignf(v, s);
}

/* SR words are drawn up to QK_SR_SPAN at a time (qk_sr_words). */
#define QK_SR_SPAN 256

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* Wider vectors where the CPU has them (glibc ifunc dispatch); every clone does the same
 * IEEE operations in the same order (no FMA: -ffp-contract=off), so the bits are equal. */
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void
qk_quant_row_fast(const qk_plan *p, size_t r, float *row, size_t c_begin, stats_acc *acc) {
    const qk_codec *el = p->elem;
    const int sr = p->rounding == QK_ROUND_SR;
    uint32_t rb[QK_FAST_CHUNK];
    /* SR words of stream indices [span0, span0 + span_n), refilled as the row moves on */
    uint32_t span[QK_SR_SPAN];
    uint64_t span0 = 0, span_n = 0;
    const int e2m1 = el == &qk_codec_e2m1;
    const int man = el->man_bits, emin = 1 - el->bias, e_hi = el->emax + 1;
    const float maxv = el->max_value, nanv = p->elem_nan;
    const float s_dec = p->fmt->tensor_scale ? p->s_dec : 1.0f;
    const qk_scale_rule rule = p->fmt->rule;
    const size_t chunk = rule == QK_RULE_TENSOR ? QK_FAST_CHUNK : p->block;
    float in[QK_FAST_CHUNK];
    int any_in = 0, any_out = 0;
    for (size_t c0 = c_begin; c0 < p->k; c0 += chunk) {
        size_t n = p->k - c0 < chunk ? p->k - c0 : chunk;
        float *v = row + c0;
        float enc, dec;
        if (rule == QK_RULE_TENSOR) {
            enc = p->s_enc;
            dec = 1.0f;
        } else {
            int nonfinite;
            float amax = amax_by_bits(v, n, &nonfinite);
            if (rule == QK_RULE_MX) {
                block_scale bs = scale_for(p, nonfinite ? NAN : amax);
                enc = bs.enc;
                dec = bs.dec;
            } else { /* scale_for's NVFP4 branch with the fast E4M3 cast */
                float sv = amax * p->s_enc_6;
                if (p->clamp == QK_NVFP4_CLAMP_TORCHAO && sv < 0x1p-6f) sv = 0x1p-6f;
                if (p->clamp == QK_NVFP4_CLAMP_ZERO_TO_ONE && sv == 0.0f) sv = 1.0f;
                uint32_t sb = qk_e4m3_rne_nonneg(sv);
                dec = qk_e4m3_value[sb];
                enc = p->nv_enc[sb];
            }
        }
        if (acc) memcpy(in, v, n * sizeof *v);
        if (sr) {
            uint64_t i0 = (uint64_t)r * p->k + c0;
            if (i0 < span0 || i0 + n > span0 + span_n) { /* n <= QK_FAST_CHUNK < span - 3 */
                span0 = i0 & ~(uint64_t)3;
                uint64_t end = (uint64_t)r * p->k + p->k; /* no words past the row's block */
                span_n = end - span0 < QK_SR_SPAN ? (end - span0 + 3) & ~(uint64_t)3 : QK_SR_SPAN;
                qk_sr_words(p->seed, p->tensor_id, p->step, span0 >> 2, (size_t)(span_n >> 2),
                            span);
            }
            for (size_t i = 0; i < n; i++)
                rb[i] = span[i0 - span0 + i];
            for (size_t i = 0; i < n; i++)
                v[i] = (e2m1_sr_value_f32(v[i] * enc, rb[i]) * dec) * s_dec;
        } else if (e2m1)
            for (size_t i = 0; i < n; i++)
                v[i] = (qk_e2m1_rne_value(v[i] * enc) * dec) * s_dec;
        else
            for (size_t i = 0; i < n; i++)
                v[i] =
                    (qk_minifloat_rne_value(v[i] * enc, man, emin, e_hi, maxv, nanv) * dec) * s_dec;
        if (acc) {
            for (size_t i = 0; i < n; i++) {
                double d = (double)v[i] - (double)in[i];
                acc->sq_err += d * d;
                acc->sq_sig += (double)in[i] * (double)in[i];
                acc->clipped += fabsf(in[i] * enc) > maxv;
                acc->nonfinite += !(fabsf(in[i]) <= FLT_MAX);
                any_in |= in[i] != 0.0f;
                any_out |= v[i] != 0.0f;
            }
            if (rule != QK_RULE_TENSOR || c0 + n == p->k) { /* end of a scale block */
                acc->blocks++;
                acc->underflow += any_in && !any_out;
                any_in = any_out = 0;
            }
        }
    }
}

/* Fake-quant without statistics of NVFP4 (blocks of 16) and the MX formats (blocks of 32),
 * RNE and, for E2M1, SR: the hot case, in batches of up to QK_BATCH whole blocks: the block
 * amaxes (by bits, NaN and +-Inf ignored; MX also notes whether a block holds one), then the
 * QK_BATCH block scales at once (a short batch's missing blocks get the scale of amax 0,
 * unused), then the element loop over the batch's blocks with qk_minifloat_rne_value
 * (add-and-subtract rounding; for E2M1 checked equal to the codec on all 2^32 inputs) or
 * e2m1_sr_value_f32 on the batch's SR words, drawn at once (qk_sr_words, the Philox blocks
 * from the one holding the batch's first element to the one holding its last).
 * NVFP4 scales use branch-free arithmetic the compiler vectorises across the blocks: the E4M3
 * cast of qk_e4m3_rne_nonneg on the bit pattern, its value, and E_b = min(1 / (sb * S_dec),
 * FLT_MAX), the very expression of the plan's nv_enc table. MX scales are
 * qk_mx_scale_code_core per block (0xFF, NaN, for a block holding Inf or NaN) and the powers
 * of two built from the code. Same operations on the same operands as qk_quant_row_fast and
 * the reference, so the same bits (tested). Works on row r; returns the first column it did
 * not do (the end of the row's last whole block); qk_quant_row_fast does the rest. */

__attribute__((always_inline)) static inline size_t
quant_row_batched_body(const qk_plan *p, size_t r, float *row, const size_t B, const int sr) {
    const size_t whole = p->k / B * B;
    const qk_codec *el = p->elem;
    const int man = el->man_bits, emin = 1 - el->bias, e_hi = el->emax + 1;
    const float maxv = el->max_value, nanv = p->elem_nan;
    const int nv = p->fmt->rule == QK_RULE_NVFP4;
    const float s_enc_6 = p->s_enc_6, s_dec_nv = p->s_dec;
    const float s_dec = nv ? p->s_dec : 1.0f;
    const qk_nvfp4_clamp clamp = p->clamp;
    uint32_t words[QK_BATCH * 32 + 4]; /* a batch's SR words and up to 3 before it */
    for (size_t c0 = 0; c0 < whole; c0 += B * QK_BATCH) {
        const size_t nb = (whole - c0) / B < QK_BATCH ? (whole - c0) / B : QK_BATCH;
        float *v = row + c0;
        int32_t m[QK_BATCH] = {0}, any[QK_BATCH] = {0};
        float enc[QK_BATCH], dec[QK_BATCH];
        for (size_t j = 0; j < nb; j++) {
            int32_t mx = 0, an = 0;
            for (size_t i = 0; i < B; i++) {
                int32_t b = (int32_t)(qk_bits_of(v[B * j + i]) & 0x7FFFFFFFu);
                an = b > an ? b : an;
                b = b >= 0x7F800000 ? 0 : b;
                mx = b > mx ? b : mx;
            }
            m[j] = mx;
            any[j] = an;
        }
        if (nv) {
            for (int j = 0; j < QK_BATCH; j++) {
                uint32_t code = nvfp4_scale_code_bf(qk_float_of((uint32_t)m[j]), s_enc_6, clamp);
                float d = e4m3_value_nonneg_bf(code);
                float e = 1.0f / (d * s_dec_nv);
                dec[j] = d;
                enc[j] = e < FLT_MAX ? e : FLT_MAX;
            }
        } else {
            for (int j = 0; j < QK_BATCH; j++) {
                uint8_t code = any[j] >= 0x7F800000
                                   ? 0xFF
                                   : qk_mx_scale_code_core(qk_float_of((uint32_t)m[j]), p->mx_rule,
                                                           el->emax, man, maxv);
                enc[j] = code == 0xFF ? NAN : qk_pow2f(127 - (int)code);
                dec[j] = code == 0xFF ? NAN : qk_pow2f((int)code - 127);
            }
        }
        if (sr) {
            const uint64_t i0 = (uint64_t)r * p->k + c0, w0 = i0 & ~(uint64_t)3;
            const uint32_t *rb = words + (i0 - w0);
            qk_sr_words(p->seed, p->tensor_id, p->step, w0 >> 2,
                        (size_t)((i0 + nb * B - w0 + 3) >> 2), words);
            for (size_t j = 0; j < nb; j++) {
                const float e = enc[j], d = dec[j];
                float *w = v + B * j;
                for (size_t i = 0; i < B; i++)
                    w[i] = (e2m1_sr_value_f32(w[i] * e, rb[B * j + i]) * d) * s_dec;
            }
        } else {
            for (size_t j = 0; j < nb; j++) {
                const float e = enc[j], d = dec[j];
                float *w = v + B * j;
                for (size_t i = 0; i < B; i++)
                    w[i] =
                        (qk_minifloat_rne_value(w[i] * e, man, emin, e_hi, maxv, nanv) * d) * s_dec;
            }
        }
    }
    return whole;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
size_t
qk_quant_row_batched16(const qk_plan *p, size_t r, float *row) {
    return p->rounding == QK_ROUND_SR ? quant_row_batched_body(p, r, row, 16, 1)
                                      : quant_row_batched_body(p, r, row, 16, 0);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
size_t
qk_quant_row_batched32(const qk_plan *p, size_t r, float *row) {
    return p->rounding == QK_ROUND_SR ? quant_row_batched_body(p, r, row, 32, 1)
                                      : quant_row_batched_body(p, r, row, 32, 0);
}

/* NVFP4 2D (16x16 blocks, weights) RNE fake-quant without statistics, in place on the h <= 16
 * rows starting at g (a row group): per block column the amax of the 16x16 tile by bits
 * (NaN and +-Inf ignored), the reference's own scale_for, then the tile's elements with
 * qk_minifloat_rne_value (equal to the E2M1 codec on all 2^32 inputs) in the reference's
 * order, (elem * sb) * S_dec. So the bits equal qk_quant_group_ref's (tested). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void
qk_quant_group_nvfp4_2d_fast(const qk_plan *p, float *g, size_t h) {
    const size_t k = p->k;
    const float s_dec = p->s_dec;
    for (size_t c0 = 0; c0 < k; c0 += 16) {
        size_t n = k - c0 < 16 ? k - c0 : 16;
        const block_scale bs = scale_for(p, tile_amax_by_bits(g + c0, h, n, k));
        const float e = bs.enc, d = bs.dec;
        for (size_t r = 0; r < h; r++) {
            float *v = g + r * k + c0;
            for (size_t i = 0; i < n; i++)
                v[i] = (qk_minifloat_rne_value(v[i] * e, 1, 0, 3, 6.0f, 6.0f) * d) * s_dec;
        }
    }
}

/* Fast path for RNE fake-quant of the symmetric integer formats (int8_channel, int4_group,
 * any group size) in place on one row: per block the amax by bits (NaN and +-Inf ignored),
 * the reference's scale s = scale_for(amax).f32, then a branch-free loop the compiler
 * vectorises: q = x / s (the reference's division), clamped to +-int_max (before rounding:
 * the same result, the limits being integers), rounded to nearest even by adding and
 * subtracting 1.5 * 2^23 (exact for |q| <= 2^22; gives +0, never -0, as the reference's one
 * integer zero does), NaN to 0, then q * s. So the bits equal qk_quant_group_ref's (tested).
 * Statistics, when asked for, take a second loop over the block with the input kept. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void
qk_quant_row_int_fast(const qk_plan *p, float *row, stats_acc *acc) {
    const float lim = (float)p->elem->int_max, nlim = -lim;
    const float round_c = 0x1.8p23f;
    for (size_t c0 = 0; c0 < p->k; c0 += p->block) {
        size_t n = p->k - c0 < p->block ? p->k - c0 : p->block;
        float *v = row + c0;
        int nonfinite;
        const float s = scale_for(p, amax_by_bits(v, n, &nonfinite)).f32;
        if (!acc) {
            for (size_t i = 0; i < n; i++) {
                float x = v[i];
                float q = x / s;
                q = q < lim ? q : lim; /* NaN -> lim here, 0 below */
                q = q > nlim ? q : nlim;
                q = (q + round_c) - round_c;
                v[i] = (x != x ? 0.0f : q) * s;
            }
            continue;
        }
        int any_in = 0, any_out = 0;
        for (size_t i = 0; i < n; i++) {
            float x = v[i];
            float q0 = x / s, q = q0;
            q = q < lim ? q : lim;
            q = q > nlim ? q : nlim;
            q = (q + round_c) - round_c;
            float y = (x != x ? 0.0f : q) * s;
            v[i] = y;
            double d = (double)y - (double)x;
            acc->sq_err += d * d;
            acc->sq_sig += (double)x * (double)x;
            acc->clipped += fabsf(q0) > lim;
            acc->nonfinite += !(fabsf(x) <= FLT_MAX);
            any_in |= x != 0.0f;
            any_out |= y != 0.0f;
        }
        acc->blocks++;
        acc->underflow += any_in && !any_out;
    }
}

/* Whether qk_quant_row_int_fast covers this call: RNE, symmetric integer elements in 1D
 * blocks. */
int qk_int_fast_path_applies(const qk_plan *p) {
    return p->rounding == QK_ROUND_RNE && p->brows == 1 && p->elem->kind == QK_CODEC_INT &&
           p->fmt->rule == QK_RULE_ABSMAX;
}

/* Whether qk_quant_row_fast covers this call: RNE (or SR with E2M1 elements), 1D blocks of at
 * most QK_FAST_CHUNK (or one per-tensor scale), minifloat elements whose rounding constant
 * 2^(e_hi - man_bits + 23) is a finite FP32 (all but BF16, which no block format uses). */
int qk_fast_path_applies(const qk_plan *p) {
    const qk_codec *el = p->elem;
    qk_scale_rule rule = p->fmt->rule;
    int rounding_ok =
        p->rounding == QK_ROUND_RNE || (p->rounding == QK_ROUND_SR && el == &qk_codec_e2m1);
    if (!rounding_ok || p->brows != 1 || el->kind != QK_CODEC_MINIFLOAT || p->exp2) return 0;
    if (el->emax + 1 - el->man_bits + 23 > 127) return 0;
    if (rule == QK_RULE_TENSOR) return 1;
    return (rule == QK_RULE_NVFP4 || rule == QK_RULE_MX) && p->block <= QK_FAST_CHUNK;
}
