/* The training ops in FP64 (ops.h): the same code as ops_f32.c, for the finite-difference
 * check of the gradients (tests/train), where FP32 rounding would swamp the differences. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define R double
#define QW_OPS_NAME QW_TRAIN_NAME_F64
#define EXP exp
#define GEMM cblas_dgemm
#include "ops_impl.h"
