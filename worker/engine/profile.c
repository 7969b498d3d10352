/* Per-phase wall time of an evaluation (profile.h). */
#include "profile.h"

#include <string.h>

#include "clock.h"

static const char *const names[QW_PHASES] = {
    "convert",    "act_quant", "gemm_q",    "gemm_k",       "gemm_v",    "gemm_o",
    "gemm_gate",  "gemm_up",   "gemm_down", "gemm_lm_head", "attention", "elementwise",
    "logsoftmax", "compare",   "sqnr_probe", "policy",    "baseline_io"};

const char *qw_phase_name(qw_phase p) {
    return p >= 0 && p < QW_PHASES ? names[p] : "?";
}

void qw_profile_reset(qw_profile *p) {
    memset(p, 0, sizeof *p);
}

double qw_profile_total(const qw_profile *p) {
    double t = 0.0;
    for (int i = 0; i < QW_PHASES; i++)
        t += p->s[i];
    return t;
}

void qw_profile_add_since(qw_profile *p, qw_phase ph, double t0) {
    if (p) p->s[ph] += qs_clock_s() - t0;
}
