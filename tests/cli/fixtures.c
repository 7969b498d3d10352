/* Test fixtures (fixtures.h). Formats: safetensors (huggingface/safetensors README: u64 LE
 * header size, JSON header of {name: {dtype, shape, data_offsets}}, then the bytes) and
 * tokens.h. */
#include "fixtures.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int fx_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

char *fx_tempdir(const char *prefix) {
    char buf[256];
    snprintf(buf, sizeof buf, "/tmp/%s-XXXXXX", prefix);
    return mkdtemp(buf) ? strdup(buf) : NULL;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void fx_rmtree(const char *dir) {
    if (dir) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

typedef struct tensor {
    char name[96];
    int64_t rows, cols; /* cols 0: a vector of rows elements */
} tensor;

int fx_write_checkpoint(const char *dir, int n_layers, int vocab, uint32_t seed) {
    const int dim = 8, hidden = 16, heads = 2, kv_heads = 1, head_dim = dim / heads;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    char path[512], cfg[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
             "\"hidden_act\": \"silu\","
             " \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"vocab_size\": %d,"
             " \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,"
             " \"tie_word_embeddings\": true, \"bos_token_id\": 0, \"eos_token_id\": 1}\n",
             dim, hidden, n_layers, heads, kv_heads, vocab);
    if (fx_write_text(path, cfg)) return -1;

    size_t nt = 2 + 9 * (size_t)n_layers;
    tensor *t = calloc(nt, sizeof *t);
    if (!t) return -1;
    size_t k = 0;
    t[k++] = (tensor){"model.embed_tokens.weight", vocab, dim};
    t[k++] = (tensor){"model.norm.weight", dim, 0};
    for (int l = 0; l < n_layers; l++) {
        const struct {
            const char *mod;
            int64_t r, c;
        } lin[] = {{"self_attn.q_proj", heads * head_dim, dim},
                   {"self_attn.k_proj", kv_heads * head_dim, dim},
                   {"self_attn.v_proj", kv_heads * head_dim, dim},
                   {"self_attn.o_proj", dim, heads * head_dim},
                   {"mlp.gate_proj", hidden, dim},
                   {"mlp.up_proj", hidden, dim},
                   {"mlp.down_proj", dim, hidden},
                   {"input_layernorm", dim, 0},
                   {"post_attention_layernorm", dim, 0}};
        for (int i = 0; i < 9; i++) {
            snprintf(t[k].name, sizeof t[k].name, "model.layers.%d.%s.weight", l, lin[i].mod);
            t[k].rows = lin[i].r;
            t[k++].cols = lin[i].c;
        }
    }
    size_t hcap = 256 * nt, hlen = 0, off = 0;
    char *hdr = malloc(hcap);
    if (!hdr) {
        free(t);
        return -1;
    }
    hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "{");
    for (size_t i = 0; i < nt; i++) {
        size_t n = (size_t)(t[i].rows * (t[i].cols ? t[i].cols : 1)) * 4;
        if (t[i].cols)
            hlen += (size_t)snprintf(hdr + hlen, hcap - hlen,
                                     "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                                     "\"data_offsets\":[%zu,%zu]}",
                                     i ? "," : "", t[i].name, (long long)t[i].rows,
                                     (long long)t[i].cols, off, off + n);
        else
            hlen += (size_t)snprintf(hdr + hlen, hcap - hlen,
                                     "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],"
                                     "\"data_offsets\":[%zu,%zu]}",
                                     i ? "," : "", t[i].name, (long long)t[i].rows, off, off + n);
        off += n;
    }
    hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "}");
    while (hlen % 8)
        hdr[hlen++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    uint64_t hl = hlen;
    if (ok) ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, hlen, f) == hlen;
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; ok && i < nt; i++) {
        int64_t n = t[i].rows * (t[i].cols ? t[i].cols : 1);
        for (int64_t j = 0; ok && j < n; j++) {
            float v;
            if (t[i].cols) {
                s = s * 1664525u + 1013904223u; /* Numerical Recipes LCG */
                v = (float)(s >> 8) / 16777216.0f - 0.5f;
            } else {
                v = 1.0f; /* RMSNorm gains */
            }
            ok = fwrite(&v, 4, 1, f) == 1;
        }
    }
    if (f && fclose(f) != 0) ok = 0;
    free(hdr);
    free(t);
    return ok ? 0 : -1;
}

int fx_write_tokens(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char h[32] = "QSWTOKS";
    uint32_t words[3] = {1, vocab_size, 1};
    memcpy(h + 8, words, sizeof words);
    uint64_t count = n;
    memcpy(h + 24, &count, 8);
    int ok = fwrite(h, 1, 32, f) == 32 && fwrite(ids, 4, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

int fx_run(const char *exe, const char *const *args, char *out, size_t cap) {
    char path[] = "/tmp/qsweep-out-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    unlink(path);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd);
        return -1;
    }
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        const char *argv[64] = {exe};
        for (int i = 0; args[i] && i < 62; i++)
            argv[i + 1] = args[i];
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = 0;
    close(fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

char *fx_grid_dir(const char *prefix, int n_layers, int vocab, size_t n_tokens) {
    char *dir = fx_tempdir(prefix);
    if (!dir) return NULL;
    char ckpt[600], tokens[600];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(tokens, sizeof tokens, "%s/toks.bin", dir);
    uint32_t *ids = malloc((n_tokens ? n_tokens : 1) * sizeof *ids);
    int bad = !ids;
    for (size_t i = 0; !bad && i < n_tokens; i++)
        ids[i] = (uint32_t)(i * 7 % (size_t)vocab);
    bad = bad || fx_write_checkpoint(ckpt, n_layers, vocab, 1) ||
          fx_write_tokens(tokens, ids, n_tokens, (uint32_t)vocab) || chdir(dir) != 0;
    free(ids);
    if (bad) {
        fx_rmtree(dir);
        free(dir);
        return NULL;
    }
    return dir;
}

int fx_grid_dir_release(char *dir) {
    if (chdir("/") != 0) return -1;
    fx_rmtree(dir);
    free(dir);
    return 0;
}
