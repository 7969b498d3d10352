/* qs_edit_distance against distances worked by hand, and qs_nearest's choice and limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "nearest.h"

/* the textbook pairs: kitten/sitting 3 (k->s, e->i, +g), flaw/lawn 2 (-f, +n); a transposed
 * pair is one edit (ca/ac 1; Levenshtein would count 2), and the edges */
static void
test_edit_distance_counts_insertions_deletions_substitutions_transpositions(void **state) {
    (void)state;
    assert_int_equal(qs_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(qs_edit_distance("flaw", "lawn"), 2);
    assert_int_equal(qs_edit_distance("", "abc"), 3);
    assert_int_equal(qs_edit_distance("abc", ""), 3);
    assert_int_equal(qs_edit_distance("same", "same"), 0);
    assert_int_equal(qs_edit_distance("max_chunks", "max_chunk"), 1);
    assert_int_equal(qs_edit_distance("formats", "fromats"), 1);
    assert_int_equal(qs_edit_distance("ca", "ac"), 1);
    assert_int_equal(qs_edit_distance("ca", "abc"),
                     3); /* optimal string alignment, not Damerau's full */
}

static void test_nearest_suggests_the_closest_valid_name(void **state) {
    (void)state;
    const char *keys[] = {"tokens", "text", "ctx", "max_chunks", "bos"};
    assert_string_equal(qs_nearest("max_chunk", keys, 5), "max_chunks");
    assert_string_equal(qs_nearest("tokes", keys, 5), "tokens");
    assert_string_equal(qs_nearest("cxt", keys, 5), "ctx");
    const char *exps[] = {"smollm2-fp4-components", "smollm2-fp4-components-4chunks", "tiny"};
    assert_string_equal(qs_nearest("smollm2-fp4-component", exps, 3), "smollm2-fp4-components");
    assert_string_equal(qs_nearest("tiyn", exps, 3), "tiny");
}

static void test_nearest_is_silent_when_nothing_is_close(void **state) {
    (void)state;
    const char *keys[] = {"tokens", "text", "ctx", "max_chunks"};
    assert_null(qs_nearest("priority", keys, 4));
    assert_null(qs_nearest("q", keys, 4));    /* "ctx" is 3 away from a 1-byte word */
    assert_null(qs_nearest("text", keys, 4)); /* itself is no suggestion */
    assert_null(qs_nearest("anything", keys, 0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_edit_distance_counts_insertions_deletions_substitutions_transpositions),
        cmocka_unit_test(test_nearest_suggests_the_closest_valid_name),
        cmocka_unit_test(test_nearest_is_silent_when_nothing_is_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
