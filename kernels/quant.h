/* Block quantizers: the public entry point of qsweep's numeric core.
 *
 * CONTRACT HEADER, written first so the model engine can code against it; the kernels
 * owner implements it and may extend it (never rename what is here without updating users).
 *
 * Tensors are row-major FP32 matrices [rows x k]; blocks run along k (the GEMM reduction
 * axis). A ragged tail block (k not a multiple of the block size) is padded with zeros
 * that never enter amax. Facts and formulas: docs/numerics.md. */
#ifndef QK_QUANT_H
#define QK_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "error.h"

/* Rounding of elements onto the element grid. */
typedef enum qk_rounding {
    QK_ROUND_RNE = 0, /* round to nearest, ties to even, saturating (cvt.rn.satfinite) */
    QK_ROUND_RZ = 1,  /* round toward zero, saturating */
    QK_ROUND_SR = 2,  /* stochastic rounding, Philox4x32-10 bits keyed by (seed, tensor, step, i) */
} qk_rounding;

/* MXFP block-scale rule (docs/numerics.md section 2.3). RCEIL is the default. */
typedef enum qk_mx_scale_rule {
    QK_MX_RCEIL = 0,
    QK_MX_FLOOR = 1, /* OCP MX v1.0 section 6.3 */
    QK_MX_CEIL = 2,
    QK_MX_EVEN = 3,
} qk_mx_scale_rule;

/* NVFP4 block-scale lower clamp (docs/numerics.md section 6, item 4). NONE (TransformerEngine)
 * is the default. */
typedef enum qk_nvfp4_clamp {
    QK_NVFP4_CLAMP_NONE = 0,
    QK_NVFP4_CLAMP_TORCHAO = 1,     /* block scale >= 2^-6 */
    QK_NVFP4_CLAMP_ZERO_TO_ONE = 2, /* ModelOpt: a zero block scale becomes 1 */
} qk_nvfp4_clamp;

/* What a per-tensor-scaled format (NVFP4, FP8 per tensor) does with a "tiny" tensor: one whose
 * amax_t is so small that TransformerEngine's S_enc = max/amax_t exceeds 2^126 (NVFP4:
 * amax_t < 2688 * 2^-126, about 2^-114.6), so S_dec = 1/S_enc is an FP32 subnormal or, once
 * S_enc saturates at FLT_MAX (amax_t <= 2^-117), no longer its reciprocal. Such tensors are
 * counted in qk_quant_stats.n_tiny_tensors under either choice (kernels/README.md). */
typedef enum qk_tiny_amax {
    QK_TINY_TE = 0,    /* TransformerEngine's formula as is (default): encode and decode scales
                          disagree; the amax element comes back -31% at amax_t = 2^-126, -66%
                          at 2^-127, and the whole tensor is 0 at 2^-130 */
    QK_TINY_EXACT = 1, /* the tensor is quantized as x * 2^p with amax_t * 2^p in [1, 2)
                          (exact), and decoded values are multiplied by 2^-p (one rounding):
                          results equal TE's on the rescaled tensor, scaled back */
} qk_tiny_amax;

/* One descriptor per format (formats are data). Opaque here; see format.h. */
typedef struct qk_format qk_format;

/* Options of one quantization call. Zero-initialised = the documented defaults. */
typedef struct qk_quant_options {
    qk_rounding rounding;       /* default RNE */
    qk_mx_scale_rule mx_rule;   /* MX formats only; default RCEIL */
    qk_nvfp4_clamp nvfp4_clamp; /* NVFP4 only; default none */
    int group_size;             /* INT4 group size; 0 = 128 */
    uint64_t seed;              /* stochastic rounding and RHT sign vector */
    uint32_t tensor_id;         /* distinct per tensor so two tensors never share an RNG stream */
    uint32_t step;              /* training step (SR stream) */
    int threads;                /* 0 = all (OpenMP default); results are identical for any value */
    int reference_only;         /* 1 = always take the scalar reference path (tests compare the
                                   faster paths against it); 0 = fastest path, same bits */
    qk_tiny_amax tiny_amax;     /* NVFP4 and FP8 per tensor; default QK_TINY_TE */
    int tensor_amax_given;      /* 1: the per-tensor scale (NVFP4, FP8 per tensor) comes from
                                   tensor_amax below instead of the tensor's own amax; for several
                                   tensors sharing one global scale (fused q/k/v, gate/up: pass
                                   qk_joint_amax of the group to each). 0 = own amax */
    float tensor_amax;          /* the amax to use when tensor_amax_given: finite, >= 0, same
                                   units as x; elements above it saturate (counted as clipped) */
} qk_quant_options;

