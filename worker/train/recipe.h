/* FP4 training recipes: which GEMM inputs of which linear are quantized, and how.
 *
 * A quantized linear runs three GEMMs, each with two inputs ("Pretraining LLMs with NVFP4",
 * arXiv 2509.25149, section 4 and Fig. 5; TransformerEngine's NVFP4BlockScaling):
 *   fprop  y  = x W^T        inputs X [N x in] and W [out x in], blocks along in
 *   dgrad  dx = dy W         inputs dY [N x out] and W^T [in x out], blocks along out
 *   wgrad  dW = dy^T x       inputs dY^T [out x N] and X^T [in x N], blocks along N
 * Every quantized copy is made from the high-precision tensor (never from another quantized
 * copy); accumulation is FP32. A recipe names the format, three ingredients (2D 16x16 weight
 * blocks, the 16-point random Hadamard transform on both wgrad inputs, stochastic rounding of
 * the gradient dY), and how many first and last blocks keep high-precision (BF16) linears.
 * Embeddings, norms, attention's batched matmuls and softmax stay FP32; lm_head's GEMM inputs
 * are rounded to BF16 (FP32 in the test-only recipe fp32).
 *
 * Named recipes, version QW_RECIPE_VERSION (part of a job's key):
 *   fp32              no rounding at all (reference for gradient tests)
 *   bf16              every linear's GEMM inputs rounded to BF16 (RNE), FP32 accumulation
 *   fp8               fp8_e4m3 per-tensor current scaling on all six inputs, RNE, all blocks
 *   nvfp4             nvfp4 1x16 activations/gradients, 2D 16x16 weights, RHT16 on wgrad, SR on
 *                     dY (dgrad and wgrad), RNE elsewhere; first 0 and last 1 block BF16
 *   nvfp4-no-rht, nvfp4-no-sr, nvfp4-no-2d: nvfp4 with that ingredient off
 *   nvfp4-all-blocks  nvfp4 with every block quantized (first 0, last 0)
 *   mxfp4             the MXFP4 recipe as the NVFP4 paper compares it (arXiv 2509.25149 section 5;
 *                     docs/numerics.md 2.2-2.3, 3.6): mxfp4 (E8M0 scale, 32-blocks,
 *                     RCEIL round-up scales as App. B.4 suggests), the 32-point RHT on wgrad
 *                     ("MXFP4 uses RHT d=32", matching its 32-element blocks), SR on dY, 1D weights
 *                     (MX has no 2D form here), last 1 block BF16.
 *                     No 3/4 pre-scaling before SR: that is Tseng et al.'s (arXiv 2502.20586) and
 *                     Quartet's (arXiv 2505.14669) remedy for the OCP FLOOR scale, under which a
 *                     block's largest elements reach [4, 8) and saturate at 6, biasing SR; the
 *                     NVFP4 paper's baseline rounds the scale up (RCEIL), so amax / scale <= 6,
 *                     nothing saturates and SR is unbiased without it. The NVFP4 paper names no
 *                     pre-scale for its MXFP4 runs.
 * Version history: 1 RHT16 for every format; 2 the rht_dim ingredient, 32 for mxfp4. */
#ifndef QW_TRAIN_RECIPE_H
#define QW_TRAIN_RECIPE_H

#include <stddef.h>

#include "error.h"
#include "quant.h"

#define QW_RECIPE_VERSION 2

/* The six GEMM inputs of one linear (layout in the header comment). */
typedef enum qw_gemm_operand {
    QW_FPROP_X = 0,
    QW_FPROP_W = 1,
    QW_DGRAD_DY = 2,
    QW_DGRAD_W = 3,
    QW_WGRAD_DY = 4,
    QW_WGRAD_X = 5,
    QW_N_OPERANDS = 6,
} qw_gemm_operand;

/* What happens to one GEMM input. */
typedef enum qw_operand_mode {
    QW_MODE_FP32 = 0,  /* used as is */
    QW_MODE_BF16 = 1,  /* each element rounded to BF16, RNE (qk_codec_bf16, element.h) */
    QW_MODE_QUANT = 2, /* fake-quantized by the numeric core (qk_fake_quant) */
} qw_operand_mode;

typedef struct qw_operand_spec {
    qw_operand_mode mode;
    const qk_format *fmt; /* QW_MODE_QUANT: the format (nvfp4_2d for 2D weights) */
    qk_rounding rounding; /* QW_MODE_QUANT: RNE or SR */
    int rht;              /* 1: the RHT (hadamard.h qk_rht) along k before quantization */
    int rht_dim;          /* its tile: 16 or 32 (0 when rht is 0) */
} qw_operand_spec;

/* One recipe. Fill with qw_recipe_by_name, then adjust with qw_recipe_set. */
typedef struct qw_recipe {
    char name[32];        /* named recipe it started from */
    int version;          /* QW_RECIPE_VERSION */
    int hp_bf16;          /* high-precision linears' inputs: 1 BF16, 0 FP32 (recipe fp32) */
    const qk_format *fmt; /* quantized linears' format (nvfp4, mxfp4, fp8_e4m3); NULL: none */
    int w2d;              /* 1: weights in 16x16 2D blocks (nvfp4 only) */
    int rht;              /* 1: the RHT on both wgrad inputs */
    int rht_dim;          /* the RHT's tile, 16 or 32 (hadamard.h qk_rht) */
    int sr;               /* 1: stochastic rounding of dY into dgrad and wgrad */
    int bf16_first;       /* first blocks whose linears stay high precision */
    int bf16_last;        /* last blocks whose linears stay high precision */
} qw_recipe;

/* Fills r with the named recipe (list above). Errors: QS_EINVAL naming the unknown name and
 * listing the known ones. */
qs_status qw_recipe_by_name(const char *name, qw_recipe *r, qs_error *err);

/* Sets one ingredient from text: format (nvfp4 | mxfp4 | fp8_e4m3 | none), w2d, rht, sr
 * (0 | 1), rht_dim (16 | 32), bf16_first, bf16_last (0..1000). Errors: QS_ENOTFOUND (unknown key,
 * the message lists the keys), QS_EINVAL (bad value, or w2d=1 with a format other than nvfp4). r is
 * unchanged on error. */
qs_status qw_recipe_set(qw_recipe *r, const char *key, const char *value, qs_error *err);

/* Checks the recipe against a model of n_layers blocks. Errors: QS_EINVAL (w2d without
 * nvfp4, negative counts, rht_dim not 16 or 32). Counts above n_layers just keep every block high
 * precision. */
qs_status qw_recipe_check(const qw_recipe *r, int n_layers, qs_error *err);

/* Canonical text, the same for equal recipes whatever their name:
 * "v2 format=nvfp4 w2d=1 rht=1 rht_dim=16 sr=1 bf16_first=0 bf16_last=1 hp=bf16". Returns the
 * length snprintf would write. */
int qw_recipe_canonical(const qw_recipe *r, char *buf, size_t cap);

/* 1 when block `layer` (0..n_layers-1) has quantized linears under r. */
int qw_recipe_layer_quantized(const qw_recipe *r, int layer, int n_layers);

/* What r does to GEMM input op of a linear of block `layer`; layer -1 is lm_head. */
void qw_recipe_operand(const qw_recipe *r, int layer, int n_layers, qw_gemm_operand op,
                       qw_operand_spec *out);

/* "fprop_x", "fprop_w", "dgrad_dy", "dgrad_w", "wgrad_dy", "wgrad_x". */
const char *qw_gemm_operand_name(qw_gemm_operand op);

#endif
