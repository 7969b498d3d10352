/* The small Llama shapes the training tests run on: one constructor instead of a copy per
 * test. max_seq_len 64, norm_eps 1e-5, rope_theta 10000, everything else 0; a test sets the
 * rest (tied embeddings, Llama 3.1 RoPE scaling, token ids) after the call. */
#ifndef QW_TEST_SMALL_CONFIG_H
#define QW_TEST_SMALL_CONFIG_H

#include "checkpoint.h"

/* dim, hidden_dim (FFN), layers, heads, kv heads, head_dim, vocabulary. */
static inline qw_config small_config_of(int dim, int hidden_dim, int n_layers, int n_heads,
                                        int n_kv_heads, int head_dim, int vocab_size) {
    qw_config c = {0};
    c.dim = dim;
    c.hidden_dim = hidden_dim;
    c.n_layers = n_layers;
    c.n_heads = n_heads;
    c.n_kv_heads = n_kv_heads;
    c.head_dim = head_dim;
    c.vocab_size = vocab_size;
    c.max_seq_len = 64;
    c.norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    return c;
}

#endif
