/* A linear layer in training, its three GEMMs fed as a recipe says (recipe.h).
 *
 * fprop  y[N x out]  = Xq[N x in] Wq[out x in]^T
 * dgrad  dx[N x in]  = dYq[N x out] (W^T)q[in x out]^T
 * wgrad  dW[out x in] += (dY^T)q[out x N] (X^T)q[in x N]^T
 * Each quantized input is made from the high-precision tensor (x, W or dy): transposed when the
 * GEMM needs it, the RHT (16- or 32-point: recipe.h rht_dim) along k when the recipe says, then
 * rounded (BF16) or fake-quantized by the numeric core (qk_fake_quant, blocks along k) into a
 * scratch buffer; the GEMM (FP32 accumulation; on the CPU cblas_sgemm pieces fixed by the shape)
 * reads the scratch: gemm_abt_bf16 (BF16 operands on a GPU's tensor cores) when both its inputs
 * are exact in BF16 under the recipe (bf16_exact.h qw_recipe_gemm_bf16), gemm_abt (FP32)
 * otherwise. Where both inputs of a GEMM are quantized and the backend offers gemm_abt_quant
 * (ops.h; the CUDA backend with its cuBLASLt handle), the inputs are handed to it after the
 * transpose and the RHT, unquantized: it quantizes them along k on the device (the same codes
 * and scales as the numeric core) and runs a block-scaled GEMM, natively where the device's
 * probe proved the format, else the exact BF16 emulation with the tensor scales in alpha
 * (recipe_path.h, recipe_emul.h); a weight the cache keeps (wcache.h) goes to it already
 * quantized, once per optimizer step (gemm_abt_quant_kept); where it declines, or a hook is set,
 * or on the CPU (no gemm_abt_quant), the fake-quantized inputs go to gemm_abt as above. Every step
 * goes through the ops table of env->be (worker/engine/ops.h: copy, transpose, round_bf16, rht,
 * fake_quant, gemm_abt, gemm_abt_bf16, linear_bwd), so the one code runs on any backend; every
 * pointer is that backend's memory. Because the RHT is orthogonal and applied to both wgrad inputs
 * along the reduction axis, it cancels in the product (arXiv 2509.25149 section 4.2). Fake
 * quantization is exact emulation of an FP4 GEMM: the dequantized values are exact in FP32
 * (docs/numerics.md 4.5). Stochastic rounding streams: seed = env->seed, tensor id = linear *
 * QW_N_OPERANDS + operand, step = env->step, so a run is reproducible and no two tensors or steps
 * share random bits. An X input that the linears of a group read alike (q, k, v; gate, up) is made
 * once per micro-batch where its rounding is deterministic (qw_shared_input), and with sharing on
 * a dY that dgrad and wgrad both take in BF16 on the in-layout path (gemm_tt: the CPU's
 * fixed-order GEMM), no hook watching, is rounded once, by dgrad. Nothing here allocates. */
#ifndef QW_TRAIN_QLINEAR_H
#define QW_TRAIN_QLINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ops.h"
#include "recipe.h"
#include "tprofile.h"
#include "wcache.h"

/* Called with every GEMM input a recipe rounds or quantizes, after it is made: linear index,
 * operand, the high-precision source as the model holds it (x [N x in], W [out x in] or
 * dy [N x out]) and the GEMM input in[rows x k] (transposed for dgrad W and both wgrad
 * inputs), both backend memory. For tests (on the CPU backend) that check the inputs against the
 * numeric core. */
typedef void (*qw_gemm_hook)(void *user, int linear, qw_gemm_operand op, const float *src,
                             int src_rows, int src_cols, const float *in, int rows, int k);

/* The one prepared X input (fprop's Xq [N x in] or wgrad's (X^T)q [in x N]) that the linears
 * of a group (q, k, v of a block; gate, up) read from the same tensor: made by the group's first
 * GEMM and read by the others, where the recipe gives every linear of the group the same spec
 * and it is deterministic (RNE, RZ or BF16 rounding: the SR stream is per linear, so an SR input
 * is never shared). The record names what buf holds (group, operand, source, shape, spec, RHT
 * seed, layout); whoever writes a group's source drops it (valid 0). made and reused count the
 * preparations and the reads that skipped one. */
