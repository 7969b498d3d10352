/* Moving a model (model.h) between the CPU and the CUDA backend (ops_cuda.h), so that an
 * evaluation (eval.h) runs on a GPU with the forward pass as it is: the model's run state is
 * carved again from the new backend's memory (CUDA managed memory) and the weights are
 * uploaded on first use, then kept while the model stays on CUDA (the worker's model cache
 * keeps them across jobs).
 *
 * What switching does besides: the prefix cache's entries are dropped (the two backends'
 * residuals differ in the last bits; the cache's logits must stay bit-identical to a fresh
 * forward); the SQNR probe is switched off and its host buffer freed (on CUDA the probe is
 * refused: its reference buffer is host memory the GPU cannot write; backend choice in the
 * model proper, docs/notes/gpueng-to-fwd.md, lifts this).
 * Call qw_model_use_cpu before qw_model_destroy or qw_model_set_threads: both release the
 * backend as a CPU one. */
#ifndef QW_MODEL_CUDA_H
#define QW_MODEL_CUDA_H

#include "error.h"
#include "model.h"
#include "ops_cuda.h"

/* Moves m onto CUDA device `device` with GEMM path `gemm`. On error m stays on its backend.
 * Errors: those of qw_backend_cuda_init and qw_runstate_init. */
qs_status qw_model_use_cuda(qw_model *m, int device, qw_cuda_gemm gemm, qs_error *err);

/* Moves m back onto the CPU backend with its thread count (a no-op on the CPU). Errors: those
 * of qw_model_set_threads. */
qs_status qw_model_use_cpu(qw_model *m, qs_error *err);

/* The device weight cache of m's CUDA backend (zeros on the CPU). */
void qw_model_cuda_cache_stats(const qw_model *m, qw_cuda_cache_stats *out);

/* "cpu", "fp32" or "bf16": the GEMM path of m's backend, as results record it. */
const char *qw_model_gemm_path(const qw_model *m);

#endif
