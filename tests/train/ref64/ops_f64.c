/* The FP64 reference ops (ops64.h), for the finite-difference check of the gradients. */
#include "ops64.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define R double
#define QW_OPS_NAME QW_TRAIN_NAME_F64
#define EXP exp
#define GEMM cblas_dgemm
#include "ops_impl.h"
