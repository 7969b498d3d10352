/* Which CUDA device each data-parallel training rank takes (qw_train_rank_devices), and the
 * offered-GPU list the worker's backend choice keeps for it (qw_jobs_backend_config), on the
 * CPU: the logic is pure, no device is opened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "jobs_backend.h"
#include "train_job.h"

/* A CUDA spec offering the n ordinals d (the first also backend.device, as the job kind sets). */
static qw_train_spec cuda_spec(const int *d, int n) {
    qw_train_spec s;
    memset(&s, 0, sizeof s);
    s.backend.kind = QW_BACKEND_CUDA;
    s.backend.device = n ? d[0] : 0;
    for (int i = 0; i < n; i++)
        s.devices[s.n_devices++] = d[i];
    return s;
}

/* Ranks take exactly the offered GPUs, in the offered order, not consecutive ordinals. */
static void test_offered_list(void **state) {
    (void)state;
    const int offered[3] = {5, 2, 7};
    qw_train_spec s = cuda_spec(offered, 3);
    int out[QW_TRAIN_MAX_RANKS];
    qs_error err = {0};
    assert_int_equal(qw_train_rank_devices(&s, 2, out, &err), QS_OK);
    assert_int_equal(out[0], 5);
    assert_int_equal(out[1], 2);
    assert_int_equal(qw_train_rank_devices(&s, 3, out, &err), QS_OK);
    assert_int_equal(out[2], 7);
    assert_int_equal(qw_train_rank_devices(&s, 1, out, &err), QS_OK);
    assert_int_equal(out[0], 5);
}

/* Fewer offered GPUs than ranks, a repeated or negative ordinal, a rank count out of range. */
static void test_refusals(void **state) {
    (void)state;
    int out[QW_TRAIN_MAX_RANKS];
    qs_error err = {0};
    const int one[1] = {3};
    qw_train_spec s = cuda_spec(one, 1);
    assert_int_equal(qw_train_rank_devices(&s, 2, out, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "data_parallel 2 needs 2 GPUs: the worker offers 1"));
    const int twice[2] = {4, 4};
    s = cuda_spec(twice, 2);
    assert_int_equal(qw_train_rank_devices(&s, 2, out, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "both device 4"));
    const int neg[2] = {1, -1};
    s = cuda_spec(neg, 2);
    assert_int_equal(qw_train_rank_devices(&s, 2, out, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "ordinal -1"));
    assert_int_equal(qw_train_rank_devices(&s, 0, out, &err), QS_EINVAL);
    assert_int_equal(qw_train_rank_devices(&s, QW_TRAIN_MAX_RANKS + 1, out, &err), QS_EINVAL);
}

/* Without a list (a direct caller), consecutive ordinals from backend.device; CPU ranks -1. */
static void test_no_list_and_cpu(void **state) {
    (void)state;
    int out[QW_TRAIN_MAX_RANKS];
    qs_error err = {0};
    qw_train_spec s = cuda_spec(NULL, 0);
    s.backend.device = 1;
    assert_int_equal(qw_train_rank_devices(&s, 3, out, &err), QS_OK);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 2);
    assert_int_equal(out[2], 3);
    const int offered[2] = {6, 0};
    s = cuda_spec(offered, 2);
    s.backend.kind = QW_BACKEND_CPU;
    assert_int_equal(qw_train_rank_devices(&s, 2, out, &err), QS_OK);
    assert_int_equal(out[0], -1);
    assert_int_equal(out[1], -1);
}

/* The worker's choice keeps every offered GPU's ordinal in --gpus order (what the job kind
 * copies into the spec); a CPU-only worker keeps none. */
static void test_choice_keeps_offered(void **state) {
    (void)state;
    qw_gpu gpus[3];
    memset(gpus, 0, sizeof gpus);
    gpus[0].device = 3;
    gpus[1].device = 1;
    gpus[2].device = 2;
    qw_jobs_backend c;
    qs_error err = {0};
    assert_int_equal(qw_jobs_backend_config("cuda", gpus, 3, true, &c, &err), QS_OK);
    assert_int_equal(c.device, 3);
    assert_int_equal(c.n_devices, 3);
    assert_int_equal(c.devices[0], 3);
    assert_int_equal(c.devices[1], 1);
    assert_int_equal(c.devices[2], 2);
    assert_int_equal(qw_jobs_backend_config("cpu", NULL, 0, true, &c, &err), QS_OK);
    assert_int_equal(c.n_devices, 0);
    assert_int_equal(c.device, -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offered_list),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_no_list_and_cpu),
        cmocka_unit_test(test_choice_keeps_offered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
