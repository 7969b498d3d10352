/* The test-side FP64 reference of the trainable Llama model (tests/train only): the product's
 * model (worker/train/tmodel.h, over the engine's ops table) in double, unquantized, with the
 * same tensor table and the same forward and backward formulas, for the finite-difference
 * check of the gradients. API as tmodel.h's qw_tmodel_* with double arrays. */
#ifndef QW_TRAIN_TMODEL64_H
#define QW_TRAIN_TMODEL64_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "tmodel.h"

/* One parameter tensor (tmodel.h's qw_tensor_view in double). */
typedef struct qw_tensor_view64 {
    char name[96];
    int rows, cols;
    size_t offset;
    int decay;
    double *data, *grad, *m, *v;
} qw_tensor_view64;

typedef struct qw_tmodel64 qw_tmodel64;

/* As qw_tmodel_create on the CPU with nt threads; errors: QS_EINVAL, QS_ENOMEM. */
qs_status qw_tmodel64_create(const qw_config *cfg, int B, int T, int nt, qw_tmodel64 **out,
                             qs_error *err);
void qw_tmodel64_destroy(qw_tmodel64 *m);
const qw_config *qw_tmodel64_config(const qw_tmodel64 *m);
int qw_tmodel64_n_tensors(const qw_tmodel64 *m);
void qw_tmodel64_tensor(qw_tmodel64 *m, int i, qw_tensor_view64 *out);
size_t qw_tmodel64_n_params(const qw_tmodel64 *m);
double *qw_tmodel64_params(qw_tmodel64 *m);
double *qw_tmodel64_grads(qw_tmodel64 *m);
double *qw_tmodel64_moment(qw_tmodel64 *m, int which);
/* tmodel.h's initialisation (the same values, rounded to float first). */
void qw_tmodel64_init_random(qw_tmodel64 *m, uint64_t seed, float std);
qs_status qw_tmodel64_load(qw_tmodel64 *m, qw_checkpoint *ck, qs_error *err);
void qw_tmodel64_zero_grad(qw_tmodel64 *m);
qs_status qw_tmodel64_forward(qw_tmodel64 *m, const uint32_t *tokens, const uint32_t *targets,
                              uint32_t step, double *loss, qs_error *err);
const double *qw_tmodel64_logits(const qw_tmodel64 *m);
qs_status qw_tmodel64_backward(qw_tmodel64 *m, double scale, qs_error *err);

#endif
