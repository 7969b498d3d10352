/* Test helpers of the engine tests: the golden-logits files written by tools/make_goldens.py,
 * token files in the tokens.h format, and the relative-error norm the goldens are held to. */
#ifndef QW_TEST_GOLDEN_H
#define QW_TEST_GOLDEN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Fails the current cmocka test unless |a - b| <= tol (cmocka 1.1 has no double assertion). */
#define assert_close(a, b, tol)                                                                    \
    do {                                                                                           \
        double a_ = (a), b_ = (b), t_ = (tol);                                                     \
        if (!(fabs(a_ - b_) <= t_))                                                                \
            fail_msg("%s = %.17g, expected %.17g (tolerance %g)", #a, a_, b_, t_);                 \
    } while (0)

/* One golden sequence: tokens [n]; logits rows row0..n-1 of the [n x vocab] reference logits. */
typedef struct golden_seq {
    uint32_t n, row0;
    uint32_t *tokens;
    float *logits; /* [(n - row0) x vocab] */
} golden_seq;

typedef struct golden {
    uint32_t vocab, n_seqs;
    golden_seq *seqs;
} golden;

/* Reads `path` (format in tools/make_goldens.py). Returns 0, or -1 with a message on stderr
 * naming the file and offset. */
int golden_load(const char *path, golden *g);
void golden_free(golden *g);

/* max |a - b| / max |b| over n values: the error norm of the golden comparisons (per sequence). */
double rel_err(const float *a, const float *b, size_t n);

/* Writes a token file (worker/checkpoint/tokens.h format) of ids [n] with vocab_size. 0 or -1. */
int write_token_file(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size);

/* Directory of the committed test data (tests/engine/data). */
const char *engine_data_dir(void);

/* Path of the SmolLM2 GGUF in the user cache (tools/fetch_smollm2.sh), into buf; 1 if the file
 * exists, 0 if not. */
int smollm2_gguf_path(char *buf, size_t cap);

/* A fresh temporary directory (mkdtemp under $TMPDIR or /tmp) into buf; 0 or -1. */
int make_temp_dir(char *buf, size_t cap);

/* Removes dir and everything under it (nftw, symlinks not followed); 0 or -1. */
int remove_temp_dir(const char *dir);

#endif
