/* Wall seconds per phase of training (bench_train --profile, the train job's time_<phase>_s
 * metrics), as worker/engine/profile.h times evaluation: timed in the calling thread around each
 * table call (CLOCK_MONOTONIC), phases not overlapping. On the CPU backend every op has finished
 * when its call returns; on CUDA the calls enqueue, so the phases are host times there. */
#ifndef QW_TRAIN_TPROFILE_H
#define QW_TRAIN_TPROFILE_H

#include "bf16_exact.h"
#include "ops.h"

/* Linear kinds of the profile: q, k, v, o, gate, up, down (tmodel.h's order), lm_head. */
#define QW_TPROFILE_LINEARS 8

typedef enum qw_tphase {
    /* the GEMMs of each linear kind and pass: QW_TPHASE_GEMM + kind * 3 + qw_linear_gemm */
    QW_TPHASE_GEMM = 0,
    QW_TPHASE_PREP_COPY = QW_TPHASE_GEMM + QW_TPROFILE_LINEARS * QW_N_LINEAR_GEMMS, /* operands
                             copied or transposed into the GEMM's buffers */
    QW_TPHASE_PREP_BF16,  /* operands rounded to BF16 */
    QW_TPHASE_PREP_RHT,   /* random Hadamard transform of wgrad operands */
    QW_TPHASE_PREP_QUANT, /* fake quantization of operands (FP4, FP8) */
    QW_TPHASE_ATTN_FWD,   /* causal attention forward (scores, softmax, P V, saved state) */
    QW_TPHASE_ATTN_BWD,   /* its backward */
    QW_TPHASE_NORM,       /* RMSNorms, forward and backward */
    QW_TPHASE_ROPE,       /* RoPE, forward and backward */
    QW_TPHASE_SWIGLU,     /* SwiGLU, forward and backward */
    QW_TPHASE_EMBED_ADD,  /* embedding lookup and its backward, residual adds */
    QW_TPHASE_XENT,       /* cross-entropy forward and backward, the losses to the host */
    QW_TPHASE_OPTIMIZER,  /* gradients zeroed, gradient norm, AdamW */
    QW_TPHASES
} qw_tphase;

/* Seconds per phase. */
typedef struct qw_tprofile {
    double s[QW_TPHASES];
} qw_tprofile;

/* The phase's name in metrics and tables: "gemm_q_fprop" ... "gemm_lm_head_wgrad",
 * "prep_copy", "prep_bf16", "prep_rht", "prep_quant", "attention_fwd", "attention_bwd", "norm",
 * "rope", "swiglu", "embed_add", "crossentropy", "optimizer". */
const char *qw_tphase_name(qw_tphase p);

/* The GEMM phase of linear kind (0..7 as above) and pass g. */
qw_tphase qw_tphase_gemm(int kind, qw_linear_gemm g);

/* All phases to 0. */
void qw_tprofile_reset(qw_tprofile *p);

/* Sum of the phases' seconds. */
double qw_tprofile_total(const qw_tprofile *p);

/* p->s[ph] += qs_clock_s() - t0 (t0 from qs_clock_s); p NULL: no-op. */
void qw_tprofile_add_since(qw_tprofile *p, qw_tphase ph, double t0);

/* A backend that runs inner's table and times its calls of the model's non-linear ops
 * (attention, norms, RoPE, SwiGLU, embedding, residual adds, cross-entropy) into prof. The
 * linears' GEMMs and operand preparation are timed by qlinear.c, which knows their kind and
 * pass; every other entry is inner's own. */
typedef struct qw_timed_backend {
    qw_backend b; /* first: the ops receive &b; a copy of inner with ops = &table */
    const qw_ops *inner;
    qw_tprofile *prof;
    qw_ops table;
} qw_timed_backend;

/* t over inner (which must outlive t), timing into prof. */
void qw_timed_backend_init(qw_timed_backend *t, const qw_backend *inner, qw_tprofile *prof);

#endif
