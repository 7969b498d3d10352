#include "golden.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rd(FILE *f, void *p, size_t n, const char *path) {
    if (fread(p, 1, n, f) != n) {
        fprintf(stderr, "%s: offset %ld: short read of %zu bytes\n", path, ftell(f), n);
        return -1;
    }
    return 0;
}

int golden_load(const char *path, golden *g) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    char magic[8];
    uint32_t hdr[4];
    if (rd(f, magic, 8, path) || memcmp(magic, "QSWGOLD", 8) != 0 || rd(f, hdr, sizeof hdr, path) ||
        hdr[0] != 1) {
        fprintf(stderr, "%s: not a version-1 golden file\n", path);
        fclose(f);
        return -1;
    }
    g->n_seqs = hdr[1];
    g->vocab = hdr[2];
    g->seqs = calloc(g->n_seqs, sizeof *g->seqs);
    int rc = g->seqs ? 0 : -1;
    for (uint32_t s = 0; s < g->n_seqs && rc == 0; s++) {
        golden_seq *q = &g->seqs[s];
        uint32_t nr[2];
        rc = rd(f, nr, sizeof nr, path);
        if (rc) break;
        q->n = nr[0];
        q->row0 = nr[1];
        if (q->row0 >= q->n) {
            fprintf(stderr, "%s: sequence %u: row0 %u >= n %u\n", path, s, q->row0, q->n);
            rc = -1;
            break;
        }
        q->tokens = malloc((size_t)q->n * 4);
        q->logits = malloc((size_t)(q->n - q->row0) * g->vocab * 4);
        if (!q->tokens || !q->logits) {
            rc = -1;
            break;
        }
        rc = rd(f, q->tokens, (size_t)q->n * 4, path);
        if (!rc) rc = rd(f, q->logits, (size_t)(q->n - q->row0) * g->vocab * 4, path);
    }
    fclose(f);
    if (rc) golden_free(g);
    return rc;
}

void golden_free(golden *g) {
    for (uint32_t s = 0; g->seqs && s < g->n_seqs; s++) {
        free(g->seqs[s].tokens);
        free(g->seqs[s].logits);
    }
    free(g->seqs);
    memset(g, 0, sizeof *g);
}

double rel_err(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), m = fabs((double)b[i]);
        num = d > num ? d : num;
        den = m > den ? m : den;
    }
    return den > 0.0 ? num / den : num;
}

int write_token_file(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint32_t h[4] = {1, vocab_size, 1, 0};
    uint64_t cnt = n;
    int ok = fwrite("QSWTOKS", 1, 8, f) == 8 && fwrite(h, 4, 4, f) == 4 &&
             fwrite(&cnt, 8, 1, f) == 1 && fwrite(ids, 4, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : -1;
}

const char *engine_data_dir(void) {
    return QW_ENGINE_DATA;
}

int smollm2_gguf_path(char *buf, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, cap, "%s/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf", xdg);
    else
        snprintf(buf, cap, "%s/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    return access(buf, R_OK) == 0;
}

int make_temp_dir(char *buf, size_t cap) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/qsweep-engine-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(buf) ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int remove_temp_dir(const char *dir) {
    return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