typedef struct qw_shared_input {
    float *buf; /* backend memory, cap floats; NULL: nothing is shared */
    size_t cap;
    int valid;
    int group;
    qw_gemm_operand op;
    const float *src;
    int rows, cols, transpose;
    qw_operand_spec spec;
    uint64_t seed;
    int t, ld; /* where the GEMM reads it: gemm_tt's transpose flag and row length */
    unsigned long made, reused;
    unsigned long dy_reused; /* wgrad GEMMs that read dgrad's BF16 dY (qw_qlinear_backward) */
} qw_shared_input;

/* What the linears of one step share. buf_a and buf_b each hold at least
 * qw_qlinear_scratch_floats() floats for the largest linear. */
typedef struct qw_qlinear_env {
    qw_backend *be; /* the backend every step runs on (not owned) */
    const qw_recipe *recipe;
    int n_layers;
    uint64_t seed; /* SR streams and the RHT sign vector (one for the whole run) */
    uint32_t step; /* SR stream: the micro-step counter */
    float *buf_a, *buf_b;
    qw_gemm_hook hook; /* NULL: none */
    void *hook_user;
    unsigned *ran; /* NULL, or [QW_N_LINEAR_GEMMS] (bf16_exact.h qw_linear_gemm): bit p set
                      when a GEMM of that kind ran on path p (qk_gemm_path.h) */
    qw_tprofile *prof; /* NULL, or where the GEMMs and operand preparation are timed */
    int unfused_prep;  /* 1: a backend's fused operand passes (ops.h rht_from) are not used,
                          each step runs on its own: the reference they are tested against */
    qw_wcache *wcache; /* NULL, or the weights' quantized copies (wcache.h), made at their
                          first use after the weights changed and read by every GEMM until the
                          next change; not used where a hook watches the inputs. In the
                          backend's packed form (CUDA) gemm_abt_quant_kept reads them */
    int gemm_fp32;     /* 1: every GEMM FP32 (gemm_abt; neither gemm_abt_bf16 nor
                          gemm_abt_quant), as $QSWEEP_CUDA_GEMM=fp32 asks (tmodel.h) */
    qw_shared_input *shared; /* NULL, or the group's shared X input (above); not used where a
                                hook watches the inputs or gemm_abt_quant quantizes them */
    int group;               /* the group of the linear now running (the caller sets it before
                                each call); -1: its X is its own */
} qw_qlinear_env;

/* Floats each scratch buffer needs for a linear [out x in] over N rows. */
size_t qw_qlinear_scratch_floats(int N, int in, int out);

/* 1 when r keeps the linears of block `layer` (-1: lm_head) in FP32 (its fprop X is FP32): their
 * GEMMs multiply every input where it lies, using neither scratch buffer nor the shared input. */
int qw_qlinear_layer_fp32(const qw_recipe *r, int layer, int n_layers);

/* Forward of linear `linear` (its index for SR streams) of block `layer` (-1: lm_head).
 * Errors: QS_EINVAL (RHT with k not a multiple of its tile, naming the linear and operand), errors
 * of the numeric core wrapped with the linear and operand. */
qs_status qw_qlinear_forward(const qw_qlinear_env *env, int layer, int linear, float *y,
                             const float *x, const float *W, int N, int in, int out, qs_error *err);

/* Backward: dx[N x in] = (or += when dx_accumulate) dgrad, skipped when dx is NULL;
 * dW[out x in] += wgrad. dy [N x out] is read only. Errors: as qw_qlinear_forward. */
qs_status qw_qlinear_backward(const qw_qlinear_env *env, int layer, int linear, float *dx,
                              int dx_accumulate, float *dW, const float *dy, const float *x,
                              const float *W, int N, int in, int out, qs_error *err);

/* Makes GEMM input `op` from src as qlinear does (transpose when transpose is 1: src
 * [rows x cols] becomes [cols x rows]; RHT; rounding or quantization under spec) into dst.
 * Exposed so that tests and benchmarks run exactly the path the GEMMs see. Errors: as above. */
qs_status qw_qlinear_prepare(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                             qw_gemm_operand op, float *dst, const float *src, int rows, int cols,
                             int transpose, qs_error *err);

/* qw_round_bf16 (x rounded to BF16 as the numeric core's codec) is the CPU backend's: ops.h. */

#endif
