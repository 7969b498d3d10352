/* kinds_resources_fit: the GPU memory the grid computes for an eval job (kinds/resources.h,
 * the estimate of common/device_memory.h) against the scheduler's fit rule
 * (coordinator/server/scheduler.h qc_sched_fits), on the real Llama shapes (each model's public
 * config.json on huggingface.co: hidden, intermediate, layers, heads, kv heads, vocabulary,
 * torch_dtype): Llama-2-7B, Llama-3-8B and Llama-2-13B run on one 80 GB GPU; Llama-2-70B and
 * Llama-3-70B on none, and on workers of four or eight such GPUs at tensor parallel 4 or 8. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "resources.h"
#include "scheduler.h"
#include "spec.h"

/* An "80 GB" GPU as its HELLO reports it, MiB of decimal 80 GB (below an H100's 80 GiB). */
#define MIB_80GB (80000000000ll >> 20)

typedef struct model {
    const char *name;
    qs_model_size size;
} model;

/* head_dim = hidden / heads = 128 for all; F16 (Llama 2) and BF16 (Llama 3) both 2 bytes. */
static const model models[] = {
    {"Llama-2-7b-hf", {{4096, 11008, 32, 32, 32, 128, 32000, false}, 2}},
    {"Meta-Llama-3-8B", {{4096, 14336, 32, 32, 8, 128, 128256, false}, 2}},
    {"Llama-2-13b-hf", {{5120, 13824, 40, 40, 40, 128, 32000, false}, 2}},
    {"Llama-2-70b-hf", {{8192, 28672, 80, 64, 8, 128, 32000, false}, 2}},
    {"Meta-Llama-3-70B", {{8192, 28672, 80, 64, 8, 128, 128256, false}, 2}},
};

/* The GPU need of an eval job quantizing every block linear in NVFP4 (the cumulative mode's
 * last block: masters and packed forms both resident) at ctx 4096 over tp GPUs. */
static qc_sched_job job_of(const model *m, int tp) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"kind\":\"eval\",\"model\":{\"path\":\"/m\",\"digest\":\"%064d\"},"
             "\"dataset\":{\"path\":\"/d\",\"digest\":\"%064d\",\"ctx\":4096,\"max_chunks\":0},"
             "\"format\":\"nvfp4\",\"format_options\":{},\"quantize\":\"weights\","
             "\"mode\":\"cumulative\",\"part\":\"%d\",\"metrics\":[\"ppl\"],"
             "\"numerics_version\":\"%s\",\"resources\":{\"gpu_count\":%d,"
             "\"gpu_memory_mib\":0,\"native_fp4\":false}}",
             0, 0, m->size.shape.n_layers - 1, QS_NUMERICS_VERSION, tp);
    json_t *spec = json_loads(text, 0, NULL);
    assert_non_null(spec);
    qs_job_need n;
    qs_error err = {0};
    if (qs_job_resources("eval", spec, &m->size, &n, &err)) fail_msg("%s: %s", m->name, err.msg);
    json_decref(spec);
    assert_int_equal(n.gpus, tp);
    return (qc_sched_job){.id = 1, .gpus = n.gpus, .gpu_mem_mb = n.gpu_mem_mb, .pending = true};
}

/* A worker of n 80 GB GPUs. */
static qc_sched_worker worker_of(int n, qc_sched_gpu *gpus) {
    for (int i = 0; i < n; i++)
        gpus[i] = (qc_sched_gpu){.mem_mb = MIB_80GB, .native_fp4 = false};
    return (qc_sched_worker){.n_gpus = n, .gpus = gpus};
}

static void seven_to_thirteen_b_fit_one_80gb_gpu(void **state) {
    (void)state;
    qc_sched_gpu g[1];
    qc_sched_worker w = worker_of(1, g);
    for (int i = 0; i < 3; i++) {
        qc_sched_job j = job_of(&models[i], 1);
        if (!qc_sched_fits(&w, &j))
            fail_msg("%s needs %lld MiB", models[i].name, (long long)j.gpu_mem_mb);
    }
}

static void seventy_b_fits_no_single_gpu_and_tensor_parallel_four_or_eight(void **state) {
    (void)state;
    qc_sched_gpu g1[1], g2[2], g4[4], g8[8];
    qc_sched_worker w1 = worker_of(1, g1), w2 = worker_of(2, g2), w4 = worker_of(4, g4),
                    w8 = worker_of(8, g8);
    const qc_sched_worker *all[] = {&w1, &w2, &w4, &w8};
    for (int i = 3; i < 5; i++) {
        qc_sched_job one = job_of(&models[i], 1);
        /* its whole need is more than any one GPU has: no worker takes it, whatever its size */
        assert_true(one.gpu_mem_mb > MIB_80GB);
        assert_false(qc_sched_fits_any(all, 4, &one));
        /* tp 2: half the linears still exceed 80 GB for Llama 3's vocabulary and Llama 2's
           alike */
        qc_sched_job two = job_of(&models[i], 2);
        assert_false(qc_sched_fits_any(all, 4, &two));
        qc_sched_job four = job_of(&models[i], 4), eight = job_of(&models[i], 8);
        assert_false(qc_sched_fits(&w2, &four));
        assert_true(qc_sched_fits(&w4, &four));
        assert_true(qc_sched_fits(&w8, &four));
        assert_false(qc_sched_fits(&w4, &eight));
        assert_true(qc_sched_fits(&w8, &eight));
        assert_true(eight.gpu_mem_mb < four.gpu_mem_mb);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seven_to_thirteen_b_fit_one_80gb_gpu),
        cmocka_unit_test(seventy_b_fits_no_single_gpu_and_tensor_parallel_four_or_eight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
