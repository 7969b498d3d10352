/* The trainable Llama model: parameters, gradients, AdamW moments and activations carved out
 * of ONE allocation of its backend per (config, batch B, sequence length T), a training forward
 * that saves what the backward needs, and the backward (llm.c's GPT2 struct, for Llama), over
 * the engine's ops table (worker/engine/ops.h) and its one block definition
 * (worker/engine/block.h, the block the evaluation runs too, here with save on and the
 * recipe's linears as hooks) with the model's ends (worker/engine/llama_head.h: embeddings,
 * final norm and lm_head, shared with the evaluation the same way): every step is a table entry, so
 * the same code trains on the CPU backend and on CUDA, and never reads the backend's memory from
 * the host except through the table's fetch.
 *
 * Architecture as worker/engine/model.h (Hugging Face LlamaForCausalLM): embeddings, per block
 * x += o(attn(rope(q(rms(x))), rope(k(rms(x))), v(rms(x)))) and
 * x += down(silu(gate(rms(x))) * up(rms(x))), final RMSNorm, lm_head (tied or not),
 * cross-entropy against the next token. GQA, RoPE with Llama 3.1 frequency scaling (the
 * engine's qw_rope_tables).
 *
 * Parameters live in one flat array in Hugging Face tensor order: model.embed_tokens.weight
 * [V x D]; per block: input_layernorm [D], q_proj [H*E x D], k_proj [G*E x D], v_proj [G*E x D],
 * o_proj [D x H*E], post_attention_layernorm [D], gate_proj [F x D], up_proj [F x D],
 * down_proj [D x F]; model.norm.weight [D]; lm_head.weight [V x D] unless tied. Gradients and
 * the two moments have the same layout. FP32 masters.
 *
 * Linears go through qlinear.h under the model's recipe (qw_tmodel_set_recipe, default
 * fp32); the linear index of block l's kind k (q,k,v,o,gate,up,down = 0..6) is l*7 + k and
 * lm_head's is n_layers*7. Forward and backward allocate nothing; on the CPU backend results
 * are bit-identical for any thread count. */
#ifndef QW_TRAIN_TMODEL_H
#define QW_TRAIN_TMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "bf16_exact.h"
#include "checkpoint.h"
#include "error.h"
#include "ops.h"
#include "qlinear.h"
#include "recipe.h"
#include "tprofile.h"

#define QW_TMODEL_KINDS 7 /* q, k, v, o, gate, up, down */

/* One parameter tensor of a model: HF name, shape (cols 1 for vectors), and pointers into
 * the model's arrays (data, grad, first and second AdamW moments), all backend memory. decay
 * is 1 for matrices (weight decay applies), 0 for norm weights. */
typedef struct qw_tensor_view {
    char name[96];
    int rows, cols;
    size_t offset; /* in elements, into the flat parameter array */
    int decay;
    float *data, *grad, *m, *v;
} qw_tensor_view;

typedef struct qw_tmodel qw_tmodel;

/* The flat arrays of a model (qw_tmodel_fetch, qw_tmodel_put). */
typedef enum qw_tmodel_array {
    QW_TMODEL_PARAMS = 0,
    QW_TMODEL_MOMENT_M = 1,
    QW_TMODEL_MOMENT_V = 2,
    QW_TMODEL_GRADS = 3,
} qw_tmodel_array;

/* A model for cfg training on B x T token batches on backend be (not owned; it must outlive
 * the model). Parameters start at 0; fill them with _init_random or _load. Errors: QS_EINVAL
 * (config out of range, B or T < 1; T > cfg max_seq_len is allowed), QS_ENOMEM (naming the
 * bytes asked of the backend). */
qs_status qw_tmodel_create_on(const qw_config *cfg, int B, int T, qw_backend *be, qw_tmodel **out,
                              qs_error *err);
/* The same on a CPU backend of its own with nt threads (0 = all cores). Sets OpenBLAS to one
 * thread (the backend runs its own OpenMP team). */
qs_status qw_tmodel_create(const qw_config *cfg, int B, int T, int nt, qw_tmodel **out,
                           qs_error *err);
