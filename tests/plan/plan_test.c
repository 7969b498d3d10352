/* qsweep plan:
 *   - the DP (cli/plan.c) against brute force over every assignment of random small
 *     instances: same feasibility, same optimal cost, and its plan meets the budget;
 *   - the bit counts of the formats, and a budget equal to uniform NVFP4's admits it;
 *   - a budget no assignment meets is refused, naming the fewest bits reachable;
 *   - end to end on the tiny sweep in layer mode (NVFP4 and MXFP4, through the real binary
 *     and PostgreSQL): for budgets 4.5, 6 and 8 bits the plan meets the budget, its
 *     predicted cost is the sum of the views' values for the formats it chose, and it
 *     equals the optimum found by brute force over all 3^12 assignments of its fused groups
 *     (q/k/v, o, gate/up, down per block) with the views' costs (below 0 counted as 0) and
 *     the model's shapes; at 16 bits every linear stays bf16 (kl_mean and ppl, whose negative
 *     deltas are noise, counted as 0 and reported);
 *   - an unknown experiment is named as such; a synthetic model's shape comes from the
 *     engine's table; a model at the sweep's path with another digest is refused (exit 2). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "fixtures.h"
#include "pgserver.h"
#include "plan.h"

/* Brute force: the least cost of any assignment within the budget (summing in item order,
 * as the DP does), INFINITY when none. */
static double brute_force(const qsweep_plan_item *it, size_t n, const unsigned *qbits, size_t m,
                          double budget) {
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total *= m;
    double best = INFINITY, weights = 0;
    for (size_t i = 0; i < n; i++)
        weights += (double)it[i].weights;
    for (size_t code = 0; code < total; code++) {
        size_t c = code;
        double cost = 0, bits = 0;
        int ok = 1;
        for (size_t i = 0; i < n; i++, c /= m) {
            size_t f = c % m;
            if (isnan(it[i].cost[f])) ok = 0;
            cost += it[i].cost[f];
            bits += (double)it[i].weights * qbits[f] / 4.0;
        }
        if (ok && bits <= budget * weights + 1e-6 && cost < best) best = cost;
    }
    return best;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void test_dp_equals_brute_force_on_random_instances(void **state) {
    (void)state;
    static const char *const fmts[] = {"mxfp4", "nvfp4", "fp8_e4m3", "mxfp8_e4m3", "bf16"};
    uint64_t s = 12345;
    int feasible = 0, infeasible = 0;
    for (int trial = 0; trial < 400; trial++) {
        size_t n = 1 + lcg(&s) % 7, m = 2 + lcg(&s) % 4;
        unsigned qbits[QSWEEP_PLAN_MAX_FORMATS];
        for (size_t f = 0; f < m; f++)
            qbits[f] = qsweep_plan_quarter_bits(fmts[(f + (size_t)trial) % 5]);
        qsweep_plan_item items[8];
        memset(items, 0, sizeof items);
        for (size_t i = 0; i < n; i++) {
            snprintf(items[i].name, sizeof items[i].name, "%zu", i);
            /* shapes with a common factor, as Llama linears have */
            items[i].weights = 16 * (1 + lcg(&s) % 12);
            for (size_t f = 0; f < m; f++)
                items[i].cost[f] =
                    lcg(&s) % 5 == 0 && qbits[f] != 64 ? NAN : (double)(lcg(&s) % 100000) / 7919.0;
        }
        double budget = 4.0 + (double)(lcg(&s) % 1300) / 100.0;
        int choice[8];
        double cost = -1, bits = -1;
        qs_error err = {0};
        qs_status st = qsweep_plan_solve(items, n, qbits, m, budget, choice, &cost, &bits, &err);
        double want = brute_force(items, n, qbits, m, budget);
        if (want == INFINITY) {
            assert_int_equal(st, QS_EINVAL);
            infeasible++;
            continue;
        }
        if (st) fail_msg("trial %d: %s", trial, err.msg);
        feasible++;
        if (cost != want) fail_msg("trial %d: DP %.17g, brute force %.17g", trial, cost, want);
        /* the plan itself: allowed formats, within the budget, with the cost it claims */
        double c = 0, b = 0, w = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(choice[i] >= 0 && (size_t)choice[i] < m);
            assert_false(isnan(items[i].cost[choice[i]]));
            c += items[i].cost[choice[i]];
            b += (double)items[i].weights * qbits[choice[i]] / 4.0;
            w += (double)items[i].weights;
        }
        assert_true(b <= budget * w + 1e-9);
        assert_true(c == cost);
        assert_true(fabs(bits - b / w) < 1e-12);
    }
    /* both kinds of instance were exercised */
    assert_true(feasible > 100);
    assert_true(infeasible > 5);
}

