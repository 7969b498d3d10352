/* The one block quantizer: every format of format.c goes through the scalar reference
 * (quant_group_ref); fake-quant also has fast paths that tests/kernels checks bit-identical
 * against it: quant_row_fast (the minifloat formats in 1D blocks, NVFP4, MX, FP8 per tensor;
 * RNE, SR for E2M1, statistics), quant_row_batched16/32 (NVFP4 and MX, RNE without
 * statistics, 16 blocks at a time: the hot case), quant_group_nvfp4_2d_fast (nvfp4_2d, RNE
 * without statistics) and quant_row_int_fast (INT8 per channel, INT4 group-wise, RNE); the
 * packed path (qk_quantize, qk_quantize_rows) has the same operations writing codes
 * (pack_row_minifloat16/32, pack_row_int, pack_group_nvfp4_2d, then pack_minifloat_codes).
 *
 * Tensors are row-major FP32 [rows x k], blocks along k; work is split over groups of
 * block_rows rows (1, or 16 for 2D blocks) with OpenMP. Each output element depends only on
 * its block and on the tensor amax, and statistics are summed per group and then in group
 * order, so the bits are the same for any thread count. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
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

/* --- FP32 helpers ------------------------------------------------------------------------ */

static float e4m3_value[256]; /* decode table of the E4M3 block-scale codec */
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_table_build(void) {
    for (uint32_t c = 0; c < 256; c++)
        e4m3_value[c] = qk_codec_decode(&qk_codec_e4m3, c);
}

/* --- options and plan -------------------------------------------------------------------- */

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
static qs_status plan_shape(qk_plan *p, const qk_format *fmt, const qk_quant_options *opt,
                            size_t rows, size_t k, qs_error *err) {
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
    pthread_once(&e4m3_once, e4m3_table_build);
    return QS_OK;
}

/* max |x| over the tensor, NaN and +-Inf ignored (kernels/README.md: an Inf saturates in its
 * block instead of setting the scale of the whole tensor); per-thread maxima by bits
 * (amax_by_bits), combined with max, which is order-free. */
static float amax_by_bits(const float *v, size_t n, int *nonfinite);

/* max |v[i]| over the finite values of a chunk, by bits (amax_by_bits without the nonfinite
 * flag), in the widest vectors the CPU has: the first pass of NVFP4 is a pure read and runs
 * at memory speed only when this is not the baseline SSE2 code (no 32-bit integer max). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static float
finite_amax_chunk(const float *v, size_t n) {
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t b = (int32_t)(qk_bits_of(v[i]) & 0x7FFFFFFFu);
        b = b >= 0x7F800000 ? 0 : b;
        m = b > m ? b : m;
    }
    return qk_float_of((uint32_t)m);
}

static float tensor_amax(const float *x, size_t n, int threads) {
    float amax = 0.0f;
    size_t chunks = (n + 4095) / 4096;
#pragma omp parallel num_threads(threads)
    {
        float local = 0.0f;
#pragma omp for schedule(static)
        for (size_t c = 0; c < chunks; c++) {
            size_t lo = c * 4096, len = n - lo < 4096 ? n - lo : 4096;
            float a = finite_amax_chunk(x + lo, len);
            local = a > local ? a : local;
        }
#pragma omp critical(qk_amax)
        amax = local > amax ? local : amax;
    }
    return amax;
}

qs_status qk_joint_amax(const float *const *tensors, const size_t *n, size_t count, int threads,
                        float *amax, qs_error *err) {
    if (!tensors || !n || !amax || count == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: joint amax: %s",
                            count == 0 ? "no tensors (count 0)" : "tensors, n or amax is NULL");
    if (threads < 0)
        return qs_error_set(err, QS_EINVAL, "kernels: joint amax: threads %d is negative", threads);
    for (size_t i = 0; i < count; i++)
        if (n[i] > 0 && !tensors[i])
            return qs_error_set(err, QS_EINVAL, "kernels: joint amax: tensor %zu is NULL", i);
    int th = threads > 0 ? threads : omp_get_max_threads();
    float m = 0.0f;
    for (size_t i = 0; i < count; i++) {
        float a = n[i] ? tensor_amax(tensors[i], n[i], th) : 0.0f;
        m = a > m ? a : m;
    }
    *amax = m;
    return QS_OK;
}

/* Whether amax_t is tiny for a tensor scale max_q / amax_t (qk_tiny_amax): that encode scale
 * is above 2^126 (or overflows), so its reciprocal would not be an FP32 normal number. */
