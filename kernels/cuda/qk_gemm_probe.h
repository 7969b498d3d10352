/* The GEMM path from what the device proves: at backend init, one small GEMM of each
 * low-precision kind qsweep may hand cuBLASLt is asked for (a heuristic) and run once, checked
 * against the exact BF16 emulation of the same operands; what it found decides, per device,
 * whether that kind runs natively. This header is the pure half, plain C built in every tree:
 * the probe's formats and outcomes, the capability below which a probe is not tried, the
 * decision, and the names results and logs carry ("gemm_probe.<format>.<outcome>").
 *
 * Formats probed (a GEMM D = alpha * A^T B, both operands K-major, as qk_gemm.h runs them):
 *   nvfp4       CUDA_R_4F_E2M1 with VEC16_UE4M3 block scales           tried from cc 10.0
 *   mxfp4       CUDA_R_4F_E2M1 with VEC32_UE8M0 block scales           tried from cc 10.0
 *   mxfp8       CUDA_R_8F_E4M3 with VEC32_UE8M0 block scales           tried from cc 10.0
 *   fp8_tensor  CUDA_R_8F_E4M3 with one FP32 scale per tensor           tried from cc 8.9
 * Below those capabilities the hardware has no such tensor-core instruction (no FP4 or
 * block-scaled MMA before Blackwell, no FP8 before Ada: cuBLAS documentation, cublasLtMatmul
 * data types), so the probe is not run and the answer is "untried". From them up nothing is
 * assumed: cc 10.x, 11.0 and 12.x are all tried, and only a probe that ran and matched makes a
 * kind native.
 *
 * The decision (qk_gemm_probe_decide), for a GEMM whose operands reach it in format f, on a
 * device of capability cc whose probe of f ended in outcome o, under request req:
 *   req fp32 / bf16 / emulated                -> as qk_gemm_decide (nothing native)
 *   req auto, both operands f (W4A4, W8A8):
 *     o = ok                                  -> native (native_fp4, or fp8 for fp8_tensor)
 *     o = untried, no_algorithm, failed,
 *         mismatch                            -> emulated_bf16, the outcome in `why`
 *   req auto, any other pairing               -> as qk_gemm_decide (emulated_bf16, bf16, fp32)
 * Only ok is native: a heuristic that offers an algorithm whose result differs from the
 * emulation (beyond summation order) is a wrong GEMM, not a fast one. */
#ifndef QK_GEMM_PROBE_H
#define QK_GEMM_PROBE_H

#include <stddef.h>

#include "qk_gemm_path.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The low-precision GEMM kinds probed. */
typedef enum qk_probe_format {
    QK_PROBE_NVFP4 = 0,
    QK_PROBE_MXFP4 = 1,
    QK_PROBE_MXFP8 = 2,
    QK_PROBE_FP8_TENSOR = 3,
    QK_PROBE_FORMATS = 4
} qk_probe_format;

/* How one probe ended. */
typedef enum qk_probe_outcome {
    QK_PROBE_UNTRIED = 0,      /* not run: below the format's capability, or no probe yet */
    QK_PROBE_NO_ALGORITHM = 1, /* cuBLASLt refused the layout or offered no algorithm */
    QK_PROBE_FAILED = 2,       /* an algorithm was offered, the matmul returned an error */
    QK_PROBE_MISMATCH = 3,     /* it ran, and its result differs from the emulation's */
    QK_PROBE_OK = 4,           /* it ran and matched: native */
    QK_PROBE_OUTCOMES = 5
} qk_probe_outcome;

/* What a device proved, cached per device by the GEMM handle (qk_gemm.h). */
typedef struct qk_gemm_probe {
    int cc;                                    /* 10 * major + minor */
    qk_probe_outcome outcome[QK_PROBE_FORMATS];
    char status[QK_PROBE_FORMATS][48];         /* cuBLAS status name, or "" */
} qk_gemm_probe;

/* "nvfp4", "mxfp4", "mxfp8", "fp8_tensor"; NULL for an unknown value. */
const char *qk_probe_format_name(qk_probe_format f);

/* "untried", "no_algorithm", "failed", "mismatch", "ok"; NULL for an unknown value. */
const char *qk_probe_outcome_name(qk_probe_outcome o);

/* The lowest compute capability a probe of f is run on (100 for the block-scaled kinds, 89 for
 * fp8_tensor). */
int qk_probe_min_cc(qk_probe_format f);

/* The probe format of a GEMM whose operands are both of type t, or -1 when t has none
 * (QK_GEMM_BF16). */
int qk_probe_format_of(qk_gemm_type t);

/* The decision above for y = x W^T: qk_gemm_decide's table with native allowed only where
 * probe (may be NULL: nothing proved, every outcome untried) says ok for the operands' format.
 * Pure. `why` is a static string. */
qk_gemm_decision qk_gemm_probe_decide(const qk_gemm_probe *probe, qk_gemm_type w_type,
                                      qk_gemm_type x_type, int w_bf16_exact, qk_gemm_request req);

/* The device half, in the CUDA build only (gemm_probe.cu, gemm.cu). qk_gemm_probe_run probes
 * CUDA device `device` through the GEMM handle g (qk_gemm.h) once per process and device (later
 * calls copy the cached answer): nvfp4 and mxfp4 as a W4A4 GEMM of 128 x 128 x 256 with
 * operands quantized on the device, native against the emulated path (equal within 1e-3 of
 * the largest output: the same exact products summed in another order); fp8_tensor with E4M3
 * operands of -2..2 against the exact integer sums; mxfp8 stays untried (qk_gemm has no MXFP8
 * operand). Errors: QS_EINVAL (NULL, device outside 0..63); a refused or failed probe is an
 * outcome, not an error. qk_gemm_set_probe makes g's FP4 W4A4 path qk_gemm_probe_decide's
 * answer for probe (kept by the caller; NULL: qk_gemm_decide's table). */
typedef struct qk_gemm qk_gemm;
qs_status qk_gemm_probe_run(qk_gemm *g, int device, qk_gemm_probe *out, qs_error *err);
void qk_gemm_set_probe(qk_gemm *g, const qk_gemm_probe *probe);

/* The result/log lines of a probe: "gemm_probe.<format>.<outcome>" for format f into buf. */
void qk_gemm_probe_metric(const qk_gemm_probe *probe, qk_probe_format f, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
