/* The trainable Llama model: parameters, gradients, AdamW moments and activations carved out
 * of ONE allocation per (config, batch B, sequence length T), a training forward that saves
 * what the backward needs, and the backward (llm.c's GPT2 struct, for Llama).
 *
 * Architecture as worker/engine/model.h (Hugging Face LlamaForCausalLM): embeddings, per block
 * x += o(attn(rope(q(rms(x))), rope(k(rms(x))), v(rms(x)))) and
 * x += down(silu(gate(rms(x))) * up(rms(x))), final RMSNorm, lm_head (tied or not),
 * cross-entropy against the next token. GQA, RoPE with Llama 3.1 frequency scaling.
 *
 * Parameters live in one flat array in Hugging Face tensor order: model.embed_tokens.weight
 * [V x D]; per block: input_layernorm [D], q_proj [H*E x D], k_proj [G*E x D], v_proj [G*E x D],
 * o_proj [D x H*E], post_attention_layernorm [D], gate_proj [F x D], up_proj [F x D],
 * down_proj [D x F]; model.norm.weight [D]; lm_head.weight [V x D] unless tied. Gradients and
 * the two moments have the same layout. FP32 masters (qw_tmodel); qw_tmodel64 is the same
 * code in FP64 without quantization, for the finite-difference test.
 *
 * Linears go through qlinear.h under the model's recipe (qw_tmodel_set_recipe, default
 * fp32); the linear index of block l's kind k (q,k,v,o,gate,up,down = 0..6) is l*7 + k and
 * lm_head's is n_layers*7. Forward and backward allocate nothing; results are bit-identical
 * for any thread count. */
#ifndef QW_TRAIN_TMODEL_H
#define QW_TRAIN_TMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "qlinear.h"
#include "recipe.h"

#define QW_TMODEL_KINDS 7 /* q, k, v, o, gate, up, down */

/* One parameter tensor of a model: HF name, shape (cols 1 for vectors), and pointers into
 * the model's arrays (data, grad, first and second AdamW moments). decay is 1 for matrices
 * (weight decay applies), 0 for norm weights. */
#define QW_TENSOR_VIEW(R)                                                                          \
    struct {                                                                                       \
        char name[96];                                                                             \
        int rows, cols;                                                                            \
        size_t offset; /* in elements, into the flat parameter array */                            \
        int decay;                                                                                 \
        R *data, *grad, *m, *v;                                                                    \
    }
typedef QW_TENSOR_VIEW(float) qw_tensor_view;
typedef QW_TENSOR_VIEW(double) qw_tensor_view64;

typedef struct qw_tmodel qw_tmodel;
typedef struct qw_tmodel64 qw_tmodel64;

#define QW_TMODEL_DECLARE(R, TM, VIEW, NAME)                                                       \
    /* A model for cfg training on B x T token batches with nt threads (0 = all cores). Sets       \
     * OpenBLAS to one thread (the model runs its own OpenMP team). Parameters start at 0;         \
     * fill them with _init_random or _load. Errors: QS_EINVAL (config out of range, B or T        \
     * < 1, T > cfg max_seq_len is allowed), QS_ENOMEM. */                                         \
    qs_status NAME(create)(const qw_config *cfg, int B, int T, int nt, TM **out, qs_error *err);   \
    void NAME(destroy)(TM * m);                                                                    \
    const qw_config *NAME(config)(const TM *m);                                                    \
    /* Tensor count and the i-th tensor (order in the header comment). */                          \
    int NAME(n_tensors)(const TM *m);                                                              \
    void NAME(tensor)(TM * m, int i, VIEW *out);                                                   \
    /* Flat arrays of n_params elements: parameters, gradients, moments m and v. */                \
    size_t NAME(n_params)(const TM *m);                                                            \
    R *NAME(params)(TM * m);                                                                       \
    R *NAME(grads)(TM * m);                                                                        \
    R *NAME(moment)(TM * m, int which /* 0: m, 1: v */);                                           \
    /* Llama initialisation: every matrix N(0, std^2) from Philox keyed by (seed, tensor,          \
     * element) (Box-Muller on two 32-bit words), norm weights 1. */                               \
    void NAME(init_random)(TM * m, uint64_t seed, float std);                                      \
    /* Copies every tensor from a checkpoint with the same config. Errors: those of                \
     * qw_checkpoint_tensor, QS_EFORMAT (shape differs: names the tensor). */                      \
    qs_status NAME(load)(TM * m, qw_checkpoint * ck, qs_error * err);                              \
    /* Sets every gradient to 0. */                                                                \
    void NAME(zero_grad)(TM * m);                                                                  \
    /* Runs tokens [B*T] (row b*T+t) and, with targets [B*T], the cross-entropy: *loss is          \
     * the mean over the B*T positions (targets NULL: logits only, *loss untouched). step keys     \
     * the SR streams of this micro-step. Saves the activations for _backward. Errors:             \
     * QS_EINVAL (a token or target >= vocab: names its index), errors of the linears. */          \
    qs_status NAME(forward)(TM * m, const uint32_t *tokens, const uint32_t *targets,               \
                            uint32_t step, double *loss, qs_error *err);                           \
    /* Logits [B*T x V] of the last forward without targets (probabilities after one with). */     \
    const R *NAME(logits)(const TM *m);                                                            \
    /* Adds scale * d(mean loss)/d(parameter) to the gradients, for the last forward (which        \
     * must have had targets). Errors: QS_ESTATE (no forward with targets before), errors of       \
     * the linears. */                                                                             \
    qs_status NAME(backward)(TM * m, R scale, qs_error * err);

#define QW_TMODEL_NAME_F32(x) qw_tmodel_##x
#define QW_TMODEL_NAME_F64(x) qw_tmodel64_##x
QW_TMODEL_DECLARE(float, qw_tmodel, qw_tensor_view, QW_TMODEL_NAME_F32)
QW_TMODEL_DECLARE(double, qw_tmodel64, qw_tensor_view64, QW_TMODEL_NAME_F64)

/* Sets the recipe of the FP32 model's linears (copied) and the run seed of its SR streams and
 * RHT signs. Errors: qw_recipe_check's. */
qs_status qw_tmodel_set_recipe(qw_tmodel *m, const qw_recipe *r, uint64_t seed, qs_error *err);

/* Calls hook with every GEMM input the recipe rounds or quantizes (qlinear.h); NULL: none. */
void qw_tmodel_set_gemm_hook(qw_tmodel *m, qw_gemm_hook hook, void *user);

/* Batch B, sequence length T and rows N = B*T the model was created for. */
int qw_tmodel_batch(const qw_tmodel *m);
int qw_tmodel_ctx(const qw_tmodel *m);
size_t qw_tmodel_rows(const qw_tmodel *m);

/* Bytes of the model's one allocation. */
size_t qw_tmodel_bytes(const qw_tmodel *m);

/* What qw_tmodel_create(cfg, B, T, nt) would hold, without allocating: its parameter count
 * (embeddings, every block's linears and norms, the final norm, lm_head unless tied: the
 * tensor table above) and the bytes of its one allocation (FP32 parameters, gradients and
 * AdamW moments, 16 bytes per parameter, plus activations and scratch for B x T). cfg must
 * pass create's checks. */
void qw_tmodel_plan(const qw_config *cfg, int B, int T, int nt, size_t *n_params, size_t *bytes);

#endif
