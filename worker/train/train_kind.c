/* The worker's `train` job kind (train_kind.h). */
#include "train_kind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_backend.h"
#include "loop.h"
#include "optim.h"
#include "tokens.h"
#include "train.h"
#include "train_job.h"

static void on_heartbeat(void *u, int step, int total) {
    qw_job_progress(u, (uint64_t)step, (uint64_t)total, "train");
}

static void on_metric(void *u, const char *name, int64_t step, double v) {
    qs_error ignored = {0};
    qw_job_metric(u, name, v, step < 0 ? 0 : step, step < 0, &ignored);
}

static int on_stop(void *u) {
    return qw_job_cancelled(u);
}

/* The recipe from the spec's explicit ingredients (the name is for people). */
static qs_status recipe_of(const qs_train_spec *s, qw_recipe *r, qs_error *err) {
    qs_status st = qw_recipe_by_name(strcmp(s->recipe, "fp32") ? "bf16" : "fp32", r, err);
    char v[16];
    if (!st) st = qw_recipe_set(r, "format", s->format, err);
    snprintf(v, sizeof v, "%d", s->w2d);
    if (!st) st = qw_recipe_set(r, "w2d", v, err);
    snprintf(v, sizeof v, "%d", s->rht);
    if (!st) st = qw_recipe_set(r, "rht", v, err);
    snprintf(v, sizeof v, "%d", s->rht_dim);
    if (!st) st = qw_recipe_set(r, "rht_dim", v, err);
    snprintf(v, sizeof v, "%d", s->sr);
    if (!st) st = qw_recipe_set(r, "sr", v, err);
    snprintf(v, sizeof v, "%d", s->bf16_first);
    if (!st) st = qw_recipe_set(r, "bf16_first", v, err);
    snprintf(v, sizeof v, "%d", s->bf16_last);
    if (!st) st = qw_recipe_set(r, "bf16_last", v, err);
    if (!st) snprintf(r->name, sizeof r->name, "%s", s->recipe);
    if (!st && s->recipe_version != QW_RECIPE_VERSION)
        st = qs_error_set(err, QS_EUNSUPPORTED, "recipe %s version %d: this worker has version %d",
                          s->recipe, s->recipe_version, QW_RECIPE_VERSION);
    return st;
}

static qs_status train_job(qw_job_ctx *ctx, qs_error *err) {
    qs_train_spec s;
    qs_status st = qs_train_decode(qw_job_spec(ctx), &s, err);
    if (st) return st;
    qw_train_spec t;
    memset(&t, 0, sizeof t);
    qw_checkpoint *ck = NULL;
    char fallback[sizeof((qw_jobs_backend){0}).fallback_code] = "";
    if (s.shape[0]) {
        st = qw_train_shape_by_name(s.shape, &t.shape, err);
    } else {
        snprintf(t.init_path, sizeof t.init_path, "%s", s.init.path);
        st = qw_checkpoint_open(s.init.path, &ck, err);
        if (!st) t.shape = *qw_checkpoint_config(ck);
        qw_checkpoint_close(ck);
    }
    if (!st) st = recipe_of(&s, &t.recipe, err);
    qw_lr_decay decay = QW_DECAY_COSINE;
    if (!st) st = qw_lr_decay_by_name(s.decay, &decay, err);
    uint32_t *ids = NULL;
    size_t n = 0;
    qw_tokens tok = {0};
    if (!st && !strcmp(s.tokenizer, "bytes")) {
        st = qw_bytes_tokenize_file(s.dataset.path, &ids, &n, err);
    } else if (!st) {
        st = qw_tokens_load(s.dataset.path, &tok, err);
        ids = tok.ids;
        n = tok.n;
        tok.ids = NULL;
    }
    if (!st) {
        t.train.steps = s.steps;
        t.train.accum = s.accum;
        t.train.sched = (qw_lr_schedule){(float)s.lr, (float)s.min_lr, s.warmup, s.steps, decay};
        t.train.adamw = (qw_adamw){(float)s.beta1, (float)s.beta2, 1e-8f, (float)s.weight_decay};
        t.train.clip = (float)s.clip;
        t.train.eval_every = s.eval_every;
        t.train.eval_batches = s.eval_batches;
        t.train.diverge_loss = s.diverge_loss;
        t.batch = s.batch;
        t.ctx = s.dataset.ctx;
        t.seed = (uint64_t)s.seed;
        t.val_fraction = s.val_fraction;
        t.log_every = s.log_every;
        t.checkpoint_every = s.checkpoint_every;
        t.threads = qw_job_threads(ctx);
        t.data_parallel = s.data_parallel;
        /* The worker's backend choice (qsweep worker --backend), resolved as for evaluation:
         * CUDA on the first offered GPU when built and chosen (rank r of a data-parallel job
         * on the r-th), else the CPU. */
        qw_jobs_backend bc = qw_jobs_backend_get();
        qw_jobs_backend_use u = qw_jobs_backend_pick(&bc, qw_backend_cuda_built(), false);
        snprintf(fallback, sizeof fallback, "%s", bc.fallback_code);
        t.backend = (qw_backend_choice){.kind = u.use_cuda ? QW_BACKEND_CUDA : QW_BACKEND_CPU,
                                        .device = u.device,
                                        .gemm = u.gemm};
        /* data-parallel CUDA ranks take the worker's offered GPUs in their order: the first k
         * are the ones the scheduler fitted this job on */
        for (int i = 0; u.use_cuda && i < bc.n_devices && i < QW_TRAIN_MAX_RANKS; i++)
            t.devices[t.n_devices++] = bc.devices[i];
        snprintf(t.checkpoint_dir, sizeof t.checkpoint_dir, "%s", s.checkpoint_dir);
        /* Files are named by the job's key: the same job resumes its own checkpoint wherever
         * it runs. */
        st = qs_spec_key(qw_job_spec(ctx), t.job_key, err);
    }
    if (!st) {
        qw_train_hooks h = {on_heartbeat, on_metric, on_stop, ctx};
        qw_train_outcome o;
        st = qw_train_job_run(&t, ids, n, &h, &o, err);
    }
    if (!st && fallback[0]) { /* --backend auto on the CPU, and why, as an eval job says it */
        char name[64];
        snprintf(name, sizeof name, "backend_fallback.%s", fallback);
        st = qw_job_metric(ctx, name, 1.0, 0, true, err);
    }
    free(ids);
    qs_train_clear(&s);
    return st;
}

qs_status qw_train_register(qs_error *err) {
    return qw_register_kind("train", train_job, err);
}
