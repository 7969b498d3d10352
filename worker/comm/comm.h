/* The ranks interface of a job that runs on several backends (data-parallel training: one
 * model replica per rank; tensor-parallel evaluation): a group of n ranks, the all-reduce they
 * share, and the rank threads that run them concurrently (qw_ranks_run: one host thread per
 * rank, meeting only at the group's collectives), with two implementations:
 * - CPU ranks (qw_group_cpu): the ranks' buffers live in this process's memory and every
 *   element is reduced in rank order 0, 1, ..., n-1 (an OpenMP team splits the elements, never
 *   an element's sum), so the result is deterministic and the same bits on every rank;
 * - NCCL (qw_group_nccl): one communicator per GPU of the node, made together by
 *   ncclCommInitAll, each collective one group call over all ranks (comm_nccl.h). NCCL sums in
 *   its own order (ring or tree). This file links no NCCL: the NCCL ranks are the table
 *   qw_group_set_nccl registers (comm_group_nccl.h; in the qsweep binaries the CUDA backend
 *   module's, worker/gpu/cuda_module.h, registered by the layer that loads it).
 * qw_group_allreduce is called by one thread for all ranks; qw_group_allreduce_rank by every
 * rank's own thread, each with its own buffer. */
#ifndef QW_COMM_H
#define QW_COMM_H

#include <pthread.h>
#include <stddef.h>

#include "error.h"

typedef enum qw_group_kind {
    QW_GROUP_CPU = 0,
    QW_GROUP_NCCL = 1,
} qw_group_kind;

typedef enum qw_group_op {
    QW_GROUP_SUM = 0, /* gradients of data-parallel replicas; partial outputs of a linear */
    QW_GROUP_MAX = 1, /* per-tensor amax of a sharded tensor (FP4 tensor scale) */
} qw_group_op;

/* Most ranks of a group. */
#define QW_GROUP_MAX_RANKS 64

/* A group of n ranks. threads: the CPU reduction's OpenMP team. nccl: the communicator
 * (comm_nccl.h qw_comm), NULL for CPU ranks. The rest is where rank threads meet: a barrier
 * (arrived of n, generation gen) that a failing rank can break (aborted), and each rank's
 * buffer of the collective in progress. */
typedef struct qw_group {
    qw_group_kind kind;
    int n;
    int threads;
    void *nccl;
    int meet_init;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, aborted; /* aborted: 1 + the rank that broke the group (-1: from outside) */
    unsigned gen;
    float *slot[QW_GROUP_MAX_RANKS];
} qw_group;

/* CPU ranks: n ranks (1..QW_GROUP_MAX_RANKS) reduced by `threads` (>= 1) threads. Errors:
 * QS_EINVAL naming the bad count. */
qs_status qw_group_cpu(qw_group *g, int n, int threads, qs_error *err);

/* An implementation of NCCL ranks: init makes the communicator *comm of n ranks, rank i on
 * devices[i] (NULL: 0..n-1); destroy frees it; allreduce is qw_group_allreduce's (device
 * buffers, waits for the result). Errors as qw_comm_init_all and qw_comm_allreduce
 * (comm_nccl.h). */
typedef struct qw_group_nccl_impl {
    qs_status (*init)(int n, const int *devices, void **comm, qs_error *err);
    void (*destroy)(void *comm);
    qs_status (*allreduce)(void *comm, float *const *bufs, size_t count, qw_group_op op,
                           qs_error *err);
    /* rank's part of an all-reduce every rank's thread calls with its own buffer */
    qs_status (*allreduce_rank)(void *comm, int rank, float *buf, size_t count, qw_group_op op,
                                qs_error *err);
} qw_group_nccl_impl;

/* Registers the NCCL ranks qw_group_nccl makes from now on (NULL: none); impl must outlive
 * every group made with it. Thread-safe (an atomic pointer). */
void qw_group_set_nccl(const qw_group_nccl_impl *impl);

/* NCCL ranks through the registered implementation: rank i on CUDA device devices[i] (NULL:
 * 0..n-1). Errors: QS_EUNSUPPORTED when none is registered (the message says where they come
 * from), those of the implementation's init. */
qs_status qw_group_nccl(qw_group *g, int n, const int *devices, qs_error *err);

/* Frees the communicator (NCCL); a zeroed group is a no-op. */
void qw_group_destroy(qw_group *g);

/* In place: bufs[r] [count] FP32 in rank r's memory (host for CPU ranks, device for NCCL);
 * afterwards every bufs[r] holds the elementwise op over all ranks, and the call has waited
 * for it. Errors: QS_EINVAL (count 0 with NCCL, a NULL buffer), QS_EIO (NCCL). */
qs_status qw_group_allreduce(qw_group *g, float *const *bufs, size_t count, qw_group_op op,
                             qs_error *err);

/* Rank `rank`'s part of an all-reduce that all n ranks' threads call (qw_ranks_run), each with
 * buf [count] in its own memory: afterwards every buf holds the elementwise op over the ranks,
 * the same bits as qw_group_allreduce (CPU ranks: each element reduced in rank order 0..n-1, the
 * elements split between the rank threads; NCCL: ncclAllReduce on the rank's communicator).
 * Errors: QS_EINVAL (rank out of range, a NULL buffer), QS_ESTATE (another rank failed and
 * broke the group, qw_group_abort), QS_EIO (NCCL). */
qs_status qw_group_allreduce_rank(qw_group *g, int rank, float *buf, size_t count, qw_group_op op,
                                  qs_error *err);

/* Breaks the group: every rank waiting in a collective, and every later one, returns
 * QS_ESTATE, so that ranks whose peer failed do not wait for it forever. */
void qw_group_abort(qw_group *g);

/* Runs fn(ctx, r, err_r) for r = 0..n-1 concurrently, rank 0 on the calling thread and each
 * other rank on a thread of its own, and waits for all of them. g (NULL when n == 1) is reset
 * first and broken (qw_group_abort) when a rank fails. Returns the error of the rank that failed
 * first (not that of a rank that only saw the group broken), wrapped with "rank r" when n > 1.
 * Errors: QS_EINVAL (n outside 1..QW_GROUP_MAX_RANKS, a group of another size), QS_ENOMEM (no
 * thread), fn's. */
qs_status qw_ranks_run(qw_group *g, int n, qs_status (*fn)(void *ctx, int rank, qs_error *err),
                       void *ctx, qs_error *err);

#endif
