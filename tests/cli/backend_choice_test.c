/* Where the worker's jobs run (worker/jobs/jobs_backend.h) and which GPU each local worker of
 * qsweep run offers (cli.h qsweep_run_worker_gpus): the option and $QSWEEP_BACKEND parsing,
 * the auto / cpu / cuda rules with and without GPUs and CUDA in the build, the SQNR probe kept
 * on the CPU, tensor-parallel ranks on the offered GPUs in order (or CPU ranks, or refused),
 * and the round robin of GPUs over workers. The CPU path of a whole sweep (every
 * result's gemm_path = cpu) is checked end to end in run_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli.h"
#include "jobs_backend.h"

/* Two GPUs as `qsweep worker --gpus 1,0` chose them: the first offered is device 1. */
static const qw_gpu two[2] = {{.name = "NVIDIA H200", .device = 1},
                              {.name = "NVIDIA H200", .device = 0}};

static void test_auto_uses_the_first_offered_gpu_only_with_cuda_and_a_gpu(void **state) {
    (void)state;
    unsetenv("QSWEEP_BACKEND");
    unsetenv("QSWEEP_CUDA_GEMM");
    qs_error err = {0};
    qw_jobs_backend c;
    assert_int_equal(qw_jobs_backend_config(NULL, two, 2, true, &c, &err), QS_OK);
    assert_int_equal(c.kind, QW_BACKEND_AUTO);
    qw_jobs_backend_use u = qw_jobs_backend_pick(&c, true, false);
    assert_true(u.use_cuda);
    assert_int_equal(u.device, 1);
    /* the GEMM path table decides per linear (qk_gemm_path.h); FP32 only when asked for */
    assert_int_equal(u.gemm, QW_JOBS_GEMM_AUTO);
    /* a build without CUDA runs on the CPU whatever GPUs there are */
    assert_false(qw_jobs_backend_pick(&c, false, false).use_cuda);
    /* --gpus none (no GPU offered): the CPU, never an error */
    assert_int_equal(qw_jobs_backend_config("auto", NULL, 0, true, &c, &err), QS_OK);
    u = qw_jobs_backend_pick(&c, true, false);
    assert_false(u.use_cuda);
    assert_int_equal(u.device, -1);
}

static void test_cpu_is_the_cpu_and_cuda_needs_a_build_and_a_gpu(void **state) {
    (void)state;
    unsetenv("QSWEEP_BACKEND");
    qs_error err = {0};
    qw_jobs_backend c;
    assert_int_equal(qw_jobs_backend_config("cpu", two, 2, true, &c, &err), QS_OK);
    assert_false(qw_jobs_backend_pick(&c, true, false).use_cuda);
    assert_int_equal(qw_jobs_backend_config("cuda", two, 2, true, &c, &err), QS_OK);
    assert_true(qw_jobs_backend_pick(&c, true, false).use_cuda);
    /* a worker started with --gpus none never uses CUDA: forcing it is refused up front */
    assert_int_equal(qw_jobs_backend_config("cuda", NULL, 0, true, &c, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "--backend cuda: the worker offers no GPU"));
    assert_false(qw_jobs_backend_pick(&c, true, false).use_cuda); /* *out is the CPU choice */
    assert_int_equal(qw_jobs_backend_config("cuda", two, 2, false, &c, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "this build has no CUDA backend"));
    assert_int_equal(qw_jobs_backend_config("gpu", two, 2, true, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "--backend \"gpu\": expected auto, cpu or cuda"));
}

