/* Bit-level arithmetic that the C reference and the CUDA kernels compile alike, so CPU and GPU
 * give the same bits (docs/architecture.md, "Invariants"): exact integer or correctly rounded
 * FP32, no FMA dependence; *_core functions take plain parameters, no host tables. Sources:
 * element.h, philox.h, docs/numerics.md 1.2, 2.3, 3.2, 3.3. */
#ifndef QK_NUMERICS_H
#define QK_NUMERICS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

#ifdef __CUDACC__
#define QK_HD static inline __host__ __device__
#else
#define QK_HD static inline
#endif

/* The IEEE-754 bits of an FP32 value and back (memcpy: no aliasing, no conversion). */
QK_HD uint32_t qk_bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

QK_HD float qk_float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* 2^e for -127 <= e <= 127, exactly (2^-127 is an FP32 subnormal). */
QK_HD float qk_pow2f(int e) {
    return qk_float_of(e >= -126 ? (uint32_t)(e + 127) << 23 : 0x00400000u);
}

/* The value of an E8M0 scale code: 2^(code - 127), NaN for 0xFF (docs/numerics.md 2). */
QK_HD float qk_e8m0_value_core(uint32_t code) {
    return code == 0xFF ? qk_float_of(0x7FC00000u) : qk_pow2f((int)code - 127);
}

/* --- Philox4x32-10 (Salmon et al., SC11; Random123 constants) ----------------------------- */

QK_HD void qk_philox4x32_10_core(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {       /* the key is bumped before every round but the first */
            k0 += 0x9E3779B9u; /* Weyl increments: golden ratio, sqrt(3) - 1 */
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c0; /* multipliers M0, M1 */
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Stochastic-rounding bits of element `index` of tensor `tensor_id` at `step` (philox.h). */
QK_HD uint32_t qk_sr_bits_core(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t index) {
    uint64_t blk = index >> 2;
    const uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), tensor_id, step};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    qk_philox4x32_10_core(ctr, key, out);
    return out[index & 3];
}

/* --- minifloat encoder (element.h) ---------------------------------------------------------- */

/* x as a sign-magnitude minifloat (bits, exp_bits, man_bits, bias), saturating to max_code, NaN
 * to nan_code; in integers on the FP32 bits: q target steps of 2^(te - man_bits), te =
 * max(exponent of x, 1 - bias), rounded by the remainder. Requires 1 - bias >= -126. */
QK_HD uint32_t qk_minifloat_encode_core(int bits, int exp_bits, int man_bits, int bias,
                                        uint32_t max_code, uint32_t nan_code, float x,
                                        qk_rounding rounding, uint32_t rbits) {
    uint32_t u = qk_bits_of(x);
    uint32_t a = u & 0x7FFFFFFFu;
    uint32_t sign = (u >> 31) ? (1u << (bits - 1)) : 0;
    if (a > 0x7F800000u) return nan_code;
    if (a == 0x7F800000u) return sign | max_code;
    int fe = (int)(a >> 23);
    uint64_t sig = a & 0x7FFFFFu;
    int e;
    if (fe == 0) {
        e = -126; /* FP32 subnormal: value = sig * 2^-149 */
    } else {
        e = fe - 127;
        sig |= 0x800000u;
    }
    if (sig == 0) return sign;
    int m = man_bits;
    int emin = 1 - bias;
    int te = e < emin ? emin : e;  /* an FP32 subnormal always lands on te = emin */
    int shift = 23 - m + (te - e); /* FP32 bits below one target step; >= 0 as m <= 23 */
    uint64_t q = shift < 64 ? sig >> shift : 0;
    uint64_t rem = shift < 64 ? sig - (q << shift) : sig;
    if (rounding == QK_ROUND_RNE) {
        /* rem < 2^24 while half = 2^(shift-1) >= 2^24 for shift > 24: never a round-up */
        if (shift >= 1 && shift <= 25) {
            uint64_t half = 1ull << (shift - 1);
            if (rem > half || (rem == half && (q & 1))) q++;
        }
    } else if (rounding == QK_ROUND_SR) {
        if (shift >= 1 && shift < 56) {
            uint64_t frac32 = (rem << 32) >> shift; /* fraction of one step, 32 bits */
            if ((uint64_t)rbits < frac32) q++;
        }
    }
    if (q == 0) return sign;
    if (q >> (m + 1)) { /* rounding carried into the next binade: q == 2^(m+1) */
        q >>= 1;
        te++;
    }
    uint32_t mag;
    if (q < (1ull << m)) {
        mag = (uint32_t)q; /* subnormal of the target, only possible at te == emin */
    } else {
        int ef = te + bias;
        if (ef >= (1 << exp_bits)) return sign | max_code;
        mag = ((uint32_t)ef << m) | (uint32_t)(q - (1ull << m));
    }
    if (mag > max_code) mag = max_code;
    return sign | mag;
}

