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
 * sensitivity kinds (baseline, eval), the device memory estimate (common/device_memory.h
 * qs_mem_estimate_of, the one the engine's tests check) of its model at the job's dataset.ctx,
 * one sequence at a time, over gpu_count tensor-parallel ranks, with:
 *
 *   master bytes = 2 per element for 16-bit (BF16, F16) masters, 4 for FP32-valued ones (an
 *                  F32 checkpoint, a GGUF block type: worker/engine/master_gemm.h)
 *   packed       = sum over the linears the job quantizes of qs_packed_bytes(format, rows,
 *                  cols): the block linears split across the ranks, a quantized lm_head or
 *                  embeddings whole on each
 *   need         = the estimate's total per rank, in MiB rounded up (its 1 GiB reserve covers
 *                  the CUDA context and the cuBLAS/cuBLASLt workspaces)
 *
 * The model's size comes from what the grid already reads at submission (cli/probe.c): the
 * config and the tensor table of a checkpoint's headers (GGUF or safetensors, nothing of the
 * weights read), the engine's shape table for a synthetic model (worker/engine/synthetic.h:
 * BF16 masters, 2 bytes per element). A train job's training
 * state belongs to worker/train: its GPU memory is resources.gpu_memory_mib as given (0 when
 * absent: any GPU). */
#ifndef QS_KINDS_RESOURCES_H
#define QS_KINDS_RESOURCES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device_memory.h"
#include "error.h"

/* What sizes a model's memory. */
typedef struct qs_model_size {
    qs_model_shape shape;
    int master_bytes; /* device bytes per master element (2: BF16/F16, 4: FP32-valued;
                         0: not known, counted as 2) */
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

/* MiB the scheduler asks for an estimate: its total per rank, rounded up. */
int64_t qs_gpu_need_mib(const qs_mem_estimate *e);

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
 * has no packed size here, or whose shape the estimate refuses). */
qs_status qs_job_resources(const char *kind, const json_t *spec, const qs_model_size *m,
                           qs_job_need *out, qs_error *err);

#endif
