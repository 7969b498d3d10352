/* The "baseline" and "eval" job kinds (jobs.h). */
#include "jobs.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "clock.h"
#include "eval.h"
#include "jobs_backend.h"
#include "loop.h"
#include "method_spec.h"
#include "sensitivity.h"
#include "model.h"
#include "ops.h"
#include "policy.h"
#include "quant.h"
#include "synthetic.h"
#include "tokenizer.h"
#include "tokens.h"

/* A job's spec, decoded by its kind's module (kinds/sensitivity.h), so the worker reads
 * exactly the fields, names and rules the coordinator's expansion wrote. */
typedef qs_sensitivity_spec job_spec;

static qs_status parse_spec(const json_t *spec, int is_eval, job_spec *s, qs_error *err) {
    qs_status st = qs_sensitivity_decode(spec, s, err);
    if (!st && s->eval != (is_eval != 0)) {
        qs_sensitivity_clear(s);
        st = qs_error_set(err, QS_EINVAL, "job spec: kind: expected \"%s\"",
                          is_eval ? "eval" : "baseline");
    }
    return st;
}

void qw_jobs_numerics_path(bool on_cuda, int cc, int gemm, const char *cpu_path, char *buf,
                           size_t cap) {
    static const char *const gemm_names[] = {"fp32", "bf16", "auto", "emulated"};
    if (on_cuda)
        snprintf(buf, cap, "cuda-cc%d-%s", cc,
                 gemm >= 0 && gemm < 4 ? gemm_names[gemm] : "unknown");
    else
        snprintf(buf, cap, "%s", cpu_path && *cpu_path ? cpu_path : "cpu");
}

qs_status qw_jobs_baseline_path(const char *model_digest, const char *dataset_digest, int ctx,
                                long max_chunks, int bos_id, const char *numerics_version,
                                int mkdirs, char *buf, size_t cap, qs_error *err) {
    return qw_jobs_baseline_path_for(model_digest, dataset_digest, ctx, max_chunks, bos_id,
                                     numerics_version, NULL, mkdirs, buf, cap, err);
}

