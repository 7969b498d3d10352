/* Which numerics paths a request names (numerics_path.h). */
#include "numerics_path.h"

#include <string.h>

bool qs_numerics_path_matches(const char *want, const char *path) {
    if (!strcmp(want, "any")) return true;
    if (!strcmp(want, "cpu")) return !strcmp(path, "cpu") || !strncmp(path, "cpu-", 4);
    if (!strcmp(want, "cuda")) return !strncmp(path, "cuda-", 5);
    return !strcmp(want, path);
}
