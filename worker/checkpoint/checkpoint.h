/* Model checkpoints: Hugging Face directories (config.json + safetensors, single or sharded)
 * and GGUF v3 files, opened read-only and memory-mapped.
 *
 * The forward pass and the worker's job kinds code against this header: extend it, never
 * rename.
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

/* Storage type of one tensor as the checkpoint holds it. */
typedef enum qw_dtype {
    QW_DT_F32 = 0,
    QW_DT_F16,
    QW_DT_BF16,
    QW_DT_Q8_0, /* ggml block_q8_0: f16 d, 32 x int8; x = d*q (ggml-common.h) */
    QW_DT_Q4_0, /* ggml block_q4_0: f16 d, 16 bytes of nibbles; x = d*(q-8) */
    QW_DT_Q4_1, /* ggml block_q4_1: f16 d, f16 m, 16 bytes of nibbles; x = d*q + m */
    /* ggml K-quants, super-blocks of 256 (ggml-common.h block_q2_K ... block_q8_K) */
    QW_DT_Q2_K,   /* 16 x 16: 4-bit scale and min; 2-bit quants; 84 bytes */
    QW_DT_Q3_K,   /* 16 x 16: 6-bit scales; 3-bit quants; 110 bytes */
    QW_DT_Q4_K,   /* 8 x 32: 6-bit scale and min; 4-bit quants; 144 bytes */
    QW_DT_Q5_K,   /* 8 x 32: 6-bit scale and min; 5-bit quants; 176 bytes */
    QW_DT_Q6_K,   /* 16 x 16: int8 scales; 6-bit quants; 210 bytes */
    QW_DT_Q8_K,   /* f32 d, 256 x int8 (+ int16 block sums); 292 bytes */
    QW_DT_IQ4_NL, /* ggml block_iq4_nl: f16 d, 32 x 4-bit index into 16 non-linear levels */
    QW_DT_IQ4_XS, /* ggml block_iq4_xs: 256 as 8 x 32 IQ4_NL with 6-bit scales; 136 bytes */
    QW_DT_Q5_0,   /* ggml block_q5_0: f16 d, 32 high bits, 16 bytes of nibbles; x = d*(q-16) */
    QW_DT_Q5_1,   /* ggml block_q5_1: f16 d, f16 m, 32 high bits, nibbles; x = d*q + m */
    QW_DT_MXFP4,  /* ggml block_mxfp4: E8M0 e, 16 bytes of E2M1 nibbles; x = e2m1(q)*2^(e-127) */
    QW_DT_COUNT   /* number of dtypes (not a dtype) */
} qw_dtype;

/* Short name of a dtype ("F32", "Q4_1", "Q4_K", ...). */
const char *qw_dtype_name(qw_dtype dt);

/* Elements per block of dt: 1 (F32, F16, BF16), 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) or
 * 256 (the K-quants and IQ4_XS). A stored row holds whole blocks. */
int qw_dtype_block(qw_dtype dt);

/* Bytes per block of dt (2 for F16, 17 for MXFP4, ...), and the dtype of GGUF tensor type
 * `ggml_type` (enum ggml_type) into *dt: 1, or 0 when qsweep does not read that type. */
int qw_dtype_block_bytes(qw_dtype dt);
int qw_dtype_by_ggml(uint32_t ggml_type, qw_dtype *dt);

/* Converts n elements (a multiple of qw_dtype_block(dt)) from src (dtype dt, packed as in the
 * file) to FP32 in dst. F16 and BF16 per IEEE 754 binary16 / bfloat16 (top half of an FP32);
 * blocked types per ggml's dequantize_row_<type> (ggml-quants.c), each product and sum rounded
 * separately in ggml's order (the build forbids contraction). */
void qw_dtype_to_f32(qw_dtype dt, const uint8_t *src, int64_t n, float *dst);

/* A tensor in its stored form: [rows x cols] row-major in HF order, `row_bytes` bytes per row
 * at data (inside a mapped file, or memory its maker owns). A 1-D tensor of n elements is
 * [1 x n]. permute_heads > 0: a GGUF attn_q/attn_k whose rows llama.cpp permuted for `heads`
 * heads (qw_stored_rows_f32 undoes it). Blocked types hold whole blocks (qw_dtype_block) per
 * row. */
typedef struct qw_stored_tensor {
    qw_dtype dtype;
    const uint8_t *data;
    int64_t rows, cols;
    size_t row_bytes;
    int permute_heads;
} qw_stored_tensor;

/* Converts rows [r0, r0+n) of v to FP32 into dst [n x cols]: the exact values
 * qw_checkpoint_tensor's FP32 copy holds for those rows (same conversion, rows un-permuted).
 * The caller keeps r0 + n <= rows. */
void qw_stored_rows_f32(const qw_stored_tensor *v, int64_t r0, int64_t n, float *dst);

/* FP32 pointer to the data of v when it can be read as FP32 in place (F32, 4-byte aligned, not
 * permuted), else NULL. */
const float *qw_stored_f32(const qw_stored_tensor *v);

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

/* The stored form of a tensor by its Hugging Face name, nothing converted or copied: the view
 * points into the mapped file and stays valid until close. shape/ndim as
 * qw_checkpoint_tensor. This is how the engine reads weights (masters in the checkpoint's
 * dtype; converted per GEMM piece). Errors: QS_ENOTFOUND naming it, QS_EFORMAT (a blocked type
 * whose rows are not whole blocks; a permuted tensor whose rows are not whole heads of rotary
 * pairs). */
qs_status qw_checkpoint_tensor_stored(qw_checkpoint *ck, const char *name, qw_stored_tensor *out,
                                    int64_t shape[2], int *ndim, qs_error *err);

/* Number of tensors in the checkpoint, and the Hugging Face name of tensor i (0 <= i < count,
 * in the order the files list them), NULL when i is out of range. For tools that copy a whole
 * checkpoint (worker/export). */
size_t qw_checkpoint_tensor_count(const qw_checkpoint *ck);
const char *qw_checkpoint_tensor_name(const qw_checkpoint *ck, size_t i);

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
