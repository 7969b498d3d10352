/* train_finals: one run of experiments/tiny-fp4-training.yaml's grid point (shape tiny, bytes
 * tokenizer, ctx 128, batch 8, lr 0.003, warmup 15, cosine to 0.1, weight decay 0.1, clip 1,
 * betas 0.9/0.95, eval_every 50 over 8 batches, val_fraction 0.02) through qw_train_job_run, the
 * job's own path, with fewer steps when asked. Prints the final metrics with 17 digits; the
 * final Hugging Face checkpoint goes to <out_dir>/<recipe>-<seed>/ (hash it to compare runs
 * bit for bit).
 * Usage: train_finals <text file> <recipe> <seed> <steps> <out_dir> [threads (2)]
 *        [data_parallel (1)] [accum (1)] [batch (8)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "train_job.h"

static void on_metric(void *u, const char *name, int64_t step, double v) {
    (void)u;
    /* all but the wall times (wall_s, time_<phase>_s) */
    if (step < 0 && strcmp(name, "wall_s") && strncmp(name, "time_", 5))
        printf("%s %.17g\n", name, v);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr,
                "usage: %s text recipe seed steps out_dir [threads] [data_parallel] "
                "[accum] [batch]\n",
                argv[0]);
        return 2;
    }
    qs_error err = {0};
    qw_train_spec t;
    memset(&t, 0, sizeof t);
    uint32_t *ids = NULL;
    size_t n = 0;
    qs_status st = qw_train_shape_by_name("tiny", &t.shape, &err);
    if (!st) st = qw_recipe_by_name(argv[2], &t.recipe, &err);
    if (!st) st = qw_bytes_tokenize_file(argv[1], &ids, &n, &err);
    if (st) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int steps = atoi(argv[4]);
    t.train.steps = steps;
    t.train.accum = argc > 8 ? atoi(argv[8]) : 1;
    t.train.sched = (qw_lr_schedule){0.003f, 0.0003f, 15, steps, QW_DECAY_COSINE};
    t.train.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    t.train.clip = 1.0f;
    t.train.eval_every = 50;
    t.train.eval_batches = 8;
    t.train.diverge_loss = 12.0;
    t.batch = argc > 9 ? atoi(argv[9]) : 8;
    t.ctx = 128;
    t.seed = (uint64_t)atoll(argv[3]);
    t.val_fraction = 0.02;
    t.log_every = 10;
    t.checkpoint_every = 0;
    t.threads = argc > 6 ? atoi(argv[6]) : 2;
    t.data_parallel = argc > 7 ? atoi(argv[7]) : 1;
    snprintf(t.checkpoint_dir, sizeof t.checkpoint_dir, "%s", argv[5]);
    snprintf(t.job_key, sizeof t.job_key, "%s-%s", argv[2], argv[3]);
    qw_train_hooks h = {NULL, on_metric, NULL, NULL};
    qw_train_outcome o;
    st = qw_train_job_run(&t, ids, n, &h, &o, &err);
    free(ids);
    if (st) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}
