/* Which GPU GEMM path each training GEMM takes: a pure function of the recipe, the block, the
 * GEMM kind (fprop, dgrad, wgrad), the device's capability and what its GEMM probe proved
 * (kernels/cuda/qk_gemm_probe.h), and the user's request ($QSWEEP_CUDA_GEMM). Plain C built in
 * every tree, so the table is tested on any machine (tests/train/test_recipe_path.c).
 *
 * Each GEMM input reaches the GEMM as one operand type (qw_operand_gemm_type):
 *   QW_MODE_FP32                      BF16 type, not BF16-exact     (an FP32 GEMM)
 *   QW_MODE_BF16                      BF16 type, exact
 *   QW_MODE_QUANT nvfp4 / nvfp4_2d    QK_GEMM_NVFP4 (2D weights are 1x16 blocks to the tensor
 *                                     core: the 16x16 block's scale repeated in its 16 rows)
 *   QW_MODE_QUANT mxfp4               QK_GEMM_MXFP4
 *   QW_MODE_QUANT fp8_e4m3            QK_GEMM_FP8_E4M3 (one FP32 scale per tensor)
 *   QW_MODE_QUANT other formats       BF16 type, exact as qw_format_bf16_exact says
 * and the GEMM's path is qk_gemm_probe_decide of its two operands (the second input of each
 * GEMM in qlinear.h's order standing where the decision reads the weight):
 *   both FP4 of one format, probe ok  native_fp4 (cuBLASLt block-scaled, FP32 accumulation,
 *                                     the two tensor scales in alpha)
 *   both FP4, probe not ok / untried  emulated_bf16 (codes x block scales exact in BF16, a
 *                                     BF16 GEMM with FP32 accumulation, tensor scales in alpha)
 *   both FP8 E4M3, cc >= 8.9, ok      fp8 (FP8 tensor-core GEMM, tensor scales in alpha)
 *   both FP8, otherwise               emulated_bf16 (an E4M3 value has 4 significant bits)
 *   both BF16-exact                   bf16
 *   any FP32 input                    fp32
 * Request fp32, bf16 and emulated act as in qk_gemm_path.h. The emulated and the native paths
 * multiply the same exact values and differ only in FP32 summation order, which is what lets a
 * CPU run (recipe_emul.h) judge a GPU run. */
#ifndef QW_TRAIN_RECIPE_PATH_H
#define QW_TRAIN_RECIPE_PATH_H

#include "bf16_exact.h"
#include "qk_gemm_probe.h"
#include "recipe.h"

/* The operand type of GEMM input spec (table above); *bf16_exact 1 when a BF16-typed operand's
 * values are exact in BF16 (NULL allowed). Pure. */
qk_gemm_type qw_operand_gemm_type(const qw_operand_spec *spec, int *bf16_exact);

/* The path of GEMM g of a linear of block `layer` (-1: lm_head) under r, on a device whose
 * probe (NULL: nothing proved, cc taken as 0) says what runs natively, under req. Pure. */
qk_gemm_decision qw_recipe_gemm_decide(const qw_recipe *r, int layer, int n_layers,
                                       qw_linear_gemm g, const qk_gemm_probe *probe,
                                       qk_gemm_request req);

/* The path GEMM kind g of a whole micro-step takes: the most specific path over its linears
 * (native_fp4 > fp8 > emulated_bf16 > bf16 > fp32: the quantized blocks' path where any block
 * is quantized), *n_quant the linears whose path is native_fp4, fp8 or emulated_bf16 (lm_head
 * counts once, every block QW_TMODEL_KINDS times: n_kinds). Pure. */
qk_gemm_path qw_recipe_kind_path(const qw_recipe *r, int n_layers, int n_kinds, qw_linear_gemm g,
                                 const qk_gemm_probe *probe, qk_gemm_request req, int *n_quant);

/* The path a result names for a set of paths run (bit p: qk_gemm_path p ran, qlinear.h
 * env->ran): "fp32" when any GEMM ran FP32, else the most specific (native_fp4, fp8,
 * emulated_bf16, bf16); "none" for an empty set. Pure. */
const char *qw_train_ran_path(unsigned ran);

#endif
