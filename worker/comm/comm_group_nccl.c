/* NCCL ranks for comm.h (comm_group_nccl.h). */
#include "comm_group_nccl.h"

#include "comm_nccl.h"

static qs_status init(int n, const int *devices, void **comm, qs_error *err) {
    qw_comm *c = NULL;
    qs_status st = qw_comm_init_all(n, devices, &c, err);
    *comm = c;
    return st;
}

static void destroy(void *comm) {
    qw_comm_destroy(comm);
}

static qs_status allreduce(void *comm, float *const *bufs, size_t count, qw_group_op op,
                           qs_error *err) {
    qs_status st = qw_comm_allreduce(comm, bufs, count,
                                     op == QW_GROUP_MAX ? QW_COMM_MAX : QW_COMM_SUM, NULL, err);
    return st != QS_OK ? st : qw_comm_sync(comm, err);
}

static qs_status allreduce_rank(void *comm, int rank, float *buf, size_t count, qw_group_op op,
                                qs_error *err) {
    return qw_comm_allreduce_rank(comm, rank, buf, count,
                                  op == QW_GROUP_MAX ? QW_COMM_MAX : QW_COMM_SUM, err);
}

static const qw_group_nccl_impl impl = {init, destroy, allreduce, allreduce_rank};

const qw_group_nccl_impl *qw_comm_group_impl(void) {
    return &impl;
}
