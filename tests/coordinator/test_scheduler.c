/* coord_scheduler: the scheduling rule of coordinator/server/scheduler.h as a pure function,
 * one test per clause; no sockets, no database, no clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "numerics_path.h"
#include "scheduler.h"

/* A pending CPU job without model, due at time 0. */
static qc_sched_job job(int64_t id, int priority) {
    return (qc_sched_job){.id = id, .priority = priority, .model_key = "", .pending = true};
}

static const qc_sched_worker cpu_worker = {0};

static void queue_order_is_priority_then_age(void **state) {
    (void)state;
    qc_sched_job a = job(5, 0), b = job(2, 0), c = job(9, 3), d = job(1, -1);
    qc_sched_job *q[] = {&a, &b, &c, &d};
    qsort(q, 4, sizeof *q, qc_sched_compare);
    assert_int_equal(q[0]->id, 9); /* priority 3 */
    assert_int_equal(q[1]->id, 2); /* priority 0, older */
    assert_int_equal(q[2]->id, 5);
    assert_int_equal(q[3]->id, 1); /* priority -1 last although oldest */
}

static void first_in_queue_order_goes_to_a_worker_without_models(void **state) {
    (void)state;
    qc_sched_job a = job(1, 5), b = job(2, 0);
    qc_sched_job *q[] = {&a, &b};
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 2, 0, NULL, NULL, NULL), 0);
}

static void job_needing_more_gpus_or_memory_than_the_worker_has_is_skipped(void **state) {
    (void)state;
    qc_sched_job big = job(1, 9), mem = job(2, 8), small = job(3, 0);
    big.gpus = 2;
    mem.gpus = 1;
    mem.gpu_mem_mb = 80000;
    qc_sched_job *q[] = {&big, &mem, &small};
    const qc_sched_gpu h100 = {.mem_mb = 81559}, small_gpu = {.mem_mb = 24000};
    const qc_sched_worker one_h100 = {.n_gpus = 1, .gpus = &h100};
    const qc_sched_worker one_small = {.n_gpus = 1, .gpus = &small_gpu};
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 3, 0, NULL, NULL, NULL), 2);
    assert_int_equal(qc_sched_pick(&one_h100, q, 3, 0, NULL, NULL, NULL), 1);
    assert_int_equal(qc_sched_pick(&one_small, q, 3, 0, NULL, NULL, NULL), 2);
    assert_false(qc_sched_fits(&one_h100, &big));
    /* GPU memory asked of a worker without GPUs never fits */
    qc_sched_job cpu_mem = job(4, 0);
    cpu_mem.gpu_mem_mb = 1;
    assert_false(qc_sched_fits(&cpu_worker, &cpu_mem));
}

static void worker_holding_the_model_gets_its_job_before_higher_priority_ones(void **state) {
    (void)state;
    qc_sched_job urgent = job(1, 10), mine = job(2, 0), other = job(3, 0);
    urgent.model_key = "model:aaa";
    mine.model_key = "model:bbb";
    other.model_key = "model:bbb";
    qc_sched_job *q[] = {&urgent, &mine, &other};
    const char *held[] = {"model:zzz", "model:bbb"};
    const qc_sched_worker w = {.models = held, .n_models = 2};
    assert_int_equal(qc_sched_pick(&w, q, 3, 0, NULL, NULL, NULL), 1);
    /* none of its models queued: the first in order */
    const char *none[] = {"model:zzz"};
    const qc_sched_worker v = {.models = none, .n_models = 1};
    assert_int_equal(qc_sched_pick(&v, q, 3, 0, NULL, NULL, NULL), 0);
    assert_false(qc_sched_holds_model(&v, &mine));
    qc_sched_job plain = job(4, 0);
    assert_false(qc_sched_holds_model(&w, &plain)); /* "" is no model */
}

static void job_in_backoff_waits_and_sets_the_next_wake(void **state) {
    (void)state;
    qc_sched_job later = job(1, 5), soon = job(2, 4), now = job(3, 0);
    later.not_before_ms = 9000;
    soon.not_before_ms = 1500;
    qc_sched_job *q[] = {&later, &soon, &now};
    int64_t wake = INT64_MAX;
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 3, 1000, NULL, NULL, &wake), 2);
    assert_int_equal(wake, 1500);
    wake = INT64_MAX;
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 3, 1500, NULL, NULL, &wake), 1);
    assert_int_equal(wake, 9000);
}

static bool even_ids_have_unmet_deps(const qc_sched_job *j, void *ctx) {
    int *asked = ctx;
    (*asked)++;
    return j->id % 2 != 0;
}

