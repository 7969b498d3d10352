/* The ranks interface of a job that runs on several backends in lockstep from one host thread
 * (data-parallel training: one model replica per rank; tensor-parallel evaluation): a group of
 * n ranks and the all-reduce they share, with two implementations:
 * - CPU ranks (qw_group_cpu): the ranks' buffers live in this process's memory and every
 *   element is reduced in rank order 0, 1, ..., n-1 (an OpenMP team splits the elements, never
 *   an element's sum), so the result is deterministic and the same bits on every rank;
 * - NCCL (qw_group_nccl): one communicator per GPU of the node, made together by
 *   ncclCommInitAll, each collective one group call over all ranks (comm_nccl.h). NCCL sums in
 *   its own order (ring or tree). This file links no NCCL: the NCCL ranks are the table
 *   qw_group_set_nccl registers (comm_group_nccl.h; in the qsweep binaries the CUDA backend
 *   module's, worker/gpu/cuda_module.h, registered by the layer that loads it).
 * Not thread-safe: one host thread drives all ranks. */
#ifndef QW_COMM_H
#define QW_COMM_H

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

/* A group of n ranks. threads: the CPU reduction's OpenMP team. nccl: the communicator
 * (comm_nccl.h qw_comm), NULL for CPU ranks. */
typedef struct qw_group {
    qw_group_kind kind;
    int n;
    int threads;
    void *nccl;
} qw_group;

/* Most ranks of a group. */
#define QW_GROUP_MAX_RANKS 64

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

#endif
