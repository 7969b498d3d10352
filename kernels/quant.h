/* Block quantizers of row-major FP32 [rows x k], blocks along k (a ragged tail padded with
 * zeros that never enter amax). Formulas: docs/numerics.md; policies: kernels/README.md. */
#ifndef QK_QUANT_H
#define QK_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "error.h"

typedef enum qk_rounding {
    QK_ROUND_RNE = 0, /* round to nearest, ties to even, saturating (cvt.rn.satfinite) */
    QK_ROUND_RZ = 1,  /* round toward zero, saturating */
    QK_ROUND_SR = 2,  /* stochastic rounding, Philox4x32-10 bits keyed by (seed, tensor, step, i) */
} qk_rounding;

/* MX block-scale rule (docs/numerics.md 2.3). */
typedef enum qk_mx_scale_rule {
    QK_MX_RCEIL = 0,
    QK_MX_FLOOR = 1, /* OCP MX v1.0 section 6.3 */
    QK_MX_CEIL = 2,
    QK_MX_EVEN = 3,
} qk_mx_scale_rule;

/* NVFP4 block-scale lower clamp (docs/numerics.md 6, item 4). */
typedef enum qk_nvfp4_clamp {
    QK_NVFP4_CLAMP_NONE = 0,
    QK_NVFP4_CLAMP_TORCHAO = 1,     /* block scale >= 2^-6 */
    QK_NVFP4_CLAMP_ZERO_TO_ONE = 2, /* ModelOpt: a zero block scale becomes 1 */
} qk_nvfp4_clamp;

/* A tensor whose S_enc = max/amax_t > 2^126 (NVFP4: amax_t < ~2^-114.6): kernels/README.md. */
typedef enum qk_tiny_amax {
    QK_TINY_TE = 0,    /* TransformerEngine's formula as is: scales disagree, values shrink */
    QK_TINY_EXACT = 1, /* quantize x * 2^p (amax_t * 2^p in [1, 2)), decode times 2^-p */
} qk_tiny_amax;

typedef struct qk_format qk_format; /* one descriptor per format (format.h) */

/* Options of one call; all zero = the defaults (RNE, RCEIL, no clamp, TE, own amax). */
typedef struct qk_quant_options {
    qk_rounding rounding;
    qk_mx_scale_rule mx_rule;   /* MX formats only */
    qk_nvfp4_clamp nvfp4_clamp; /* NVFP4 only */
    int group_size;             /* int4_group's group; 0 = 128 */
    uint64_t seed;              /* SR stream and RHT signs */
    uint32_t tensor_id, step;   /* SR stream: distinct per tensor, the training step */
    int threads;                /* 0 = all; the bits are the same for any count */
    int reference_only;         /* 1: the scalar reference path (tests), same bits */
    qk_tiny_amax tiny_amax;     /* NVFP4 and FP8 per tensor */
    int tensor_amax_given;      /* 1: tensor scale from tensor_amax (qk_joint_amax), 0: own */
    float tensor_amax;          /* finite, >= 0; elements above it saturate (clipped) */
} qk_quant_options;

/* Bumped whenever the same input and options can give other bits (job keys name it).
 * 2: +-Inf no longer enters amax; MX scales capped so that no block decodes to Inf. */
#define QK_NUMERICS_VERSION 2

/* Error statistics of one fake-quant call over its rows*k elements. */
typedef struct qk_quant_stats {
    double mse;          /* mean squared error, FP32 units squared */
    double signal_power; /* mean of x^2 */
    double sqnr_db;      /* 10*log10(signal_power/mse); +INFINITY when mse == 0 */
    size_t n_elements;
    size_t n_clipped; /* scaled magnitude above the element max */
    size_t n_blocks;
    size_t n_underflow_blocks; /* nonzero blocks that quantized to all zeros */
    size_t n_nonfinite;        /* NaN or +-Inf inputs */
    size_t n_tiny_tensors;     /* 1 for a tiny tensor amax (qk_tiny_amax) */
    float tensor_amax;         /* amax_t of the tensor scale (NaN, Inf excluded); 0 without one */
    float tensor_scale;        /* decode scale S_dec, 1 without one */
    int tensor_scale_exp2;     /* QK_TINY_EXACT: decode also times 2^this (< 0); else 0 */
    int tensor_amax_given;     /* 1 when the options gave tensor_amax */
} qk_quant_stats;

/* Sets option key from text: rounding rne|rz|sr, scale_rule rceil|floor|ceil|even (MX), clamp
 * none|torchao|zero_to_one (NVFP4), tiny_amax te|exact, group_size 1..65536 (int4_group).
 * Errors, opt unchanged: QS_ENOTFOUND (key not for fmt), QS_EINVAL (value missing, unknown). */
qs_status qk_quant_option_set(const qk_format *fmt, qk_quant_options *opt, const char *key,
                              const char *value, qs_error *err);

/* Text of enum option key in opt ("rceil"); NULL when not for fmt, or group_size. */
const char *qk_quant_option_value(const qk_format *fmt, const qk_quant_options *opt,
                                  const char *key);

/* fmt's option names, comma-separated ("rounding, scale_rule"; "none" for bf16). */
const char *qk_quant_option_keys(const qk_format *fmt);

