/* The NCCL communicator (worker/comm/comm_nccl.h) on the GPUs of this machine: all-reduce SUM
 * and MAX over every rank in one group call equal the sums and maxima computed here (small
 * integers: exact in any summation order), the data-parallel gradient average equals the mean,
 * bad arguments are refused by name. Plain C, no cmocka, so it runs on a bare GPU host; exit
 * 77 (skipped, ctest SKIP_RETURN_CODE) with a message when there is no GPU, and after the
 * one-rank checks when there are fewer than 2. Label `gpu`. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_nccl.h"

#define N_ELEMS 4099 /* not a multiple of any NCCL chunk */

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        int ok_ = (cond);                                                                          \
        printf("%s ", ok_ ? "OK" : "NOT OK");                                                      \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        failures += !ok_;                                                                          \
    } while (0)

/* Rank r's value at i: an integer below 2^20, exact in FP32 and in any sum of 64 of them. */
static float value(int r, int i) {
    return (float)(((r + 1) * 7919 + i * 31) % 1000003 % 16384) - 8192.0f;
}

/* Fills each rank's device buffer, runs op, reads every rank back and compares with `want`. */
static void allreduce_case(qw_comm *c, qw_comm_op op, const char *name) {
    int n = qw_comm_ranks(c);
    float *dev[QW_COMM_MAX_RANKS] = {0};
    float *host = malloc(N_ELEMS * sizeof *host), *want = malloc(N_ELEMS * sizeof *want);
    for (int i = 0; i < N_ELEMS; i++) {
        double s = 0.0, m = -INFINITY;
        for (int r = 0; r < n; r++) {
            s += value(r, i);
            m = value(r, i) > m ? value(r, i) : m;
        }
        want[i] = (float)(op == QW_COMM_MAX ? m : op == QW_COMM_AVG ? s / n : s);
    }
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < N_ELEMS; i++)
            host[i] = value(r, i);
        cudaSetDevice(qw_comm_device(c, r));
        cudaMalloc((void **)&dev[r], N_ELEMS * sizeof(float));
        cudaMemcpy(dev[r], host, N_ELEMS * sizeof(float), cudaMemcpyHostToDevice);
    }
    qs_error err = {0};
    qs_status st = op == QW_COMM_AVG ? qw_comm_allreduce_gradients(c, dev, N_ELEMS, 1, &err)
                                     : qw_comm_allreduce(c, dev, N_ELEMS, op, NULL, &err);
    if (st == QS_OK) st = qw_comm_sync(c, &err);
    CHECK(st == QS_OK, "%s over %d ranks runs%s%s", name, n, st ? ": " : "", st ? err.msg : "");
    for (int r = 0; r < n && st == QS_OK; r++) {
        cudaSetDevice(qw_comm_device(c, r));
        cudaMemcpy(host, dev[r], N_ELEMS * sizeof(float), cudaMemcpyDeviceToHost);
        double worst = 0.0;
        for (int i = 0; i < N_ELEMS; i++) {
            double d = fabs((double)host[i] - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
            worst = d > worst ? d : worst;
        }
        /* sums and maxima of these integers are exact; the average is one rounding off */
        double tol = op == QW_COMM_AVG ? 1e-6 : 0.0;
        CHECK(worst <= tol, "%s rank %d: worst relative difference %.3g (tolerance %.0e)", name, r,
              worst, tol);
    }
    for (int r = 0; r < n; r++) {
        cudaSetDevice(qw_comm_device(c, r));
        cudaFree(dev[r]);
    }
    free(host);
    free(want);
}

int main(void) {
    qs_error err = {0};
    int have = qw_comm_device_count(&err);
    if (have < 1) {
        printf("SKIP: no CUDA device (%s)\n", err.msg[0] ? err.msg : "none visible");
        return 77;
    }
    /* refusals */
    qw_comm *c = NULL;
    int twice[2] = {0, 0};
    CHECK(qw_comm_init_all(2, twice, &c, &err) == QS_EINVAL && strstr(err.msg, "device 0"),
          "a device named twice is refused: %s", err.msg);
    int beyond[1] = {have};
    CHECK(qw_comm_init_all(1, beyond, &c, &err) == QS_EINVAL, "device %d of %d is refused: %s",
          have, have, err.msg);
    CHECK(qw_comm_init_all(0, NULL, &c, &err) == QS_EINVAL, "0 ranks are refused");
    /* one rank: the all-reduce is the identity */
    qs_status st = qw_comm_init_all(1, NULL, &c, &err);
    CHECK(st == QS_OK, "ncclCommInitAll over 1 device%s%s", st ? ": " : "", st ? err.msg : "");
    if (st == QS_OK) {
        allreduce_case(c, QW_COMM_SUM, "sum");
        float *none[1] = {NULL};
        CHECK(qw_comm_allreduce(c, none, 1, QW_COMM_SUM, NULL, &err) == QS_EINVAL,
              "a NULL buffer is refused: %s", err.msg);
        qw_comm_destroy(c);
    }
    if (have < 2) {
        printf("SKIP: the multi-rank checks need 2 GPUs, %d visible (%d failures above)\n", have,
               failures);
        return failures ? 1 : 77;
    }
    int n = have < 8 ? have : 8;
    st = qw_comm_init_all(n, NULL, &c, &err);
    CHECK(st == QS_OK, "ncclCommInitAll over %d devices%s%s", n, st ? ": " : "", st ? err.msg : "");
    if (st == QS_OK) {
        allreduce_case(c, QW_COMM_SUM, "sum (row-parallel partial outputs)");
        allreduce_case(c, QW_COMM_MAX, "max (sharded amax)");
        allreduce_case(c, QW_COMM_AVG, "average (data-parallel gradients)");
        qw_comm_destroy(c);
    }
    printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
