/* gpu_cuda_module_*: loading the CUDA backend module (worker/gpu/cuda_module.h), one case per
 * process (the module is loaded once per process):
 *   missing  $QSWEEP_CUDA_MODULE names no file: NULL, and why names the path
 *   abi      a module of another ABI version: NULL, "another ABI version"
 *   ok       a module of this ABI: its table, the same on the next call, and
 *            qw_cuda_module_loaded gives it too
 *            (its CUDA backend and NCCL ranks tables included)
 *   none     nothing asked: qw_cuda_module_loaded never loads it
 *   hooks    before the module is loaded the engine's qw_backend_open refuses "cuda" and comm.h
 *            has no NCCL ranks; once the worker's backend choice loads it
 *            (jobs_backend.h qw_jobs_backend_set) both reach the module's tables: open, GEMM
 *            path and close of a backend, NCCL ranks made, reduced and destroyed
 *   probe    the GEMM probe through the module: before it is loaded no GPU is advertised
 *            native FP4 and a result gets no gemm_probe rows; once loaded, a result's rows are
 *            the model's probe ("gemm_probe.<format>.<outcome>", jobs_backend.h) and each GPU's
 *            native_fp4 is its device's probe, not the capability table (gpu_info.h)
 *   fallback the module is missing: the worker's auto choice becomes the CPU (training and
 *            evaluation pick the CPU, the choice says why), qw_backend_open still refuses
 *            "cuda", and the worker's cuda choice is refused naming the module
 * A build without CUDA answers "this build has no CUDA backend" in every case. The module
 * files are built beside this test (fake_cuda_module.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "cuda_module.h"
#include "gpu_info.h"
#include "jobs_backend.h"
#include "qk_gemm_probe.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: %s failed (why: %s)\n", __FILE__, __LINE__, #c, why);          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* The hooks and fallback cases (see the top). */
static int hooks(const char *mode, char *why) {
    qs_error err = {0};
    qw_backend b;
    qw_backend_choice cuda = {.kind = QW_BACKEND_CUDA, .threads = 1, .max_in = 1, .device = 0};
    qw_group g;
    CHECK(qw_backend_open(&b, &cuda, &err) == QS_EUNSUPPORTED && b.ops == NULL);
    printf("before loading: %s\n", err.msg);
#ifdef QSWEEP_HAVE_CUDA
    CHECK(strstr(err.msg, "module is not loaded") != NULL);
#endif
    CHECK(qw_group_nccl(&g, 2, NULL, &err) == QS_EUNSUPPORTED && g.kind == QW_GROUP_CPU);
    CHECK(strstr(err.msg, "no NCCL ranks") != NULL);
    qs_status set_st = qw_jobs_backend_set(
        &(qw_jobs_backend){.kind = !strcmp(mode, "fallback") ? QW_BACKEND_AUTO : QW_BACKEND_CUDA,
                           .device = 0,
                           .gemm = 2},
        &err);
    CHECK(set_st == QS_OK);
    qw_jobs_backend got = qw_jobs_backend_get();
    bool use_cuda = qw_jobs_backend_pick(&got, qw_backend_cuda_built(), false).use_cuda;
#ifndef QSWEEP_HAVE_CUDA
    CHECK(!use_cuda && qw_backend_open(&b, &cuda, &err) == QS_EUNSUPPORTED);
    printf("gpu_cuda_module %s: %s\n", mode, err.msg);
    return 0;
#endif
    if (!strcmp(mode, "fallback")) {
        /* auto: what the train and eval job kinds pick is the CPU, and the choice says why */
        CHECK(got.device == -1 && !use_cuda && qw_cuda_module_loaded() == NULL);
        CHECK(strstr(got.fallback, "CUDA backend not available") != NULL);
        /* cuda: refused, naming the module, never the CPU in its place */
        CHECK(qw_jobs_backend_set(&(qw_jobs_backend){.kind = QW_BACKEND_CUDA, .device = 0}, &err) ==
              QS_EUNSUPPORTED);
        CHECK(strstr(err.msg, "--backend cuda: the CUDA backend cannot be used") != NULL);
        printf("gpu_cuda_module fallback: --backend cuda refused: %s\n", err.msg);
        CHECK(qw_backend_open(&b, &cuda, &err) == QS_EUNSUPPORTED);
        CHECK(strstr(err.msg, "module is not loaded") != NULL);
        printf("gpu_cuda_module fallback: the CPU, and %s\n", err.msg);
        return 0;
    }
    CHECK(got.device == 0 && use_cuda && qw_cuda_module_loaded() != NULL);
    cuda.device = 3;
    CHECK(qw_backend_open(&b, &cuda, &err) == QS_EUNSUPPORTED);
    CHECK(strstr(err.msg, "fake module: no device 3") != NULL);
    cuda.device = 0;
    CHECK(qw_backend_open(&b, &cuda, &err) == QS_OK && !strcmp(b.ops->name, "fake"));
    CHECK(!strcmp(qw_backend_gemm_path_name(&b), "fake"));
    qw_backend_close(&b); /* the module's release */
    CHECK(b.ops == NULL);
    CHECK(qw_backend_open(&b, &cuda, &err) == QS_OK);
    CHECK(!strcmp(qw_backend_gemm_path_name(&b), "fake_released"));
    qw_backend_close(&b);
    /* auto: the module's device count (1) */
    cuda.kind = QW_BACKEND_AUTO;
    CHECK(qw_backend_open(&b, &cuda, &err) == QS_OK && !strcmp(b.ops->name, "fake"));
    qw_backend_close(&b);
    CHECK(qw_group_nccl(&g, 2, NULL, &err) == QS_OK && g.kind == QW_GROUP_NCCL && g.n == 2);
    qw_group g2;
    CHECK(qw_group_nccl(&g2, 2, NULL, &err) == QS_EIO); /* the module's: one at a time */
    float a[3] = {1, 2, 3}, c[3] = {4, 5, 6};
    float *bufs[2] = {a, c};
    CHECK(qw_group_allreduce(&g, bufs, 3, QW_GROUP_SUM, &err) == QS_OK);
    CHECK(a[0] == 3.0f && c[0] == 3.0f && a[1] == 2.0f); /* the module's, not the CPU's sum */
    qw_group_destroy(&g);
    CHECK(qw_group_nccl(&g, 2, NULL, &err) == QS_OK); /* destroyed through the module */
    qw_group_destroy(&g);
    printf("gpu_cuda_module hooks: backend and NCCL ranks through the module\n");
    return 0;
}

