/* A training run as a job runs it (worker/train/train_job.h):
 * - a run stopped on request (SIGTERM's path) checkpoints, reports preempted with its step,
 *   and when run again resumes from that step and ends with a final Hugging Face checkpoint
 *   byte-identical to an uninterrupted run's;
 * - curve points, validation points, heartbeats and final metrics reach the hooks; a resumed
 *   run reports the curve up to its checkpoint again, and its wall_s sums the attempts;
 * - a diverging run stops with its step, sends no final metrics and writes no final checkpoint;
 * - the bytes tokenizer and the named shapes (the engine's table, worker/engine/synthetic.h:
 *   micro trains here; llama2-7b and llama3-8b are planned with their published parameter
 *   counts and, where they do not fit in memory, refused before allocating). Data: this
 * repository's README.md, real English text, through the bytes tokenizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmodel.h"
#include "train_job.h"

static char dir[256];
static uint32_t *ids;
static size_t n_ids;

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/qsweep_train_job_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    qs_error err = {0};
    if (qw_bytes_tokenize_file(QW_SOURCE_DIR "/README.md", &ids, &n_ids, &err) != QS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **s) {
    (void)s;
    free(ids);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct pt {
    char name[16];
    int64_t step;
    double value;
} pt;

typedef struct record {
    int heartbeats, last_hb, total;
    int curve, val, finals, stop_at;
    double final_val, wall_s;
    int times;       /* final metrics time_<phase>_s (tprofile.h), not counted in finals */
    double time_sum; /* their sum */
    pt pts[256]; /* curve points as a store keeps them: one per (name, step), the latest */
    int n_pts, resent;
    double damaged;     /* the final metric ckpt_damaged, 0 when not sent */
    char digest[65];    /* the hex of the final metric model_digest.<hex> ("" when not sent) */
    char cpu_path[128]; /* the final metric cpu_path.<path> ("" when not sent) */
} record;

static void on_hb(void *u, int step, int total) {
    record *r = u;
    r->heartbeats++;
    r->last_hb = step;
    r->total = total;
}
static void on_metric(void *u, const char *name, int64_t step, double v) {
    record *r = u;
    if (step >= 0) {
        int k = 0;
        while (k < r->n_pts && !(r->pts[k].step == step && !strcmp(r->pts[k].name, name)))
            k++;
        if (k == r->n_pts) {
            assert_true(r->n_pts < 256);
            snprintf(r->pts[k].name, sizeof r->pts[k].name, "%s", name);
            r->pts[k].step = step;
            r->n_pts++;
        } else {
            r->resent++;
        }
        r->pts[k].value = v;
    }
    if (step < 0 && !strncmp(name, "time_", 5)) {
        r->times++;
        r->time_sum += v;
        assert_true(v >= 0);
    } else if (step < 0) {
        r->finals++;
        if (!strcmp(name, "final_val_loss")) r->final_val = v;
        if (!strcmp(name, "wall_s")) r->wall_s = v;
        if (!strcmp(name, "ckpt_damaged")) r->damaged = v;
        if (!strncmp(name, "model_digest.", 13))
            snprintf(r->digest, sizeof r->digest, "%s", name + 13);
        if (!strncmp(name, "cpu_path.", 9)) snprintf(r->cpu_path, sizeof r->cpu_path, "%s", name);
    } else if (!strcmp(name, "val_loss")) {
        r->val++;
    } else {
        r->curve++;
    }
    assert_true(isfinite(v));
}
static int on_stop(void *u) {
    record *r = u;
    return r->stop_at > 0 && r->last_hb == r->stop_at;
}

