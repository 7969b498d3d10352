/* Device and host memory of a Llama model on the CUDA auto path (device_memory.h). */
#include "device_memory.h"

#include <string.h>

/* ceil(x * num / den) for x, num, den >= 0, den > 0, without overflowing int64 on the way:
 * whole multiples of den exactly, the remainder's product in double (rounded up). */
static int64_t share_up(int64_t x, int64_t num, int64_t den) {
    int64_t whole = x / den * num, rest = x % den;
    if (rest == 0) return whole;
    double part = (double)rest * (double)num / (double)den;
    int64_t up = (int64_t)part;
    return whole + (up < part ? up + 1 : up);
}

qs_status qs_mem_estimate_of(const qs_model_shape *s, const qs_mem_plan *p, qs_mem_estimate *out,
                             qs_error *err) {
    memset(out, 0, sizeof *out);
    const char *bad = s->dim < 1          ? "hidden_size"
                      : s->hidden_dim < 1 ? "intermediate_size"
                      : s->n_layers < 1   ? "num_hidden_layers"
                      : s->n_heads < 1    ? "num_attention_heads"
                      : s->n_kv_heads < 1 ? "num_key_value_heads"
                      : s->vocab_size < 1 ? "vocab_size"
                      : p->ctx < 1        ? "ctx"
                      : p->batch < 1      ? "batch"
                      : p->tp < 1         ? "tensor_parallel"
                                          : NULL;
    if (bad) return qs_error_set(err, QS_EINVAL, "memory estimate: %s < 1", bad);
    if (p->packed_block_bytes < 0 || p->packed_other_bytes < 0)
        return qs_error_set(err, QS_EINVAL, "memory estimate: packed bytes < 0");
    int64_t D = s->dim, F = s->hidden_dim, L = s->n_layers, H = s->n_heads, G = s->n_kv_heads,
            V = s->vocab_size;
    if (s->head_dim <= 0 && D % H != 0)
        return qs_error_set(err, QS_EINVAL,
                            "memory estimate: num_attention_heads %d does not divide "
                            "hidden_size %d",
                            s->n_heads, s->dim);
    int64_t E = s->head_dim > 0 ? s->head_dim : D / H;
    int64_t N = p->tp, T = p->ctx, B = p->batch;
    if (H % N != 0 || (G % N != 0 && N % G != 0))
        return qs_error_set(err, QS_EINVAL,
                            "memory estimate: tensor_parallel %d: heads %d / kv heads %d do not "
                            "split over the ranks",
                            p->tp, s->n_heads, s->n_kv_heads);
    int64_t b = p->master_bytes > 0 ? p->master_bytes : 2;
    int64_t Gr = G % N == 0 ? G / N : 1, Hr = H / N;
    /* one block's linear elements on a rank and in the whole model */
    int64_t block = D * Hr * E + 2 * D * E * Gr + Hr * E * D + 3 * D * F / N;
    int64_t whole = 2 * D * H * E + 2 * D * E * G + 3 * D * F;
    out->linears = L * block * b;
    out->packed = share_up(p->packed_block_bytes, block, whole) + p->packed_other_bytes;
    out->embed = V * D * 4;
    out->lm_head = s->tied_embeddings && N == 1 ? 0 : (V + N - 1) / N * D * b;
    out->norms = (2 * L + 1) * D * 4 + T * E * 4;
    int64_t widest = D > H * E ? D : H * E;
    if (F > widest) widest = F;
    int64_t att = E <= QS_MEM_FLASH_MAX_HEAD_DIM ? 0 : Hr * T * T * 4;
    out->run =
        B *
        (T * (3 * D + (2 * Hr + 2 * Gr) * E + 2 * F / N + widest + V + QS_MEM_ATT_TILE) * 4 + att);
    int64_t largest = V * D > F * D ? V * D : F * D;
    out->scratch = B * T * widest * 7 + (64ll << 20) + (b == 4 ? largest * 2 : 0);
    out->reserve = QS_MEM_RESERVE;
    out->total = out->linears + out->packed + out->embed + out->lm_head + out->norms + out->run +
                 out->scratch + out->reserve;
    out->host = N > 1 ? L * (H * E * D + F * D) * b : 0;
    return QS_OK;
}

bool qs_mem_fits(const qs_mem_estimate *e, int64_t device_bytes) {
    return e->total <= device_bytes;
}