/* The probe case (see the top). */
static int probe(char *why) {
    qs_error err = {0};
    /* the decision a GPU is advertised by: native exactly where NVFP4's probe says ok */
    for (int o = 0; o < QK_PROBE_OUTCOMES; o++) {
        qk_gemm_probe p = {.cc = 100};
        p.outcome[QK_PROBE_NVFP4] = (qk_probe_outcome)o;
        p.outcome[QK_PROBE_MXFP4] = QK_PROBE_OK; /* another format's ok is not NVFP4's */
        CHECK(qw_gpu_native_fp4_of(&p) == (o == QK_PROBE_OK));
    }
    CHECK(!qw_gpu_native_fp4_of(NULL));
    qw_gpu g[2];
    size_t n = 0;
    CHECK(qw_gpu_parse_fake("RTX5090:32:12.0,B200:180:10.0", g, 2, &n, &err) == QS_OK && n == 2);
    CHECK(!g[0].native_fp4 && g[1].native_fp4); /* the capability table's guess */
    char names[8][64];
    qw_gpu_probe_native_fp4(g, n); /* no module loaded: nothing proved, nothing native */
    CHECK(!g[0].native_fp4 && !g[1].native_fp4);
    CHECK(qw_jobs_gemm_probe_metrics(NULL, names, 8) == 0);
    CHECK(qw_jobs_backend_set(&(qw_jobs_backend){.kind = QW_BACKEND_CUDA, .device = 0, .gemm = 2},
                              &err) == QS_OK);
#ifndef QSWEEP_HAVE_CUDA
    CHECK(qw_cuda_module_loaded() == NULL && qw_jobs_gemm_probe_metrics(NULL, names, 8) == 0);
    printf("gpu_cuda_module probe: no CUDA in this build, no probe rows\n");
    return 0;
#endif
    CHECK(qw_cuda_module_loaded() != NULL);
    int k = qw_jobs_gemm_probe_metrics(NULL, names, 8);
    CHECK(k == 4);
    CHECK(!strcmp(names[0], "gemm_probe.nvfp4.ok"));
    CHECK(!strcmp(names[1], "gemm_probe.mxfp4.no_algorithm"));
    CHECK(!strcmp(names[2], "gemm_probe.mxfp8.untried"));
    CHECK(!strcmp(names[3], "gemm_probe.fp8_tensor.ok"));
    CHECK(qw_jobs_gemm_probe_metrics(NULL, names, 2) == 2); /* never past cap */
    /* device 0 (cc 12.0) proved NVFP4, device 1 (cc 10.0) could not be probed: the probe wins */
    qw_gpu_probe_native_fp4(g, n);
    CHECK(g[0].native_fp4 && !g[1].native_fp4);
    printf("gpu_cuda_module probe: %s %s %s %s; GPU 0 native, GPU 1 not\n", names[0], names[1],
           names[2], names[3]);
    return 0;
}

