/* The named FP4 training recipes, one table for both sides: the coordinator's training grid
 * (coordinator/grid/grid_training.c) copies a row's ingredients into a job's spec
 * (kinds/train.h), the worker (worker/train/recipe.c) builds its qw_recipe from the same row.
 * What each ingredient does: worker/train/recipe.h. A new recipe is one row here. */
#ifndef QS_KINDS_RECIPES_H
#define QS_KINDS_RECIPES_H

#include <stddef.h>

/* One named recipe's ingredients. */
typedef struct qs_recipe_row {
    const char *name;   /* "nvfp4", "nvfp4-no-rht", ... */
    const char *format; /* quantized linears' format ("nvfp4", "mxfp4", "fp8_e4m3"); "none" */
    int hp_bf16;        /* high-precision linears' inputs: 1 BF16, 0 FP32 (recipe fp32) */
    int w2d, rht;       /* 16x16 2D weight blocks; the RHT on both wgrad inputs */
    int rht_dim;        /* the RHT's tile: 16 or 32 */
    int sr;             /* stochastic rounding of dY into dgrad and wgrad */
    int bf16_first, bf16_last; /* first and last blocks kept in BF16 */
} qs_recipe_row;

/* Number of named recipes and the i-th (0 <= i < qs_recipe_count()), in table order. */
size_t qs_recipe_count(void);
const qs_recipe_row *qs_recipe_at(size_t i);

/* The row named name, or NULL. */
const qs_recipe_row *qs_recipe_find(const char *name);

/* The names, comma-separated in table order ("fp32, bf16, ..."), into buf [n], truncated to
 * fit; for error messages. */
void qs_recipe_names(char *buf, size_t n);

#endif
