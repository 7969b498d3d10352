/* Perplexity, baseline log-probabilities and KL divergence over a token file (eval.h, where
 * the definitions are written out; they follow llama.cpp's tools/perplexity/perplexity.cpp). */
#include "eval.h"

#include "clock.h"
#include "ops.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- definitions */

qs_status qw_eval_plan(size_t n_tokens, int ctx, size_t max_chunks, size_t *n_chunks,
                       size_t *n_scored, qs_error *err) {
    /* Scored positions per chunk are first = ctx/2 .. ctx-2 (eval.h): ctx - 1 - ctx/2 of them,
     * zero at ctx 2, so ctx 3 is the smallest context that scores anything. */
    if (ctx < 3)
        return qs_error_set(err, QS_EINVAL,
                            "eval: ctx %d scores no position (positions ctx/2..ctx-2 are "
                            "scored, %d of them); ctx must be at least 3",
                            ctx, ctx >= 1 ? ctx - 1 - ctx / 2 : 0);
    size_t n = n_tokens / (size_t)ctx;
    if (n == 0)
        return qs_error_set(err, QS_EINVAL, "eval: %zu tokens, fewer than one chunk of ctx %d",
                            n_tokens, ctx);
    if (max_chunks > 0 && n > max_chunks) n = max_chunks;
    *n_chunks = n;
    *n_scored = n * (size_t)(ctx - 1 - ctx / 2);
    return QS_OK;
}

void qw_eval_score_chunk(const float *logits, const uint32_t *tokens, int ctx, int vocab,
                         double *nll_sum, double *nll2_sum, size_t *n) {
    /* Serial twin of score_chunk: the same values summed in the same order. */
    for (int j = ctx / 2; j < ctx - 1; j++) {
        const float *l = logits + (size_t)j * vocab;
        double v = qw_logsoftmax_row(l, vocab, NULL) - (double)l[tokens[j + 1]];
        *nll_sum += v;
        *nll2_sum += v * v;
    }
    *n += (size_t)(ctx - 1 - ctx / 2);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile at fraction f of sorted v[n], linear interpolation at f*(n-1) (llama.cpp);
 * NaN when n is 0 (no value to interpolate). */
static double percentile(const double *v, size_t n, double f) {
    if (n == 0) return NAN;
    if (f <= 0.0) return v[0];
    if (f >= 1.0) return v[n - 1];
    double p = f * (double)(n - 1);
    size_t i = (size_t)p;
    p -= (double)i;
    size_t j = i + 1 < n ? i + 1 : n - 1;
    return (1.0 - p) * v[i] + p * v[j];
}

/* ---------------------------------------------------------------- baseline file */

typedef qw_baseline_info blp_header;

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void header_pack(const blp_header *h, unsigned char b[QW_BASELINE_HEADER_BYTES]) {
    memset(b, 0, QW_BASELINE_HEADER_BYTES);
    memcpy(b, QW_BASELINE_MAGIC, 8);
    put_u32(b + 8, QW_BASELINE_VERSION);
    put_u32(b + 12, h->vocab);
    put_u32(b + 16, h->ctx);
    put_u32(b + 20, h->n_chunks);
    put_u32(b + 24, h->first);
    put_u32(b + 28, (uint32_t)h->bos_id);
    put_u64(b + 32, h->n_scored);
    memcpy(b + 40, h->model_digest, QW_BASELINE_DIGEST_CHARS);
    memcpy(b + 112, h->dataset_digest, QW_BASELINE_DIGEST_CHARS);
}

static qs_status header_unpack(const unsigned char b[QW_BASELINE_HEADER_BYTES], const char *path,
                               blp_header *h, qs_error *err) {
    memset(h, 0, sizeof *h);
    if (memcmp(b, QW_BASELINE_MAGIC, 8) != 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 0: bad magic (not a qsweep baseline file)",
                            path);
    uint32_t ver = get_u32(b + 8);
    if (ver != QW_BASELINE_VERSION)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 8: version %u, expected %d", path, ver,
                            QW_BASELINE_VERSION);
    h->vocab = get_u32(b + 12);
    h->ctx = get_u32(b + 16);
    h->n_chunks = get_u32(b + 20);
    h->first = get_u32(b + 24);
    h->bos_id = (int32_t)get_u32(b + 28);
    h->n_scored = get_u64(b + 32);
    memcpy(h->model_digest, b + 40, QW_BASELINE_DIGEST_CHARS);
    memcpy(h->dataset_digest, b + 112, QW_BASELINE_DIGEST_CHARS);
    if (h->model_digest[QW_BASELINE_DIGEST_CHARS - 1])
        return qs_error_set(err, QS_EFORMAT, "%s: offset 40: model_digest not NUL-terminated",
                            path);
    if (h->dataset_digest[QW_BASELINE_DIGEST_CHARS - 1])
        return qs_error_set(err, QS_EFORMAT, "%s: offset 112: dataset_digest not NUL-terminated",
                            path);
    if (get_u32(b + 184) || get_u32(b + 188))
        return qs_error_set(err, QS_EFORMAT, "%s: offset 184: reserved fields not zero", path);
    if (h->vocab < 1) return qs_error_set(err, QS_EFORMAT, "%s: offset 12: vocab_size 0", path);
    if (h->ctx < 2) return qs_error_set(err, QS_EFORMAT, "%s: offset 16: ctx %u < 2", path, h->ctx);
    if (h->n_chunks < 1) return qs_error_set(err, QS_EFORMAT, "%s: offset 20: n_chunks 0", path);
    if (h->first != h->ctx / 2)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 24: first %u, ctx/2 is %u", path, h->first,
                            h->ctx / 2);
    if (h->bos_id < -1 || (int64_t)h->bos_id >= (int64_t)h->vocab)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 28: bos_id %d outside -1..%u", path,
                            h->bos_id, h->vocab - 1);
    uint64_t want = (uint64_t)h->n_chunks * (h->ctx - 1 - h->ctx / 2);
    if (h->n_scored != want)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: offset 32: n_scored %llu, n_chunks*(ctx-1-ctx/2) is %llu", path,
                            (unsigned long long)h->n_scored, (unsigned long long)want);
    return QS_OK;
}

