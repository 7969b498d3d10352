/* The named training recipes (recipes.h). */
#include "recipes.h"

#include <stdio.h>
#include <string.h>

static const qs_recipe_row RECIPES[] = {
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
#define N_RECIPES (sizeof RECIPES / sizeof RECIPES[0])

size_t qs_recipe_count(void) {
    return N_RECIPES;
}

const qs_recipe_row *qs_recipe_at(size_t i) {
    return i < N_RECIPES ? &RECIPES[i] : NULL;
}

const qs_recipe_row *qs_recipe_find(const char *name) {
    for (size_t i = 0; name && i < N_RECIPES; i++)
        if (!strcmp(RECIPES[i].name, name)) return &RECIPES[i];
    return NULL;
}

void qs_recipe_names(char *buf, size_t n) {
    if (n == 0) return;
    buf[0] = '\0';
    for (size_t i = 0; i < N_RECIPES; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", i ? ", " : "", RECIPES[i].name);
    }
}
