/* The probe's pure half (qk_gemm_probe.h): names, capabilities, the decision. */
#include "qk_gemm_probe.h"

#include <stdio.h>

static const char *const format_names[QK_PROBE_FORMATS] = {"nvfp4", "mxfp4", "mxfp8",
                                                           "fp8_tensor"};
static const char *const outcome_names[QK_PROBE_OUTCOMES] = {"untried", "no_algorithm", "failed",
                                                             "mismatch", "ok"};

const char *qk_probe_format_name(qk_probe_format f) {
    return (unsigned)f < QK_PROBE_FORMATS ? format_names[f] : NULL;
}

const char *qk_probe_outcome_name(qk_probe_outcome o) {
    return (unsigned)o < QK_PROBE_OUTCOMES ? outcome_names[o] : NULL;
}

int qk_probe_min_cc(qk_probe_format f) {
    return f == QK_PROBE_FP8_TENSOR ? 89 : 100;
}

int qk_probe_format_of(qk_gemm_type t) {
    switch (t) {
    case QK_GEMM_NVFP4:
        return QK_PROBE_NVFP4;
    case QK_GEMM_MXFP4:
        return QK_PROBE_MXFP4;
    case QK_GEMM_FP8_E4M3:
        return QK_PROBE_FP8_TENSOR;
    default:
        return -1;
    }
}

/* Why a kind the table would run natively stays emulated, by outcome. */
static const char *emulated_because(qk_probe_outcome o) {
    switch (o) {
    case QK_PROBE_NO_ALGORITHM:
        return "gemm probe: cuBLASLt offered no algorithm for this kind on this device";
    case QK_PROBE_FAILED:
        return "gemm probe: cuBLASLt's matmul of this kind failed on this device";
    case QK_PROBE_MISMATCH:
        return "gemm probe: cuBLASLt's result of this kind differed from the emulation";
    default:
        return "gemm probe: not run for this kind on this device";
    }
}

qk_gemm_decision qk_gemm_probe_decide(const qk_gemm_probe *probe, qk_gemm_type w_type,
                                      qk_gemm_type x_type, int w_bf16_exact, qk_gemm_request req) {
    /* the table, on a capability that lets it run every kind natively: what it then picks as
       native is what the probe must have proved */
    qk_gemm_decision d = qk_gemm_decide(100, w_type, x_type, w_bf16_exact, req);
    if (d.path != QK_GEMM_PATH_NATIVE_FP4 && d.path != QK_GEMM_PATH_FP8) return d;
    int f = qk_probe_format_of(w_type);
    qk_probe_outcome o = probe && f >= 0 && probe->cc >= qk_probe_min_cc((qk_probe_format)f)
                             ? probe->outcome[f]
                             : QK_PROBE_UNTRIED;
    if (o == QK_PROBE_OK)
        return (qk_gemm_decision){d.path, d.path == QK_GEMM_PATH_FP8
                                              ? "gemm probe: FP8 per-tensor GEMM ran and matched"
                                              : "gemm probe: block-scaled FP4 GEMM ran and matched"};
    return (qk_gemm_decision){QK_GEMM_PATH_EMULATED_BF16, emulated_because(o)};
}

void qk_gemm_probe_metric(const qk_gemm_probe *probe, qk_probe_format f, char *buf, size_t cap) {
    qk_probe_outcome o = probe && (unsigned)f < QK_PROBE_FORMATS ? probe->outcome[f]
                                                                 : QK_PROBE_UNTRIED;
    const char *fn = qk_probe_format_name(f);
    snprintf(buf, cap, "gemm_probe.%s.%s", fn ? fn : "unknown", qk_probe_outcome_name(o));
}