static void test_the_environment_is_read_when_no_option_is_given(void **state) {
    (void)state;
    qs_error err = {0};
    qw_jobs_backend c;
    setenv("QSWEEP_BACKEND", "cpu", 1);
    assert_int_equal(qw_jobs_backend_config(NULL, two, 2, true, &c, &err), QS_OK);
    assert_int_equal(c.kind, QW_BACKEND_CPU);
    assert_int_equal(qw_jobs_backend_config("", two, 2, true, &c, &err), QS_OK);
    assert_int_equal(c.kind, QW_BACKEND_CPU);
    /* the option wins over the environment */
    assert_int_equal(qw_jobs_backend_config("auto", two, 2, true, &c, &err), QS_OK);
    assert_int_equal(c.kind, QW_BACKEND_AUTO);
    setenv("QSWEEP_BACKEND", "Cuda", 1); /* case-sensitive */
    assert_int_equal(qw_jobs_backend_config(NULL, two, 2, true, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "$QSWEEP_BACKEND \"Cuda\""));
    setenv("QSWEEP_BACKEND", "cuda", 1);
    assert_int_equal(qw_jobs_backend_config(NULL, NULL, 0, true, &c, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "$QSWEEP_BACKEND cuda"));
    unsetenv("QSWEEP_BACKEND");
    setenv("QSWEEP_CUDA_GEMM", "lt", 1);
    assert_int_equal(qw_jobs_backend_config(NULL, two, 2, true, &c, &err), QS_OK);
    assert_int_equal(c.gemm, 2);
    assert_int_equal(qw_jobs_backend_pick(&c, true, false).gemm, 2);
    static const struct {
        const char *name;
        int gemm;
    } req[] = {{"auto", 2}, {"fp32", 0}, {"bf16", 1}, {"emulated", 3}};
    for (size_t i = 0; i < 4; i++) {
        setenv("QSWEEP_CUDA_GEMM", req[i].name, 1);
        assert_int_equal(qw_jobs_backend_config(NULL, two, 2, true, &c, &err), QS_OK);
        assert_int_equal(qw_jobs_backend_pick(&c, true, false).gemm, req[i].gemm);
    }
    setenv("QSWEEP_CUDA_GEMM", "fp16", 1);
    assert_int_equal(qw_jobs_backend_config(NULL, two, 2, true, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "$QSWEEP_CUDA_GEMM \"fp16\""));
    unsetenv("QSWEEP_CUDA_GEMM");
}

static void test_a_job_that_needs_the_cpu_runs_on_the_cpu(void **state) {
    (void)state;
    unsetenv("QSWEEP_BACKEND");
    qs_error err = {0};
    qw_jobs_backend c;
    const char *kinds[] = {"auto", "cuda", "cpu"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(qw_jobs_backend_config(kinds[i], two, 2, true, &c, &err), QS_OK);
        qw_jobs_backend_use u = qw_jobs_backend_pick(&c, true, true);
        assert_false(u.use_cuda);
        assert_int_equal(u.device, -1);
    }
}

/* Four GPUs offered as --gpus 3,1,2,0. */
static const qw_gpu four[4] = {{.name = "NVIDIA H200", .device = 3},
                               {.name = "NVIDIA H200", .device = 1},
                               {.name = "NVIDIA H200", .device = 2},
                               {.name = "NVIDIA H200", .device = 0}};

static void test_tensor_parallel_ranks_take_the_offered_gpus_in_order(void **state) {
    (void)state;
    unsetenv("QSWEEP_BACKEND");
    unsetenv("QSWEEP_CUDA_GEMM");
    qs_error err = {0};
    qw_jobs_backend c;
    qw_jobs_ranks_use r;
    const char *gpu_kinds[] = {"auto", "cuda"};
    for (size_t k = 0; k < 2; k++) {
        assert_int_equal(qw_jobs_backend_config(gpu_kinds[k], four, 4, true, &c, &err), QS_OK);
        /* rank r on the r-th offered GPU, not on ordinal r */
        assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 3, &r, &err), QS_OK);
        assert_true(r.use_cuda);
        assert_int_equal(r.n, 3);
        assert_int_equal(r.gemm, QW_JOBS_GEMM_AUTO);
        assert_int_equal(r.devices[0], 3);
        assert_int_equal(r.devices[1], 1);
        assert_int_equal(r.devices[2], 2);
        assert_int_equal(r.devices[3], -1);
        /* all four */
        assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 4, &r, &err), QS_OK);
        assert_int_equal(r.devices[3], 0);
        /* more ranks than offered GPUs: refused, naming the counts and the GPUs, never CPU
           ranks the grid did not ask for (a worker offering enough runs it) */
        assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 5, &r, &err), QS_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "tensor_parallel 5 needs 5 GPUs: the worker offers 4 "
                                        "(--gpus 3,1,2,0)"));
        assert_false(r.use_cuda); /* *out is CPU ranks on error */
    }
    /* the CUDA GEMM setting travels with the ranks */
    setenv("QSWEEP_CUDA_GEMM", "fp32", 1);
    assert_int_equal(qw_jobs_backend_config("cuda", two, 2, true, &c, &err), QS_OK);
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 2, &r, &err), QS_OK);
    assert_int_equal(r.gemm, 0);
    assert_int_equal(r.devices[0], 1);
    assert_int_equal(r.devices[1], 0);
    unsetenv("QSWEEP_CUDA_GEMM");
    /* a CUDA module without NCCL: GPU ranks cannot all-reduce, refused saying so */
    c.no_nccl = true;
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 2, &r, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "without NCCL"));
    /* a tensor-parallel degree needs two ranks */
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 1, &r, &err), QS_EINVAL);
}

