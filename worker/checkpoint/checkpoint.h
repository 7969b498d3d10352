/* Model checkpoints: Hugging Face directories (config.json + safetensors, single or sharded)
 * and GGUF v3 files, opened read-only and memory-mapped.
 *
 * CONTRACT HEADER: the forward pass (engineer B2) and the qsweep command (engineer D) code
 * against it. Extend, never rename.
 *
 * Every fallible function returns a qs_status and fills the caller's qs_error with a
 * message naming the file, and where it applies the tensor, field and byte offset. */
#ifndef QW_CHECKPOINT_H
#define QW_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Model hyper-parameters, from config.json or GGUF llama.* keys. */
typedef struct qw_config {
    int dim;        /* hidden_size */
    int hidden_dim; /* intermediate_size */
    int n_layers, n_heads, n_kv_heads, head_dim, vocab_size, max_seq_len;
    float norm_eps, rope_theta;
    int tied_embeddings; /* lm_head shares model.embed_tokens.weight */
    float rope_factor;   /* Llama 3.1 rope_scaling (rope_type "llama3"); 0 = none */
    float rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int bos_token_id, eos_token_id;
} qw_config;

/* An open checkpoint: mapped files, parsed tensor table, and the FP32 copies made for
 * tensors whose stored dtype is not F32. Not thread-safe: one thread opens, reads tensors
 * and closes; the float pointers handed out stay valid until qw_checkpoint_close. */
typedef struct qw_checkpoint qw_checkpoint;

/* Opens `path`: a directory holding config.json and model.safetensors (or
 * model.safetensors.index.json naming the shards), or a GGUF v3 file (any regular file is
 * read as GGUF). Validates headers, tensor offsets and sizes against the file sizes, and the
 * config against the shape of every tensor the forward pass needs (embeddings, final norm,
 * lm_head unless tied, the 9 tensors of every block). Nothing is converted yet: tensors are
 * converted to FP32 on first qw_checkpoint_tensor call.
 * GGUF: config from llama.* keys; tied_embeddings = output.weight absent. Llama 3.1 rope
 * scaling has no GGUF keys: llama.cpp stores it as the tensor "rope_freqs.weight" (served under
 * that name); rope_factor/low/high/original_max_pos are recovered from it (low = 1, checked
 * to reproduce every stored factor, else QS_EUNSUPPORTED). A llama.rope.scaling.type other
 * than "none" is QS_EUNSUPPORTED. GGUF tensors without an HF counterpart keep their GGUF name.
 * Errors: QS_EIO (cannot open/map: path and errno text), QS_EFORMAT (malformed: file,
 * offset, field or tensor), QS_EUNSUPPORTED (valid but not handled: dtype, tensor type,
 * architecture), QS_ENOTFOUND (config.json or a required tensor absent), QS_ENOMEM. */
qs_status qw_checkpoint_open(const char *path /* HF directory or .gguf file */, qw_checkpoint **out,
                             qs_error *err);

/* The parsed hyper-parameters; valid until close. */
const qw_config *qw_checkpoint_config(const qw_checkpoint *ck);

/* FP32 view of a tensor by its Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight",
 * in HF layout (linears [out][in] row-major, embeddings [vocab][dim], norms [dim]). F32 tensors
 * point into the mmapped file; BF16/F16/quantized ones are converted once into a buffer owned by
 * the checkpoint. GGUF tensors come back in HF order (dims reversed back, Q/K rows un-permuted), so
 * a GGUF file and the HF checkpoint of the same model give the same logits. Missing: QS_ENOTFOUND
 * naming it. shape[0..ndim-1] receives the HF shape (ndim is 1 or 2); for ndim 1, shape[1] is set
 * to 1. With tied embeddings "lm_head.weight" is absent (QS_ENOTFOUND): use
 * model.embed_tokens.weight. */
qs_status qw_checkpoint_tensor(qw_checkpoint *ck, const char *name, const float **data,
                               int64_t shape[2], int *ndim, qs_error *err);

/* BLAKE2b-256 (libsodium crypto_generichash) over the model's files (config + weights, in a fixed
 * order), hex. For job keys. Order: a GGUF file alone; an HF directory: config.json, then the index
 * file if any, then each safetensors file in ascending name order. Each file is hashed as its byte
 * length (u64 little-endian) followed by its bytes, so file boundaries are part of the digest.
 * Computed once and cached; errors: QS_EIO. hex receives 64 lowercase hex digits and NUL. */
qs_status qw_checkpoint_digest(qw_checkpoint *ck, char hex[65], qs_error *err);

/* Unmaps and frees everything; pointers from qw_checkpoint_tensor become invalid. NULL is a no-op.
 */
void qw_checkpoint_close(qw_checkpoint *ck);

#endif