/* E2M1 code -> value (docs/numerics.md 1.1), exact. */
QK_HD float qk_e2m1_value(uint32_t code) {
    uint32_t mag = code & 7u;
    float v =
        mag < 2 ? 0.5f * (float)mag : (float)(2u + (mag & 1u)) * qk_pow2f((int)(mag >> 1) - 2);
    return (code & 8u) ? -v : v;
}

/* E4M3 code 0..0x7E -> value: subnormals k * 2^-9, normals (8 + man) * 2^(exp - 10). */
QK_HD float qk_e4m3_value_nonneg(uint32_t code) {
    uint32_t ef = code >> 3, man = code & 7u;
    return ef == 0 ? (float)man * 0x1p-9f : (float)(8u | man) * qk_pow2f((int)ef - 10);
}

/* --- E8M0 and the MX scale rules (element.h, docs/numerics.md 2.3) -------------------------------- */

QK_HD uint8_t qk_e8m0_encode_core(float x, int round_up) {
    uint32_t a = qk_bits_of(x) & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0xFF;
    if (a == 0x7F800000u) return 0xFE;
    if (a == 0) return 0x00;
    uint32_t fe = a >> 23, man = a & 0x7FFFFFu;
    if (fe == 0) {
        /* FP32 subnormal, below 2^-126: rounds down to 2^-127 (code 0) except that RP takes
         * anything above 2^-127 (mantissa 2^22) up to 2^-126 (code 1). */
        return (uint8_t)(round_up && man > 0x400000u ? 0x01 : 0x00);
    }
    uint32_t code = fe; /* 2^(fe-127) has E8M0 code fe */
    if (round_up && man != 0) code++;
    if (code > 0xFE) code = 0xFE;
    return (uint8_t)code;
}

/* MX block-scale code for element type (emax, man_bits, max_value); see qk_mx_scale_code. */
QK_HD uint8_t qk_mx_scale_code_core(float amax, qk_mx_scale_rule rule, int emax, int man_bits,
                                    float max_value) {
    uint32_t a = qk_bits_of(amax) & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) return 0xFF;
    if (a == 0) return 0x00;
    int ex; /* unbiased shared exponent before clamping */
    if (rule == QK_MX_FLOOR) {
        ex = (int)(a >> 23) - 127 - emax;
    } else if (rule == QK_MX_CEIL) {
        ex = (int)(a >> 23) - 127 + ((a & 0x7FFFFFu) != 0) - emax;
    } else if (rule == QK_MX_EVEN) {
        uint32_t r = (a + (1u << (22 - man_bits))) & 0x7F800000u;
        ex = (int)(r >> 23) - 127 - emax;
    } else {
        /* RCEIL: torchao's descale amax * (1/max) in FP32, rounded up to E8M0 (CUDA RP) */
        uint8_t code = qk_e8m0_encode_core(qk_float_of(a) * (1.0f / max_value), 1);
        return code > 254 - emax ? (uint8_t)(254 - emax) : code;
    }
    if (ex < -127) ex = -127;
    /* Capped at FLT_MAX's FLOOR scale, so that no block decodes to Inf (CEIL, EVEN, RCEIL near
     * FLT_MAX: max_value * 2^(127 - emax) < 2^128; kernels/README.md). */
    if (ex > 127 - emax) ex = 127 - emax;
    return (uint8_t)(ex + 127);
}

