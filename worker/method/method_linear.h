/* One linear held by a method (method_apply.h): its calibration statistics while its block is
 * observed, then the weight the method made and the online input transform (forward.h
 * in_hook). Private to worker/method. */
#ifndef QW_METHOD_LINEAR_H
#define QW_METHOD_LINEAR_H

#include <stddef.h>

#include "forward.h"
#include "method_apply.h"

typedef struct qw_method_linear {
    qw_linear *L;
    int in, out;
    int tile;      /* rotation tile along K, 0 none */
    float *s;      /* SmoothQuant scales [in], NULL none */
    float *w;      /* the method's weight [out x in] once made, else NULL */
    int observing; /* the hook records statistics and passes x through */
    int last;      /* the last observed linear of its block: the pass stops after it */
    int stopped;   /* the hook stopped the pass here (method.c reads and clears it) */
    double *h;     /* GPTQ: 2 X^T X [in x in] while observing (X rotated when tile) */
    float *amax;   /* SmoothQuant: max |X_j| [in] while observing */
    double stat_s; /* seconds spent on statistics */
    int threads;   /* the model's, for the statistics */
    float *buf;    /* host: the transformed input, or a device's fetched one [cap floats] */
    size_t cap;
    /* on a device backend (be->impl): memory made through dev, freed through it while it is
     * still the backend whose impl is dev_impl */
    struct qw_backend *dev;
    const void *dev_impl;
    float *dev_y; /* the transformed input [dev_cap floats] */
    size_t dev_cap;
    float *dev_s;       /* s uploaded once, NULL none */
    const char *method; /* its name, for messages */
    int keep_packed;    /* GPTQ: keep the packed form (plan->packed) */
    qk_packed packed;   /* GPTQ's codes and scales once made (keep_packed), else empty */
    /* what the policy left, restored on error */
    qw_weight w0;
    qw_quant_spec spec0;
} qw_method_linear;

/* The hook of forward.h on an qw_method_linear, on any backend: the transform through the
 * table's method_input (on a device into memory made through the backend, s uploaded once);
 * the statistics on the host (a device's x fetched first). Errors: the entry's, naming the
 * method and the linear; QS_EUNSUPPORTED (a backend without the entry); QS_ENOMEM. */
qs_status qw_method_linear_hook(void *ctx, const struct qw_backend *be, const float *x, int T,
                                const float **out, qs_error *err);

/* Starts observing: the linear reads its master with no activation format (its block is
 * unquantized while observed), the hook collects the statistics plan needs. */
qs_status qw_method_linear_observe(qw_method_linear *ml, const qw_method_plan *plan, qs_error *err);

/* Makes the weight (rotation, smoothing, GPTQ or RTN in the policy's weight format) and
 * installs it with the hook; frees the statistics. */
qs_status qw_method_linear_make(qw_method_linear *ml, const qw_method_plan *plan, int threads,
                                qs_error *err);

/* Puts back what the policy left. */
void qw_method_linear_restore(qw_method_linear *ml);

void qw_method_linear_free(qw_method_linear *ml);

#endif
