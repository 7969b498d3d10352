/* GPU discovery and selection (gpu_info.h). */
#include "gpu_info.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_module.h"
#include "qk_gemm_path.h"
#include "qk_gemm_probe.h"

#ifdef QSWEEP_HAVE_CUDA
#include <dlfcn.h>
#endif

bool qw_gpu_have_cuda(void) {
#ifdef QSWEEP_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int qw_gpu_driver_check(int driver_version, int runtime_version, char *why, size_t why_cap) {
    /* CUDA's minor-version compatibility: a driver of CUDA major M runs every M.x runtime */
    if (driver_version / 1000 >= runtime_version / 1000) return 1;
    snprintf(why, why_cap,
             "no GPU usable (CUDA driver too old: it supports CUDA %d.%d, this build's runtime is "
             "CUDA %d.%d and needs a driver of CUDA %d or later)",
             driver_version / 1000, driver_version % 1000 / 10, runtime_version / 1000,
             runtime_version % 1000 / 10, runtime_version / 1000);
    return 0;
}

#ifdef QSWEEP_HAVE_CUDA
typedef int (*cu_version_fn)(int *);
/* The CUDA driver API functions discovery needs (cuda.h: CUresult and CUdevice are int; the
 * attribute numbers are CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR). */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);
typedef int (*cu_attr_fn)(int *, int, int);
typedef int (*cu_errstr_fn)(int, const char **);
enum { CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76 };

/* dlsym into a function pointer of any type (POSIX allows the conversion). */
static void *sym(void *h, const char *name) {
    return dlsym(h, name);
}

/* 1 (why set) when the driver's CUDA version is below the runtime this build links into its
 * module (QW_CUDA_RUNTIME_VERSION, from the toolkit), 0 when it suffices or cannot be read. */
static int driver_too_old(void *h, char *why, size_t why_cap) {
    cu_version_fn version;
    void *p = sym(h, "cuDriverGetVersion");
    memcpy(&version, &p, sizeof p);
    int v = 0;
    if (!version || version(&v) != 0) return 0;
    return !qw_gpu_driver_check(v, QW_CUDA_RUNTIME_VERSION, why, why_cap);
}

/* The driver's text for a CUresult, or its number. */
static const char *cu_text(cu_errstr_fn errstr, int r, char *buf, size_t cap) {
    const char *t = NULL;
    if (errstr && errstr(r, &t) == 0 && t) return t;
    snprintf(buf, cap, "CUresult %d", r);
    return buf;
}
#endif

