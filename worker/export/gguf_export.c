/* A policy's MXFP4 linears written into a copy of a GGUF source (export.h, layout gguf).
 *
 * GGUF v3 (ggml docs/gguf.md): magic, version, tensor count, KV count; the KV pairs; the tensor
 * infos (name, dims innermost first, ggml type, offset from the data start); padding to
 * general.alignment (default 32); the data, each tensor at an aligned offset. The KV pairs
 * (architecture, hyper-parameters, tokenizer) are copied byte for byte; every tensor keeps its
 * type and bytes except the quantized linears, which become ggml's MXFP4 (type 39, block_mxfp4:
 * one E8M0 byte, then 16 bytes where byte j holds element j in the low nibble and j + 16 in the
 * high one; ggml-common.h). The E8M0 byte is the engine's (ggml decodes e2m1 doubled times
 * 2^(e-128), the same value), and attn_q/attn_k rows are put in llama.cpp's permuted order
 * (convert_hf_to_gguf.py LlamaModel.permute), as the source holds them. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "export_internal.h"
#include "format.h"
#include "model.h"

#define GGML_TYPE_MXFP4 39

/* A cursor over the source file. */
typedef struct rd {
    const uint8_t *p;
    size_t n, off;
    int bad;
} rd;

static uint64_t rd_u(rd *r, size_t k) {
    uint64_t v = 0;
    if (r->off + k > r->n) {
        r->bad = 1;
        return 0;
    }
    memcpy(&v, r->p + r->off, k);
    r->off += k;
    return v;
}

/* Skips one KV value of GGUF type t (nested arrays up to 8 deep). */
static void rd_skip_value(rd *r, uint32_t t, int depth) {
    static const int size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t > 12 || depth > 8) {
        r->bad = 1;
        return;
    }
    if (t == 8) { /* string */
        uint64_t len = rd_u(r, 8);
        if (len > r->n - r->off)
            r->bad = 1;
        else
            r->off += len;
    } else if (t == 9) { /* array */
        uint32_t et = (uint32_t)rd_u(r, 4);
        uint64_t cnt = rd_u(r, 8);
        for (uint64_t i = 0; i < cnt && !r->bad; i++)
            rd_skip_value(r, et, depth + 1);
    } else {
        if ((size_t)size[t] > r->n - r->off)
            r->bad = 1;
        else
            r->off += (size_t)size[t];
    }
}

/* The linear index (model.h) of a GGUF tensor name, -1 when it is no linear. */
static int linear_of(const char *name, int n_layers) {
    static const char *const KIND[QW_LINEAR_KINDS] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    if (!strcmp(name, "output.weight")) return n_layers * QW_LINEAR_KINDS;
    int l, used = 0;
    char kind[32];
    if (sscanf(name, "blk.%d.%31[a-z_].weight%n", &l, kind, &used) != 2 || name[used] != '\0' ||
        l < 0 || l >= n_layers)
        return -1;
    for (int k = 0; k < QW_LINEAR_KINDS; k++)
        if (!strcmp(kind, KIND[k])) return l * QW_LINEAR_KINDS + k;
    return -1;
}

/* The MXFP4 blocks of packed tensor p in GGUF row order into out (rows x k/32 x 17 bytes);
 * heads > 0: llama.cpp's permutation of q/k rows for `heads` heads. */
