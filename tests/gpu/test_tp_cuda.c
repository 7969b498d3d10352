/* Tensor parallelism on GPUs through the one code path the CPU ranks take: two ranks of the
 * GQA test checkpoint (tests/engine/data/llama3_gqa), each a CUDA backend on its own device
 * (qw_tp_create's rank callback), all-reducing over NCCL ranks of worker/comm/comm.h, against
 * the same two ranks on CPU backends (CPU ranks). FP32 GEMMs on both; NCCL sums the partial
 * outputs in its own order, so the logits are compared within 1e-4 of the largest logit, the
 * FP32 rounding of the GEMMs and sums. Exits 77 (skipped, with a message) without a CUDA
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

#include "comm.h"
#include "comm_group_nccl.h"
#include "gpu_test_util.h"
#include "shard.h"

#define T 24

/* Rank r on CUDA device r, FP32 GEMMs. */
static qs_status cuda_rank(qw_backend *b, int rank, int threads, int max_in, void *ctx, int *device,
                           qs_error *err) {
    (void)threads, (void)max_in, (void)ctx;
    *device = rank;
    return qw_backend_cuda_init(b, rank, QW_CUDA_GEMM_FP32, err);
}

static const char *name_of(const void *ctx, int index, char *buf, size_t cap) {
    (void)ctx;
    snprintf(buf, cap, "linear %d", index);
    return buf;
}

static void gpu_ranks_match_cpu_ranks(void **state) {
    (void)state;
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    if (qw_checkpoint_open(QW_ENGINE_DATA "/llama3_gqa", &ck, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qw_weights wt;
    if (qw_weights_from_checkpoint(ck, &wt, &err) != QS_OK) fail_msg("%s", err.msg);
    qw_tp *cpu = NULL, *gpu = NULL;
    if (qw_tp_create(&wt, T, 2, 2, NULL, NULL, NULL, &cpu, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_tp_create(&wt, T, 2, 2, cuda_rank, qw_backend_cuda_release, NULL, &gpu, &err) != QS_OK)
        fail_msg("%s", err.msg);
    int V = wt.cfg.vocab_size;
    uint32_t tok[T];
    for (int t = 0; t < T; t++)
        tok[t] = (uint32_t)((t * 37 + 5) % V);
    const float *lc = NULL, *lg = NULL;
    if (qw_tp_forward(cpu, tok, T, 0, name_of, NULL, &lc, &err) != QS_OK) fail_msg("%s", err.msg);
    float *ref = malloc((size_t)T * V * sizeof *ref);
    assert_non_null(ref);
    memcpy(ref, lc, (size_t)T * V * sizeof *ref);
    if (qw_tp_forward(gpu, tok, T, 0, name_of, NULL, &lg, &err) != QS_OK) fail_msg("%s", err.msg);
    double md = 0.0, mx = 0.0;
    for (size_t i = 0; i < (size_t)T * V; i++) {
        double d = fabs((double)lg[i] - (double)ref[i]);
        md = d > md ? d : md;
        mx = fabs((double)ref[i]) > mx ? fabs((double)ref[i]) : mx;
    }
    printf("tensor_parallel 2 on GPUs (NCCL ranks) vs CPU ranks: max |logit difference| %.3g, "
           "relative %.3g (tolerance 1e-4)\n",
           md, md / mx);
    assert_true(md <= 1e-4 * mx);
    free(ref);
    qw_tp_destroy(gpu);
    qw_tp_destroy(cpu);
    qw_weights_release(&wt);
    qw_checkpoint_close(ck);
}

int main(void) {
    if (qwt_cuda_skip("gpu_tp_cuda")) return 77;
    qw_backend probe;
    qs_error err = {0};
    if (qw_backend_cuda_init(&probe, 1, QW_CUDA_GEMM_FP32, &err) != QS_OK) {
        printf("gpu_tp_cuda: needs two CUDA devices (%s): skipped\n", err.msg);
        return 77;
    }
    qw_backend_cuda_release(&probe);
    qw_group_set_nccl(qw_comm_group_impl());
    const struct CMUnitTest tests[] = {cmocka_unit_test(gpu_ranks_match_cpu_ranks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
