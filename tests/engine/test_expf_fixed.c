/* The fixed-sequence FP32 exponential (worker/engine/expf_fixed.h): every code path this CPU has,
 * forced in turn, gives qw_expf's bits (the scalar definition) on a sample of 2^22 floats
 * spread over the whole range and on the edges; qw_expf is within 2 ulp of e^x in double
 * precision over that sample; the range ends give +0 and +inf, NaN stays NaN; the shifted sum's
 * order is the 16-lane order the header defines, for every length up to 70 and a long row; and
 * qw_silu_mul_n is the formula of its header with qw_expf. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "expf_fixed.h"
#include "numerics.h"

static const qw_gemm_isa isas[] = {QW_GEMM_ISA_SCALAR, QW_GEMM_ISA_AVX2, QW_GEMM_ISA_AVX512};
enum { N_ISAS = sizeof isas / sizeof isas[0], SAMPLE = 1 << 22 };

/* SAMPLE floats: bit patterns spread evenly over [0, +inf] and [-inf, -0] alike, plus edges. */
static float *sample(size_t *n) {
    static const float edges[] = {0.0f,         -0.0f,        1.0f,         -1.0f,
                                  QW_EXPF_MIN,  QW_EXPF_MAX,  -87.3365f,    88.3699f,
                                  -88.0f,       88.5f,        -103.972f,    1e-45f,
                                  -1e-45f,      0.34657359f,  -0.34657359f, 0.5f * 0.69314718f,
                                  INFINITY,     -INFINITY,    NAN,          -NAN};
    enum { N_EDGES = sizeof edges / sizeof edges[0] };
    float *x = malloc((SAMPLE + N_EDGES) * sizeof *x);
    assert_non_null(x);
    uint32_t step = 0x7f800000u / (SAMPLE / 2);
    for (size_t i = 0; i < SAMPLE / 2; i++) {
        x[2 * i] = qk_float_of((uint32_t)i * step);
        x[2 * i + 1] = qk_float_of(0x80000000u | ((uint32_t)i * step + 7u));
    }
    memcpy(x + SAMPLE, edges, sizeof edges);
    *n = SAMPLE + N_EDGES;
    return x;
}

static void force(qw_gemm_isa isa) {
    qs_error e = {0};
    assert_int_equal(qw_expf_force_isa(isa, &e), QS_OK);
}

static void test_every_path_gives_the_scalar_bits(void **state) {
    (void)state;
    size_t n;
    float *x = sample(&n), *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    for (size_t i = 0; i < n; i++)
        want[i] = qw_expf(x[i]);
    int ran = 0;
    for (int k = 0; k < N_ISAS; k++) {
        if (!qw_gemm_fixed_isa_supported(isas[k])) continue;
        force(isas[k]);
        memset(got, 0xff, n * sizeof *got);
        qw_expf_shift_n(got, x, n, 0.0f);
        for (size_t i = 0; i < n; i++)
            if (qk_bits_of(got[i]) != qk_bits_of(want[i]) && !(isnan(got[i]) && isnan(want[i])))
                fail_msg("%s: e^%a: %a, scalar %a", qw_gemm_isa_name(isas[k]), (double)x[i],
                         (double)got[i], (double)want[i]);
        /* in place, and with a shift: the FP32 subtraction first */
        memcpy(got, x, n * sizeof *got);
        qw_expf_shift_n(got, got, n, 1.5f);
        for (size_t i = 0; i < n; i++) {
            float w = qw_expf(x[i] - 1.5f);
            if (qk_bits_of(got[i]) != qk_bits_of(w) && !(isnan(got[i]) && isnan(w)))
                fail_msg("%s: e^(%a - 1.5) in place", qw_gemm_isa_name(isas[k]), (double)x[i]);
        }
        ran++;
    }
    assert_true(ran >= 1);
    force(QW_GEMM_ISA_AUTO);
    free(x);
    free(want);
    free(got);
}

/* ulp of e^x's FP32 neighbourhood: the spacing of floats at |v| (subnormals: 2^-149). */
static double ulp_at(double v) {
    int e;
    (void)frexp(v, &e); /* v = f 2^e, f in [0.5, 1) */
    return e - 24 < -149 ? ldexp(1.0, -149) : ldexp(1.0, e - 24);
}

static void test_within_2_ulp_of_double(void **state) {
    (void)state;
    size_t n;
    float *x = sample(&n);
    double worst = 0.0;
    size_t checked = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(x[i] >= QW_EXPF_MIN && x[i] <= QW_EXPF_MAX)) continue;
        double ref = exp((double)x[i]), got = qw_expf(x[i]);
        double err = fabs(got - ref) / ulp_at(ref);
        if (err > worst) worst = err;
        checked++;
    }
    assert_true(checked > SAMPLE / 4);
    print_message("worst error %.3f ulp over %zu floats in range\n", worst, checked);
    if (worst > 2.0) fail_msg("worst error %.3f ulp", worst);
    free(x);
}

