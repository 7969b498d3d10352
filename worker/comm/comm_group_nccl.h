/* NCCL ranks for the ranks interface (comm.h qw_group_nccl_impl) over the NCCL communicator
 * (comm_nccl.h). Built with qw_comm, so only with CUDA and NCCL: the CUDA backend module offers
 * it (worker/gpu/cuda_module.h), and a test linked with qw_comm registers it itself
 * (qw_group_set_nccl). */
#ifndef QW_COMM_GROUP_NCCL_H
#define QW_COMM_GROUP_NCCL_H

#include "comm.h"

/* The table: init is qw_comm_init_all, destroy qw_comm_destroy, allreduce qw_comm_allreduce on
 * the communicator's streams then qw_comm_sync. Static storage. */
const qw_group_nccl_impl *qw_comm_group_impl(void);

#endif
