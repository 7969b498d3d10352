/* Whether the CUDA training op gemm_abt_quant (ops.h) runs a GEMM whose two inputs the recipe
 * quantizes, and on which operands: a pure function of the formats, the output's width and what
 * the GEMM handle chose for that pairing on this device (kernels/cuda qk_gemm_path_for, which
 * the device's probe informs), so it is tested on the CPU for every capability and outcome.
 *
 *   A, B format            C width       handle's path for the pairing    route
 *   nvfp4 / nvfp4_2d both  Ncol % 4 == 0 native_fp4 or emulated_bf16       NVFP4 operands
 *   mxfp4 both             Ncol % 4 == 0 native_fp4 or emulated_bf16       MXFP4 operands
 *   fp8_e4m3 both          Ncol % 4 == 0 fp8 (cc >= 8.9), probe fp8_tensor ok FP8 E4M3 operands
 *   fp8_e4m3 both          any           otherwise (refused below 8.9, the    declined
 *                                        emulated request, a probe not ok)
 *   anything else          any           -                                 declined
 *
 * Declined means QS_EUNSUPPORTED: the caller (worker/train/qlinear.c) fake-quantizes the inputs
 * and runs the FP32 GEMM, the emulation of every format. FP8 takes only the tensor-core path:
 * the handle has no FP8 emulation (qk_gemm.h), and the fake-quant GEMM is the FP8 emulation.
 * The handle's FP8 choice is its capability table, so the route asks the device's probe too
 * (kernels/cuda/qk_gemm_probe.h qk_gemm_probe_decide: native only where the probe GEMM ran and
 * matched), as the handle does itself for FP4.
 * Ncol % 4: the FP32 output's rows 16-byte aligned, as cuBLASLt's FP4 and FP8 GEMMs need. */
#ifndef QW_QUANT_GEMM_ROUTE_H
#define QW_QUANT_GEMM_ROUTE_H

#include "qk_gemm_path.h"
#include "qk_gemm_probe.h"

/* The operand type both inputs take (QK_GEMM_NVFP4, QK_GEMM_MXFP4, QK_GEMM_FP8_E4M3) and 1, or
 * 0 where gemm_abt_quant declines before asking the handle. fa, fb: format names (NULL:
 * unquantized). */
int qw_quant_gemm_operands(const char *fa, const char *fb, int ncol, qk_gemm_type *type);

/* 1 when the op runs the GEMM of operands of type `type` given the handle's answer for the
 * pairing (select_ok: qk_gemm_path_for returned QS_OK, path: the path it chose) and what the
 * device proved (probe; NULL: nothing, every outcome untried). */
int qw_quant_gemm_runs(qk_gemm_type type, int select_ok, qk_gemm_path path,
                       const qk_gemm_probe *probe);

/* The handle's answer for two operands of type `type` on the device of probe (NULL: cc 0,
 * nothing proved) under req, restated from the pure parts kernels/cuda qk_gemm_path_for is made
 * of: qk_gemm_path_select on the probe's capability (emulation forced under req emulated), then
 * for an FP4 pairing outside forced emulation qk_gemm_probe_decide. 1 with *path, 0 where the
 * handle refuses the pairing or there is none (requests fp32 and bf16 open no handle). Pure. */
int qw_quant_gemm_handle_path(qk_gemm_type type, const qk_gemm_probe *probe, qk_gemm_request req,
                              qk_gemm_path *path);

/* The route end to end: 1 with *path (native_fp4, emulated_bf16 or fp8) where gemm_abt_quant
 * runs the GEMM of inputs fa, fb with an output of ncol columns on the device of probe under
 * req (qw_quant_gemm_operands, qw_quant_gemm_handle_path, qw_quant_gemm_runs); 0 where it
 * declines and the caller fake-quantizes. The table of training paths (worker/train
 * recipe_path.h) is this function plus the caller's fallback. Pure. */
int qw_quant_gemm_route(const char *fa, const char *fb, int ncol, const qk_gemm_probe *probe,
                        qk_gemm_request req, qk_gemm_path *path);

#endif
