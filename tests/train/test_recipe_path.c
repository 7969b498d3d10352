/* The GPU GEMM path of every training GEMM (worker/train/recipe_path.h), on the CPU:
 * - every recipe of kinds/recipes.c, every compute capability 8.0 .. 12.1, every probe outcome
 *   of the formats the recipes quantize to (nvfp4, mxfp4, fp8_tensor), every GEMM kind and
 *   block kind (lm_head, first block, last block) under every request, against the table
 *   restated here from the recipe rows' own ingredients (format, first/last BF16 blocks,
 *   hp_bf16), the capability floors (FP4 from 10.0, FP8 from 8.9) and what the CUDA training
 *   op does where it declines (fake-quantize, then a BF16 GEMM when both inputs are exact in
 *   BF16, MXFP4's are, else FP32), not from the code;
 * - the same decisions against the route itself (worker/engine/quant_gemm_route.h), so the
 *   prediction and the op cannot part;
 * - a few rows written out (nvfp4 on H100 and B200, fp8 on A100 and H100);
 * - the per-kind path and quantized-linear counts of a micro-step (qw_recipe_kind_path). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "quant_gemm_route.h"
#include "recipe_path.h"
#include "recipes.h"

static const int CCS[] = {80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121};
#define N_CCS (sizeof CCS / sizeof CCS[0])
#define N_LAYERS 4

/* The path expected from a recipe row's ingredients alone. The op runs a quantized GEMM only
 * on a handle (requests auto and emulated): FP4 native under auto from cc 10.0 where the probe
 * matched, else emulated; FP8 on FP8 tensor cores under auto from cc 8.9 where the probe
 * matched, else declined (no emulated FP8 GEMM). Declined or unquantized: BF16 when both inputs
 * are exact in BF16 (BF16-rounded, MXFP4), else FP32. Request fp32: FP32 for every GEMM. */
static qk_gemm_path expected(const qs_recipe_row *row, int layer, int cc, qk_probe_outcome o,
                             qk_gemm_request req) {
    if (req == QK_GEMM_REQ_FP32) return QK_GEMM_PATH_FP32;
    int quantized = layer >= row->bf16_first && layer < N_LAYERS - row->bf16_last &&
                    strcmp(row->format, "none") != 0;
    if (!quantized) return row->hp_bf16 ? QK_GEMM_PATH_BF16 : QK_GEMM_PATH_FP32;
    int fp8 = !strcmp(row->format, "fp8_e4m3");
    int handle = req == QK_GEMM_REQ_AUTO || req == QK_GEMM_REQ_EMULATED;
    if (fp8 && req == QK_GEMM_REQ_AUTO && cc >= 89 && o == QK_PROBE_OK) return QK_GEMM_PATH_FP8;
    if (!fp8 && handle)
        return req == QK_GEMM_REQ_AUTO && cc >= 100 && o == QK_PROBE_OK
                   ? QK_GEMM_PATH_NATIVE_FP4
                   : QK_GEMM_PATH_EMULATED_BF16;
    return !strcmp(row->format, "mxfp4") ? QK_GEMM_PATH_BF16 : QK_GEMM_PATH_FP32;
}

static qk_probe_format probe_format(const qs_recipe_row *row) {
    if (!strcmp(row->format, "mxfp4")) return QK_PROBE_MXFP4;
    if (!strcmp(row->format, "fp8_e4m3")) return QK_PROBE_FP8_TENSOR;
    return QK_PROBE_NVFP4;
}

/* 1 with *path where the CUDA op's route runs GEMM g of a linear of block `layer` (both inputs
 * quantized, quant_gemm_route.h), else 0. */
static int route_of(const qw_recipe *r, int layer, qw_linear_gemm g, const qk_gemm_probe *probe,
                    qk_gemm_request req, qk_gemm_path *path) {
    static const qw_gemm_operand inputs[QW_N_LINEAR_GEMMS][2] = {
        {QW_FPROP_X, QW_FPROP_W}, {QW_DGRAD_DY, QW_DGRAD_W}, {QW_WGRAD_DY, QW_WGRAD_X}};
    qw_operand_spec a, b;
    qw_recipe_operand(r, layer, N_LAYERS, inputs[g][0], &a);
    qw_recipe_operand(r, layer, N_LAYERS, inputs[g][1], &b);
    if (a.mode != QW_MODE_QUANT || b.mode != QW_MODE_QUANT) return 0;
    return qw_quant_gemm_route(qk_format_name(a.fmt), qk_format_name(b.fmt), 64, probe, req, path);
}