static int amax_is_tiny(float amax_t, float max_q) {
    return amax_t > 0.0f && !(max_q / amax_t <= 0x1p126f);
}

/* x * 2^e for 0 <= e <= 254, exact for the values it is used on (|x| * 2^e <= 2). */
static float times_pow2_up(float x, int e) {
    while (e > 127) {
        x *= 0x1p127f;
        e -= 127;
    }
    return x * qk_pow2f(e);
}

/* y * 2^-e for 0 <= e <= 252 with ONE rounding (the last multiply): the first step only
 * moves y within the normal range, exact for |y| >= 2^-100 (every nonzero decoded value of
 * the exact variant is above 2^-23). */
static float times_pow2_down(float y, int e) {
    if (e > 126) {
        y *= qk_pow2f(-(e - 126));
        e = 126;
    }
    return y * qk_pow2f(-e);
}

void qk_nvfp4_global_scales(float amax_t, float *s_enc, float *s_dec) {
    qk_nvfp4_global_scales_core(amax_t, s_enc, s_dec);
}

/* Tensor scales: NVFP4's S_enc/S_dec, or the per-tensor FP8 rule with the same edge policy
 * (an all-zero tensor gets S_enc = 1), from the given or the tensor's own amax; for a tiny
 * amax under QK_TINY_EXACT, from amax_t * 2^exp2 in [1, 2) (frexpf: exact, subnormals too). */
static void plan_tensor_scales(qk_plan *p, const float *x, const qk_quant_options *opt) {
    if (p->fmt->rule != QK_RULE_NVFP4 && p->fmt->rule != QK_RULE_TENSOR) return;
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    p->amax_given = opt->tensor_amax_given;
    p->amax_t =
        opt->tensor_amax_given ? opt->tensor_amax : tensor_amax(x, p->rows * p->k, p->threads);
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
            p->nv_enc[c] = fminf(1.0f / (e4m3_value[c] * p->s_dec), FLT_MAX);
    } else {
        float e = fminf(p->elem->max_value / amax, FLT_MAX);
        if (amax == 0.0f || e == 0.0f) e = 1.0f;
        p->s_enc = e;
        p->s_dec = 1.0f / e;
    }
}

/* --- block scales ------------------------------------------------------------------------ */

/* Scale of a block whose absolute maximum is amax (NaN-free except for MX, where a
 * non-finite amax stands for "the block holds Inf or NaN"). */
static block_scale scale_for(const qk_plan *p, float amax) {
    block_scale bs = {0, 0.0f, 1.0f, 1.0f, 0};
    switch (p->fmt->rule) {
    case QK_RULE_NVFP4: {
        float v = amax * p->s_enc_6;
        if (p->clamp == QK_NVFP4_CLAMP_TORCHAO && v < 0x1p-6f) v = 0x1p-6f;
        if (p->clamp == QK_NVFP4_CLAMP_ZERO_TO_ONE && v == 0.0f) v = 1.0f;
        bs.code = (uint8_t)qk_codec_encode(&qk_codec_e4m3, v, QK_ROUND_RNE, 0);
        float sb = e4m3_value[bs.code];
        bs.dec = sb;
        bs.enc = fminf(1.0f / (sb * p->s_dec), FLT_MAX); /* step 5; 1/0 -> FLT_MAX */
        break;
    }
    case QK_RULE_MX:
        bs.code = qk_mx_scale_code(amax, p->mx_rule, p->elem);
        if (bs.code == 0xFF) {
            bs.enc = NAN;
            bs.dec = NAN;
        } else {
            bs.enc = qk_pow2f(127 - (int)bs.code);
            bs.dec = qk_pow2f((int)bs.code - 127);
        }
        break;
    case QK_RULE_TENSOR:
        bs.enc = p->s_enc;
        break;
    case QK_RULE_ABSMAX: {
        float s = fminf(amax / (float)p->elem->int_max, FLT_MAX);
        if (s == 0.0f) s = 1.0f; /* all-zero block: any scale decodes to 0; 1 is harmless */
        bs.f32 = s;
        bs.dec = s;
        bs.divide = 1;
        break;
    }
    case QK_RULE_IDENTITY:
    default:
        break;
    }
    return bs;
}