/* --- NVFP4 tensor scales (docs/numerics.md 3.3 steps 2-3, TransformerEngine) -------------------- */

QK_HD void qk_nvfp4_global_scales_core(float amax_t, float *s_enc, float *s_dec) {
    float e = fminf(2688.0f / amax_t, FLT_MAX); /* 448 * 6 */
    if (amax_t == 0.0f || e == 0.0f) e = 1.0f;
    *s_enc = e;
    *s_dec = 1.0f / e;
}

/* --- fast paths ------------------------------------------------------------------------------ */

/* E2M1 RNE value of s, saturated to +-6, NaN +6, signs kept: docs/numerics.md 1.2's table
 * as a vectorisable sum of comparisons; the codec's value on all 2^32 inputs (tested). */
QK_HD float qk_e2m1_rne_value(float s) {
    float a = fabsf(s);
    /* grid 0, .5, 1, 1.5, 2, 3, 4, 6: each threshold passed adds the step to the next value */
    float v = 0.5f * (float)(a > 0.25f) + 0.5f * (float)(a >= 0.75f) + 0.5f * (float)(a > 1.25f) +
              0.5f * (float)(a >= 1.75f) + 1.0f * (float)(a > 2.5f) + 1.0f * (float)(a >= 3.5f) +
              2.0f * (float)(a > 5.0f);
    return (s != s) ? 6.0f : copysignf(v, s);
}

/* E2M1 SR value of s (saturated to +-6, NaN +6, sign kept): lo + q when rbits <
 * floor(f * 2^32), else lo (q |s|'s grid step, lo the multiple below, f = (|s| - lo)/q);
 * the codec's decision, exactly (tested). */
QK_HD float qk_e2m1_sr_value(float s, uint32_t rbits) {
    float a = fabsf(s);
    float q = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
    float lo = floorf(a / q) * q;                        /* a / q and the product are exact */
    double f32 = floor((double)((a - lo) / q) * 0x1p32); /* the fraction as 32 bits */
    float v = lo + ((double)rbits < f32 ? q : 0.0f);
    v = v < 6.0f ? v : 6.0f; /* saturation; also +Inf and NaN */
    return (s != s) ? 6.0f : copysignf(v, s);
}

/* A minifloat's RNE saturating value of s without its code: adding and subtracting
 * C = 2^(e - man_bits + 23), whose FP32 ulp is the grid step (e = max(exponent of |s|, emin),
 * at most e_hi, the exponent above max_value), makes FP32's own RNE round; then saturation
 * and the sign, NaN to nan_value. The codec's value for all 2^32 inputs (tested). */
QK_HD float qk_minifloat_rne_value(float s, int man_bits, int emin, int e_hi, float max_value,
                                   float nan_value) {
    float a = fabsf(s);
    int32_t e = (int32_t)(qk_bits_of(a) >> 23) - 127;
    e = e < emin ? emin : e;
    e = e > e_hi ? e_hi : e;
    float c = qk_float_of((uint32_t)(e - man_bits + 150) << 23);
    float y = (a + c) - c;
    y = y < max_value ? y : max_value; /* also NaN -> max_value, replaced below */
    return (s != s) ? nan_value : copysignf(y, s);
}

/* E4M3 RNE code of v >= 0, not NaN, saturating to 448 (the NVFP4 scale cast): subnormals by
 * v * 2^9 + 2^23, normals by rounding the FP32 mantissa to 3 bits; the codec's (tested). */
QK_HD uint32_t qk_e4m3_rne_nonneg(float v) {
    if (v > 448.0f) return 0x7E; /* (448, 464] rounds to 448, beyond saturates; +Inf too */
    if (v < 0x1p-6f) {
        float q = (v * 512.0f + 0x1p23f) - 0x1p23f; /* exact scaling, then RNE to integer */
        return (uint32_t)q;                         /* 0..8; 8 is code 0x08 = 2^-6 */
    }
    uint32_t u = qk_bits_of(v);
    u += 0x7FFFFu + ((u >> 20) & 1u); /* RNE into bit 20 */
    uint32_t code = (u >> 20) - (120u << 3);
    return code > 0x7E ? 0x7E : code;
}

#endif
