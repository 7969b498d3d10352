/* Moving a model (model.h) between the CPU and the CUDA backend (ops_cuda.h), so that an
 * evaluation (eval.h) runs on a GPU with the forward pass as it is: the model's run state is
 * carved again from the new backend's memory (plain device memory on CUDA) and the weights are
 * uploaded on first use, then kept while the model stays on CUDA (the worker's model cache
 * keeps them across jobs).
 *
 * What switching does besides: the prefix cache's entries are dropped (the two backends'
 * residuals differ in the last bits; the cache's logits must stay bit-identical to a fresh
 * forward); the SQNR probe's reference buffer is freed with the old backend and, when the probe
 * is on, allocated again from the new one (model_internal.h qw_model_probe_release / _remake),
 * so the probe's reference GEMMs and sums (the table's sqnr_sums) run on the device too.
 * Call qw_model_use_cpu before qw_model_destroy or qw_model_set_threads: both release the
 * backend as a CPU one.
 *
 * Open (for the engine's model and ops table, worker/engine model.c / ops.h / shard.c; each
 * removes a workaround of this file, none blocks it):
 *   1. A backend choice in the model: qw_model_create* always opens the CPU backend, and this
 *      file swaps backend and run state of a built, unsharded model through model_internal.h
 *      (m->rank.be, .rs, .probe, .ref, m->prefix, m->threads: change them here too if they
 *      move). Better: these functions in model.c.
 *   2. Tensor-parallel ranks take their backends from the model's callback
 *      (model.h qw_model_set_tp_backends; the worker's opens CUDA rank r on its r-th GPU); a
 *      multi-node group would need an NCCL communicator made with ncclCommInitRank
 *      (worker/comm/comm_nccl.h makes one node's).
 *   3. A `release` entry in the ops table that qw_backend_release calls (the CUDA table's
 *      aggregate initializer needs the member at the same time), so model destroy is right on
 *      either backend without qw_model_use_cpu first.
 * The host reaches a CUDA model's buffers only through the table (ops.h upload, fetch,
 * download, score_rows): the RoPE tables (runstate.c), the prefix cache's residuals (model.c),
 * the evaluation's logits and baseline rows (eval.c), a tensor-parallel group's amax
 * (shard.c). */
#ifndef QW_MODEL_CUDA_H
#define QW_MODEL_CUDA_H

#include "error.h"
#include "model.h"
#include "ops_cuda.h"

/* Moves m onto CUDA device `device` with GEMM path `gemm`. On error m stays on its backend,
 * except when only the SQNR probe's buffer cannot be made on the device (QS_ENOMEM): m is then
 * on CUDA with the probe off. Errors: those of qw_backend_cuda_init and qw_runstate_init. */
qs_status qw_model_use_cuda(qw_model *m, int device, qw_cuda_gemm gemm, qs_error *err);

/* Moves m back onto the CPU backend with its thread count (a no-op on the CPU), the SQNR
 * probe's buffer made again on the CPU when the probe is on. Errors: those of
 * qw_model_set_threads, QS_ENOMEM for the probe's buffer (m on the CPU, the probe off). */
qs_status qw_model_use_cpu(qw_model *m, qs_error *err);

/* The device weight cache of m's CUDA backend (zeros on the CPU). */
void qw_model_cuda_cache_stats(const qw_model *m, qw_cuda_cache_stats *out);

/* "cpu", "fp32" or "bf16": the GEMM path of m's backend, as results record it; with the auto
 * ("lt") or emulated GEMM the most specific path run since qw_model_gemm_path_reset
 * ("native_fp4", "emulated_bf16", "fp8", "fp32", "bf16"). A sharded model (model.h
 * qw_model_set_tensor_parallel) answers for its ranks' backends, not its own: the most
 * specific path over the ranks (ops_cuda.h qw_gemm_path_rank), "cpu" for CPU ranks. The
 * fallback and the reset below also go over the ranks. */
const char *qw_model_gemm_path(const qw_model *m);

/* Why a native FP4 GEMM of m ran emulated since qw_model_gemm_path_reset
 * (qw_backend_cuda_gemm_fallback): 1 with the CUBLAS_STATUS_* name and the message, else 0. */
int qw_model_gemm_fallback(const qw_model *m, char *status, size_t status_cap, char *why,
                           size_t why_cap);

/* What the device of m's first CUDA rank proved at its backend's start (qk_gemm_probe.h, the
 * auto and emulated requests only: qw_backend_cuda_gemm_probe) into *out: 1, else 0 (a CPU
 * model, a fixed fp32 / bf16 request). */
int qw_model_gemm_probe(const qw_model *m, struct qk_gemm_probe *out);

/* Starts a new count of the paths m's linears run (qw_backend_cuda_gemm_path_reset); call it
 * before a job's evaluation so the path recorded is the job's own. A no-op on the CPU. */
void qw_model_gemm_path_reset(qw_model *m);

#endif
