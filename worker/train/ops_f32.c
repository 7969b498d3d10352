/* The training ops in FP32 (ops.h): the path every recipe trains with. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define R float
#define QW_OPS_NAME QW_TRAIN_NAME_F32
#define EXP expf
#define GEMM cblas_sgemm
#include "ops_impl.h"