/* The format named name (kernels/README.md; "bf16": identity) or NULL; qk_format_name inverts. */
const qk_format *qk_format_by_name(const char *name);

const char *qk_format_name(const qk_format *fmt);

/* x [rows x k] in place: quantized to fmt and back to FP32, the packed path's values; stats
 * may be NULL. Errors: QS_EINVAL (empty shape, option invalid for fmt). */
qs_status qk_fake_quant(const qk_format *fmt, const qk_quant_options *opt, float *x, size_t rows,
                        size_t k, qk_quant_stats *stats, qs_error *err);

/* qk_fake_quant from x [rows x k] into y [rows x k]; y == x or no overlap. Errors: as it. */
qs_status qk_fake_quant_into(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                             float *y, size_t rows, size_t k, qk_quant_stats *stats, qs_error *err);

/* One quantized [rows x k] tensor in one allocation. Codes (element.h): 4-bit two a byte, even
 * column in the low nibble as CUDA stores them (docs/numerics.md 1.1; an odd k's last high
 * nibble 0), 6- and 8-bit one a byte (FP6 right-aligned). Block scales row-major, a 16x16
 * block's in each of its rows (swizzle.h: cuBLASLt's layout). Decode: elem * block scale *
 * tensor_scale (* 2^tensor_scale_exp2). */
typedef struct qk_packed {
    const qk_format *fmt;
    size_t rows, k;        /* logical shape */
    size_t block;          /* elements per block along k (k for per-row and per-tensor formats) */
    size_t blocks_per_row; /* ceil(k / block) */
    size_t row_bytes;      /* bytes of codes per row */
    uint8_t *codes;        /* [rows x row_bytes] */
    uint8_t *scales;       /* [rows x blocks_per_row] E4M3 / E8M0 bytes, or NULL */
    float *scales_f32;     /* [rows x blocks_per_row] FP32 (INT formats), or NULL */
    float tensor_scale;    /* S_dec: NVFP4 amax_t/2688 (ModelOpt's weight_scale_2), FP8 /448; 1 */
    float tensor_amax;     /* amax_t that S_dec came from, given or own (0 when unused) */
    int tensor_scale_exp2; /* <= 0; nonzero only for QK_TINY_EXACT on a tiny tensor */
    uint64_t version;      /* process-unique stamp of the contents, 0 when empty (below) */
    void *storage_;        /* the one allocation; private */
} qk_packed;

/* Versions. qk_packed_init, qk_quantize and qk_quantize_rows give p a version no packed
 * tensor of the process had before, so a device copy keyed by (address, version) is current
 * exactly when both match, even after a release and init at the same address. Code that
 * writes codes, scales or tensor scales itself calls qk_packed_changed before the tensor is
 * read again (filling it between qk_packed_init and its first reader needs no call). */
void qk_packed_changed(qk_packed *p);

/* A version no packed tensor or weight of the process had before (never 0), from the counter
 * qk_packed_changed draws on: for values outside a qk_packed that change at one address
 * (worker/engine/weights.h qw_weight.version). Thread-safe. */
uint64_t qk_version_new(void);

/* Allocates p for a [rows x k] tensor of fmt (opt NULL: defaults). Errors, p then empty:
 * QS_EINVAL (empty, overflow, bad option), QS_EUNSUPPORTED (bf16), QS_ENOMEM. */
qs_status qk_packed_init(qk_packed *p, const qk_format *fmt, const qk_quant_options *opt,
                         size_t rows, size_t k, qs_error *err);

/* p may be NULL or already released. */
void qk_packed_release(qk_packed *p);

/* x [rows x k] into p (initialised for this format, options, shape). Errors: QS_EINVAL. */
qs_status qk_quantize(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                      size_t rows, size_t k, qk_packed *p, qs_error *err);

/* Rows [row0, row0 + n) of p's tensor from x [n x p->k] (a tensor converted a chunk at a
 * time); chunks covering the tensor, in any order, give one qk_quantize's bits. Formats with a
 * tensor scale need tensor_amax_given (qk_joint_amax over the chunks); nvfp4_2d needs row0
 * and n multiples of 16 but for a last chunk. Errors, p unchanged: QS_EINVAL. */
qs_status qk_quantize_rows(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                           size_t row0, size_t n, qk_packed *p, qs_error *err);

/* p into y [p->rows x p->k] in the format rule's order; threads 0 = all. Errors: QS_EINVAL. */
qs_status qk_dequantize(const qk_packed *p, float *y, int threads, qs_error *err);

/* max |x| over tensors[i][0 .. n[i]), i < count, NaN and +-Inf ignored: one tensor scale for
 * tensors a serving engine fuses (q/k/v; kernels/README.md). Errors: QS_EINVAL. */
qs_status qk_joint_amax(const float *const *tensors, const size_t *n, size_t count, int threads,
                        float *amax, qs_error *err);

/* S_enc = min(2688 / amax_t, FLT_MAX), 1 when that is 0 or amax_t is; S_dec = 1 / S_enc
 * (FP32; docs/numerics.md 3.3 steps 2-3, TransformerEngine). */
void qk_nvfp4_global_scales(float amax_t, float *s_enc, float *s_dec);

#ifdef __cplusplus
}
#endif

#endif
