/* One training run as a job runs it (train_job.h). */
#include "train_job.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <omp.h>

#include "bf16_exact.h"
#include "qk_gemm_path.h"
#include "recipe_path.h"
#include "checkpoint.h"
#include "ckpt.h"
#include "replace_file.h"
#include "hfsave.h"
#include "ops_cuda.h"
#include "synthetic.h"
#include "threads.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

qs_status qw_train_shape_by_name(const char *name, qw_config *out, qs_error *err) {
    const qw_synthetic_shape *sh = qw_synthetic_shape_by_name(name);
    if (sh) {
        *out = sh->cfg;
        return QS_OK;
    }
    size_t n;
    const qw_synthetic_shape *all = qw_synthetic_shapes(&n);
    char list[512] = "";
    for (size_t i = 0; i < n; i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, all[i].name, sizeof list - strlen(list) - 1);
    }
    return qs_error_set(err, QS_EINVAL, "training shape \"%s\": unknown (known: %s)", name, list);
}

/* mkdir -p: path and every missing parent. Errors: QS_EIO naming the folder that failed. */
static qs_status mkdir_p(const char *path, qs_error *err) {
    char p[1024];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return qs_error_set(err, QS_EINVAL, "checkpoint_dir: longer than %zu bytes", sizeof p - 1);
    for (char *c = p + 1;; c++) {
        int end = *c == '\0';
        if (*c == '/' || end) {
            *c = '\0';
            struct stat sb;
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return qs_error_set(err, QS_EIO, "%s: mkdir: %s", p, strerror(errno));
            if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
                return qs_error_set(err, QS_EIO, "%s: not a folder", p);
            if (end) return QS_OK;
            *c = '/';
        }
    }
}

/* The digest of the trained model written at dir (qw_checkpoint_digest, what a sensitivity
 * job computes of the model it loads), into hex and into the record dir + ".digest" (one line,
 * written atomically), which a sensitivity job of a pipeline checks the model it loads against
 * (worker/jobs/jobs.c). Errors: the checkpoint reader's, QS_EIO naming the record. */
static qs_status record_digest(const char *dir, char hex[65], qs_error *err) {
    qw_checkpoint *ck = NULL;
    qs_status st = qw_checkpoint_open(dir, &ck, err);
    if (st == QS_OK) st = qw_checkpoint_digest(ck, hex, err);
    qw_checkpoint_close(ck);
    char path[2300];
    snprintf(path, sizeof path, "%s.digest", dir);
    qs_replace_file r;
    if (st == QS_OK) st = qs_replace_file_open(path, NULL, &r, err);
    if (st == QS_OK) {
        if (fprintf(r.f, "%s\n", hex) < 0) {
            qs_replace_file_abort(&r);
            return qs_error_set(err, QS_EIO, "%s: write: %s", path, strerror(errno));
        }
        st = qs_replace_file_commit(&r, err);
    }
    return st;
}

static void emit(const qw_train_hooks *h, const char *name, int64_t step, double v) {
    if (h && h->metric) h->metric(h->user, name, step, v);
}

/* A curve point: reported, and kept for the checkpoints (ckpt.h: a resumed attempt reports the
 * history again). */
static qs_status point(const qw_train_hooks *h, qw_train_history *hist, const char *name,
                       int64_t step, double v, qs_error *err) {
    emit(h, name, step, v);
    return qw_train_history_add(hist, name, step, v, err);
}