/* Bytes the file must have: header + 4*n_chunks*ctx + 4*n_scored*vocab; 0 on overflow. */
static uint64_t baseline_bytes(const blp_header *h) {
    uint64_t toks = 4ull * h->n_chunks * h->ctx, lp, total;
    if (__builtin_mul_overflow(h->n_scored, (uint64_t)h->vocab, &lp) ||
        __builtin_mul_overflow(lp, 4ull, &lp) || __builtin_add_overflow(lp, toks, &total) ||
        __builtin_add_overflow(total, (uint64_t)QW_BASELINE_HEADER_BYTES, &total))
        return 0;
    return total;
}

static qs_status read_all(FILE *f, void *p, size_t bytes, const char *path, long long off,
                          qs_error *err);

/* Reads the header of the open file f and checks it against the file's size. */
static qs_status info_from_file(FILE *f, const char *path, blp_header *h, qs_error *err) {
    unsigned char b[QW_BASELINE_HEADER_BYTES];
    qs_status st = read_all(f, b, sizeof b, path, 0, err);
    if (st != QS_OK) return st;
    st = header_unpack(b, path, h, err);
    if (st != QS_OK) return st;
    if (fseeko(f, 0, SEEK_END) != 0)
        return qs_error_set(err, QS_EIO, "%s: seek: %s", path, strerror(errno));
    off_t size = ftello(f);
    if (size < 0) return qs_error_set(err, QS_EIO, "%s: tell: %s", path, strerror(errno));
    uint64_t expect = baseline_bytes(h);
    if (expect == 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 32: n_scored x vocab_size overflows",
                            path);
    if ((uint64_t)size != expect)
        return qs_error_set(err, QS_EFORMAT, "%s: size %llu bytes, header implies %llu", path,
                            (unsigned long long)size, (unsigned long long)expect);
    h->file_bytes = (uint64_t)size;
    return QS_OK;
}

qs_status qw_baseline_info_read(const char *path, qw_baseline_info *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return qs_error_set(err, QS_EIO, "%s: open: %s", path, strerror(errno));
    qs_status st = info_from_file(f, path, out, err);
    fclose(f);
    return st;
}

