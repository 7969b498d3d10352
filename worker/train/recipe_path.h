/* Which GPU GEMM path each training GEMM takes: a pure function of the recipe, the block, the
 * GEMM kind (fprop, dgrad, wgrad), what the device's GEMM probe proved (its capability and
 * outcomes, kernels/cuda/qk_gemm_probe.h) and the user's request ($QSWEEP_CUDA_GEMM). Plain C
 * built in every tree, so the table is tested on any machine (tests/train/test_recipe_path.c).
 *
 * It is the CUDA backend's route (worker/engine/quant_gemm_route.h qw_quant_gemm_route) plus
 * the fallback of worker/train/qlinear.c linear_gemm, not a table of its own:
 *   both inputs quantized, the route runs it   the route's path: native_fp4 (FP4 of one family,
 *                                              requests auto, probe ok), emulated_bf16 (FP4
 *                                              otherwise, request emulated included), fp8 (FP8
 *                                              E4M3, auto, cc >= 8.9, fp8_tensor probe ok)
 *   both quantized, the route declines (FP8    fake-quantized inputs, then bf16 when both are
 *   below 8.9, with a probe not ok or under    exact in BF16 (MXFP4), else fp32 (NVFP4, FP8:
 *   request emulated; formats of two families; their FP32 tensor scale, bf16_exact.h)
 *   anything under request bf16, which opens
 *   no handle)
 *   any input unquantized                      bf16 when both are exact in BF16 (BF16-rounded
 *                                              operands), else fp32
 *   any GEMM under request fp32                fp32 (qlinear.h gemm_fp32)
 * The emulated and the native FP4 paths multiply the same exact values and differ only in FP32
 * summation order, which is what lets a CPU run (recipe_emul.h) judge a GPU run. The table
 * assumes every output width a multiple of 4 (the route declines others). */
#ifndef QW_TRAIN_RECIPE_PATH_H
#define QW_TRAIN_RECIPE_PATH_H

#include "bf16_exact.h"
#include "qk_gemm_probe.h"
#include "recipe.h"

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
