/* One AdamW step of one parameter, the formula the CPU reference (ops_cpu_train.c) and the CUDA
 * kernel (ops_cuda_train.cu) both compile, so the two cannot drift apart. Loshchilov & Hutter,
 * "Decoupled Weight Decay Regularization" (ICLR 2019), Algorithm 2, as torch.optim.AdamW:
 *   g *= grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= lr wd p; p -= lr (m / c1) / (sqrt(v / c2) + eps), c1 = 1 - b1^t, c2 = 1 - b2^t.
 * Plain C and CUDA C++; no FMA contraction on either side (the build's flags). */
#ifndef QW_ADAMW_H
#define QW_ADAMW_H

#include <math.h>

#ifdef __CUDACC__
#define QW_HD static inline __host__ __device__
#else
#define QW_HD static inline
#endif

/* The step's hyperparameters, the same for every element. */
typedef struct qw_adamw_hp {
    float lr, wd, b1, b2, eps, c1, c2, grad_scale;
} qw_adamw_hp;

/* Updates p, m, v in place from the gradient g (unscaled). */
QW_HD void qw_adamw_update(float *p, float *m, float *v, float g, const qw_adamw_hp *h) {
    float gj = g * h->grad_scale;
    float mm = h->b1 * *m + (1.0f - h->b1) * gj;
    float vv = h->b2 * *v + (1.0f - h->b2) * gj * gj;
    *m = mm;
    *v = vv;
    float pj = *p;
    pj -= h->lr * h->wd * pj;
    pj -= h->lr * (mm / h->c1) / (sqrtf(vv / h->c2) + h->eps);
    *p = pj;
}

#endif
