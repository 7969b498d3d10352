/* The worker's resident models: loaded once, kept across jobs, watched for changes, placed on
 * the job's backend (model_cache.h). */
#include "model_cache.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "eval.h"
#include "jobs.h"
#include "jobs_backend.h"
#include "synthetic.h"

/* A model kept in the worker's cache across jobs: the open checkpoint and the engine over it. */
typedef struct loaded_model {
    qw_checkpoint *ck;
    qw_model *model;
    bool on_cuda; /* moved onto the CUDA backend (model_cuda.h) */
    /* the model's tensor-parallel ranks on GPUs, kept across jobs (ranks.use_cuda; its
       ranks' backend callback reads it: jobs_backend.h qw_jobs_rank_backend) */
    qw_jobs_ranks_use ranks;
    /* The identity of the model's files when they were loaded (model_identity); watched:
       a file model (not synthetic). The weights are read from an mmap (MAP_PRIVATE), which
       does not protect against a write into the same file: the identity is checked again
       before each job that uses the cached model and after it (docs/failures.md). */
    uint64_t identity;
    bool watched;
    size_t prefix_bytes; /* its prefix cache's size (prefix_cache_bytes), 0 off */
} loaded_model;

/* FNV-1a over the bytes of v, into h. */
static uint64_t fnv_mix(uint64_t h, const void *v, size_t n) {
    const unsigned char *p = v;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* One file's identity: device, inode, size and modification time (ns). */
static uint64_t stat_identity(const struct stat *st) {
    uint64_t h = 1469598103934665603ull;
    uint64_t f[] = {(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                    (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec};
    return fnv_mix(h, f, sizeof f);
}

/* The identity of the model at path: of the file, or of a checkpoint folder's regular files
 * (their identities summed, so the order of the directory listing does not matter). A change
 * of any of them (replaced, rewritten in place, truncated, touched) changes it. False when
 * path cannot be read. */
static bool model_identity(const char *path, uint64_t *out) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    if (!S_ISDIR(st.st_mode)) {
        *out = stat_identity(&st);
        return true;
    }
    DIR *d = opendir(path);
    if (!d) return false;
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat fs;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &fs, 0) != 0 ||
            !S_ISREG(fs.st_mode))
            continue;
        sum += stat_identity(&fs) ^ fnv_mix(1469598103934665603ull, e->d_name, strlen(e->d_name));
    }
    closedir(d);
    *out = sum;
    return true;
}

/* Whether lm's files are still those it was loaded from. */
static bool model_unchanged(const loaded_model *lm, const char *path) {
    uint64_t now;
    return !lm->watched || (model_identity(path, &now) && now == lm->identity);
}

static void loaded_model_free(void *p) {
    loaded_model *lm = p;
    if (!lm) return;
    qs_error ignored = {0};
    if (lm->on_cuda) qw_jobs_use_cpu(lm->model, &ignored); /* destroy releases a CPU backend */
    qw_model_destroy(lm->model);
    qw_checkpoint_close(lm->ck);
    free(lm);
}

/* Bytes of the engine's prefix cache for one model (model.h, qw_model_set_prefix_cache): room
 * for the residual streams of every chunk of the job, its calibration chunks included, at most
 * $QSWEEP_PREFIX_CACHE_MB MiB (default 1024). Block-wise and cumulative sweeps then skip the
 * unquantized blocks in front of the quantized one, and so do the calibration passes of a
 * method (worker/method): jobs of one model, calibration and unquantized prefix share them.
 * 0 when not even one chunk fits. */
static size_t prefix_cache_bytes(const qw_config *cfg, const qs_sensitivity_spec *s, const qw_tokens *t) {
    size_t n_chunks = 0, n_scored = 0;
    qs_error ignored = {0};
    if (qw_eval_plan(t->n, s->dataset.ctx, (size_t)s->dataset.max_chunks, &n_chunks, &n_scored,
                     &ignored))
        return 0;
    const char *env = getenv("QSWEEP_PREFIX_CACHE_MB");
    size_t cap = (size_t)(env && *env ? strtoull(env, NULL, 10) : 1024) << 20;
    size_t entry = ((size_t)cfg->n_layers * (size_t)s->dataset.ctx * (size_t)cfg->dim +
                    (size_t)s->dataset.ctx) *
                   sizeof(float);
    size_t want = (n_chunks + (size_t)s->calib_chunks) * entry + entry / 2;
    return want <= cap ? want : (cap / entry) * entry;
}

/* Whether a and b put the same ranks on the same devices with the same GEMM setting. */
static bool same_ranks(const qw_jobs_ranks_use *a, const qw_jobs_ranks_use *b) {
    if (a->use_cuda != b->use_cuda || a->gemm != b->gemm || a->n != b->n) return false;
    for (int r = 0; r < a->n && r < QW_JOBS_MAX_DEVICES; r++)
        if (a->devices[r] != b->devices[r]) return false;
    return true;
}

