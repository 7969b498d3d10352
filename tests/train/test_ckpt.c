/* Checkpoints:
 * - a run checkpointed after 3 steps and resumed in a fresh model and data order ends with
 *   parameters and AdamW moments bit-identical to an uninterrupted run of 6 steps;
 * - a damaged checkpoint (flipped byte, truncated, other identity, other model size, not a
 *   checkpoint) is refused, naming the file and the offset or field, and changes nothing;
 * - the history (curve points reported so far, wall seconds) comes back as saved, and a
 *   point count that does not fit the file is refused naming n_points;
 * - the final Hugging Face checkpoint (config.json + model.safetensors) is read back by
 *   qsweep's own loader bit for bit, and qsweep's inference engine (worker/engine) gives the
 *   same logits as the training forward on it. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckpt.h"
#include "hfsave.h"
#include "model.h"
#include "trainer.h"
#include "small_config.h"

static qw_config cfg(int tied) {
    qw_config c = small_config_of(32, 64, 2, 4, 2, 8, 50);
    c.rope_theta = 500000.0f;
    c.tied_embeddings = tied;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_pos = 8;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

static qw_train_config tcfg(int steps) {
    qw_train_config t = {0};
    t.steps = steps;
    t.accum = 2;
    t.sched.lr = 3e-3f;
    t.sched.min_lr = 3e-4f;
    t.sched.warmup = 2;
    t.sched.decay = QW_DECAY_COSINE;
    t.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    t.clip = 1.0f;
    t.diverge_loss = 50;
    return t;
}

static uint32_t stream[2000];

typedef struct run {
    qw_tmodel *m;
    qw_data d;
    qw_trainer tr;
} run;

static void run_open(run *r, uint64_t init_seed) {
    qw_config c = cfg(0);
    qs_error err = {0};
    assert_int_equal(qw_tmodel_create(&c, 2, 16, 2, &r->m, &err), QS_OK);
    assert_int_equal(qw_tmodel_init_random(r->m, init_seed, 0.05f, &err), QS_OK);
    qw_recipe rc;
    assert_int_equal(qw_recipe_by_name("nvfp4", &rc, &err), QS_OK);
    assert_int_equal(qw_tmodel_set_recipe(r->m, &rc, 77, &err), QS_OK);
    assert_int_equal(qw_data_init(&r->d, stream, 2000, 0.1, 16, 5, &err), QS_OK);
    qw_train_config t = tcfg(6);
    assert_int_equal(qw_trainer_create(&r->tr, r->m, &r->d, &t, 2, &err), QS_OK);
}

static void run_steps(run *r, int until) {
    qs_error err = {0};
    while (r->tr.step < until)
        if (qw_trainer_step(&r->tr, NULL, &err) != QS_OK) fail_msg("%s", err.msg);
}

static void run_close(run *r) {
    qw_trainer_free(&r->tr);
    qw_data_free(&r->d);
    qw_tmodel_destroy(r->m);
}

static char dir[256];

static int setup(void **s) {
    (void)s;
    for (int i = 0; i < 2000; i++)
        stream[i] = (uint32_t)((i * 31 + (i / 7) * 3) % 50);
    snprintf(dir, sizeof dir, "/tmp/qsweep_train_ckpt_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **s) {
    (void)s;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void resume_is_bit_identical(void **s) {
    (void)s;
    char path[300];
    snprintf(path, sizeof path, "%s/run.ckpt", dir);
    qs_error err = {0};
    run a, b, c;
    run_open(&a, 1);
    run_steps(&a, 6);
    run_open(&b, 1);
    run_steps(&b, 3);
    assert_int_equal(qw_train_checkpoint_save(path, &b.tr, "job-abc", NULL, &err), QS_OK);
    run_close(&b);
    run_open(&c, 999); /* other initial weights: the checkpoint must overwrite them all */
    assert_int_equal(qw_train_checkpoint_load(path, &c.tr, "job-abc", NULL, &err), QS_OK);
    assert_int_equal(c.tr.step, 3);
    run_steps(&c, 6);
    size_t n = qw_tmodel_n_params(a.m);
    assert_memory_equal(qw_tmodel_params(a.m), qw_tmodel_params(c.m), n * 4);
    assert_memory_equal(qw_tmodel_moment(a.m, 0), qw_tmodel_moment(c.m, 0), n * 4);
    assert_memory_equal(qw_tmodel_moment(a.m, 1), qw_tmodel_moment(c.m, 1), n * 4);
    assert_int_equal(a.tr.tokens_seen, c.tr.tokens_seen);
    assert_int_equal(a.d.epoch, c.d.epoch);
    assert_int_equal(a.d.pos, c.d.pos);
    run_close(&a);
    run_close(&c);
}

