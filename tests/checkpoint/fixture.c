#include "fixture.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

const char *fx_path(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", QW_FIXTURES, name);
    return buf;
}

char *fx_scratch(void) {
    const char *t = getenv("TMPDIR");
    char *p = fx_join(t && *t ? t : "/tmp", "qw_checkpoint_test.XXXXXX");
    assert_non_null(mkdtemp(p));
    return p;
}

char *fx_join(const char *dir, const char *name) {
    char *p = NULL;
    assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

uint8_t *fx_read(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

void fx_write(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("%s: cannot create", path);
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

char *fx_copy_dir(const char *src_name) {
    char *dst = fx_scratch();
    char src[4096];
    snprintf(src, sizeof src, "%s", fx_path(src_name));
    DIR *d = opendir(src);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *from = fx_join(src, e->d_name), *to = fx_join(dst, e->d_name);
        size_t n;
        uint8_t *b = fx_read(from, &n);
        fx_write(to, b, n);
        free(b);
        free(from);
        free(to);
    }
    closedir(d);
    return dst;
}

size_t fx_find(const uint8_t *hay, size_t n, const void *needle, size_t len) {
    for (size_t i = 0; i + len <= n; i++)
        if (memcmp(hay + i, needle, len) == 0) return i;
    return SIZE_MAX;
}

void fx_rmdir(char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *p = fx_join(dir, e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

void fx_expect_open(fx_expect *x, const char *fixture_name) {
    qs_error err = {0};
    memset(x, 0, sizeof *x);
    if (qw_map_file(fx_path(fixture_name), &x->file, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_safetensors_parse(x->file.path, x->file.data, x->file.size, 0, &x->table, &err) != QS_OK)
        fail_msg("%s", err.msg);
}

void fx_expect_close(fx_expect *x) {
    qw_table_free(&x->table);
    qw_unmap_file(&x->file);
}

const float *fx_expect_tensor(fx_expect *x, const char *name, int64_t *numel) {
    qw_tensor_entry *e = qw_table_find(&x->table, name);
    if (!e) fail_msg("expected tensor %s absent from %s", name, x->file.path);
    assert_int_equal(e->dtype, QW_DT_F32);
    if (!e->owned) {
        e->owned = malloc((size_t)e->numel * sizeof(float) + 1);
        assert_non_null(e->owned);
        qw_dtype_to_f32(e->dtype, e->src, e->numel, e->owned);
    }
    *numel = e->numel;
    return e->owned;
}

void fx_assert_msg(const qs_error *err, ...) {
    va_list ap;
    va_start(ap, err);
    const char *s;
    while ((s = va_arg(ap, const char *)))
        if (!strstr(err->msg, s))
            fail_msg("error message \"%s\" does not mention \"%s\"", err->msg, s);
    va_end(ap);
}