static void test_bits_per_weight_count_block_scales(void **state) {
    (void)state;
    assert_int_equal(qsweep_plan_quarter_bits("nvfp4"), 18);      /* 4 + 8/16 */
    assert_int_equal(qsweep_plan_quarter_bits("mxfp4"), 17);      /* 4 + 8/32 */
    assert_int_equal(qsweep_plan_quarter_bits("mxfp8_e4m3"), 33); /* 8 + 8/32 */
    assert_int_equal(qsweep_plan_quarter_bits("fp8_e4m3"), 32);
    assert_int_equal(qsweep_plan_quarter_bits("bf16"), 64);
    assert_int_equal(qsweep_plan_quarter_bits("int4_group"), 0);
    assert_int_equal(qsweep_plan_tensor_scale_bits("nvfp4"), 32);
    assert_int_equal(qsweep_plan_tensor_scale_bits("mxfp4"), 0);
}

static void test_budget_of_uniform_nvfp4_admits_it(void **state) {
    (void)state;
    const unsigned qbits[2] = {18, 64}; /* nvfp4, bf16 */
    qsweep_plan_item items[3] = {
        {"0.q", 331776, {0.5, 0}}, {"0.k", 110592, {0.25, 0}}, {"0.down", 884736, {1.0, 0}}};
    int choice[3];
    double cost, bits;
    qs_error err = {0};
    assert_int_equal(qsweep_plan_solve(items, 3, qbits, 2, 4.5, choice, &cost, &bits, &err), QS_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(choice[i], 0);
    assert_true(cost == 1.75);
    assert_true(bits == 4.5);
    /* room for exactly one more item in bf16 (11.5 more bits per weight of k): only k fits,
       and it is worth its 0.25 */
    double n = 331776.0 + 110592.0 + 884736.0;
    assert_int_equal(qsweep_plan_solve(items, 3, qbits, 2, 4.5 + 11.5 * 110592.0 / n, choice, &cost,
                                       &bits, &err),
                     QS_OK);
    assert_int_equal(choice[1], 1);
    assert_true(cost == 1.5);
}

static void test_budget_below_every_assignment_is_refused(void **state) {
    (void)state;
    const unsigned qbits[2] = {18, 64};
    qsweep_plan_item items[1] = {{"0.q", 4096, {0.5, 0}}};
    int choice[1];
    qs_error err = {0};
    assert_int_equal(qsweep_plan_solve(items, 1, qbits, 2, 4.0, choice, NULL, NULL, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "4.5000"));
    items[0].weights = 0;
    assert_int_equal(qsweep_plan_solve(items, 1, qbits, 2, 8.0, choice, NULL, NULL, &err),
                     QS_EINVAL);
}

/* ---- end to end */

#define TINY QSWEEP_SOURCE_DIR "/experiments/tiny.yaml"

/* The private data, cache and state folders under dir, and no QSWEEP_DB: `qsweep run` starts
 * its own cluster there. */
static void sandbox(const char *dir) {
    char buf[700];
    snprintf(buf, sizeof buf, "%s/data", dir);
    setenv("XDG_DATA_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/cache", dir);
    setenv("XDG_CACHE_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/state", dir);
    setenv("XDG_STATE_HOME", buf, 1);
    unsetenv("QSWEEP_DB");
}

/* A connection to the cluster a `qsweep run` in sandbox(dir) left, started again in *pg. */
static PGconn *sandbox_db(const char *dir, qc_pgserver **pg) {
    char pg_dir[700];
    snprintf(pg_dir, sizeof pg_dir, "%s/data/qsweep/pg", dir);
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(pg_dir, pg, &err), QS_OK);
    PGconn *c = PQconnectdb(qc_pgserver_conninfo(*pg));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    return c;
}
static const char *const KINDS[7] = {"q", "k", "v", "o", "gate", "up", "down"};

static double view_cost(PGconn *c, int block, int kind, const char *format) {
    if (!strcmp(format, "bf16")) return 0.0;
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT value FROM v_sensitivity WHERE experiment = 'tiny' AND mode = 'layer' AND "
             "metric = 'kl_mean' AND quantize = 'weights' AND format = '%s' AND part = '%d.%s'",
             format, block, KINDS[kind]);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %d rows %s", sql, PQntuples(r), PQerrorMessage(c));
    double v = strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    /* the planner's rule: a cost below 0 is noise and counts as 0, as bf16's */
    return v < 0 ? 0.0 : v;
}

/* Checks that the plan `qsweep plan` printed puts every one of the n linears in bf16: its
 * format counts give bf16 n and every other format 0. */
static void assert_plan_all_bf16(const char *out, int n) {
    const char *counts = strstr(out, "format counts:");
    assert_non_null(counts);
    char line[512], want[32];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(counts, "\n"), counts);
    snprintf(want, sizeof want, "  bf16 %d", n);
    if (!strstr(line, want)) fail_msg("budget 16: no '%s' in '%s'", want, line);
    char *save = NULL, *k;
    for (char *fm = strtok_r(line + strlen("format counts:"), " ", &save);
         fm && (k = strtok_r(NULL, " ", &save)); fm = strtok_r(NULL, " ", &save))
        if (strcmp(fm, "bf16") && strcmp(k, "0"))
            fail_msg("budget 16: %s takes %s linears", fm, k);
}

