/* Quantized weights kept from one optimizer step to the next.
 *
 * A weight W [out x in] changes only at the optimizer step, yet each micro-batch's fprop and
 * dgrad would quantize it again (qlinear.h: Wq [out x in] along in, (W^T)q [in x out] along
 * out). With deterministic rounding (RNE, RZ) the result is the same every time, so one copy per
 * weight per step serves every micro-batch. (W^T)q is the transpose of Wq where the dgrad spec is
 * the fprop spec and the format's scales do not depend on the direction of k: square 2D blocks
 * (nvfp4_2d, 16x16: arXiv 2509.25149 section 4.3, the reason the recipe uses them) or one scale
 * for the whole tensor (fp8_e4m3); then dgrad reads Wq transposed and only fprop's copy is kept.
 * Otherwise (1D blocks: nvfp4-no-2d, mxfp4) dgrad's copy is kept too. Stochastically rounded
 * operands are never kept (they are the gradients, never a weight, under every recipe).
 *
 * Slots: linear i (qlinear.h index, block linears only; lm_head is never quantized) has slot
 * 2i (Wq, [out x in] quantized along in) and 2i+1 ((W^T)q, [in x out] along out), each made by
 * the backend's quant_operand (ops.h) in the form its GEMMs read: on the CPU the dequantized
 * FP32 values (4 bytes per element, read by any FP32 GEMM); on CUDA codes, block scales and
 * the decode scale in cuBLASLt's layout (NVFP4: half a byte of code and 1/16 of a scale byte
 * per element, plus padding), read by gemm_abt_quant_kept. A packed operand is laid out along
 * its k, so on CUDA dgrad always has its own copy, and a slot is kept only where the GEMM's
 * other input is quantized too (the block-scaled GEMM needs both) and the backend runs that
 * format and shape (quant_operand_bytes > 0). One backend allocation, owned by the cache, holds
 * every slot. A slot is valid from its first use after qw_wcache_invalidate until the next; whoever
 * changes a weight invalidates (tmodel.h qw_tmodel_weights_changed). A backend without
 * quant_operand keeps nothing. */
#ifndef QW_TRAIN_WCACHE_H
#define QW_TRAIN_WCACHE_H

#include <stddef.h>

#include "error.h"
#include "ops.h"
#include "recipe.h"

typedef struct qw_wcache {
    qw_backend *be;       /* where the slots live (not owned) */
    int n_linears;        /* block linears: n_layers * kinds */
    void **slot;          /* [2 * n_linears], host array of backend pointers; NULL: not kept */
    unsigned char *valid; /* [2 * n_linears], host: 1 while the slot holds this step's values */
    int packed;           /* 1: slots in the backend's packed form (ops.h gemm_abt_quant_kept);
                             0: FP32 values */
    void *mem;            /* the one backend allocation; NULL when nothing is kept */
    size_t bytes;         /* its size */
} qw_wcache;

/* 1 when spec's operand may be kept: quantized with deterministic rounding, no RHT. */
int qw_wcache_keeps(const qw_operand_spec *spec);

/* 1 when dgrad's weight input under spec dw is exactly the transpose of fprop's under fw. */
int qw_wcache_dgrad_is_transpose(const qw_operand_spec *fw, const qw_operand_spec *dw);

/* Sizes and allocates c on be for recipe r over n_layers blocks of `kinds` linears each, linear
 * l*kinds + k of shape outs[k] x ins[k]; every slot invalid. Errors: QS_ENOMEM naming the bytes.
 * On error c holds nothing (qw_wcache_release is still safe). */
qs_status qw_wcache_init(qw_wcache *c, qw_backend *be, const qw_recipe *r, int n_layers, int kinds,
                         const int *ins, const int *outs, qs_error *err);
void qw_wcache_release(qw_wcache *c);

/* Marks every slot invalid: the weights changed. c may be NULL. */
void qw_wcache_invalidate(qw_wcache *c);

/* Slot of linear `linear` for weight input op (QW_FPROP_W: 0, QW_DGRAD_W: 1); NULL when not kept
 * or out of range. */
void *qw_wcache_slot(const qw_wcache *c, int linear, qw_gemm_operand op);

/* Its validity flag (1 while the slot holds this step's operand); NULL where qw_wcache_slot is. */
unsigned char *qw_wcache_valid(const qw_wcache *c, int linear, qw_gemm_operand op);

#endif
