/* kernels_cuda_gemm_probe (CPU): the GEMM path from what a device's probe proved
 * (kernels/cuda/gemm_probe.c, qk_gemm_probe.h), for every compute capability from 8.0 to 12.1,
 * every probe outcome, every probed format and every request: native exactly where the probe
 * of the operands' format ran and matched on a device where it is tried, BF16 emulation
 * elsewhere, the unquantized and W4A16 paths as the table has them; and the names results
 * carry. Prints the table it checked (ctest --verbose). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "qk_gemm_probe.h"

static const int ccs[] = {80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121};
#define N_CC (sizeof ccs / sizeof ccs[0])

static const qk_gemm_type quantized[] = {QK_GEMM_NVFP4, QK_GEMM_MXFP4, QK_GEMM_FP8_E4M3};

static void native_only_where_the_probe_ran_and_matched(void **state) {
    (void)state;
    for (size_t c = 0; c < N_CC; c++)
        for (int o = 0; o < QK_PROBE_OUTCOMES; o++)
            for (size_t q = 0; q < 3; q++)
                for (int req = 0; req < 4; req++) {
                    qk_gemm_probe p = {.cc = ccs[c]};
                    for (int f = 0; f < QK_PROBE_FORMATS; f++)
                        p.outcome[f] = (qk_probe_outcome)o;
                    qk_gemm_type t = quantized[q];
                    int fmt = qk_probe_format_of(t);
                    int tried = ccs[c] >= (t == QK_GEMM_FP8_E4M3 ? 89 : 100);
                    qk_gemm_decision d = qk_gemm_probe_decide(&p, t, t, 1, (qk_gemm_request)req);
                    qk_gemm_path want;
                    if (req == QK_GEMM_REQ_FP32)
                        want = QK_GEMM_PATH_FP32;
                    else if (req == QK_GEMM_REQ_AUTO && tried && o == QK_PROBE_OK)
                        want = t == QK_GEMM_FP8_E4M3 ? QK_GEMM_PATH_FP8 : QK_GEMM_PATH_NATIVE_FP4;
                    else
                        want = QK_GEMM_PATH_EMULATED_BF16;
                    if (d.path != want)
                        fail_msg("cc %d, %s probe %s, request %s: got %s, want %s", ccs[c],
                                 qk_probe_format_name((qk_probe_format)fmt),
                                 qk_probe_outcome_name((qk_probe_outcome)o),
                                 qk_gemm_request_name((qk_gemm_request)req),
                                 qk_gemm_path_name(d.path), qk_gemm_path_name(want));
                    assert_non_null(d.why);
                    /* W4A16 and W8A16: never native, whatever the probe said */
                    d = qk_gemm_probe_decide(&p, t, QK_GEMM_BF16, 1, (qk_gemm_request)req);
                    assert_int_equal(d.path, req == QK_GEMM_REQ_FP32 ? QK_GEMM_PATH_FP32
                                                                     : QK_GEMM_PATH_EMULATED_BF16);
                }
}

