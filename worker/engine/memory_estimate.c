/* Device memory of a model on the CUDA auto path (memory_estimate.h). */
#include "memory_estimate.h"

#include <string.h>

#include "master_gemm.h"

qs_status qw_mem_estimate_of(const qw_config *c, const qw_mem_plan *p, qw_mem_estimate *out,
                             qs_error *err) {
    memset(out, 0, sizeof *out);
    const char *bad = c->dim < 1          ? "hidden_size"
                      : c->hidden_dim < 1 ? "intermediate_size"
                      : c->n_layers < 1   ? "num_hidden_layers"
                      : c->n_heads < 1    ? "num_attention_heads"
                      : c->n_kv_heads < 1 ? "num_key_value_heads"
                      : c->vocab_size < 1 ? "vocab_size"
                      : p->ctx < 1        ? "ctx"
                      : p->batch < 1      ? "batch"
                      : p->tp < 1         ? "tensor_parallel"
                                          : NULL;
    if (bad) return qs_error_set(err, QS_EINVAL, "memory estimate: %s < 1", bad);
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers;
    uint64_t H = (uint64_t)c->n_heads, G = (uint64_t)c->n_kv_heads, V = (uint64_t)c->vocab_size;
    uint64_t E = c->head_dim > 0 ? (uint64_t)c->head_dim : D / H;
    uint64_t N = (uint64_t)p->tp, T = (uint64_t)p->ctx, B = (uint64_t)p->batch;
    if (c->head_dim <= 0 && D % H != 0)
        return qs_error_set(err, QS_EINVAL,
                            "memory estimate: num_attention_heads %d does not divide "
                            "hidden_size %d",
                            c->n_heads, c->dim);
    if (H % N != 0 || (G % N != 0 && N % G != 0))
        return qs_error_set(err, QS_EINVAL,
                            "memory estimate: tensor_parallel %d: heads %d / kv heads %d do not "
                            "split over the ranks",
                            p->tp, c->n_heads, c->n_kv_heads);
    uint64_t b = (uint64_t)qw_master_gemm_bytes(p->master);
    uint64_t Gr = G % N == 0 ? G / N : 1, Hr = H / N;
    uint64_t block = D * Hr * E + 2 * D * E * Gr + Hr * E * D + 3 * D * F / N;
    out->linears = L * block * b;
    if (p->fp4 == QW_MEM_FP4_NVFP4) out->fp4 = L * block * 9 / 16;  /* 4.5 bits */
    if (p->fp4 == QW_MEM_FP4_MXFP4) out->fp4 = L * block * 17 / 32; /* 4.25 bits */
    out->embed = V * D * 4;
    out->lm_head = c->tied_embeddings && N == 1 ? 0 : (V + N - 1) / N * D * b;
    out->norms = (2 * L + 1) * D * 4 + T * E * 4;
    uint64_t widest = D > H * E ? D : H * E;
    if (F > widest) widest = F;
    out->run =
        B * (T * (3 * D + (2 * Hr + 2 * Gr) * E + 2 * F / N + widest + V) * 4 + Hr * T * T * 4);
    uint64_t largest = V * D > F * D ? V * D : F * D;
    out->scratch = B * T * widest * 7 + (64ull << 20) + (b == 4 ? largest * 2 : 0);
    out->reserve = QW_MEM_RESERVE;
    out->total = out->linears + out->fp4 + out->embed + out->lm_head + out->norms + out->run +
                 out->scratch + out->reserve;
    return QS_OK;
}

int qw_mem_fits(const qw_mem_estimate *e, uint64_t device_bytes) {
    return e->total <= device_bytes;
}
