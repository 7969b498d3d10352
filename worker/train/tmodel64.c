/* The trainable Llama model in FP64, unquantized (tmodel.h): the same forward and backward as
 * tmodel.c, for the finite-difference check of the gradients. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "philox.h"
#include "tmodel.h"

#define R double
#define TM qw_tmodel64
#define ACTS qw_tmodel64_block_acts
#define VIEW qw_tensor_view64
#define NAME QW_TMODEL_NAME_F64
#define OPS QW_TRAIN_NAME_F64
#include "tmodel_impl.h"