void qw_gpu_discover(qw_gpu *out, size_t cap, size_t *n, char *why, size_t why_cap) {
    *n = 0;
    if (why_cap) why[0] = 0;
#ifdef QSWEEP_HAVE_CUDA
    /* The driver alone (libcuda.so.1, what every CUDA program loads): no CUDA library is linked
       or loaded here; the backend module comes later, for a job on a GPU (cuda_module.h).
       Driver ordinals are the runtime's (both follow CUDA_VISIBLE_DEVICES). */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, why_cap, "no GPU visible (CUDA: no driver: %s)", dlerror());
        return;
    }
    cu_init_fn init;
    cu_count_fn count_fn;
    cu_get_fn get;
    cu_name_fn name_fn;
    cu_mem_fn mem;
    cu_attr_fn attr;
    cu_errstr_fn errstr;
    void *p;
    p = sym(h, "cuInit"), memcpy(&init, &p, sizeof p);
    p = sym(h, "cuDeviceGetCount"), memcpy(&count_fn, &p, sizeof p);
    p = sym(h, "cuDeviceGet"), memcpy(&get, &p, sizeof p);
    p = sym(h, "cuDeviceGetName"), memcpy(&name_fn, &p, sizeof p);
    p = sym(h, "cuDeviceTotalMem_v2"), memcpy(&mem, &p, sizeof p);
    p = sym(h, "cuDeviceGetAttribute"), memcpy(&attr, &p, sizeof p);
    p = sym(h, "cuGetErrorString"), memcpy(&errstr, &p, sizeof p);
    char num[32];
    int count = 0, r;
    if (!init || !count_fn || !get || !name_fn || !mem || !attr) {
        snprintf(why, why_cap, "no GPU visible (CUDA: libcuda.so.1 lacks the device functions)");
    } else if ((r = init(0)) != 0 || (r = count_fn(&count)) != 0) {
        /* no device, or a driver too old: "no CUDA-capable device is detected" */
        snprintf(why, why_cap, "no GPU visible (CUDA: %s)", cu_text(errstr, r, num, sizeof num));
    } else if (driver_too_old(h, why, why_cap)) {
        /* listed as none: the module's runtime would refuse every device */
    } else {
        for (int d = 0; d < count && *n < cap; d++) {
            int dev = 0, major = 0, minor = 0;
            size_t bytes = 0;
            qw_gpu *g = &out[*n];
            memset(g, 0, sizeof *g);
            if ((r = get(&dev, d)) != 0 || (r = name_fn(g->name, (int)sizeof g->name, dev)) != 0 ||
                (r = mem(&bytes, dev)) != 0 || (r = attr(&major, CU_ATTR_CC_MAJOR, dev)) != 0 ||
                (r = attr(&minor, CU_ATTR_CC_MINOR, dev)) != 0) {
                snprintf(why, why_cap, "CUDA device %d: %s", d,
                         cu_text(errstr, r, num, sizeof num));
                continue;
            }
            g->name[sizeof g->name - 1] = 0;
            g->memory_bytes = (uint64_t)bytes;
            g->cc_major = (uint32_t)major;
            g->cc_minor = (uint32_t)minor;
            g->native_fp4 = qk_gemm_cc_native_fp4(10 * major + minor);
            g->device = d;
            (*n)++;
        }
        if (*n == 0 && why_cap && !why[0])
            snprintf(why, why_cap, "no GPU visible (CUDA: no device)");
    }
    /* h stays open: a driver initialised by cuInit is not to be unloaded, and the CUDA module
       (its runtime) uses the same library later */
    (void)h;
#else
    (void)out;
    (void)cap;
    snprintf(why, why_cap, "no CUDA in this build (built without nvcc)");
#endif
}

/* Parses a decimal integer in [lo, hi] from s[0..len). */
static bool parse_long(const char *s, size_t len, long lo, long hi, long *out) {
    char buf[32];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (*end || errno || v < lo || v > hi || buf[0] == '+' || buf[0] == '-' || buf[0] == ' ')
        return false;
    *out = v;
    return true;
}

qs_status qw_gpu_parse_fake(const char *text, qw_gpu *out, size_t cap, size_t *n, qs_error *err) {
    *n = 0;
    if (!text) return qs_error_set(err, QS_EINVAL, "fake GPUs: NULL text");
    for (const char *p = text; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *c1 = memchr(p, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - p)) : NULL;
        const char *dot = c2 ? memchr(c2 + 1, '.', len - (size_t)(c2 + 1 - p)) : NULL;
        long gib, major, minor;
        if (!c1 || !c2 || !dot || c1 == p || (size_t)(c1 - p) > 63 ||
            !parse_long(c1 + 1, (size_t)(c2 - c1 - 1), 1, 1048576, &gib) ||
            !parse_long(c2 + 1, (size_t)(dot - c2 - 1), 0, 99, &major) ||
            !parse_long(dot + 1, len - (size_t)(dot + 1 - p), 0, 99, &minor))
            return qs_error_set(err, QS_EINVAL,
                                "fake GPUs: bad item '%.*s' (expected NAME:GIB:MAJOR.MINOR, e.g. "
                                "H200:141:9.0)",
                                (int)len, p);
        if (*n == cap)
            return qs_error_set(err, QS_EINVAL, "fake GPUs: more than %zu in '%s'", cap, text);
        qw_gpu *g = &out[*n];
        memset(g, 0, sizeof *g);
        snprintf(g->name, sizeof g->name, "%.*s", (int)(c1 - p), p);
        g->memory_bytes = (uint64_t)gib << 30;
        g->cc_major = (uint32_t)major;
        g->cc_minor = (uint32_t)minor;
        g->native_fp4 = qk_gemm_cc_native_fp4((int)(10 * major + minor));
        g->device = (int)*n;
        (*n)++;
        p += len;
        if (*p == ',' && !*++p)
            return qs_error_set(err, QS_EINVAL, "fake GPUs: bad item '' after the last comma");
    }
    return QS_OK;
}

