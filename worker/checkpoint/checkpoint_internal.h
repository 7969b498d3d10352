/* Internals of the checkpoint loader shared by its files and by the fuzz targets in
 * tests/checkpoint/. Not part of the contract in checkpoint.h: callers outside
 * worker/checkpoint and tests/checkpoint use checkpoint.h and tokens.h only. */
#ifndef QW_CHECKPOINT_INTERNAL_H
#define QW_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "checkpoint.h"
#include "error.h"
#include "tokens.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "qw_checkpoint reads little-endian files in place: a little-endian host is required"
#endif

#define QW_MAX_DIMS 4

/* Element types a safetensors file may hold that only the FP4 reader (fp4_checkpoint.c) uses:
 * the parts of a packed linear. Such an entry has dtype QW_DT_COUNT and is never served. */
enum { QW_RAW_NONE = 0, QW_RAW_U8 = 1, QW_RAW_F8_E4M3 = 2 };

/* One tensor of the open checkpoint, by its Hugging Face name.
 * shape: HF order (outermost first), ndim entries; for GGUF the file's ne[] reversed.
 * src/nbytes: the stored bytes inside a mapped file. permute_heads: for GGUF attn_q/attn_k,
 * the head count llama.cpp's permute() used (rows are un-permuted on conversion); 0 = none.
 * data: FP32 view handed out (into the map, or `owned`); NULL until first requested. */
typedef struct qw_tensor_entry {
    char *name;
    qw_dtype dtype;
    int ndim;
    int64_t shape[QW_MAX_DIMS];
    int64_t numel;
    const uint8_t *src;
    size_t nbytes;
    size_t offset;  /* byte offset of src in its file, for messages */
    int file_index; /* index into the checkpoint's file list */
    int permute_heads;
    int raw; /* QW_RAW_*: a part of a packed FP4 linear (dtype QW_DT_COUNT), else 0 */
    const float *data;
    float *owned;
} qw_tensor_entry;

/* A growable tensor table. */
typedef struct qw_tensor_table {
    qw_tensor_entry *v;
    size_t n, cap;
} qw_tensor_table;

/* A file mapped read-only (mmap, MAP_PRIVATE). An empty file has data pointing at a static
 * empty byte and size 0. path is an owned copy. */
typedef struct qw_mapped_file {
    char *path;
    const uint8_t *data;
    size_t size;
} qw_mapped_file;

/* Maps `path` whole. Errors: QS_ENOTFOUND (no such file), QS_EIO (open, fstat, not a regular
 * file, mmap: path and errno text), QS_ENOMEM. On error *f is zeroed. */
qs_status qw_map_file(const char *path, qw_mapped_file *f, qs_error *err);
/* Unmaps and frees; a zeroed struct is a no-op. */
void qw_unmap_file(qw_mapped_file *f);

/* Bytes of `numel` elements of dtype dt stored contiguously; blocked types need numel to be
 * a multiple of qw_dtype_block(dt) (the caller checks). Returns 0 and sets *overflow on size_t
 * overflow. */
size_t qw_dtype_bytes(qw_dtype dt, int64_t numel, int *overflow);

/* The dtype of GGUF tensor type `ggml_type` (enum ggml_type, ggml.h) into *dt: 1, or 0 when
 * qsweep does not read that type. */
int qw_dtype_from_ggml(uint32_t ggml_type, qw_dtype *dt);

/* Appends an entry (name copied) and returns it, or NULL on allocation failure. */
qw_tensor_entry *qw_table_add(qw_tensor_table *t, const char *name);
/* Finds an entry by name; NULL when absent. */
qw_tensor_entry *qw_table_find(const qw_tensor_table *t, const char *name);
/* Frees names, owned buffers and the array. */
void qw_table_free(qw_tensor_table *t);