static void
test_tensor_parallel_ranks_are_cpu_ranks_where_a_model_would_be_on_the_cpu(void **state) {
    (void)state;
    unsetenv("QSWEEP_BACKEND");
    qs_error err = {0};
    qw_jobs_backend c;
    qw_jobs_ranks_use r;
    /* --backend cpu with GPUs offered */
    assert_int_equal(qw_jobs_backend_config("cpu", four, 4, true, &c, &err), QS_OK);
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 3, &r, &err), QS_OK);
    assert_false(r.use_cuda);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.devices[0], -1);
    /* auto with no GPU offered (--gpus none): CPU ranks, even for more ranks than GPUs */
    assert_int_equal(qw_jobs_backend_config("auto", NULL, 0, true, &c, &err), QS_OK);
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 8, &r, &err), QS_OK);
    assert_false(r.use_cuda);
    /* a build without CUDA */
    assert_int_equal(qw_jobs_backend_config("auto", four, 4, false, &c, &err), QS_OK);
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, false, 2, &r, &err), QS_OK);
    assert_false(r.use_cuda);
    /* a CUDA module that could not be loaded: the choice became the CPU (device -1) */
    assert_int_equal(qw_jobs_backend_config("auto", four, 4, true, &c, &err), QS_OK);
    c.device = -1;
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 2, &r, &err), QS_OK);
    assert_false(r.use_cuda);
    /* the same inputs give the same answer */
    qw_jobs_ranks_use again;
    assert_int_equal(qw_jobs_backend_pick_ranks(&c, true, 2, &again, &err), QS_OK);
    assert_int_equal(again.use_cuda, r.use_cuda);
    assert_int_equal(again.n, r.n);
}

static void test_without_a_set_choice_nothing_but_the_cpu(void **state) {
    (void)state;
    setenv("QSWEEP_BACKEND", "cuda", 1); /* read only through qw_jobs_backend_config */
    qw_jobs_backend c = qw_jobs_backend_get();
    assert_false(qw_jobs_backend_pick(&c, true, false).use_cuda);
    unsetenv("QSWEEP_BACKEND");
    qw_jobs_backend set = {.kind = QW_BACKEND_CPU, .device = 3, .gemm = 1};
    qs_error err = {0};
    assert_int_equal(qw_jobs_backend_set(&set, &err), QS_OK); /* the CPU: no module looked for */
    c = qw_jobs_backend_get();
    assert_int_equal(c.device, 3);
    assert_int_equal(c.gemm, 1);
    assert_false(qw_jobs_backend_pick(&c, true, false).use_cuda);
    /* a choice of a GPU whose CUDA module cannot be loaded becomes the CPU (and says why on
       stderr): a CUDA build without its module or driver still runs every job */
    setenv("QSWEEP_CUDA_MODULE", "/nonexistent/libqsweep_cuda.so", 1);
    set.kind = QW_BACKEND_AUTO;
    assert_int_equal(qw_jobs_backend_set(&set, &err), QS_OK);
    c = qw_jobs_backend_get();
    assert_int_equal(c.device, qw_backend_cuda_built() ? -1 : 3);
    assert_false(qw_jobs_backend_pick(&c, qw_backend_cuda_built(), false).use_cuda);
    if (qw_backend_cuda_built()) /* and says so, for every result (gemm_path's neighbour) */
        assert_non_null(strstr(c.fallback, "/nonexistent/libqsweep_cuda.so"));
    /* --backend cuda whose module cannot be loaded is refused, naming why; the choice stays */
    set.kind = QW_BACKEND_CUDA;
    if (qw_backend_cuda_built()) {
        assert_int_equal(qw_jobs_backend_set(&set, &err), QS_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "--backend cuda: the CUDA backend cannot be used"));
        assert_non_null(strstr(err.msg, "/nonexistent/libqsweep_cuda.so"));
        c = qw_jobs_backend_get();
        assert_int_equal(c.kind, QW_BACKEND_AUTO);
        assert_false(qw_jobs_backend_pick(&c, true, false).use_cuda);
    }
    unsetenv("QSWEEP_CUDA_MODULE");
}