static void job_with_unmet_dependencies_is_skipped_and_deps_asked_only_when_due(void **state) {
    (void)state;
    qc_sched_job waiting = job(2, 9), backoff = job(4, 8), ready = job(3, 0);
    backoff.not_before_ms = 100;
    qc_sched_job *q[] = {&waiting, &backoff, &ready};
    int asked = 0;
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 3, 0, even_ids_have_unmet_deps, &asked, NULL),
                     2);
    assert_int_equal(asked, 2); /* not for the job in backoff */
}

static void entries_no_longer_pending_are_passed_over(void **state) {
    (void)state;
    qc_sched_job gone = job(1, 9), left = job(2, 0);
    gone.pending = false;
    qc_sched_job *q[] = {&gone, &left};
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 2, 0, NULL, NULL, NULL), 1);
    left.pending = false;
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 2, 0, NULL, NULL, NULL), -1);
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 0, 0, NULL, NULL, NULL), -1);
}

/* A Hopper worker (H200: 141 GB, cc 9.0, FP4 emulated) and a Blackwell one (B200: 180 GB,
 * cc 10.0, native FP4), with memory in MiB as the coordinator keeps it (bytes >> 20). */
static const qc_sched_gpu h200 = {.mem_mb = 143771}, b200 = {.mem_mb = 183359, .native_fp4 = true};

static void native_fp4_job_fits_only_a_worker_whose_gpus_have_it(void **state) {
    (void)state;
    qc_sched_job fp4 = job(1, 0);
    fp4.gpus = 1;
    fp4.native_fp4 = true;
    const qc_sched_worker hopper = {.n_gpus = 1, .gpus = &h200};
    const qc_sched_worker blackwell = {.n_gpus = 1, .gpus = &b200};
    assert_false(qc_sched_fits(&cpu_worker, &fp4));
    assert_false(qc_sched_fits(&hopper, &fp4));
    assert_true(qc_sched_fits(&blackwell, &fp4));
    /* native FP4 alone (no GPU count) still asks for one GPU */
    fp4.gpus = 0;
    assert_false(qc_sched_fits(&hopper, &fp4));
    assert_true(qc_sched_fits(&blackwell, &fp4));
    /* every one of the GPUs a tensor-parallel job runs on must have it */
    const qc_sched_gpu mixed[] = {b200, h200};
    const qc_sched_worker half = {.n_gpus = 2, .gpus = mixed};
    fp4.gpus = 2;
    assert_false(qc_sched_fits(&half, &fp4));
    fp4.gpus = 1; /* its first GPU is a B200 */
    assert_true(qc_sched_fits(&half, &fp4));
}

static void tensor_parallel_job_needs_its_memory_on_each_of_its_gpus(void **state) {
    (void)state;
    /* 2 ranks of 90000 MiB each: two H200s hold it, one does not, nor an H200 and a 24 GB card */
    qc_sched_job tp2 = job(1, 0);
    tp2.gpus = 2;
    tp2.gpu_mem_mb = 90000;
    const qc_sched_gpu two[] = {h200, h200}, uneven[] = {h200, {.mem_mb = 24000}};
    const qc_sched_worker one = {.n_gpus = 1, .gpus = &h200};
    const qc_sched_worker pair = {.n_gpus = 2, .gpus = two};
    const qc_sched_worker bad_pair = {.n_gpus = 2, .gpus = uneven};
    assert_false(qc_sched_fits(&one, &tp2));
    assert_true(qc_sched_fits(&pair, &tp2));
    assert_false(qc_sched_fits(&bad_pair, &tp2));
    /* the memory is per GPU: exactly the GPU's memory fits, one MiB more does not */
    tp2.gpu_mem_mb = h200.mem_mb;
    assert_true(qc_sched_fits(&pair, &tp2));
    tp2.gpu_mem_mb = h200.mem_mb + 1;
    assert_false(qc_sched_fits(&pair, &tp2));
}

static void job_with_default_resources_fits_cpu_and_gpu_workers(void **state) {
    (void)state;
    qc_sched_job plain = job(1, 0);
    const qc_sched_worker hopper = {.n_gpus = 1, .gpus = &h200};
    assert_true(qc_sched_fits(&cpu_worker, &plain));
    assert_true(qc_sched_fits(&hopper, &plain));
    /* a 100 GiB job skips the CPU worker and the 80 GB card for the H200 behind them */
    qc_sched_job big = job(2, 5);
    big.gpus = 1;
    big.gpu_mem_mb = 102400;
    qc_sched_job *q[] = {&big, &plain};
    const qc_sched_worker one_h100 = {.n_gpus = 1, .gpus = &(qc_sched_gpu){.mem_mb = 81559}};
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 2, 0, NULL, NULL, NULL), 1);
    assert_int_equal(qc_sched_pick(&one_h100, q, 2, 0, NULL, NULL, NULL), 1);
    assert_int_equal(qc_sched_pick(&hopper, q, 2, 0, NULL, NULL, NULL), 0);
}