/* Parses a config.json held in memory (`text`, `len` bytes; need not be NUL-terminated).
 * `file` names it in messages. Fills *cfg (LlamaForCausalLM fields, defaults as in
 * transformers' LlamaConfig for optional ones). Errors: QS_EFORMAT (not JSON, a field of
 * the wrong type, missing, non-positive or contradicting another), QS_EUNSUPPORTED (another
 * architecture, activation or rope_scaling type). */
qs_status qw_config_parse_json(const char *file, const char *text, size_t len, qw_config *cfg,
                               qs_error *err);
/* The same, keeping the parsed document: on success *root_out (a new reference, the caller's
 * to json_decref) is the whole config.json, for readers of more of it (qw_fp4_resolve). */
qs_status qw_config_parse_json_root(const char *file, const char *text, size_t len, qw_config *cfg,
                                    json_t **root_out, qs_error *err);

/* Parses one safetensors file held in memory (`size` bytes at `data`): u64 header length N,
 * N bytes of JSON, then the byte buffer. Appends every tensor to *table with file_index,
 * src pointing into `data`. Checks: N fits in the file, JSON object, each entry has dtype
 * F32/F16/BF16, shape (<= 4 non-negative dims), data_offsets [begin, end] with
 * begin <= end <= buffer size and end - begin = numel x element size.
 * Errors name `file`, the tensor and the field or offset: QS_EFORMAT, QS_EUNSUPPORTED, QS_ENOMEM.
 */
qs_status qw_safetensors_parse(const char *file, const uint8_t *data, size_t size, int file_index,
                               qw_tensor_table *table, qs_error *err);

/* Reads the FP4 linears of an HF checkpoint in folder dir (fp4_checkpoint.c): when the
 * config.json text (cfg_file names it) has a compressed-tensors quantization_config, each
 * `<module>.weight_packed` of the table is decoded with its scales into a new FP32 entry
 * `<module>.weight`; with a ModelOpt hf_quant_config.json (or quant_method modelopt), each
 * packed `<module>.weight` is replaced by its FP32 values. file_paths:
 * the checkpoint's files by file_index, for messages. A config without quantization_config
 * changes nothing. Errors: QS_EUNSUPPORTED (another quant_method, a format other than
 * nvfp4-pack-quantized / mxfp4-pack-quantized), QS_EFORMAT (a packed tensor no config group
 * targets, a part of the wrong type or shape, a negative or NaN scale, a global scale that is
 * not finite and positive, a .weight stored beside its packed form), QS_ENOTFOUND (a missing
 * part), QS_ENOMEM. */
qs_status qw_fp4_resolve(const char *dir, const char *cfg_file, json_t *cfg_root,
                         const char *const *file_paths, qw_tensor_table *t, qs_error *err);

/* Parses a GGUF v3 file held in memory: header, every metadata key/value (all value types,
 * arrays nested up to 8 deep), tensor infos, alignment (general.alignment, default 32).
 * Fills *cfg from the llama.* keys and appends every tensor to *table under its Hugging Face
 * name (token_embd -> model.embed_tokens, blk.N.attn_q -> model.layers.N.self_attn.q_proj, ...),
 * shapes reversed to HF order, attn_q/attn_k marked for row un-permutation; Llama 3.1 rope
 * scaling recovered from "rope_freqs.weight" when present (see checkpoint.h).
 * Errors name `file`, the offset and the key or tensor: QS_EFORMAT (truncated, bad magic,
 * bad version, offsets/sizes outside the file, missing llama.* key), QS_EUNSUPPORTED (another
 * architecture, a tensor type qw_dtype_from_ggml does not read), QS_ENOMEM. */
qs_status qw_gguf_parse(const char *file, const uint8_t *data, size_t size, int file_index,
                        qw_config *cfg, qw_tensor_table *table, qs_error *err);

/* Validates a token file held in memory (format in tokens.h) and fills *out (ids copied to
 * the heap, digest of the bytes). Errors as qw_tokens_load. */
qs_status qw_tokens_parse(const char *file, const uint8_t *data, size_t size, qw_tokens *out,
                          qs_error *err);

#endif