static void copy_digest(char dst[QW_BASELINE_DIGEST_CHARS], const char *src) {
    memset(dst, 0, QW_BASELINE_DIGEST_CHARS);
    if (src) strncpy(dst, src, QW_BASELINE_DIGEST_CHARS - 1);
}

/* ---------------------------------------------------------------- the run */

typedef enum run_mode { RUN_BASELINE, RUN_COMPARE } run_mode;

typedef struct run_state {
    FILE *f;
    char tmp_path[4096];
    uint32_t *chunk; /* [ctx] tokens of the current chunk after BOS replacement */
    float *blk;      /* [n_pos x vocab] baseline log-probs of one chunk's scored positions */
    /* blk in the memory of the backend that holds the logits (model.h
     * qw_model_logits_backend): blk itself on the CPU, else allocated from the backend, the
     * baseline's log-probs fetched from it or uploaded to it (baseline_io) */
    float *dblk;
    double *kl;      /* [n_scored] */
    unsigned char *top1_hit; /* [n_scored] */
    double *nll_pos; /* [ctx - 1 - ctx/2] NLL of each scored position of the current chunk */
    int32_t *top1, *ref_top1; /* [n_pos] argmax of the model's and of the baseline's rows */
} run_state;

static void run_state_free(run_state *s) {
    if (s->f) fclose(s->f);
    free(s->chunk);
    free(s->blk);
    free(s->top1);
    free(s->ref_top1);
    free(s->kl);
    free(s->top1_hit);
    free(s->nll_pos);
}

static qs_status write_all(FILE *f, const void *p, size_t bytes, const char *path, qs_error *err) {
    if (bytes && fwrite(p, 1, bytes, f) != bytes)
        return qs_error_set(err, QS_EIO, "%s: write: %s", path, strerror(errno));
    return QS_OK;
}

static qs_status read_all(FILE *f, void *p, size_t bytes, const char *path, long long off,
                          qs_error *err) {
    if (bytes && fread(p, 1, bytes, f) != bytes)
        return qs_error_set(err, feof(f) ? QS_EFORMAT : QS_EIO,
                            "%s: offset %lld: short read of %zu bytes%s%s", path, off, bytes,
                            ferror(f) ? ": " : "", ferror(f) ? strerror(errno) : "");
    return QS_OK;
}

/* Opens the baseline for compare and checks it against this run (eval.h). */
static qs_status open_baseline(const char *path, const blp_header *want, const uint32_t *tokens,
                               size_t n_tok, run_state *s, qs_error *err) {
    s->f = fopen(path, "rb");
    if (!s->f) return qs_error_set(err, QS_EIO, "%s: open: %s", path, strerror(errno));
    blp_header h;
    qs_status st = info_from_file(s->f, path, &h, err);
    if (st != QS_OK) return st;
#define SAME(field, fmt)                                                                           \
    if (h.field != want->field)                                                                    \
    return qs_error_set(err, QS_EINVAL, "%s: baseline " #field " " fmt ", this run " fmt, path,    \
                        h.field, want->field)
    SAME(vocab, "%u");
    SAME(ctx, "%u");
    SAME(n_chunks, "%u");
    SAME(first, "%u");
    SAME(bos_id, "%d");
#undef SAME
    if (h.model_digest[0] && want->model_digest[0] &&
        strcmp(h.model_digest, want->model_digest) != 0)
        return qs_error_set(err, QS_EINVAL, "%s: baseline model_digest %s, this run %s", path,
                            h.model_digest, want->model_digest);
    if (h.dataset_digest[0] && want->dataset_digest[0] &&
        strcmp(h.dataset_digest, want->dataset_digest) != 0)
        return qs_error_set(err, QS_EINVAL, "%s: baseline dataset_digest %s, this run %s", path,
                            h.dataset_digest, want->dataset_digest);
    if (fseeko(s->f, QW_BASELINE_HEADER_BYTES, SEEK_SET) != 0)
        return qs_error_set(err, QS_EIO, "%s: seek: %s", path, strerror(errno));
    unsigned char tb[4096];
    for (size_t i = 0; i < n_tok;) {
        size_t k = n_tok - i < sizeof tb / 4 ? n_tok - i : sizeof tb / 4;
        st = read_all(s->f, tb, 4 * k, path, (long long)(QW_BASELINE_HEADER_BYTES + 4 * i), err);
        if (st != QS_OK) return st;
        for (size_t j = 0; j < k; j++)
            if (get_u32(tb + 4 * j) != tokens[i + j])
                return qs_error_set(err, QS_EINVAL,
                                    "%s: offset %zu: baseline token %zu is %u, this run's is %u",
                                    path, QW_BASELINE_HEADER_BYTES + 4 * (i + j), i + j,
                                    get_u32(tb + 4 * j), tokens[i + j]);
        i += k;
    }
    return QS_OK;
}

