/* The named training recipes (kinds/recipes.h): names, order and every ingredient, written out
 * here from worker/train/recipe.h's list, so that a change to the table is a change to this
 * test too (a recipe's ingredients are part of its jobs' keys). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "recipes.h"

static const qs_recipe_row EXPECTED[] = {
    /* name, format, hp_bf16, w2d, rht, rht_dim, sr, bf16_first, bf16_last */
    {"fp32", "none", 0, 0, 0, 16, 0, 0, 0},
    {"bf16", "none", 1, 0, 0, 16, 0, 0, 0},
    {"fp8", "fp8_e4m3", 1, 0, 0, 16, 0, 0, 0},
    {"nvfp4", "nvfp4", 1, 1, 1, 16, 1, 0, 1},
    {"nvfp4-no-rht", "nvfp4", 1, 1, 0, 16, 1, 0, 1},
    {"nvfp4-no-sr", "nvfp4", 1, 1, 1, 16, 0, 0, 1},
    {"nvfp4-no-2d", "nvfp4", 1, 0, 1, 16, 1, 0, 1},
    {"nvfp4-all-blocks", "nvfp4", 1, 1, 1, 16, 1, 0, 0},
    {"mxfp4", "mxfp4", 1, 0, 1, 32, 1, 0, 1},
};
#define N_EXPECTED (sizeof EXPECTED / sizeof EXPECTED[0])

static void every_named_recipe_has_its_ingredients(void **state) {
    (void)state;
    assert_int_equal(qs_recipe_count(), N_EXPECTED);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        const qs_recipe_row *e = &EXPECTED[i], *r = qs_recipe_at(i);
        assert_non_null(r);
        assert_string_equal(r->name, e->name);
        assert_string_equal(r->format, e->format);
        assert_int_equal(r->hp_bf16, e->hp_bf16);
        assert_int_equal(r->w2d, e->w2d);
        assert_int_equal(r->rht, e->rht);
        assert_int_equal(r->rht_dim, e->rht_dim);
        assert_int_equal(r->sr, e->sr);
        assert_int_equal(r->bf16_first, e->bf16_first);
        assert_int_equal(r->bf16_last, e->bf16_last);
        assert_ptr_equal(qs_recipe_find(e->name), r);
    }
    assert_null(qs_recipe_at(N_EXPECTED));
}

static void an_unknown_name_finds_nothing(void **state) {
    (void)state;
    assert_null(qs_recipe_find("nvfp5"));
    assert_null(qs_recipe_find("NVFP4"));
    assert_null(qs_recipe_find(""));
    assert_null(qs_recipe_find(NULL));
}

static void the_name_list_is_the_table_in_order(void **state) {
    (void)state;
    char buf[256];
    qs_recipe_names(buf, sizeof buf);
    assert_string_equal(buf, "fp32, bf16, fp8, nvfp4, nvfp4-no-rht, nvfp4-no-sr, nvfp4-no-2d, "
                             "nvfp4-all-blocks, mxfp4");
    char small[12];
    qs_recipe_names(small, sizeof small);
    assert_string_equal(small, "fp32, bf16,");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_named_recipe_has_its_ingredients),
        cmocka_unit_test(an_unknown_name_finds_nothing),
        cmocka_unit_test(the_name_list_is_the_table_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