/* The tensor-parallel ranks of a job of tp ranks (1: none) on lm's model: GPU ranks
 * (ru->use_cuda) are made now and kept while the model stays cached, so the evaluation finds
 * them (eval.h tensor_parallel) and the job's result can name their GEMM path afterwards;
 * CPU ranks are left to the evaluation, which makes and frees them per run. Errors: those of
 * qw_model_set_tp_backends and qw_model_set_tensor_parallel. */
static qs_status place_ranks(loaded_model *lm, int tp, const qw_jobs_ranks_use *ru, qs_error *err) {
    bool want_gpu = tp > 1 && ru->use_cuda;
    if (want_gpu && lm->ranks.use_cuda && same_ranks(&lm->ranks, ru) &&
        qw_model_tensor_parallel(lm->model) == tp)
        return QS_OK;
    qs_status st = qw_model_set_tensor_parallel(lm->model, 1, err); /* frees ranks made before */
    if (!st) st = want_gpu ? QS_OK : qw_model_set_tp_backends(lm->model, NULL, NULL, NULL, err);
    lm->ranks = (qw_jobs_ranks_use){.use_cuda = false};
    if (st || !want_gpu) return st;
    lm->ranks = *ru;
    st = qw_model_set_tp_backends(lm->model, qw_jobs_rank_backend, qw_backend_close, &lm->ranks,
                                  err);
    if (!st) st = qw_model_set_tensor_parallel(lm->model, tp, err);
    if (st) { /* back to CPU ranks for whatever comes next */
        qw_model_set_tp_backends(lm->model, NULL, NULL, NULL, NULL);
        lm->ranks = (qw_jobs_ranks_use){.use_cuda = false};
    }
    return st;
}

/* Puts lm's model on the backend u names (jobs_backend.h): onto CUDA after loading (weights
 * are uploaded on first use and kept while the model stays cached), back onto the CPU for a
 * job that needs it there (a tensor-parallel job: its ranks run the forward),
 * otherwise left where it is; then its tensor-parallel ranks for a job of tp ranks
 * (place_ranks, on ru). On CUDA (the model or its ranks) the count of GEMM paths run starts
 * again (report_backend records the job's own); a model on the CPU gets the job's thread
 * count. Errors: those of qw_model_use_cuda / qw_model_use_cpu / qw_model_set_threads /
 * place_ranks; on error the model stays on its backend. */
static qs_status place_model(loaded_model *lm, const qw_jobs_backend_use *u, int tp,
                             const qw_jobs_ranks_use *ru, int threads, qs_error *err) {
    if (lm->ranks.use_cuda && !same_ranks(&lm->ranks, ru)) { /* their GPUs freed first */
        qs_status st = place_ranks(lm, 1, ru, err);
        if (st) return st;
    }
    if (u->use_cuda != lm->on_cuda) {
        qs_status st = u->use_cuda ? qw_jobs_use_cuda(lm->model, u->device, u->gemm, err)
                                   : qw_jobs_use_cpu(lm->model, err);
        if (st) return st;
        lm->on_cuda = u->use_cuda;
    }
    qs_status st = lm->on_cuda ? QS_OK : qw_model_set_threads(lm->model, threads, err);
    if (!st) st = place_ranks(lm, tp, ru, err);
    if (!st && (lm->on_cuda || lm->ranks.use_cuda))
        qw_jobs_gemm_path_reset(lm->model); /* the path results record is this job's */
    return st;
}

void qw_jobs_spec_numerics_path(const qs_sensitivity_spec *s, char *buf, size_t cap) {
    qw_jobs_backend choice = qw_jobs_backend_get();
    int tp = s->resources.gpu_count > 1 ? s->resources.gpu_count : 1;
    bool on_cuda;
    if (tp > 1) {
        qw_jobs_ranks_use ranks;
        qs_error ignored = {0}; /* get_model reports the same error */
        on_cuda =
            !qw_jobs_backend_pick_ranks(&choice, qw_backend_cuda_built(), tp, &ranks, &ignored) &&
            ranks.use_cuda;
    } else {
        on_cuda = qw_jobs_backend_pick(&choice, qw_backend_cuda_built(), false).use_cuda;
    }
    qw_jobs_numerics_path(on_cuda, choice.cc, choice.gemm, qw_backend_cpu_path(), buf, cap);
}

