/* A tensor-parallel evaluation as the worker's job kind places it on GPUs (worker/jobs/jobs.c
 * place_ranks): the worker's choice with two GPUs offered (jobs_backend.h
 * qw_jobs_backend_config, --gpus 1,0 order), its ranks from qw_jobs_backend_pick_ranks, rank r
 * opened by qw_jobs_rank_backend through backend.h qw_backend_open on the registered CUDA table,
 * the model's ranks made through qw_model_set_tp_backends and all-reducing over NCCL ranks
 * (comm.h), against the same model's CPU ranks. The GQA test checkpoint
 * (tests/engine/data/llama3_gqa), unquantized and NVFP4 W4A16 on every down_proj, FP32 GEMMs
 * ($QSWEEP_CUDA_GEMM=fp32): NCCL sums the row-parallel partial outputs in its own order, so
 * logits are compared within 1e-4 of the largest logit (docs/tensor-parallel.md's FP32
 * rounding of GEMMs and sums); the result's GEMM path names the ranks' ("fp32", model_cuda.h).
 * It then refuses three ranks on two GPUs. Exits 77 (skipped, with a message) without a CUDA
 * device or with fewer than two. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend_cuda.h"
#include "comm.h"
#include "comm_group_nccl.h"
#include "gpu_test_util.h"
#include "jobs_backend.h"
#include "model.h"
#include "model_cuda.h"

#define T 24
#define TOLERANCE 1e-4

/* Largest |a - b| over the largest |b|. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double md = 0.0, mx = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        md = d > md ? d : md;
        mx = fabs((double)b[i]) > mx ? fabs((double)b[i]) : mx;
    }
    return mx > 0.0 ? md / mx : md;
}

static void case_over_ranks(qw_model *m, const char *name, const qw_jobs_ranks_use *ranks) {
    qs_error err = {0};
    int V = qw_model_config(m)->vocab_size;
    uint32_t tok[T];
    for (int t = 0; t < T; t++)
        tok[t] = (uint32_t)((t * 37 + 5) % V);
    const float *lg = NULL;
    /* CPU ranks, as a worker with --backend cpu makes them */
    if (qw_model_set_tp_backends(m, NULL, NULL, NULL, &err) ||
        qw_model_set_tensor_parallel(m, 2, &err) || qw_model_forward(m, tok, T, &lg, &err))
        fail_msg("%s: CPU ranks: %s", name, err.msg);
    size_t cnt = (size_t)T * V;
    float *ref = malloc(cnt * sizeof *ref);
    assert_non_null(ref);
    memcpy(ref, lg, cnt * sizeof *ref);
    /* GPU ranks, as the job kind makes them */
    if (qw_model_set_tensor_parallel(m, 1, &err) ||
        qw_model_set_tp_backends(m, qw_jobs_rank_backend, qw_backend_close, (void *)ranks, &err) ||
        qw_model_set_tensor_parallel(m, 2, &err))
        fail_msg("%s: GPU ranks: %s", name, err.msg);
    qw_model_gemm_path_reset(m);
    if (qw_model_forward(m, tok, T, &lg, &err)) fail_msg("%s: GPU forward: %s", name, err.msg);
    double rel = rel_diff(lg, ref, cnt);
    printf("%s: tensor_parallel 2 on CUDA devices %d,%d (NCCL) vs CPU ranks: relative logit "
           "difference %.3g (tolerance %g), gemm_path %s\n",
           name, ranks->devices[0], ranks->devices[1], rel, TOLERANCE, qw_model_gemm_path(m));
    assert_true(rel <= TOLERANCE);
    assert_string_equal(qw_model_gemm_path(m), "fp32");
    assert_int_equal(qw_model_set_tensor_parallel(m, 1, &err), QS_OK);
    free(ref);
}

static void gpu_ranks_of_the_job_kind_match_cpu_ranks(void **state) {
    (void)state;
    qs_error err = {0};
    setenv("QSWEEP_CUDA_GEMM", "fp32", 1);
    const qw_gpu offered[2] = {{.name = "gpu 1", .device = 1}, {.name = "gpu 0", .device = 0}};
    qw_jobs_backend choice;
    if (qw_jobs_backend_config("cuda", offered, 2, true, &choice, &err)) fail_msg("%s", err.msg);
    qw_jobs_ranks_use ranks;
    if (qw_jobs_backend_pick_ranks(&choice, true, 2, &ranks, &err)) fail_msg("%s", err.msg);
    assert_true(ranks.use_cuda);
    assert_int_equal(ranks.devices[0], 1);
    qw_checkpoint *ck = NULL;
    qw_model *m = NULL;
    if (qw_checkpoint_open(QW_ENGINE_DATA "/llama3_gqa", &ck, &err) ||
        qw_model_create(ck, T, 2, &m, &err))
        fail_msg("%s", err.msg);
    case_over_ranks(m, "unquantized", &ranks);
    qw_policy p;
    qw_quant_spec sp = {.weight = qk_format_by_name("nvfp4")};
    if (qw_policy_init(&p, qw_model_config(m)->n_layers, &err) ||
        qw_policy_isolation(&p, QW_ISO_COMPONENT, QW_LINEAR_DOWN, 0, &sp, &err) ||
        qw_model_apply_policy(m, &p, &err))
        fail_msg("%s", err.msg);
    case_over_ranks(m, "nvfp4 W4A16 down_proj", &ranks);
    qw_policy_free(&p);
    /* three ranks on two offered GPUs: refused, naming both counts */
    assert_int_equal(qw_jobs_backend_pick_ranks(&choice, true, 3, &ranks, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "tensor_parallel 3 needs 3 GPUs: the worker offers 2"));
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    unsetenv("QSWEEP_CUDA_GEMM");
}

int main(void) {
    if (qwt_cuda_skip("gpu_tp_job_cuda")) return 77;
    if (qw_cuda_available() < 2) {
        printf("gpu_tp_job_cuda: needs two CUDA devices (%d visible): skipped\n",
               qw_cuda_available());
        return 77;
    }
    /* what qw_jobs_backend_set registers from the module, linked in here */
    qw_backend_set_cuda(qw_backend_cuda_table());
    qw_group_set_nccl(qw_comm_group_impl());
    const struct CMUnitTest tests[] = {cmocka_unit_test(gpu_ranks_of_the_job_kind_match_cpu_ranks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
