/* Multiple-choice knapsack by dynamic programming over total bits (plan.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* Quarter bits per weight (plan.h). docs/numerics.md: NVFP4 = E2M1 + E4M3 scale per 16 elements,
 * MXFP4 = E2M1 + E8M0 per 32, MXFP8 = E4M3 + E8M0 per 32. */
static const struct {
    const char *name;
    unsigned quarter_bits, tensor_scale_bits;
} FORMAT_BITS[] = {
    {"nvfp4", 18, 32},     {"nvfp4_2d", 18, 32},  {"mxfp4", 17, 0},     {"mxfp6_e2m3", 25, 0},
    {"mxfp6_e3m2", 25, 0}, {"mxfp8_e4m3", 33, 0}, {"fp8_e4m3", 32, 32}, {"bf16", 64, 0},
};

unsigned qsweep_plan_quarter_bits(const char *format) {
    for (size_t i = 0; i < sizeof FORMAT_BITS / sizeof FORMAT_BITS[0]; i++)
        if (!strcmp(FORMAT_BITS[i].name, format)) return FORMAT_BITS[i].quarter_bits;
    return 0;
}

unsigned qsweep_plan_tensor_scale_bits(const char *format) {
    for (size_t i = 0; i < sizeof FORMAT_BITS / sizeof FORMAT_BITS[0]; i++)
        if (!strcmp(FORMAT_BITS[i].name, format)) return FORMAT_BITS[i].tensor_scale_bits;
    return 0;
}

static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

qs_status qsweep_plan_solve(const qsweep_plan_item *items, size_t n, const unsigned *qbits,
                            size_t n_formats, double budget_bits, int *choice, double *total_cost,
                            double *avg_bits, qs_error *err) {
    if (n == 0) return qs_error_set(err, QS_EINVAL, "plan: no items to assign");
    if (n_formats == 0 || n_formats > QSWEEP_PLAN_MAX_FORMATS)
        return qs_error_set(err, QS_EINVAL, "plan: %zu formats (1..%d)", n_formats,
                            QSWEEP_PLAN_MAX_FORMATS);
    if (!(budget_bits > 0) || !isfinite(budget_bits))
        return qs_error_set(err, QS_EINVAL, "plan: budget %g bits per weight", budget_bits);
    uint64_t g = 0, units = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].weights == 0)
            return qs_error_set(err, QS_EINVAL, "plan: item %s has no weights", items[i].name);
        g = gcd(g, items[i].weights);
    }
    for (size_t f = 0; f < n_formats; f++)
        if (qbits[f] == 0)
            return qs_error_set(err, QS_EINVAL, "plan: format %zu has no bit count", f);
    for (size_t i = 0; i < n; i++)
        units += items[i].weights / g;
    /* capacity in units of g/4 bits: budget * N bits, N = units * g; the epsilon keeps a
       budget such as 4.5 from losing its last unit to the binary representation */
    double cap_d = floor(4.0 * budget_bits * (double)units + 1e-9);
    unsigned qmax = 0;
    for (size_t f = 0; f < n_formats; f++)
        qmax = qbits[f] > qmax ? qbits[f] : qmax;
    /* no need to look past the most an assignment can weigh */
    if (cap_d > (double)units * qmax) cap_d = (double)units * qmax;
    size_t W = (size_t)cap_d;
    if ((double)n * (double)(W + 1) > (double)(1u << 28))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "plan: %zu items x %zu bit units is too large for the exact DP", n,
                            W + 1);
    double *f = malloc((W + 1) * sizeof *f), *next = malloc((W + 1) * sizeof *next);
    signed char *pick = malloc(n * (W + 1));
    if (!f || !next || !pick) {
        free(f);
        free(next);
        free(pick);
        return qs_error_set(err, QS_ENOMEM, "plan: DP table of %zu x %zu", n, W + 1);
    }
    /* f[w]: least summed cost of the items so far with exactly w units; INFINITY if none */
    for (size_t w = 0; w <= W; w++)
        f[w] = w ? INFINITY : 0.0;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = items[i].weights / g;
        signed char *row = pick + i * (W + 1);
        for (size_t w = 0; w <= W; w++) {
            double best = INFINITY;
            int bf = -1;
            for (size_t k = 0; k < n_formats; k++) {
                double c = items[i].cost[k];
                uint64_t wt = u * qbits[k];
                if (isnan(c) || wt > w || f[w - wt] == INFINITY) continue;
                double v = f[w - wt] + c;
                if (v < best) {
                    best = v;
                    bf = (int)k;
                }
            }
            next[w] = best;
            row[w] = (signed char)bf;
        }
        double *t = f;
        f = next;
        next = t;
    }
    size_t wbest = 0;
    double best = INFINITY;
    /* ties go to the most bits: the higher-precision formats (a cost clamped to 0 does not
       trade bf16 for FP4) */
    for (size_t w = 0; w <= W; w++)
        if (f[w] <= best && f[w] != INFINITY) {
            best = f[w];
            wbest = w;
        }
    qs_status st = QS_OK;
    if (best == INFINITY) {
        /* the smallest average any assignment reaches (cheapest-bits available format) */
        double min_bits = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned q = 0;
            for (size_t k = 0; k < n_formats; k++)
                if (!isnan(items[i].cost[k]) && (q == 0 || qbits[k] < q)) q = qbits[k];
            if (q == 0) {
                st = qs_error_set(err, QS_EINVAL, "plan: item %s has no measured format",
                                  items[i].name);
                break;
            }
            min_bits += (double)items[i].weights * q / 4.0;
        }
        if (!st)
            st = qs_error_set(err, QS_EINVAL,
                              "plan: no assignment meets %g bits per weight (the fewest bits "
                              "reachable are %.4f per weight)",
                              budget_bits, min_bits / ((double)units * (double)g));
    } else {
        size_t w = wbest;
        double bits = 0;
        for (size_t i = n; i-- > 0;) {
            int k = pick[i * (W + 1) + w];
            choice[i] = k;
            uint64_t wt = (items[i].weights / g) * qbits[k];
            w -= wt;
            bits += (double)items[i].weights * qbits[k] / 4.0;
        }
        if (total_cost) *total_cost = best;
        if (avg_bits) *avg_bits = bits / ((double)units * (double)g);
    }
    free(f);
    free(next);
    free(pick);
    return st;
}