/* A worker whose backend falls back to the CPU offers no GPU in its HELLO, for every reason
 * (jobs_backend.h qw_jobs_backend_offer), and says how many it withholds and why. */
static void test_a_worker_fallen_back_to_the_cpu_offers_no_gpu(void **state) {
    (void)state;
    static const char *const codes[] = {"no_cuda_build", "no_gpu", "cuda_unavailable"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strcmp(codes[i], "no_gpu") ? 2 : 0; /* no_gpu: the worker offers none */
        qw_jobs_offer o = qw_jobs_backend_offer(QW_BACKEND_AUTO, n, codes[i]);
        assert_int_equal(o.n_gpus, 0);
        char want[160] = "";
        if (n)
            snprintf(want, sizeof want, "--backend auto runs on the CPU (%s): 2 GPUs not offered",
                     codes[i]);
        assert_string_equal(o.why, want);
    }
    assert_string_equal(qw_jobs_backend_offer(QW_BACKEND_AUTO, 1, "cuda_unavailable").why,
                        "--backend auto runs on the CPU (cuda_unavailable): 1 GPU not offered");
    /* on CUDA, and under --backend cpu (asked for by name), every offered GPU */
    qw_jobs_offer o = qw_jobs_backend_offer(QW_BACKEND_AUTO, 2, "");
    assert_int_equal(o.n_gpus, 2);
    assert_string_equal(o.why, "");
    assert_int_equal(qw_jobs_backend_offer(QW_BACKEND_CUDA, 2, "").n_gpus, 2);
    assert_int_equal(qw_jobs_backend_offer(QW_BACKEND_CPU, 2, "").n_gpus, 2);
    assert_int_equal(qw_jobs_backend_offer(QW_BACKEND_AUTO, 2, NULL).n_gpus, 2);

    /* through the choice: two GPUs offered, and either no CUDA in this build or a CUDA module
       that cannot be loaded ($QSWEEP_CUDA_MODULE naming a missing file, cuda_module.h) */
    setenv("QSWEEP_CUDA_MODULE", "/nonexistent/libqsweep_cuda.so", 1);
    qs_error err = {0};
    qw_jobs_backend c;
    assert_int_equal(qw_jobs_backend_config("auto", two, 2, qw_backend_cuda_built(), &c, &err),
                     QS_OK);
    assert_int_equal(qw_jobs_backend_set(&c, &err), QS_OK);
    c = qw_jobs_backend_get();
    const char *code = qw_backend_cuda_built() ? "cuda_unavailable" : "no_cuda_build";
    assert_string_equal(c.fallback_code, code);
    o = qw_jobs_backend_offer(c.kind, 2, c.fallback_code);
    assert_int_equal(o.n_gpus, 0);
    assert_non_null(strstr(o.why, code));
    unsetenv("QSWEEP_CUDA_MODULE");
}

static void test_gemm_path_metric_names(void **state) {
    (void)state;
    char buf[64];
    const char *paths[] = {"cpu", "fp32", "bf16", "native_fp4", "emulated_bf16"};
    for (size_t i = 0; i < 5; i++) {
        char want[64];
        snprintf(want, sizeof want, "gemm_path.%s", paths[i]);
        qw_jobs_gemm_path_metric(paths[i], buf, sizeof buf);
        assert_string_equal(buf, want);
        /* what schema/080_gemm_path.sql reads back: the name after "gemm_path." */
        assert_string_equal(buf + strlen("gemm_path."), paths[i]);
    }
    /* why a native FP4 GEMM ran emulated, beside gemm_path.emulated_bf16 */
    qw_jobs_gemm_fallback_metric("CUBLAS_STATUS_INVALID_VALUE", buf, sizeof buf);
    assert_string_equal(buf, "gemm_fallback.cublas_status_invalid_value");
    qw_jobs_gemm_fallback_metric("", buf, sizeof buf);
    assert_string_equal(buf, "gemm_fallback.unknown");
    qw_jobs_gemm_path_metric(NULL, buf, sizeof buf);
    assert_string_equal(buf, "gemm_path.none");
}