static void write_bytes(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void history_comes_back_as_saved(void **s) {
    (void)s;
    char path[300];
    snprintf(path, sizeof path, "%s/hist.ckpt", dir);
    qs_error err = {0};
    run a;
    run_open(&a, 1);
    run_steps(&a, 2);
    qw_train_history h = {0}, got = {0};
    h.wall_s = 12.5;
    assert_int_equal(qw_train_history_add(&h, "train_loss", 1, 3.25, &err), QS_OK);
    assert_int_equal(qw_train_history_add(&h, "val_loss", 2, 3.0625, &err), QS_OK);
    assert_int_equal(qw_train_history_add(&h, "tokens_per_s", 2, 1e4, &err), QS_OK);
    assert_int_equal(qw_train_history_add(&h, "a_much_too_long_name", 2, 1, &err), QS_EINVAL);
    assert_int_equal(qw_train_checkpoint_save(path, &a.tr, "job-h", &h, &err), QS_OK);
    assert_int_equal(qw_train_history_add(&got, "stale", 9, 9, &err), QS_OK);
    assert_int_equal(qw_train_checkpoint_load(path, &a.tr, "job-h", &got, &err), QS_OK);
    assert_true(got.wall_s == 12.5);
    assert_int_equal(got.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(got.points[i].name, h.points[i].name);
        assert_int_equal(got.points[i].step, h.points[i].step);
        assert_true(got.points[i].value == h.points[i].value);
    }
    /* n_points one more than the file holds */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n);
    assert_int_equal(fread(buf, 1, n, f), n);
    fclose(f);
    size_t at = n - 32 - 3 * 32 - 8; /* u64 n_points */
    assert_int_equal(buf[at], 3);
    buf[at] = 4;
    f = fopen(path, "wb");
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    assert_int_equal(qw_train_checkpoint_load(path, &a.tr, "job-h", &got, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "n_points"));
    assert_int_equal(got.n, 3); /* unchanged */
    free(buf);
    qw_train_history_free(&h);
    qw_train_history_free(&got);
    run_close(&a);
}

static void damaged_checkpoints_are_refused(void **s) {
    (void)s;
    char path[300], bad[300];
    snprintf(path, sizeof path, "%s/good.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    qs_error err = {0};
    run a;
    run_open(&a, 1);
    run_steps(&a, 2);
    assert_int_equal(qw_train_checkpoint_save(path, &a.tr, "job-1", NULL, &err), QS_OK);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n);
    assert_int_equal(fread(buf, 1, n, f), n);
    fclose(f);
    run b;
    run_open(&b, 2);
    size_t np = qw_tmodel_n_params(b.m);
    float *before = malloc(np * 4);
    memcpy(before, qw_tmodel_params(b.m), np * 4);
    /* a flipped byte in the weights */
    buf[200] ^= 1;
    write_bytes(bad, buf, n);
    assert_int_equal(qw_train_checkpoint_load(bad, &b.tr, "job-1", NULL, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "checksum"));
    assert_non_null(strstr(err.msg, bad));
    buf[200] ^= 1;
    /* truncated */
    write_bytes(bad, buf, n - 5);
    assert_int_equal(qw_train_checkpoint_load(bad, &b.tr, "job-1", NULL, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "bytes"));
    /* not a checkpoint */
    uint8_t junk[200];
    memset(junk, ' ', sizeof junk);
    memcpy(junk, "{\"hello\": 1}", 12);
    write_bytes(bad, junk, sizeof junk);
    assert_int_equal(qw_train_checkpoint_load(bad, &b.tr, "job-1", NULL, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "offset 0"));
    /* another job's checkpoint */
    assert_int_equal(qw_train_checkpoint_load(path, &b.tr, "job-2", NULL, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "identity"));
    /* missing */
    snprintf(bad, sizeof bad, "%s/none.ckpt", dir);
    assert_int_equal(qw_train_checkpoint_load(bad, &b.tr, "job-1", NULL, &err), QS_ENOTFOUND);
    assert_memory_equal(before, qw_tmodel_params(b.m), np * 4);
    assert_int_equal(b.tr.step, 0);
    /* another model size */
    qw_config c = cfg(1);
    qw_tmodel *m2 = NULL;
    assert_int_equal(qw_tmodel_create(&c, 2, 16, 1, &m2, &err), QS_OK);
    qw_trainer t2;
    qw_train_config tc = tcfg(6);
    assert_int_equal(qw_trainer_create(&t2, m2, &b.d, &tc, 1, &err), QS_OK);
    assert_int_equal(qw_train_checkpoint_load(path, &t2, "job-1", NULL, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "n_params"));
    qw_trainer_free(&t2);
    qw_tmodel_destroy(m2);
    free(before);
    free(buf);
    run_close(&a);
    run_close(&b);
}