/* Version of the numeric results: bumped whenever the same input and options can give other
 * bits (a job key that names it then changes). 2: +-Inf no longer enters amax (NVFP4, FP8
 * per tensor, INT), MX scales are capped so that no block decodes to Inf. */
#define QK_NUMERICS_VERSION 2

/* Error statistics of one fake-quant call, over all rows*k elements. */
typedef struct qk_quant_stats {
    double mse;          /* mean squared error, FP32 units squared */
    double signal_power; /* mean of x^2 */
    double sqnr_db;      /* 10*log10(signal_power/mse); +INFINITY when mse == 0 */
    size_t n_elements;
    size_t n_clipped; /* elements whose scaled magnitude exceeded the element max */
    size_t n_blocks;
    size_t n_underflow_blocks; /* nonzero blocks whose every element quantized to zero */
    size_t n_nonfinite;        /* input elements that were NaN or +-Inf */
    size_t n_tiny_tensors;     /* 1 when the per-tensor amax was tiny (qk_tiny_amax), else 0;
                                  summed over tensors by callers */
    float tensor_amax;         /* amax_t the per-tensor scale came from (given or own; NaN and
                                  +-Inf excluded); 0 for formats without a tensor scale */
    float tensor_scale;        /* decode scale S_dec applied to every value, 1 without one */
    int tensor_scale_exp2;     /* QK_TINY_EXACT: decoded values are also multiplied by
                                  2^tensor_scale_exp2 (< 0); else 0 */
    int tensor_amax_given;     /* 1 when options.tensor_amax_given supplied tensor_amax */
} qk_quant_stats;

/* Sets the option named key of opt, for format fmt, from its text value. Options per format:
 *   rounding   rne | rz | sr                    every format but bf16
 *   scale_rule rceil | floor | ceil | even      MX formats (docs/numerics.md section 2.3)
 *   clamp      none | torchao | zero_to_one     NVFP4 (docs/numerics.md section 3.4)
 *   tiny_amax  te | exact                      NVFP4, FP8 per tensor (qk_tiny_amax)
 *   group_size integer 1..65536                 int4_group
 * Errors: QS_ENOTFOUND for an option that does not apply to fmt (the message lists those that
 * do); QS_EINVAL for a missing or unknown value (the message lists the choices). opt is
 * unchanged on error. */
qs_status qk_quant_option_set(const qk_format *fmt, qk_quant_options *opt, const char *key,
                              const char *value, qs_error *err);

/* Canonical text of the value of a named enum option in opt ("rceil"), or NULL when key does not
 * apply to fmt or is group_size (an integer). Zero-initialised options give the defaults. */
const char *qk_quant_option_value(const qk_format *fmt, const qk_quant_options *opt,
                                  const char *key);

/* The option names that apply to fmt, comma-separated ("rounding, scale_rule"); "none" for
 * the identity format. For error messages and help text. */
const char *qk_quant_option_keys(const qk_format *fmt);

/* Looks a format up by its canonical lowercase name: "bf16" (identity), "nvfp4", "nvfp4_2d",
 * "mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "fp8_e4m3", "int8_channel",
 * "int4_group". Returns NULL for an unknown name. */
const qk_format *qk_format_by_name(const char *name);

