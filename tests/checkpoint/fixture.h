/* Helpers shared by the checkpoint_* tests: fixture paths, scratch directories, file
 * copies and byte patches, and reading the FP32 "expect" safetensors files that
 * make_fixtures.py writes with the safetensors/gguf Python packages. */
#ifndef QW_TEST_FIXTURE_H
#define QW_TEST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint_internal.h"

/* "<fixtures dir>/<name>" in a static buffer (valid until the next call). */
const char *fx_path(const char *name);
/* Creates a fresh scratch directory under $TMPDIR (or /tmp); returns its path (heap). */
char *fx_scratch(void);
/* "<dir>/<name>" (heap). */
char *fx_join(const char *dir, const char *name);
/* Reads a whole file into a heap buffer; *size receives its length. Fails the test on error. */
uint8_t *fx_read(const char *path, size_t *size);
/* Writes size bytes to path (creating or truncating). Fails the test on error. */
void fx_write(const char *path, const void *data, size_t size);
/* Copies every regular file of fixture directory src_name into a new scratch directory. */
char *fx_copy_dir(const char *src_name);
/* Offset of the first occurrence of needle (len bytes) in hay, or SIZE_MAX. */
size_t fx_find(const uint8_t *hay, size_t n, const void *needle, size_t len);
/* Removes a scratch directory and its files. */
void fx_rmdir(char *dir);

/* An FP32 safetensors file loaded for comparison. */
typedef struct fx_expect {
    qw_mapped_file file;
    qw_tensor_table table;
} fx_expect;
void fx_expect_open(fx_expect *x, const char *fixture_name);
void fx_expect_close(fx_expect *x);
/* FP32 data of an expected tensor; fails the test when absent or not F32. */
const float *fx_expect_tensor(fx_expect *x, const char *name, int64_t *numel);

/* Asserts the error message contains every given substring (NULL-terminated list). */
void fx_assert_msg(const qs_error *err, ...);

#endif