static void test_range_ends(void **state) {
    (void)state;
    for (int k = 0; k < N_ISAS; k++) {
        if (!qw_gemm_fixed_isa_supported(isas[k])) continue;
        force(isas[k]);
        float x[6] = {-88.0f, -INFINITY, 88.5f, INFINITY, NAN, 0.0f}, y[6];
        qw_expf_shift_n(y, x, 6, 0.0f);
        assert_int_equal(qk_bits_of(y[0]), 0u);
        assert_int_equal(qk_bits_of(y[1]), 0u);
        assert_true(isinf(y[2]) && y[2] > 0);
        assert_true(isinf(y[3]) && y[3] > 0);
        assert_true(isnan(y[4]));
        assert_true(y[5] == 1.0f);
        /* the smallest in range is normal and the largest finite */
        assert_true(qw_expf(QW_EXPF_MIN) >= 1.1754942e-38f);
        assert_true(isfinite(qw_expf(QW_EXPF_MAX)));
    }
    force(QW_GEMM_ISA_AUTO);
}

static void test_shift_sum_order(void **state) {
    (void)state;
    enum { LONG = 513 };
    float base[LONG];
    for (int i = 0; i < LONG; i++)
        base[i] = (float)((i * 37) % 101) * 0.173f - 9.0f;
    for (int k = 0; k < N_ISAS; k++) {
        if (!qw_gemm_fixed_isa_supported(isas[k])) continue;
        force(isas[k]);
        for (int c = 0; c <= 71; c++) {
            int n = c <= 70 ? c : LONG; /* every length to 70, then the long row */
            float got[LONG], want[LONG], l[16] = {0};
            memcpy(got, base, sizeof base);
            for (int i = 0; i < n; i++) {
                want[i] = qw_expf(base[i] - 2.25f);
                l[i % 16] = l[i % 16] + want[i];
            }
            for (int w = 8; w >= 1; w /= 2)
                for (int j = 0; j < w; j++)
                    l[j] = l[j] + l[j + w];
            float s = qw_expf_shift_sum(got, (size_t)n, 2.25f);
            if (qk_bits_of(s) != qk_bits_of(l[0]))
                fail_msg("%s n %d: sum %a, want %a", qw_gemm_isa_name(isas[k]), n, (double)s,
                         (double)l[0]);
            assert_memory_equal(got, want, (size_t)n * sizeof *got);
            if (n < LONG) assert_memory_equal(got + n, base + n, (size_t)(LONG - n) * sizeof *got);
        }
    }
    force(QW_GEMM_ISA_AUTO);
}

static void test_silu_mul(void **state) {
    (void)state;
    enum { N = 1000 };
    float g[N], u[N], got[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)(i - N / 2) * 0.21f;
        u[i] = (float)((i * 13) % 7) - 3.0f;
    }
    g[0] = -100.0f; /* e^100 past the range: silu(g) * u = g / inf * u = -0 * u */
    g[1] = 100.0f;  /* e^-100 below it: g * u */
    for (int k = 0; k < N_ISAS; k++) {
        if (!qw_gemm_fixed_isa_supported(isas[k])) continue;
        force(isas[k]);
        qw_silu_mul_n(got, g, u, N);
        for (int i = 0; i < N; i++) {
            float want = g[i] / (1.0f + qw_expf(-g[i])) * u[i];
            if (qk_bits_of(got[i]) != qk_bits_of(want))
                fail_msg("%s: silu(%g) * %g: %a, want %a", qw_gemm_isa_name(isas[k]),
                         (double)g[i], (double)u[i], (double)got[i], (double)want);
        }
        assert_true(got[1] == 100.0f * u[1]);
    }
    force(QW_GEMM_ISA_AUTO);
}

/* On a CPU with every path: forcing one and going back; else the missing one is refused. */
static void test_forcing_a_missing_path_is_refused(void **state) {
    (void)state;
    qs_error e = {0};
    if (qw_gemm_fixed_isa_supported(QW_GEMM_ISA_AVX512)) {
        assert_int_equal(qw_expf_force_isa(QW_GEMM_ISA_SCALAR, &e), QS_OK);
        assert_int_equal(qw_expf_isa(), QW_GEMM_ISA_SCALAR);
        force(QW_GEMM_ISA_AUTO);
        assert_int_equal(qw_expf_isa(), QW_GEMM_ISA_AVX512);
        return; /* every path is here: nothing to refuse */
    }
    assert_int_equal(qw_expf_force_isa(QW_GEMM_ISA_AVX512, &e), QS_EINVAL);
    assert_non_null(strstr(e.msg, "avx512"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_path_gives_the_scalar_bits),
        cmocka_unit_test(test_within_2_ulp_of_double),
        cmocka_unit_test(test_range_ends),
        cmocka_unit_test(test_shift_sum_order),
        cmocka_unit_test(test_silu_mul),
        cmocka_unit_test(test_forcing_a_missing_path_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
