/* Which numerics paths a request names (numerics_path.h). */
#include "numerics_path.h"

#include <string.h>

bool qs_numerics_path_matches(const char *want, const char *path) {
    if (!strcmp(want, "any")) return true;
    if (!strcmp(want, "cpu")) return !strcmp(path, "cpu") || !strncmp(path, "cpu-", 4);
    if (!strcmp(want, "cuda")) return !strncmp(path, "cuda-", 5);
    return !strcmp(want, path);
}

const char *const qs_numerics_cuda_gemm[4] = {"fp32", "bf16", "auto", "emulated"};

/* s[0..n) is non-empty and holds only lower-case letters, digits, '.' and '_'. */
static bool plain_part(const char *s, size_t n) {
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
              s[i] == '_'))
            return false;
    return true;
}

bool qs_numerics_request_valid(const char *want) {
    if (!want) return false;
    if (!strcmp(want, "any") || !strcmp(want, "cpu") || !strcmp(want, "cuda") ||
        !strcmp(want, QS_NUMERICS_CPU_FIXED))
        return true;
    if (!strncmp(want, "cpu-openblas-", 13)) { /* <version>-<core>: the core may hold '-' */
        const char *v = want + 13, *dash = strchr(v, '-');
        if (!dash || !plain_part(v, (size_t)(dash - v))) return false;
        for (const char *c = dash + 1;; c = dash + 1) {
            dash = strchr(c, '-');
            size_t n = dash ? (size_t)(dash - c) : strlen(c);
            if (!plain_part(c, n)) return false;
            if (!dash) return true;
        }
    }
    if (strncmp(want, "cuda-cc", 7)) return false;
    const char *d = want + 7;
    size_t digits = strspn(d, "0123456789");
    if (digits == 0 || digits > 4 || d[0] == '0' || d[digits] != '-') return false; /* "cc%d" */
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(d + digits + 1, qs_numerics_cuda_gemm[i])) return true;
    return false;
}

bool qs_numerics_path_valid(const char *path) {
    return qs_numerics_request_valid(path) && strcmp(path, "any") && strcmp(path, "cpu") &&
           strcmp(path, "cuda");
}