void qw_tmodel_destroy(qw_tmodel *m);
const qw_config *qw_tmodel_config(const qw_tmodel *m);
/* The backend the model lives on. */
qw_backend *qw_tmodel_backend(qw_tmodel *m);
/* Tensor count and the i-th tensor (order in the header comment). */
int qw_tmodel_n_tensors(const qw_tmodel *m);
void qw_tmodel_tensor(qw_tmodel *m, int i, qw_tensor_view *out);
/* Flat arrays of n_params elements, backend memory: parameters, gradients, moments m and v. */
size_t qw_tmodel_n_params(const qw_tmodel *m);
float *qw_tmodel_params(qw_tmodel *m);
float *qw_tmodel_grads(qw_tmodel *m);
float *qw_tmodel_moment(qw_tmodel *m, int which /* 0: m, 1: v */);
/* Copies array `which` to host[n_params] (fetch) or from it (put). Errors: the backend's. */
qs_status qw_tmodel_fetch(qw_tmodel *m, qw_tmodel_array which, float *host, qs_error *err);
qs_status qw_tmodel_put(qw_tmodel *m, qw_tmodel_array which, const float *host, qs_error *err);
/* Llama initialisation: every matrix N(0, std^2) from Philox keyed by (seed, tensor, element)
 * (Box-Muller on two 32-bit words), norm weights 1. Errors: QS_ENOMEM, the backend's. */
qs_status qw_tmodel_init_random(qw_tmodel *m, uint64_t seed, float std, qs_error *err);
/* Copies every tensor from a checkpoint with the same config. Errors: those of
 * qw_checkpoint_tensor, QS_EFORMAT (shape differs: names the tensor), the backend's. */
qs_status qw_tmodel_load(qw_tmodel *m, qw_checkpoint *ck, qs_error *err);
/* Sets every gradient to 0. Errors: the backend's. */
qs_status qw_tmodel_zero_grad(qw_tmodel *m, qs_error *err);
/* Where m's forwards, backwards and optimizer steps spent their time since the model was made
 * or the caller last reset it (tprofile.h: qw_tprofile_reset); always on, one clock read per
 * op. */
qw_tprofile *qw_tmodel_profile(qw_tmodel *m);
/* Runs tokens [B*T] (host; row b*T+t) and, with targets [B*T], the cross-entropy: *loss is the
 * mean over the B*T positions (summed in double in row order; targets NULL: logits only, *loss
 * untouched). step keys the SR streams of this micro-step. Saves the activations for _backward.
 * Errors: QS_EINVAL (a token or target >= vocab: names its index), errors of the linears and
 * the backend. */
qs_status qw_tmodel_forward(qw_tmodel *m, const uint32_t *tokens, const uint32_t *targets,
                            uint32_t step, double *loss, qs_error *err);
/* Logits [B*T x V] of the last forward without targets (probabilities after one with), backend
 * memory. */
const float *qw_tmodel_logits(const qw_tmodel *m);
/* Adds scale * d(mean loss)/d(parameter) to the gradients, for the last forward (which must
 * have had targets). Errors: QS_ESTATE (no forward with targets before), errors of the linears
 * and the backend. */
qs_status qw_tmodel_backward(qw_tmodel *m, float scale, qs_error *err);

/* Sets the recipe of the FP32 model's linears (copied) and the run seed of its SR streams and
 * RHT signs, and sizes the weight cache (below) and the GEMM input buffers (qw_tmodel_bytes)
 * for it. Errors: qw_recipe_check's, QS_ENOMEM (the buffers' bytes: the model keeps its recipe
 * and buffers; the cache's: it keeps its recipe, without a cache). */
qs_status qw_tmodel_set_recipe(qw_tmodel *m, const qw_recipe *r, uint64_t seed, qs_error *err);

/* The quantized weights of a step (wcache.h), on by default: each weight the recipe quantizes
 * with deterministic rounding is quantized at its first GEMM after it changed and read from there
 * by every micro-batch until it changes again; the same bits as quantizing it at every GEMM
 * (on 0: the reference). Its memory (qw_tmodel_weight_cache_bytes) is allocated by
 * qw_tmodel_set_recipe for the recipe, beside the model's one allocation. */
void qw_tmodel_set_weight_cache(qw_tmodel *m, int on);
size_t qw_tmodel_weight_cache_bytes(const qw_tmodel *m);
/* Drops the kept quantized weights: for a caller that wrote parameters through
 * qw_tmodel_params or a tensor view. The model's own writers (qw_tmodel_put of the parameters,
 * _init_random, _load) and qw_adamw_step call it. */
