/* The "baseline" and "eval" job kinds (jobs.h). */
#include "jobs.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "eval.h"
#include "loop.h"
#include "model.h"
#include "policy.h"
#include "quant.h"
#include "synthetic.h"
#include "tokens.h"

/* Metrics a spec can ask for (grid.h's names), as bits. */
enum { METRIC_PPL = 1, METRIC_KL = 2, METRIC_TOP1 = 4, METRIC_SQNR = 8 };

/* The fields of a job spec, borrowed from the spec's JSON. */
typedef struct job_spec {
    const char *model_path, *model_digest;
    const char *dataset_path, *dataset_digest;
    int ctx;
    json_int_t max_chunks;
    const char *format;
    json_t *format_options;
    const char *quantize, *mode, *part; /* NULL for a baseline */
    unsigned metrics;
    const char *numerics_version;
} job_spec;

static qs_status parse_spec(const json_t *spec, int is_eval, job_spec *s, qs_error *err) {
    json_error_t je;
    json_t *metrics = NULL;
    memset(s, 0, sizeof *s);
    if (json_unpack_ex((json_t *)spec, &je, 0,
                       "{s:{s:s, s:s}, s:{s:s, s:s, s:i, s:I}, s:s, s:o, s:o, s:s}", "model",
                       "path", &s->model_path, "digest", &s->model_digest, "dataset", "path",
                       &s->dataset_path, "digest", &s->dataset_digest, "ctx", &s->ctx, "max_chunks",
                       &s->max_chunks, "format", &s->format, "format_options", &s->format_options,
                       "metrics", &metrics, "numerics_version", &s->numerics_version) != 0)
        return qs_error_set(err, QS_EINVAL, "job spec: %s", je.text);
    if (is_eval && json_unpack_ex((json_t *)spec, &je, 0, "{s:s, s:s, s:s}", "quantize",
                                  &s->quantize, "mode", &s->mode, "part", &s->part) != 0)
        return qs_error_set(err, QS_EINVAL, "job spec: %s", je.text);
    if (!json_is_array(metrics) || !json_is_object(s->format_options))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: metrics must be an array, format_options an object");
    size_t i;
    json_t *v;
    json_array_foreach(metrics, i, v) {
        const char *n = json_string_value(v);
        unsigned bit = !n                   ? 0
                       : !strcmp(n, "ppl")  ? METRIC_PPL
                       : !strcmp(n, "kl")   ? METRIC_KL
                       : !strcmp(n, "top1") ? METRIC_TOP1
                       : !strcmp(n, "sqnr") ? METRIC_SQNR
                                            : 0;
        if (!bit) return qs_error_set(err, QS_EINVAL, "job spec: metrics[%zu]: unknown metric", i);
        s->metrics |= bit;
    }
    if (s->ctx < 2 || s->max_chunks < 0)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: dataset.ctx %d or dataset.max_chunks %lld out of range",
                            s->ctx, (long long)s->max_chunks);
    return QS_OK;
}

qs_status qw_jobs_baseline_path(const char *model_digest, const char *dataset_digest, int ctx,
                                long max_chunks, const char *numerics_version, int mkdirs,
                                char *buf, size_t cap, qs_error *err) {
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
    n = snprintf(buf, cap, "%s/%s-%s-ctx%d-chunks%ld-v%s.qswblp", dir, model_digest, dataset_digest,
                 ctx, max_chunks, numerics_version);
    if (n < 0 || (size_t)n >= cap)
        return qs_error_set(err, QS_EINVAL, "baseline path: buffer too small");
    return QS_OK;
}

/* A model kept in the worker's cache across jobs: the open checkpoint and the engine over it. */
typedef struct loaded_model {
    qw_checkpoint *ck;
    qw_model *model;
} loaded_model;

static void loaded_model_free(void *p) {
    loaded_model *lm = p;
    if (!lm) return;
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
    if (qw_eval_plan(t->n, s->ctx, (size_t)s->max_chunks, &n_chunks, &n_scored, &ignored)) return 0;
    const char *env = getenv("QSWEEP_PREFIX_CACHE_MB");
    size_t cap = (size_t)(env && *env ? strtoull(env, NULL, 10) : 1024) << 20;
    size_t entry = ((size_t)cfg->n_layers * (size_t)s->ctx * (size_t)cfg->dim + (size_t)s->ctx) *
                   sizeof(float);
    size_t want = n_chunks * entry + entry / 2;
    return want <= cap ? want : (cap / entry) * entry;
}

/* The model of spec s from the worker's cache, loading it (and checking its digest against
 * the spec's) when absent or built for a shorter context than s->ctx. The tokens t size its
 * prefix cache. */
