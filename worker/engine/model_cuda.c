/* Moving a model between the CPU and CUDA backends (model_cuda.h). */
#include "model_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model_internal.h"
#include "runstate.h"

static int on_cuda(const qw_model *m) {
    return m->be.ops == qw_ops_cuda();
}

/* Entries computed by the other backend are not reused (model_cuda.h). */
static void drop_prefix_entries(qw_model *m) {
    for (int i = 0; i < m->n_prefix; i++)
        m->prefix[i].n = 0;
}

qs_status qw_model_use_cuda(qw_model *m, int device, qw_cuda_gemm gemm, qs_error *err) {
    qw_backend b;
    qs_status st = qw_backend_cuda_init(&b, device, gemm, err);
    if (st != QS_OK) return st;
    qw_runstate rs;
    st = qw_runstate_init(&rs, &b, &m->cfg, m->max_ctx, 1, err);
    if (st != QS_OK) {
        qw_backend_cuda_release(&b);
        return st;
    }
    qw_runstate_release(&m->rs, &m->be);
    qw_backend_close(&m->be);
    m->be = b;
    m->rs = rs;
    m->probe = 0;
    free(m->ref);
    m->ref = NULL;
    drop_prefix_entries(m);
    return QS_OK;
}

qs_status qw_model_use_cpu(qw_model *m, qs_error *err) {
    if (!on_cuda(m)) return QS_OK;
    int threads = m->threads;
    qw_runstate_release(&m->rs, &m->be);
    qw_backend_cuda_release(&m->be);
    drop_prefix_entries(m);
    /* set_threads rebuilds the CPU backend and run state when the count changes: the backend
     * and run state are zeroed now, so their release there is a no-op. */
    m->threads = 0;
    return qw_model_set_threads(m, threads, err);
}

const char *qw_model_gemm_path(const qw_model *m) {
    return qw_backend_gemm_path_name(&m->be);
}

void qw_model_cuda_cache_stats(const qw_model *m, qw_cuda_cache_stats *out) {
    qw_backend_cuda_cache_stats(&m->be, out);
}
