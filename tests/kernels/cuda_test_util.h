/* Test helpers shared by the GPU-quantizer tests (kernels_cuda_*, kernels_edges): the random
 * input matrices with IEEE specials and the walk over one format's option variants. Plain C,
 * no cmocka and no CUDA, so that both the cmocka host tests and the bare GPU binaries use it. */
#ifndef QK_CUDA_TEST_UTIL_H
#define QK_CUDA_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "quant.h"

/* Flags of qkt_random_matrix. */
enum {
    QKT_SPECIALS = 1, /* one in 997: NaN, +Inf, -Inf, -0, subnormal 3e-42; one in 61 times 1e-30 */
    QKT_ZERO = 2,     /* with QKT_SPECIALS: also +0 as a sixth special */
};

/* Sets *g to the special value number sel (1 NaN, 2 +Inf, 3 -Inf, 4 -0, 5 `subnormal`) and
 * returns 1; returns 0 and leaves *g alone for any other sel. */
int qkt_special(uint32_t sel, float subnormal, float *g);

/* A rows x k row-major matrix (malloc'ed, the caller frees; aborts when out of memory) from the
 * Philox stream qk_sr_bits(seed, 0, 0, .): element i is uniform in [-1, 1) times `scale`, or
 * times `big` for one in 97, then the specials of `flags` (QKT_*). Deterministic in seed. */
float *qkt_random_matrix(size_t rows, size_t k, uint64_t seed, float scale, float big,
                         unsigned flags);

/* How many of a[0..n) and b[0..n) differ bit for bit, NaNs comparing equal whatever their
 * payload (GPUs canonicalise NaN; qk_cuda.h); *first (when not NULL) the first such index, or n
 * when none differs. */
size_t qkt_mismatches(const float *a, const float *b, size_t n, size_t *first);

/* Which option a qkt_for_each_variant call changed from the base options. */
typedef enum {
    QKT_VAR_BASE,    /* the base options as given */
    QKT_VAR_MX_RULE, /* MX formats: each of QK_MX_FLOOR .. QK_MX_EVEN */
    QKT_VAR_CLAMP,   /* NVFP4 formats: each of QK_NVFP4_CLAMP_TORCHAO .. ZERO_TO_ONE */
    QKT_VAR_GROUP,   /* formats with a group option: group_size 32 */
    QKT_VAR_AMAX,    /* formats with a tensor scale: a given tensor amax 2.5 (elements saturate) */
} qkt_variant;

/* Called once per variant: o the options, label a short text ("rule 2", "group 32"). */
typedef void (*qkt_variant_fn)(void *ctx, const qk_format *fmt, const qk_quant_options *o,
                               qkt_variant v, const char *label);

/* Calls fn for the base options and then for every option variant fmt supports (in the order
 * of qkt_variant), each variant differing from `base` in that one option only. */
void qkt_for_each_variant(const qk_format *fmt, const qk_quant_options *base, qkt_variant_fn fn,
                          void *ctx);

#endif
