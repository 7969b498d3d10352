/* The block quantizer's private interface: the plan one call derives from (format, options,
 * tensor), the helpers every path shares, and the functions one file of the quantizer calls in
 * another (plan, amax, scale_rules, quant_ref, quant_fast, pack_fast, quant_stats). Not for
 * callers outside kernels/: they use quant.h. */
#ifndef QK_QUANT_PLAN_H
#define QK_QUANT_PLAN_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "element.h"
#include "format.h"
#include "numerics.h"
#include "philox.h"
#include "quant.h"

/* Everything one call derives from (format, options, tensor) before touching blocks. */
typedef struct qk_plan {
    const qk_format *fmt;
    const qk_codec *elem;
    qk_rounding rounding;
    qk_mx_scale_rule mx_rule;
    qk_nvfp4_clamp clamp;
    size_t rows, k;
    size_t block;      /* elements per block along k */
    size_t nblk;       /* blocks per row */
    size_t brows;      /* rows per block (1 or 16) */
    float amax_t;      /* tensor amax (NVFP4 and per-tensor rules) */
    float s_enc;       /* tensor encode scale */
    float s_dec;       /* tensor decode scale */
    float s_enc_6;     /* NVFP4: S_enc * (1/6), TE's operand order (docs/numerics.md 3.3 step 4) */
    float elem_nan;    /* minifloat elements: the value of the codec's NaN code */
    float nv_enc[128]; /* NVFP4: E_b = min(1 / (float(sb) * S_dec), FLT_MAX) per scale code sb
                          (step 5), tabulated once per call for the fast path */
    int tiny;          /* the tensor amax is tiny (qk_tiny_amax) */
    int exp2;          /* QK_TINY_EXACT on a tiny tensor: inputs are taken as x * 2^exp2 and
                          decoded values multiplied by 2^-exp2 (reference path only); else 0 */
    int amax_given;    /* amax_t came from the options */
    uint64_t seed;
    uint32_t tensor_id, step;
    int threads;
    size_t xrow0; /* the tensor row that the input's first row is (qk_quantize_rows; 0
                     otherwise): x is read at row r - xrow0, everything else at r */
} qk_plan;

/* The scale of one block, in the forms the element loop needs. */
typedef struct block_scale {
    uint8_t code; /* stored E4M3/E8M0 byte */
    float f32;    /* stored FP32 decode scale (ABSMAX) */
    float enc;    /* element encode multiplier (NVFP4 E_b, MX 2^-s, per-tensor S_enc) */
    float dec;    /* block decode multiplier (NVFP4 float(sb), MX 2^s, ABSMAX scale) */
    int divide;   /* 1: elements are x / f32 (ABSMAX); 0: x * enc */
} block_scale;

/* Statistics of one row group, summed in group order at the end. */
typedef struct stats_acc {
    double sq_err, sq_sig;
    size_t clipped, blocks, underflow, nonfinite;
} stats_acc;

/* Decode table of the E4M3 block-scale codec, built by qk_plan_shape. */
extern float qk_e4m3_value[256];

/* 1D fake-quant fast paths work in chunks of QK_FAST_CHUNK elements; the batched ones and the
 * packed rows take QK_BATCH blocks at a time. */
#define QK_FAST_CHUNK 32
#define QK_BATCH 16

/* x * 2^e for 0 <= e <= 254, exact for the values it is used on (|x| * 2^e <= 2). */
static inline float times_pow2_up(float x, int e) {
    while (e > 127) {
        x *= 0x1p127f;
        e -= 127;
    }
    return x * qk_pow2f(e);
}

/* y * 2^-e for 0 <= e <= 252 with ONE rounding (the last multiply): the first step only
 * moves y within the normal range, exact for |y| >= 2^-100 (every nonzero decoded value of
 * the exact variant is above 2^-23). */
static inline float times_pow2_down(float y, int e) {
    if (e > 126) {
        y *= qk_pow2f(-(e - 126));
        e = 126;
    }
    return y * qk_pow2f(-e);
}

static inline float scaled_input(const block_scale *bs, float x) {
    return bs->divide ? x / bs->f32 : x * bs->enc;
}

/* value = elem(code) * block decode * tensor decode, multiplied in this order (docs/numerics.md
 * 3.3 step 7 for NVFP4). */
static inline float decoded_output(const qk_plan *p, const block_scale *bs, float v) {
    float y = v * bs->dec;
    if (p->fmt->tensor_scale) y = y * p->s_dec;
    if (p->exp2) y = times_pow2_down(y, p->exp2);
    return y;
}

/* The Philox block behind the last SR index asked for: consecutive elements share one
 * block of 4 words (philox.h layout), so a row costs k/4 blocks instead of k. */