qs_status qw_jobs_baseline_path_for(const char *model_digest, const char *dataset_digest, int ctx,
                                    long max_chunks, int bos_id, const char *numerics_version,
                                    const char *numerics_path, int mkdirs, char *buf, size_t cap,
                                    qs_error *err) {
    /* the CPU's fixed-order path keeps the name baselines had before paths were named */
    int named = numerics_path && *numerics_path &&
                strncmp(numerics_path, QW_JOBS_DEFAULT_PATH_PREFIX,
                        strlen(QW_JOBS_DEFAULT_PATH_PREFIX)) != 0;
    if (named && strlen(numerics_path) > 128)
        return qs_error_set(err, QS_EINVAL, "baseline path: overlong numerics path");
    if (named)
        for (const char *c = numerics_path; *c; c++)
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= 'A' && *c <= 'Z') || *c == '.' || *c == '_' || *c == '-'))
                return qs_error_set(err, QS_EINVAL,
                                    "baseline path: numerics path '%s' has a character outside "
                                    "[0-9A-Za-z._-]",
                                    numerics_path);
    const char *parts[] = {model_digest, dataset_digest, numerics_version};
    for (size_t i = 0; i < 3; i++) {
        if (!parts[i] || !*parts[i] || strlen(parts[i]) > 128)
            return qs_error_set(err, QS_EINVAL, "baseline path: empty or overlong digest/version");
        for (const char *c = parts[i]; *c; c++)
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= 'A' && *c <= 'Z') || *c == '.' || *c == '_'))
                return qs_error_set(err, QS_EINVAL, "baseline path: '%s' is not a digest",
                                    parts[i]);
    }
    char dir[4096];
    const char *env = getenv("QSWEEP_BASELINE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(dir, sizeof dir, "%s", env);
    else if (xdg && *xdg)
        n = snprintf(dir, sizeof dir, "%s/qsweep/baselines", xdg);
    else if (home && *home)
        n = snprintf(dir, sizeof dir, "%s/.cache/qsweep/baselines", home);
    else
        return qs_error_set(
            err, QS_EINVAL,
            "baseline path: neither QSWEEP_BASELINE_DIR, XDG_CACHE_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= sizeof dir)
        return qs_error_set(err, QS_EINVAL, "baseline path: directory name too long");
    if (mkdirs) {
        /* mkdir -p: each prefix ending at a slash, then the whole */
        for (char *p = dir + 1;; p++) {
            if (*p == '/' || *p == 0) {
                char c = *p;
                *p = 0;
                if (mkdir(dir, 0755) != 0 && errno != EEXIST)
                    return qs_error_set(err, QS_EIO, "baseline directory %s: mkdir: %s", dir,
                                        strerror(errno));
                *p = c;
                if (!c) break;
            }
        }
    }
    char bos[24] = "";
    if (bos_id >= 0) snprintf(bos, sizeof bos, "-bos%d", bos_id);
    n = snprintf(buf, cap, "%s/%s-%s-ctx%d-chunks%ld%s-v%s%s%s.qswblp", dir, model_digest,
                 dataset_digest, ctx, max_chunks, bos, numerics_version, named ? "-p" : "",
                 named ? numerics_path : "");
    if (n < 0 || (size_t)n >= cap)
        return qs_error_set(err, QS_EINVAL, "baseline path: buffer too small");
    return QS_OK;
}

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
 * for the residual streams of every chunk of the job, at most $QSWEEP_PREFIX_CACHE_MB MiB
 * (default 1024). Block-wise and cumulative sweeps then skip the unquantized blocks in front
 * of the quantized one. 0 when not even one chunk fits. */
static size_t prefix_cache_bytes(const qw_config *cfg, const job_spec *s, const qw_tokens *t) {
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
    size_t want = n_chunks * entry + entry / 2;
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

/* The result rows that say where the job ran, read after its evaluation (with cuBLASLt the
 * path is the most specific one its linears ran since get_model reset the count):
 * "gemm_path.<path>" = 1 (jobs_backend.h); on CUDA "gemm_probe.<format>.<outcome>" = 1 for
 * each format the device's probe answered; "backend_fallback.cuda_unavailable" = 1 when the
 * worker's --backend auto could not use CUDA (jobs_backend.h qw_jobs_backend_set); on the CPU
 * also "cpu_path.<path>" = 1, the BLAS
 * and kernel family its GEMMs ran on (worker/engine/ops.h qw_backend_cpu_path, e.g.
 * "cpu_path.cpu-openblas-0.3.21-haswell"), since results differ in the last bits between
 * families. */
static qs_status report_backend(qw_job_ctx *ctx, const qw_model *model, qs_error *err) {
    const char *path = qw_jobs_gemm_path(model);
    char name[64];
    qw_jobs_gemm_path_metric(path, name, sizeof name);
    qs_status st = qw_job_metric(ctx, name, 1.0, 0, true, err);
    char probes[8][64];
    int n_probes = st ? 0 : qw_jobs_gemm_probe_metrics(model, probes, 8);
    for (int i = 0; i < n_probes && !st; i++)
        st = qw_job_metric(ctx, probes[i], 1.0, 0, true, err);
    char status[48], why[512];
    if (!st && qw_jobs_gemm_fallback(model, status, sizeof status, why, sizeof why)) {
        fprintf(stderr, "qsweep worker: job %lld: %s\n", (long long)qw_job_id(ctx), why);
        qw_jobs_gemm_fallback_metric(status, name, sizeof name);
        st = qw_job_metric(ctx, name, 1.0, 0, true, err);
    }
    if (!st && qw_jobs_backend_get().fallback[0]) /* auto that could not use CUDA */
        st = qw_job_metric(ctx, "backend_fallback.cuda_unavailable", 1.0, 0, true, err);
    if (!st && strcmp(path, "cpu") == 0) { /* the CPU's own numerics path (ops.h) */
        snprintf(name, sizeof name, "cpu_path.%s", qw_backend_cpu_path());
        st = qw_job_metric(ctx, name, 1.0, 0, true, err);
    }
    return st;
}

/* Where the job's time went, as result rows (wall seconds, recorded for profiling: no table
 * or job key reads them): "time_<phase>_s" for each phase of the model's profile since the
 * job reset it after loading (worker/engine/profile.h: convert, act_quant, gemm_q ...
 * gemm_lm_head, attention, elementwise, logsoftmax, compare, policy, baseline_io),
 * "time_load_s" from the job's start through loading its tokens and model (the model only
 * when the worker has not cached it), and
 * "time_total_s" from the job's start to this call. The phases and the load never overlap:
 * their sum is at most the total. */
static qs_status report_times(qw_job_ctx *ctx, qw_model *model, double t_start, double load_s,
                              qs_error *err) {
    const qw_profile *p = qw_model_profile(model);
    char name[64];
    qs_status st = QS_OK;
    for (int i = 0; i < QW_PHASES && !st; i++) {
        snprintf(name, sizeof name, "time_%s_s", qw_phase_name((qw_phase)i));
        st = qw_job_metric(ctx, name, p->s[i], 0, true, err);
    }
    if (!st) st = qw_job_metric(ctx, "time_load_s", load_s, 0, true, err);
    if (!st) st = qw_job_metric(ctx, "time_total_s", qs_clock_s() - t_start, 0, true, err);
    return st;
}

/* The numerics path a job of spec s runs on in this worker (jobs.h qw_jobs_numerics_path):
 * where get_model puts the model, or its tensor-parallel ranks. */
static void job_numerics_path(const job_spec *s, char *buf, size_t cap) {
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

/* The model of spec s from the worker's cache, loading it (and checking its digest against
 * the spec's) when absent or built for a shorter context than s->dataset.ctx. The tokens t size its
 * prefix cache. It is put on the worker's backend (jobs_backend.h), with a fresh count of the
 * GEMM paths it runs. */
static qs_status get_model(qw_job_ctx *ctx, const job_spec *s, const char *want, const qw_tokens *t,
                           qw_model **out, qs_error *err) {
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
        return place_model(lm, &use, tp, &ranks, qw_job_threads(ctx), err);
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
    if (!st) st = place_model(lm, &use, tp, &ranks, qw_job_threads(ctx), err);
    if (!st) st = qw_job_cache_put(ctx, key, lm, loaded_model_free, err);
    if (st) {
        loaded_model_free(lm);
        return st;
    }
    *out = lm->model;
    return QS_OK;
}

/* After a job that used the cached model of spec s: its files must be the ones it was loaded
 * from, else the job ran (at least partly) on other weights and its result must not be
 * stored. QS_EINVAL (permanent: a retry would fail the digest check) naming the model. */
static qs_status check_model_after(qw_job_ctx *ctx, const job_spec *s, qs_error *err) {
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

/* The digest the model of s must have: the spec's, or for a model a pipeline's training job
 * makes (model.trained_by, kinds/spec.h) the one that job recorded when it ended: as the
 * store holds it, sent with the ASSIGN (proto: Assign.model_digest, qw_job_model_digest),
 * else from the record beside the model, <path>.digest (worker/train/train_job.c). Only the
 * store's refuses a folder copied over together with its record. The baseline file and the
 * comparison with it are keyed by this digest, so a model written again with other weights
 * never meets a baseline of the old ones. Errors (record file only): QS_ENOTFOUND (no record:
 * the training job has not ended here, or its folder is not shared with this worker),
 * QS_EFORMAT (not a digest). */
static qs_status model_digest_wanted(qw_job_ctx *ctx, const job_spec *s, char want[65],
                                     qs_error *err) {
    if (!s->model.trained_by[0]) {
        memcpy(want, s->model.digest, 65);
        return QS_OK;
    }
    const char *stored = qw_job_model_digest(ctx);
    if (stored[0]) {
        if (!qs_is_digest(stored))
            return qs_error_set(err, QS_EFORMAT,
                                "job %lld: ASSIGN model_digest \"%s\": expected the 64 hex "
                                "digits of a digest",
                                (long long)qw_job_id(ctx), stored);
        memcpy(want, stored, 65);
        return QS_OK;
    }
    char path[4200], line[80] = "";
    snprintf(path, sizeof path, "%s.digest", s->model.path);
    FILE *f = fopen(path, "r");
    if (!f)
        return qs_error_set(err, QS_ENOTFOUND,
                            "model %s: no digest record %s of its training job %s: %s",
                            s->model.path, path, s->model.trained_by, strerror(errno));
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    if (!got || !qs_is_digest(line))
        return qs_error_set(err, QS_EFORMAT, "%s: expected the 64 hex digits of a digest", path);
    memcpy(want, line, 65);
    return QS_OK;
}

/* A trained model's job reports the digest of the model it ran on as a name of value 1
 * ("model_digest.<hex>", as its training job does), so the store holds both: a pair that
 * differs is a model written again between them. */
static qs_status report_trained_digest(qw_job_ctx *ctx, const job_spec *s, const char *want,
                                       qs_error *err) {
    if (!s->model.trained_by[0]) return QS_OK;
    char name[96];
    snprintf(name, sizeof name, "model_digest.%s", want);
    return qw_job_metric(ctx, name, 1, 0, true, err);
}

/* The job's tokens: its token file, or its text through the model's own tokenizer
 * (qw_text_dataset: tokenized once per tokenizer and text on this machine, then cached). The
 * digest must be the one the grid recorded: a file changed since submission, or another
 * tokenizer, fails the job instead of producing results filed under the old key. */
static qs_status load_tokens(const job_spec *s, qw_tokens *t, qs_error *err) {
    const char *text = qs_dataset_text_path(s->dataset.path);
    char cached[4096];
    qs_status st;
    if (text && qs_is_synthetic(s->model.path))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: dataset %s: a text needs the model's tokenizer, and the "
                            "synthetic model %s has none",
                            text, s->model.path);
    if (text)
        st = qw_text_dataset(s->model.path, text, NULL, t, cached, sizeof cached, err);
    else
        st = qw_tokens_load(s->dataset.path, t, err);
    if (!st && strcmp(t->digest, s->dataset.digest) != 0) {
        st = qs_error_set(err, QS_EINVAL,
                          "%s %s: digest %s differs from the job's %s (the %s changed since the "
                          "grid was submitted)",
                          text ? "text" : "token file", text ? text : s->dataset.path, t->digest,
                          s->dataset.digest, text ? "text or the model's tokenizer" : "file");
        qw_tokens_free(t);
    }
    return st;
}

/* Progress of the engine into the job's heartbeat; a cancelled job stops the evaluation. */
typedef struct progress_ctx {
    qw_job_ctx *job;
    const char *phase;
} progress_ctx;

/* A baseline's chunks also go to the store as a curve point "baseline_chunks" (step: chunks
 * done, value: chunks in all), sent with the next heartbeat, so `qsweep status` shows the
 * baseline moving: it is the first job of a sweep, every other waits on it, and no job had
 * finished to show a pace by. */
static int on_progress(void *p, size_t step, size_t total) {
    progress_ctx *pc = p;
    qw_job_progress(pc->job, step, total, pc->phase);
    if (!strcmp(pc->phase, "baseline")) {
        qs_error ignored = {0}; /* a point not sent is progress not shown, nothing else */
        qw_job_metric(pc->job, QW_JOBS_BASELINE_CHUNKS, (double)total, (int64_t)step, false,
                      &ignored);
    }
    return qw_job_cancelled(pc->job);
}

static void eval_options(const job_spec *s, progress_ctx *pc, qw_eval_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->ctx = s->dataset.ctx;
    opt->max_chunks = (size_t)s->dataset.max_chunks;
    opt->bos_id = s->dataset.bos ? s->dataset.bos_id : -1;
    opt->progress = on_progress;
    opt->progress_ctx = pc;
    opt->model_digest = s->model.digest;
    opt->dataset_digest = s->dataset.digest;
    /* resources.gpu_count is the job's tensor-parallel degree (kinds/spec.h) */
    opt->tensor_parallel = s->resources.gpu_count > 1 ? s->resources.gpu_count : 0;
}

static qs_status report(qw_job_ctx *ctx, const char *name, double v, qs_error *err) {
    return qw_job_metric(ctx, name, v, 0, true, err);
}

/* The rows every job reports: sizes, then nll and ppl. */
static qs_status report_common(qw_job_ctx *ctx, const qw_eval_metrics *m, qs_error *err) {
    qs_status st = QS_OK;
    if (!st) st = report(ctx, "n_tokens", (double)m->n_tokens, err);
    if (!st) st = report(ctx, "n_chunks", (double)m->n_chunks, err);
    if (!st) st = report(ctx, "n_scored", (double)m->n_scored, err);
    if (!st) st = report(ctx, "ctx", (double)m->ctx, err);
    if (!st) st = report(ctx, "nll", m->nll, err);
    if (!st) st = report(ctx, "ppl", m->ppl, err);
    if (!st) st = report(ctx, "nll_stderr", m->nll_stderr, err);
    if (!st) st = report(ctx, "ppl_stderr", m->ppl_stderr, err);
    return st;
}

/* Makes the baseline file at path unless it exists. Written under a name of this process's
 * own, then renamed into place, so two workers that compute it at once never mix their
 * writes and a reader never sees half a file. */
static qs_status ensure_baseline(qw_job_ctx *ctx, qw_model *model, const qw_tokens *t,
                                 const job_spec *s, const char *want, const char *path,
                                 qw_eval_metrics *out, qs_error *err) {
    if (access(path, R_OK) == 0 && !out) return QS_OK;
    char mine[4200];
    snprintf(mine, sizeof mine, "%s.%ld.%lld", path, (long)getpid(), (long long)qw_job_id(ctx));
    progress_ctx pc = {ctx, "baseline"};
    qw_eval_options opt;
    eval_options(s, &pc, &opt);
    opt.model_digest = want; /* the weights' own digest (model_digest_wanted) */
    qw_eval_metrics m = {0};
    qs_status st = qw_model_apply_policy(model, NULL, err);
    if (!st) st = qw_eval_baseline(model, t, &opt, mine, &m, err);
    if (!st && rename(mine, path) != 0)
        st = qs_error_set(err, QS_EIO, "rename %s to %s: %s", mine, path, strerror(errno));
    if (st) {
        unlink(mine);
        qw_eval_metrics_free(&m);
        return st;
    }
    if (out)
        *out = m;
    else
        qw_eval_metrics_free(&m);
    return QS_OK;
}

static qs_status baseline_job(qw_job_ctx *ctx, qs_error *err) {
    double t_start = qs_clock_s(), load_s = 0.0;
    job_spec s;
    qs_status st = parse_spec(qw_job_spec(ctx), 0, &s, err);
    if (st) return st;
    char path[4096], want[65] = "";
    st = model_digest_wanted(ctx, &s, want, err);
    char npath[160];
    job_numerics_path(&s, npath, sizeof npath); /* a baseline of this job's own numerics path */
    if (!st)
        st = qw_jobs_baseline_path_for(want, s.dataset.digest, s.dataset.ctx,
                                       (long)s.dataset.max_chunks,
                                       s.dataset.bos ? s.dataset.bos_id : -1, s.numerics_version,
                                       npath, 1, path, sizeof path, err);
    qw_tokens t = {0};
    if (!st) st = load_tokens(&s, &t, err);
    qw_model *model = NULL;
    if (!st) st = get_model(ctx, &s, want, &t, &model, err);
    if (!st) {
        load_s = qs_clock_s() - t_start;
        qw_profile_reset(qw_model_profile(model));
    }
    qw_eval_metrics m = {0};
    if (!st) st = ensure_baseline(ctx, model, &t, &s, want, path, &m, err);
    if (!st) st = report_common(ctx, &m, err);
    if (!st) st = report_trained_digest(ctx, &s, want, err);
    if (!st) st = report_backend(ctx, model, err);
    if (!st) st = report_times(ctx, model, t_start, load_s, err);
    if (!st) st = check_model_after(ctx, &s, err);
    qw_eval_metrics_free(&m);
    qw_tokens_free(&t);
    qs_sensitivity_clear(&s);
    if (st == QS_ECANCELLED || qw_job_cancelled(ctx))
        return qs_error_set(err, QS_ECANCELLED, "baseline cancelled");
    return st;
}

/* The quantization of one format: format by name, its options from opts (a format_options
 * object) through the numeric core's own option names (kernels/quant.h qk_quant_option_set,
 * the parser the grid validates with), the same format on the GEMM inputs when acts. */
static qs_status quant_spec(const char *name, const json_t *opts, int acts, qw_quant_spec *q,
                            qs_error *err) {
    memset(q, 0, sizeof *q);
    q->weight = qk_format_by_name(name);
    if (!q->weight)
        return qs_error_set(err, QS_EINVAL, "job spec: format: unknown format '%s'", name);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)opts, key, v) {
        char num[32];
        const char *text = json_string_value(v);
        if (json_is_integer(v)) {
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
            text = num;
        }
        qs_status st = qk_quant_option_set(q->weight, &q->weight_opt, key, text, err);
        if (st) return qs_error_wrap(err, "job spec: format_options.%s", key);
    }
    if (acts) {
        q->act = q->weight;
        q->act_opt = q->weight_opt;
    }
    return QS_OK;
}

/* Mode policy: each linear of the map in its format, every other as it is. Errors: a block
 * beyond the model's, an unknown format or option (QS_EINVAL naming the linear). */
static qs_status build_explicit_policy(const job_spec *s, int n_layers, qw_policy *p,
                                       qs_error *err) {
    qs_status st = qw_policy_init(p, n_layers, err);
    const char *key;
    json_t *v;
    json_object_foreach(s->policy, key, v) {
        if (st) break;
        int block, part;
        const char *name = json_string_value(v);
        qw_quant_spec q;
        qs_policy_key_parse(key, &block, &part); /* checked by the spec's decoder */
        if (block >= n_layers) {
            st = qs_error_set(err, QS_EINVAL,
                              "job spec: policy.%s: block %d is not a block of 0..%d", key, block,
                              n_layers - 1);
            break;
        }
        st = quant_spec(name, json_object_get(s->format_options, name),
                        s->quantize_acts && part != QS_PART_EMBEDDINGS, &q, err);
        if (st) {
            qs_error_wrap(err, "job spec: policy.%s", key);
            break;
        }
        if (part == QS_PART_LM_HEAD)
            p->lm_head = q;
        else if (part == QS_PART_EMBEDDINGS)
            p->embed = q; /* a lookup: weight format only (quant_spec without acts) */
        else
            *qw_policy_linear(p, block, (qw_linear_kind)part) = q;
    }
    return st;
}

/* The policy a spec names: the kind's modes and parts (kinds/names.h, sensitivity.h) onto
 * the engine's policy. Block modes map onto the engine's isolation helpers; component and
 * leave_one_out set each part they quantize, lm_head and the embeddings included (the head is
 * a copy of its own even when tied: policy.h, so a tied model's embeddings stay as they are
 * when only lm_head is quantized). The embeddings are a lookup with no activation input:
 * they get the weight format only. */
static qs_status build_policy_parts(const job_spec *s, int n_layers, qw_policy *p, qs_error *err);

/* build_policy_parts, then the fused groups the spec names (policy.h fuse). */
static qs_status build_policy(const job_spec *s, int n_layers, qw_policy *p, qs_error *err) {
    _Static_assert((int)QS_FUSE_QKV == (int)QW_FUSE_QKV &&
                       (int)QS_FUSE_GATE_UP == (int)QW_FUSE_GATE_UP,
                   "one table of fused groups");
    qs_status st = build_policy_parts(s, n_layers, p, err);
    if (st == QS_OK) p->fuse = s->fuse;
    return st;
}

static qs_status build_policy_parts(const job_spec *s, int n_layers, qw_policy *p, qs_error *err) {
    if (s->mode == QS_MODE_POLICY) return build_explicit_policy(s, n_layers, p, err);
    qw_quant_spec q;
    qs_status st = quant_spec(s->format, s->format_options, s->quantize_acts, &q, err);
    if (st) return st;
    if (s->block >= n_layers)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: part: block %d is not a block of 0..%d for mode %s",
                            s->block, n_layers - 1, qs_mode_name(s->mode));
    if ((st = qw_policy_init(p, n_layers, err))) return st;
    qw_quant_spec embed = q;
    embed.act = NULL;
    memset(&embed.act_opt, 0, sizeof embed.act_opt);
    unsigned set = 0; /* parts set in every block (component forms) */
    switch (s->mode) {
    case QS_MODE_COMPONENT:
        set = 1u << s->part;
        break;
    case QS_MODE_LEAVE_ONE_OUT:
        set = s->loo_of & ~(1u << s->part);
        break;
    case QS_MODE_BLOCK:
        return qw_policy_isolation(p, QW_ISO_BLOCK, QW_LINEAR_Q, s->block, &q, err);
    case QS_MODE_LAYER:
        return qw_policy_isolation(p, QW_ISO_LAYER, (qw_linear_kind)s->part, s->block, &q, err);
    case QS_MODE_CUMULATIVE:
        return qw_policy_isolation(p, QW_ISO_CUMULATIVE, QW_LINEAR_Q, s->block, &q, err);
    case QS_MODE_LEAVE_ONE_OUT_BLOCK:
        return qw_policy_isolation(p, QW_ISO_LOO_BLOCK, QW_LINEAR_Q, s->block, &q, err);
    case QS_MODE_LEAVE_ONE_OUT_LAYER:
        return qw_policy_isolation(p, QW_ISO_LOO_LAYER, (qw_linear_kind)s->part, s->block, &q, err);
    default:
        return qs_error_set(err, QS_EINVAL, "job spec: mode %d unknown", (int)s->mode);
    }
    for (int b = 0; b < n_layers; b++)
        for (int k = 0; k < QS_LINEAR_KINDS; k++)
            if (set & (1u << k)) *qw_policy_linear(p, b, (qw_linear_kind)k) = q;
    if (set & (1u << QS_PART_LM_HEAD)) p->lm_head = q;
    if (set & (1u << QS_PART_EMBEDDINGS)) p->embed = embed;
    return QS_OK;
}

