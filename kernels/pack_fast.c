/* Packed quantization of row groups: the fast paths' operations writing codes and scales
 * (same bits as the reference, which takes every other call). */
#include <stdlib.h>

#include "scale_rules.h"

/* The code of v, a value on codec el's grid as the value fast paths give it (RNE or SR onto
 * the grid, saturated, the sign kept; NaN only for a NaN input of a codec with a NaN code, and
 * the codes without one give +max for NaN, their nan_code), without branches: below 2^emin
 * the subnormal code |v| * 2^(man - emin), an integer, from the bits of that plus 2^23; above,
 * the FP32 exponent and top mantissa bits rebiased; then the sign bit, and nan_code for NaN.
 * So encode(x) == minifloat_code(value(x)) wherever value(x) == decode(encode(x)) holds, which
 * the value paths' exhaustive tests prove (and the packed tests check against the reference). */
__attribute__((always_inline)) static inline uint32_t
minifloat_code(float v, int man, float min_normal, float sub_mul, uint32_t rebias,
               uint32_t sign_bit, uint32_t nan_code) {
    uint32_t u = qk_bits_of(v), ua = u & 0x7FFFFFFFu;
    float a = qk_float_of(ua);
    uint32_t sub = qk_bits_of(a * sub_mul + 0x1p23f) - qk_bits_of(0x1p23f);
    uint32_t nrm = (ua >> (23 - man)) - rebias;
    uint32_t code = (a < min_normal ? sub : nrm) | ((u >> 31) * sign_bit);
    return v != v ? nan_code : code;
}

/* Codes of the n grid values v of minifloat codec el into one row of packed codes (4-bit: two
 * per byte, the even column low; an odd n leaves the last high nibble 0; else one a byte). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
pack_minifloat_codes(const qk_codec *el, const float *v, size_t n, uint8_t *out) {
    const int man = el->man_bits;
    const float min_normal = qk_pow2f(1 - el->bias), sub_mul = qk_pow2f(man - (1 - el->bias));
    const uint32_t rebias = (uint32_t)(127 - el->bias) << man, sign_bit = 1u << (el->bits - 1);
    const uint32_t nan_code = el->nan_code;
    if (el->bits == 4) {
        for (size_t i = 0; i < n / 2; i++)
            out[i] = (uint8_t)(minifloat_code(v[2 * i], man, min_normal, sub_mul, rebias, sign_bit,
                                              nan_code) |
                               minifloat_code(v[2 * i + 1], man, min_normal, sub_mul, rebias,
                                              sign_bit, nan_code)
                                   << 4);
        if (n & 1)
            out[n / 2] = (uint8_t)minifloat_code(v[n - 1], man, min_normal, sub_mul, rebias,
                                                 sign_bit, nan_code);
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] =
                (uint8_t)minifloat_code(v[i], man, min_normal, sub_mul, rebias, sign_bit, nan_code);
    }
}

/* Grid values (before any decode scale) of row r of a 1D minifloat format (NVFP4, MX, FP8 per
 * tensor; RNE, or SR for E2M1: what qk_fast_path_applies admits) into v [k], and the block-scale
 * codes into sc [nblk] (none per tensor). Blocks of B elements (the format's block; 32-element
 * chunks of the one scale per tensor) in batches of QK_BATCH: the amaxes by bits (NaN and
 * +-Inf ignored; MX notes whether a block holds one), the scales across the batch (NVFP4 the
 * branch-free cast, E_b = min(1 / (sb * S_dec), FLT_MAX); MX qk_mx_scale_code_core, 0xFF for
 * a block holding Inf or NaN), then the elements, x * E_b rounded by qk_minifloat_rne_value
 * or qk_e2m1_sr_value with the SR bits of each element's index in the whole tensor: the
 * operations of qk_quant_row_fast and the batched fake-quant path, so the same bits. */