static void hf_checkpoint_round_trips(int tied) {
    qw_config c = cfg(tied);
    qs_error err = {0};
    qw_tmodel *m = NULL, *back = NULL;
    assert_int_equal(qw_tmodel_create(&c, 1, 16, 1, &m, &err), QS_OK);
    assert_int_equal(qw_tmodel_init_random(m, 3, 0.2f, &err), QS_OK);
    char out[300];
    snprintf(out, sizeof out, "%s/hf_%s", dir, tied ? "tied" : "untied");
    assert_int_equal(qw_tmodel_save_hf(m, out, &err), QS_OK);
    qw_checkpoint *ck = NULL;
    if (qw_checkpoint_open(out, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    const qw_config *rc = qw_checkpoint_config(ck);
    assert_int_equal(rc->dim, c.dim);
    assert_int_equal(rc->n_kv_heads, c.n_kv_heads);
    assert_int_equal(rc->tied_embeddings, tied);
    assert_true(rc->rope_factor == c.rope_factor);
    assert_true(rc->rope_theta == c.rope_theta);
    assert_int_equal(qw_tmodel_create(rc, 1, 16, 1, &back, &err), QS_OK);
    if (qw_tmodel_load(back, ck, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_memory_equal(qw_tmodel_params(m), qw_tmodel_params(back), qw_tmodel_n_params(m) * 4);
    /* the inference engine agrees with the training forward */
    uint32_t toks[16];
    for (int i = 0; i < 16; i++)
        toks[i] = (uint32_t)((i * 7 + 3) % c.vocab_size);
    double unused;
    assert_int_equal(qw_tmodel_forward(back, toks, NULL, 0, &unused, &err), QS_OK);
    qw_model *em = NULL;
    assert_int_equal(qw_model_create(ck, 16, 1, &em, &err), QS_OK);
    const float *el;
    assert_int_equal(qw_model_forward(em, toks, 16, &el, &err), QS_OK);
    const float *tl = qw_tmodel_logits(back);
    double mx = 0, md = 0;
    for (int i = 0; i < 16 * c.vocab_size; i++) {
        mx = fabs(el[i]) > mx ? fabs(el[i]) : mx;
        md = fabs(el[i] - tl[i]) > md ? fabs(el[i] - tl[i]) : md;
    }
    printf("engine vs training forward on the saved checkpoint: max diff %.3g of %.3g\n", md, mx);
    assert_true(md <= 1e-5 * mx);
    qw_model_destroy(em);
    qw_checkpoint_close(ck);
    qw_tmodel_destroy(back);
    qw_tmodel_destroy(m);
    /* no temporary file is left behind: the folder holds exactly the two files */
    DIR *d = opendir(out);
    assert_non_null(d);
    int others = 0, files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!strcmp(e->d_name, "config.json") || !strcmp(e->d_name, "model.safetensors"))
            files++;
        else
            others++;
    }
    closedir(d);
    assert_int_equal(files, 2);
    assert_int_equal(others, 0);
}

static void hf_checkpoint_untied_is_read_by_the_loader(void **s) {
    (void)s;
    hf_checkpoint_round_trips(0);
}
static void hf_checkpoint_tied_is_read_by_the_loader(void **s) {
    (void)s;
    hf_checkpoint_round_trips(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(resume_is_bit_identical),
        cmocka_unit_test(history_comes_back_as_saved),
        cmocka_unit_test(damaged_checkpoints_are_refused),
        cmocka_unit_test(hf_checkpoint_untied_is_read_by_the_loader),
        cmocka_unit_test(hf_checkpoint_tied_is_read_by_the_loader),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