static qs_status run(qw_model *m, const qw_tokens *toks, const qw_eval_options *opt, run_mode mode,
                     const char *path, qw_eval_metrics *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    const qw_config *c = qw_model_config(m);
    int vocab = c->vocab_size, ctx = opt->ctx;
    if (ctx > qw_model_max_ctx(m))
        return qs_error_set(err, QS_EINVAL, "eval: ctx %d larger than %d (the model's max_ctx)",
                            ctx, qw_model_max_ctx(m));
    if (toks->vocab_size > (uint32_t)vocab)
        return qs_error_set(err, QS_EINVAL, "eval: token file vocab %u larger than the model's %d",
                            toks->vocab_size, vocab);
    if (opt->bos_id >= vocab || opt->bos_id < -1)
        return qs_error_set(err, QS_EINVAL, "eval: bos_id %d outside -1..%d", opt->bos_id,
                            vocab - 1);
    if (opt->sqnr_rows < 0)
        return qs_error_set(err, QS_EINVAL, "eval: sqnr_rows %d < 0", opt->sqnr_rows);
    if (mode == RUN_COMPARE && !path)
        return qs_error_set(err, QS_EINVAL, "eval compare: no baseline path");
    size_t n_chunks = 0, n_scored = 0;
    qs_status st = qw_eval_plan(toks->n, ctx, opt->max_chunks, &n_chunks, &n_scored, err);
    if (st != QS_OK) return st;
    if (n_scored == 0) /* unreachable after the plan's ctx >= 3; the summaries divide by it */
        return qs_error_set(err, QS_EINVAL, "eval: ctx %d, %zu tokens: no scored position", ctx,
                            toks->n);
    int first = ctx / 2, n_pos = ctx - 1 - first;
    size_t n_tok = n_chunks * (size_t)ctx;
    blp_header h = {.vocab = (uint32_t)vocab,
                    .ctx = (uint32_t)ctx,
                    .n_chunks = (uint32_t)n_chunks,
                    .first = (uint32_t)first,
                    .bos_id = opt->bos_id,
                    .n_scored = n_scored};
    copy_digest(h.model_digest, opt->model_digest);
    copy_digest(h.dataset_digest, opt->dataset_digest);

    run_state s = {0};
    size_t blk_bytes = (size_t)n_pos * vocab * sizeof(float);
    s.chunk = malloc((size_t)ctx * sizeof *s.chunk);
    s.nll_pos = malloc((size_t)n_pos * sizeof *s.nll_pos);
    s.blk = path ? malloc(blk_bytes) : NULL;
    s.top1 = mode == RUN_COMPARE ? malloc((size_t)n_pos * sizeof *s.top1) : NULL;
    s.ref_top1 = mode == RUN_COMPARE ? malloc((size_t)n_pos * sizeof *s.ref_top1) : NULL;
    s.kl = mode == RUN_COMPARE ? malloc(n_scored * sizeof *s.kl) : NULL;
    s.top1_hit = mode == RUN_COMPARE ? malloc(n_scored) : NULL;
    if (!s.chunk || !s.nll_pos || (path && !s.blk) ||
        (mode == RUN_COMPARE && (!s.top1 || !s.ref_top1 || !s.kl || !s.top1_hit))) {
        run_state_free(&s);
        return qs_error_set(err, QS_ENOMEM, "eval: buffers for ctx %d, vocab %d", ctx, vocab);
    }
    qw_profile *prof = qw_model_profile(m);
    double t0 = qs_clock_s();
    if (mode == RUN_BASELINE && path) {
        int w = snprintf(s.tmp_path, sizeof s.tmp_path, "%s.tmp", path);
        if (w < 0 || (size_t)w >= sizeof s.tmp_path) {
            run_state_free(&s);
            return qs_error_set(err, QS_EINVAL, "eval: baseline path too long");
        }
        s.f = fopen(s.tmp_path, "wb");
        if (!s.f) {
            st = qs_error_set(err, QS_EIO, "%s: open for writing: %s", s.tmp_path, strerror(errno));
            run_state_free(&s);
            return st;
        }
        unsigned char b[QW_BASELINE_HEADER_BYTES];
        header_pack(&h, b);
        st = write_all(s.f, b, sizeof b, s.tmp_path, err);
        for (size_t i = 0; i < n_tok && st == QS_OK; i++) {
            unsigned char tb[4];
            put_u32(tb, toks->ids[i]);
            st = write_all(s.f, tb, 4, s.tmp_path, err);
        }
    } else if (mode == RUN_COMPARE) {
        st = open_baseline(path, &h, toks->ids, n_tok, &s, err);
    }
    qw_profile_add_since(prof, QW_PHASE_BASELINE_IO, t0);
    int tp_before = qw_model_tensor_parallel(m);
    int tp = opt->tensor_parallel > 0 ? opt->tensor_parallel : tp_before;
    if (st == QS_OK && tp != tp_before) st = qw_model_set_tensor_parallel(m, tp, err);
    if (st == QS_OK && mode == RUN_COMPARE && opt->sqnr) {
        st = qw_model_set_sqnr_probe(m, 1, err);
        qw_model_set_sqnr_rows(m, opt->sqnr_rows);
    }
    /* what the job asks for: a compare job without KL and top-1 reads no baseline rows */
    int want_kl = mode == RUN_COMPARE && !opt->skip_kl;
    int want_top1 = mode == RUN_COMPARE && !opt->skip_top1;
    /* The chunks are scored where their logits are (ops.h score_rows): on the device for a
     * model on CUDA, on the host for the CPU and for a sharded model's gathered logits. */
    qw_backend *be = st == QS_OK ? qw_model_logits_backend(m) : NULL;
    int host_blk = be && be->ops == qw_ops_cpu(); /* the backend's memory is the host's */
    if (be && path) {
        s.dblk = host_blk ? s.blk : be->ops->alloc(be, blk_bytes);
        if (!s.dblk)
            st =
                qs_error_set(err, QS_ENOMEM, "eval: baseline log-probs [%d x %d] on the %s backend",
                             n_pos, vocab, be->ops->name);
    }

    double nll = 0.0, nll2 = 0.0;
    size_t count = 0;
    for (size_t ch = 0; ch < n_chunks && st == QS_OK; ch++) {
        if (opt->cancel && atomic_load(opt->cancel)) {
            st = qs_error_set(err, QS_ECANCELLED, "eval: cancelled before chunk %zu of %zu", ch,
                              n_chunks);
            break;
        }
        memcpy(s.chunk, toks->ids + ch * ctx, (size_t)ctx * sizeof *s.chunk);
        if (opt->bos_id >= 0) s.chunk[0] = (uint32_t)opt->bos_id;
        const float *logits;
        st = qw_model_forward_rows(m, s.chunk, ctx, first, &logits, err); /* rows first.. */
        if (st != QS_OK) {
            qs_error_wrap(err, "eval: chunk %zu", ch);
            break;
        }
        /* A compare job reads the chunk's baseline rows first, so that one pass over each row of
         * logits gives its NLL, KL and top-1 (ops.h score_rows): the log-sum-exp once. */
        int cmp = want_kl || want_top1;
        size_t base = ch * (size_t)n_pos;
        if (cmp) {
            long long off = QW_BASELINE_HEADER_BYTES + 4ll * (long long)n_tok +
                            4ll * (long long)ch * n_pos * vocab;
            t0 = qs_clock_s();
            st = read_all(s.f, s.blk, blk_bytes, path, off, err);
            if (st == QS_OK && !host_blk) st = be->ops->upload(be, s.dblk, s.blk, blk_bytes, err);
            qw_profile_add_since(prof, QW_PHASE_BASELINE_IO, t0);
            if (st != QS_OK) break;
        }
        t0 = qs_clock_s();
        qw_tensor tl = {(float *)logits, n_pos, vocab};
        if (mode == RUN_BASELINE && path) {
            qw_tensor tlp = {s.dblk, n_pos, vocab};
            be->ops->logsoftmax(be, &tlp, &tl);
        }
        st = be->ops->score_rows(be, &tl, s.chunk + first + 1, cmp ? s.dblk : NULL, s.nll_pos,
                                 want_kl ? s.kl + base : NULL, want_top1 ? s.top1 : NULL,
                                 want_top1 ? s.ref_top1 : NULL, err);
        if (st != QS_OK) {
            qs_error_wrap(err, "eval: chunk %zu: scores", ch);
            break;
        }
        /* the NLL of the scored positions summed here in position order: the sums do not
         * depend on the thread count */
        for (int j = 0; j < n_pos; j++) {
            nll += s.nll_pos[j];
            nll2 += s.nll_pos[j] * s.nll_pos[j];
        }
        count += (size_t)n_pos;
        for (int j = 0; want_top1 && j < n_pos; j++)
            s.top1_hit[base + j] = s.top1[j] == s.ref_top1[j];
        qw_profile_add_since(prof, mode == RUN_COMPARE ? QW_PHASE_COMPARE : QW_PHASE_LOGSOFTMAX,
                             t0);
        if (mode == RUN_BASELINE && path) {
            t0 = qs_clock_s();
            if (!host_blk) st = be->ops->fetch(be, s.blk, s.dblk, blk_bytes, err);
            if (st == QS_OK) st = write_all(s.f, s.blk, blk_bytes, s.tmp_path, err);
            qw_profile_add_since(prof, QW_PHASE_BASELINE_IO, t0);
        }
        if (st == QS_OK && opt->progress &&
            opt->progress(opt->progress_ctx, ch + 1, n_chunks) != 0 && ch + 1 < n_chunks)
            st = qs_error_set(err, QS_ECANCELLED,
                              "eval: cancelled by the progress callback after chunk %zu of %zu",
                              ch + 1, n_chunks);
    }

    if (s.dblk && !host_blk) be->ops->free(be, s.dblk);
    s.dblk = NULL;
    if (st == QS_OK) {
        out->n_tokens = toks->n;
        out->n_chunks = n_chunks;
        out->ctx = (size_t)ctx;
        out->n_scored = count;
        out->nll = nll / (double)count;
        out->ppl = exp(out->nll);
        double var = nll2 / (double)count - out->nll * out->nll;
        out->nll_stderr = count > 1 && var > 0.0 ? sqrt(var / (double)(count - 1)) : 0.0;
        out->ppl_stderr = out->nll_stderr * out->ppl;
    }
    t0 = qs_clock_s();
    if (st == QS_OK && mode == RUN_COMPARE) {
        double sum = 0.0, mx = -INFINITY;
        size_t hits = 0;
        for (size_t i = 0; i < n_scored; i++) {
            if (want_kl) sum += s.kl[i];
            if (want_kl) mx = s.kl[i] > mx ? s.kl[i] : mx;
            if (want_top1) hits += s.top1_hit[i];
        }
        if (want_kl) qsort(s.kl, n_scored, sizeof *s.kl, cmp_double);
        out->has_kl = 1;
        out->kl_mean = want_kl ? sum / (double)n_scored : NAN;
        out->kl_median = want_kl ? percentile(s.kl, n_scored, 0.5) : NAN;
        out->kl_p90 = want_kl ? percentile(s.kl, n_scored, 0.9) : NAN;
        out->kl_p99 = want_kl ? percentile(s.kl, n_scored, 0.99) : NAN;
        out->kl_max = want_kl ? mx : NAN;
        out->top1 = want_top1 ? (double)hits / (double)n_scored : NAN;
        if (opt->sqnr) {
            int nl = qw_model_n_linears(m);
            out->sqnr = calloc((size_t)nl, sizeof *out->sqnr);
            if (!out->sqnr) st = qs_error_set(err, QS_ENOMEM, "eval: SQNR table");
            for (int i = 0; i < nl && st == QS_OK; i++) {
                double sig, noise;
                if (qw_model_sqnr_sums(m, i, &sig, &noise) != 0) continue;
                qw_linear_sqnr *q = &out->sqnr[out->n_sqnr++];
                qw_model_linear_name(m, i, q->name, sizeof q->name);
                q->sqnr_db = noise > 0.0 ? 10.0 * log10(sig / noise) : INFINITY;
            }
        }
    }
    qw_profile_add_since(prof, QW_PHASE_COMPARE, t0);
    if (mode == RUN_COMPARE && opt->sqnr) {
        qw_model_set_sqnr_probe(m, 0, NULL);
        qw_model_set_sqnr_rows(m, 0);
    }
    if (tp != tp_before) qw_model_set_tensor_parallel(m, tp_before, NULL);
    t0 = qs_clock_s();
    if (mode == RUN_BASELINE && path && s.f) {
        int bad = fclose(s.f) != 0;
        s.f = NULL;
        if (st == QS_OK && bad)
            st = qs_error_set(err, QS_EIO, "%s: close: %s", s.tmp_path, strerror(errno));
        if (st == QS_OK && rename(s.tmp_path, path) != 0)
            st = qs_error_set(err, QS_EIO, "%s: rename to %s: %s", s.tmp_path, path,
                              strerror(errno));
        if (st != QS_OK) remove(s.tmp_path);
    }
    run_state_free(&s); /* closes the baseline read */
    qw_profile_add_since(prof, QW_PHASE_BASELINE_IO, t0);
    if (st != QS_OK) qw_eval_metrics_free(out);
    return st;
}

