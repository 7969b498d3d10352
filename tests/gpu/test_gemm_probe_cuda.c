/* gpu_gemm_probe_cuda (label gpu): the GEMM probe on CUDA device 0 (kernels/cuda/gemm_probe.cu,
 * qk_gemm_probe.h): a format below its capability is untried, each format at or above it ends
 * in a definite outcome, the answer is cached (a second run on another handle gives the same),
 * and on compute capability 10.0 NVFP4 W4A4 runs natively and matches the emulation, as
 * NVIDIA's LtNvfp4Matmul sample does it there. Prints the outcomes (the device check collects
 * the gemm_probe lines). Exits 77 (skipped) without a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "gpu_test_util.h"
#include "qk_gemm.h"
#include "qk_gemm_probe.h"

static void the_probe_answers_every_format_once_per_device(void **state) {
    (void)state;
    qs_error err = {0};
    qk_gemm *g = NULL, *g2 = NULL;
    assert_int_equal(qk_gemm_create(0, &g, &err), QS_OK);
    qk_gemm_probe p, q;
    assert_int_equal(qk_gemm_probe_run(g, 0, &p, &err), QS_OK);
    for (int f = 0; f < QK_PROBE_FORMATS; f++) {
        char m[64];
        qk_gemm_probe_metric(&p, (qk_probe_format)f, m, sizeof m);
        printf("%s%s%s\n", m, p.status[f][0] ? " " : "", p.status[f]);
        if (p.cc < qk_probe_min_cc((qk_probe_format)f) || f == QK_PROBE_MXFP8)
            assert_int_equal(p.outcome[f], QK_PROBE_UNTRIED);
        else
            assert_int_not_equal(p.outcome[f], QK_PROBE_UNTRIED);
    }
    if (p.cc == 100) assert_int_equal(p.outcome[QK_PROBE_NVFP4], QK_PROBE_OK);
    assert_int_equal(qk_gemm_create(0, &g2, &err), QS_OK);
    assert_int_equal(qk_gemm_probe_run(g2, 0, &q, &err), QS_OK);
    assert_memory_equal(&p, &q, sizeof p);
    /* the handle's FP4 path is the probe's answer */
    qk_gemm_set_probe(g, &p);
    qk_gemm_path path;
    assert_int_equal(qk_gemm_path_for(g, QK_GEMM_NVFP4, QK_GEMM_NVFP4, &path, &err), QS_OK);
    assert_int_equal(path, qk_gemm_probe_decide(&p, QK_GEMM_NVFP4, QK_GEMM_NVFP4, 1, 0).path);
    qk_gemm_destroy(g);
    qk_gemm_destroy(g2);
}

int main(void) {
    if (qwt_cuda_skip("gpu_gemm_probe_cuda")) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_probe_answers_every_format_once_per_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
