/* Wall seconds per phase of one model's forwards, evaluations and policies (model.h
 * qw_model_profile; bench_engine --profile, the eval job's time_<phase>_s metrics), timed in the
 * calling thread around each op (CLOCK_MONOTONIC), phases not overlapping. A linear's wall time
 * is split between "convert" and its GEMM phase in the ratio of the team's summed seconds. */
#ifndef QW_PROFILE_H
#define QW_PROFILE_H

#include "policy.h"

typedef enum qw_phase {
    QW_PHASE_CONVERT = 0, /* weight pieces converted to FP32 (and packed) for the GEMM */
    QW_PHASE_ACT_QUANT,   /* activations fake-quantized before a linear (W4A4) */
    QW_PHASE_GEMM_Q,      /* the GEMMs of each linear kind, QW_PHASE_GEMM_Q + qw_linear_kind */
    QW_PHASE_GEMM_K,
    QW_PHASE_GEMM_V,
    QW_PHASE_GEMM_O,
    QW_PHASE_GEMM_GATE,
    QW_PHASE_GEMM_UP,
    QW_PHASE_GEMM_DOWN,
    QW_PHASE_GEMM_LM_HEAD, /* lm_head over the scored rows */
    QW_PHASE_ATTENTION,    /* causal attention (scores, softmax, P V) */
    QW_PHASE_ELEMENTWISE,  /* embedding lookup, RMSNorms, RoPE, SwiGLU, residual adds */
    QW_PHASE_LOGSOFTMAX,   /* a baseline job's NLL and log-probs of the scored rows */
    QW_PHASE_COMPARE,      /* an eval job's NLL, KL and top-1 (one pass a row), SQNR summary */
    QW_PHASE_SQNR_PROBE,   /* the SQNR probe's reference GEMMs and sums, on the sampled rows */
    QW_PHASE_POLICY,       /* applying a quantization policy to the weights */
    QW_PHASE_BASELINE_IO,  /* reading or writing the baseline file (and its rows' device copies) */
    QW_PHASES
} qw_phase;

_Static_assert(QW_PHASE_GEMM_DOWN - QW_PHASE_GEMM_Q == QW_LINEAR_DOWN - QW_LINEAR_Q,
               "one GEMM phase per linear kind, in qw_linear_kind order");

/* Seconds per phase. */
typedef struct qw_profile {
    double s[QW_PHASES];
} qw_profile;

/* The phase's name in metrics and tables ("convert", "gemm_q", ..., "baseline_io"). */
const char *qw_phase_name(qw_phase p);

/* All phases to 0. */
void qw_profile_reset(qw_profile *p);

/* Sum of the phases' seconds. */
double qw_profile_total(const qw_profile *p);

/* p->s[ph] += qs_clock_s() - t0 (t0 from qs_clock_s); p NULL: no-op. */
void qw_profile_add_since(qw_profile *p, qw_phase ph, double t0);

#endif
