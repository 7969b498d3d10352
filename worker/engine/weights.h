/* The engine's weights, layer-stacked, one array per role (llama2.c's TransformerWeights without
 * its FP32 copy). A qw_weight is FP32 in place, stored (the checkpoint's dtype: BF16, F16, GGUF
 * Q8_0 ... IQ4_*) or packed (qk_packed: codes + block scales + tensor scale); the last two are
 * converted to FP32 one GEMM piece at a time (ops.h), so no whole-model FP32 copy exists. Norm
 * weights are served as FP32. */
#ifndef QW_WEIGHTS_H
#define QW_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "policy.h"
#include "quant.h"

typedef enum qw_weight_form {
    QW_WEIGHT_F32 = 0,    /* f32 [rows x cols] in place */
    QW_WEIGHT_STORED = 1, /* view: the checkpoint's dtype */
    QW_WEIGHT_PACKED = 2, /* packed: a qk_packed [rows x cols] */
} qw_weight_form;

/* One weight matrix [rows x cols] row-major, HF layout (linears [out x in], embeddings
 * [vocab x dim]). Does not own what it points to. */
typedef struct qw_weight {
    qw_weight_form form;
    int64_t rows, cols;
    const float *f32;        /* QW_WEIGHT_F32 */
    qw_stored_tensor view;   /* QW_WEIGHT_STORED */
    const qk_packed *packed; /* QW_WEIGHT_PACKED */
    /* QW_WEIGHT_F32 values that are made and freed while the model lives (a method's weight,
       worker/method): a stamp from qk_version_new for each set, so a device copy keyed by the
       address is not taken for the values of an earlier buffer at the same address; 0 for
       values that stay as long as the weight (a checkpoint's or a synthetic master) */
    uint64_t version;
} qw_weight;

/* A weight over a stored tensor: FP32 in place when the view allows it (qw_stored_f32),
 * the stored form otherwise. */
qw_weight qw_weight_from_view(const qw_stored_tensor *v);

/* A weight over a packed tensor (which must outlive it). */
qw_weight qw_weight_from_packed(const qk_packed *p);

/* dst [n x cols] = FP32 rows [r0, r0+n) of w (packed: qk_dequantize's values, those
 * qk_fake_quant gives the whole tensor). Serial. Errors: QS_EINVAL (rows out of range). */
qs_status qw_weight_rows_f32(const qw_weight *w, int64_t r0, int64_t n, float *dst, qs_error *err);

/* Bytes w occupies in its form. */
size_t qw_weight_bytes(const qw_weight *w);

/* Every weight of a Llama model (HF LlamaForCausalLM names in the comments). */
typedef struct qw_weights {
    qw_config cfg;
    qw_weight embed;         /* [V x D] model.embed_tokens.weight */
    qw_weight lm_head;       /* [V x D] lm_head.weight, or the embeddings' storage when tied */
    const float *final_norm; /* [D] model.norm.weight */
    const float **attn_norm; /* [L] each [D] model.layers.l.input_layernorm.weight */
    const float **ffn_norm;  /* [L] each [D] model.layers.l.post_attention_layernorm.weight */
    qw_weight *lin[QW_LINEAR_KINDS]; /* lin[kind][l]: model.layers.l.<module of kind>.weight */
    void *arrays_;                   /* one allocation for the per-layer arrays */
    void *owned_;                    /* storage the weights own (synthetic masters), or NULL */
} qw_weights;

/* The weights of ck (open while they are used), every shape checked against the config.
 * Errors: QS_EINVAL (config: names the field), QS_ENOTFOUND / QS_EFORMAT (names the tensor and
 * both shapes), QS_ENOMEM; on error *w owns nothing. */
qs_status qw_weights_from_checkpoint(qw_checkpoint *ck, qw_weights *w, qs_error *err);

/* The loaders' zeroed per-layer arrays for cfg. Errors: QS_EINVAL (config), QS_ENOMEM. */
qs_status qw_weights_alloc(qw_weights *w, const qw_config *cfg, qs_error *err);

/* Dims > 0, heads divide, even head_dim, rope scaling consistent. Errors: QS_EINVAL naming the
 * field. */
qs_status qw_config_check(const qw_config *c, qs_error *err);

/* Frees the arrays and anything owned; a zeroed struct is a no-op. */
void qw_weights_release(qw_weights *w);

/* Bytes of the masters (every weight in its stored form, lm_head counted once when tied). */
size_t qw_weights_bytes(const qw_weights *w);

#endif
