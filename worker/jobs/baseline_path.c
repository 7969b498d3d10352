/* The baseline file's name and the numerics path it is kept per (jobs.h). */
#include "jobs.h"
#include "numerics_path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void qw_jobs_numerics_path(bool on_cuda, int cc, int gemm, const char *cpu_path, char *buf,
                           size_t cap) {
    if (on_cuda)
        snprintf(buf, cap, "cuda-cc%d-%s", cc,
                 gemm >= 0 && gemm < 4 ? qs_numerics_cuda_gemm[gemm] : "unknown");
    else
        snprintf(buf, cap, "%s", cpu_path && *cpu_path ? cpu_path : "cpu");
}

qs_status qw_jobs_baseline_path(const char *model_digest, const char *dataset_digest, int ctx,
                                long max_chunks, int bos_id, const char *numerics_version,
                                int mkdirs, char *buf, size_t cap, qs_error *err) {
    return qw_jobs_baseline_path_for(model_digest, dataset_digest, ctx, max_chunks, bos_id,
                                     numerics_version, NULL, mkdirs, buf, cap, err);
}

qs_status qw_jobs_baseline_path_for(const char *model_digest, const char *dataset_digest, int ctx,
                                    long max_chunks, int bos_id, const char *numerics_version,
                                    const char *numerics_path, int mkdirs, char *buf, size_t cap,
                                    qs_error *err) {
    /* the CPU's fixed-order path keeps the name baselines had before paths were named */
    int named = numerics_path && *numerics_path &&
                strncmp(numerics_path, QW_JOBS_DEFAULT_PATH_PREFIX,
                        strlen(QW_JOBS_DEFAULT_PATH_PREFIX)) != 0;
    if (named && strlen(numerics_path) > 128)
        return qs_error_set(err, QS_EINVAL, "baseline path: overlong numerics path");
    if (named)
        for (const char *c = numerics_path; *c; c++)
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= 'A' && *c <= 'Z') || *c == '.' || *c == '_' || *c == '-'))
                return qs_error_set(err, QS_EINVAL,
                                    "baseline path: numerics path '%s' has a character outside "
                                    "[0-9A-Za-z._-]",
                                    numerics_path);
    const char *parts[] = {model_digest, dataset_digest, numerics_version};
    for (size_t i = 0; i < 3; i++) {
        if (!parts[i] || !*parts[i] || strlen(parts[i]) > 128)
            return qs_error_set(err, QS_EINVAL, "baseline path: empty or overlong digest/version");
        for (const char *c = parts[i]; *c; c++)
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= 'A' && *c <= 'Z') || *c == '.' || *c == '_'))
                return qs_error_set(err, QS_EINVAL, "baseline path: '%s' is not a digest",
                                    parts[i]);
    }
    char dir[4096];
    const char *env = getenv("QSWEEP_BASELINE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(dir, sizeof dir, "%s", env);
    else if (xdg && *xdg)
        n = snprintf(dir, sizeof dir, "%s/qsweep/baselines", xdg);
    else if (home && *home)
        n = snprintf(dir, sizeof dir, "%s/.cache/qsweep/baselines", home);
    else
        return qs_error_set(
            err, QS_EINVAL,
            "baseline path: neither QSWEEP_BASELINE_DIR, XDG_CACHE_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= sizeof dir)
        return qs_error_set(err, QS_EINVAL, "baseline path: directory name too long");
    if (mkdirs) {
        /* mkdir -p: each prefix ending at a slash, then the whole */
        for (char *p = dir + 1;; p++) {
            if (*p == '/' || *p == 0) {
                char c = *p;
                *p = 0;
                if (mkdir(dir, 0755) != 0 && errno != EEXIST)
                    return qs_error_set(err, QS_EIO, "baseline directory %s: mkdir: %s", dir,
                                        strerror(errno));
                *p = c;
                if (!c) break;
            }
        }
    }
    char bos[24] = "";
    if (bos_id >= 0) snprintf(bos, sizeof bos, "-bos%d", bos_id);
    n = snprintf(buf, cap, "%s/%s-%s-ctx%d-chunks%ld%s-v%s%s%s.qswblp", dir, model_digest,
                 dataset_digest, ctx, max_chunks, bos, numerics_version, named ? "-p" : "",
                 named ? numerics_path : "");
    if (n < 0 || (size_t)n >= cap)
        return qs_error_set(err, QS_EINVAL, "baseline path: buffer too small");
    return QS_OK;
}
