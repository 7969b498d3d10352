/* A stand-in for the CUDA driver, libcuda.so.1, for tests on machines without a GPU: two
 * devices "Fake H200" of 141 GiB, compute capability 9.0, through the driver functions
 * `qsweep worker` lists GPUs with (worker/gpu/gpu_info.c). Nothing else of the driver exists,
 * so the CUDA backend module cannot start on it. */
#include <stddef.h>
#include <stdio.h>

int cuInit(unsigned flags) {
    (void)flags;
    return 0;
}

int cuDriverGetVersion(int *v) {
    *v = 99000; /* newer than any runtime a build links */
    return 0;
}

int cuDeviceGetCount(int *n) {
    *n = 2;
    return 0;
}

int cuDeviceGet(int *dev, int ordinal) {
    *dev = ordinal;
    return ordinal >= 0 && ordinal < 2 ? 0 : 101; /* CUDA_ERROR_INVALID_DEVICE */
}

int cuDeviceGetName(char *name, int len, int dev) {
    snprintf(name, (size_t)len, "Fake H200 %d", dev);
    return 0;
}

int cuDeviceTotalMem_v2(size_t *bytes, int dev) {
    (void)dev;
    *bytes = (size_t)141 << 30;
    return 0;
}

/* 75, 76: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR */
int cuDeviceGetAttribute(int *v, int attr, int dev) {
    (void)dev;
    *v = attr == 75 ? 9 : 0;
    return attr == 75 || attr == 76 ? 0 : 1;
}

int cuGetErrorString(int r, const char **text) {
    (void)r;
    *text = "fake driver error";
    return 0;
}
