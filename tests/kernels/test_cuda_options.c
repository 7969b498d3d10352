/* kernels_cuda_options (CPU): the GPU quantizers' host-side option check
 * (kernels/cuda/cuda_options.c), against the CPU reference as the independent side: for every
 * format of the table and every combination of option values (each enum one past its last value
 * too, tensor_amax finite, negative, infinite and NaN, group_size -1, 0 and 32), an option set
 * the GPU takes is one the CPU's qk_fake_quant takes; one the CPU refuses the GPU refuses too;
 * the CPU-only options (reference_only, tiny_amax = exact) are QS_EUNSUPPORTED; and every
 * refusal names its field. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "format.h"
#include "qk_cuda_options.h"

static const float amaxes[] = {0.0f, 3.5f, -1.0f, INFINITY, NAN};
static const int groups[] = {-1, 0, 32};

/* Option set n of N_SETS: a mixed-radix walk over every field's values (tensor_amax: not given,
 * or one of amaxes). */
enum {
    N_ROUND = QK_ROUND_SR + 2,
    N_MX = QK_MX_EVEN + 2,
    N_CLAMP = QK_NVFP4_CLAMP_ZERO_TO_ONE + 2,
    N_AMAX = sizeof amaxes / sizeof amaxes[0] + 1,
    N_GROUP = sizeof groups / sizeof groups[0],
    N_SETS = N_ROUND * 2 * 2 * N_MX * N_CLAMP * N_AMAX * N_GROUP,
};

static qk_quant_options option_set(int n) {
    qk_quant_options o = {0};
    o.rounding = (qk_rounding)(n % N_ROUND), n /= N_ROUND;
    o.reference_only = n % 2, n /= 2;
    o.tiny_amax = (qk_tiny_amax)(n % 2), n /= 2;
    o.mx_rule = (qk_mx_scale_rule)(n % N_MX), n /= N_MX;
    o.nvfp4_clamp = (qk_nvfp4_clamp)(n % N_CLAMP), n /= N_CLAMP;
    int a = n % N_AMAX - 1;
    n /= N_AMAX;
    if (a >= 0) {
        o.tensor_amax_given = 1;
        o.tensor_amax = amaxes[a];
    }
    o.group_size = groups[n];
    return o;
}

/* Whether a refusal names the field it is about. */
static int names_a_field(const char *msg) {
    static const char *const fields[] = {
        "options.rounding",    "options.reference_only", "options.tiny_amax", "options.mx_rule",
        "options.nvfp4_clamp", "options.tensor_amax",    "options.group_size"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strstr(msg, fields[i])) return 1;
    return 0;
}

static void the_gpu_takes_a_subset_of_what_the_cpu_takes(void **state) {
    (void)state;
    size_t checked = 0, gpu_ok = 0, cpu_only = 0;
    float x[2 * 64];
    for (size_t f = 0; f < qk_format_count(); f++) {
        const qk_format *fmt = qk_format_at(f);
        if (fmt->rule == QK_RULE_IDENTITY) continue; /* bf16: no kernel runs */
        for (int n = 0; n < N_SETS; n++) {
            qk_quant_options o = option_set(n);
            qs_error eg = {0}, ec = {0};
            qs_status sg = qk_cuda_check_options(fmt, &o, &eg);
            for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
                x[i] = (float)((int)(i * 7 % 23) - 11) * 0.25f;
            qs_status sc = qk_fake_quant(fmt, &o, x, 2, 64, NULL, &ec);
            checked++;
            if (sg == QS_OK) {
                gpu_ok++;
                if (sc != QS_OK)
                    fail_msg("%s, option set %d: the GPU takes it, the CPU refuses: %s", fmt->name,
                             n, ec.msg);
                continue;
            }
            if (!names_a_field(eg.msg))
                fail_msg("%s: a refusal names no field: %s", fmt->name, eg.msg);
            if (sc != QS_OK) continue;
            if (!o.reference_only && o.tiny_amax == QK_TINY_TE)
                fail_msg("%s, option set %d: the CPU takes it, the GPU refuses: %s", fmt->name, n,
                         eg.msg);
            assert_int_equal(sg, QS_EUNSUPPORTED); /* CPU-only */
            cpu_only++;
        }
    }
    printf("%zu option sets over %zu formats: the GPU takes %zu, refuses %zu as CPU-only\n",
           checked, qk_format_count(), gpu_ok, cpu_only);
    assert_true(gpu_ok > 0 && cpu_only > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_gpu_takes_a_subset_of_what_the_cpu_takes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
