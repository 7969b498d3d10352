/* The route of a quantized training GEMM on CUDA (worker/engine/quant_gemm_route.h), a pure
 * function checked here on the CPU for every capability from 8.0 to 12.1, both requests (auto
 * and emulated) and every pairing of the recipe formats, through the handle's own pure choice
 * (kernels/cuda qk_gemm_path_select), so the first device run meets a decision already tested. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "quant_gemm_route.h"

static const int ccs[] = {80, 86, 89, 90, 100, 103, 110, 120, 121};
static const char *const fmts[] = {NULL,       "nvfp4",      "nvfp4_2d",    "mxfp4",
                                   "fp8_e4m3", "mxfp8_e4m3", "int8_channel"};
#define N_OF(a) (sizeof(a) / sizeof *(a))

/* The route end to end on a device of capability cc whose fp8_tensor probe ended in fp8_probe
 * (the others ok where tried): 0 declined, else 1 with *path. */
static int route_probed(const char *fa, const char *fb, int ncol, int cc, int emulated,
                        qk_probe_outcome fp8_probe, qk_gemm_path *path) {
    qk_gemm_type t;
    if (!qw_quant_gemm_operands(fa, fb, ncol, &t)) return 0;
    qk_gemm_probe probe = {0};
    probe.cc = cc;
    for (int f = 0; f < QK_PROBE_FORMATS; f++)
        probe.outcome[f] =
            cc >= qk_probe_min_cc((qk_probe_format)f) ? QK_PROBE_OK : QK_PROBE_UNTRIED;
    if (cc >= qk_probe_min_cc(QK_PROBE_FP8_TENSOR)) probe.outcome[QK_PROBE_FP8_TENSOR] = fp8_probe;
    qs_error e = {0};
    int ok = qk_gemm_path_select(cc, emulated, t, t, path, &e) == QS_OK;
    /* a handle with a probe takes an FP4 pairing's path from it (gemm.cu qk_gemm_path_for) */
    if (ok && !emulated && (t == QK_GEMM_NVFP4 || t == QK_GEMM_MXFP4))
        *path = qk_gemm_probe_decide(&probe, t, t, 1, QK_GEMM_REQ_AUTO).path;
    return qw_quant_gemm_runs(t, ok, *path, &probe);
}

static int route(const char *fa, const char *fb, int ncol, int cc, int emulated,
                 qk_gemm_path *path) {
    return route_probed(fa, fb, ncol, cc, emulated, QK_PROBE_OK, path);
}