/* Block scale as dequantize rebuilds it from packed storage. */
static block_scale scale_from_packed(const qk_plan *p, const qk_packed *pk, size_t r, size_t b) {
    block_scale bs = {0, 0.0f, 1.0f, 1.0f, 0};
    size_t i = r * pk->blocks_per_row + b;
    switch (p->fmt->storage) {
    case QK_STORE_E4M3:
        bs.dec = e4m3_value[pk->scales[i]];
        break;
    case QK_STORE_E8M0:
        bs.dec = pk->scales[i] == 0xFF ? NAN : qk_pow2f((int)pk->scales[i] - 127);
        break;
    case QK_STORE_F32:
        bs.dec = pk->scales_f32[i];
        break;
    case QK_STORE_NONE:
    default:
        break;
    }
    return bs;
}

/* --- elements ---------------------------------------------------------------------------- */

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

static uint32_t get_code(const qk_packed *pk, size_t r, size_t c) {
    const uint8_t *row = pk->codes + r * pk->row_bytes;
    if (pk->fmt->elem->bits == 4)
        return (c & 1) ? (uint32_t)(row[c >> 1] >> 4) : row[c >> 1] & 0xFu;
    return row[c];
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

/* The Philox block behind the last SR index asked for: consecutive elements share one
 * block of 4 words (philox.h layout), so a row costs k/4 blocks instead of k. */
typedef struct sr_cache {
    uint64_t blk; /* index >> 2 of words[], UINT64_MAX when empty */
    uint32_t words[4];
} sr_cache;

static uint32_t sr_bits_cached(const qk_plan *p, sr_cache *sc, uint64_t index) {
    if (sc->blk != index >> 2) {
        sc->blk = index >> 2;
        const uint32_t ctr[4] = {(uint32_t)sc->blk, (uint32_t)(sc->blk >> 32), p->tensor_id,
                                 p->step};
        const uint32_t key[2] = {(uint32_t)p->seed, (uint32_t)(p->seed >> 32)};
        qk_philox4x32_10_core(ctr, key, sc->words);
    }
    return sc->words[index & 3];
}

/* Scalar reference for the row group [r0, r0+h): for every block column, amax over the
 * group's block, the block scale, then each element encoded (and SR bits drawn by its
 * row-major index in the whole tensor). Codes and scales go to pk when non-NULL; decoded
 * values to y when non-NULL. x and y hold rows from p->xrow0 on. y may alias x: a block is
 * read whole (amax) before any of it is written. */
static void quant_group_ref(const qk_plan *p, const float *x, size_t r0, size_t h, qk_packed *pk,
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

/* max |v[i]| over n values, computed on the FP32 bit patterns (for non-negative floats the
 * integer order is the numeric order), which vectorises where a float max reduction does not.
 * NaN and +-Inf are ignored; *nonfinite is set when any value is Inf or NaN. Same result
 * as block_amax. */
static float amax_by_bits(const float *v, size_t n, int *nonfinite) {
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

/* Fast path for fake-quant in 1D blocks of minifloat elements: NVFP4, every MX format and
 * FP8 per tensor with RNE, and the E2M1 formats (NVFP4, MXFP4) with stochastic rounding; in
 * place on row r. Per block: the amax by bits, the block scale (the reference's scale_for;
 * NVFP4 with the fast E4M3 cast and the per-call E_b table), then a branch-free element loop
 * that the compiler vectorises: qk_e2m1_rne_value / qk_e2m1_sr_value for E2M1,
 * qk_minifloat_rne_value for the others; SR bits come from one Philox block per 4 elements
 * drawn before the loop. The value is (elem * dec) * s_dec with dec = 1 per tensor and
 * s_dec = 1 for MX, both exact, so the bits equal quant_group_ref's (tested).
 * Per-tensor scaling runs over the row in chunks of QK_FAST_CHUNK with one scale.
 * Statistics, when asked for, keep a copy of the chunk's input. */
#define QK_FAST_CHUNK 32
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* Wider vectors where the CPU has them (glibc ifunc dispatch); every clone does the same
 * IEEE operations in the same order (no FMA: -ffp-contract=off), so the bits are equal. */
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
quant_row_fast(const qk_plan *p, size_t r, float *row, size_t c_begin, stats_acc *acc) {
    const qk_codec *el = p->elem;
    const int sr = p->rounding == QK_ROUND_SR;
    uint32_t rb[QK_FAST_CHUNK];
    sr_cache cache = {UINT64_MAX, {0, 0, 0, 0}};
    const int e2m1 = el == &qk_codec_e2m1;
    const int man = el->man_bits, emin = 1 - el->bias, e_hi = el->emax + 1;
    const float maxv = el->max_value, nanv = qk_codec_decode(el, el->nan_code);
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
                dec = e4m3_value[sb];
                enc = p->nv_enc[sb];
            }
        }
        if (acc) memcpy(in, v, n * sizeof *v);
        if (sr) {
            for (size_t i = 0; i < n; i++)
                rb[i] = sr_bits_cached(p, &cache, r * p->k + c0 + i);
            for (size_t i = 0; i < n; i++)
                v[i] = (qk_e2m1_sr_value(v[i] * enc, rb[i]) * dec) * s_dec;
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

/* RNE fake-quant without statistics of NVFP4 (blocks of 16) and the MX formats (blocks of
 * 32), the hot case, in batches of QK_BATCH blocks: the QK_BATCH block amaxes (by bits,
 * NaN and +-Inf ignored; MX also notes whether a block holds one), then the QK_BATCH block
 * scales at once, then the element loop over whole blocks with qk_minifloat_rne_value
 * (add-and-subtract rounding; for E2M1 checked equal to the codec on all 2^32 inputs).
 * NVFP4 scales use branch-free arithmetic the compiler vectorises across the blocks: the E4M3
 * cast of qk_e4m3_rne_nonneg on the bit pattern, its value, and E_b = min(1 / (sb * S_dec),
 * FLT_MAX), the very expression of the plan's nv_enc table. MX scales are
 * qk_mx_scale_code_core per block (0xFF, NaN, for a block holding Inf or NaN) and the powers
 * of two built from the code. Same operations on the same operands as quant_row_fast and
 * the reference, so the same bits (tested). Returns the first column it did not do (a
 * multiple of B * QK_BATCH); quant_row_fast does the rest of the row. */
#define QK_BATCH 16

/* The NVFP4 block-scale code sb = E4M3_RNE(amax_b * (S_enc * (1/6))) after the clamp, without
 * branches (vectorises across blocks): qk_e4m3_rne_nonneg with subnormal codes from the bits
 * of v * 512 + 2^23 (exact scaling, RNE to an integer, no float-to-int conversion) and normal
 * codes by rounding the mantissa to 3 bits on the pattern. Equals scale_for's code. */
__attribute__((always_inline)) static inline uint32_t nvfp4_scale_code_bf(float amax, float s_enc_6,
                                                                          qk_nvfp4_clamp clamp) {
    float sv = amax * s_enc_6;
    sv = (clamp == QK_NVFP4_CLAMP_TORCHAO && sv < 0x1p-6f) ? 0x1p-6f : sv;
    sv = (clamp == QK_NVFP4_CLAMP_ZERO_TO_ONE && sv == 0.0f) ? 1.0f : sv;
    uint32_t sub = qk_bits_of(sv * 512.0f + 0x1p23f) - qk_bits_of(0x1p23f);
    uint32_t u = qk_bits_of(sv);
    u += 0x7FFFFu + ((u >> 20) & 1u);
    uint32_t nrm = (u >> 20) - (120u << 3);
    nrm = nrm > 0x7Eu ? 0x7Eu : nrm;
    uint32_t code = sv < 0x1p-6f ? sub : nrm;
    return sv > 448.0f ? 0x7Eu : code;
}

/* The value of an E4M3 code with the sign bit clear (not 0x7F), without branches. */
__attribute__((always_inline)) static inline float e4m3_value_nonneg_bf(uint32_t code) {
    uint32_t ef = code >> 3, mn = code & 7u;
    float vs = (float)mn * 0x1p-9f;
    float vn = (float)(8u | mn) * qk_float_of((ef + 117u) << 23);
    return ef == 0 ? vs : vn;
}

__attribute__((always_inline)) static inline size_t
quant_row_batched_body(const qk_plan *p, float *row, const size_t B) {
    const size_t span = B * QK_BATCH;
    const size_t full = p->k / span * span;
    const qk_codec *el = p->elem;
    const int man = el->man_bits, emin = 1 - el->bias, e_hi = el->emax + 1;
    const float maxv = el->max_value, nanv = qk_codec_decode(el, el->nan_code);
    const int nv = p->fmt->rule == QK_RULE_NVFP4;
    const float s_enc_6 = p->s_enc_6, s_dec_nv = p->s_dec;
    const float s_dec = nv ? p->s_dec : 1.0f;
    const qk_nvfp4_clamp clamp = p->clamp;
    for (size_t c0 = 0; c0 < full; c0 += span) {
        float *v = row + c0;
        int32_t m[QK_BATCH], any[QK_BATCH];
        float enc[QK_BATCH], dec[QK_BATCH];
        for (int j = 0; j < QK_BATCH; j++) {
            int32_t mx = 0, an = 0;
            for (size_t i = 0; i < B; i++) {
                int32_t b = (int32_t)(qk_bits_of(v[B * (size_t)j + i]) & 0x7FFFFFFFu);
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
        for (int j = 0; j < QK_BATCH; j++) {
            const float e = enc[j], d = dec[j];
            float *w = v + B * (size_t)j;
            for (size_t i = 0; i < B; i++)
                w[i] = (qk_minifloat_rne_value(w[i] * e, man, emin, e_hi, maxv, nanv) * d) * s_dec;
        }
    }
    return full;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static size_t
quant_row_batched16(const qk_plan *p, float *row) {
    return quant_row_batched_body(p, row, 16);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static size_t
quant_row_batched32(const qk_plan *p, float *row) {
    return quant_row_batched_body(p, row, 32);
}

/* NVFP4 2D (16x16 blocks, weights) RNE fake-quant without statistics, in place on the h <= 16
 * rows starting at g (a row group): per block column the amax of the 16x16 tile by bits
 * (NaN and +-Inf ignored), the reference's own scale_for, then the tile's elements with
 * qk_minifloat_rne_value (equal to the E2M1 codec on all 2^32 inputs) in the reference's
 * order, (elem * sb) * S_dec. So the bits equal quant_group_ref's (tested). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
quant_group_nvfp4_2d_fast(const qk_plan *p, float *g, size_t h) {
    const size_t k = p->k;
    const float s_dec = p->s_dec;
    for (size_t c0 = 0; c0 < k; c0 += 16) {
        size_t n = k - c0 < 16 ? k - c0 : 16;
        int32_t mx = 0;
        for (size_t r = 0; r < h; r++) {
            const float *v = g + r * k + c0;
            for (size_t i = 0; i < n; i++) {
                int32_t b = (int32_t)(qk_bits_of(v[i]) & 0x7FFFFFFFu);
                b = b >= 0x7F800000 ? 0 : b;
                mx = b > mx ? b : mx;
            }
        }
        const block_scale bs = scale_for(p, qk_float_of((uint32_t)mx));
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
 * integer zero does), NaN to 0, then q * s. So the bits equal quant_group_ref's (tested).
 * Statistics, when asked for, take a second loop over the block with the input kept. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
quant_row_int_fast(const qk_plan *p, float *row, stats_acc *acc) {
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

/* Whether quant_row_int_fast covers this call: RNE, symmetric integer elements in 1D
 * blocks. */
static int int_fast_path_applies(const qk_plan *p) {
    return p->rounding == QK_ROUND_RNE && p->brows == 1 && p->elem->kind == QK_CODEC_INT &&
           p->fmt->rule == QK_RULE_ABSMAX;
}

/* Whether quant_row_fast covers this call: RNE (or SR with E2M1 elements), 1D blocks of at
 * most QK_FAST_CHUNK (or one per-tensor scale), minifloat elements whose rounding constant
 * 2^(e_hi - man_bits + 23) is a finite FP32 (all but BF16, which no block format uses). */
static int fast_path_applies(const qk_plan *p) {
    const qk_codec *el = p->elem;
    qk_scale_rule rule = p->fmt->rule;
    int rounding_ok =
        p->rounding == QK_ROUND_RNE || (p->rounding == QK_ROUND_SR && el == &qk_codec_e2m1);
    if (!rounding_ok || p->brows != 1 || el->kind != QK_CODEC_MINIFLOAT || p->exp2) return 0;
    if (el->emax + 1 - el->man_bits + 23 > 127) return 0;
    if (rule == QK_RULE_TENSOR) return 1;
    return (rule == QK_RULE_NVFP4 || rule == QK_RULE_MX) && p->block <= QK_FAST_CHUNK;
}

/* --- packed fast paths ------------------------------------------------------------------- */

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
 * tensor; RNE, or SR for E2M1: what fast_path_applies admits) into v [k], and the block-scale
 * codes into sc [nblk] (none per tensor). Blocks of B elements (the format's block; 32-element
 * chunks of the one scale per tensor) in batches of QK_BATCH: the amaxes by bits (NaN and
 * +-Inf ignored; MX notes whether a block holds one), the scales across the batch (NVFP4 the
 * branch-free cast, E_b = min(1 / (sb * S_dec), FLT_MAX); MX qk_mx_scale_code_core, 0xFF for
 * a block holding Inf or NaN), then the elements, x * E_b rounded by qk_minifloat_rne_value
 * or qk_e2m1_sr_value with the SR bits of each element's index in the whole tensor: the
 * operations of quant_row_fast and the batched fake-quant path, so the same bits. */
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
 * RNE, 1D) into out and sf [nblk]: quant_row_int_fast's operations (the reference's scale
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
 * qk_minifloat_rne_value into v [h x k] (quant_group_nvfp4_2d_fast's operations), then each
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
        int32_t mx = 0;
        for (size_t r = 0; r < h; r++) {
            const float *w = x + r * k + c0;
            for (size_t i = 0; i < n; i++) {
                int32_t bb = (int32_t)(qk_bits_of(w[i]) & 0x7FFFFFFFu);
                bb = bb >= 0x7F800000 ? 0 : bb;
                mx = bb > mx ? bb : mx;
            }
        }
        const block_scale bs = scale_for(p, qk_float_of((uint32_t)mx));
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

/* Which packed fast path covers this call: 1 = 1D minifloat (fast_path_applies), 2 = integer
 * (int_fast_path_applies), 3 = NVFP4 2D with RNE; 0 = the reference. Never under
 * reference_only, nor for a tiny tensor under QK_TINY_EXACT. */
static int packed_fast_kind(const qk_plan *p, const qk_quant_options *opt) {
    if (opt->reference_only || p->exp2) return 0;
    if (fast_path_applies(p)) return 1;
    if (int_fast_path_applies(p)) return 2;
    if (p->rounding == QK_ROUND_RNE && p->fmt->rule == QK_RULE_NVFP4 && p->brows == 16 &&
        p->block == 16)
        return 3;
    return 0;
}

/* Quantizes the row groups holding tensor rows [row0, row0 + n) (x: those rows) into pk, whose
 * tensor scales p carries; the fast path where one applies, with a per-thread buffer of
 * block_rows x k grid values (the reference when it cannot be allocated: same bits). */
static void quantize_groups(const qk_plan *p, const qk_quant_options *opt, const float *x,
                            size_t row0, size_t n, qk_packed *pk) {
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
                quant_group_ref(p, x, r0, h, pk, NULL, NULL);
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

/* --- public entry points ----------------------------------------------------------------- */

static void stats_finish(const qk_plan *p, const stats_acc *accs, size_t ngroups, size_t n,
                         qk_quant_stats *st) {
    stats_acc t = {0};
    for (size_t g = 0; g < ngroups; g++) { /* fixed order: deterministic for any thread count */
        t.sq_err += accs[g].sq_err;
        t.sq_sig += accs[g].sq_sig;
        t.clipped += accs[g].clipped;
        t.blocks += accs[g].blocks;
        t.underflow += accs[g].underflow;
        t.nonfinite += accs[g].nonfinite;
    }
    memset(st, 0, sizeof *st);
    st->n_elements = n;
    st->mse = t.sq_err / (double)n;
    st->signal_power = t.sq_sig / (double)n;
    st->sqnr_db = st->mse == 0.0 ? INFINITY : 10.0 * log10(st->signal_power / st->mse);
    st->n_clipped = t.clipped;
    st->n_blocks = t.blocks;
    st->n_underflow_blocks = t.underflow;
    st->n_nonfinite = t.nonfinite;
    st->tensor_scale = 1.0f;
    if (p && p->fmt->tensor_scale) {
        st->n_tiny_tensors = (size_t)p->tiny;
        st->tensor_amax = p->amax_t;
        st->tensor_scale = p->s_dec;
        st->tensor_scale_exp2 = -p->exp2;
        st->tensor_amax_given = p->amax_given;
    }
}

qs_status qk_fake_quant(const qk_format *fmt, const qk_quant_options *opt, float *x, size_t rows,
                        size_t k, qk_quant_stats *stats, qs_error *err) {
    return qk_fake_quant_into(fmt, opt, x, x, rows, k, stats, err);
}

/* Out of place, the fast row paths copy a row of x into y and work on it there while it is
 * in the cache; the reference reads x and writes y. */
qs_status qk_fake_quant_into(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                             float *y, size_t rows, size_t k, qk_quant_stats *stats,
                             qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    qk_plan p;
    qs_status st = plan_shape(&p, fmt, opt, rows, k, err);
    if (st) return st;
    if (!x || !y) return qs_error_set(err, QS_EINVAL, "kernels: %s: x or y is NULL", fmt->name);
    if (fmt->rule == QK_RULE_IDENTITY) {
        if (y != x) memcpy(y, x, rows * k * sizeof *x);
        if (stats) {
            stats_acc zero = {0};
            double sg = 0.0;
            for (size_t i = 0; i < rows * k; i++) {
                sg += (double)x[i] * (double)x[i];
                zero.nonfinite += !(fabsf(x[i]) <= FLT_MAX);
            }
            zero.sq_sig = sg;
            stats_finish(NULL, &zero, 1, rows * k, stats);
        }
        return QS_OK;
    }
    plan_tensor_scales(&p, x, opt);
    size_t ngroups = (rows + p.brows - 1) / p.brows;
    stats_acc *accs = NULL;
    if (stats) {
        accs = calloc(ngroups, sizeof *accs);
        if (!accs)
            return qs_error_set(err, QS_ENOMEM, "kernels: %s: statistics for %zu row groups",
                                fmt->name, ngroups);
    }
    int fast = !opt->reference_only && fast_path_applies(&p);
    int int_fast = !opt->reference_only && int_fast_path_applies(&p);
    int fast_2d = !opt->reference_only && !accs && p.rounding == QK_ROUND_RNE &&
                  fmt->rule == QK_RULE_NVFP4 && p.brows == 16 && p.block == 16 && !p.exp2;
    int batched = fast && !accs && p.rounding == QK_ROUND_RNE &&
                  ((fmt->rule == QK_RULE_NVFP4 && p.block == 16) ||
                   (fmt->rule == QK_RULE_MX && p.block == 32));
#pragma omp parallel for schedule(static) num_threads(p.threads)
    for (size_t g = 0; g < ngroups; g++) {
        size_t r0 = g * p.brows;
        size_t h = rows - r0 < p.brows ? rows - r0 : p.brows;
        float *out = y + r0 * k;
        if ((batched || fast || int_fast || fast_2d) && y != x)
            memcpy(out, x + r0 * k, h * k * sizeof *out);
        if (batched)
            quant_row_fast(
                &p, r0, out,
                p.block == 16 ? quant_row_batched16(&p, out) : quant_row_batched32(&p, out), NULL);
        else if (fast)
            quant_row_fast(&p, r0, out, 0, accs ? &accs[g] : NULL);
        else if (int_fast)
            quant_row_int_fast(&p, out, accs ? &accs[g] : NULL);
        else if (fast_2d)
            quant_group_nvfp4_2d_fast(&p, out, h);
        else
            quant_group_ref(&p, x, r0, h, NULL, y, accs ? &accs[g] : NULL);
    }
    if (stats) stats_finish(&p, accs, ngroups, rows * k, stats);
    free(accs);
    return QS_OK;
}

qs_status qk_packed_init(qk_packed *pk, const qk_format *fmt, const qk_quant_options *opt,
                         size_t rows, size_t k, qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    if (!pk) return qs_error_set(err, QS_EINVAL, "kernels: packed is NULL");
    memset(pk, 0, sizeof *pk);
    qk_plan p;
    qs_status st = plan_shape(&p, fmt, opt, rows, k, err);
    if (st) return st;
    if (fmt->rule == QK_RULE_IDENTITY)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels: %s is the unquantized reference and has no packed form",
                            fmt->name);
    pk->fmt = fmt;
    pk->rows = rows;
    pk->k = k;
    pk->block = p.block;
    pk->blocks_per_row = p.nblk;
    pk->row_bytes = fmt->elem->bits == 4 ? (k + 1) / 2 : k;
    pk->tensor_scale = 1.0f;
    size_t code_bytes = rows * pk->row_bytes;
    size_t nscales = rows * p.nblk;
    size_t scale_bytes = 0;
    if (fmt->storage == QK_STORE_E4M3 || fmt->storage == QK_STORE_E8M0) scale_bytes = nscales;
    if (fmt->storage == QK_STORE_F32) scale_bytes = nscales * sizeof(float);
    /* FP32 scales first so they are aligned; codes and byte scales after them */
    uint8_t *mem = calloc(1, scale_bytes + code_bytes + 1);
    if (!mem)
        return qs_error_set(err, QS_ENOMEM, "kernels: %s: %zu bytes of packed storage", fmt->name,
                            scale_bytes + code_bytes);
    pk->storage_ = mem;
    if (fmt->storage == QK_STORE_F32) pk->scales_f32 = (float *)(void *)mem;
    if (fmt->storage == QK_STORE_E4M3 || fmt->storage == QK_STORE_E8M0) pk->scales = mem;
    pk->codes = mem + scale_bytes;
    return QS_OK;
}

void qk_packed_release(qk_packed *pk) {
    if (!pk) return;
    free(pk->storage_);
    memset(pk, 0, sizeof *pk);
}

/* The checks both quantize entry points make: the plan for pk's whole tensor, x and pk's
 * storage present and of this format, shape and block. */
static qs_status packed_call(qk_plan *p, const qk_format *fmt, const qk_quant_options *opt,
                             const float *x, size_t rows, size_t k, const qk_packed *pk,
                             qs_error *err) {
    qs_status st = plan_shape(p, fmt, opt, rows, k, err);
    if (st) return st;
    if (!x || !pk || !pk->storage_)
        return qs_error_set(err, QS_EINVAL, "kernels: %s: x or packed storage missing", fmt->name);
    if (pk->fmt != fmt || pk->rows != rows || pk->k != k || pk->block != p->block)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: packed storage is %s [%zu x %zu] block %zu, the call "
                            "is %s [%zu x %zu] block %zu",
                            qk_format_name(pk->fmt), pk->rows, pk->k, pk->block, fmt->name, rows, k,
                            p->block);
    return QS_OK;
}

static void set_packed_scales(const qk_plan *p, qk_packed *pk) {
    pk->tensor_scale = p->s_dec;
    pk->tensor_amax = p->amax_t;
    pk->tensor_scale_exp2 = -p->exp2;
}

qs_status qk_quantize(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                      size_t rows, size_t k, qk_packed *pk, qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    qk_plan p;
    qs_status st = packed_call(&p, fmt, opt, x, rows, k, pk, err);
    if (st) return st;
    plan_tensor_scales(&p, x, opt);
    set_packed_scales(&p, pk);
    quantize_groups(&p, opt, x, 0, rows, pk);
    return QS_OK;
}

qs_status qk_quantize_rows(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                           size_t row0, size_t n, qk_packed *pk, qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    if (!pk || !pk->storage_)
        return qs_error_set(err, QS_EINVAL, "kernels: quantize rows: packed storage missing");
    qk_plan p;
    qs_status st = packed_call(&p, fmt, opt, x, pk->rows, pk->k, pk, err);
    if (st) return st;
    if (n == 0 || row0 >= pk->rows || n > pk->rows - row0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: %s: rows [%zu, %zu + %zu) are not inside the tensor's %zu "
                            "rows (or empty)",
                            fmt->name, row0, row0, n, pk->rows);
    if (row0 % p.brows != 0 || (row0 + n != pk->rows && n % p.brows != 0))
        return qs_error_set(err, QS_EINVAL,
                            "kernels: %s: rows [%zu, %zu + %zu) split its %zu-row blocks (start "
                            "and length must be multiples of %zu, except a chunk that ends the "
                            "tensor)",
                            fmt->name, row0, row0, n, p.brows, p.brows);
    if (fmt->tensor_scale && !opt->tensor_amax_given)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: %s: quantize rows needs options.tensor_amax_given (the amax "
                            "of the whole tensor, qk_joint_amax over its chunks): a chunk's own "
                            "amax would give it another tensor scale",
                            fmt->name);
    plan_tensor_scales(&p, x, opt);
    p.xrow0 = row0;
    set_packed_scales(&p, pk);
    quantize_groups(&p, opt, x, row0, n, pk);
    return QS_OK;
}

qs_status qk_dequantize(const qk_packed *pk, float *y, int threads, qs_error *err) {
    if (!pk || !pk->storage_ || !y)
        return qs_error_set(err, QS_EINVAL, "kernels: dequantize: packed storage or y missing");
    qk_quant_options o = {0};
    o.threads = threads;
    qk_plan p;
    qs_status st = plan_shape(&p, pk->fmt, &o, pk->rows, pk->k, err);
    if (st) return st;
    p.block = pk->block;
    p.nblk = pk->blocks_per_row;
    p.s_dec = pk->tensor_scale;
    p.exp2 = -pk->tensor_scale_exp2;
    if (p.exp2 < 0 || p.exp2 > 252)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: dequantize: packed tensor_scale_exp2 %d is outside -252..0",
                            pk->tensor_scale_exp2);
    size_t rows = pk->rows;
#pragma omp parallel for schedule(static) num_threads(p.threads)
    for (size_t r = 0; r < rows; r++) {
        for (size_t b = 0; b < p.nblk; b++) {
            block_scale bs = scale_from_packed(&p, pk, r, b);
            size_t c0 = b * p.block;
            size_t n = p.k - c0 < p.block ? p.k - c0 : p.block;
            for (size_t c = c0; c < c0 + n; c++)
                y[r * p.k + c] =
                    decoded_output(&p, &bs, qk_codec_decode(p.elem, get_code(pk, r, c)));
        }
    }
    return QS_OK;
}