static qs_status get_model(qw_job_ctx *ctx, const job_spec *s, const qw_tokens *t, qw_model **out,
                           qs_error *err) {
    char key[128];
    snprintf(key, sizeof key, "model:%s", s->model_digest);
    loaded_model *lm = qw_job_cache_get(ctx, key);
    if (lm && qw_model_max_ctx(lm->model) >= s->ctx) {
        *out = lm->model;
        return qw_model_set_threads(lm->model, qw_job_threads(ctx), err);
    }
    qw_job_progress(ctx, 0, 1, "load");
    lm = calloc(1, sizeof *lm);
    if (!lm) return qs_error_set(err, QS_ENOMEM, "out of memory");
    char digest[65];
    qs_status st = QS_OK;
    /* A synthetic model (synthetic.h) is built from its name and seed; its digest is that of the
     * path, as the grid computed it. */
    int synthetic = qw_synthetic_is(s->model_path);
    if (synthetic)
        qw_synthetic_digest(s->model_path, digest);
    else
        st = qw_checkpoint_open(s->model_path, &lm->ck, err);
    if (!st && !synthetic) st = qw_checkpoint_digest(lm->ck, digest, err);
    if (!st && strcmp(digest, s->model_digest) != 0)
        st = qs_error_set(err, QS_EINVAL,
                          "model %s: digest %s differs from the job's %s (the file changed since "
                          "the grid was submitted)",
                          s->model_path, digest, s->model_digest);
    if (!st && synthetic)
        st = qw_model_create_synthetic(s->model_path, s->ctx, qw_job_threads(ctx), &lm->model,
                                       err);
    else if (!st)
        st = qw_model_create(lm->ck, s->ctx, qw_job_threads(ctx), &lm->model, err);
    size_t cache = st ? 0 : prefix_cache_bytes(qw_model_config(lm->model), s, t);
    if (cache) st = qw_model_set_prefix_cache(lm->model, cache, err);
    if (!st) st = qw_job_cache_put(ctx, key, lm, loaded_model_free, err);
    if (st) {
        loaded_model_free(lm);
        return st;
    }
    *out = lm->model;
    return QS_OK;
}

static qs_status load_tokens(const job_spec *s, qw_tokens *t, qs_error *err) {
    qs_status st = qw_tokens_load(s->dataset_path, t, err);
    if (!st && strcmp(t->digest, s->dataset_digest) != 0) {
        st = qs_error_set(err, QS_EINVAL,
                          "token file %s: digest %s differs from the job's %s (the file changed "
                          "since the grid was submitted)",
                          s->dataset_path, t->digest, s->dataset_digest);
        qw_tokens_free(t);
    }
    return st;
}

/* Progress of the engine into the job's heartbeat; a cancelled job stops the evaluation. */
typedef struct progress_ctx {
    qw_job_ctx *job;
    const char *phase;
} progress_ctx;

static int on_progress(void *p, size_t step, size_t total) {
    progress_ctx *pc = p;
    qw_job_progress(pc->job, step, total, pc->phase);
    return qw_job_cancelled(pc->job);
}

static void eval_options(const job_spec *s, progress_ctx *pc, qw_eval_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->ctx = s->ctx;
    opt->max_chunks = (size_t)s->max_chunks;
    opt->bos_id = -1;
    opt->progress = on_progress;
    opt->progress_ctx = pc;
    opt->model_digest = s->model_digest;
    opt->dataset_digest = s->dataset_digest;
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
                                 const job_spec *s, const char *path, qw_eval_metrics *out,
                                 qs_error *err) {
    if (access(path, R_OK) == 0 && !out) return QS_OK;
    char mine[4200];
    snprintf(mine, sizeof mine, "%s.%ld.%lld", path, (long)getpid(), (long long)qw_job_id(ctx));
    progress_ctx pc = {ctx, "baseline"};
    qw_eval_options opt;
    eval_options(s, &pc, &opt);
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
    job_spec s;
    qs_status st = parse_spec(qw_job_spec(ctx), 0, &s, err);
    if (st) return st;
    char path[4096];
    st = qw_jobs_baseline_path(s.model_digest, s.dataset_digest, s.ctx, (long)s.max_chunks,
                               s.numerics_version, 1, path, sizeof path, err);
    qw_tokens t = {0};
    if (!st) st = load_tokens(&s, &t, err);
    qw_model *model = NULL;
    if (!st) st = get_model(ctx, &s, &t, &model, err);
    qw_eval_metrics m = {0};
    if (!st) st = ensure_baseline(ctx, model, &t, &s, path, &m, err);
    if (!st) st = report_common(ctx, &m, err);
    qw_eval_metrics_free(&m);
    qw_tokens_free(&t);
    if (st == QS_ECANCELLED || qw_job_cancelled(ctx))
        return qs_error_set(err, QS_ECANCELLED, "baseline cancelled");
    return st;
}

/* Quantization options from the spec's format_options, through the numeric core's own
 * option names (kernels/quant.h qk_quant_option_set), the same parser grid.c validates with. */
static qs_status quant_options(const job_spec *s, const qk_format *fmt, qk_quant_options *o,
                               qs_error *err) {
    memset(o, 0, sizeof *o);
    const char *key;
    json_t *v;
    json_object_foreach(s->format_options, key, v) {
        char num[32];
        const char *text = json_string_value(v);
        if (json_is_integer(v)) {
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
            text = num;
        }
        qs_status st = qk_quant_option_set(fmt, o, key, text, err);
        if (st) return qs_error_wrap(err, "job spec: format_options.%s", key);
    }
    return QS_OK;
}