static void fp8_runs_on_fp8_tensor_cores_from_cc_89(void **s) {
    (void)s;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    assert_int_equal(route("fp8_e4m3", "fp8_e4m3", 64, 89, 0, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_FP8);
    assert_int_equal(route("fp8_e4m3", "fp8_e4m3", 64, 90, 0, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_FP8);
    assert_int_equal(route("fp8_e4m3", "fp8_e4m3", 64, 100, 0, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_FP8);
}

static void fp8_is_declined_below_cc_89_and_when_emulation_is_asked(void **s) {
    (void)s;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    assert_int_equal(route("fp8_e4m3", "fp8_e4m3", 64, 80, 0, &p), 0);
    assert_int_equal(route("fp8_e4m3", "fp8_e4m3", 64, 86, 0, &p), 0);
    assert_int_equal(route("fp8_e4m3", "fp8_e4m3", 64, 90, 1, &p), 0);
}

/* FP8 follows the device's proof: any fp8_tensor outcome but ok, or no probe at all, declines. */
static void fp8_runs_only_where_the_probe_matched(void **s) {
    (void)s;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    for (int o = 0; o < QK_PROBE_OUTCOMES; o++) {
        int got = route_probed("fp8_e4m3", "fp8_e4m3", 64, 90, 0, (qk_probe_outcome)o, &p);
        printf("fp8 x fp8 on 9.0, probe %s: %s\n", qk_probe_outcome_name((qk_probe_outcome)o),
               got ? "fp8" : "declined");
        assert_int_equal(got, o == QK_PROBE_OK);
    }
    qk_gemm_type t;
    assert_int_equal(qw_quant_gemm_operands("fp8_e4m3", "fp8_e4m3", 64, &t), 1);
    assert_int_equal(qw_quant_gemm_runs(t, 1, QK_GEMM_PATH_FP8, NULL), 0);
}

static void fp4_runs_native_on_blackwell_emulated_elsewhere(void **s) {
    (void)s;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    assert_int_equal(route("nvfp4", "nvfp4_2d", 64, 100, 0, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_NATIVE_FP4);
    assert_int_equal(route("nvfp4", "nvfp4", 64, 90, 0, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_EMULATED_BF16);
    assert_int_equal(route("mxfp4", "mxfp4", 64, 80, 0, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_EMULATED_BF16);
    assert_int_equal(route("mxfp4", "mxfp4", 64, 100, 1, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_EMULATED_BF16);
}

static void mixed_unquantized_and_misaligned_are_declined(void **s) {
    (void)s;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    assert_int_equal(route("nvfp4", "mxfp4", 64, 100, 0, &p), 0);
    assert_int_equal(route("fp8_e4m3", "nvfp4", 64, 100, 0, &p), 0);
    assert_int_equal(route(NULL, "fp8_e4m3", 64, 90, 0, &p), 0);
    assert_int_equal(route("mxfp8_e4m3", "mxfp8_e4m3", 64, 100, 0, &p), 0);
    assert_int_equal(route("fp8_e4m3", "fp8_e4m3", 6, 90, 0, &p), 0);
    assert_int_equal(route("nvfp4", "nvfp4", 0, 100, 0, &p), 0);
}

/* 1 for the NVFP4 formats (1D and 2D weights: one GEMM operand type), 2 for MXFP4, else 0. */
static int fp4_family(const char *f) {
    if (f && (!strcmp(f, "nvfp4") || !strcmp(f, "nvfp4_2d"))) return 1;
    return f && !strcmp(f, "mxfp4") ? 2 : 0;
}

/* Every capability, request and pairing: the route runs exactly the pairings of the table in
 * quant_gemm_route.h, and what it runs is FP8 on the FP8 path or FP4 on an FP4 path. */
static void every_capability_and_pairing_follows_the_table(void **s) {
    (void)s;
    int runs = 0, cases = 0;
    for (size_t a = 0; a < N_OF(fmts); a++)
        for (size_t b = 0; b < N_OF(fmts); b++)
            for (size_t c = 0; c < N_OF(ccs); c++)
                for (int em = 0; em < 2; em++)
                    for (int ncol = 3; ncol <= 4; ncol++) {
                        const char *fa = fmts[a], *fb = fmts[b];
                        int same_fp4 = fp4_family(fa) && fp4_family(fa) == fp4_family(fb);
                        int fp8 = a == 4 && b == 4; /* fp8_e4m3 both */
                        int want = ncol == 4 && (same_fp4 || (fp8 && ccs[c] >= 89 && !em));
                        qk_gemm_path p = QK_GEMM_PATH_FP32;
                        int got = route(fa, fb, ncol, ccs[c], em, &p);
                        if (got != want)
                            fail_msg("%s x %s, ncol %d, cc %d, %s: route %d, expected %d",
                                     fa ? fa : "none", fb ? fb : "none", ncol, ccs[c],
                                     em ? "emulated" : "auto", got, want);
                        if (got && fp8) assert_int_equal(p, QK_GEMM_PATH_FP8);
                        if (got && same_fp4)
                            assert_true(p == QK_GEMM_PATH_NATIVE_FP4 ||
                                        p == QK_GEMM_PATH_EMULATED_BF16);
                        runs += got;
                        cases++;
                    }
    printf("%d of %d cases run on the device's quantized GEMM\n", runs, cases);
}

/* The route end to end (qw_quant_gemm_route) is the steps above for every capability, pairing,
 * fp8_tensor outcome and handle request; the requests fp32 and bf16 open no handle and decline
 * every pairing. */
static void the_route_end_to_end_is_its_steps(void **s) {
    (void)s;
    static const qk_gemm_request reqs[] = {QK_GEMM_REQ_AUTO, QK_GEMM_REQ_EMULATED, QK_GEMM_REQ_FP32,
                                           QK_GEMM_REQ_BF16};
    int cases = 0;
    for (size_t a = 0; a < N_OF(fmts); a++)
        for (size_t b = 0; b < N_OF(fmts); b++)
            for (size_t c = 0; c < N_OF(ccs); c++)
                for (int o = 0; o < QK_PROBE_OUTCOMES; o++)
                    for (size_t q = 0; q < N_OF(reqs); q++) {
                        qk_gemm_probe probe = {0};
                        probe.cc = ccs[c];
                        for (int f = 0; f < QK_PROBE_FORMATS; f++)
                            probe.outcome[f] = ccs[c] >= qk_probe_min_cc((qk_probe_format)f)
                                                   ? QK_PROBE_OK
                                                   : QK_PROBE_UNTRIED;
                        if (ccs[c] >= qk_probe_min_cc(QK_PROBE_FP8_TENSOR))
                            probe.outcome[QK_PROBE_FP8_TENSOR] = (qk_probe_outcome)o;
                        qk_gemm_path want = QK_GEMM_PATH_FP32, got = QK_GEMM_PATH_FP32;
                        int handle = reqs[q] == QK_GEMM_REQ_AUTO || reqs[q] == QK_GEMM_REQ_EMULATED;
                        int w = handle && route_probed(fmts[a], fmts[b], 64, ccs[c],
                                                       reqs[q] == QK_GEMM_REQ_EMULATED,
                                                       (qk_probe_outcome)o, &want);
                        int g = qw_quant_gemm_route(fmts[a], fmts[b], 64, &probe, reqs[q], &got);
                        if (g != w || (g && got != want))
                            fail_msg("%s x %s, cc %d, fp8 probe %s, %s: route %d %s, steps %d %s",
                                     fmts[a] ? fmts[a] : "none", fmts[b] ? fmts[b] : "none", ccs[c],
                                     qk_probe_outcome_name((qk_probe_outcome)o),
                                     qk_gemm_request_name(reqs[q]), g, qk_gemm_path_name(got), w,
                                     qk_gemm_path_name(want));
                        cases++;
                    }
    printf("%d cases: the route end to end is its steps\n", cases);
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    assert_int_equal(qw_quant_gemm_route("nvfp4", "nvfp4", 64, NULL, QK_GEMM_REQ_AUTO, &p), 1);
    assert_int_equal(p, QK_GEMM_PATH_EMULATED_BF16); /* no probe: cc 0, nothing native */
    assert_int_equal(qw_quant_gemm_route("fp8_e4m3", "fp8_e4m3", 64, NULL, QK_GEMM_REQ_AUTO, &p),
                     0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fp8_runs_on_fp8_tensor_cores_from_cc_89),
        cmocka_unit_test(fp8_is_declined_below_cc_89_and_when_emulation_is_asked),
        cmocka_unit_test(fp8_runs_only_where_the_probe_matched),
        cmocka_unit_test(fp4_runs_native_on_blackwell_emulated_elsewhere),
        cmocka_unit_test(mixed_unquantized_and_misaligned_are_declined),
        cmocka_unit_test(every_capability_and_pairing_follows_the_table),
        cmocka_unit_test(the_route_end_to_end_is_its_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