/* "sqnr_db.<block>.<kind>" for "model.layers.<block>.<module>", "sqnr_db.lm_head" for the head. */
static void sqnr_metric_name(const char *linear, char *buf, size_t cap) {
    int block;
    char module[64];
    if (sscanf(linear, "model.layers.%d.%63s", &block, module) == 2)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            if (!strcmp(module, qw_linear_module_name((qw_linear_kind)k))) {
                snprintf(buf, cap, "sqnr_db.%d.%s", block, qw_linear_kind_name((qw_linear_kind)k));
                return;
            }
    snprintf(buf, cap, "sqnr_db.%s", linear);
}

/* The spec's method (kinds/method.h) on the model's quantized linears (worker/method). */
static qs_status apply_method(qw_model *model, const job_spec *s, qw_method_state **out,
                              qw_method_info *info, qs_error *err) {
    qw_method_plan plan;
    uint32_t *calib = NULL;
    qs_status st = qw_method_plan_from_spec(s, &plan, &calib, err);
    if (!st) st = qw_method_apply(model, &plan, out, info, err);
    free(calib);
    return st;
}

/* A compare job's baseline (kinds/sensitivity.h reference_model): the reference model's,
 * at the path its own baseline job writes on this numerics path; made here from the reference
 * when absent (a worker whose cache lacks it). path gets the file name. */
