/* Which training GEMMs may run with BF16 operands: a GEMM input is "BF16-exact" when every finite
 * value qw_qlinear_prepare makes for it under its operand spec (recipe.h) is a BF16 number, so
 * converting it to BF16 changes no bit and a BF16 tensor-core GEMM with FP32 accumulation
 * (cublasGemmEx, CUDA_R_16BF inputs, CUBLAS_COMPUTE_32F) multiplies the very values the FP32
 * GEMM would: only the summation order differs. A GEMM runs BF16 (ops.h gemm_abt_bf16) when both
 * of its inputs are BF16-exact, else FP32 (gemm_abt).
 *
 * BF16 (bfloat16) has 8 significant bits (7 stored) and FP32's exponents: normal numbers
 * 2^-126 .. (2 - 2^-7) 2^127, subnormals down to 2^-133. A finite FP32 value is exact in BF16
 * when its significant bits fit in 8 and its lowest set bit is at least 2^-133.
 *
 * Per operand spec:
 * - QW_MODE_BF16: yes (each value is rounded to BF16, qw_round_bf16);
 * - QW_MODE_FP32: no (the high-precision tensor as is);
 * - QW_MODE_QUANT: qw_format_bf16_exact of its format. The RHT and the rounding (RNE or SR) do
 *   not matter: the RHT runs before quantization, and either rounding lands on the element grid. */
#ifndef QW_TRAIN_BF16_EXACT_H
#define QW_TRAIN_BF16_EXACT_H

#include "quant.h"
#include "recipe.h"

/* 1 when every finite dequantized value of fmt (qk_fake_quant's output) is exact in BF16,
 * decided from the format's descriptor (kernels/format.h):
 * - an MX format (OCP MX v1.0 sections 5.2-5.4; docs/numerics.md 2.1-2.3): value = element x 2^s
 *   with the E8M0 block scale 2^s, s in [-127, 127 - emax_elem] (qsweep clamps there). The value
 *   has the element's significant bits (man_bits + 1), and its lowest set bit is at least the
 *   element's smallest subnormal (2^(1 - bias - man_bits)) times 2^-127; the upper clamp keeps
 *   every value finite in FP32, and a finite FP32 value of at most 8 significant bits is at most
 *   BF16's largest. Hence: MXFP4 (E2M1: 2 bits, smallest 2^-1 x 2^-127 = 2^-128) yes,
 *   MXFP6 E2M3 (4 bits, 2^-3 x 2^-127 = 2^-130) and E3M2 (3 bits, 2^-4 x 2^-127 = 2^-131) yes;
 *   MXFP8 E4M3 no: its subnormals (2^-9 .. 7 x 2^-9, OFP8) times 2^-127 reach 2^-136, below
 *   BF16's smallest subnormal 2^-133, in blocks whose amax is below about 2^-116 (scales
 *   2^-127 .. 2^-125); MXFP8 E5M2 no likewise (2^-16 x 2^-127 = 2^-143);
 * - NVFP4 and nvfp4_2d: no. Element x E4M3 block scale has 6 significant bits (docs/numerics.md
 *   4.5), but every value is also multiplied by the FP32 per-tensor decode scale
 *   S_dec = amax_t / 2688 (3.3), which has up to 24;
 * - fp8_e4m3 (per-tensor current scaling, S_dec = amax_t / 448), int8_channel and int4_group
 *   (FP32 scales): no;
 * - the identity "bf16" format: no (qk_fake_quant copies its FP32 input unchanged).
 * NULL: 0. */
int qw_format_bf16_exact(const qk_format *fmt);

/* 1 when the GEMM input spec makes is BF16-exact (the list in the header comment). */
int qw_operand_bf16_exact(const qw_operand_spec *spec);

/* The three GEMMs of a linear (qlinear.h): fprop (inputs QW_FPROP_X, QW_FPROP_W), dgrad
 * (QW_DGRAD_DY, QW_DGRAD_W), wgrad (QW_WGRAD_DY, QW_WGRAD_X). */
typedef enum qw_linear_gemm {
    QW_GEMM_FPROP = 0,
    QW_GEMM_DGRAD = 1,
    QW_GEMM_WGRAD = 2,
    QW_N_LINEAR_GEMMS = 3,
} qw_linear_gemm;

/* 1 when GEMM g of a linear of block `layer` (-1: lm_head) runs BF16 under r: both of its
 * inputs are BF16-exact (qw_recipe_operand, qw_operand_bf16_exact). Pure. */
int qw_recipe_gemm_bf16(const qw_recipe *r, int layer, int n_layers, qw_linear_gemm g);

/* The gemm_path a training result names (train_job.h): the backend's own name on the CPU
 * (backend_path "cpu", backend.h qw_backend_gemm_path_name; "none" likewise kept), *linears = 0;
 * on any other backend the linears' path, "bf16" when none of a micro-step's linear GEMMs runs
 * FP32 (n_fp32 == 0, tmodel.h qw_tmodel_gemm_paths), else "fp32", *linears = 1 (the result then
 * also reports the counts). Pure. */
const char *qw_train_gemm_path(const char *backend_path, int n_fp32, int *linears);

/* "fprop", "dgrad", "wgrad". */
const char *qw_linear_gemm_name(qw_linear_gemm g);

#endif