static void one_format_proved_leaves_the_others_emulated(void **state) {
    (void)state;
    /* a 12.0 device on which NVFP4 matched and MXFP4 found no algorithm */
    qk_gemm_probe p = {.cc = 120};
    p.outcome[QK_PROBE_NVFP4] = QK_PROBE_OK;
    p.outcome[QK_PROBE_MXFP4] = QK_PROBE_NO_ALGORITHM;
    p.outcome[QK_PROBE_FP8_TENSOR] = QK_PROBE_MISMATCH;
    qk_gemm_decision d = qk_gemm_probe_decide(&p, QK_GEMM_NVFP4, QK_GEMM_NVFP4, 1, 0);
    assert_int_equal(d.path, QK_GEMM_PATH_NATIVE_FP4);
    d = qk_gemm_probe_decide(&p, QK_GEMM_MXFP4, QK_GEMM_MXFP4, 1, 0);
    assert_int_equal(d.path, QK_GEMM_PATH_EMULATED_BF16);
    assert_non_null(strstr(d.why, "no algorithm"));
    d = qk_gemm_probe_decide(&p, QK_GEMM_FP8_E4M3, QK_GEMM_FP8_E4M3, 1, 0);
    assert_int_equal(d.path, QK_GEMM_PATH_EMULATED_BF16);
    assert_non_null(strstr(d.why, "differed"));
    /* mixed FP4 families, BF16 weights: the table's answer, no probe consulted */
    assert_int_equal(qk_gemm_probe_decide(&p, QK_GEMM_NVFP4, QK_GEMM_MXFP4, 1, 0).path,
                     QK_GEMM_PATH_EMULATED_BF16);
    assert_int_equal(qk_gemm_probe_decide(&p, QK_GEMM_BF16, QK_GEMM_BF16, 1, 0).path,
                     QK_GEMM_PATH_BF16);
    assert_int_equal(qk_gemm_probe_decide(&p, QK_GEMM_BF16, QK_GEMM_BF16, 0, 0).path,
                     QK_GEMM_PATH_FP32);
    /* no probe at all: nothing native, even on 10.0 */
    assert_int_equal(qk_gemm_probe_decide(NULL, QK_GEMM_NVFP4, QK_GEMM_NVFP4, 1, 0).path,
                     QK_GEMM_PATH_EMULATED_BF16);
    /* an ok below the format's capability is not believed (a probe never runs there) */
    p.cc = 90;
    p.outcome[QK_PROBE_NVFP4] = QK_PROBE_OK;
    assert_int_equal(qk_gemm_probe_decide(&p, QK_GEMM_NVFP4, QK_GEMM_NVFP4, 1, 0).path,
                     QK_GEMM_PATH_EMULATED_BF16);
}

static void names_and_capabilities(void **state) {
    (void)state;
    char buf[64];
    qk_gemm_probe p = {.cc = 100};
    p.outcome[QK_PROBE_MXFP8] = QK_PROBE_FAILED;
    qk_gemm_probe_metric(&p, QK_PROBE_MXFP8, buf, sizeof buf);
    assert_string_equal(buf, "gemm_probe.mxfp8.failed");
    qk_gemm_probe_metric(&p, QK_PROBE_FP8_TENSOR, buf, sizeof buf);
    assert_string_equal(buf, "gemm_probe.fp8_tensor.untried");
    assert_int_equal(qk_probe_min_cc(QK_PROBE_NVFP4), 100);
    assert_int_equal(qk_probe_min_cc(QK_PROBE_MXFP4), 100);
    assert_int_equal(qk_probe_min_cc(QK_PROBE_MXFP8), 100);
    assert_int_equal(qk_probe_min_cc(QK_PROBE_FP8_TENSOR), 89);
    assert_int_equal(qk_probe_format_of(QK_GEMM_BF16), -1);
    assert_null(qk_probe_format_name(QK_PROBE_FORMATS));
    assert_null(qk_probe_outcome_name(QK_PROBE_OUTCOMES));
    /* the table as tested: W4A4 NVFP4 under auto, per capability and outcome */
    printf("cc   ");
    for (int o = 0; o < QK_PROBE_OUTCOMES; o++)
        printf(" %-14s", qk_probe_outcome_name((qk_probe_outcome)o));
    printf("\n");
    for (size_t c = 0; c < N_CC; c++) {
        printf("%2d.%d ", ccs[c] / 10, ccs[c] % 10);
        for (int o = 0; o < QK_PROBE_OUTCOMES; o++) {
            qk_gemm_probe q = {.cc = ccs[c]};
            q.outcome[QK_PROBE_NVFP4] = (qk_probe_outcome)o;
            printf(" %-14s",
                   qk_gemm_path_name(
                       qk_gemm_probe_decide(&q, QK_GEMM_NVFP4, QK_GEMM_NVFP4, 1, 0).path));
        }
        printf("\n");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(native_only_where_the_probe_ran_and_matched),
        cmocka_unit_test(one_format_proved_leaves_the_others_emulated),
        cmocka_unit_test(names_and_capabilities),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
