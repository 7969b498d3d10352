/* The GEMM an unquantized linear runs on the CUDA backend's auto path (ops_cuda_lt.cu), from
 * its master's dtype: the checkpoint's own precision on the tensor cores where one exists, one
 * device copy of each weight.
 *
 *   master              device copy   GEMM operands       compute               activations
 *   BF16                BF16, 2 B     CUDA_R_16BF         CUBLAS_COMPUTE_32F    rounded to BF16
 *   F16 (Llama 2)       F16,  2 B     CUDA_R_16F          CUBLAS_COMPUTE_32F    rounded to FP16
 *   F32, exact in BF16  BF16, 2 B     CUDA_R_16BF         CUBLAS_COMPUTE_32F    rounded to BF16
 *   F32, exact in FP16  F16,  2 B     CUDA_R_16F          CUBLAS_COMPUTE_32F    rounded to FP16
 *   F32, other values   F32,  4 B     CUDA_R_32F          ..._32F_PEDANTIC      rounded to BF16
 *
 * "F32" is every master whose values only FP32 holds: an F32 tensor, a GGUF block type
 * (Q8_0 ... IQ4_XS: an FP16 scale times a small integer needs more bits than FP16 has) and a
 * packed non-FP4 weight (its decoded values). A tensor-parallel rank's row-parallel slice keeps
 * its master's dtype (shard.h), so it takes its master's row; where a slice edge cuts a GGUF
 * block the slice is an FP32 copy of its master's values, and the exactness rows decide as
 * for the master (BF16 tried first). Products of BF16 or FP16 operands are exact in
 * FP32, so each row's GEMM is the FP32 dot product of the rounded operands up to summation
 * order. FP32 masters take BF16 activations as every quantized linear of the path does
 * (W4A16 and emulated W4A4 GEMMs are BF16), so their unquantized linears and a baseline of
 * them see the inputs their quantized ones see. Pure: no CUDA, tested on the CPU. */
#ifndef QW_MASTER_GEMM_H
#define QW_MASTER_GEMM_H

#include "checkpoint.h"

/* A GEMM operand's element type. */
typedef enum qw_gemm_elem {
    QW_ELEM_BF16 = 0,
    QW_ELEM_F16 = 1,
    QW_ELEM_F32 = 2,
} qw_gemm_elem;

typedef struct qw_master_gemm {
    qw_gemm_elem weight; /* the one device copy, and both GEMM operands' type */
    qw_gemm_elem act;    /* the values the activations are rounded to (BF16 or F16) */
    int pedantic;        /* 1: CUBLAS_COMPUTE_32F_PEDANTIC (FP32, no TF32); 0: CUBLAS_COMPUTE_32F */
    int bytes;           /* device bytes per weight element */
    const char *path;    /* the gemm_path a result names: "bf16", "fp16" or "fp32" */
} qw_master_gemm;

/* The GEMM of a master stored as dtype whose values (as FP32) are all exact in BF16 when
 * exact_bf16 is 1, all exact in FP16 when exact_f16 is 1 (both read for FP32-valued masters
 * only). */
qw_master_gemm qw_master_gemm_of(qw_dtype dtype, int exact_bf16, int exact_f16);

/* 1 when x (finite) is a BF16 value (its low 16 bits zero) / an FP16 value (normal or
 * subnormal, |x| <= 65504). */
int qw_f32_exact_bf16(float x);
int qw_f32_exact_f16(float x);

/* Device bytes per element of a master of dtype on the auto path when its values are not known
 * (neither exact flag): 2 for BF16 and F16, 4 otherwise. */
int qw_master_gemm_bytes(qw_dtype dtype);

/* "BF16", "F16" or "F32". */
const char *qw_gemm_elem_name(qw_gemm_elem e);

#endif