static void every_recipe_capability_outcome_and_kind(void **s) {
    (void)s;
    static const qk_gemm_request reqs[] = {QK_GEMM_REQ_AUTO, QK_GEMM_REQ_EMULATED, QK_GEMM_REQ_FP32,
                                           QK_GEMM_REQ_BF16};
    static const int layers[] = {-1, 0, N_LAYERS - 1};
    size_t checked = 0;
    for (size_t i = 0; i < qs_recipe_count(); i++) {
        const qs_recipe_row *row = qs_recipe_at(i);
        qw_recipe r;
        qs_error err;
        assert_int_equal(qw_recipe_by_name(row->name, &r, &err), QS_OK);
        for (size_t c = 0; c < N_CCS; c++)
            for (int o = 0; o < QK_PROBE_OUTCOMES; o++) {
                qk_gemm_probe probe = {.cc = CCS[c]};
                /* the recipe's own format gets outcome o, every other format the opposite
                   answer, so a table reading the wrong format's outcome fails */
                for (int f = 0; f < QK_PROBE_FORMATS; f++)
                    probe.outcome[f] = o == QK_PROBE_OK ? QK_PROBE_MISMATCH : QK_PROBE_OK;
                probe.outcome[probe_format(row)] = (qk_probe_outcome)o;
                for (size_t q = 0; q < 4; q++)
                    for (size_t l = 0; l < 3; l++)
                        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
                            qk_gemm_decision d = qw_recipe_gemm_decide(
                                &r, layers[l], N_LAYERS, (qw_linear_gemm)g, &probe, reqs[q]);
                            qk_gemm_path want =
                                expected(row, layers[l], CCS[c], (qk_probe_outcome)o, reqs[q]);
                            qk_gemm_path routed = want;
                            if (route_of(&r, layers[l], (qw_linear_gemm)g, &probe, reqs[q],
                                         &routed) &&
                                routed != d.path)
                                fail_msg("recipe %s cc %d req %s layer %d %s: %s, route %s",
                                         row->name, CCS[c], qk_gemm_request_name(reqs[q]),
                                         layers[l], qw_linear_gemm_name((qw_linear_gemm)g),
                                         qk_gemm_path_name(d.path), qk_gemm_path_name(routed));
                            if (d.path != want)
                                fail_msg("recipe %s cc %d probe %s req %s layer %d %s: %s, want "
                                         "%s (%s)",
                                         row->name, CCS[c],
                                         qk_probe_outcome_name((qk_probe_outcome)o),
                                         qk_gemm_request_name(reqs[q]), layers[l],
                                         qw_linear_gemm_name((qw_linear_gemm)g),
                                         qk_gemm_path_name(d.path), qk_gemm_path_name(want), d.why);
                            checked++;
                        }
            }
    }
    printf("  %zu decisions (%zu recipes x %zu capabilities x %d outcomes x 4 requests x 3 blocks "
           "x 3 kinds)\n",
           checked, qs_recipe_count(), N_CCS, QK_PROBE_OUTCOMES);
    assert_int_equal(checked, qs_recipe_count() * N_CCS * QK_PROBE_OUTCOMES * 36);
}