static void fits_any_says_whether_some_registered_worker_can_ever_take_a_job(void **state) {
    (void)state;
    const qc_sched_worker hopper = {.n_gpus = 1, .gpus = &h200};
    const qc_sched_worker blackwell = {.n_gpus = 1, .gpus = &b200};
    const qc_sched_worker *cpu_and_hopper[] = {&cpu_worker, &hopper};
    const qc_sched_worker *all[] = {&cpu_worker, &hopper, &blackwell};
    qc_sched_job fp4 = job(1, 0);
    fp4.native_fp4 = true;
    assert_false(qc_sched_fits_any(cpu_and_hopper, 2, &fp4));
    assert_true(qc_sched_fits_any(all, 3, &fp4));
    assert_false(qc_sched_fits_any(NULL, 0, &fp4));
    qc_sched_job huge = job(2, 0);
    huge.gpu_mem_mb = 200000; /* more than any one GPU here */
    assert_false(qc_sched_fits_any(all, 3, &huge));
}

static void gpus_are_read_back_from_the_stored_json(void **state) {
    (void)state;
    qc_sched_gpu g[4];
    int n = -1;
    assert_true(qc_sched_gpus_from_json(
        "[{\"name\":\"NVIDIA H200\",\"memory_mb\":143771,\"cc\":\"9.0\",\"native_fp4\":false},"
        "{\"name\":\"NVIDIA B200\",\"memory_mb\":183359,\"cc\":\"10.0\",\"native_fp4\":true}]",
        g, 4, &n));
    assert_int_equal(n, 2);
    assert_int_equal(g[0].mem_mb, 143771);
    assert_false(g[0].native_fp4);
    assert_int_equal(g[1].mem_mb, 183359);
    assert_true(g[1].native_fp4);
    assert_true(qc_sched_gpus_from_json("[]", g, 4, &n));
    assert_int_equal(n, 0);
    /* at most cap are kept */
    assert_true(qc_sched_gpus_from_json("[{\"memory_mb\":1},{\"memory_mb\":2}]", g, 1, &n));
    assert_int_equal(n, 1);
    assert_int_equal(g[0].mem_mb, 1);
    /* not an array, or a GPU without its memory: refused, nothing kept */
    assert_false(qc_sched_gpus_from_json("{}", g, 4, &n));
    assert_int_equal(n, 0);
    assert_false(qc_sched_gpus_from_json("[{\"name\":\"x\"}]", g, 4, &n));
    assert_int_equal(n, 0);
    assert_false(qc_sched_gpus_from_json("not json", g, 4, &n));
}

static void worker_gets_only_the_kinds_it_advertised(void **state) {
    (void)state;
    qc_sched_job train = job(1, 9), eval = job(2, 0);
    train.kind = "train";
    eval.kind = "eval";
    qc_sched_job *q[] = {&train, &eval};
    const char *kinds[] = {"eval", "sleep"};
    const qc_sched_worker evaluator = {.kinds = kinds, .n_kinds = 2};
    assert_int_equal(qc_sched_pick(&evaluator, q, 2, 0, NULL, NULL, NULL), 1);
    /* a worker that advertised none takes any kind */
    assert_int_equal(qc_sched_pick(&cpu_worker, q, 2, 0, NULL, NULL, NULL), 0);
    const char *other[] = {"sleep"};
    const qc_sched_worker sleeper = {.kinds = other, .n_kinds = 1};
    assert_int_equal(qc_sched_pick(&sleeper, q, 2, 0, NULL, NULL, NULL), -1);
}

static void worker_a_job_failed_on_gets_it_only_after_the_others_had_their_turn(void **state) {
    (void)state;
    qc_sched_job retry = job(1, 5), next = job(2, 0);
    retry.avoid = "w1";
    retry.avoid_until_ms = 1000;
    qc_sched_job *q[] = {&retry, &next};
    const qc_sched_worker w1 = {.name = "w1"}, w2 = {.name = "w2"};
    int64_t wake = INT64_MAX;
    assert_int_equal(qc_sched_pick(&w1, q, 2, 500, NULL, NULL, &wake), 1);
    assert_int_equal(wake, 1000);
    assert_int_equal(qc_sched_pick(&w2, q, 2, 500, NULL, NULL, NULL), 0);
    assert_int_equal(qc_sched_pick(&w1, q, 2, 1000, NULL, NULL, NULL), 0);
}

