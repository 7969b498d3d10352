/* libFuzzer target: the training checkpoint reader (worker/train/ckpt.c,
 * qw_train_checkpoint_load) on arbitrary bytes, against a small trainer (2 blocks of dim 32,
 * vocabulary 50, as tests/train/test_ckpt.c) made once. The bytes are a file in memory
 * (memfd), read through its /proc path. A checkpoint that loads must leave the trainer usable:
 * its step is checked against the configured total. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt.h"
#include "trainer.h"
#include "../small_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static qw_trainer tr;
static qw_train_history hist;
static uint32_t stream[2000];

/* The trainer every input is loaded into (aborts when it cannot be made). */
static void make_trainer(void) {
    qw_config c = small_config_of(32, 64, 2, 4, 2, 8, 50);
    c.rope_theta = 500000.0f;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    qs_error err = {0};
    qw_tmodel *m;
    static qw_data d;
    for (size_t i = 0; i < 2000; i++)
        stream[i] = (uint32_t)((i * 7) % 50);
    qw_train_config t = {0};
    t.steps = 6;
    t.accum = 2;
    t.sched.lr = 3e-3f;
    t.sched.min_lr = 3e-4f;
    t.sched.warmup = 2;
    t.sched.decay = QW_DECAY_COSINE;
    t.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    t.clip = 1.0f;
    t.diverge_loss = 50;
    if (qw_tmodel_create(&c, 2, 16, 1, &m, &err) != QS_OK ||
        qw_data_init(&d, stream, 2000, 0.1, 16, 5, &err) != QS_OK ||
        qw_trainer_create(&tr, m, &d, &t, 1, &err) != QS_OK) {
        fprintf(stderr, "fuzz_ckpt: %s\n", err.msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        make_trainer();
        ready = 1;
    }
    int fd = memfd_create("fuzz.ckpt", 0);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    qs_error err;
    if (qw_train_checkpoint_load(path, &tr, "fuzz-job", &hist, &err) == QS_OK && tr.step < 0)
        abort();
    close(fd);
    return 0;
}