/* "0 NVIDIA H200, 1 NVIDIA H200" into buf. */
static void list_names(const qw_gpu *all, size_t n, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && at < cap; i++) {
        int k = snprintf(buf + at, cap - at, "%s%zu %s", i ? ", " : "", i, all[i].name);
        if (k < 0) break;
        at += (size_t)k;
    }
}

qs_status qw_gpu_select(const qw_gpu *all, size_t n_all, const char *spec, const char *why,
                        qw_gpu *out, size_t cap, size_t *n, qs_error *err) {
    *n = 0;
    if (!spec || !strcmp(spec, "all")) {
        for (size_t i = 0; i < n_all && i < cap; i++)
            out[(*n)++] = all[i];
        return QS_OK;
    }
    if (!strcmp(spec, "none")) return QS_OK;
    /* the whole list's syntax first, so a typo is named as one */
    for (const char *p = spec;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        long idx;
        if (!parse_long(p, len, 0, 1000000, &idx))
            return qs_error_set(err, QS_EINVAL,
                                "--gpus: '%s' is not a list of GPU indexes (expected e.g. 0,1, "
                                "all or none)",
                                spec);
        if (!end) break;
        p = end + 1;
    }
    bool taken[QW_GPUS_MAX] = {0};
    for (const char *p = spec;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        long idx = 0;
        parse_long(p, len, 0, 1000000, &idx);
        if ((size_t)idx >= n_all) {
            char names[512];
            list_names(all, n_all, names, sizeof names);
            if (n_all == 0 && why && !strncmp(why, "no GPU visible", 14))
                return qs_error_set(err, QS_EINVAL, "--gpus: GPU %ld is not present: %s", idx, why);
            if (n_all == 0)
                return qs_error_set(err, QS_EINVAL,
                                    "--gpus: GPU %ld is not present: this machine has none (%s)",
                                    idx, why && *why ? why : "no GPU visible");
            return qs_error_set(err, QS_EINVAL,
                                "--gpus: GPU %ld is not present: this machine has %zu (%s)", idx,
                                n_all, names);
        }
        if (idx < QW_GPUS_MAX && taken[idx])
            return qs_error_set(err, QS_EINVAL, "--gpus: GPU %ld is named twice in '%s'", idx,
                                spec);
        if (*n == cap)
            return qs_error_set(err, QS_EINVAL, "--gpus: more than %zu GPUs in '%s'", cap, spec);
        if (idx < QW_GPUS_MAX) taken[idx] = true;
        out[(*n)++] = all[idx];
        if (!end) break;
        p = end + 1;
    }
    return QS_OK;
}

void qw_gpu_describe(const qw_gpu *g, char *buf, size_t cap) {
    snprintf(buf, cap, "%s %.1f GiB cc %u.%u FP4 %s", g->name,
             (double)g->memory_bytes / (double)(1ull << 30), g->cc_major, g->cc_minor,
             g->native_fp4 ? "native" : "emulated");
}

bool qw_gpu_native_fp4_of(const qk_gemm_probe *p) {
    qk_gemm_decision d = qk_gemm_probe_decide(p, QK_GEMM_NVFP4, QK_GEMM_NVFP4, 0, QK_GEMM_REQ_AUTO);
    return d.path == QK_GEMM_PATH_NATIVE_FP4;
}

void qw_gpu_probe_native_fp4(qw_gpu *g, size_t n) {
    const qw_cuda_module *mod = qw_cuda_module_loaded();
    for (size_t i = 0; i < n; i++) {
        qk_gemm_probe p;
        qs_error err = {0};
        g[i].native_fp4 = mod && mod->gemm_probe &&
                          mod->gemm_probe(g[i].device, &p, &err) == QS_OK &&
                          qw_gpu_native_fp4_of(&p);
    }
}
