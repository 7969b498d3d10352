/* Quantization policies: which format each linear of a Llama model is fake-quantized to.
 *
 * A policy gives, for every linear (q, k, v, o, gate, up, down of every block, and
 * optionally lm_head and the token embeddings), a weight format (W4A16) and optionally an
 * input-activation format (W4A4). Formats and options come from the numeric core
 * (kernels/quant.h). Weights [out_features x in_features] are fake-quantized with
 * rows = out_features, k = in_features (blocks along K); activations [tokens x in_features]
 * with rows = tokens, k = in_features (blocks along K, per token).
 *
 * The isolation helpers build the policies of a sensitivity sweep ("Diagnosing FP4
 * Inference", arXiv 2603.08747; docs/numerics.md section 5): quantize one part, keep the rest FP32. */
#ifndef QW_POLICY_H
#define QW_POLICY_H

#include "error.h"
#include "quant.h"

/* The seven linears of a Llama block, in Hugging Face module order. */
typedef enum qw_linear_kind {
    QW_LINEAR_Q = 0,    /* self_attn.q_proj  [n_heads*head_dim x dim] */
    QW_LINEAR_K = 1,    /* self_attn.k_proj  [n_kv_heads*head_dim x dim] */
    QW_LINEAR_V = 2,    /* self_attn.v_proj  [n_kv_heads*head_dim x dim] */
    QW_LINEAR_O = 3,    /* self_attn.o_proj  [dim x n_heads*head_dim] */
    QW_LINEAR_GATE = 4, /* mlp.gate_proj     [hidden_dim x dim] */
    QW_LINEAR_UP = 5,   /* mlp.up_proj       [hidden_dim x dim] */
    QW_LINEAR_DOWN = 6, /* mlp.down_proj     [dim x hidden_dim] */
    QW_LINEAR_KINDS = 7
} qw_linear_kind;

/* How one tensor is quantized. weight == NULL keeps the FP32 weights; act == NULL keeps FP32
 * input activations. For stochastic rounding the policy's applier adds the linear's index
 * (layer*7 + kind; lm_head n_layers*7, embeddings n_layers*7+1) to opt.tensor_id, so two
 * tensors never share a random stream. The embeddings are a lookup, not a GEMM: an act format
 * there is refused (QS_EINVAL) by qw_model_apply_policy. */
typedef struct qw_quant_spec {
    const qk_format *weight;
    qk_quant_options weight_opt;
    const qk_format *act;
    qk_quant_options act_opt;
} qw_quant_spec;

/* Groups of a block's linears that a serving engine fuses into one GEMM and so quantizes with
 * one shared per-tensor scale (TensorRT-LLM and ModelOpt deploy NVFP4 so): a bit set. */
enum {
    QW_FUSE_QKV = 1,     /* q_proj, k_proj, v_proj */
    QW_FUSE_GATE_UP = 2, /* gate_proj, up_proj */
};

/* A whole-model policy. linears has n_layers*QW_LINEAR_KINDS entries, index
 * layer*QW_LINEAR_KINDS + kind. All-zero specs (the state after qw_policy_init) mean "none".
 * fuse (QW_FUSE_* bits): for each group named, a quantized member whose weight format has a
 * per-tensor scale (format.h tensor_scale: nvfp4, nvfp4_2d, fp8_e4m3) takes its tensor amax
 * as the joint amax of the group's masters in its block (qk_joint_amax), whether or not the
 * other members are quantized; other formats and a spec with tensor_amax_given are left as
 * they are. Activations need nothing: the members of a group read the same input. */
typedef struct qw_policy {
    int n_layers;
    unsigned fuse;
    qw_quant_spec *linears; /* heap, owned; [n_layers][QW_LINEAR_KINDS] */
    qw_quant_spec lm_head;  /* the output projection; when tied, the head's own copy: the
                               embedding lookup is quantized only by `embed` */
    qw_quant_spec embed;    /* model.embed_tokens rows, fake-quantized with k = dim */
} qw_policy;

/* Isolation modes of a sensitivity sweep. (kind, block) select the part where it applies. */
typedef enum qw_isolation {
    QW_ISO_NONE = 0,          /* nothing quantized (the baseline) */
    QW_ISO_ALL = 1,           /* every block linear */
    QW_ISO_COMPONENT = 2,     /* linear `kind` in every block */
    QW_ISO_BLOCK = 3,         /* every linear of block `block` */
    QW_ISO_LAYER = 4,         /* linear `kind` of block `block` */
    QW_ISO_LOO_COMPONENT = 5, /* every block linear except kind `kind` */
    QW_ISO_LOO_BLOCK = 6,     /* every block linear except those of block `block` */
    QW_ISO_LOO_LAYER = 7,     /* every block linear except `kind` of block `block` */
    QW_ISO_CUMULATIVE = 8,    /* every linear of blocks 0..block (inclusive) */
} qw_isolation;

/* Sets *p to n_layers all-"none" specs. Errors: QS_EINVAL (n_layers < 1), QS_ENOMEM.
 * On error *p is zeroed (safe to free). */
qs_status qw_policy_init(qw_policy *p, int n_layers, qs_error *err);

/* Frees p->linears and zeroes *p. NULL or a zeroed policy is a no-op. */
void qw_policy_free(qw_policy *p);

/* The spec of linear `kind` in block `layer`, or NULL when out of range. */
qw_quant_spec *qw_policy_linear(qw_policy *p, int layer, qw_linear_kind kind);
const qw_quant_spec *qw_policy_linear_const(const qw_policy *p, int layer, qw_linear_kind kind);

/* Resets every block linear of p to "none", then sets `spec` on the linears that isolation
 * `mode` selects with (kind, block). lm_head and embed are left as they are (set them
 * directly when a sweep quantizes them). kind is read only by the modes that name a kind,
 * block only by those that name a block. Errors: QS_EINVAL naming the field (mode unknown,
 * kind out of range, block outside 0..n_layers-1, spec NULL where needed). */
qs_status qw_policy_isolation(qw_policy *p, qw_isolation mode, qw_linear_kind kind, int block,
                              const qw_quant_spec *spec, qs_error *err);

/* Number of linears a policy quantizes (weight or activation format set), lm_head and
 * embeddings included. */
int qw_policy_count(const qw_policy *p);

/* Names. Linear kinds: "q", "k", "v", "o", "gate", "up", "down" (the HF module names
 * "q_proj" ... "down_proj" are accepted too). Isolation modes: "none", "all", "component",
 * "block", "layer", "loo_component", "loo_block", "loo_layer", "cumulative".
 * Errors: QS_EINVAL quoting the unknown name. */
qs_status qw_linear_kind_by_name(const char *name, qw_linear_kind *out, qs_error *err);
const char *qw_linear_kind_name(qw_linear_kind kind);   /* "q", ...; "?" if out of range */
const char *qw_linear_module_name(qw_linear_kind kind); /* "self_attn.q_proj", ... */
qs_status qw_isolation_by_name(const char *name, qw_isolation *out, qs_error *err);
const char *qw_isolation_name(qw_isolation mode);

#endif