static void test_plan_of_tiny_layer_sweep_is_optimal(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-plan");
    assert_non_null(dir);
    sandbox(dir);
    static char out[1 << 16];
    const char *run[] = {"run",       TINY,
                         "--workers", "2",
                         "--set",     "sensitivity.modes=[layer]",
                         "--set",     "sensitivity.formats=[nvfp4,mxfp4]",
                         "--set",     "sensitivity.quantize=[weights]",
                         NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    qc_pgserver *pg = NULL;
    PGconn *c = sandbox_db(dir, &pg);
    const char *conninfo = qc_pgserver_conninfo(pg);

    /* the model's shapes, from its config.json (Hugging Face names) */
    json_error_t je;
    json_t *cfg =
        json_load_file(QSWEEP_SOURCE_DIR "/tests/engine/data/llama3_gqa/config.json", 0, &je);
    assert_non_null(cfg);
    uint64_t d = (uint64_t)json_integer_value(json_object_get(cfg, "hidden_size"));
    uint64_t h = (uint64_t)json_integer_value(json_object_get(cfg, "intermediate_size"));
    uint64_t hd = (uint64_t)json_integer_value(json_object_get(cfg, "head_dim"));
    uint64_t nh = (uint64_t)json_integer_value(json_object_get(cfg, "num_attention_heads"));
    uint64_t nkv = (uint64_t)json_integer_value(json_object_get(cfg, "num_key_value_heads"));
    int layers = (int)json_integer_value(json_object_get(cfg, "num_hidden_layers"));
    json_decref(cfg);
    const uint64_t kw[7] = {nh * hd * d, nkv * hd * d, nkv * hd * d, d * nh * hd,
                            h * d,       h * d,        d * h};
    static const int groups[4][4] = {{0, 1, 2, -1}, {3, -1}, {4, 5, -1}, {6, -1}};
    static const char *const fmts[3] = {"nvfp4", "mxfp4", "bf16"};
    const unsigned qbits[3] = {18, 17, 64};

    /* the brute-force instance: 4 groups per block, costs summed over their members */
    enum { NG = 12 };
    assert_int_equal(layers * 4, NG);
    double gcost[NG][3];
    uint64_t gw[NG] = {0};
    for (int b = 0; b < layers; b++)
        for (int g = 0; g < 4; g++) {
            gw[b * 4 + g] = 0;
            for (int f = 0; f < 3; f++)
                gcost[b * 4 + g][f] = 0;
            for (int k = 0; groups[g][k] >= 0; k++) {
                gw[b * 4 + g] += kw[groups[g][k]];
                for (int f = 0; f < 3; f++)
                    gcost[b * 4 + g][f] += view_cost(c, b, groups[g][k], fmts[f]);
            }
        }
    double total_w = 0;
    for (int i = 0; i < NG; i++)
        total_w += (double)gw[i];

    const double budgets[3] = {4.5, 6.0, 8.0};
    for (int bi = 0; bi < 3; bi++) {
        char yaml[800], budget[16];
        snprintf(yaml, sizeof yaml, "%s/plan.yaml", dir);
        snprintf(budget, sizeof budget, "%g", budgets[bi]);
        const char *plan[] = {"plan",
                              "tiny",
                              "--budget-bits",
                              budget,
                              "--uniform-groups",
                              "--formats",
                              "nvfp4,mxfp4,bf16",
                              "-o",
                              yaml,
                              "--db",
                              conninfo,
                              NULL};
        rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
        if (rc != 0) fail_msg("qsweep plan exited %d:\n%s", rc, out);
        const char *avg = strstr(out, "average bits per weight: ");
        const char *pred = strstr(out, "predicted kl_mean: ");
        assert_non_null(avg);
        assert_non_null(pred);
        double avg_bits = strtod(avg + strlen("average bits per weight: "), NULL);
        double predicted = strtod(pred + strlen("predicted kl_mean: "), NULL);
        assert_true(avg_bits <= budgets[bi] + 1e-4);

        /* the written policy: a format for each of the 21 linears, groups uniform; its name
           says the candidate formats, which make it another plan than the default's */
        FILE *f = fopen(yaml, "r");
        assert_non_null(f);
        char want_name[96], grid_text[16384] = "";
        snprintf(want_name, sizeof want_name,
                 "\nname: tiny-plan-%sb-groups-formats-nvfp4+mxfp4+bf16\n", budget);
        grid_text[fread(grid_text, 1, sizeof grid_text - 1, f)] = 0;
        if (!strstr(grid_text, want_name))
            fail_msg("no '%s' in the plan grid:\n%s", want_name + 1, grid_text);
        rewind(f);
        char line[256], fmt_of[3][7][16];
        int seen = 0;
        double sum = 0, bits = 0;
        while (fgets(line, sizeof line, f)) {
            int b;
            char kind[16], fm[16];
            if (sscanf(line, " \"%d.%15[a-z]\": %15s", &b, kind, fm) != 3) continue;
            int k = 0;
            while (k < 7 && strcmp(KINDS[k], kind))
                k++;
            if (k >= 7 || b < 0 || b >= layers) {
                fail_msg("policy line names no linear of this model: %s", line);
                break;
            }
            snprintf(fmt_of[b][k], sizeof fmt_of[b][k], "%s", fm);
            sum += view_cost(c, b, k, fm);
            int q = !strcmp(fm, "nvfp4") ? 18 : !strcmp(fm, "mxfp4") ? 17 : 64;
            bits += (double)kw[k] * q / 4.0;
            seen++;
        }
        fclose(f);
        assert_int_equal(seen, layers * 7);
        for (int b = 0; b < layers; b++) {
            assert_string_equal(fmt_of[b][0], fmt_of[b][1]);
            assert_string_equal(fmt_of[b][0], fmt_of[b][2]);
            assert_string_equal(fmt_of[b][4], fmt_of[b][5]);
        }
        assert_true(bits <= budgets[bi] * total_w);
        assert_true(fabs(bits / total_w - avg_bits) < 1e-4);
        /* predicted = the views' values summed (printed with 6 significant digits) */
        assert_true(fabs(sum - predicted) <= 1e-5 * fabs(sum) + 1e-12);

        /* brute force over 3^12 assignments */
        double best = INFINITY;
        int total = 1;
        for (int i = 0; i < NG; i++)
            total *= 3;
        for (int code = 0; code < total; code++) {
            int cc = code;
            double cost = 0, bb = 0;
            for (int i = 0; i < NG; i++, cc /= 3) {
                cost += gcost[i][cc % 3];
                bb += (double)gw[i] * qbits[cc % 3] / 4.0;
            }
            if (bb <= budgets[bi] * total_w && cost < best) best = cost;
        }
        if (fabs(best - sum) > 1e-12 * fabs(best) + 1e-15)
            fail_msg("budget %g: plan %.17g, brute force optimum %.17g", budgets[bi], sum, best);
    }
    /* a budget of 16 bits admits bf16 everywhere, and no format beats the reference: a
       negative measured cost (perplexity noise) counts as 0 and ties go to bf16 */
    static const char *const objectives[2] = {"kl_mean", "ppl"};
    for (int oi = 0; oi < 2; oi++) {
        char yaml[800], want[64];
        snprintf(yaml, sizeof yaml, "%s/plan16.yaml", dir);
        const char *plan[] = {"plan", "tiny",     "--budget-bits", "16",   "--objective",
                              objectives[oi], "-o", yaml, "--db", conninfo, "--validate", NULL};
        rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
        if (rc != 2) fail_msg("qsweep plan --objective %s exited %d:\n%s", objectives[oi], rc, out);
        snprintf(want, sizeof want, "predicted %s: 0 ", objectives[oi]);
        if (!strstr(out, want))
            fail_msg("budget 16, %s: no '%s' in\n%s", objectives[oi], want, out);
        /* nothing to validate: the plan is the baseline, whose grid submit refuses, so none is
           written or submitted */
        assert_non_null(strstr(out, "the budget keeps every linear unquantized: nothing to "
                                    "validate (no grid written"));
        assert_int_equal(access(yaml, F_OK), -1);
        assert_plan_all_bf16(out, layers * 7);
        assert_non_null(strstr(
            out, "of the plan: nothing to measure (every linear stays bf16, the reference)"));
        /* the tiny sweep's perplexity deltas include negative ones: the plan says so */
        if (oi == 1)
            assert_non_null(strstr(out, "linears measured a negative delta, counted as 0"));
    }

    /* a format listed twice in --formats is refused, naming it */
    {
        const char *plan[] = {"plan",        "tiny", "--budget-bits", "6", "--formats",
                              "nvfp4,nvfp4", "--db", conninfo,        NULL};
        rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
        if (rc == 0 || !strstr(out, "--formats: nvfp4 listed twice"))
            fail_msg("plan --formats nvfp4,nvfp4: exit %d:\n%s", rc, out);
    }

    /* component mode: one item per linear kind, all blocks together */
    const char *comp[] = {"run",       TINY,
                          "--workers", "2",
                          "--db",      conninfo,
                          "--set",     "name=tiny-components",
                          "--set",     "sensitivity.formats=[nvfp4]",
                          "--set",     "sensitivity.quantize=[weights]",
                          NULL};
    rc = fx_run(QSWEEP_BIN, comp, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run (components) exited %d:\n%s", rc, out);
    {
        const char *plan[] = {"plan", "tiny-components", "--budget-bits", "10", "--db", conninfo,
                              NULL};
        rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
        if (rc != 0) fail_msg("qsweep plan (components) exited %d:\n%s", rc, out);
        assert_non_null(strstr(out, "component-mode costs"));
        /* every kind is an item, and each block's linear of that kind takes its format */
        for (int k = 0; k < 7; k++) {
            char item[32];
            snprintf(item, sizeof item, "\n  %-12s ", KINDS[k]);
            assert_non_null(strstr(out, item));
        }
        double avg = strtod(strstr(out, "average bits per weight: ") + 25, NULL);
        assert_true(avg <= 10.0 + 1e-9 && avg >= 4.5);
        /* the written part names every linear */
        size_t lines = 0;
        for (const char *p = out; (p = strstr(p, "\n    \"")); p++)
            lines++;
        assert_int_equal((long)lines, layers * 7);
    }

    /* a budget below MXFP4 everywhere is refused, naming the fewest bits */
    const char *low[] = {"plan", "tiny", "--budget-bits", "4", "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, low, out, sizeof out), 2);
    assert_non_null(strstr(out, "4.2500"));

    /* an experiment that does not exist is named as such, as qsweep report does */
    const char *none[] = {"plan", "no-such-sweep", "--budget-bits", "8", "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, none, out, sizeof out), 2);
    assert_non_null(strstr(out, "no experiment named 'no-such-sweep'"));

    /* a synthetic model's shape comes from the engine's table (tiny-llama2: dim 64, so q has
       64 x 64 weights), not from a file */
    const char *synth[] = {"run",       TINY,
                           "--workers", "2",
                           "--db",      conninfo,
                           "--set",     "name=tiny-synthetic",
                           "--set",     "models=[{synthetic: tiny-llama2, seed: 1}]",
                           "--set",     "sensitivity.modes=[layer]",
                           "--set",     "sensitivity.formats=[nvfp4]",
                           "--set",     "sensitivity.quantize=[weights]",
                           NULL};
    rc = fx_run(QSWEEP_BIN, synth, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run (synthetic) exited %d:\n%s", rc, out);
    const char *splan[] = {"plan", "tiny-synthetic", "--budget-bits", "8", "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, splan, out, sizeof out);
    if (rc != 0) fail_msg("qsweep plan (synthetic) exited %d:\n%s", rc, out);
    char q_item[64];
    snprintf(q_item, sizeof q_item, "\n  %-12s %12d  ", "0.q", 64 * 64);
    if (!strstr(out, q_item)) fail_msg("no item 0.q of 4096 weights in\n%s", out);

    /* the model at the sweep's path is not the one swept (here: the recorded digest is
       another's): refused, naming the path and both digests */
    PGresult *u = PQexec(c, "UPDATE jobs SET spec = jsonb_set(spec, '{model,digest}', "
                            "to_jsonb(repeat('0', 64))) WHERE spec -> 'model' ->> 'path' "
                            "NOT LIKE 'synthetic:%'");
    assert_int_equal(PQresultStatus(u), PGRES_COMMAND_OK);
    PQclear(u);
    const char *moved[] = {"plan", "tiny", "--budget-bits", "8", "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, moved, out, sizeof out), 2);
    assert_non_null(strstr(out, "llama3_gqa is not the model the sweep measured"));
    assert_non_null(
        strstr(out, "0000000000000000000000000000000000000000000000000000000000000000"));
    PQfinish(c);
    qc_pgserver_destroy(pg);
    fx_rmtree(dir);
    free(dir);
}

/* The one value of v_sensitivity for (experiment, mode, part, format, metric). */
static double view_value(PGconn *c, const char *experiment, const char *mode, const char *part,
                         const char *format, const char *metric) {
    const char *p[5] = {experiment, mode, part, format, metric};
    PGresult *r = PQexecParams(c,
                               "SELECT value FROM v_sensitivity WHERE experiment = $1 AND mode = "
                               "$2 AND part = $3 AND format = $4 AND metric = $5",
                               5, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s %s %s %s %s: %d rows %s", experiment, mode, part, format, metric,
                 PQntuples(r), PQerrorMessage(c));
    double v = strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    return v;
}

/* The number after `label` in out, NAN when absent. */
static double number_after(const char *out, const char *label) {
    const char *p = strstr(out, label);
    return p ? strtod(p + strlen(label), NULL) : NAN;
}

/* Writes a policy grid over the tiny model and dataset with the map lines `policy`. */
static void policy_grid(const char *path, const char *name, const char *policy) {
    char text[2048];
    snprintf(text, sizeof text,
             "name: %s\nkind: sensitivity\nmodels: [%s/tests/engine/data/llama3_gqa]\n"
             "dataset: {tokens: %s/experiments/data/gpl3.bytes.tokens, ctx: 64, max_chunks: 8}\n"
             "sensitivity:\n  quantize: [weights]\n  modes: [policy]\n"
             "  metrics: [ppl, kl, top1, sqnr]\n  policy:\n%s",
             name, QSWEEP_SOURCE_DIR, QSWEEP_SOURCE_DIR, policy);
    assert_int_equal(fx_write_text(path, text), 0);
}

/* `qsweep plan --validate`: the plan's grid is submitted into the sweep's
 * database as one policy-mode eval job (its baseline the sweep's, already done); once run,
 * plan prints its measured KL next to the predicted sum and next to uniform NVFP4's measured
 * KL. The policy mode is checked against the modes it must agree with, bit for bit: every
 * linear in NVFP4 is the cumulative job over every block, one linear in MXFP4 is that
 * layer-mode job. */
static void test_validate_measures_the_plan(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-validate");
    assert_non_null(dir);
    sandbox(dir);
    static char out[1 << 16];
    const char *run[] = {"run",     TINY,
                         "--workers", "2",
                         "--set",   "sensitivity.modes=[layer,cumulative]",
                         "--set",   "sensitivity.formats=[nvfp4,mxfp4]",
                         "--set",   "sensitivity.quantize=[weights]",
                         NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    qc_pgserver *pg = NULL;
    PGconn *c = sandbox_db(dir, &pg);
    const char *conninfo = qc_pgserver_conninfo(pg);

    /* before: the plan is not measured; uniform NVFP4 is (the cumulative job over blocks
       0..2 quantizes every linear) */
    char yaml[800];
    snprintf(yaml, sizeof yaml, "%s/plan.yaml", dir);
    const char *plan[] = {"plan", "tiny", "--budget-bits", "6", "--uniform-groups",
                          "-o",   yaml,   "--validate",    "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
    if (rc != 0) fail_msg("qsweep plan --validate exited %d:\n%s", rc, out);
    const double cum_nv = view_value(c, "tiny", "cumulative", "2", "nvfp4", "kl_mean");
    const double cum_mx = view_value(c, "tiny", "cumulative", "2", "mxfp4", "kl_mean");
    double u_nv = number_after(out, "uniform nvfp4 (4.50 bits): predicted kl_mean ");
    assert_false(isnan(u_nv));
    double m_nv = number_after(strstr(out, "uniform nvfp4 (4.50 bits)"), ", measured ");
    double m_mx = number_after(strstr(out, "uniform mxfp4 (4.25 bits)"), ", measured ");
    printf("uniform nvfp4: measured %.6g (cumulative job %.6g); mxfp4 %.6g (%.6g)\n", m_nv, cum_nv,
           m_mx, cum_mx);
    assert_true(fabs(m_nv - cum_nv) <= 1e-5 * cum_nv);
    assert_true(fabs(m_mx - cum_mx) <= 1e-5 * cum_mx);
    if (!strstr(out, "measured kl_mean of the plan: not yet (policy "))
        fail_msg("no 'not yet' in\n%s", out);
    /* one new job, the baseline shared with the sweep */
    if (!strstr(out, "validation: experiment tiny-plan-6b-groups (id ") ||
        !strstr(out, "2 jobs: 1 new, 1 already done"))
        fail_msg("no validation submit line in\n%s", out);
    double predicted = number_after(out, "predicted kl_mean: ");
    /* pinned at submission to the path the plan read (the sweep's), so whichever worker is up
       first cannot measure it on another; the job keys above stay the grid's */
    if (!strstr(out, "validation: pinned to numerics path cpu-qsweep-fixed2, the one the plan read"))
        fail_msg("no pin line in\n%s", out);
    PGresult *pin = PQexec(c, "SELECT n.path FROM experiment_numerics n JOIN experiments e ON "
                              "e.id = n.experiment WHERE e.name = 'tiny-plan-6b-groups'");
    assert_int_equal(PQresultStatus(pin), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(pin), 1);
    assert_string_equal(PQgetvalue(pin, 0, 0), "cpu-qsweep-fixed2");
    PQclear(pin);
    /* a second --validate before the workers ran it: nothing new, and it says it is queued */
    rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
    if (rc != 0) fail_msg("second qsweep plan --validate exited %d:\n%s", rc, out);
    if (!strstr(out, "2 jobs: 0 new, 1 already done, 1 already queued") ||
        !strstr(out, "validation: already queued: the workers run it"))
        fail_msg("second --validate does not say the plan is queued:\n%s", out);

    /* the workers run it (qsweep run on the written grid: the same experiment, linked) */
    const char *vrun[] = {"run", yaml, "--workers", "1", "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, vrun, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run plan.yaml exited %d:\n%s", rc, out);
    const char *plan2[] = {"plan", "tiny", "--budget-bits", "6", "--uniform-groups",
                           "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, plan2, out, sizeof out);
    if (rc != 0) fail_msg("qsweep plan exited %d:\n%s", rc, out);
    const char *line = strstr(out, "measured kl_mean of the plan: ");
    assert_non_null(line);
    double m_plan = number_after(line, "measured kl_mean of the plan: ");
    char id[17] = "";
    const char *pid = strstr(line, "(policy ");
    assert_non_null(pid);
    memcpy(id, pid + 8, 16);
    double stored = view_value(c, "tiny-plan-6b-groups", "policy", id, "policy", "kl_mean");
    printf("plan at 6 bits: predicted %.6g, measured %.6g (view %.6g), uniform nvfp4 %.6g\n",
           predicted, m_plan, stored, m_nv);
    assert_true(fabs(m_plan - stored) <= 1e-5 * stored);
    assert_true(m_plan > 0);
    assert_true(fabs(number_after(line, "; predicted ") - predicted) <= 1e-5 * predicted);
    assert_true(fabs(number_after(line, "; uniform nvfp4 measured ") - cum_nv) <= 1e-5 * cum_nv);

    /* the stored map: the plan's non-bf16 linears, each in the format the grid file gives */
    const char *p1[1] = {id};
    PGresult *r = PQexecParams(c,
                               "SELECT spec -> 'policy', spec -> 'format_options' FROM jobs "
                               "WHERE spec ->> 'part' = $1",
                               1, NULL, p1, NULL, NULL, 0);
    assert_int_equal(PQntuples(r), 1);
    json_t *map = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
    json_t *opts = json_loads(PQgetvalue(r, 0, 1), 0, NULL);
    PQclear(r);
    assert_non_null(map);
    FILE *f = fopen(yaml, "r");
    assert_non_null(f);
    char l[256];
    size_t quantized = 0;
    while (fgets(l, sizeof l, f)) {
        char key[32], fm[16];
        if (sscanf(l, " \"%31[0-9a-z.]\": %15s", key, fm) != 2) continue;
        const char *got = json_string_value(json_object_get(map, key));
        if (!strcmp(fm, "bf16")) {
            assert_null(got);
            continue;
        }
        quantized++;
        if (!got || strcmp(got, fm)) fail_msg("%s: stored %s, plan %s", key, got, fm);
    }
    fclose(f);
    assert_int_equal(json_object_size(map), quantized);
    assert_true(quantized > 0);
    assert_non_null(json_object_get(opts, "nvfp4"));
    json_decref(map);
    json_decref(opts);

    /* policy mode agrees with the other modes to the last bit */
    char grid[800], lines[4096] = "";
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < 7; k++) {
            char e[64];
            snprintf(e, sizeof e, "    \"%d.%s\": nvfp4\n", b, KINDS[k]);
            strcat(lines, e);
        }
    snprintf(grid, sizeof grid, "%s/all-nvfp4.yaml", dir);
    policy_grid(grid, "all-nvfp4", lines);
    const char *arun[] = {"run", grid, "--workers", "1", "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, arun, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run all-nvfp4 exited %d:\n%s", rc, out);
    snprintf(grid, sizeof grid, "%s/one-down.yaml", dir);
    policy_grid(grid, "one-down", "    \"1.down\": mxfp4\n    \"2.q\": bf16\n");
    const char *orun[] = {"run", grid, "--workers", "1", "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, orun, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run one-down exited %d:\n%s", rc, out);
    static const char *const metrics[] = {"kl_mean", "kl_p99", "ppl", "top1"};
    for (size_t i = 0; i < 4; i++) {
        const char *p2[2] = {"all-nvfp4", metrics[i]};
        r = PQexecParams(c,
                         "SELECT value FROM v_sensitivity WHERE experiment = $1 AND mode = "
                         "'policy' AND metric = $2",
                         2, NULL, p2, NULL, NULL, 0);
        assert_int_equal(PQntuples(r), 1);
        double all = strtod(PQgetvalue(r, 0, 0), NULL);
        PQclear(r);
        p2[0] = "one-down";
        r = PQexecParams(c,
                         "SELECT value FROM v_sensitivity WHERE experiment = $1 AND mode = "
                         "'policy' AND metric = $2",
                         2, NULL, p2, NULL, NULL, 0);
        assert_int_equal(PQntuples(r), 1);
        double one = strtod(PQgetvalue(r, 0, 0), NULL);
        PQclear(r);
        double cum = view_value(c, "tiny", "cumulative", "2", "nvfp4", metrics[i]);
        double lay = view_value(c, "tiny", "layer", "1.down", "mxfp4", metrics[i]);
        if (all != cum || one != lay)
            fail_msg("%s: policy all-nvfp4 %.17g vs cumulative %.17g; policy 1.down %.17g vs "
                     "layer %.17g",
                     metrics[i], all, cum, one, lay);
    }
    /* and plan now finds uniform NVFP4 measured by the policy job: the same value */
    rc = fx_run(QSWEEP_BIN, plan2, out, sizeof out);
    if (rc != 0) fail_msg("qsweep plan exited %d:\n%s", rc, out);
    assert_true(fabs(number_after(strstr(out, "uniform nvfp4 (4.50 bits)"), ", measured ") -
                     cum_nv) <= 1e-5 * cum_nv);

    PQfinish(c);
    qc_pgserver_destroy(pg);
    fx_rmtree(dir);
    free(dir);
}

/* A sweep whose grid names its numerics path: the plan's grid names it too, so --validate
 * measures the plan on the path the costs were measured on (and under its job key), not on
 * whichever worker takes the job first. */
static void test_plan_keeps_the_sweeps_numerics(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-plan-numerics");
    assert_non_null(dir);
    sandbox(dir);
    static char out[1 << 16];
    const char *run[] = {"run",       TINY,
                         "--workers", "1",
                         "--set",     "sensitivity.modes=[layer]",
                         "--set",     "sensitivity.formats=[nvfp4]",
                         "--set",     "sensitivity.quantize=[weights]",
                         "--set",     "sensitivity.metrics=[kl]",
                         "--set",     "dataset.max_chunks=2",
                         "--set",     "+numerics=cpu",
                         NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    qc_pgserver *pg = NULL;
    PGconn *c = sandbox_db(dir, &pg);
    char yaml[800];
    snprintf(yaml, sizeof yaml, "%s/plan.yaml", dir);
    const char *plan[] = {"plan",       "tiny", "--budget-bits",          "6", "-o", yaml,
                          "--validate", "--db", qc_pgserver_conninfo(pg), NULL};
    rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
    if (rc != 0) fail_msg("qsweep plan --validate exited %d:\n%s", rc, out);
    static char text[1 << 14];
    FILE *f = fopen(yaml, "r");
    assert_non_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    if (!strstr(text, "\nnumerics: cpu\n"))
        fail_msg("the plan's grid has no numerics: cpu:\n%s", text);
    PGresult *r = PQexec(c, "SELECT coalesce(spec ->> 'numerics', '(none)') FROM jobs "
                            "WHERE spec ->> 'mode' = 'policy'");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    assert_string_equal(PQgetvalue(r, 0, 0), "cpu");
    PQclear(r);
    PQfinish(c);
    qc_pgserver_destroy(pg);
    fx_rmtree(dir);
    free(dir);
}

/* A plan reads one numerics path (cmd_plan_parts.h qsweep_plan_pick_path). The sweep's mxfp4
 * jobs are made to look run on a second path, with a KL of 0 that would win every linear if the
 * plan mixed the paths: the pinned path's plan has no mxfp4, --numerics of the other path has no
 * nvfp4, and without a pin the plan is refused, naming both paths and --numerics. */
static void test_plan_reads_one_numerics_path(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-plan-path");
    assert_non_null(dir);
    sandbox(dir);
    static char out[1 << 16];
    const char *run[] = {"run",       TINY,
                         "--workers", "1",
                         "--set",     "sensitivity.modes=[layer]",
                         "--set",     "sensitivity.formats=[nvfp4,mxfp4]",
                         "--set",     "sensitivity.quantize=[weights]",
                         "--set",     "sensitivity.metrics=[kl]",
                         "--set",     "dataset.max_chunks=2",
                         NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    qc_pgserver *pg = NULL;
    PGconn *c = sandbox_db(dir, &pg);
    const char *other = "cpu-openblas-0.3.21-haswell";
    char sql[1024];
    snprintf(sql, sizeof sql,
             "WITH mx AS (SELECT id FROM jobs WHERE spec ->> 'format' = 'mxfp4') "
             ", r AS (UPDATE results SET name = 'cpu_path.%s' WHERE name = "
             "'cpu_path.cpu-qsweep-fixed2' AND job IN (SELECT id FROM mx)) "
             ", k AS (UPDATE results SET value = 0 WHERE name = 'kl_mean' AND final AND job IN "
             "(SELECT id FROM mx)) "
             "UPDATE attempts SET numerics_path = '%s' WHERE job IN (SELECT id FROM mx)",
             other, other);
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    r = PQexec(c, "SELECT count(*) FROM experiment_numerics WHERE path = 'cpu-qsweep-fixed2'");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), "1");
    PQclear(r);
    char yaml[800], text[16384];
    snprintf(yaml, sizeof yaml, "%s/plan.yaml", dir);
    const char *conninfo = qc_pgserver_conninfo(pg);
    const char *plan[] = {"plan", "tiny", "--budget-bits", "8", "-o", yaml, "--db", conninfo, NULL,
                          NULL,   NULL};
    rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
    if (rc != 0) fail_msg("qsweep plan exited %d:\n%s", rc, out);
    char want[400];
    snprintf(want, sizeof want,
             "experiment 'tiny' ran on 2 numerics paths, cpu-qsweep-fixed2 (22 jobs), %s (21 "
             "jobs); the plan reads cpu-qsweep-fixed2 (the path the experiment is pinned to)",
             other);
    if (!strstr(out, want)) fail_msg("no '%s' in:\n%s", want, out);
    FILE *f = fopen(yaml, "r");
    assert_non_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    if (strstr(text, "mxfp4") || !strstr(text, "nvfp4"))
        fail_msg("the pinned path's plan:\n%s", text);

    plan[8] = "--numerics";
    plan[9] = other;
    rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
    if (rc != 0) fail_msg("qsweep plan --numerics exited %d:\n%s", rc, out);
    f = fopen(yaml, "r");
    assert_non_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    if (!strstr(text, "mxfp4") || strstr(text, "nvfp4"))
        fail_msg("the plan of --numerics %s:\n%s", other, text);

    plan[9] = "cuda-cc90-auto";
    rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
    assert_int_equal(rc, 2);
    if (!strstr(out, "--numerics cuda-cc90-auto: experiment 'tiny' has no results on that path"))
        fail_msg("--numerics of another path:\n%s", out);

    r = PQexec(c, "DELETE FROM experiment_numerics");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    plan[8] = NULL;
    rc = fx_run(QSWEEP_BIN, plan, out, sizeof out);
    assert_int_equal(rc, 2);
    snprintf(want, sizeof want,
             "experiment 'tiny' ran on 2 numerics paths, cpu-qsweep-fixed2 (22 jobs), %s (21 "
             "jobs), and is not pinned; a plan reads one path: give --numerics PATH",
             other);
    if (!strstr(out, want)) fail_msg("no '%s' in:\n%s", want, out);
    PQfinish(c);
    qc_pgserver_destroy(pg);
    fx_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv) {
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_dp_equals_brute_force_on_random_instances),
        cmocka_unit_test(test_bits_per_weight_count_block_scales),
        cmocka_unit_test(test_budget_of_uniform_nvfp4_admits_it),
        cmocka_unit_test(test_budget_below_every_assignment_is_refused),
        cmocka_unit_test(test_plan_of_tiny_layer_sweep_is_optimal),
        cmocka_unit_test(test_validate_measures_the_plan),
        cmocka_unit_test(test_plan_keeps_the_sweeps_numerics),
        cmocka_unit_test(test_plan_reads_one_numerics_path),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(all, NULL, NULL);
}