static qs_status compare_baseline(qw_job_ctx *ctx, const job_spec *s, const qw_tokens *t,
                                  char *path, size_t cap, qs_error *err) {
    job_spec r = *s; /* shallow: the reference in the model's place */
    r.model = s->reference;
    r.eval = false;
    char npath[160];
    job_numerics_path(&r, npath, sizeof npath);
    qs_status st = qw_jobs_baseline_path_for(
        r.model.digest, r.dataset.digest, r.dataset.ctx, (long)r.dataset.max_chunks,
        r.dataset.bos ? r.dataset.bos_id : -1, r.numerics_version, npath, 1, path, cap, err);
    if (st || access(path, R_OK) == 0) return st;
    qw_model *ref = NULL;
    st = get_model(ctx, &r, r.model.digest, t, &ref, err);
    if (!st) st = ensure_baseline(ctx, ref, t, &r, r.model.digest, path, NULL, err);
    if (!st) st = check_model_after(ctx, &r, err);
    return st;
}

/* Sums w_ref^2 and (w - w_ref)^2 over two stored tensors of one shape, a block of rows at a
 * time (the stored forms are converted piecewise: no FP32 copy of a whole model). */
static qs_status weight_sqnr_sums(const qw_stored_tensor *a, const qw_stored_tensor *b,
                                  double *sig, double *noise, qs_error *err) {
    const int64_t block = 64;
    float *fa = malloc((size_t)(block * a->cols) * sizeof *fa),
          *fb = malloc((size_t)(block * b->cols) * sizeof *fb);
    qs_status st = fa && fb ? QS_OK : qs_error_set(err, QS_ENOMEM, "compare: out of memory");
    *sig = *noise = 0.0;
    for (int64_t r = 0; !st && r < a->rows; r += block) {
        int64_t n = a->rows - r < block ? a->rows - r : block;
        qw_stored_rows_f32(a, r, n, fa);
        qw_stored_rows_f32(b, r, n, fb);
        for (int64_t j = 0; j < n * a->cols; j++) {
            double d = (double)fa[j] - (double)fb[j];
            *sig += (double)fb[j] * fb[j];
            *noise += d * d;
        }
    }
    free(fa);
    free(fb);
    return st;
}

