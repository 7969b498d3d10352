/* Files the cli_ tests write for themselves: real checkpoints and token files in the formats
 * the loaders read (worker/checkpoint/checkpoint.h, tokens.h), small enough to make in
 * microseconds, so each test controls the number of blocks and the vocabulary it needs. */
#ifndef QSWEEP_TEST_FIXTURES_H
#define QSWEEP_TEST_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

/* Writes a Hugging Face Llama checkpoint into directory dir (created): config.json (dim 8,
 * intermediate 16, 2 heads, 1 KV head, tied embeddings) and model.safetensors (F32, weights
 * uniform in [-0.5, 0.5) from an LCG seeded with seed). Returns 0, or -1 with errno set. */
int fx_write_checkpoint(const char *dir, int n_layers, int vocab_size, uint32_t seed);

/* Writes a token file (tokens.h format) holding ids[0..n-1] with header vocab_size.
 * Returns 0, or -1 with errno set. */
int fx_write_tokens(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size);

/* Writes text to path. Returns 0, or -1 with errno set. */
int fx_write_text(const char *path, const char *text);

/* A fresh directory /tmp/<prefix>-XXXXXX; the caller frees the string. NULL on failure. */
char *fx_tempdir(const char *prefix);

/* Runs program exe with args (NULL-terminated, without argv[0]), stdout and stderr together
 * captured into out (NUL-terminated, truncated to cap). Returns the exit code, or 128 + the
 * signal that ended it, or -1 when it could not be started. */
int fx_run(const char *exe, const char *const *args, char *out, size_t cap);

/* rm -rf dir (nftw). */
void fx_rmtree(const char *dir);

/* The directory of a grid test: a fresh fx_tempdir(prefix) holding ckpt/ (fx_write_checkpoint
 * of n_layers blocks and vocabulary vocab, seed 1) and toks.bin (n_tokens ids, id i = 7 i mod
 * vocab), made the current directory so that a grid's relative paths find them. Returns the
 * directory (fx_grid_dir_release removes it), or NULL when any step fails. */
char *fx_grid_dir(const char *prefix, int n_layers, int vocab, size_t n_tokens);

/* Leaves dir (chdir "/"), removes it and frees the string. Returns 0, or -1 (dir left
 * untouched) when chdir fails. */
int fx_grid_dir_release(char *dir);

#endif
