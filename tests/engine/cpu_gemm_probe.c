/* The probe of cpu_gemm_fixed_test.sh: the logits of a synthetic model (tests/engine
 * model_fixture), unquantized, NVFP4 W4A16 and MXFP4 W4A4, as one FNV-1a hash of their bits per
 * path, so the script can compare runs under different OPENBLAS_CORETYPE values, thread counts
 * and fixed-GEMM ISA paths.
 *
 *   engine_cpu_gemm_probe MODEL CTX THREADS [ISA[:MRxPANELS/KC]]
 *                                                   prints "path <cpu path>", then
 *                                                   "<policy> <hash>" per policy; ISA (scalar,
 *                                                   avx2, avx512) forces the fixed GEMM's and
 *                                                   the fixed exponential's path, and the tile
 *                                                   after it the GEMM's register tile and K block
 *   engine_cpu_gemm_probe --isas                    the fixed GEMM paths this CPU has
 *   engine_cpu_gemm_probe --tiles                   ISA:MRxPANELS/KC for each vector path this
 *                                                   CPU has and each 512-bit FMA port count (1,
 *                                                   2): the tiles qw_gemm_fixed_tile_for chooses,
 *                                                   each once
 *   engine_cpu_gemm_probe --tolerance MODEL CTX     the fixed GEMM's logits against OpenBLAS's in
 *                                                   one process: exit 0 when within 1e-4 of the
 *                                                   largest |logit| (unquantized and W4A16)
 * Exit 1 with a message on any error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expf_fixed.h"
#include "gemm_cpu.h"
#include "gemm_fixed.h"
#include "model_fixture.h"
#include "ops.h"
#include "policy.h"

typedef struct policy_case {
    const char *name, *weight, *act; /* formats, NULL: FP32 */
} policy_case;

static const policy_case cases[] = {
    {"unquantized", NULL, NULL}, {"nvfp4-w4a16", "nvfp4", NULL}, {"mxfp4-w4a4", "mxfp4", "mxfp4"}};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* Every block linear to the case's formats (none: the unquantized model). */
static int apply(qw_model *m, const policy_case *c) {
    qs_error err = {0};
    qs_status st = QS_OK;
    if (!c->weight) {
        st = qw_model_apply_policy(m, NULL, &err);
    } else {
        qw_policy p;
        qw_quant_spec s = {.weight = qk_format_by_name(c->weight)};
        if (c->act) s.act = qk_format_by_name(c->act);
        st = qw_policy_init(&p, qw_model_config(m)->n_layers, &err);
        if (st == QS_OK) {
            st = qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err);
            if (st == QS_OK) st = qw_model_apply_policy(m, &p, &err);
            qw_policy_free(&p);
        }
    }
    if (st != QS_OK) fprintf(stderr, "%s: %s\n", c->name, err.msg);
    return st == QS_OK ? 0 : -1;
}

