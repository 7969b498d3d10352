/* Reading the TSV files of tests/kernels/data (written by tools/kernels_fp4_vectors.c) in the
 * kernels tests: lines starting with '#' are comments, the first other line is the column
 * header, fields are tab-separated. QK_TESTDATA_DIR comes from tests/kernels/CMakeLists.txt;
 * the environment variable of the same name overrides it. A missing file fails the test (the
 * vectors are required). */
#ifndef QK_TEST_TESTDATA_H
#define QK_TEST_TESTDATA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TSV_MAX_FIELDS 8

typedef struct tsv_file {
    FILE *f;
    char path[512];
    char line[4096];
    size_t lineno;
    char *field[TSV_MAX_FIELDS];
    int nfield;
} tsv_file;

/* Opens QK_TESTDATA_DIR/name and skips comments and the header; NULL-safe on failure
 * (prints the path and returns 0). */
static inline int tsv_open(tsv_file *t, const char *name) {
    memset(t, 0, sizeof *t);
    const char *dir = getenv("QK_TESTDATA_DIR"); /* override: another folder of vectors */
    snprintf(t->path, sizeof t->path, "%s/%s", dir && *dir ? dir : QK_TESTDATA_DIR, name);
    t->f = fopen(t->path, "r");
    if (!t->f) {
        fprintf(stderr, "cannot open test vectors %s\n", t->path);
        return 0;
    }
    int header_seen = 0;
    while (!header_seen && fgets(t->line, sizeof t->line, t->f)) {
        t->lineno++;
        if (t->line[0] != '#') header_seen = 1;
    }
    return header_seen;
}

/* Reads the next data row into t->field; returns the number of fields, 0 at the end. */
static inline int tsv_next(tsv_file *t) {
    while (fgets(t->line, sizeof t->line, t->f)) {
        t->lineno++;
        if (t->line[0] == '#' || t->line[0] == '\n') continue;
        t->line[strcspn(t->line, "\r\n")] = '\0';
        t->nfield = 0;
        char *save = NULL;
        for (char *tok = strtok_r(t->line, "\t", &save); tok && t->nfield < TSV_MAX_FIELDS;
             tok = strtok_r(NULL, "\t", &save))
            t->field[t->nfield++] = tok;
        return t->nfield;
    }
    return 0;
}

static inline void tsv_close(tsv_file *t) {
    if (t->f) fclose(t->f);
    t->f = NULL;
}

static inline float f32_of_hex(const char *s) {
    unsigned long u = strtoul(s, NULL, 16);
    uint32_t b = (uint32_t)u;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static inline uint32_t bits_of_f32(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

#endif
