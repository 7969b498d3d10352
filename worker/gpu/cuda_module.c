/* Loading the CUDA backend module (cuda_module.h). */
#include "cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const qw_cuda_module *_Atomic loaded;
static char load_why[512];

#ifdef QSWEEP_HAVE_CUDA
/* Tries one path; returns the module or NULL with the reason appended to load_why. */
static const qw_cuda_module *try_path(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    size_t at = strlen(load_why);
    if (!h) {
        snprintf(load_why + at, sizeof load_why - at, "%s%s", at ? "; " : "", dlerror());
        return NULL;
    }
    const qw_cuda_module *(*entry)(void) = NULL;
    void *sym = dlsym(h, QW_CUDA_MODULE_SYMBOL);
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, POSIX dlsym */
    const qw_cuda_module *m = entry ? entry() : NULL;
    if (!m || m->abi != QW_CUDA_MODULE_ABI) {
        snprintf(load_why + at, sizeof load_why - at, "%s%s: %s", at ? "; " : "", path,
                 !entry ? "no " QW_CUDA_MODULE_SYMBOL
                 : !m   ? "no table"
                        : "another ABI version");
        dlclose(h);
        return NULL;
    }
    return m; /* never closed: the process keeps the backend */
}
#endif

static void load(void) {
#ifdef QSWEEP_HAVE_CUDA
    const char *env = getenv("QSWEEP_CUDA_MODULE");
    if (env && *env) {
        loaded = try_path(env);
        return;
    }
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(path, sizeof path, "%s/%s", exe, QW_CUDA_MODULE_FILE);
        if (access(path, F_OK) == 0 && (loaded = try_path(path))) return;
        snprintf(path, sizeof path, "%s/../lib/qsweep/%s", exe, QW_CUDA_MODULE_FILE);
        if (access(path, F_OK) == 0 && (loaded = try_path(path))) return;
    }
#ifdef QW_CUDA_MODULE_BUILD_PATH
    if ((loaded = try_path(QW_CUDA_MODULE_BUILD_PATH))) return;
#endif
    if (!load_why[0]) snprintf(load_why, sizeof load_why, "%s not found", QW_CUDA_MODULE_FILE);
#else
    snprintf(load_why, sizeof load_why, "this build has no CUDA backend (built without nvcc)");
#endif
}

const qw_cuda_module *qw_cuda_module_get(char *why, size_t why_cap) {
    pthread_once(&once, load);
    if (why_cap) snprintf(why, why_cap, "%s", loaded ? "" : load_why);
    return loaded;
}

const qw_cuda_module *qw_cuda_module_loaded(void) {
    return loaded;
}