/* The policy a spec names: grid.h's modes and parts onto the engine's isolation helpers. */
static qs_status build_policy(const job_spec *s, int n_layers, qw_policy *p, qs_error *err) {
    qw_quant_spec q = {0};
    q.weight = qk_format_by_name(s->format);
    if (!q.weight)
        return qs_error_set(err, QS_EINVAL, "job spec: format: unknown format '%s'", s->format);
    qs_status st = quant_options(s, q.weight, &q.weight_opt, err);
    if (st) return st;
    if (!strcmp(s->quantize, "weights+activations")) {
        q.act = q.weight;
        q.act_opt = q.weight_opt;
    } else if (strcmp(s->quantize, "weights") != 0) {
        return qs_error_set(err, QS_EINVAL, "job spec: quantize: unknown value '%s'", s->quantize);
    }
    static const struct {
        const char *name;
        qw_isolation iso;
        int has_block, has_kind;
    } modes[] = {{"component", QW_ISO_COMPONENT, 0, 1},
                 {"block", QW_ISO_BLOCK, 1, 0},
                 {"layer", QW_ISO_LAYER, 1, 1},
                 {"leave_one_out", QW_ISO_LOO_COMPONENT, 0, 1},
                 {"cumulative", QW_ISO_CUMULATIVE, 1, 0}};
    size_t mi = 0;
    while (mi < sizeof modes / sizeof modes[0] && strcmp(modes[mi].name, s->mode))
        mi++;
    if (mi == sizeof modes / sizeof modes[0])
        return qs_error_set(err, QS_EINVAL, "job spec: mode: unknown '%s'", s->mode);
    /* part: "<kind>", "<block>" or "<block>.<kind>" (grid.h) */
    int block = 0;
    qw_linear_kind kind = QW_LINEAR_Q;
    const char *kind_name = s->part;
    if (modes[mi].has_block) {
        char *end;
        long b = strtol(s->part, &end, 10);
        if (end == s->part || b < 0 || b >= n_layers ||
            (modes[mi].has_kind ? *end != '.' : *end != 0))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: part '%s' is not a block of 0..%d for mode %s", s->part,
                                n_layers - 1, s->mode);
        block = (int)b;
        kind_name = end + 1;
    }
    if (modes[mi].has_kind && (st = qw_linear_kind_by_name(kind_name, &kind, err)))
        return qs_error_wrap(err, "job spec: part");
    if ((st = qw_policy_init(p, n_layers, err))) return st;
    return qw_policy_isolation(p, modes[mi].iso, kind, block, &q, err);
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

static qs_status eval_job(qw_job_ctx *ctx, qs_error *err) {
    job_spec s;
    qs_status st = parse_spec(qw_job_spec(ctx), 1, &s, err);
    if (st) return st;
    char path[4096];
    st = qw_jobs_baseline_path(s.model_digest, s.dataset_digest, s.ctx, (long)s.max_chunks,
                               s.numerics_version, 1, path, sizeof path, err);
    qw_tokens t = {0};
    if (!st) st = load_tokens(&s, &t, err);
    qw_model *model = NULL;
    if (!st) st = get_model(ctx, &s, &t, &model, err);
    if (!st) st = ensure_baseline(ctx, model, &t, &s, path, NULL, err);
    qw_policy p = {0};
    if (!st) st = build_policy(&s, qw_model_config(model)->n_layers, &p, err);
    if (!st) st = qw_model_apply_policy(model, &p, err);
    qw_policy_free(&p);
    progress_ctx pc = {ctx, "eval"};
    qw_eval_options opt;
    eval_options(&s, &pc, &opt);
    opt.sqnr = (s.metrics & METRIC_SQNR) != 0;
    qw_eval_metrics m = {0};
    if (!st) st = qw_eval_compare(model, &t, &opt, path, &m, err);
    if (!st) st = report_common(ctx, &m, err);
    if (!st && (s.metrics & METRIC_KL)) {
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
    if (!st && (s.metrics & METRIC_TOP1)) st = report(ctx, "top1", m.top1, err);
    for (size_t i = 0; !st && i < m.n_sqnr; i++) {
        char name[128];
        sqnr_metric_name(m.sqnr[i].name, name, sizeof name);
        st = report(ctx, name, m.sqnr[i].sqnr_db, err);
    }
    qw_eval_metrics_free(&m);
    qw_tokens_free(&t);
    if (model) {
        qs_error ignored = {0};
        qw_model_apply_policy(model, NULL, &ignored); /* leave the cached model unquantized */
    }
    if (st == QS_ECANCELLED || qw_job_cancelled(ctx))
        return qs_error_set(err, QS_ECANCELLED, "eval cancelled");
    return st;
}

qs_status qw_jobs_register(qs_error *err) {
    qs_status st = qw_register_kind("baseline", baseline_job, err);
    return st ? st : qw_register_kind("eval", eval_job, err);
}