static void test_local_workers_share_out_the_gpus_round_robin(void **state) {
    (void)state;
    char buf[16];
    /* 4 workers on 2 GPUs: 0, 1, 0, 1 */
    const char *want2[] = {"0", "1", "0", "1"};
    for (int i = 0; i < 4; i++) {
        qsweep_run_worker_gpus(i, 2, 1, buf, sizeof buf);
        assert_string_equal(buf, want2[i]);
    }
    /* 2 workers on 8 GPUs: one each, not all eight */
    qsweep_run_worker_gpus(0, 8, 0, buf, sizeof buf);
    assert_string_equal(buf, "0");
    qsweep_run_worker_gpus(1, 8, 0, buf, sizeof buf);
    assert_string_equal(buf, "1");
    qsweep_run_worker_gpus(255, 8, 0, buf, sizeof buf);
    assert_string_equal(buf, "7");
    /* no GPU: none, so the worker runs on the CPU and says so */
    qsweep_run_worker_gpus(0, 0, 0, buf, sizeof buf);
    assert_string_equal(buf, "none");
    qsweep_run_worker_gpus(3, -1, 0, buf, sizeof buf);
    assert_string_equal(buf, "none");
    char tiny[3];
    qsweep_run_worker_gpus(0, 0, 0, tiny, sizeof tiny); /* truncated, still terminated */
    assert_string_equal(tiny, "no");
}

static void test_local_workers_offer_as_many_gpus_as_the_largest_job_asks(void **state) {
    (void)state;
    char buf[64];
    /* data_parallel 2 on 4 GPUs: worker 0 offers 0,1, worker 1 2,3, worker 2 again 0,1 */
    const char *want[] = {"0,1", "2,3", "0,1"};
    for (int i = 0; i < 3; i++) {
        qsweep_run_worker_gpus(i, 4, 2, buf, sizeof buf);
        assert_string_equal(buf, want[i]);
    }
    /* a job of 8 GPUs on a 2-GPU machine: both, never an index twice */
    qsweep_run_worker_gpus(1, 2, 8, buf, sizeof buf);
    assert_string_equal(buf, "0,1");
    /* tensor_parallel 3 on 8 GPUs: consecutive triples, wrapping */
    qsweep_run_worker_gpus(2, 8, 3, buf, sizeof buf);
    assert_string_equal(buf, "6,7,0");
    /* one GPU per job or none asked: one GPU each, round robin */
    qsweep_run_worker_gpus(5, 4, 1, buf, sizeof buf);
    assert_string_equal(buf, "1");
    qsweep_run_worker_gpus(5, 4, 0, buf, sizeof buf);
    assert_string_equal(buf, "1");
    /* no GPU whatever the grid asks */
    qsweep_run_worker_gpus(0, 0, 4, buf, sizeof buf);
    assert_string_equal(buf, "none");
    char tiny[4];
    qsweep_run_worker_gpus(0, 16, 8, tiny, sizeof tiny); /* "0,1,..." truncated, terminated */
    assert_string_equal(tiny, "0,1");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_uses_the_first_offered_gpu_only_with_cuda_and_a_gpu),
        cmocka_unit_test(test_cpu_is_the_cpu_and_cuda_needs_a_build_and_a_gpu),
        cmocka_unit_test(test_the_environment_is_read_when_no_option_is_given),
        cmocka_unit_test(test_a_job_that_needs_the_cpu_runs_on_the_cpu),
        cmocka_unit_test(test_tensor_parallel_ranks_take_the_offered_gpus_in_order),
        cmocka_unit_test(
            test_tensor_parallel_ranks_are_cpu_ranks_where_a_model_would_be_on_the_cpu),
        cmocka_unit_test(test_without_a_set_choice_nothing_but_the_cpu),
        cmocka_unit_test(test_gemm_path_metric_names),
        cmocka_unit_test(test_local_workers_share_out_the_gpus_round_robin),
        cmocka_unit_test(test_local_workers_offer_as_many_gpus_as_the_largest_job_asks),
        cmocka_unit_test(test_a_worker_fallen_back_to_the_cpu_offers_no_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
