/* Run-time choice of the engine's backend (backend.h). */
#include "backend.h"

#include <stdatomic.h>
#include <string.h>

#ifdef QW_HAVE_CUDA_BACKEND
#include "ops_cuda.h"
#endif

/* The registered CUDA backend (qw_backend_set_cuda); read by the module variant only. */
static const qw_backend_cuda_impl *_Atomic cuda_impl;

void qw_backend_set_cuda(const qw_backend_cuda_impl *impl) {
    atomic_store(&cuda_impl, impl);
}

/* The registered table when b is one of its backends, else NULL. */
static const qw_backend_cuda_impl *impl_of(const qw_backend *b) {
#ifdef QW_CUDA_BACKEND_IS_MODULE
    const qw_backend_cuda_impl *impl = atomic_load(&cuda_impl);
    return impl && b->ops && b->ops == impl->ops() ? impl : NULL;
#else
    (void)b;
    return NULL;
#endif
}

qs_status qw_backend_kind_parse(const char *s, qw_backend_kind *out, qs_error *err) {
    static const char *names[] = {"auto", "cpu", "cuda"};
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *out = (qw_backend_kind)i;
            return QS_OK;
        }
    return qs_error_set(err, QS_EINVAL, "backend \"%s\": expected auto, cpu or cuda",
                        s ? s : "(null)");
}

qs_status qw_backend_gemm_parse(const char *s, int *gemm, qs_error *err) {
    static const char *names[] = {"fp32", "bf16", "lt"};
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *gemm = i;
            return QS_OK;
        }
    return qs_error_set(err, QS_EINVAL, "gemm path \"%s\": expected fp32, bf16 or lt",
                        s ? s : "(null)");
}

int qw_backend_cuda_built(void) {
#if defined(QW_HAVE_CUDA_BACKEND) || defined(QW_CUDA_BACKEND_IS_MODULE)
    return 1;
#else
    return 0;
#endif
}

qs_status qw_backend_open(qw_backend *b, const qw_backend_choice *c, qs_error *err) {
    memset(b, 0, sizeof *b);
    qw_backend_kind k = c->kind;
#ifdef QW_HAVE_CUDA_BACKEND
    if (k == QW_BACKEND_AUTO) k = qw_cuda_available() > 0 ? QW_BACKEND_CUDA : QW_BACKEND_CPU;
    if (k == QW_BACKEND_CUDA) return qw_backend_cuda_init(b, c->device, (qw_cuda_gemm)c->gemm, err);
#elif defined(QW_CUDA_BACKEND_IS_MODULE)
    const qw_backend_cuda_impl *impl = atomic_load(&cuda_impl);
    if (k == QW_BACKEND_AUTO) k = impl && impl->available() > 0 ? QW_BACKEND_CUDA : QW_BACKEND_CPU;
    if (k == QW_BACKEND_CUDA && !impl)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "backend cuda: the CUDA backend module is not loaded (the worker "
                            "loads it when its backend choice puts models on a GPU)");
    if (k == QW_BACKEND_CUDA) return impl->init(b, c->device, c->gemm, err);
#else
    if (k == QW_BACKEND_AUTO) k = QW_BACKEND_CPU;
    if (k == QW_BACKEND_CUDA)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "backend cuda: this build has no CUDA backend (built without nvcc)");
#endif
    if (k != QW_BACKEND_CPU) return qs_error_set(err, QS_EINVAL, "backend: kind %d", (int)c->kind);
    return qw_backend_cpu_init(b, c->threads, c->max_in, err);
}

void qw_backend_close(qw_backend *b) {
    if (!b) return;
#ifdef QW_HAVE_CUDA_BACKEND
    if (b->ops == qw_ops_cuda()) {
        qw_backend_cuda_release(b);
        return;
    }
#endif
    const qw_backend_cuda_impl *impl = impl_of(b);
    if (impl) {
        impl->release(b);
        return;
    }
    qw_backend_release(b);
}

const char *qw_backend_gemm_path_name(const qw_backend *b) {
    if (!b || !b->ops) return "none";
#ifdef QW_HAVE_CUDA_BACKEND
    if (b->ops == qw_ops_cuda()) return qw_backend_gemm_path(b);
#endif
    const qw_backend_cuda_impl *impl = impl_of(b);
    return impl ? impl->gemm_path(b) : "cpu";
}