typedef struct sr_cache {
    uint64_t blk; /* index >> 2 of words[], UINT64_MAX when empty */
    uint32_t words[4];
} sr_cache;

static inline uint32_t sr_bits_cached(const qk_plan *p, sr_cache *sc, uint64_t index) {
    if (sc->blk != index >> 2) {
        sc->blk = index >> 2;
        const uint32_t ctr[4] = {(uint32_t)sc->blk, (uint32_t)(sc->blk >> 32), p->tensor_id,
                                 p->step};
        const uint32_t key[2] = {(uint32_t)p->seed, (uint32_t)(p->seed >> 32)};
        qk_philox4x32_10_core(ctr, key, sc->words);
    }
    return sc->words[index & 3];
}

/* max |v[i]| over n values, computed on the FP32 bit patterns (for non-negative floats the
 * integer order is the numeric order), which vectorises where a float max reduction does not.
 * NaN and +-Inf are ignored; *nonfinite is set when any value is Inf or NaN. Same result
 * as block_amax. */
static inline float amax_by_bits(const float *v, size_t n, int *nonfinite) {
    /* signed 32-bit: |x| patterns are <= 0x7FFFFFFF, and SSE2 vectorises a signed max */
    int32_t m = 0, any = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t b;
        memcpy(&b, &v[i], sizeof b);
        b &= 0x7FFFFFFF;
        int32_t finite = b >= 0x7F800000 ? 0 : b;
        m = finite > m ? finite : m;
        any = b > any ? b : any;
    }
    *nonfinite = any >= 0x7F800000;
    float f;
    memcpy(&f, &m, sizeof f);
    return f;
}

/* max |t[r * ld + i]| over r < h, i < n by bits, NaN and +-Inf ignored: a 2D block's amax. */
__attribute__((always_inline)) static inline float tile_amax_by_bits(const float *t, size_t h,
                                                                     size_t n, size_t ld) {
    int32_t mx = 0;
    for (size_t r = 0; r < h; r++)
        for (size_t i = 0; i < n; i++) {
            int32_t b = (int32_t)(qk_bits_of(t[r * ld + i]) & 0x7FFFFFFFu);
            b = b >= 0x7F800000 ? 0 : b;
            mx = b > mx ? b : mx;
        }
    return qk_float_of((uint32_t)mx);
}

/* Validates the call and fills the shape part of p (no pass over the data): quant_plan.c. */
qs_status qk_plan_shape(qk_plan *p, const qk_format *fmt, const qk_quant_options *opt, size_t rows,
                        size_t k, qs_error *err);
/* max |x| over x [n], NaN and +-Inf ignored, on `threads` threads: amax.c. */
float qk_tensor_amax(const float *x, size_t n, int threads);
/* Tensor scales of p from x [rows x k] or the given amax: scale_rules.c. */
void qk_plan_tensor_scales(qk_plan *p, const float *x, const qk_quant_options *opt);
/* Scalar reference over row group [r0, r0+h): quant_ref.c. */
void qk_quant_group_ref(const qk_plan *p, const float *x, size_t r0, size_t h, qk_packed *pk,
                        float *y, stats_acc *acc);

/* Fake-quant fast paths, each bit-identical to qk_quant_group_ref (quant_fast.c). */
int qk_fast_path_applies(const qk_plan *p);
int qk_int_fast_path_applies(const qk_plan *p);
void qk_quant_row_fast(const qk_plan *p, size_t r, float *row, size_t c_begin, stats_acc *acc);
/* Row r's whole blocks of 16 (NVFP4) or 32 (MX), RNE or E2M1 SR (the SR words of row r), in
 * place in batches; returns the first column not done, which qk_quant_row_fast starts at. */
size_t qk_quant_row_batched16(const qk_plan *p, size_t r, float *row);
size_t qk_quant_row_batched32(const qk_plan *p, size_t r, float *row);
void qk_quant_group_nvfp4_2d_fast(const qk_plan *p, float *g, size_t h);
void qk_quant_row_int_fast(const qk_plan *p, float *row, stats_acc *acc);

/* Packed codes of tensor rows [row0, row0 + n) (x: those rows) into pk: pack_fast.c. */
void qk_quantize_groups(const qk_plan *p, const qk_quant_options *opt, const float *x, size_t row0,
                        size_t n, qk_packed *pk);

/* Sums accs [ngroups] in group order into st (p NULL: no tensor scale): quant_stats.c. */
void qk_stats_finish(const qk_plan *p, const stats_acc *accs, size_t ngroups, size_t n,
                     qk_quant_stats *st);
/* Statistics of the identity format over x [n]: quant_stats.c. */
void qk_stats_identity(const float *x, size_t n, qk_quant_stats *st);

#endif
