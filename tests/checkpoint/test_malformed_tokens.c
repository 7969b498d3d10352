/* Token files that must be refused (format: worker/checkpoint/tokens.h), one test per rule.
 * Each builds the file here, field by field, and checks the status and that the message
 * names the file and the field or offset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixture.h"

/* A valid file of n tokens 0..n-1 with vocab 16, into buf (>= 32 + 4n bytes); returns its size. */
static size_t make(uint8_t *buf, uint64_t n) {
    memcpy(buf, "QSWTOKS", 8);
    uint32_t h[4] = {1, 16, 1, 0};
    memcpy(buf + 8, h, sizeof h);
    memcpy(buf + 24, &n, 8);
    for (uint32_t i = 0; i < n; i++)
        memcpy(buf + 32 + 4 * i, &i, 4);
    return 32 + 4 * (size_t)n;
}

static void put32(uint8_t *b, size_t at, uint32_t v) {
    memcpy(b + at, &v, 4);
}

static void expect_fails(const uint8_t *b, size_t n, const char *m1, const char *m2) {
    char *dir = fx_scratch(), *p = fx_join(dir, "bad.tok");
    fx_write(p, b, n);
    qw_tokens t = {0};
    t.n = 99;
    qs_error err = {0};
    qs_status st = qw_tokens_load(p, &t, &err);
    if (st != QS_EFORMAT) fail_msg("expected EFORMAT, got %s: %s", qs_status_name(st), err.msg);
    assert_null(t.ids);
    assert_int_equal(t.n, 0);
    fx_assert_msg(&err, "bad.tok", m1, m2, NULL);
    qw_tokens_free(&t);
    free(p);
    fx_rmdir(dir);
}

static void shorter_than_the_header(void **state) {
    (void)state;
    uint8_t b[64];
    make(b, 4);
    expect_fails(b, 31, "truncated", NULL);
}

static void bad_magic(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    b[7] = '!';
    expect_fails(b, n, "offset 0", "magic");
}

/* Versions 1 and 2 (qsweep tokenize, tokens.h) are read; 3 is not. */
static void version_other_than_1_or_2(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    put32(b, 8, 3);
    expect_fails(b, n, "offset 8", "\"version\" = 3");
}

static void vocab_size_zero(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 0);
    put32(b, 12, 0);
    expect_fails(b, n, "offset 12", "\"vocab_size\"");
}

static void dtype_other_than_uint32(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    put32(b, 16, 2);
    expect_fails(b, n, "offset 16", "\"dtype\" = 2");
}

static void reserved_not_zero(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    put32(b, 20, 1);
    expect_fails(b, n, "offset 20", "\"reserved\"");
}

static void trailer_after_the_tokens(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    memcpy(b + n, "{}", 2);
    expect_fails(b, n + 2, "offset 24", "\"count\" = 4");
}

static void tokens_cut_short(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    expect_fails(b, n - 1, "offset 24", "\"count\" = 4");
}

static void count_beyond_any_file(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    uint64_t huge = UINT64_MAX / 2;
    memcpy(b + 24, &huge, 8);
    expect_fails(b, n, "offset 24", "\"count\"");
}

static void token_id_not_below_vocab_size(void **state) {
    (void)state;
    uint8_t b[64];
    size_t n = make(b, 4);
    put32(b, 32 + 4 * 2, 16);
    expect_fails(b, n, "offset 40", "token 2 = 16");
}

static void missing_file(void **state) {
    (void)state;
    qw_tokens t;
    qs_error err = {0};
    assert_int_equal(qw_tokens_load("/nonexistent/qsweep.tok", &t, &err), QS_ENOTFOUND);
    fx_assert_msg(&err, "/nonexistent/qsweep.tok", NULL);
    assert_null(t.ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shorter_than_the_header),
        cmocka_unit_test(bad_magic),
        cmocka_unit_test(version_other_than_1_or_2),
        cmocka_unit_test(vocab_size_zero),
        cmocka_unit_test(dtype_other_than_uint32),
        cmocka_unit_test(reserved_not_zero),
        cmocka_unit_test(trailer_after_the_tokens),
        cmocka_unit_test(tokens_cut_short),
        cmocka_unit_test(count_beyond_any_file),
        cmocka_unit_test(token_id_not_below_vocab_size),
        cmocka_unit_test(missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