qs_status qw_train_rank_devices(const qw_train_spec *spec, int R, int *out, qs_error *err) {
    if (R < 1 || R > QW_TRAIN_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "data_parallel %d: 1 to %d ranks", R,
                            QW_TRAIN_MAX_RANKS);
    for (int r = 0; r < R; r++)
        out[r] = -1;
    if (spec->backend.kind != QW_BACKEND_CUDA) return QS_OK;
    int n = spec->n_devices;
    if (n <= 0) {
        for (int r = 0; r < R; r++)
            out[r] = spec->backend.device + r;
        return QS_OK;
    }
    if (n < R)
        return qs_error_set(err, QS_EINVAL,
                            "data_parallel %d needs %d GPUs: the worker offers %d for the job", R,
                            R, n);
    for (int r = 0; r < R; r++) {
        int d = spec->devices[r];
        if (d < 0) return qs_error_set(err, QS_EINVAL, "GPU %d of the job: ordinal %d", r, d);
        for (int j = 0; j < r; j++)
            if (out[j] == d)
                return qs_error_set(err, QS_EINVAL, "GPUs %d and %d of the job are both device %d",
                                    j, r, d);
        out[r] = d;
    }
    return QS_OK;
}

qs_status qw_train_job_run(const qw_train_spec *spec, const uint32_t *tokens, size_t n,
                           const qw_train_hooks *hooks, qw_train_outcome *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    double t0 = now_s();
    const qw_config *c = &spec->shape;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= (uint32_t)c->vocab_size)
            return qs_error_set(err, QS_EINVAL, "training data: token %u at index %zu >= vocab %d",
                                tokens[i], i, c->vocab_size);
    if (spec->ctx > c->max_seq_len)
        return qs_error_set(err, QS_EINVAL, "ctx %d > the model's max_position_embeddings %d",
                            spec->ctx, c->max_seq_len);
    if (c->dim > 0 && c->n_layers > 0 && spec->batch > 0 && spec->ctx > 0) {
        /* The one allocation is zeroed at once: one larger than the machine's memory would
         * be killed by the kernel rather than fail. */
        size_t np = 0, need = 0;
        qw_tmodel_plan(c, spec->batch, spec->ctx, spec->threads, &np, &need);
        if (spec->data_parallel > 1) need *= (size_t)spec->data_parallel; /* one per rank */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        double have = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
        if (have > 0 && (double)need > have)
            return qs_error_set(err, QS_ENOMEM,
                                "training %zu parameters at batch %d x ctx %d needs %.1f GiB "
                                "(FP32 weights, gradients, AdamW moments, activations); this "
                                "machine has %.1f GiB",
                                np, spec->batch, spec->ctx, (double)need / 1073741824.0,
                                have / 1073741824.0);
    }
    int R = spec->data_parallel > 1 ? spec->data_parallel : 1;
    if (R > QW_TRAIN_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "data_parallel %d: at most %d ranks", R,
                            QW_TRAIN_MAX_RANKS);
    /* One backend and one model replica per rank; CUDA ranks on the job's GPUs
     * (qw_train_rank_devices), CPU ranks each the whole team (they run in lockstep, one at a
     * time). */
    qw_backend be[QW_TRAIN_MAX_RANKS];
    qw_tmodel *models[QW_TRAIN_MAX_RANKS] = {0};
    memset(be, 0, sizeof be);
    qw_backend_choice bc = spec->backend;
    if (bc.kind != QW_BACKEND_CUDA) bc.kind = QW_BACKEND_CPU;
    bc.threads = spec->threads > 0 ? spec->threads : qs_default_threads();
    bc.max_in = 1;
    /* the CPU backend runs its own OpenMP team: OpenBLAS's pool would fight it for the cores */
    if (bc.kind == QW_BACKEND_CPU) openblas_set_num_threads(1);
    int devices[QW_TRAIN_MAX_RANKS];
    qw_train_spec rs = *spec;
    rs.backend = bc;
    qs_status st = qw_train_rank_devices(&rs, R, devices, err);
    int n_be = 0;
    for (; n_be < R && st == QS_OK; n_be++) {
        qw_backend_choice br = bc;
        if (bc.kind == QW_BACKEND_CUDA) br.device = devices[n_be];
        /* the ranks run concurrently (trainer.c): each CPU rank gets its share of the threads */
        br.threads = bc.threads / R + (n_be < bc.threads % R);
        if (br.threads < 1) br.threads = 1;
        st = qw_backend_open(&be[n_be], &br, err);
        if (st != QS_OK) st = qs_error_wrap(err, "training backend of rank %d", n_be);
    }
    qw_group group = {0};
    if (st == QS_OK && R > 1)
        st = bc.kind == QW_BACKEND_CUDA ? qw_group_nccl(&group, R, devices, err)
                                        : qw_group_cpu(&group, R, bc.threads, err);
    qw_tmodel *m = NULL;
    qw_checkpoint *ck = NULL;
    double earlier_s = 0;
    qw_data d = {0};
    qw_trainer tr = {0};
    qw_train_history hist = {0};
    int have_data = 0, have_tr = 0;
    for (int r = 0; r < R && st == QS_OK; r++)
        st = qw_tmodel_create_on(c, spec->batch, spec->ctx, &be[r], &models[r], err);
    m = models[0];
    if (st == QS_OK) {
        if (spec->init_path[0]) {
            st = qw_checkpoint_open(spec->init_path, &ck, err);
            if (st == QS_OK) st = qw_tmodel_load(m, ck, err);
        } else {
            st = qw_tmodel_init_random(m, spec->seed, spec->init_std > 0 ? spec->init_std : 0.02f,
                                       err);
        }
    }
    for (int r = 0; r < R && st == QS_OK; r++) {
        st = qw_tmodel_set_recipe(models[r], &spec->recipe, spec->seed, err);
        /* $QSWEEP_CUDA_GEMM=fp32 asks FP32 of every GEMM, the linears' BF16-exact ones too */
        qw_tmodel_set_gemm_fp32(models[r],
                                bc.kind == QW_BACKEND_CUDA && bc.gemm == QW_CUDA_GEMM_FP32);
    }
    if (st == QS_OK) {
        st = qw_data_init(&d, tokens, n, spec->val_fraction, spec->ctx, spec->seed, err);
        have_data = st == QS_OK;
    }
    if (st == QS_OK) {
        /* the replicas start from rank 0's parameters */
        st = qw_trainer_create_dp(&tr, models, R, R > 1 ? &group : NULL, &d, &spec->train,
                                  spec->threads, err);
        have_tr = st == QS_OK;
    }
    char ckpt[2200] = "", final_dir[2200] = "";
    if (st == QS_OK && spec->checkpoint_dir[0]) {
        st = mkdir_p(spec->checkpoint_dir, err);
        snprintf(ckpt, sizeof ckpt, "%s/%s.ckpt", spec->checkpoint_dir, spec->job_key);
        /* temporaries of this job's checkpoint left by a worker killed mid-write (this
           attempt is the job's only writer now) */
        if (st == QS_OK) qs_replace_file_sweep(ckpt, NULL);
        snprintf(final_dir, sizeof final_dir, "%s/%s", spec->checkpoint_dir, spec->job_key);
        if (st == QS_OK) {
            qs_error e2 = {0};
            qs_status ls = qw_train_checkpoint_load(ckpt, &tr, spec->job_key, &hist, &e2);
            if (ls == QS_OK) {
                out->resumed_from = tr.step;
                st = qw_trainer_sync_replicas(&tr, err); /* the checkpoint holds rank 0's */
            } else if (ls == QS_EFORMAT) {
                /* A damaged checkpoint (a checksum mismatch, a truncated file) would fail every
                 * attempt: keep it aside for inspection and train from step 0 (tr and hist are
                 * unchanged by the failed load: ckpt.h). */
                char aside[2300];
                snprintf(aside, sizeof aside, "%s.damaged", ckpt);
                if (rename(ckpt, aside) != 0)
                    st = qs_error_set(err, QS_EIO, "resume: %s; moving it to %s: %s", e2.msg, aside,
                                      strerror(errno));
                else {
                    fprintf(stderr,
                            "warning: training checkpoint damaged (%s): moved to %s, training "
                            "again from step 0\n",
                            e2.msg, aside);
                    out->damaged_restart = 1;
                }
            } else if (ls != QS_ENOTFOUND) {
                st = qs_error_set(err, ls, "resume: %s", e2.msg);
            }
        }
    }
    /* A resumed attempt reports the curve up to its checkpoint again: points the killed
     * attempt reported may not have reached the coordinator (ckpt.h). */
    for (size_t i = 0; st == QS_OK && i < hist.n; i++)
        emit(hooks, hist.points[i].name, hist.points[i].step, hist.points[i].value);
    earlier_s = hist.wall_s; /* earlier attempts, up to the checkpoint resumed from */
    int log_every = spec->log_every > 0 ? spec->log_every : 1;
    int total = spec->train.steps;
    while (st == QS_OK && tr.step < total) {
        qw_step_metrics mt;
        st = qw_trainer_step(&tr, &mt, err);
        if (st != QS_OK) {
            if (tr.diverged) out->diverged_step = tr.diverged_step;
            break;
        }
        if (mt.step % log_every == 0 || mt.step == total) {
            st = point(hooks, &hist, "train_loss", mt.step, mt.train_loss, err);
            if (st == QS_OK) st = point(hooks, &hist, "lr", mt.step, mt.lr, err);
            if (st == QS_OK) st = point(hooks, &hist, "grad_norm", mt.step, mt.grad_norm, err);
            if (st == QS_OK)
                st = point(hooks, &hist, "tokens_per_s", mt.step, mt.tokens_per_s, err);
            if (st != QS_OK) break;
        }
        out->final_train_loss = mt.train_loss;
        if (spec->train.eval_every > 0 && mt.step % spec->train.eval_every == 0 &&
            d.n_val_windows > 0) {
            double vl;
            st = qw_trainer_validate(&tr, &vl, err);
            if (st != QS_OK) break;
            st = point(hooks, &hist, "val_loss", mt.step, vl, err);
            if (st != QS_OK) break;
        }
        if (hooks && hooks->heartbeat) hooks->heartbeat(hooks->user, mt.step, total);
        int stop = hooks && hooks->stop_requested && hooks->stop_requested(hooks->user);
        int periodic = spec->checkpoint_every > 0 && mt.step % spec->checkpoint_every == 0;
        if (ckpt[0] && (stop || periodic) && mt.step < total) {
            hist.wall_s = earlier_s + (now_s() - t0);
            st = qw_train_checkpoint_save(ckpt, &tr, spec->job_key, &hist, err);
        }
        if (st == QS_OK && stop && mt.step < total) {
            out->preempted = 1;
            st = qs_error_set(err, QS_ECANCELLED, "preempted at step %d of %d (checkpoint %s)",
                              mt.step, total, ckpt[0] ? ckpt : "none");
        }
    }
    out->steps_done = tr.step;
    if (st == QS_OK) {
        double vl = NAN;
        if (d.n_val_windows > 0) st = qw_trainer_validate(&tr, &vl, err);
        out->final_val_loss = vl;
        if (st == QS_OK && final_dir[0]) st = qw_tmodel_save_hf(m, final_dir, err);
        char digest[65] = "";
        if (st == QS_OK && final_dir[0]) st = record_digest(final_dir, digest, err);
        /* The final weights are written (hfsave.h writes atomically): the checkpoint (about 12
         * bytes per parameter) is no longer needed. Should the results not reach the
         * coordinator, the job runs again from step 0 to the same bit-identical result. */
        if (st == QS_OK && ckpt[0] && unlink(ckpt) != 0 && errno != ENOENT)
            st = qs_error_set(err, QS_EIO, "%s: remove the finished run's checkpoint: %s", ckpt,
                              strerror(errno));
        if (st == QS_OK) {
            emit(hooks, "final_train_loss", -1, tr.last_loss);
            if (isfinite(vl)) {
                emit(hooks, "final_val_loss", -1, vl);
                emit(hooks, "val_ppl", -1, exp(vl));
            }
            emit(hooks, "tokens_seen", -1, (double)tr.tokens_seen);
            emit(hooks, "resumed_from_step", -1, (double)out->resumed_from);
            /* the GEMM path: the CPU's as the backend names it; on a GPU the linears' own (their
             * GEMMs run BF16 or FP32 by the recipe, bf16_exact.h), with the counts */
            int n_bf16, n_fp32, linears;
            qw_tmodel_gemm_paths(models[0], &n_bf16, &n_fp32);
            const char *path =
                qw_train_gemm_path(qw_backend_gemm_path_name(&be[0]), n_fp32, &linears);
            char gp[128];
            if (linears) {
                emit(hooks, "gemm_bf16_count", -1, n_bf16);
                emit(hooks, "gemm_fp32_count", -1, n_fp32);
                /* per GEMM kind the paths its GEMMs ran ("gemm_kind_path.<kind>.<path>" = 1: apart
                   from gemm_path., which the results views read as one path) (recipe_path.h:
                   native_fp4 or emulated_bf16 where the backend quantizes along K itself), and the
                   whole step's path from them */
                unsigned ran[QW_N_LINEAR_GEMMS], all = 0;
                qw_tmodel_gemm_ran(models[0], ran);
                for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
                    all |= ran[g];
                    for (int p = 0; p <= QK_GEMM_PATH_FP32; p++)
                        if (ran[g] & (1u << p)) {
                            snprintf(gp, sizeof gp, "gemm_kind_path.%s.%s",
                                     qw_linear_gemm_name((qw_linear_gemm)g),
                                     qk_gemm_path_name((qk_gemm_path)p));
                            emit(hooks, gp, -1, 1);
                        }
                }
                if (all) path = qw_train_ran_path(all);
            }
            snprintf(gp, sizeof gp, "gemm_path.%s", path);
            emit(hooks, gp, -1, 1);
            /* on the CPU also the BLAS and kernel family its GEMMs ran on (ops.h
             * qw_backend_cpu_path), as eval jobs record it (worker/jobs/jobs.c): the losses
             * differ in the last bits between families (v_numerics_path) */
            if (bc.kind == QW_BACKEND_CPU) {
                snprintf(gp, sizeof gp, "cpu_path.%s", qw_backend_cpu_path());
                emit(hooks, gp, -1, 1);
            }
            if (out->damaged_restart) emit(hooks, "ckpt_damaged", -1, 1);
            /* the exported model's digest, as gemm_path: a name of value 1 */
            if (digest[0]) {
                char dn[96];
                snprintf(dn, sizeof dn, "model_digest.%s", digest);
                emit(hooks, dn, -1, 1);
            }
            /* where this attempt's time went (tprofile.h), rank 0's model: wall seconds
               recorded for profiling, as an eval job's time_<phase>_s (no table reads them) */
            const qw_tprofile *pf = qw_tmodel_profile(m);
            for (int i = 0; i < QW_TPHASES; i++) {
                char tn[64];
                snprintf(tn, sizeof tn, "time_%s_s", qw_tphase_name((qw_tphase)i));
                emit(hooks, tn, -1, pf->s[i]);
            }
            emit(hooks, "wall_s", -1, earlier_s + (now_s() - t0));
        }
    }
    qw_train_history_free(&hist);
    if (have_tr) qw_trainer_free(&tr);
    if (have_data) qw_data_free(&d);
    for (int r = 0; r < R; r++)
        qw_tmodel_destroy(models[r]);
    qw_group_destroy(&group);
    for (int r = 0; r < n_be; r++)
        qw_backend_close(&be[r]);
    qw_checkpoint_close(ck);
    return st;
}