/* A compare job's per-linear SQNR: each linear's weight as the scored checkpoint holds it
 * (an FP4 checkpoint's dequantized) against the reference's, reported as
 * "weight_sqnr_db.<block>.<kind>" = 10 log10(sum w_ref^2 / sum (w - w_ref)^2), +inf when
 * equal; a linear one of them does not store (a tied lm_head) is left out. */
static qs_status compare_weights(qw_job_ctx *ctx, const job_spec *s, const qw_model *model,
                                 qs_error *err) {
    char key[QS_AFFINITY_KEY_MAX];
    qs_affinity_key(s->model.digest, key, sizeof key);
    loaded_model *lm = qw_job_cache_get(ctx, key);
    qw_checkpoint *rck = NULL;
    qs_status st = lm && lm->ck ? QS_OK
                                : qs_error_set(err, QS_EINVAL,
                                               "compare: model %s is not a checkpoint",
                                               s->model.path);
    /* the reference's checkpoint alone (its weights are read, not run) */
    if (!st) st = qw_checkpoint_open(s->reference.path, &rck, err);
    char got[65];
    if (!st) st = qw_checkpoint_digest(rck, got, err);
    if (!st && strcmp(got, s->reference.digest))
        st = qs_error_set(err, QS_EINVAL,
                          "reference model %s: digest %s differs from the job's %s (the file "
                          "changed since the grid was submitted)",
                          s->reference.path, got, s->reference.digest);
    int n = qw_model_n_linears(model);
    for (int i = 0; !st && i < n; i++) {
        char name[256], tname[272];
        qw_model_linear_name(model, i, name, sizeof name);
        if (!strcmp(name, "model.embed_tokens")) continue;
        snprintf(tname, sizeof tname, "%s.weight", name);
        qw_stored_tensor a, b;
        int64_t sa[2], sb[2];
        int na, nb;
        qs_error ignored = {0};
        if (qw_checkpoint_tensor_stored(lm->ck, tname, &a, sa, &na, &ignored) ||
            qw_checkpoint_tensor_stored(rck, tname, &b, sb, &nb, &ignored))
            continue;
        if (na != nb || sa[0] != sb[0] || sa[1] != sb[1]) {
            st = qs_error_set(err, QS_EINVAL,
                              "compare: %s is [%lld, %lld] in %s and [%lld, %lld] in its "
                              "reference %s",
                              tname, (long long)sa[0], (long long)sa[1], s->model.path,
                              (long long)sb[0], (long long)sb[1], s->reference.path);
            break;
        }
        double sig, noise;
        if ((st = weight_sqnr_sums(&a, &b, &sig, &noise, err))) break;
        char metric[160];
        sqnr_metric_name(name, metric, sizeof metric);
        snprintf(tname, sizeof tname, "weight_%s", metric);
        st = report(ctx, tname, noise > 0.0 ? 10.0 * log10(sig / noise) : INFINITY, err);
    }
    qw_checkpoint_close(rck);
    return st;
}

