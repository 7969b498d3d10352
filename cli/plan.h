/* The mixed-precision planner of `qsweep plan`: one format per item (a
 * linear, or a group of linears that must share a format) minimizing the summed measured cost
 * under an average-bits budget, solved exactly as a multiple-choice knapsack by dynamic
 * programming over the total bits (as ModelOpt's AutoQuantize and HAWQ-V3 pose it, with
 * their LP/ILP replaced by an exact DP; HAWQ-V3 is arXiv 2011.10680).
 *
 * Bits per weight count block-scale overhead: NVFP4 4 + 8/16 = 4.5 (E4M3 scale per 16
 * elements), MXFP4 4 + 8/32 = 4.25 (E8M0 per 32), MXFP8 8.25, FP8 E4M3 8, BF16 16
 * (docs/numerics.md). Each is a whole number of quarter bits, so with g = the gcd of
 * the items' weight counts every item's bits are an integer multiple of g/4 bits and the DP
 * is exact. Per-tensor FP32 scales (NVFP4, FP8: 32 bits per tensor, under 0.001 bit per
 * weight for any Llama linear) are not part of the budget; qsweep_plan_tensor_scale_bits
 * gives them for the report. */
#ifndef QSWEEP_PLAN_H
#define QSWEEP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Choices per item: formats, or (method, format) pairs (`qsweep plan` over several methods). */
enum { QSWEEP_PLAN_MAX_FORMATS = 16 };

/* One choice unit: cost[f] is the measured damage when the item alone is in choice f (NAN
 * when f was not measured for it, so it cannot be chosen); weights its number of weights. */
typedef struct qsweep_plan_item {
    char name[48]; /* "3.q", "3.qkv", "down", ... */
    uint64_t weights;
    double cost[QSWEEP_PLAN_MAX_FORMATS];
} qsweep_plan_item;

/* Bits per weight of a format in quarter bits (nvfp4 18, mxfp4 17, mxfp8_e4m3 33, fp8_e4m3
 * 32, bf16 64), or 0 for a format the planner has no bit count for. */
unsigned qsweep_plan_quarter_bits(const char *format);

/* Bits of the per-tensor FP32 scale of a format (32 for nvfp4 and fp8_e4m3, else 0). */
unsigned qsweep_plan_tensor_scale_bits(const char *format);

/* Solves the plan: choice[i] receives the format index of item i (0..n_formats-1) such that
 * sum_i weights_i * qbits[choice_i] / 4 <= budget_bits * sum_i weights_i and
 * sum_i cost[choice_i] is minimal (ties: the most total bits, toward the higher-precision
 * formats). *total_cost and *avg_bits (may be
 * NULL) get the plan's summed cost and average bits per weight. Errors: QS_EINVAL (no items, no
 * formats, a zero weight count, a zero qbits, a budget no assignment meets: the message gives the
 * smallest reachable average), QS_EUNSUPPORTED (the DP table would exceed 2^28 cells), QS_ENOMEM.
 */
qs_status qsweep_plan_solve(const qsweep_plan_item *items, size_t n, const unsigned *qbits,
                            size_t n_formats, double budget_bits, int *choice, double *total_cost,
                            double *avg_bits, qs_error *err);

#endif