static void to_block_mxfp4(const qk_packed *p, int heads, uint8_t *out) {
    size_t nb = p->blocks_per_row, hd = heads ? p->rows / (size_t)heads : 0;
    for (size_t g = 0; g < p->rows; g++) {
        size_t r = g;
        if (heads) { /* GGUF row h*hd + 2i + j holds HF row h*hd + j*(hd/2) + i */
            size_t h = g / hd, rem = g % hd;
            r = h * hd + (rem % 2) * (hd / 2) + rem / 2;
        }
        const uint8_t *codes = p->codes + r * p->row_bytes;
        for (size_t b = 0; b < nb; b++) {
            uint8_t *blk = out + (g * nb + b) * 17;
            blk[0] = p->scales[r * nb + b];
            for (size_t j = 0; j < 16; j++) {
                size_t c0 = b * 32 + j, c1 = c0 + 16; /* element j and j + 16 of the block */
                uint8_t lo = (uint8_t)(codes[c0 / 2] >> (4 * (c0 % 2)) & 0xf);
                uint8_t hi = (uint8_t)(codes[c1 / 2] >> (4 * (c1 % 2)) & 0xf);
                blk[1 + j] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

typedef struct src_tensor {
    const char *name; /* into the map */
    size_t name_len;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset;
    int linear; /* -1 or the linear index, when the policy quantizes it */
} src_tensor;

static int write_all(FILE *f, const void *p, size_t n) {
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int write_pad(FILE *f, uint64_t *pos, uint64_t align) {
    static const uint8_t zero[64] = {0};
    uint64_t pad = (align - *pos % align) % align;
    while (pad) {
        size_t k = pad < sizeof zero ? (size_t)pad : sizeof zero;
        if (write_all(f, zero, k)) return -1;
        pad -= k;
        *pos += k;
    }
    return 0;
}

qs_status qw_export_gguf(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                         const qw_method_state *ms, const char *tmp, qs_error *err) {
    const qw_config *cfg = qw_checkpoint_config(ck);
    const qw_policy *pol = r->policy;
    int nl = cfg->n_layers, nlin = nl * QW_LINEAR_KINDS + 1;
    struct stat sb;
    if (stat(r->model_path, &sb) != 0 || S_ISDIR(sb.st_mode))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: gguf: %s is not a GGUF file; the GGUF layout copies a GGUF "
                            "source's metadata and tokenizer (export a Hugging Face folder as "
                            "compressed-tensors)",
                            r->model_path);
    if (pol->embed.weight || pol->embed.act)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: gguf: token_embd: the embeddings are written as the source "
                            "holds them; quantized embeddings are not exported");
    int any = 0;
    for (int i = 0; i < nlin; i++) {
        const qw_quant_spec *s = i < nlin - 1 ? &pol->linears[i] : &pol->lm_head;
        char name[96];
        qw_model_linear_name(m, i, name, sizeof name);
        int wq = s->weight && strcmp(qk_format_name(s->weight), "bf16") != 0;
        if (s->act)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "export: gguf: %s: activations in %s: llama.cpp quantizes its own "
                                "activations (W4A16 only)",
                                name, qk_format_name(s->act));
        if (wq && strcmp(qk_format_name(s->weight), "mxfp4") != 0)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "export: gguf: %s: format %s has no GGUF tensor type here (mxfp4)",
                                name, qk_format_name(s->weight));
        if (wq && i == nlin - 1 && cfg->tied_embeddings)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "export: gguf: lm_head: the model ties it to the embeddings, so a "
                                "quantized head and unquantized embeddings cannot be one tensor");
        any |= wq;
    }
    if (!any)
        return qs_error_set(err, QS_EINVAL,
                            "export: the policy quantizes no linear: the source checkpoint is the "
                            "export");
    int fd = open(r->model_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qs_error_set(err, QS_EIO, "%s: %s", r->model_path, strerror(errno));
    size_t fsize = (size_t)sb.st_size;
    const uint8_t *map = mmap(NULL, fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return qs_error_set(err, QS_EIO, "%s: mmap: %s", r->model_path, strerror(errno));
    /* the source's header, KV pairs (kept as bytes) and tensor infos */
    rd rr = {map, fsize, 0, 0};
    uint32_t magic = (uint32_t)rd_u(&rr, 4), version = (uint32_t)rd_u(&rr, 4);
    uint64_t n_t = rd_u(&rr, 8), n_kv = rd_u(&rr, 8), align = 32;
    for (uint64_t i = 0; i < n_kv && !rr.bad; i++) {
        uint64_t klen = rd_u(&rr, 8);
        const char *key = (const char *)map + rr.off;
        if (klen > fsize - rr.off)
            rr.bad = 1;
        else
            rr.off += klen;
        uint32_t t = (uint32_t)rd_u(&rr, 4);
        if (!rr.bad && t == 4 && klen == 17 && !memcmp(key, "general.alignment", 17)) {
            size_t at = rr.off;
            align = rd_u(&rr, 4);
            rr.off = at;
        }
        rd_skip_value(&rr, t, 0);
    }
    size_t kv1 = rr.off;
    src_tensor *ts = (!rr.bad && magic == 0x46554747u && version == 3 && n_t < (1u << 20))
                         ? calloc(n_t ? n_t : 1, sizeof *ts)
                         : NULL;
    qs_status st = QS_OK;
    if (!ts)
        st = qs_error_set(err, QS_EFORMAT, "%s: not a GGUF v3 file this exporter can copy",
                          r->model_path);
    for (uint64_t i = 0; i < n_t && !st && !rr.bad; i++) {
        src_tensor *t = &ts[i];
        t->name_len = rd_u(&rr, 8);
        t->name = (const char *)map + rr.off;
        if (t->name_len > 200 || t->name_len > fsize - rr.off)
            rr.bad = 1;
        else
            rr.off += t->name_len;
        t->n_dims = (uint32_t)rd_u(&rr, 4);
        if (t->n_dims > 4) rr.bad = 1;
        for (uint32_t d = 0; d < t->n_dims && !rr.bad; d++)
            t->ne[d] = rd_u(&rr, 8);
        t->type = (uint32_t)rd_u(&rr, 4);
        t->offset = rd_u(&rr, 8);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name_len, t->name);
        t->linear = linear_of(name, nl);
        if (t->linear >= 0) {
            const qw_quant_spec *s =
                t->linear < nlin - 1 ? &pol->linears[t->linear] : &pol->lm_head;
            if (!s->weight || !strcmp(qk_format_name(s->weight), "bf16")) t->linear = -1;
        }
    }
    if (!st && (rr.bad || align == 0 || (align & (align - 1))))
        st = qs_error_set(err, QS_EFORMAT, "%s: malformed GGUF header or tensor infos",
                          r->model_path);
    uint64_t data0 = st ? 0 : rr.off + (align - rr.off % align) % align; /* source data start */
    /* sizes: a quantized linear's MXFP4 bytes, any other tensor's source bytes */
    uint64_t *size = st ? NULL : calloc(n_t ? n_t : 1, sizeof *size);
    if (!st && !size) st = qs_error_set(err, QS_ENOMEM, "export: out of memory");
    for (uint64_t i = 0; i < n_t && !st; i++) {
        src_tensor *t = &ts[i];
        uint64_t numel = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            numel *= t->ne[d];
        qw_dtype dt;
        if (t->linear >= 0) {
            if (t->ne[0] % 32 != 0)
                st = qs_error_set(err, QS_EUNSUPPORTED,
                                  "export: gguf: %.*s: rows of %llu are not whole MXFP4 blocks",
                                  (int)t->name_len, t->name, (unsigned long long)t->ne[0]);
            size[i] = numel / 32 * 17;
        } else if (!qw_dtype_by_ggml(t->type, &dt)) {
            st = qs_error_set(err, QS_EUNSUPPORTED, "%s: tensor %.*s: ggml type %u is not copied",
                              r->model_path, (int)t->name_len, t->name, t->type);
        } else {
            size[i] = numel / (uint64_t)qw_dtype_block(dt) * (uint64_t)qw_dtype_block_bytes(dt);
            if (data0 + t->offset + size[i] > fsize)
                st = qs_error_set(err, QS_EFORMAT, "%s: tensor %.*s runs past the file",
                                  r->model_path, (int)t->name_len, t->name);
        }
    }
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/model.gguf", tmp);
    if (!st && (n < 0 || (size_t)n >= sizeof path))
        st = qs_error_set(err, QS_EINVAL, "%s: path too long", tmp);
    FILE *f = st ? NULL : fopen(path, "wbx");
    if (!st && !f) st = qs_error_set(err, QS_EIO, "%s: %s", path, strerror(errno));
    int bad = 0;
    uint64_t pos = 0, off = 0;
    if (!st) {
        bad |= write_all(f, map, kv1); /* header and KV pairs as they are */
        pos = kv1;
        for (uint64_t i = 0; i < n_t && !bad; i++) {
            src_tensor *t = &ts[i];
            uint32_t type = t->linear >= 0 ? GGML_TYPE_MXFP4 : t->type;
            bad |= write_all(f, &t->name_len, 8) || write_all(f, t->name, t->name_len) ||
                   write_all(f, &t->n_dims, 4) || write_all(f, t->ne, 8 * t->n_dims) ||
                   write_all(f, &type, 4) || write_all(f, &off, 8);
            pos += 8 + t->name_len + 4 + 8 * t->n_dims + 4 + 8;
            off += size[i] + (align - size[i] % align) % align;
        }
        bad |= write_pad(f, &pos, align);
        for (uint64_t i = 0; i < n_t && !bad && !st; i++) {
            src_tensor *t = &ts[i];
            if (t->linear >= 0) {
                const qk_packed *p = qw_export_packed(m, ms, t->linear);
                uint8_t *blocks = p ? malloc((size_t)size[i]) : NULL;
                if (!p || !blocks || p->rows * p->k / 32 * 17 != size[i]) {
                    free(blocks);
                    st = qs_error_set(err, QS_EINVAL,
                                      "export: gguf: %.*s: no packed form of "
                                      "its shape",
                                      (int)t->name_len, t->name);
                    break;
                }
                int q = t->linear % QW_LINEAR_KINDS, last = t->linear == nlin - 1;
                int heads = last               ? 0
                            : q == QW_LINEAR_Q ? cfg->n_heads
                            : q == QW_LINEAR_K ? cfg->n_kv_heads
                                               : 0;
                to_block_mxfp4(p, heads, blocks);
                bad |= write_all(f, blocks, (size_t)size[i]);
                free(blocks);
            } else {
                bad |= write_all(f, map + data0 + t->offset, (size_t)size[i]);
            }
            pos += size[i];
            bad |= write_pad(f, &pos, align);
            if (r->progress) r->progress(r->progress_ctx, (size_t)i + 1, (size_t)n_t);
        }
        int e = errno;
        if (!bad && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
            bad = 1;
            e = errno;
        }
        if (fclose(f) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        if (bad && !st) st = qs_error_set(err, QS_EIO, "%s: writing: %s", path, strerror(e));
        if (st) unlink(path);
    }
    free(size);
    free(ts);
    munmap((void *)map, fsize);
    return st;
}