__attribute__((always_inline)) static inline void pack_row_minifloat_body(const qk_plan *p,
                                                                          size_t r, const float *x,
                                                                          float *v, uint8_t *sc,
                                                                          const size_t B) {
    const qk_codec *el = p->elem;
    const int man = el->man_bits, emin = 1 - el->bias, e_hi = el->emax + 1;
    const float maxv = el->max_value, nanv = qk_codec_decode(el, el->nan_code);
    const qk_scale_rule rule = p->fmt->rule;
    const int sr = p->rounding == QK_ROUND_SR;
    const size_t k = p->k, span = B * QK_BATCH;
    const float s_enc_6 = p->s_enc_6, s_dec = p->s_dec;
    const qk_nvfp4_clamp clamp = p->clamp;
    sr_cache cache = {UINT64_MAX, {0, 0, 0, 0}};
    for (size_t c0 = 0; c0 < k; c0 += span) {
        const int full = c0 + span <= k;
        const size_t nb = full ? QK_BATCH : (k - c0 + B - 1) / B;
        float enc[QK_BATCH];
        if (rule == QK_RULE_TENSOR) {
            for (int j = 0; j < QK_BATCH; j++)
                enc[j] = p->s_enc;
        } else {
            int32_t m[QK_BATCH], any[QK_BATCH];
            uint8_t code[QK_BATCH];
            for (int j = 0; j < QK_BATCH; j++) {
                const float *w = x + c0 + B * (size_t)j;
                size_t n = B;
                if (!full) {
                    size_t cj = c0 + B * (size_t)j;
                    n = (size_t)j < nb ? (k - cj < B ? k - cj : B) : 0;
                }
                int32_t mx = 0, an = 0;
                for (size_t i = 0; i < n; i++) {
                    int32_t b = (int32_t)(qk_bits_of(w[i]) & 0x7FFFFFFFu);
                    an = b > an ? b : an;
                    b = b >= 0x7F800000 ? 0 : b;
                    mx = b > mx ? b : mx;
                }
                m[j] = mx;
                any[j] = an;
            }
            if (rule == QK_RULE_NVFP4) {
                for (int j = 0; j < QK_BATCH; j++) {
                    uint32_t c = nvfp4_scale_code_bf(qk_float_of((uint32_t)m[j]), s_enc_6, clamp);
                    float e = 1.0f / (e4m3_value_nonneg_bf(c) * s_dec);
                    enc[j] = e < FLT_MAX ? e : FLT_MAX;
                    code[j] = (uint8_t)c;
                }
            } else {
                for (int j = 0; j < QK_BATCH; j++) {
                    uint8_t c = any[j] >= 0x7F800000
                                    ? 0xFF
                                    : qk_mx_scale_code_core(qk_float_of((uint32_t)m[j]), p->mx_rule,
                                                            el->emax, man, maxv);
                    enc[j] = c == 0xFF ? NAN : qk_pow2f(127 - (int)c);
                    code[j] = c;
                }
            }
            memcpy(sc + c0 / B, code, nb);
        }
        for (size_t j = 0; j < nb; j++) {
            const size_t cj = c0 + B * j, n = k - cj < B ? k - cj : B;
            const float e = enc[j], *w = x + cj;
            float *o = v + cj;
            if (sr) {
                uint32_t rb[32];
                for (size_t i = 0; i < n; i++)
                    rb[i] = sr_bits_cached(p, &cache, r * k + cj + i);
                for (size_t i = 0; i < n; i++)
                    o[i] = qk_e2m1_sr_value(w[i] * e, rb[i]);
            } else if (n == B) {
                for (size_t i = 0; i < B; i++)
                    o[i] = qk_minifloat_rne_value(w[i] * e, man, emin, e_hi, maxv, nanv);
            } else {
                for (size_t i = 0; i < n; i++)
                    o[i] = qk_minifloat_rne_value(w[i] * e, man, emin, e_hi, maxv, nanv);
            }
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
pack_row_minifloat16(const qk_plan *p, size_t r, const float *x, float *v, uint8_t *sc) {
    pack_row_minifloat_body(p, r, x, v, sc, 16);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
pack_row_minifloat32(const qk_plan *p, size_t r, const float *x, float *v, uint8_t *sc) {
    pack_row_minifloat_body(p, r, x, v, sc, 32);
}

/* Codes and FP32 scales of row x of a symmetric integer format (int8_channel, int4_group;
 * RNE, 1D) into out and sf [nblk]: qk_quant_row_int_fast's operations (the reference's scale
 * s = amax / int_max, q = x / s clamped to +-int_max, rounded to nearest even with 1.5 * 2^23,
 * NaN to 0), then q's two's complement in the codec's bits (4-bit: two per byte). v [k] holds
 * the integers on the way. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
pack_row_int(const qk_plan *p, const float *x, float *v, uint8_t *out, float *sf) {
    const float lim = (float)p->elem->int_max, nlim = -lim;
    const float round_c = 0x1.8p23f;
    const size_t k = p->k;
    for (size_t c0 = 0, b = 0; c0 < k; c0 += p->block, b++) {
        size_t n = k - c0 < p->block ? k - c0 : p->block;
        const float *w = x + c0;
        int nonfinite;
        const float s = scale_for(p, amax_by_bits(w, n, &nonfinite)).f32;
        sf[b] = s;
        for (size_t i = 0; i < n; i++) {
            float q = w[i] / s;
            q = q < lim ? q : lim;
            q = q > nlim ? q : nlim;
            q = (q + round_c) - round_c;
            v[c0 + i] = w[i] != w[i] ? 0.0f : q;
        }
    }
    if (p->elem->bits == 4) {
        for (size_t i = 0; i < k / 2; i++)
            out[i] = (uint8_t)(((uint32_t)(int32_t)v[2 * i] & 0xFu) |
                               ((uint32_t)(int32_t)v[2 * i + 1] & 0xFu) << 4);
        if (k & 1) out[k / 2] = (uint8_t)((uint32_t)(int32_t)v[k - 1] & 0xFu);
    } else {
        for (size_t i = 0; i < k; i++)
            out[i] = (uint8_t)(int32_t)v[i];
    }
}

/* Codes and scales of the NVFP4 2D row group starting at tensor row r0 (h <= 16 rows of x,
 * 16x16 blocks, RNE): per block column the tile's amax by bits (NaN and +-Inf ignored), the
 * reference's scale_for, its code repeated in each of the h rows, the elements rounded by
 * qk_minifloat_rne_value into v [h x k] (qk_quant_group_nvfp4_2d_fast's operations), then each
 * row's codes packed. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
pack_group_nvfp4_2d(const qk_plan *p, size_t r0, const float *x, size_t h, float *v,
                    qk_packed *pk) {
    const size_t k = p->k;
    for (size_t c0 = 0, b = 0; c0 < k; c0 += 16, b++) {
        size_t n = k - c0 < 16 ? k - c0 : 16;
        const block_scale bs = scale_for(p, tile_amax_by_bits(x + c0, h, n, k));
        const float e = bs.enc;
        for (size_t r = 0; r < h; r++) {
            const float *w = x + r * k + c0;
            float *o = v + r * k + c0;
            pk->scales[(r0 + r) * p->nblk + b] = bs.code;
            for (size_t i = 0; i < n; i++)
                o[i] = qk_minifloat_rne_value(w[i] * e, 1, 0, 3, 6.0f, 6.0f);
        }
    }
    for (size_t r = 0; r < h; r++)
        pack_minifloat_codes(p->elem, v + r * k, k, pk->codes + (r0 + r) * pk->row_bytes);
}

/* Which packed fast path covers this call: 1 = 1D minifloat (qk_fast_path_applies), 2 = integer
 * (qk_int_fast_path_applies), 3 = NVFP4 2D with RNE; 0 = the reference. Never under
 * reference_only, nor for a tiny tensor under QK_TINY_EXACT. */
static int packed_fast_kind(const qk_plan *p, const qk_quant_options *opt) {
    if (opt->reference_only || p->exp2) return 0;
    if (qk_fast_path_applies(p)) return 1;
    if (qk_int_fast_path_applies(p)) return 2;
    if (p->rounding == QK_ROUND_RNE && p->fmt->rule == QK_RULE_NVFP4 && p->brows == 16 &&
        p->block == 16)
        return 3;
    return 0;
}

/* Quantizes the row groups holding tensor rows [row0, row0 + n) (x: those rows) into pk, whose
 * tensor scales p carries; the fast path where one applies, with a per-thread buffer of
 * block_rows x k grid values (the reference when it cannot be allocated: same bits). */
void qk_quantize_groups(const qk_plan *p, const qk_quant_options *opt, const float *x, size_t row0,
                        size_t n, qk_packed *pk) {
    const size_t k = p->k, g0 = row0 / p->brows, g1 = (row0 + n + p->brows - 1) / p->brows;
    const int kind = packed_fast_kind(p, opt);
#pragma omp parallel num_threads(p->threads)
    {
        float *v = kind ? malloc(p->brows * k * sizeof *v) : NULL;
#pragma omp for schedule(static)
        for (size_t g = g0; g < g1; g++) {
            size_t r0 = g * p->brows;
            size_t h = p->rows - r0 < p->brows ? p->rows - r0 : p->brows;
            const float *xg = x + (r0 - row0) * k;
            if (!v) {
                qk_quant_group_ref(p, x, r0, h, pk, NULL, NULL);
            } else if (kind == 1) {
                uint8_t *sc = pk->scales ? pk->scales + r0 * p->nblk : NULL;
                if (p->block == 16)
                    pack_row_minifloat16(p, r0, xg, v, sc);
                else
                    pack_row_minifloat32(p, r0, xg, v, sc);
                pack_minifloat_codes(p->elem, v, k, pk->codes + r0 * pk->row_bytes);
            } else if (kind == 2) {
                pack_row_int(p, xg, v, pk->codes + r0 * pk->row_bytes,
                             pk->scales_f32 + r0 * p->nblk);
            } else {
                pack_group_nvfp4_2d(p, r0, xg, h, v, pk);
            }
        }
        free(v);
    }
}
