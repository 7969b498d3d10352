/* The CUDA backend's causal attention (worker/engine/ops_cuda_attention.cu: FlashAttention-2's
 * blocked online softmax, no T x T scores) against the CPU reference qw_attention_forward on
 * random q, k, v in [-1, 1), through the ops table as the forward calls it: q, k, v uploaded
 * to the backend's own device memory, the op queued, the result downloaded (the download is
 * the host's only wait). Bound: max |gpu - cpu| <= 1e-5 * max |cpu|. Both sides sum E products
 * per score and T values per output in FP32 in different orders, and the online softmax
 * rescales its running sums once per 32-key tile; for E <= 128 and T <= 1024 of O(1) values
 * the difference stays near 1e-6 (the bound the table's other FP32 GEMMs meet, test_ops_cuda).
 * Shapes: GQA groups of 4 and 1 (MHA), head_dim 64, 128 and 80 (not a multiple of the 32 lanes),
 * T crossing many 32-key tiles and not a multiple of them, T = 1; and head_dim 160, wider than the
 * kernel takes, on the T x T fallback. Exits 77 (ctest: skipped) with a message when no CUDA
 * device is visible. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "gpu_test_util.h"
#include "ops.h"
#include "ops_cuda.h"

static qw_backend gpu;
static uint64_t rng = 0x2545F4914F6CDD1Dull;

/* Uniform in [-1, 1) (xorshift64*). */
static float urand(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A device buffer of b holding host[n]. */
static float *upload(const float *host, size_t n) {
    qs_error err = {0};
    float *d = gpu.ops->alloc(&gpu, n * sizeof(float));
    assert_non_null(d);
    assert_int_equal(gpu.ops->upload(&gpu, d, host, n * sizeof(float), &err), QS_OK);
    return d;
}

static void attention_case(int T, int H, int G, int E) {
    size_t nq = (size_t)T * H * E, nk = (size_t)T * G * E;
    float *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float)),
          *v = malloc(nk * sizeof(float)), *ref = malloc(nq * sizeof(float)),
          *got = malloc(nq * sizeof(float)),
          *scores = malloc((size_t)QW_ATT_TILE * T * sizeof(float));
    assert_true(q && k && v && ref && got && scores);
    for (size_t i = 0; i < nq; i++)
        q[i] = urand();
    for (size_t i = 0; i < nk; i++) {
        k[i] = urand();
        v[i] = urand();
    }
    qw_attention_forward(ref, q, k, v, scores, T, H, G, E, 1);
    float *dq = upload(q, nq), *dk = upload(k, nk), *dv = upload(v, nk);
    float *da = gpu.ops->alloc(&gpu, nq * sizeof(float));
    assert_non_null(da);
    qw_tensor tq = {dq, T, H * E}, tk = {dk, T, G * E}, tv = {dv, T, G * E}, ta = {da, T, H * E};
    gpu.ops->attention(&gpu, &ta, &tq, &tk, &tv, NULL, H, G, E);
    gpu.ops->download(&gpu, got, (size_t)H * E, &ta);
    qs_error err = {0};
    qs_status st = qw_backend_cuda_check(&gpu, &err);
    if (st != QS_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QS_OK);
    double md = 0, mr = 0;
    for (size_t i = 0; i < nq; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= md)) md = d; /* NaN propagates */
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    double rel = mr > 0 ? md / mr : md;
    printf("  attention T%-5d H%-3d G%-3d E%-4d rel err %.3g (bound 1e-5) %s\n", T, H, G, E, rel,
           rel <= 1e-5 ? "OK" : "NOT OK");
    assert_true(rel <= 1e-5);
    gpu.ops->free(&gpu, dq);
    gpu.ops->free(&gpu, dk);
    gpu.ops->free(&gpu, dv);
    gpu.ops->free(&gpu, da);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(got);
    free(scores);
}

static void blocked_attention_matches_the_cpu(void **state) {
    (void)state;
    attention_case(1000, 8, 2, 64);
    attention_case(257, 4, 4, 128);
    attention_case(70, 6, 3, 80);
    attention_case(1, 4, 1, 64);
}

static void heads_wider_than_the_kernel_take_the_scores_path(void **state) {
    (void)state;
    attention_case(96, 2, 1, 160);
}

static int setup(void **state) {
    (void)state;
    return qwt_cuda_up(&gpu, QW_CUDA_GEMM_FP32) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    qw_backend_cuda_release(&gpu);
    return 0;
}

int main(void) {
    if (qwt_cuda_skip("gpu_attention")) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blocked_attention_matches_the_cpu),
        cmocka_unit_test(heads_wider_than_the_kernel_take_the_scores_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
