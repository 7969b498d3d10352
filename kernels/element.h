/* Element codecs: FP32 <-> the small number formats of block quantization.
 *
 * One descriptor per element type (qk_codec, element_core.h). A minifloat is described by
 * its exponent bits, mantissa bits and bias; every minifloat goes through ONE encoder and ONE
 * decoder (element_core.h, CPU and GPU), so E2M1, E4M3, E5M2, E2M3, E3M2, FP16 and BF16 share
 * the same rounding code. Integer element types (INT8, INT4, symmetric) go through one
 * integer encoder.
 *
 * Conventions (all codecs, docs/numerics.md sections 1.2, 3.2, 4.4):
 * - Codes are sign-magnitude for minifloats (sign in the top bit of a `bits`-wide code) and
 *   two's complement for integers, right-aligned in a uint32_t.
 * - Encoding saturates like the hardware's cvt.*.satfinite: a finite value above the largest
 *   finite magnitude, and +-Inf, become +-max finite. No codec ever encodes to Inf.
 * - NaN input: E2M1, E2M3, E3M2 (no NaN code) give +max (CUDA's "NaN -> positive MAXNORM");
 *   E4M3 gives 0x7F, E5M2 0x7F, FP16 0x7E00, BF16 0x7FC0 (the sign of NaN is dropped, as
 *   CUDA's float path does); integers give 0.
 * - The sign of zero is kept: -0.0 and negative values that round to zero give the -0 code.
 * - FP32 subnormal inputs are honoured (no FTZ/DAZ anywhere).
 *
 * Rounding (enum qk_rounding in quant.h):
 * - RNE: round to nearest, ties to the even code, then saturate.
 * - RZ: truncate toward zero, then saturate.
 * - SR: stochastic. With q the magnitude truncated onto the element grid and f in [0,1) the
 *   remaining fraction of one grid step, the result is q+1 step when rbits < f * 2^32, else
 *   q; so P(round up) = f exactly when f has at most 32 fraction bits (always true for the
 *   FP4/FP6/FP8 codecs on normal FP32 inputs; otherwise f is truncated to 32 bits, a bias
 *   below 2^-32 of one step). The caller supplies rbits (see philox.h for their source). */
#ifndef QK_ELEMENT_H
#define QK_ELEMENT_H

#include <stdint.h>

#include "element_core.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const qk_codec qk_codec_e2m1; /* FP4, bias 1, max 6 */
extern const qk_codec qk_codec_e4m3; /* FP8, bias 7, max 448, NaN 0x7F */
extern const qk_codec qk_codec_e5m2; /* FP8, bias 15, max 57344 */
extern const qk_codec qk_codec_e2m3; /* FP6, bias 1, max 7.5 */
extern const qk_codec qk_codec_e3m2; /* FP6, bias 3, max 28 */
extern const qk_codec qk_codec_fp16; /* IEEE binary16 (saturating) */
extern const qk_codec qk_codec_bf16; /* bfloat16 (saturating) */
extern const qk_codec qk_codec_int8; /* symmetric INT8, [-127, 127] */
extern const qk_codec qk_codec_int4; /* symmetric INT4, [-7, 7] */

/* Looks a codec up by name ("e2m1", "e4m3", "e5m2", "e2m3", "e3m2", "fp16", "bf16", "int8",
 * "int4"); NULL when unknown. */
const qk_codec *qk_codec_by_name(const char *name);

/* Encodes x with the given rounding (see above). rbits is used only by QK_ROUND_SR. This is
 * the scalar reference; faster paths are tested bit-identical against it. */
uint32_t qk_codec_encode(const qk_codec *c, float x, qk_rounding rounding, uint32_t rbits);

/* Decodes a code (only the low c->bits bits are read). Exact: every code of every codec is
 * an FP32 value. NaN codes give a quiet NaN, IEEE Inf codes give +-Inf. */
float qk_codec_decode(const qk_codec *c, uint32_t code);

/* E8M0 (OCP MX v1.0 section 5.4.1): unsigned exponent-only, code c means 2^(c-127),
 * 0xFF is NaN, no zero. Rounding toward zero or toward +Inf, as CUDA's
 * __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero|cudaRoundPosInf) (docs/numerics.md
 * section 4.4): the sign of x is ignored, 0 gives 0x00, NaN gives 0xFF, Inf and results
 * above 2^127 give 0xFE. */
typedef enum qk_e8m0_rounding {
    QK_E8M0_RZ = 0,
    QK_E8M0_RP = 1,
} qk_e8m0_rounding;

/* E8M0 code of |x| under the rounding above (the sign is ignored, as CUDA's
 * __nv_cvt_float_to_e8m0 does: docs/numerics.md section 4.4); 0 gives 0x00, NaN gives 0xFF. */
uint8_t qk_e8m0_encode(float x, qk_e8m0_rounding rounding);

/* 2^(code-127) as FP32 (code 0 is the FP32 subnormal 2^-127); NaN for 0xFF. */
float qk_e8m0_decode(uint8_t code);

/* MX block-scale code (E8M0) for a block of absolute maximum amax under one rule
 * (docs/numerics.md section 2.3; torchao ScaleCalculationMode), for element codec elem:
 * FLOOR: floor(log2 amax) - emax;  CEIL: ceil(log2 amax) - emax;
 * EVEN:  floor(log2 R(amax)) - emax, R rounding amax to man_bits mantissa bits
 *        (add 2^(22-man_bits) to the FP32 bits, clear the mantissa);
 * RCEIL: E8M0 rounded toward +Inf of amax * (1/max_value) in FP32.
 * The unbiased exponent is clamped to [-127, 127 - emax] (the upper bound is FLOOR's scale
 * of FLT_MAX, so that max_value * 2^s, the largest decoded value, stays finite: without it
 * CEIL, EVEN and RCEIL decode a block of amax FLT_MAX to +-Inf, e.g. MXFP4 RCEIL code 253,
 * 4 * 2^126 = 2^128); amax == 0 gives 0x00; a non-finite amax
 * (Inf or NaN) gives 0xFF, so the whole block decodes to NaN (the OCP way for an MX block to
 * carry a non-finite value). floor(log2) of an FP32-subnormal amax is taken as -127 (the
 * exponent field, as torchao does). */
uint8_t qk_mx_scale_code(float amax, qk_mx_scale_rule rule, const qk_codec *elem);

#ifdef __cplusplus
}
#endif

#endif