qs_status qw_jobs_get_model(qw_job_ctx *ctx, const qs_sensitivity_spec *s, const char *want,
                            const qw_tokens *t, qw_model **out, qs_error *err) {
    char key[QS_AFFINITY_KEY_MAX];
    qs_affinity_key(s->model.digest, key, sizeof key);
    qw_jobs_backend choice = qw_jobs_backend_get();
    /* resources.gpu_count is the job's tensor-parallel degree (kinds/spec.h); its ranks run the
       forward, so the model itself stays on the CPU (jobs_backend.h) */
    int tp = s->resources.gpu_count > 1 ? s->resources.gpu_count : 1;
    qw_jobs_ranks_use ranks = {.use_cuda = false};
    if (tp > 1) {
        qs_status pst =
            qw_jobs_backend_pick_ranks(&choice, qw_backend_cuda_built(), tp, &ranks, err);
        if (pst) return pst;
    }
    qw_jobs_backend_use use = qw_jobs_backend_pick(&choice, qw_backend_cuda_built(), tp > 1);
    loaded_model *lm = qw_job_cache_get(ctx, key);
    /* A cached model whose files changed is loaded again, digest and all: the new weights
       then fail the digest check instead of running under the old file's digest. */
    if (lm && qw_model_max_ctx(lm->model) >= s->dataset.ctx && model_unchanged(lm, s->model.path)) {
        *out = lm->model;
        /* a job with calibration chunks on a model loaded by one without: room for them too
           (the stored residuals are dropped once, then shared by the method's jobs) */
        size_t want = prefix_cache_bytes(qw_model_config(lm->model), s, t);
        qs_status cst = QS_OK;
        if (s->calib_chunks && !lm->on_cuda && want > lm->prefix_bytes) {
            cst = qw_model_set_prefix_cache(lm->model, want, err);
            lm->prefix_bytes = cst ? 0 : want;
        }
        return cst ? cst : place_model(lm, &use, tp, &ranks, qw_job_threads(ctx), err);
    }
    qw_job_progress(ctx, 0, 1, "load");
    lm = calloc(1, sizeof *lm);
    if (!lm) return qs_error_set(err, QS_ENOMEM, "out of memory");
    char digest[65];
    qs_status st = QS_OK;
    /* A synthetic model (synthetic.h) is built from its name and seed; its digest is that of the
     * path, as the grid computed it (kinds/spec.h, qs_synthetic_model). */
    int synthetic = qs_is_synthetic(s->model.path);
    if (synthetic)
        qw_synthetic_digest(s->model.path, digest);
    else if (!(lm->watched = model_identity(s->model.path, &lm->identity))) /* before reading */
        st = qs_error_set(err, QS_EIO, "model %s: %s", s->model.path, strerror(errno));
    else
        st = qw_checkpoint_open(s->model.path, &lm->ck, err);
    if (!st && !synthetic) st = qw_checkpoint_digest(lm->ck, digest, err);
    if (!st && strcmp(digest, want) != 0) {
        /* What changed, told by where the wanted digest came from (model_digest_wanted). */
        char why[512];
        if (!s->model.trained_by[0])
            snprintf(why, sizeof why,
                     "the job's %s (the file changed since the grid was submitted)", want);
        else if (qw_job_model_digest(ctx)[0])
            snprintf(why, sizeof why,
                     "%s, which the store recorded when its training job %s ended (the model "
                     "was written again since, or copied over with its .digest record: "
                     "refused, so the sweep does not mix two models)",
                     want, s->model.trained_by);
        else
            snprintf(why, sizeof why,
                     "%s, recorded when its training job %s ended (the model was written again "
                     "since, by another run of that job or by hand)",
                     want, s->model.trained_by);
        st = qs_error_set(err, QS_EINVAL, "model %s: digest %s differs from %s", s->model.path,
                          digest, why);
    }
    if (!st && synthetic)
        st = qw_model_create_synthetic(s->model.path, s->dataset.ctx, qw_job_threads(ctx),
                                       &lm->model, err);
    else if (!st)
        st = qw_model_create(lm->ck, s->dataset.ctx, qw_job_threads(ctx), &lm->model, err);
    size_t cache = st ? 0 : prefix_cache_bytes(qw_model_config(lm->model), s, t);
    if (cache) st = qw_model_set_prefix_cache(lm->model, cache, err);
    if (!st) lm->prefix_bytes = cache;
    if (!st) st = place_model(lm, &use, tp, &ranks, qw_job_threads(ctx), err);
    if (!st) st = qw_job_cache_put(ctx, key, lm, loaded_model_free, err);
    if (st) {
        loaded_model_free(lm);
        return st;
    }
    *out = lm->model;
    return QS_OK;
}

qs_status qw_jobs_check_model_after(qw_job_ctx *ctx, const qs_sensitivity_spec *s, qs_error *err) {
    char key[QS_AFFINITY_KEY_MAX];
    qs_affinity_key(s->model.digest, key, sizeof key);
    loaded_model *lm = qw_job_cache_get(ctx, key);
    if (!lm || model_unchanged(lm, s->model.path)) return QS_OK;
    return qs_error_set(err, QS_EINVAL,
                        "model %s changed while the job ran (its device, inode, size or mtime "
                        "differ from when it was loaded under digest %s): the result is "
                        "discarded",
                        s->model.path, s->model.digest);
}

qw_checkpoint *qw_jobs_cached_checkpoint(qw_job_ctx *ctx, const qs_sensitivity_spec *s) {
    char key[QS_AFFINITY_KEY_MAX];
    qs_affinity_key(s->model.digest, key, sizeof key);
    loaded_model *lm = qw_job_cache_get(ctx, key);
    return lm ? lm->ck : NULL;
}
