/* A training job on the CUDA backend runs the same trainer code as on the CPU
 * (worker/train/train_job.h, spec.backend): the micro shape, this repository's README.md through
 * the bytes tokenizer, 8 steps of fp32 and bf16, once on each backend. The final train and
 * validation losses agree within 1e-3 relative (cuBLAS SGEMM and the device reductions sum in
 * another order than the CPU: float rounding, compounded over 8 AdamW steps), and each run
 * reports the path its linears' GEMMs took: gemm_path.cpu on the CPU; on CUDA (the worker's
 * default GEMM request, auto) gemm_path.fp32 for fp32 (every GEMM FP32 SGEMM) and gemm_path.bf16
 * for bf16 (every GEMM with BF16 operands on the tensor cores, bf16_exact.h), with the
 * per-micro-step counts; under request fp32 bf16's GEMMs all run FP32 too (gemm_path.fp32, no
 * BF16 GEMM counted). Skipped (77) without a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "backend_cuda.h"
#include "gpu_test_util.h"
#include "ops_cuda.h"
#include "train_job.h"

typedef struct finals {
    double train, val;
    char path[64];
    double n_bf16, n_fp32; /* gemm_bf16_count, gemm_fp32_count (-1: not reported) */
} finals;

static void on_metric(void *u, const char *name, int64_t step, double v) {
    finals *f = u;
    if (step >= 0) return;
    if (!strcmp(name, "final_train_loss")) f->train = v;
    if (!strcmp(name, "final_val_loss")) f->val = v;
    if (!strncmp(name, "gemm_path.", 10)) snprintf(f->path, sizeof f->path, "%s", name);
    if (!strcmp(name, "gemm_bf16_count")) f->n_bf16 = v;
    if (!strcmp(name, "gemm_fp32_count")) f->n_fp32 = v;
}

static void run(const char *recipe, qw_backend_kind kind, int gemm, const uint32_t *ids, size_t n,
                finals *f) {
    qs_error err = {0};
    qw_train_spec t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qw_train_shape_by_name("micro", &t.shape, &err), QS_OK);
    assert_int_equal(qw_recipe_by_name(recipe, &t.recipe, &err), QS_OK);
    t.train.steps = 8;
    t.train.accum = 1;
    t.train.sched = (qw_lr_schedule){3e-3f, 3e-4f, 2, 8, QW_DECAY_COSINE};
    t.train.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    t.train.clip = 1.0f;
    t.train.diverge_loss = 12.0;
    t.batch = 2;
    t.ctx = 64;
    t.seed = 1;
    t.val_fraction = 0.05;
    t.threads = 2;
    t.backend.kind = kind;
    t.backend.gemm = gemm;
    memset(f, 0, sizeof *f);
    f->n_bf16 = f->n_fp32 = -1;
    qw_train_hooks h = {NULL, on_metric, NULL, f};
    qw_train_outcome o;
    if (qw_train_job_run(&t, ids, n, &h, &o, &err) != QS_OK) fail_msg("%s: %s", recipe, err.msg);
}

static void cuda_training_matches_cpu(void **s) {
    (void)s;
    qs_error err = {0};
    uint32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(qw_bytes_tokenize_file(QW_SOURCE_DIR "/README.md", &ids, &n, &err), QS_OK);
    const char *recipes[] = {"fp32", "bf16"};
    for (int i = 0; i < 2; i++) {
        finals c, g;
        run(recipes[i], QW_BACKEND_CPU, QW_CUDA_GEMM_LT, ids, n, &c);
        run(recipes[i], QW_BACKEND_CUDA, QW_CUDA_GEMM_LT, ids, n, &g);
        double dt = fabs(g.train - c.train) / c.train, dv = fabs(g.val - c.val) / c.val;
        printf("%s: train loss cpu %.9g cuda %.9g (rel %.2e), val %.9g / %.9g (rel %.2e)\n",
               recipes[i], c.train, g.train, dt, c.val, g.val, dv);
        printf("%s: cuda %s, linear GEMMs per micro-step %g BF16, %g FP32\n", recipes[i], g.path,
               g.n_bf16, g.n_fp32);
        assert_string_equal(c.path, "gemm_path.cpu");
        assert_true(c.n_bf16 < 0 && c.n_fp32 < 0); /* the CPU reports no counts */
        int bf16 = i == 1;
        assert_string_equal(g.path, bf16 ? "gemm_path.bf16" : "gemm_path.fp32");
        assert_true(bf16 ? g.n_fp32 == 0 && g.n_bf16 > 0 : g.n_bf16 == 0 && g.n_fp32 > 0);
        assert_true(dt < 1e-3);
        assert_true(dv < 1e-3);
    }
    finals f;
    run("bf16", QW_BACKEND_CUDA, QW_CUDA_GEMM_FP32, ids, n, &f);
    printf("bf16 under request fp32: cuda %s, linear GEMMs per micro-step %g BF16, %g FP32\n",
           f.path, f.n_bf16, f.n_fp32);
    assert_string_equal(f.path, "gemm_path.fp32");
    assert_true(f.n_bf16 == 0 && f.n_fp32 > 0);
    free(ids);
}

int main(void) {
    if (qwt_cuda_skip("gpu_train_job_cuda")) return 77;
    /* the trainer opens its backends through qw_backend_open (backend.h), whose CUDA backend is
     * the registered table, as the worker registers the module's */
    qw_backend_set_cuda(qw_backend_cuda_table());
    const struct CMUnitTest tests[] = {cmocka_unit_test(cuda_training_matches_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