/* A request names a backend's paths or one path exactly. */
static void numerics_request_matches_its_backend_or_its_path(void **state) {
    (void)state;
    assert_true(qs_numerics_path_matches("cpu", "cpu-qsweep-fixed2"));
    assert_true(qs_numerics_path_matches("cpu", "cpu-openblas-0.3.21-haswell"));
    assert_true(qs_numerics_path_matches("cpu", "cpu"));
    assert_false(qs_numerics_path_matches("cpu", "cuda-cc90-auto"));
    assert_false(qs_numerics_path_matches("cpu", "cpux"));
    assert_true(qs_numerics_path_matches("cuda", "cuda-cc100-auto"));
    assert_false(qs_numerics_path_matches("cuda", "cpu-qsweep-fixed2"));
    assert_true(qs_numerics_path_matches("cuda-cc90-auto", "cuda-cc90-auto"));
    assert_false(qs_numerics_path_matches("cuda-cc90-auto", "cuda-cc90-emulated"));
    assert_true(qs_numerics_path_matches("any", "cuda-cc90-emulated"));
}

/* An experiment's jobs go to workers on its pinned path and its requested one; a job asking
 * for a path, or pinned, goes to no worker that announced none; "any" goes anywhere. */
static void job_goes_only_to_a_worker_on_its_pinned_and_requested_path(void **state) {
    (void)state;
    const char *pin = NULL;
    qc_sched_job j = job(1, 0);
    j.pinned = &pin;
    const qc_sched_worker fixed = {.numerics_path = "cpu-qsweep-fixed2"},
                          blas = {.numerics_path = "cpu-openblas-0.3.21-haswell"},
                          gpu = {.numerics_path = "cuda-cc90-auto"}, silent = {0};
    /* not pinned, no request: any worker (its first job pins it) */
    assert_true(qc_sched_on_path(&fixed, &j) && qc_sched_on_path(&gpu, &j));
    assert_true(qc_sched_on_path(&silent, &j));
    pin = "cpu-qsweep-fixed2"; /* pinned: that path alone */
    assert_true(qc_sched_on_path(&fixed, &j));
    assert_false(qc_sched_on_path(&blas, &j) || qc_sched_on_path(&gpu, &j));
    assert_false(qc_sched_on_path(&silent, &j));
    qc_sched_job *q[] = {&j};
    assert_int_equal(qc_sched_pick(&blas, q, 1, 0, NULL, NULL, NULL), -1);
    assert_int_equal(qc_sched_pick(&fixed, q, 1, 0, NULL, NULL, NULL), 0);
    const qc_sched_worker *both[] = {&blas, &fixed}; /* what qsweep status asks */
    assert_true(qc_sched_on_path_any(both, 2, &j));
    assert_false(qc_sched_on_path_any(both, 1, &j));
    pin = NULL;
    j.numerics = "cuda"; /* a request: its backend's workers only, pinned or not */
    assert_true(qc_sched_on_path(&gpu, &j));
    assert_false(qc_sched_on_path(&fixed, &j) || qc_sched_on_path(&silent, &j));
    pin = "cuda-cc100-auto";
    assert_false(qc_sched_on_path(&gpu, &j));
    j.numerics = "any"; /* neither request nor pin */
    assert_true(qc_sched_on_path(&blas, &j) && qc_sched_on_path(&silent, &j));
    j.pinned = NULL;
    j.numerics = NULL; /* a job of no experiment */
    assert_true(qc_sched_on_path(&gpu, &j) && qc_sched_on_path(&silent, &j));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(queue_order_is_priority_then_age),
        cmocka_unit_test(first_in_queue_order_goes_to_a_worker_without_models),
        cmocka_unit_test(job_needing_more_gpus_or_memory_than_the_worker_has_is_skipped),
        cmocka_unit_test(worker_holding_the_model_gets_its_job_before_higher_priority_ones),
        cmocka_unit_test(job_in_backoff_waits_and_sets_the_next_wake),
        cmocka_unit_test(job_with_unmet_dependencies_is_skipped_and_deps_asked_only_when_due),
        cmocka_unit_test(entries_no_longer_pending_are_passed_over),
        cmocka_unit_test(native_fp4_job_fits_only_a_worker_whose_gpus_have_it),
        cmocka_unit_test(tensor_parallel_job_needs_its_memory_on_each_of_its_gpus),
        cmocka_unit_test(job_with_default_resources_fits_cpu_and_gpu_workers),
        cmocka_unit_test(fits_any_says_whether_some_registered_worker_can_ever_take_a_job),
        cmocka_unit_test(gpus_are_read_back_from_the_stored_json),
        cmocka_unit_test(worker_gets_only_the_kinds_it_advertised),
        cmocka_unit_test(worker_a_job_failed_on_gets_it_only_after_the_others_had_their_turn),
        cmocka_unit_test(numerics_request_matches_its_backend_or_its_path),
        cmocka_unit_test(job_goes_only_to_a_worker_on_its_pinned_and_requested_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
