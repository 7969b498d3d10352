/* The test-side FP64 reference of the trainable model (tmodel64.h): worker/train/tmodel.c's
 * forward and backward in double without quantization, for the finite-difference check of the
 * gradients and the FP32-against-FP64 comparison (tests/train/test_grads.c). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops64.h"
#include "philox.h"
#include "tmodel64.h"

#define R double
#define TM qw_tmodel64
#define ACTS qw_tmodel64_block_acts
#define VIEW qw_tensor_view64
#define QW_TMODEL_NAME_F64(x) qw_tmodel64_##x
#define NAME QW_TMODEL_NAME_F64
#define OPS QW_TRAIN_NAME_F64
#include "tmodel_impl.h"
