/* qw_tokenizer_open: a path's file (tokenizer.json, tokenizer.model, GGUF) or directory handed to
 * the loader of its kind (hf_json.c, spm_model.c, gguf_vocab.c). */
#include "tokenizer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Maps a whole file read-only (a GGUF file is read in place: only its metadata is touched).
 * Errors: QS_ENOTFOUND, QS_EIO. */
static qs_status qw_read_file(const char *path, char **data, size_t *size, qs_error *err) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s: cannot open: %s",
                            path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return qs_error_set(err, QS_EIO, "%s: not a regular file", path);
    }
    static char empty[1];
    void *p = empty;
    if (sb.st_size > 0) {
        p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return qs_error_set(err, QS_EIO, "%s: mmap: %s", path, strerror(e));
        }
    }
    close(fd);
    *data = p;
    *size = (size_t)sb.st_size;
    return QS_OK;
}

static void qw_unmap(char *data, size_t size) {
    if (size) munmap(data, size);
}

/* Whether a file is a SentencePiece model: its name ends in ".model", or it starts with byte
 * 0x0a (ModelProto field 1, pieces, length-delimited) where JSON would start with '{' or '['
 * after white space (a JSON file may start with a newline, 0x0a too). */
static int qw_is_spm_model(const char *path, const char *data, size_t size) {
    size_t n = strlen(path);
    if (n >= 6 && strcmp(path + n - 6, ".model") == 0) return 1;
    if (size < 2 || data[0] != 0x0a) return 0;
    size_t i = 0;
    while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    return i < size && data[i] != '{' && data[i] != '[';
}

/* tokenizer_config.json beside a tokenizer.json: add_bos_token / add_eos_token when given. */
static void qw_read_config_flags(const char *dir, int *add_bos, int *add_eos);

qs_status qw_tokenizer_open(const char *path, qw_tokenizer **out, qs_error *err) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s: %s", path,
                            strerror(errno));
    char *data;
    size_t size;
    qs_status st;
    if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + 32;
        char *file = malloc(n);
        if (!file) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
        snprintf(file, n, "%s/tokenizer.json", path);
        if ((st = qw_read_file(file, &data, &size, err)) == QS_ENOTFOUND) {
            /* a Llama 2 style checkpoint ships only SentencePiece's tokenizer.model */
            snprintf(file, n, "%s/tokenizer.model", path);
            if ((st = qw_read_file(file, &data, &size, err)) == QS_OK) {
                st = qw_tokenizer_from_spm_model(file, (const uint8_t *)data, size, out, err);
                free(file);
                qw_unmap(data, size);
                return st;
            }
            if (st == QS_ENOTFOUND)
                qs_error_set(err, QS_ENOTFOUND,
                             "%s: no tokenizer.json or tokenizer.model in the directory", path);
        }
        if (st) {
            free(file);
            return st;
        }
        int add_bos = -1, add_eos = -1;
        qw_read_config_flags(path, &add_bos, &add_eos);
        st = qw_tokenizer_from_json(file, data, size, add_bos, add_eos, out, err);
        free(file);
        qw_unmap(data, size);
        return st;
    }
    if ((st = qw_read_file(path, &data, &size, err))) return st;
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0)
        st = qw_tokenizer_from_gguf(path, (const uint8_t *)data, size, out, err);
    else if (qw_is_spm_model(path, data, size))
        st = qw_tokenizer_from_spm_model(path, (const uint8_t *)data, size, out, err);
    else
        st = qw_tokenizer_from_json(path, data, size, -1, -1, out, err);
    qw_unmap(data, size);
    return st;
}

static void qw_read_config_flags(const char *dir, int *add_bos, int *add_eos) {
    size_t n = strlen(dir) + 32;
    char *file = malloc(n);
    if (!file) return;
    snprintf(file, n, "%s/tokenizer_config.json", dir);
    json_t *j = json_load_file(file, 0, NULL);
    free(file);
    if (!j) return;
    json_t *b = json_object_get(j, "add_bos_token"), *e = json_object_get(j, "add_eos_token");
    if (json_is_boolean(b)) *add_bos = json_is_true(b);
    if (json_is_boolean(e)) *add_eos = json_is_true(e);
    json_decref(j);
}