/* Rows written out: block 0 of a 4-block model, every kind alike. */
static void rows_written_out(void **s) {
    (void)s;
    static const struct {
        const char *recipe;
        int cc;
        qk_probe_outcome o;
        const char *path;
    } rows[] = {
        {"nvfp4", 90, QK_PROBE_UNTRIED, "emulated_bf16"}, /* H100: no FP4 tensor cores */
        {"nvfp4", 100, QK_PROBE_OK, "native_fp4"},        /* B200, probe matched */
        {"nvfp4", 120, QK_PROBE_MISMATCH, "emulated_bf16"},
        {"mxfp4", 100, QK_PROBE_NO_ALGORITHM, "emulated_bf16"},
        {"mxfp4", 90, QK_PROBE_UNTRIED, "emulated_bf16"},
        {"fp8", 80, QK_PROBE_OK, "fp32"}, /* A100: no FP8 (an 'ok' below 8.9 is void): declined */
        {"fp8", 90, QK_PROBE_OK, "fp8"},
        {"fp8", 90, QK_PROBE_MISMATCH, "fp32"}, /* the probe's fake-quantized SGEMM fallback */
        {"bf16", 100, QK_PROBE_OK, "bf16"},
        {"fp32", 100, QK_PROBE_OK, "fp32"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        qw_recipe r;
        qs_error err;
        assert_int_equal(qw_recipe_by_name(rows[i].recipe, &r, &err), QS_OK);
        qk_gemm_probe probe = {.cc = rows[i].cc};
        for (int f = 0; f < QK_PROBE_FORMATS; f++)
            probe.outcome[f] = rows[i].o;
        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
            qk_gemm_decision d =
                qw_recipe_gemm_decide(&r, 0, N_LAYERS, (qw_linear_gemm)g, &probe, QK_GEMM_REQ_AUTO);
            printf("  %-6s cc %3d probe %-12s %s -> %s\n", rows[i].recipe, rows[i].cc,
                   qk_probe_outcome_name(rows[i].o), qw_linear_gemm_name((qw_linear_gemm)g),
                   qk_gemm_path_name(d.path));
            assert_string_equal(qk_gemm_path_name(d.path), rows[i].path);
        }
    }
    /* no probe at all: nothing native */
    qw_recipe r;
    qs_error err;
    assert_int_equal(qw_recipe_by_name("nvfp4", &r, &err), QS_OK);
    assert_int_equal(
        qw_recipe_gemm_decide(&r, 0, N_LAYERS, QW_GEMM_WGRAD, NULL, QK_GEMM_REQ_AUTO).path,
        QK_GEMM_PATH_EMULATED_BF16);
    assert_int_equal(qw_recipe_by_name("fp8", &r, &err), QS_OK);
    assert_int_equal(
        qw_recipe_gemm_decide(&r, 0, N_LAYERS, QW_GEMM_WGRAD, NULL, QK_GEMM_REQ_AUTO).path,
        QK_GEMM_PATH_FP32);
}

/* A micro-step's kinds: nvfp4 (last block BF16) on 4 blocks of 7 linears has 3 x 7 quantized
 * linears per kind, the all-blocks variant 4 x 7, bf16 none; lm_head is never quantized. */
static void kind_paths_and_counts(void **s) {
    (void)s;
    static const struct {
        const char *recipe;
        int cc;
        const char *path;
        int n_quant;
    } rows[] = {
        {"nvfp4", 100, "native_fp4", 21},
        {"nvfp4", 90, "emulated_bf16", 21},
        {"nvfp4-all-blocks", 90, "emulated_bf16", 28},
        {"bf16", 100, "bf16", 0},
        {"fp32", 100, "fp32", 0},
        {"fp8", 90, "fp8", 28},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        qw_recipe r;
        qs_error err;
        assert_int_equal(qw_recipe_by_name(rows[i].recipe, &r, &err), QS_OK);
        qk_gemm_probe probe = {.cc = rows[i].cc};
        for (int f = 0; f < QK_PROBE_FORMATS; f++)
            probe.outcome[f] = QK_PROBE_OK;
        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
            int nq = -1;
            qk_gemm_path p = qw_recipe_kind_path(&r, N_LAYERS, 7, (qw_linear_gemm)g, &probe,
                                                 QK_GEMM_REQ_AUTO, &nq);
            assert_string_equal(qk_gemm_path_name(p), rows[i].path);
            assert_int_equal(nq, rows[i].n_quant);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_recipe_capability_outcome_and_kind),
        cmocka_unit_test(rows_written_out),
        cmocka_unit_test(kind_paths_and_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