/* Canonical name of a format (the inverse of qk_format_by_name). */
const char *qk_format_name(const qk_format *fmt);

/* Fake-quantizes x [rows x k] in place: quantize to fmt then dequantize to FP32, exactly as
 * the packed path would. stats may be NULL. Deterministic: identical bits for any thread
 * count. Errors: QS_EINVAL (rows or k is 0, option invalid for the format). */
qs_status qk_fake_quant(const qk_format *fmt, const qk_quant_options *opt, float *x, size_t rows,
                        size_t k, qk_quant_stats *stats, qs_error *err);

/* qk_fake_quant out of place: reads x [rows x k], writes the fake-quantized values to y
 * [rows x k], leaves x unchanged; y == x is the in-place call, otherwise the two must not
 * overlap. The same bits and statistics as qk_fake_quant on a copy of x, without the
 * caller's copy (the engine's master -> working weights). Errors: as
 * qk_fake_quant (QS_EINVAL also for a NULL y). */
qs_status qk_fake_quant_into(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                             float *y, size_t rows, size_t k, qk_quant_stats *stats, qs_error *err);

/* Packed storage of one quantized [rows x k] tensor. Buffers are carved out of ONE
 * allocation owned by the struct (qk_packed_init / qk_packed_release).
 * - codes: row r starts at codes + r*row_bytes. 4-bit codes (E2M1, INT4) are two per byte,
 *   the even column in the low nibble (bits 3..0) as CUDA, PyTorch and cuBLAS store them
 *   (docs/numerics.md 1.1); an odd k leaves the high nibble of a row's last byte 0. 6-, 8-bit
 *   codes take one byte each (FP6 right-aligned in the byte, not bit-packed).
 *   Minifloat codes are sign-magnitude, integer codes two's complement (element.h).
 * - scales (E4M3/E8M0 formats): [rows x blocks_per_row] bytes, row-major, one per 1D block;
 *   a 16x16 2D block repeats its scale in each of its 16 rows. Swizzle for cuBLASLt with
 *   qk_swizzle_128x4 (swizzle.h).
 * - scales_f32 (INT formats): [rows x blocks_per_row] FP32 decode scales.
 * - tensor_scale: the FP32 decode scale S_dec multiplying every value at decode (NVFP4:
 *   amax_t/2688, what ModelOpt calls weight_scale_2; FP8 per tensor: amax_t/448); 1 when the
 *   format has no tensor scale.
 * - tensor_scale_exp2: 0, except under QK_TINY_EXACT for a tiny tensor, where decoded values
 *   are further multiplied by 2^tensor_scale_exp2 (the true S_dec, tensor_scale *
 *   2^tensor_scale_exp2, is not an FP32 normal number then). */
typedef struct qk_packed {
    const qk_format *fmt;
    size_t rows, k;        /* logical shape */
    size_t block;          /* elements per block along k (k for per-row and per-tensor formats) */
    size_t blocks_per_row; /* ceil(k / block) */
    size_t row_bytes;      /* bytes of codes per row */
    uint8_t *codes;        /* [rows x row_bytes] */
    uint8_t *scales;       /* [rows x blocks_per_row] or NULL */
    float *scales_f32;     /* [rows x blocks_per_row] or NULL */
    float tensor_scale;    /* decode scale S_dec, or 1 */
    float tensor_amax;     /* amax_t that S_dec came from, given or own (0 when unused) */
    int tensor_scale_exp2; /* extra power of two of the decode scale, <= 0 (see above) */
    void *storage_;        /* the one allocation; private */
} qk_packed;

/* Sizes and allocates p for fmt/opt (opt may be NULL: defaults) and a [rows x k] tensor.
 * Errors: QS_EINVAL (rows or k 0, overflow, bad option), QS_EUNSUPPORTED ("bf16", which is
 * not quantized), QS_ENOMEM. On error p owns nothing. */
