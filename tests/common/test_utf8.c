/* The one UTF-8 checker (common/utf8.h) against RFC 3629: the examples of its section 7 and
 * the boundary cases of its UTF8-octets grammar (section 4), each written out as bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "utf8.h"

static void expect_valid(const char *bytes, size_t n, uint32_t cp) {
    uint32_t got = 0;
    assert_int_equal(qs_utf8_decode((const unsigned char *)bytes, n, &got), n);
    assert_int_equal(got, cp);
    assert_true(qs_utf8_valid_n(bytes, n, NULL));
}

static void expect_invalid(const char *bytes, size_t n, size_t bad_at) {
    size_t bad = 99;
    assert_false(qs_utf8_valid_n(bytes, n, &bad));
    assert_int_equal(bad, bad_at);
}

/* RFC 3629 section 7: "A<NOT IDENTICAL TO><ALPHA>." = 41 E2 89 A2 CE 91 2E, Korean
 * "hangugeo" = ED 95 9C EA B5 AD EC 96 B4, Japanese "nihongo" = E6 97 A5 E6 9C AC E8 AA 9E,
 * U+233B4 = F0 A3 8E B4. */
static void test_rfc3629_section7_examples_are_valid(void **state) {
    (void)state;
    assert_true(qs_utf8_valid("\x41\xe2\x89\xa2\xce\x91\x2e", NULL));
    assert_true(qs_utf8_valid("\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", NULL));
    assert_true(qs_utf8_valid("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", NULL));
    expect_valid("\xf0\xa3\x8e\xb4", 4, 0x233b4);
    expect_valid("\xe2\x89\xa2", 3, 0x2262);
}

/* The ends of each length class of the grammar. */
static void test_boundaries_of_each_sequence_length(void **state) {
    (void)state;
    expect_valid("\x7f", 1, 0x7f);
    expect_valid("\xc2\x80", 2, 0x80);
    expect_valid("\xdf\xbf", 2, 0x7ff);
    expect_valid("\xe0\xa0\x80", 3, 0x800);
    expect_valid("\xed\x9f\xbf", 3, 0xd7ff);
    expect_valid("\xee\x80\x80", 3, 0xe000);
    expect_valid("\xef\xbf\xbf", 3, 0xffff);
    expect_valid("\xf0\x90\x80\x80", 4, 0x10000);
    expect_valid("\xf4\x8f\xbf\xbf", 4, 0x10ffff);
}

static void test_overlong_forms_are_refused(void **state) {
    (void)state;
    expect_invalid("\xc0\xaf", 2, 0); /* '/' in two bytes */
    expect_invalid("\xc1\xbf", 2, 0);
    expect_invalid("\xe0\x80\xaf", 3, 0);     /* '/' in three */
    expect_invalid("\xe0\x9f\xbf", 3, 0);     /* U+07FF in three */
    expect_invalid("\xf0\x8f\xbf\xbf", 4, 0); /* U+FFFF in four */
}

static void test_surrogates_and_beyond_u10ffff_are_refused(void **state) {
    (void)state;
    expect_invalid("\xed\xa0\x80", 3, 0);     /* U+D800 */
    expect_invalid("\xed\xbf\xbf", 3, 0);     /* U+DFFF */
    expect_invalid("\xf4\x90\x80\x80", 4, 0); /* U+110000 */
    expect_invalid("\xf5\x80\x80\x80", 4, 0);
    expect_invalid("\xff", 1, 0);
}

/* The offset reported is the first byte of the first bad sequence. */
static void test_truncated_and_broken_sequences_name_their_offset(void **state) {
    (void)state;
    expect_invalid("ab\xe2\x89", 4, 2); /* truncated at the end */
    expect_invalid("abc\x80", 4, 3);    /* lone continuation byte */
    expect_invalid("a\xce\x41", 3, 1);  /* lead without its continuation */
    expect_invalid("\xce\x91\xf0\xa3\x8e", 5, 2);
    size_t bad = 0;
    assert_false(qs_utf8_valid("ok\xc3", &bad));
    assert_int_equal(bad, 2);
    assert_int_equal(qs_utf8_decode((const unsigned char *)"\xe2\x89\xa2", 2, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc3629_section7_examples_are_valid),
        cmocka_unit_test(test_boundaries_of_each_sequence_length),
        cmocka_unit_test(test_overlong_forms_are_refused),
        cmocka_unit_test(test_surrogates_and_beyond_u10ffff_are_refused),
        cmocka_unit_test(test_truncated_and_broken_sequences_name_their_offset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