int main(int argc, char **argv) {
    char why[512] = "";
    const char *mode = argc > 1 ? argv[1] : "none";
    const char *path = argc > 2 ? argv[2] : "";
    if (!strcmp(mode, "none")) {
        CHECK(qw_cuda_module_loaded() == NULL);
        printf("gpu_cuda_module none: not loaded unless asked\n");
        return 0;
    }
    setenv("QSWEEP_CUDA_MODULE", path, 1);
    if (!strcmp(mode, "hooks") || !strcmp(mode, "fallback")) return hooks(mode, why);
    if (!strcmp(mode, "probe")) return probe(why);
    const qw_cuda_module *m = qw_cuda_module_get(why, sizeof why);
#ifndef QSWEEP_HAVE_CUDA
    CHECK(m == NULL && strstr(why, "this build has no CUDA backend"));
    printf("gpu_cuda_module %s: %s\n", mode, why);
    return 0;
#endif
    if (!strcmp(mode, "missing")) {
        CHECK(m == NULL && strstr(why, path));
    } else if (!strcmp(mode, "abi")) {
        CHECK(m == NULL && strstr(why, "another ABI version") && strstr(why, path));
    } else if (!strcmp(mode, "ok")) {
        CHECK(m != NULL && m->abi == QW_CUDA_MODULE_ABI && why[0] == 0);
        CHECK(qw_cuda_module_get(NULL, 0) == m && qw_cuda_module_loaded() == m);
        qs_error err = {0};
        CHECK(m->model_use_cuda(NULL, 3, 2, &err) == QS_EUNSUPPORTED);
        CHECK(strstr(err.msg, "device 3") != NULL);
        CHECK(!strcmp(m->model_gemm_path(NULL), "fake"));
        CHECK(m->backend_cuda && m->backend_cuda->available() == 1);
        CHECK(m->backend_cuda->init(&(qw_backend){0}, 2, 0, &err) == QS_EUNSUPPORTED);
        CHECK(strstr(err.msg, "no device 2") != NULL);
        void *comm = NULL;
        CHECK(m->group_nccl && m->group_nccl->init(2, NULL, &comm, &err) == QS_OK && comm);
        m->group_nccl->destroy(comm);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    /* the answer does not change within the process */
    char again[512];
    CHECK(qw_cuda_module_get(again, sizeof again) == m && !strcmp(again, why));
    printf("gpu_cuda_module %s: %s\n", mode, m ? "loaded" : why);
    return 0;
}