static qw_train_spec spec_for(const char *key, float lr) {
    qw_train_spec s;
    memset(&s, 0, sizeof s);
    assert_int_equal(qw_train_shape_by_name("micro", &s.shape, NULL), QS_OK);
    assert_int_equal(qw_recipe_by_name("nvfp4", &s.recipe, NULL), QS_OK);
    s.train.steps = 8;
    s.train.accum = 1;
    s.train.sched = (qw_lr_schedule){lr, lr * 0.1f, 2, 8, QW_DECAY_COSINE};
    s.train.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    s.train.clip = 1.0f;
    s.train.eval_every = 4;
    s.train.eval_batches = 2;
    s.train.diverge_loss = 30;
    s.batch = 2;
    s.ctx = 32;
    s.seed = 3;
    s.val_fraction = 0.1;
    s.log_every = 2;
    s.checkpoint_every = 3;
    s.threads = 2;
    snprintf(s.checkpoint_dir, sizeof s.checkpoint_dir, "%s", dir);
    snprintf(s.job_key, sizeof s.job_key, "%s", key);
    return s;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void stopped_run_resumes_to_identical_weights(void **s) {
    (void)s;
    qs_error err = {0};
    qw_train_outcome o;
    record ra = {0};
    qw_train_hooks ha = {on_hb, on_metric, on_stop, &ra};
    qw_train_spec a = spec_for("straight", 3e-3f);
    if (qw_train_job_run(&a, ids, n_ids, &ha, &o, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(o.steps_done, 8);
    assert_int_equal(o.resumed_from, 0);
    assert_int_equal(ra.heartbeats, 8);
    assert_int_equal(ra.total, 8);
    assert_int_equal(ra.curve, 4 * 4); /* steps 2, 4, 6, 8 x 4 metrics */
    assert_int_equal(ra.val, 2);       /* steps 4, 8 */
    assert_int_equal(ra.finals, 9);    /* model_digest.<hex> and cpu_path.<path> among them */
    /* and where its time went: every phase of the profile once, within the run's wall time */
    assert_int_equal(ra.times, QW_TPHASES);
    assert_true(ra.time_sum > 0 && ra.time_sum <= ra.wall_s);
    /* a CPU run records its BLAS and kernel family, as eval jobs do (ops.h) */
    char want_path[128];
    snprintf(want_path, sizeof want_path, "cpu_path.%s", qw_backend_cpu_path());
    assert_string_equal(ra.cpu_path, want_path);
    printf("final validation loss after 8 steps: %.4f\n", ra.final_val);

    record rb = {0};
    rb.stop_at = 5;
    qw_train_hooks hb = {on_hb, on_metric, on_stop, &rb};
    qw_train_spec b = spec_for("stopped", 3e-3f);
    assert_int_equal(qw_train_job_run(&b, ids, n_ids, &hb, &o, &err), QS_ECANCELLED);
    assert_non_null(strstr(err.msg, "preempted at step 5"));
    assert_int_equal(o.preempted, 1);
    assert_int_equal(rb.finals, 0);
    rb.stop_at = 0;
    assert_int_equal(qw_train_job_run(&b, ids, n_ids, &hb, &o, &err), QS_OK);
    assert_int_equal(o.resumed_from, 5);
    assert_int_equal(o.steps_done, 8);
    assert_int_equal(rb.finals, 9);
    assert_true(rb.final_val == ra.final_val);
    /* the exported model's digest, reported and recorded beside it (read by a pipeline's
       sweep, worker/jobs/jobs.c): equal weights, equal digests */
    assert_int_equal(strlen(ra.digest), 64);
    assert_string_equal(ra.digest, rb.digest);
    char rec[400];
    snprintf(rec, sizeof rec, "%s/straight.digest", dir);
    size_t nr;
    unsigned char *text = slurp(rec, &nr);
    assert_int_equal(nr, 65);
    assert_memory_equal(text, ra.digest, 64);
    free(text);
    char pa[400], pb[400];
    snprintf(pa, sizeof pa, "%s/straight/model.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/stopped/model.safetensors", dir);
    size_t na, nb;
    unsigned char *fa = slurp(pa, &na), *fb = slurp(pb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(fa, fb, na);
    free(fa);
    free(fb);
}

static void assert_same_file(const char *pa, const char *pb) {
    size_t na, nb;
    unsigned char *fa = slurp(pa, &na), *fb = slurp(pb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(fa, fb, na);
    free(fa);
    free(fb);
}

/* A finished run deletes its checkpoint once the final weights are written, and running the
 * finished job again (its results lost on the way) trains it again to the same weights. */
static void finished_run_deletes_its_checkpoint_and_runs_again(void **s) {
    (void)s;
    qs_error err = {0};
    qw_train_outcome o;
    record r = {0};
    qw_train_hooks h = {on_hb, on_metric, on_stop, &r};
    qw_train_spec a = spec_for("finished", 3e-3f);
    char ck[400], w[400], ref[400];
    snprintf(ck, sizeof ck, "%s/finished.ckpt", dir);
    snprintf(w, sizeof w, "%s/finished/model.safetensors", dir);
    snprintf(ref, sizeof ref, "%s/straight/model.safetensors", dir);
    r.stop_at = 5;
    assert_int_equal(qw_train_job_run(&a, ids, n_ids, &h, &o, &err), QS_ECANCELLED);
    assert_int_equal(access(ck, F_OK), 0); /* a preempted run keeps it */
    r.stop_at = 0;
    if (qw_train_job_run(&a, ids, n_ids, &h, &o, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(o.resumed_from, 5);
    assert_int_not_equal(access(ck, F_OK), 0);
    assert_int_equal(errno, ENOENT);
    assert_same_file(w, ref);
    memset(&r, 0, sizeof r);
    if (qw_train_job_run(&a, ids, n_ids, &h, &o, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(o.resumed_from, 0);
    assert_int_equal(o.steps_done, 8);
    assert_int_equal(r.finals, 9);
    assert_int_not_equal(access(ck, F_OK), 0);
    assert_same_file(w, ref);
}

/* A damaged checkpoint (one byte flipped: a checksum mismatch) is moved aside to
 * <key>.ckpt.damaged and the run trains again from step 0, to the uninterrupted run's weights,
 * saying so in its final metric ckpt_damaged and its outcome. */
static void damaged_checkpoint_is_moved_aside_and_the_run_restarts(void **s) {
    (void)s;
    qs_error err = {0};
    qw_train_outcome o;
    record r = {0};
    qw_train_hooks h = {on_hb, on_metric, on_stop, &r};
    qw_train_spec a = spec_for("damaged", 3e-3f);
    char ck[400], aside[400], w[400], ref[400];
    snprintf(ck, sizeof ck, "%s/damaged.ckpt", dir);
    snprintf(aside, sizeof aside, "%s/damaged.ckpt.damaged", dir);
    snprintf(w, sizeof w, "%s/damaged/model.safetensors", dir);
    snprintf(ref, sizeof ref, "%s/straight/model.safetensors", dir);
    r.stop_at = 5;
    assert_int_equal(qw_train_job_run(&a, ids, n_ids, &h, &o, &err), QS_ECANCELLED);
    size_t n;
    unsigned char *b = slurp(ck, &n);
    b[n / 2] ^= 0x40;
    FILE *f = fopen(ck, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    memset(&r, 0, sizeof r);
    if (qw_train_job_run(&a, ids, n_ids, &h, &o, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(o.resumed_from, 0);
    assert_int_equal(o.damaged_restart, 1);
    assert_int_equal(o.steps_done, 8);
    assert_true(r.damaged == 1);
    assert_int_equal(r.finals, 10);    /* ckpt_damaged too */
    assert_int_equal(r.heartbeats, 8); /* every step again */
    size_t na;
    unsigned char *kept = slurp(aside, &na); /* the damaged file, as it was */
    assert_int_equal(na, n);
    assert_memory_equal(kept, b, n);
    free(kept);
    free(b);
    assert_int_not_equal(access(ck, F_OK), 0);
    assert_same_file(w, ref);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A resumed attempt reports again every curve point up to its checkpoint (the points a killed
 * worker had not yet sent are not lost): kept as a store keeps them (the latest value per
 * metric and step), the curve of a run stopped at step 5 and resumed equals, point for point
 * and bit for bit, the uninterrupted run's. The resumed run's wall_s adds the first attempt's
 * seconds: more than the second attempt alone took, at most what both took. */
static void resumed_run_reports_the_whole_curve_once_and_sums_its_time(void **s) {
    (void)s;
    qs_error err = {0};
    qw_train_outcome o;
    static record ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    qw_train_hooks ha = {on_hb, on_metric, on_stop, &ra};
    qw_train_spec a = spec_for("curve-straight", 3e-3f);
    a.log_every = 1;
    if (qw_train_job_run(&a, ids, n_ids, &ha, &o, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(ra.n_pts, 8 * 4 + 2); /* 4 metrics every step, val_loss at 4 and 8 */
    assert_int_equal(ra.resent, 0);
    rb.stop_at = 5;
    qw_train_hooks hb = {on_hb, on_metric, on_stop, &rb};
    qw_train_spec b = spec_for("curve-stopped", 3e-3f);
    b.log_every = 1;
    double t0 = now_s();
    assert_int_equal(qw_train_job_run(&b, ids, n_ids, &hb, &o, &err), QS_ECANCELLED);
    double t1 = now_s();
    int before = rb.n_pts;
    assert_int_equal(before, 5 * 4 + 1);
    rb.stop_at = 0;
    assert_int_equal(qw_train_job_run(&b, ids, n_ids, &hb, &o, &err), QS_OK);
    double t2 = now_s();
    assert_int_equal(o.resumed_from, 5);
    assert_int_equal(rb.resent, before); /* every point up to the checkpoint, once more */
    assert_int_equal(rb.n_pts, ra.n_pts);
    for (int i = 0; i < ra.n_pts; i++) {
        int k = 0;
        while (k < rb.n_pts &&
               !(rb.pts[k].step == ra.pts[i].step && !strcmp(rb.pts[k].name, ra.pts[i].name)))
            k++;
        assert_true(k < rb.n_pts);
        /* tokens/s is a speed, not a result */
        if (strcmp(ra.pts[i].name, "tokens_per_s"))
            assert_memory_equal(&rb.pts[k].value, &ra.pts[i].value, sizeof(double));
    }
    printf("wall_s %.3f: attempt 1 took %.3f s, attempt 2 %.3f s\n", rb.wall_s, t1 - t0, t2 - t1);
    assert_true(rb.wall_s > t2 - t1);
    assert_true(rb.wall_s <= t2 - t0);
}

/* checkpoint_dir is created with its missing parents (the grid checked it could be); a
 * regular file in the way is refused naming it, before any step. */
static void checkpoint_dir_is_created_with_its_parents(void **s) {
    (void)s;
    qs_error err = {0};
    qw_train_outcome o;
    qw_train_spec sp = spec_for("nested", 3e-3f);
    sp.train.steps = 2;
    sp.train.sched.total = 2;
    sp.train.sched.warmup = 0;
    snprintf(sp.checkpoint_dir, sizeof sp.checkpoint_dir, "%s/a/b/c", dir);
    if (qw_train_job_run(&sp, ids, n_ids, NULL, &o, &err) != QS_OK) fail_msg("%s", err.msg);
    char p[400];
    snprintf(p, sizeof p, "%s/a/b/c/nested/model.safetensors", dir);
    assert_int_equal(access(p, R_OK), 0);
    snprintf(p, sizeof p, "%s/file", dir);
    FILE *f = fopen(p, "w");
    fclose(f);
    snprintf(sp.checkpoint_dir, sizeof sp.checkpoint_dir, "%s/file/sub", dir);
    assert_int_equal(qw_train_job_run(&sp, ids, n_ids, NULL, &o, &err), QS_EIO);
    assert_non_null(strstr(err.msg, p));
    assert_int_equal(o.steps_done, 0);
}

static void diverging_run_reports_its_step_and_no_results(void **s) {
    (void)s;
    qs_error err = {0};
    qw_train_outcome o;
    record r = {0};
    qw_train_hooks h = {on_hb, on_metric, on_stop, &r};
    qw_train_spec sp = spec_for("diverging", 1e4f);
    sp.train.sched.warmup = 0;
    sp.train.clip = 0;
    sp.recipe.sr = 0;
    assert_int_equal(qw_train_job_run(&sp, ids, n_ids, &h, &o, &err), QS_ESTATE);
    assert_non_null(strstr(err.msg, "diverged at step"));
    assert_true(o.diverged_step >= 2 && o.diverged_step <= 8);
    assert_int_equal(r.finals, 0);
    char p[400];
    snprintf(p, sizeof p, "%s/diverging/model.safetensors", dir);
    assert_int_equal(access(p, F_OK), -1);
}

static void bytes_tokenizer_and_shapes(void **s) {
    (void)s;
    char p[400];
    snprintf(p, sizeof p, "%s/hi.txt", dir);
    FILE *f = fopen(p, "wb");
    fputs("Hi\xc3\xa9", f);
    fclose(f);
    uint32_t *t;
    size_t n;
    qs_error err = {0};
    assert_int_equal(qw_bytes_tokenize_file(p, &t, &n, &err), QS_OK);
    assert_int_equal(n, 5);
    const uint32_t want[5] = {256, 72, 105, 0xc3, 0xa9};
    assert_memory_equal(t, want, sizeof want);
    free(t);
    assert_int_equal(qw_bytes_tokenize_file("/nonexistent/x", &t, &n, &err), QS_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/x"));
    qw_config c;
    assert_int_equal(qw_train_shape_by_name("tiny", &c, &err), QS_OK);
    assert_int_equal(c.dim, 128);
    assert_int_equal(c.vocab_size, QW_BYTES_VOCAB);
    assert_int_equal(qw_train_shape_by_name("huge", &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "tiny"));
    assert_non_null(strstr(err.msg, "llama3-8b"));
    /* the big shapes are the engine's table's: planned, and refused before any allocation
       where they do not fit (this machine), not killed by the kernel */
    assert_int_equal(qw_train_shape_by_name("llama2-7b", &c, &err), QS_OK);
    assert_int_equal(c.dim, 4096);
    assert_int_equal(c.vocab_size, 32000);
    size_t np, bytes;
    qw_tmodel_plan(&c, 1, 128, 1, &np, &bytes);
    assert_int_equal(np, 6738415616ull); /* meta-llama/Llama-2-7b-hf's parameter count */
    assert_true(bytes >= 16 * np);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if ((double)bytes > (double)pages * (double)psz) {
        qw_train_spec big = spec_for("big", 1e-3f);
        big.shape = c;
        big.batch = 1;
        big.ctx = 128;
        qw_train_outcome ob;
        assert_int_equal(qw_train_job_run(&big, ids, n_ids, NULL, &ob, &err), QS_ENOMEM);
        assert_non_null(strstr(err.msg, "6738415616 parameters"));
        printf("llama2-7b: %s\n", err.msg);
    }
    assert_int_equal(qw_train_shape_by_name("llama3-8b", &c, &err), QS_OK);
    qw_tmodel_plan(&c, 1, 128, 1, &np, &bytes);
    assert_int_equal(np, 8030261248ull); /* meta-llama/Meta-Llama-3-8B's */
    /* the small named shapes train: micro through the table runs in the tests above; its plan
       is what qw_tmodel_create allocates and a recipe that rounds its inputs adds (the GEMM
       input buffers, which an all-FP32 recipe does without) */
    assert_int_equal(qw_train_shape_by_name("micro", &c, &err), QS_OK);
    qw_tmodel_plan(&c, 2, 32, 2, &np, &bytes);
    qw_tmodel *m = NULL;
    assert_int_equal(qw_tmodel_create(&c, 2, 32, 2, &m, &err), QS_OK);
    qw_recipe rc;
    assert_int_equal(qw_recipe_by_name("fp32", &rc, &err), QS_OK);
    assert_int_equal(qw_tmodel_set_recipe(m, &rc, 1, &err), QS_OK);
    size_t fp32_bytes = qw_tmodel_bytes(m);
    assert_true(fp32_bytes < bytes);
    assert_int_equal(qw_recipe_by_name("nvfp4", &rc, &err), QS_OK);
    assert_int_equal(qw_tmodel_set_recipe(m, &rc, 1, &err), QS_OK);
    assert_int_equal(qw_tmodel_bytes(m), bytes);
    assert_int_equal(qw_recipe_by_name("fp32", &rc, &err), QS_OK);
    assert_int_equal(qw_tmodel_set_recipe(m, &rc, 1, &err), QS_OK);
    assert_int_equal(qw_tmodel_bytes(m), fp32_bytes);
    printf("micro B 2 x T 32: %zu bytes under fp32, %zu under nvfp4 (the plan)\n", fp32_bytes,
           bytes);
    assert_int_equal(qw_tmodel_n_params(m), np);
    qw_tmodel_destroy(m);
    /* data beyond the vocabulary is refused before anything runs */
    qw_train_spec sp = spec_for("badvocab", 1e-3f);
    uint32_t bad[100] = {0};
    bad[50] = 300;
    qw_train_outcome o;
    assert_int_equal(qw_train_job_run(&sp, bad, 100, NULL, &o, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "index 50"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stopped_run_resumes_to_identical_weights),
        cmocka_unit_test(resumed_run_reports_the_whole_curve_once_and_sums_its_time),
        cmocka_unit_test(finished_run_deletes_its_checkpoint_and_runs_again),
        cmocka_unit_test(damaged_checkpoint_is_moved_aside_and_the_run_restarts),
        cmocka_unit_test(checkpoint_dir_is_created_with_its_parents),
        cmocka_unit_test(diverging_run_reports_its_step_and_no_results),
        cmocka_unit_test(bytes_tokenizer_and_shapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