/* Logits of the first ctx tokens into out [ctx x vocab]. */
static int logits(model_fixture *f, int ctx, float *out) {
    const float *l;
    qs_error err = {0};
    if (qw_model_forward(f->m, f->toks.ids, ctx, &l, &err) != QS_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return -1;
    }
    memcpy(out, l, (size_t)ctx * qw_model_config(f->m)->vocab_size * sizeof *out);
    return 0;
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int hashes(const char *model, int ctx, int threads) {
    model_fixture f = {0};
    int rc = model_fixture_open(&f, model, ctx, threads, (size_t)ctx, 2025) != 0;
    size_t n = rc ? 0 : (size_t)ctx * qw_model_config(f.m)->vocab_size;
    float *out = rc ? NULL : malloc(n * sizeof *out);
    if (!rc && !out) rc = 1;
    if (!rc) printf("path %s\n", qw_backend_cpu_path());
    for (int c = 0; !rc && c < N_CASES; c++) {
        rc = apply(f.m, &cases[c]) || logits(&f, ctx, out);
        if (!rc)
            printf("%s %016llx\n", cases[c].name, (unsigned long long)fnv1a(out, n * sizeof *out));
    }
    free(out);
    model_fixture_close(&f);
    return rc;
}

static int tolerance(const char *model, int ctx) {
    model_fixture f = {0};
    int rc = model_fixture_open(&f, model, ctx, 1, (size_t)ctx, 2025) != 0;
    size_t n = rc ? 0 : (size_t)ctx * qw_model_config(f.m)->vocab_size;
    float *fixed = rc ? NULL : malloc(n * sizeof *fixed);
    float *blas = rc ? NULL : malloc(n * sizeof *blas);
    if (!rc && (!fixed || !blas)) rc = 1;
    qs_error err = {0};
    if (!rc && qw_model_set_prefix_cache(f.m, 0, &err) != QS_OK) { /* every forward computes */
        fprintf(stderr, "%s\n", err.msg);
        rc = 1;
    }
    for (int c = 0; !rc && c < 2; c++) { /* W4A4 quantizes GEMM outputs: a last-bit change may
                                            move a value across a rounding boundary */
        qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
        rc = apply(f.m, &cases[c]) || logits(&f, ctx, fixed);
        qw_cpu_gemm_force(QW_CPU_GEMM_OPENBLAS);
        rc = rc || logits(&f, ctx, blas);
        if (rc) break;
        double worst = 0.0, big = 0.0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)fixed[i] - blas[i]);
            worst = d > worst ? d : worst;
            big = fabs(blas[i]) > big ? fabs(blas[i]) : big;
        }
        int ok = worst <= 1e-4 * big;
        printf("%s: fixed against %s: max |diff| %.3g, %.3g of max |logit| %.3g: %s\n",
               cases[c].name, qw_backend_cpu_path(), worst, worst / big, big,
               ok ? "within 1e-4" : "OVER 1e-4");
        rc = !ok;
    }
    free(fixed);
    free(blas);
    model_fixture_close(&f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--isas") == 0) {
        const qw_gemm_isa all[] = {QW_GEMM_ISA_SCALAR, QW_GEMM_ISA_AVX2, QW_GEMM_ISA_AVX512};
        for (int i = 0; i < 3; i++)
            if (qw_gemm_fixed_isa_supported(all[i])) printf("%s\n", qw_gemm_isa_name(all[i]));
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--tiles") == 0) {
        const qw_gemm_isa vec[] = {QW_GEMM_ISA_AVX2, QW_GEMM_ISA_AVX512};
        for (int i = 0; i < 2; i++)
            for (int ports = 1; ports <= 2 && qw_gemm_fixed_isa_supported(vec[i]); ports++) {
                qw_gemm_tile t = qw_gemm_fixed_tile_for(vec[i], ports),
                             one = qw_gemm_fixed_tile_for(vec[i], 1);
                if (ports == 1 || memcmp(&t, &one, sizeof t) != 0)
                    printf("%s:%dx%d/%d\n", qw_gemm_isa_name(vec[i]), t.mr, t.panels, t.kc);
            }
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "--tolerance") == 0) return tolerance(argv[2], atoi(argv[3]));
    if (argc < 4 || argc > 5) {
        fprintf(stderr,
                "usage: %s MODEL CTX THREADS [ISA[:MRxPANELS/KC]] | --isas | --tiles | "
                "--tolerance MODEL CTX\n",
                argv[0]);
        return 1;
    }
    if (argc == 5) {
        const qw_gemm_isa all[] = {QW_GEMM_ISA_SCALAR, QW_GEMM_ISA_AVX2, QW_GEMM_ISA_AVX512};
        int found = 0;
        const char *colon = strchr(argv[4], ':');
        size_t len = colon ? (size_t)(colon - argv[4]) : strlen(argv[4]);
        for (int i = 0; i < 3; i++)
            if (strlen(qw_gemm_isa_name(all[i])) == len &&
                strncmp(argv[4], qw_gemm_isa_name(all[i]), len) == 0) {
                qs_error err = {0};
                if (qw_gemm_fixed_force_isa(all[i], &err) != QS_OK ||
                    qw_expf_force_isa(all[i], &err) != QS_OK) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                qw_gemm_tile t;
                if (colon && (sscanf(colon + 1, "%dx%d/%d", &t.mr, &t.panels, &t.kc) != 3 ||
                              qw_gemm_fixed_force_tile(&t, &err) != QS_OK)) {
                    fprintf(stderr, "tile '%s': %s\n", colon + 1,
                            err.msg[0] ? err.msg : "expected MRxPANELS/KC");
                    return 1;
                }
                found = 1;
            }
        if (!found) {
            fprintf(stderr, "unknown ISA '%s'\n", argv[4]);
            return 1;
        }
    }
    return hashes(argv[1], atoi(argv[2]), atoi(argv[3]));
}