qs_status qk_packed_init(qk_packed *p, const qk_format *fmt, const qk_quant_options *opt,
                         size_t rows, size_t k, qs_error *err);

/* Frees what qk_packed_init allocated; p may be NULL or already released. */
void qk_packed_release(qk_packed *p);

/* Quantizes x [rows x k] (row-major FP32) into p, which qk_packed_init prepared with the
 * same format, options and shape. Deterministic for any thread count; the vectorised paths
 * (1D minifloat formats with RNE, and SR for E2M1; integer formats and nvfp4_2d with RNE)
 * give the scalar reference's bits (options.reference_only forces the reference). Errors:
 * QS_EINVAL (shape or format differs from p's, bad option). */
qs_status qk_quantize(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                      size_t rows, size_t k, qk_packed *p, qs_error *err);

/* Quantizes rows [row0, row0 + n) of the [p->rows x p->k] tensor that qk_packed_init prepared
 * p for, from x [n x p->k] holding those rows only, into their place in p (codes, block
 * scales) and sets p's tensor scale: for a tensor held in pieces, e.g. a BF16 master
 * converted to FP32 one chunk of rows at a time, so that no FP32 copy of the whole tensor
 * exists. Calling it over chunks that cover the tensor, in any order, with the same options
 * gives p bit for bit what one qk_quantize of the whole tensor gives, provided that for the
 * formats with a per-tensor scale (nvfp4, nvfp4_2d, fp8_e4m3) options.tensor_amax_given is 1
 * with tensor_amax = the tensor's amax (qk_joint_amax over the chunks, a first pass): a
 * chunk's own amax is not the tensor's, so those formats refuse the call without it. SR bits
 * are drawn by each element's index in the whole tensor. Blocks run along rows, so a chunk of
 * whole rows is whole blocks; 2D 16x16 blocks (nvfp4_2d) need row0 and n multiples of 16,
 * except a last chunk ending at p->rows. Errors: QS_EINVAL (rows outside the tensor or
 * splitting 2D blocks, tensor amax not given, format or block differing from p's, bad
 * option, x or p's storage missing); p is unchanged on error. */
qs_status qk_quantize_rows(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                           size_t row0, size_t n, qk_packed *p, qs_error *err);

/* Decodes p into y [p->rows x p->k]: value = elem(code) * block decode scale * tensor_scale,
 * in the order of the format's rule (format.h). threads: 0 = all. Errors: QS_EINVAL. */
qs_status qk_dequantize(const qk_packed *p, float *y, int threads, qs_error *err);

/* Joint absolute maximum of `count` tensors: max |x| over tensors[i][0 .. n[i]) for every i,
 * NaN and +-Inf ignored exactly as the per-tensor amax of qk_fake_quant ignores them. For a
 * global scale shared by tensors that a serving engine fuses into one GEMM (q/k/v, gate/up):
 * pass the result as options.tensor_amax (with tensor_amax_given = 1) to each tensor's call,
 * which then equals quantizing the tensors concatenated along rows (vllm-project/
 * llm-compressor#1869: q/k/v amax 0.28/0.2069/0.2211 all get S_enc = 2688/0.28 = 9600).
 * threads: 0 = all. A tensor with n[i] == 0 contributes nothing. Errors: QS_EINVAL (count 0,
 * a NULL array, or a NULL tensor with n[i] > 0, naming its index). */
qs_status qk_joint_amax(const float *const *tensors, const size_t *n, size_t count, int threads,
                        float *amax, qs_error *err);

/* NVFP4 global scales from the tensor amax (docs/numerics.md 3.3 steps 2-3, TransformerEngine):
 * S_enc = min(2688 / amax_t, FLT_MAX), and S_enc = 1 when amax_t is 0 or S_enc is 0
 * (amax_t = Inf); S_dec = 1 / S_enc. All in FP32. */
void qk_nvfp4_global_scales(float amax_t, float *s_enc, float *s_dec);

#ifdef __cplusplus
}
#endif

#endif
