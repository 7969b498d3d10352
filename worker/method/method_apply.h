/* Applying a quantization method to the linears a policy quantizes (docs/methods.md).
 *
 * After qw_model_apply_policy, every block linear with a format gets, instead of the policy's
 * round-to-nearest weight, the weight its method makes, as FP32 values on the format's grid
 * (what the packed form would decode to), and, for the methods that transform the input, a hook
 * that transforms each input online inside the linear before its activation format (forward.h):
 *   rotation (tile b along K):  W' = Q(W H),   x' = x H          (block_hadamard.h)
 *   smoothquant (scales s):     W' = Q(W diag(s)), x' = x / s    (smooth.h)
 *   gptq:                       W' = GPTQ(W, H = 2 X^T X)        (gptq.h)
 *   mr-gptq:                    W' = GPTQ(W R, 2 (XR)^T (XR)), x' = x R, R the block rotation
 *                               of the weight format's group size.
 * Calibrated methods see the calibration chunks block by block, in order: block b's linears
 * are observed (their inputs, with block b itself unquantized) on a model whose blocks 0..b-1
 * already hold their method's weights, as GPTQ's paper does; then block b's weights are made.
 * lm_head and the embeddings keep the policy's round-to-nearest. A method runs on the CPU
 * backend: on a GPU its linears refuse at the first forward (QS_EUNSUPPORTED), and tensor
 * parallelism is refused here. */
#ifndef QW_METHOD_APPLY_H
#define QW_METHOD_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gptq.h"
#include "model.h"

typedef struct qw_method_plan {
    const char *name; /* for messages */
    int rotate;       /* 0 none, a tile size, -1 the weight format's group, -2 all of K */
    int gptq;         /* GPTQ with gptq_opt */
    qk_gptq_options gptq_opt;
    int smooth; /* SmoothQuant with alpha */
    double alpha;
    int packed;            /* keep GPTQ's packed form of each linear it makes (qw_method_packed) */
    const uint32_t *calib; /* calibrated methods: calib_chunks chunks of ctx tokens, each run as
                              a fresh context (its first token already BOS-replaced if the
                              dataset does that) */
    size_t calib_chunks;
    int ctx;
    /* per-linear (kinds/method.h): linear[i] is the plan of block linear i (block * 7 + kind,
     * i < n_linear), NULL where the policy's round-to-nearest stays; the calibration above
     * serves them all. NULL: this plan on every quantized linear. */
    const struct qw_method_plan *const *linear;
    int n_linear;
    void *owned; /* what qw_method_plan_from_spec allocated for linear (qw_method_plan_clear) */
} qw_method_plan;

/* What applying the method cost. */
typedef struct qw_method_info {
    double calib_s;      /* forwards over the calibration chunks and statistics */
    double method_s;     /* everything qw_method_apply did, calibration included */
    size_t calib_tokens; /* tokens run per pass, times the passes */
    size_t calib_blocks_skipped; /* blocks the calibration passes started past, from residuals
                                    the model's prefix cache held (model.h) */
    int linears;         /* linears the method made */
} qw_method_info;

typedef struct qw_method_state qw_method_state;

/* Applies plan to m's quantized block linears (m as qw_model_apply_policy left it). *out
 * holds the weights and hooks the model reads until the next qw_model_apply_policy; free it
 * after that (qw_method_state_free). Errors (naming the linear): QS_EUNSUPPORTED (see above),
 * QS_EINVAL (a rotation that does not tile K, a Hessian that is not positive definite), the
 * forward's and the numeric core's errors, QS_ENOMEM. On error the model is as the policy left
 * it and *out is NULL. */
qs_status qw_method_apply(qw_model *m, const qw_method_plan *plan, qw_method_state **out,
                          qw_method_info *info, qs_error *err);

void qw_method_state_free(qw_method_state *s);

/* Whether the method made block linear i (block * 7 + kind): its weight is not the policy's. */
int qw_method_made(const qw_method_state *s, int i);

/* The packed form of block linear i as GPTQ chose it (its codes, group scales and tensor scale:
 * qk_dequantize gives the weight the model reads, bit for bit) when the plan asked for it
 * (plan->packed) and the linear's method is GPTQ on an NVFP4 or MX format, unrotated; else
 * NULL. */
const qk_packed *qw_method_packed(const qw_method_state *s, int i);

/* Frees what a plan owns (its per-linear table) and clears it. */
void qw_method_plan_clear(qw_method_plan *plan);

#endif
