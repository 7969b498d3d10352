/* What a job needs of the worker that runs it: GPU count, GPU memory per GPU
 * and native FP4, computed per job kind from the job's spec and its model's size. The grid
 * (coordinator/grid) calls qs_job_resources for every job it expands; the result becomes
 * jobs.resources, which the scheduler fits against each worker's GPUs
 * (coordinator/server/scheduler.h).
 *
 * Default resources (a grid without `resources`, or with gpu_count 0 and no native FP4) need
 * nothing: the job runs on any worker, a CPU-only one included, as every sweep did before. A
 * job asks for GPUs with resources.gpu_count (or tensor_parallel) >= 1 or native FP4; then its
 * GPU memory per GPU is the explicit resources.gpu_memory_mib when given, else, for the
 * sensitivity kinds (baseline, eval), computed here (qs_sensitivity_gpu_bytes):
 *
 *   masters = max(stored_bytes, 2 * elements)   every tensor as the checkpoint stores it (the CPU
 *             engine's masters, model.h qw_model_bytes.masters) or as BF16 (the CUDA backend's
 *             masters), whichever is larger: a Q4_0 GGUF is not smaller on
 *             the GPU than its BF16 masters
 *   packed  = sum over the linears the job quantizes of qs_packed_bytes(format, rows, cols)
 *   run     = the engine's run state at the job's ctx (worker/engine/runstate.h
 *             qw_runstate_bytes(cfg, ctx, 1), which the CLI's grid probe computes)
 *   per GPU, for tp = gpu_count ranks (Megatron-LM, arXiv 1909.08053: every block linear
 *   split across the ranks; embeddings, norms, lm_head and the run state kept whole on each,
 *   an upper bound of any split of them):
 *     raw  = ceil(block_part / tp) + rest + run, where block_part is the block linears'
 *            share of masters (their elements' share of all elements) plus their packed
 *            bytes, and rest the remainder of masters + packed
 *     need = raw + raw / 8 + QS_GPU_MARGIN_MIB MiB, in MiB rounded up
 *   The margin (1/8, then 1 GiB) covers the CUDA context, cuBLASLt workspaces and plans, the
 *   128x4 padding of swizzled block scales and allocator slack; the fixed part is about what
 *   a CUDA 12 context and cuBLASLt's recommended 32 MiB workspaces take on an H100/H200.
 *
 * The model's size comes from what the grid already reads at submission (cli/probe.c): the
 * config and the tensor table of a checkpoint's headers (GGUF or safetensors, nothing of the
 * weights read), the engine's shape table for a synthetic model (worker/engine/synthetic.h:
 * BF16 masters, so stored_bytes = 0 and 2 bytes per element count). A train job's training
 * state belongs to worker/train: its GPU memory is resources.gpu_memory_mib as given (0 when
 * absent: any GPU). */
#ifndef QS_KINDS_RESOURCES_H
#define QS_KINDS_RESOURCES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Fixed part of the margin, MiB. */
#define QS_GPU_MARGIN_MIB 1024

/* A Llama model's shape (worker/checkpoint qw_config's fields that size its tensors). */
typedef struct qs_model_shape {
    int dim;        /* hidden_size D */
    int hidden_dim; /* intermediate_size F */
    int n_layers, n_heads, n_kv_heads, head_dim, vocab_size;
    bool tied_embeddings; /* lm_head is the embedding matrix (held once) */
} qs_model_shape;

/* What sizes a model's memory. */
typedef struct qs_model_size {
    qs_model_shape shape;
    int64_t stored_bytes;    /* every tensor in its stored dtype, lm_head once when tied;
                                0: not known (a synthetic model: its masters are BF16) */
    int64_t run_state_bytes; /* the engine's run state at the job's ctx, bytes */
} qs_model_size;

/* What a job needs (jobs.resources; scheduler.h qc_sched_job). */
typedef struct qs_job_need {
    int gpus;           /* GPUs (its tensor-parallel degree); 0: none needed */
    int64_t gpu_mem_mb; /* memory per GPU, MiB; 0: any (and none asked) */
    bool native_fp4;    /* GPUs with native FP4 GEMMs (compute capability >= 10.0) */
} qs_job_need;

/* Elements of one tensor of part p (0..6 the block linears q, k, v, o, gate, up, down of ONE
 * block, 7 lm_head, 8 embeddings), and its [rows x cols] shape in HF layout ([out][in]):
 * q [H*E x D], k and v [G*E x D], o [D x H*E], gate and up [F x D], down [D x F], lm_head and
 * embeddings [V x D]. -1 for another p. rows/cols may be NULL. */
int64_t qs_part_shape(const qs_model_shape *s, int p, int64_t *rows, int64_t *cols);

/* Elements of every tensor the engine holds: embeddings, lm_head unless tied, per block the
 * seven linears and two RMSNorm weights [D], the final norm [D]. */
int64_t qs_model_elements(const qs_model_shape *s);

/* Bytes of the packed form (kernels/quant.h qk_packed, as qk_packed_init sizes it) of a
 * [rows x cols] tensor in format: codes (4-bit elements two per byte, a row's odd count
 * rounded up; 6- and 8-bit one per byte) plus block scales per row of ceil(cols / block) (E4M3
 * or E8M0: 1 byte; INT formats: 4 bytes, INT8 one per row), the FP32 tensor scale not counted:
 *   nvfp4, nvfp4_2d  4 bits + 8 / 16  = 4.5 bits per weight
 *   mxfp4            4 bits + 8 / 32  = 4.25
 *   mxfp6_*, mxfp8_* 8 bits + 8 / 32  = 8.25 (6-bit codes are not bit-packed in qk_packed)
 *   fp8_e4m3         8 bits
 *   int8_channel     8 bits + 32 / cols
 *   int4_group       4 bits + 32 / group_size (default 128)
 *   bf16             0 (not quantized: the masters serve)
 * group_size: int4_group's option (0 = 128). -1 for a format not listed. */
int64_t qs_packed_bytes(const char *format, int group_size, int64_t rows, int64_t cols);

/* Bytes on each of tp GPUs of a sensitivity job (the formula above) given the bytes packed for
 * its quantized block linears and for its other quantized tensors (lm_head, embeddings). */
int64_t qs_sensitivity_gpu_bytes(const qs_model_size *m, int64_t packed_block_bytes,
                                 int64_t packed_other_bytes, int tp);

/* MiB the scheduler asks for raw bytes: raw + raw / 8 + QS_GPU_MARGIN_MIB, rounded up. */
int64_t qs_gpu_need_mib(int64_t raw_bytes);

/* Whether a model of shape s splits over tp tensor-parallel ranks the way the engine's shard
 * plan splits it (worker/engine/shard.c qw_shard_plan, the same rule; keep the two in step):
 * tp in 1..64, n_heads a multiple of tp (each rank holds whole query heads), n_kv_heads a
 * multiple or a divisor of tp (kv heads split or replicated whole), hidden_dim and vocab_size
 * >= tp. False with why (cap bytes) saying which value does not split; tp 1 always splits. */
bool qs_tp_splits(const qs_model_shape *s, int tp, char *why, size_t cap);

/* What job `kind` with spec object `spec` needs (the rule above). m: its model's size, NULL for
 * a kind without a model (then only the explicit resources count). A kind that is not a
 * sensitivity kind takes its spec's "resources" as they are. Errors: QS_EINVAL naming the
 * field (a spec its kind refuses; a sensitivity job asking for GPUs without m, or whose format
 * has no packed size here). */
qs_status qs_job_resources(const char *kind, const json_t *spec, const qs_model_size *m,
                           qs_job_need *out, qs_error *err);

#endif
