/* Edit distance and the nearest valid name (nearest.h). */
#include "nearest.h"

#include <stdlib.h>
#include <string.h>

/* The optimal string alignment distance: Wagner-Fischer's table (Wagner and Fischer, "The
 * String-to-String Correction Problem", JACM 21(1), 1974) with Damerau's transposition of two
 * neighbours as one edit (Damerau, CACM 7(3), 1964), the commonest typo. d[i][j] is the
 * distance between a's first i bytes and b's first j; three rows are kept. */
size_t qs_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t *rows = malloc(3 * (lb + 1) * sizeof *rows);
    if (!rows) return (size_t)-1;
    size_t *two = rows, *prev = rows + lb + 1, *cur = rows + 2 * (lb + 1);
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                two[j - 2] + 1 < best)
                best = two[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = two;
        two = prev;
        prev = cur;
        cur = t;
    }
    size_t r = prev[lb];
    free(rows);
    return r;
}

const char *qs_nearest(const char *word, const char *const *candidates, size_t n) {
    size_t len = strlen(word), limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = qs_edit_distance(word, candidates[i]);
        if (d > 0 && d < best_d) {
            best = candidates[i];
            best_d = d;
        }
    }
    return best;
}