static qs_status eval_job(qw_job_ctx *ctx, qs_error *err) {
    double t_start = qs_clock_s(), load_s = 0.0;
    job_spec s;
    qs_status st = parse_spec(qw_job_spec(ctx), 1, &s, err);
    if (st) return st;
    char path[4096], want[65] = "";
    st = model_digest_wanted(ctx, &s, want, err);
    char npath[160];
    job_numerics_path(&s, npath, sizeof npath); /* a baseline of this job's own numerics path */
    if (!st)
        st = qw_jobs_baseline_path_for(want, s.dataset.digest, s.dataset.ctx,
                                       (long)s.dataset.max_chunks,
                                       s.dataset.bos ? s.dataset.bos_id : -1, s.numerics_version,
                                       npath, 1, path, sizeof path, err);
    qw_tokens t = {0};
    if (!st) st = load_tokens(&s, &t, err);
    qw_model *model = NULL;
    /* on the model's backend, GPU or CPU; a compare job quantizes nothing for the probe to
       measure, and compares the two checkpoints' weights instead (compare_weights) */
    bool probe = (s.metrics & QS_METRIC_SQNR) != 0 && !s.reference.path;
    /* a compare job: the baseline is its reference model's, made here when absent */
    if (!st && s.reference.path) st = compare_baseline(ctx, &s, &t, path, sizeof path, err);
    if (!st) st = get_model(ctx, &s, want, &t, &model, err);
    if (!st) {
        load_s = qs_clock_s() - t_start;
        qw_profile_reset(qw_model_profile(model));
    }
    if (!st && !s.reference.path) st = ensure_baseline(ctx, model, &t, &s, want, path, NULL, err);
    qw_policy p = {0};
    if (!st) st = build_policy(&s, qw_model_config(model)->n_layers, &p, err);
    if (!st) st = qw_model_apply_policy(model, &p, err);
    qw_policy_free(&p);
    qw_method_state *method = NULL; /* the spec's method on the policy's linears (method.h) */
    qw_method_info mi = {0};
    if (!st && s.method != QS_METHOD_RTN) st = apply_method(model, &s, &method, &mi, err);
    progress_ctx pc = {ctx, "eval"};
    qw_eval_options opt;
    eval_options(&s, &pc, &opt);
    /* the baseline's model: a compare job's is its reference's (its file names that digest) */
    opt.model_digest = s.reference.path ? s.reference.digest : want;
    opt.sqnr = probe;
    opt.sqnr_rows = s.sqnr_rows;
    opt.skip_kl = !(s.metrics & QS_METRIC_KL); /* what the grid does not ask for */
    opt.skip_top1 = !(s.metrics & QS_METRIC_TOP1);
    qw_eval_metrics m = {0};
    if (!st) st = qw_eval_compare(model, &t, &opt, path, &m, err);
    if (!st) st = report_common(ctx, &m, err);
    if (!st) st = report_trained_digest(ctx, &s, want, err);
    if (!st) st = report_backend(ctx, model, err);
    if (!st && (s.metrics & QS_METRIC_KL)) {
        const struct {
            const char *name;
            double v;
        } kl[] = {{"kl_mean", m.kl_mean},
                  {"kl_median", m.kl_median},
                  {"kl_p90", m.kl_p90},
                  {"kl_p99", m.kl_p99},
                  {"kl_max", m.kl_max}};
        for (size_t i = 0; !st && i < sizeof kl / sizeof kl[0]; i++)
            st = report(ctx, kl[i].name, kl[i].v, err);
    }
    if (!st && (s.metrics & QS_METRIC_TOP1)) st = report(ctx, "top1", m.top1, err);
    for (size_t i = 0; !st && i < m.n_sqnr; i++) {
        char name[128];
        sqnr_metric_name(m.sqnr[i].name, name, sizeof name);
        st = report(ctx, name, m.sqnr[i].sqnr_db, err);
    }
    if (!st && s.reference.path && (s.metrics & QS_METRIC_SQNR))
        st = compare_weights(ctx, &s, model, err);
    if (!st && method) st = report(ctx, "time_method_s", mi.method_s, err);
    if (!st && method) st = report(ctx, "time_calibration_s", mi.calib_s, err);
    if (!st && method) st = report(ctx, "calibration_tokens", (double)mi.calib_tokens, err);
    if (!st) st = report_times(ctx, model, t_start, load_s, err);
    if (!st) st = check_model_after(ctx, &s, err);
    qw_eval_metrics_free(&m);
    qw_tokens_free(&t);
    if (model) {
        qs_error ignored = {0};
        qw_model_apply_policy(model, NULL, &ignored); /* leave the cached model unquantized */
    }
    qw_method_state_free(method);
    qs_sensitivity_clear(&s);
    if (st == QS_ECANCELLED || qw_job_cancelled(ctx))
        return qs_error_set(err, QS_ECANCELLED, "eval cancelled");
    return st;
}

qs_status qw_jobs_policy(const char *spec_json, int n_layers, qw_policy *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    if (!spec) return qs_error_set(err, QS_EFORMAT, "job spec: line %d: %s", je.line, je.text);
    job_spec s;
    qs_status st = parse_spec(spec, 1, &s, err);
    json_decref(spec);
    if (st) return st;
    st = build_policy(&s, n_layers, out, err);
    if (st) qw_policy_free(out);
    qs_sensitivity_clear(&s);
    return st;
}

qs_status qw_jobs_register(qs_error *err) {
    qs_status st = qw_register_kind("baseline", baseline_job, err);
    return st ? st : qw_register_kind("eval", eval_job, err);
}