void qw_tmodel_weights_changed(qw_tmodel *m);

/* The shared X inputs (qlinear.h qw_shared_input), on by default: q, k and v read one input
 * (ln1), gate and up another (ln2); where the recipe prepares it the same way for each linear
 * of the group and deterministically (not SR), fprop's Xq and wgrad's (X^T)q are made once per
 * group per micro-batch, by the group's first GEMM, and read by the others; the same bits as
 * making them at every GEMM (on 0: the reference). Their buffer is N x D floats, held with the
 * GEMMs' input buffers while the recipe rounds some input (qw_tmodel_set_recipe). made and reused
 * count the preparations and the GEMMs that read one made before, since the model was made. With it
 * on, a linear whose dgrad and wgrad both take dY in BF16 on the fixed-order GEMM's in-layout path
 * rounds dY once (dy_reused counts the wgrad GEMMs that read dgrad's). */
void qw_tmodel_set_shared_inputs(qw_tmodel *m, int on);
void qw_tmodel_shared_input_counts(const qw_tmodel *m, unsigned long *made, unsigned long *reused,
                                   unsigned long *dy_reused);

/* on 1: every linear GEMM runs FP32 (qlinear.h gemm_fp32: gemm_abt, quantized inputs
 * fake-quantized), not on BF16 operands where both inputs are BF16-exact nor block-scaled: what
 * $QSWEEP_CUDA_GEMM=fp32 asks of a CUDA backend (train_job.c). Default 0. The CPU's GEMMs are
 * FP32 either way (the same bits); the paths recorded (qw_tmodel_gemm_paths, _gemm_ran) follow. */
void qw_tmodel_set_gemm_fp32(qw_tmodel *m, int on);

/* Calls hook with every GEMM input the recipe rounds or quantizes (qlinear.h: backend memory);
 * NULL: none. */
void qw_tmodel_set_gemm_hook(qw_tmodel *m, qw_gemm_hook hook, void *user);

/* The linear GEMMs of one micro-step (fprop, dgrad and wgrad of each block's 7 linears and of
 * lm_head: 3 (7 L + 1)) under the model's recipe, split by the path qlinear.h gives them:
 * *n_bf16 with BF16 operands (both inputs BF16-exact, bf16_exact.h: ops.h gemm_abt_bf16),
 * *n_fp32 FP32 (gemm_abt, linear_bwd). Attention's batched matmuls are not linears and not
 * counted (FP32 always). Pure: from the recipe and the config. */
void qw_tmodel_gemm_paths(const qw_tmodel *m, int *n_bf16, int *n_fp32);

/* The GEMM paths the model's linears ran since it was made, per kind (bf16_exact.h
 * qw_linear_gemm): bit p of ran[g] set when a GEMM of kind g ran on path p (qk_gemm_path.h:
 * fp32, bf16, or gemm_abt_quant's native_fp4 / emulated_bf16). */
void qw_tmodel_gemm_ran(const qw_tmodel *m, unsigned ran[QW_N_LINEAR_GEMMS]);

/* Batch B, sequence length T and rows N = B*T the model was created for. */
int qw_tmodel_batch(const qw_tmodel *m);
int qw_tmodel_ctx(const qw_tmodel *m);
size_t qw_tmodel_rows(const qw_tmodel *m);

/* Bytes of backend memory the model holds: its one allocation, and the GEMM input buffers (two
 * of the largest linear's qw_qlinear_scratch_floats, and the shared N x D input) that
 * qw_tmodel_set_recipe allocates for a recipe that rounds or quantizes some linear's inputs. */
size_t qw_tmodel_bytes(const qw_tmodel *m);

/* What qw_tmodel_create(cfg, B, T, nt) would hold, without allocating: its parameter count
 * (embeddings, every block's linears and norms, the final norm, lm_head unless tied: the
 * tensor table above) and the bytes of its one allocation (FP32 parameters, gradients and
 * AdamW moments, 16 bytes per parameter, plus activations and scratch for B x T, with nt the
 * CPU threads the attention scratch is sized for) with the GEMM input buffers a rounding recipe
 * adds (qw_tmodel_bytes under such a recipe; an all-FP32 one holds less). cfg must pass create's
 * checks. */
void qw_tmodel_plan(const qw_config *cfg, int B, int T, int nt, size_t *n_params, size_t *bytes);

#endif
