/* "Did you mean": the nearest of a set of valid names to a mistyped one, by edit distance. */
#ifndef QS_NEAREST_H
#define QS_NEAREST_H

#include <stddef.h>

/* Edit distance between a and b: insertions, deletions and substitutions of one byte and
 * transpositions of two neighbouring bytes each cost 1 (optimal string alignment);
 * case-sensitive. */
size_t qs_edit_distance(const char *a, const char *b);

/* The candidate nearest to word, or NULL when none is near enough to be a typo of it: a
 * distance of at most 1 for words of up to 4 bytes, 2 up to 8, 3 beyond; a tie goes to the
 * first candidate. word itself (distance 0) is never suggested. */
const char *qs_nearest(const char *word, const char *const *candidates, size_t n);

#endif
