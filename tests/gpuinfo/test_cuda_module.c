/* gpu_cuda_module_*: loading the CUDA backend module (worker/gpu/cuda_module.h), one case per
 * process (the module is loaded once per process):
 *   missing  $QSWEEP_CUDA_MODULE names no file: NULL, and why names the path
 *   abi      a module of another ABI version: NULL, "another ABI version"
 *   ok       a module of this ABI: its table, the same on the next call, and
 *            qw_cuda_module_loaded gives it too
 *   none     nothing asked: qw_cuda_module_loaded never loads it
 * A build without CUDA answers "this build has no CUDA backend" in every case. The module
 * files are built beside this test (fake_cuda_module.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_module.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: %s failed (why: %s)\n", __FILE__, __LINE__, #c, why);          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

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
