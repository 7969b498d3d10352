/* The trainable Llama model in FP32 with recipe-driven linears (tmodel.h). */
#include "tmodel.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "philox.h"

#define R float
#define TM qw_tmodel
#define ACTS qw_tmodel_block_acts
#define VIEW qw_tensor_view
#define NAME QW_TMODEL_NAME_F32
#define OPS QW_TRAIN_NAME_F32
#define QW_TM_QUANT 1
#include "tmodel_impl.h"

qs_status qw_tmodel_set_recipe(qw_tmodel *m, const qw_recipe *r, uint64_t seed, qs_error *err) {
    qs_status st = qw_recipe_check(r, m->cfg.n_layers, err);
    if (st != QS_OK) return st;
    m->recipe = *r;
    m->env.recipe = &m->recipe;
    m->env.seed = seed;
    return QS_OK;
}

void qw_tmodel_set_gemm_hook(qw_tmodel *m, qw_gemm_hook hook, void *user) {
    m->env.hook = hook;
    m->env.hook_user = user;
}

size_t qw_tmodel_bytes(const qw_tmodel *m) {
    return m->bytes;
}

int qw_tmodel_batch(const qw_tmodel *m) {
    return m->B;
}
int qw_tmodel_ctx(const qw_tmodel *m) {
    return m->T;
}
size_t qw_tmodel_rows(const qw_tmodel *m) {
    return (size_t)m->N;
}

void qw_tmodel_plan(const qw_config *cfg, int B, int T, int nt, size_t *n_params, size_t *bytes) {
    qw_tmodel m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.B = B;
    m.T = T;
    m.N = B * T;
    m.nt = nt > 0 ? nt : omp_get_num_procs();
    qw_tmodel_tensor_table_(&m, 0);
    *n_params = m.n_params;
    *bytes = qw_tmodel_layout_(&m, NULL);
}