qs_status qw_eval_baseline(qw_model *m, const qw_tokens *toks, const qw_eval_options *opt,
                           const char *baseline_path, qw_eval_metrics *out, qs_error *err) {
    return run(m, toks, opt, RUN_BASELINE, baseline_path, out, err);
}

qs_status qw_eval_compare(qw_model *m, const qw_tokens *toks, const qw_eval_options *opt,
                          const char *baseline_path, qw_eval_metrics *out, qs_error *err) {
    return run(m, toks, opt, RUN_COMPARE, baseline_path, out, err);
}

void qw_eval_metrics_free(qw_eval_metrics *m) {
    if (!m) return;
    free(m->sqnr);
    memset(m, 0, sizeof *m);
}

/* "sqnr_db.<block>.<kind>" for "model.layers.<block>.<module>", "sqnr_db.<name>" otherwise. */
static void metric_name(const char *linear, char *buf, size_t cap) {
    int block, used = 0;
    if (sscanf(linear, "model.layers.%d.%n", &block, &used) == 1 && used > 0)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            if (strcmp(linear + used, qw_linear_module_name((qw_linear_kind)k)) == 0) {
                snprintf(buf, cap, "sqnr_db.%d.%s", block, qw_linear_kind_name((qw_linear_kind)k));
                return;
            }
    snprintf(buf, cap, "sqnr_db.%s", linear);
}

