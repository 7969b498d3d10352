/* bench_tokenizer: encode throughput (MB/s of UTF-8 text) of qsweep's tokenizers on a 4 MB text
 * (the five test texts of tests/tokenizer/data/texts repeated), next to Hugging Face
 * tokenizers (Rust, through its Python package, one thread: hf_baseline.py) on the same text
 * and the same tokenizer.json, measured in the same run: HF on the whole text as one string
 * (the same work as qsweep's; its ids must agree) and HF on 1 KB pieces through encode_batch
 * (HF's fast case). The ratio is qsweep against the faster of the two. GGUF vocabularies are
 * timed too (their reference is llama.cpp, not run here).
 * Run by hand: build/release/bench/tokenizer/bench_tokenizer [MB] [repeats]
 * (needs python3 with `pip install tokenizers` for the baseline; without it, qsweep only). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tokenizer.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) exit(1);
    fclose(f);
    *n = (size_t)len;
    return b;
}

int main(int argc, char **argv) {
    double mb = argc > 1 ? atof(argv[1]) : 4.0;
    int repeats = argc > 2 ? atoi(argv[2]) : 3;
    const char *texts[] = {"gpl3.txt", "kjv_esther.txt", "llama2c_run.c", "unicode.txt",
                           "whitespace.txt"};
    size_t want = (size_t)(mb * 1e6), len = 0;
    char *text = malloc(want + (1 << 20));
    while (len < want)
        for (size_t i = 0; i < 5 && len < want; i++) {
            char path[4096];
            size_t n;
            snprintf(path, sizeof path, "%s/texts/%s", QW_TOK_SRC_DATA, texts[i]);
            char *s = slurp(path, &n);
            memcpy(text + len, s, n);
            len += n;
            free(s);
        }
    char tmp[] = "/tmp/bench_tokenizer.XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len) return 1;
    close(fd);
    printf("bench_tokenizer: %.2f MB of text (the five test texts repeated), best of %d runs\n",
           (double)len / 1e6, repeats);
    printf("%-24s %9s %12s %12s %12s %8s\n", "tokenizer", "ids", "qsweep", "HF whole", "HF 1KB",
           "ratio");
    const char *toks[] = {"llama3/tokenizer.json", "llama2/tokenizer.json", "smollm2.vocab.gguf",
                          "llama3.vocab.gguf", "llama2.vocab.gguf"};
    for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", QW_TOK_DATA, toks[k]);
        qw_tokenizer *t;
        qs_error err = {0};
        if (qw_tokenizer_open(path, &t, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double best = 1e30;
        size_t nids = 0;
        for (int r = 0; r < repeats; r++) {
            qw_token_vec v = {0};
            double t0 = now();
            if (qw_tokenizer_encode(t, text, len, 0, &v, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            double dt = now() - t0;
            if (dt < best) best = dt;
            nids = v.n;
            qw_token_vec_free(&v);
        }
        qw_tokenizer_free(t);
        double ours = (double)len / 1e6 / best;
        double hf = 0, hf2 = 0;
        long hf_ids = -1, hf2_ids = -1;
        if (strstr(toks[k], ".json")) {
            char cmd[8192];
            snprintf(cmd, sizeof cmd, "python3 %s/hf_baseline.py %s %s %d 2>/dev/null",
                     QW_BENCH_DIR, path, tmp, repeats);
            FILE *p = popen(cmd, "r");
            double s1, s2;
            if (p && fscanf(p, "%ld %lf %ld %lf", &hf_ids, &s1, &hf2_ids, &s2) == 4 && s1 > 0 &&
                s2 > 0) {
                hf = (double)len / 1e6 / s1;
                hf2 = (double)len / 1e6 / s2;
            }
            if (p) pclose(p);
        }
        if (hf > 0)
            printf("%-24s %9zu %7.2f MB/s %7.2f MB/s %7.2f MB/s %7.2fx\n", toks[k], nids, ours, hf,
                   hf2, ours / (hf > hf2 ? hf : hf2));
        else
            printf("%-24s %9zu %7.2f MB/s %12s %12s %8s\n", toks[k], nids, ours, "-", "-", "-");
        if (hf > 0 && hf_ids != (long)nids)
            printf("  ids differ from HF's on the whole text: %zu vs %ld\n", nids, hf_ids);
    }
    unlink(tmp);
    free(text);
    return 0;
}
