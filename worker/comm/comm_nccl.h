/* The NCCL communicator of a worker that drives several GPUs of its node from one process:
 * one communicator per device made together by ncclCommInitAll, and the
 * collectives qsweep needs, each issued as one NCCL group call over all ranks (NCCL's rule
 * for a single thread driving several devices: "Group calls", NCCL user guide):
 * - all-reduce SUM of the partial outputs of a tensor-parallel row-parallel linear (o_proj,
 *   down_proj; Megatron-LM, arXiv 1909.08053) and MAX of a sharded tensor's amax (so every
 *   rank's FP4 tensor scale is the single-GPU one; worker/engine/shard.h);
 * - the data-parallel gradient all-reduce of training: a flat FP32 gradient buffer per rank,
 *   summed or averaged (ncclAvg) in place.
 * Buffers are device pointers, one per rank, on that rank's device; streams are cudaStream_t
 * (NULL = the rank's default stream), passed as void * so that callers need no CUDA header.
 * Calls are asynchronous on the streams; qw_comm_sync waits for them. Built only when CUDA and
 * NCCL are found (CMake target qw_comm); a CPU worker never links it. qw_comm_allreduce is called
 * by one host thread for all ranks, qw_comm_allreduce_rank by each rank's own thread. */
#ifndef QW_COMM_NCCL_H
#define QW_COMM_NCCL_H

#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most ranks of one communicator (the GPUs of a node). */
#define QW_COMM_MAX_RANKS 64

typedef enum qw_comm_op {
    QW_COMM_SUM = 0, /* ncclSum */
    QW_COMM_MAX = 1, /* ncclMax */
    QW_COMM_AVG = 2, /* ncclAvg: the sum divided by the ranks (NCCL >= 2.10) */
} qw_comm_op;

typedef struct qw_comm qw_comm;

/* CUDA devices visible to this process (cudaGetDeviceCount); 0 when the driver finds none
 * or fails (its error in err when err != NULL). */
int qw_comm_device_count(qs_error *err);

/* One communicator over n devices devices[0..n-1] (NULL: 0..n-1), rank i on devices[i]:
 * ncclCommInitAll, and one non-blocking stream per rank. Errors: QS_EINVAL (n outside
 * 1..QW_COMM_MAX_RANKS, a device out of range or repeated), QS_EIO (CUDA or NCCL failed: the
 * message quotes ncclGetErrorString / cudaGetErrorString), QS_ENOMEM. */
qs_status qw_comm_init_all(int n, const int *devices, qw_comm **out, qs_error *err);

/* Frees the communicators (ncclCommDestroy) and streams. NULL is a no-op. */
void qw_comm_destroy(qw_comm *c);

/* Number of ranks (GPUs) of the communicator: n of qw_comm_init_all. */
int qw_comm_ranks(const qw_comm *c);
/* CUDA device index of rank `rank` (0 <= rank < qw_comm_ranks; devices[rank] of init). */
int qw_comm_device(const qw_comm *c, int rank);

/* The rank's stream (cudaStream_t) on which the collectives run unless the caller passes its
 * own. */
void *qw_comm_stream(const qw_comm *c, int rank);

/* In place: bufs[r] [count] FP32 on rank r's device; afterwards every bufs[r] holds the
 * elementwise op over all ranks. streams NULL: the communicator's own. One group call
 * (ncclGroupStart, one ncclAllReduce per rank, ncclGroupEnd). NCCL's sum order is its own
 * (ring or tree), so sums may differ from the CPU backend's rank-order sum by rounding; MAX is
 * exact. Errors: QS_EINVAL (count 0, a NULL buffer), QS_EIO (NCCL). */
qs_status qw_comm_allreduce(qw_comm *c, float *const *bufs, size_t count, qw_comm_op op,
                            void *const *streams, qs_error *err);

/* Rank `rank`'s part of an all-reduce that every rank's own host thread calls on its own
 * communicator (NCCL's one-thread-per-device use; no group call): buf [count] FP32 on the rank's
 * device, in place, on the rank's communicator stream, then waits for that stream. Errors: as
 * qw_comm_allreduce, QS_EINVAL for a rank out of range. */
qs_status qw_comm_allreduce_rank(qw_comm *c, int rank, float *buf, size_t count, qw_comm_op op,
                                 qs_error *err);

/* Data-parallel training: grads[r] [n] FP32 (the flat gradient of rank r's replica) summed
 * over the ranks, or averaged when average != 0 (the mean gradient of the global batch when
 * every rank's loss is a mean over an equal share of it), in place, then waits for it (the
 * optimizer step reads the result). Errors: as qw_comm_allreduce. */
qs_status qw_comm_allreduce_gradients(qw_comm *c, float *const *grads, size_t n, int average,
                                      qs_error *err);

/* Waits for every rank's stream. Errors: QS_EIO (CUDA, or an asynchronous NCCL error reported
 * by ncclCommGetAsyncError). */
qs_status qw_comm_sync(qw_comm *c, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