int qw_eval_metrics_foreach(const qw_eval_metrics *m, qw_metric_fn fn, void *ctx) {
    struct {
        const char *name;
        double v;
    } rows[] = {{"n_tokens", (double)m->n_tokens},
                {"n_chunks", (double)m->n_chunks},
                {"ctx", (double)m->ctx},
                {"n_scored", (double)m->n_scored},
                {"nll", m->nll},
                {"ppl", m->ppl},
                {"nll_stderr", m->nll_stderr},
                {"ppl_stderr", m->ppl_stderr},
                {"kl_mean", m->kl_mean},
                {"kl_median", m->kl_median},
                {"kl_p90", m->kl_p90},
                {"kl_p99", m->kl_p99},
                {"kl_max", m->kl_max},
                {"top1", m->top1}};
    size_t n = m->has_kl ? sizeof rows / sizeof rows[0] : 8;
    for (size_t i = 0; i < n; i++) {
        int r = fn(ctx, rows[i].name, rows[i].v);
        if (r) return r;
    }
    char name[128];
    for (size_t i = 0; i < m->n_sqnr; i++) {
        metric_name(m->sqnr[i].name, name, sizeof name);
        int r = fn(ctx, name, m->sqnr[i].sqnr_db);
        if (r) return r;
    }
    return 0;
}
