/* The GPUs a worker has: listed through the CUDA driver when the build has CUDA
 * (QSWEEP_HAVE_CUDA: libcuda.so.1 opened with dlopen, cuDeviceGetCount, cuDeviceGetName,
 * cuDeviceTotalMem, the compute capability attributes; no CUDA library is linked, and the CUDA
 * backend module is loaded only for a job on a GPU: cuda_module.h), chosen with
 * `qsweep worker --gpus`, and reported in HELLO (worker/loop/loop.h qw_gpu) so the scheduler
 * fits jobs on them (coordinator/server/scheduler.h).
 *
 * Which devices are visible is the CUDA driver's business: CUDA_VISIBLE_DEVICES=2,3 makes
 * physical GPUs 2 and 3 the worker's 0 and 1, and `--gpus` indexes count among the visible
 * ones. No driver, no device or a driver error is zero GPUs with the reason in words, never
 * an error: the worker then runs its jobs on the CPU backend and is given only jobs that ask
 * for no GPU. A build without CUDA says so ("no CUDA in this build").
 *
 * Native FP4: as listed, the capability table's guess (kernels/cuda/qk_gemm_path.h
 * qk_gemm_cc_native_fp4: compute capability 10.x); the worker then replaces it with what each
 * device proves (qw_gpu_probe_native_fp4: the GEMM probe of kernels/cuda/qk_gemm_probe.h, the
 * answer the CUDA backend's GEMMs follow), before it says hello: a GPU is advertised native
 * exactly where an NVFP4 W4A4 GEMM ran and matched its emulation. */
#ifndef QW_GPU_INFO_H
#define QW_GPU_INFO_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "loop.h"

/* At most this many GPUs per worker (what HELLO carries: worker/loop/loop.c). */
#define QW_GPUS_MAX 16

/* Whether this build can list GPUs (built with nvcc: it has the CUDA backend module). */
bool qw_gpu_have_cuda(void);

/* 1 when a CUDA driver of version driver_version (cuDriverGetVersion: 1000 * major + 10 * minor)
 * runs a runtime of runtime_version (same encoding): the same major or later (CUDA's minor
 * version compatibility). 0 otherwise, with why naming both versions ("CUDA driver too old:
 * it supports CUDA 12.4, this build's runtime is CUDA 13.0 ..."). Pure. qw_gpu_discover lists
 * no GPU behind a driver too old, with this why. */
int qw_gpu_driver_check(int driver_version, int runtime_version, char *why, size_t why_cap);

/* Lists the visible GPUs into out[0..cap) in device order: name, total memory in bytes,
 * compute capability, native_fp4 (qk_gemm_cc_native_fp4), device (the CUDA ordinal). *n gets how
 * many; 0 with the reason in why (why_cap bytes: "no CUDA in this build", "no GPU visible (CUDA:
 * no driver: ...)", the driver's error text such as "no CUDA-capable device is detected") when
 * there are none. Never fails. */
void qw_gpu_discover(qw_gpu *out, size_t cap, size_t *n, char *why, size_t why_cap);

/* Reads fake GPUs for tests, "NAME:GIB:MAJOR.MINOR[,...]" (e.g. "H200:141:9.0,B200:180:10.0":
 * memory GIB * 2^30 bytes, native_fp4 from the capability, device = position), into
 * out[0..cap). Only test binaries read it (qsweep-worker --fake-gpus); `qsweep worker` always
 * asks the runtime. "" is no GPU. Errors: QS_EINVAL quoting the bad item (a missing field, a
 * name over 63 bytes, memory not an integer in [1, 1048576], a capability not "M.m"), or more
 * than cap GPUs. */
qs_status qw_gpu_parse_fake(const char *text, qw_gpu *out, size_t cap, size_t *n, qs_error *err);

/* Chooses from all[0..n_all) what `--gpus spec` names into out (cap entries), in the order
 * given: NULL or "all": every one; "none": none (CPU only); "0,2": those indexes. Errors:
 * QS_EINVAL for a bad list (not comma-separated integers, an index repeated) and for an index
 * not present, the message naming it and the GPUs there are ("--gpus: GPU 3 is not present:
 * this machine has 2 (0 NVIDIA H200, 1 NVIDIA H200)"; why is added when there are none). */
qs_status qw_gpu_select(const qw_gpu *all, size_t n_all, const char *spec, const char *why,
                        qw_gpu *out, size_t cap, size_t *n, qs_error *err);

typedef struct qk_gemm_probe qk_gemm_probe; /* kernels/cuda/qk_gemm_probe.h */

/* Whether a device whose probe is p runs NVFP4 W4A4 natively under the auto request
 * (qk_gemm_probe_decide's answer). Pure. */
bool qw_gpu_native_fp4_of(const qk_gemm_probe *p);

/* Sets g[0..n)'s native_fp4 from each device's GEMM probe, run through the CUDA module if it is
 * loaded (cuda_module.h gemm_probe; the worker's backend choice loads it); without the module
 * (no CUDA, --backend cpu, auto fallen back to the CPU) or where a probe cannot run, false:
 * the jobs would not run natively there. Never loads the module. */
void qw_gpu_probe_native_fp4(qw_gpu *g, size_t n);

/* One GPU in words, for logs and `qsweep workers`: "NVIDIA H200 140.4 GiB cc 9.0 FP4 emulated"
 * (native: "FP4 native"). */
void qw_gpu_describe(const qw_gpu *g, char *buf, size_t cap);

#endif
