/* The "baseline" and "eval" job kinds (jobs.h). */
#include "jobs.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "clock.h"
#include "compare_weights.h"
#include "eval.h"
#include "job_policy.h"
#include "jobs_backend.h"
#include "loop.h"
#include "method_spec.h"
#include "model.h"
#include "model_cache.h"
#include "ops.h"
#include "policy.h"
#include "sensitivity.h"
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

/* The result rows that say where the job ran, read after its evaluation (with cuBLASLt the
 * path is the most specific one its linears ran since qw_jobs_get_model reset the count):
 * "gemm_path.<path>" = 1 (jobs_backend.h); on CUDA "gemm_probe.<format>.<outcome>" = 1 for
 * each format the device's probe answered; "backend_fallback.<why>" = 1 when the worker's
 * --backend auto runs on the CPU (why: no_cuda_build, no_gpu or cuda_unavailable: jobs_backend.h
 * qw_jobs_backend_set); on the CPU
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
    qw_jobs_backend be = qw_jobs_backend_get();
    if (!st && be.fallback_code[0]) { /* auto that runs on the CPU, and why */
        snprintf(name, sizeof name, "backend_fallback.%s", be.fallback_code);
        st = qw_job_metric(ctx, name, 1.0, 0, true, err);
    }
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

/* What a baseline and an eval job read first, after the spec: the model digest wanted
 * (model_digest_wanted), the path of the baseline of this job's own numerics path, and the
 * tokens into *t (freed by the caller, whatever this returns). */
static qs_status job_inputs(qw_job_ctx *ctx, const job_spec *s, char want[65], char *path,
                            size_t cap, qw_tokens *t, qs_error *err) {
    qs_status st = model_digest_wanted(ctx, s, want, err);
    char npath[160];
    qw_jobs_spec_numerics_path(s, npath, sizeof npath);
    if (!st)
        st = qw_jobs_baseline_path_for(
            want, s->dataset.digest, s->dataset.ctx, (long)s->dataset.max_chunks,
            s->dataset.bos ? s->dataset.bos_id : -1, s->numerics_version, npath, 1, path, cap, err);
    if (!st) st = load_tokens(s, t, err);
    return st;
}

static qs_status baseline_job(qw_job_ctx *ctx, qs_error *err) {
    double t_start = qs_clock_s(), load_s = 0.0;
    job_spec s;
    qs_status st = parse_spec(qw_job_spec(ctx), 0, &s, err);
    if (st) return st;
    char path[4096], want[65] = "";
    qw_tokens t = {0};
    st = job_inputs(ctx, &s, want, path, sizeof path, &t, err);
    qw_model *model = NULL;
    if (!st) st = qw_jobs_get_model(ctx, &s, want, &t, &model, err);
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
    if (!st) st = qw_jobs_check_model_after(ctx, &s, err);
    qw_eval_metrics_free(&m);
    qw_tokens_free(&t);
    qs_sensitivity_clear(&s);
    if (st == QS_ECANCELLED || qw_job_cancelled(ctx))
        return qs_error_set(err, QS_ECANCELLED, "baseline cancelled");
    return st;
}

/* The spec's method (kinds/method.h) on the model's quantized linears (worker/method). */
static qs_status apply_method(qw_model *model, const job_spec *s, qw_method_state **out,
                              qw_method_info *info, qs_error *err) {
    qw_method_plan plan;
    uint32_t *calib = NULL;
    qs_status st = qw_method_plan_from_spec(s, &plan, &calib, err);
    if (!st) st = qw_method_apply(model, &plan, out, info, err);
    qw_method_plan_clear(&plan);
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
    qw_jobs_spec_numerics_path(&r, npath, sizeof npath);
    qs_status st = qw_jobs_baseline_path_for(
        r.model.digest, r.dataset.digest, r.dataset.ctx, (long)r.dataset.max_chunks,
        r.dataset.bos ? r.dataset.bos_id : -1, r.numerics_version, npath, 1, path, cap, err);
    if (st || access(path, R_OK) == 0) return st;
    qw_model *ref = NULL;
    st = qw_jobs_get_model(ctx, &r, r.model.digest, t, &ref, err);
    if (!st) st = ensure_baseline(ctx, ref, t, &r, r.model.digest, path, NULL, err);
    if (!st) st = qw_jobs_check_model_after(ctx, &r, err);
    return st;
}

static qs_status eval_job(qw_job_ctx *ctx, qs_error *err) {
    double t_start = qs_clock_s(), load_s = 0.0;
    job_spec s;
    qs_status st = parse_spec(qw_job_spec(ctx), 1, &s, err);
    if (st) return st;
    char path[4096], want[65] = "";
    qw_tokens t = {0};
    st = job_inputs(ctx, &s, want, path, sizeof path, &t, err);
    qw_model *model = NULL;
    /* on the model's backend, GPU or CPU; a compare job quantizes nothing for the probe to
       measure, and compares the two checkpoints' weights instead (compare_weights.h) */
    bool probe = (s.metrics & QS_METRIC_SQNR) != 0 && !s.reference.path;
    /* a compare job: the baseline is its reference model's, made here when absent */
    if (!st && s.reference.path) st = compare_baseline(ctx, &s, &t, path, sizeof path, err);
    if (!st) st = qw_jobs_get_model(ctx, &s, want, &t, &model, err);
    if (!st) {
        load_s = qs_clock_s() - t_start;
        qw_profile_reset(qw_model_profile(model));
    }
    if (!st && !s.reference.path) st = ensure_baseline(ctx, model, &t, &s, want, path, NULL, err);
    qw_policy p = {0};
    if (!st) st = qw_jobs_build_policy(&s, qw_model_config(model)->n_layers, &p, err);
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
        qw_jobs_sqnr_metric_name(m.sqnr[i].name, name, sizeof name);
        st = report(ctx, name, m.sqnr[i].sqnr_db, err);
    }
    if (!st && s.reference.path && (s.metrics & QS_METRIC_SQNR))
        st = qw_jobs_compare_weights(ctx, &s, model, err);
    if (!st && method) st = report(ctx, "time_method_s", mi.method_s, err);
    if (!st && method) st = report(ctx, "time_calibration_s", mi.calib_s, err);
    if (!st && method) st = report(ctx, "calibration_tokens", (double)mi.calib_tokens, err);
    if (!st && method)
        st = report(ctx, "calibration_blocks_skipped", (double)mi.calib_blocks_skipped, err);
    if (!st) st = report_times(ctx, model, t_start, load_s, err);
    if (!st) st = qw_jobs_check_model_after(ctx, &s, err);
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
    st = qw_jobs_build_policy(&s, n_layers, out, err);
    if (st) qw_policy_free(out);
    qs_sensitivity_clear(&s);
    return st;
}

qs_status qw_jobs_register(qs_error *err) {
    qs_status st = qw_register_kind("baseline", baseline_job, err);
    return st ? st : qw_register_kind("eval", eval_job, err);
}
