/* End to end: experiments/tiny-methods.yaml (method: [rtn, gptq, mr-gptq]) through the real
 * `qsweep run` with a private PostgreSQL cluster and two workers: every job succeeds, the rtn
 * jobs name no method, the calibrated ones record what they calibrated on and what it cost,
 * and `qsweep results` and `qsweep report` show each method's jobs apart, `qsweep results`
 * also side by side. Then `qsweep plan` over the (method, format) pairs: its plan names a
 * method per linear, and the grid it writes (method per-linear) runs through `qsweep run`
 * and is read back as the plan measured. A hand-written per-linear grid that gives one
 * component one method in every block measures exactly what that method's component job
 * measured. A sweep of mr-gptq with and without scale_search plans the two as candidates of
 * their own (mr-gptq, mr-gptq+search), and the grid of its plan runs the variant it chose. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "fixtures.h"
#include "pgserver.h"

#define GRID QSWEEP_SOURCE_DIR "/experiments/tiny-methods.yaml"
#define JOBS 13 /* 1 baseline + 2 formats x 3 methods x 2 parts */

static double query_double(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    double v = strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    return v;
}

static long query_long(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fail_msg("%s: %s", sql, PQerrorMessage(c));
    long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* Runs qsweep with args (NULL-terminated) into out; fails the test with its output unless it
 * exits 0. */
static void qsweep_ok(const char *const *args, char *out, size_t cap) {
    int rc = fx_run(QSWEEP_BIN, args, out, cap);
    if (rc != 0) fail_msg("qsweep %s %s exited %d:\n%s", args[0], args[1], rc, out);
}

/* The whole of a text file into buf (static, cap bytes at most). */
static const char *read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot read %s", path);
    buf[fread(buf, 1, cap - 1, f)] = 0;
    fclose(f);
    return buf;
}

/* Points the private cluster, cache and logs of qsweep run into a fresh temporary folder;
 * returns it (the caller removes and frees it). */
static char *private_dirs(void) {
    char *dir = fx_tempdir("qsweep-methods");
    assert_non_null(dir);
    char buf[600];
    snprintf(buf, sizeof buf, "%s/data", dir);
    setenv("XDG_DATA_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/state", dir);
    setenv("XDG_STATE_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/cache", dir);
    setenv("XDG_CACHE_HOME", buf, 1);
    unsetenv("QSWEEP_DB");
    unsetenv("QSWEEP_BASELINE_DIR");
    unsetenv("COLUMNS");
    return dir;
}

/* The private cluster that qsweep run left in dir (private_dirs), started, and a connection
 * to it. */
typedef struct private_db {
    char pg_dir[700];
    qc_pgserver *pg;
    PGconn *c;
} private_db;

static void db_open(private_db *db, const char *dir) {
    snprintf(db->pg_dir, sizeof db->pg_dir, "%s/data/qsweep/pg", dir);
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(db->pg_dir, &db->pg, &err), QS_OK);
    db->c = PQconnectdb(qc_pgserver_conninfo(db->pg));
    assert_int_equal(PQstatus(db->c), CONNECTION_OK);
}

static void db_close(private_db *db) {
    PQfinish(db->c);
    qc_pgserver_destroy(db->pg);
    db->c = NULL;
    db->pg = NULL;
}

/* qsweep run of grid with one worker while the cluster is stopped (qsweep run starts it
 * itself), then the cluster open again. */
static void run_grid_reopen(private_db *db, const char *dir, const char *grid, char *out,
                            size_t cap) {
    db_close(db);
    const char *run[] = {"run", grid, "--workers", "1", NULL};
    qsweep_ok(run, out, cap);
    db_open(db, dir);
}

/* The line of out that starts with prefix after the first occurrence of after; fails the
 * test when there is none. line gets it without its newline. */
static void line_after(const char *out, const char *after, const char *prefix, char *line,
                       size_t cap) {
    const char *p = strstr(out, after);
    if (!p) fail_msg("no '%s' in:\n%s", after, out);
    for (p = strchr(p, '\n'); p && strncmp(p + 1, prefix, strlen(prefix)); p = strchr(p + 1, '\n'))
        ;
    if (!p) fail_msg("no line '%s...' after '%s' in:\n%s", prefix, after, out);
    size_t n = strcspn(p + 1, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(line, p + 1, n);
    line[n] = 0;
}

/* The label and format of the lowest mean KL measured for component part (a component-mode
 * job of experiment), in the planner's words: "<label> <format>" (kinds/method.h's rule). */
static void cheapest(PGconn *c, const char *experiment, const char *part, char *out, size_t cap) {
    char sql[700];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(j.spec ->> 'method', 'rtn') || CASE WHEN j.spec -> "
             "'method_options' ->> 'scale_search' = 'true' THEN '+search' ELSE '' END || ' ' || "
             "s.format FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id WHERE s.experiment = "
             "'%s' AND s.part = '%s' AND s.metric = 'kl_mean' ORDER BY s.value LIMIT 1",
             experiment, part);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

/* The method and format columns of the plan's row for item part ("  q    12288  gptq    nvfp4
 * ..."), spaces squeezed: "<label> <format>". */
static void plan_row(const char *out, const char *part, char *got, size_t cap) {
    char prefix[16], row[512], m[32], f[32];
    snprintf(prefix, sizeof prefix, "  %s ", part);
    line_after(out, "method       format", prefix, row, sizeof row);
    if (sscanf(row, "%*s %*s %31s %31s", m, f) != 2) fail_msg("plan row '%s'", row);
    snprintf(got, cap, "%s %s", m, f);
}

static void plan_row_method(const char *out, const char *part, char *label, size_t cap) {
    char got[80];
    plan_row(out, part, got, sizeof got);
    snprintf(label, cap, "%.*s", (int)strcspn(got, " "), got);
}

/* The plan at 12.5 bits per weight needs q and down both in FP4 (bf16 everywhere else, 16
 * bits: down alone in FP4 leaves at least 13.0 on average), and every FP4 pair of q with down
 * fits, so the exact plan takes for each of them its lowest-KL (label, format). */
static void plan_rows_are_cheapest(PGconn *c, const char *experiment, const char *out) {
    static const char *const parts[] = {"q", "down"};
    for (int p = 0; p < 2; p++) {
        char best[64], got[80];
        cheapest(c, experiment, parts[p], best, sizeof best);
        plan_row(out, parts[p], got, sizeof got);
        assert_string_equal(got, best);
    }
}

/* A per-linear grid named name over the tiny checkpoint: down of blocks 0, 1, 2 in MXFP4 by
 * the labels m0, m1, m2. */
static void write_per_linear_grid(const char *path, const char *name, const char *m0,
                                  const char *m1, const char *m2) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "name: %s\nkind: sensitivity\nmodels:\n  - %s/tests/engine/data/llama3_gqa\n"
             "dataset:\n  tokens: %s/experiments/data/gpl3.bytes.tokens\n  ctx: 64\n"
             "  max_chunks: 8\n  calibration: {chunks: 4}\nsensitivity:\n  quantize: [weights]\n"
             "  modes: [policy]\n  metrics: [ppl, kl, top1]\n  method:\n    - {name: per-linear, "
             "options: {linears: {\"0.down\": %s, \"1.down\": %s, \"2.down\": %s}}}\n"
             "  policy: {\"0.down\": mxfp4, \"1.down\": mxfp4, \"2.down\": mxfp4}\n",
             name, QSWEEP_SOURCE_DIR, QSWEEP_SOURCE_DIR, m0, m1, m2);
    assert_int_equal(fx_write_text(path, yaml), 0);
}

/* Every line of the nth fenced block (0 first) under heading in docs/methods.md, but its "..."
 * lines, is a line of out: the page's figures are what the commands print, digit for digit. */
static void doc_block_printed(const char *heading, int nth, const char *out) {
    FILE *f = fopen(QSWEEP_SOURCE_DIR "/docs/methods.md", "r");
    assert_non_null(f);
    static char doc[1 << 17];
    doc[fread(doc, 1, sizeof doc - 1, f)] = 0;
    fclose(f);
    /* fences alternate opening and closing: block nth opens at fence 2 nth */
    const char *p = strstr(doc, heading), *fence[2] = {NULL, NULL};
    for (int i = 0; p && i <= 2 * nth + 1; i++) {
        p = strstr(p + 1, "\n```");
        if (i >= 2 * nth) fence[i - 2 * nth] = p;
    }
    if (!fence[0] || !fence[1] || !strchr(fence[0] + 1, '\n'))
        fail_msg("docs/methods.md: no block %d under '%s'", nth, heading);
    p = strchr(fence[0] + 1, '\n') + 1;
    int lines = 0;
    for (; p && p < fence[1]; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        char line[512];
        size_t n = strcspn(p, "\n");
        if (n >= sizeof line) n = sizeof line - 1;
        memcpy(line, p, n);
        line[n] = 0;
        if (!n || strstr(line, "...")) continue;
        /* a whole line of out, not the start of a longer one */
        const char *hit = out;
        while ((hit = strstr(hit, line)) &&
               ((hit > out && hit[-1] != '\n') || (hit[n] && hit[n] != '\n')))
            hit++;
        if (!hit)
            fail_msg("docs/methods.md, under '%s': the line\n%s\nis not printed:\n%s", heading,
                     line, out);
        lines++;
    }
    assert_true(lines > 2);
}

static void run_methods_grid_end_to_end(void **state) {
    (void)state;
    char *dir = private_dirs();
    static char out[1 << 16];
    const char *run[] = {"run", GRID, "--workers", "2", NULL};
    qsweep_ok(run, out, sizeof out);
    char want[64];
    snprintf(want, sizeof want, "%d jobs: %d new", JOBS, JOBS);
    if (!strstr(out, want)) fail_msg("expected '%s' in:\n%s", want, out);

    private_db db;
    db_open(&db, dir);
    PGconn *c = db.c;
    const char *conninfo = qc_pgserver_conninfo(db.pg);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), JOBS);
    /* rtn is never named; each other method on 2 formats x 2 parts */
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE kind = 'eval' AND NOT spec ? "
                                   "'method'"),
                     4);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE spec ->> 'method' = 'gptq'"),
                     4);
    assert_int_equal(query_long(c,
                                "SELECT count(*) FROM jobs WHERE spec ->> 'method' = 'mr-gptq' AND "
                                "(spec -> 'calibration' ->> 'chunks')::int = 4"),
                     4);
    /* what a method's result calibrated on and what it cost: 4 chunks of 64 tokens per
     * calibrated block (3 blocks), the calibration's time and the method's whole time */
    assert_int_equal(query_long(c, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE j.spec ? 'method' AND r.final AND r.name = "
                                   "'calibration_tokens' AND r.value = 768"),
                     8);
    assert_int_equal(query_long(c, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE j.spec ? 'method' AND r.final AND r.name IN "
                                   "('time_method_s', 'time_calibration_s') AND r.value > 0"),
                     16);
    assert_int_equal(query_long(c, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE NOT j.spec ? 'method' AND r.name LIKE '%calibration%'"),
                     0);
    const char *results[] = {"results", "tiny-methods", "--db", conninfo, NULL};
    qsweep_ok(results, out, sizeof out);
    printf("%s", out);
    assert_non_null(strstr(out, "\"method\": \"gptq\""));
    assert_non_null(strstr(out, "\"method\": \"mr-gptq\""));
    /* side by side: NVFP4's q row holds the three methods' KL, the lowest starred */
    char line[512];
    line_after(out, "mean KL divergence by method", "  part", line, sizeof line);
    assert_non_null(strstr(line, "rtn"));
    assert_true(strstr(line, "rtn") < strstr(line, "gptq") &&
                strstr(line, "gptq") < strstr(line, "mr-gptq"));
    line_after(out, "mean KL divergence by method", "llama3_gqa  nvfp4", line, sizeof line);
    line_after(strstr(out, "mean KL divergence by method"), line, "  q ", line, sizeof line);
    static const char *const methods[] = {"rtn", "gptq", "mr-gptq"};
    double kl[3], lowest = 1e30;
    for (int m = 0; m < 3; m++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT s.value FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id WHERE "
                 "s.experiment = 'tiny-methods' AND s.format = 'nvfp4' AND s.part = 'q' AND "
                 "s.metric = 'kl_mean' AND coalesce(j.spec ->> 'method', 'rtn') = '%s'",
                 methods[m]);
        kl[m] = query_double(c, sql);
        lowest = kl[m] < lowest ? kl[m] : lowest;
    }
    for (int m = 0; m < 3; m++) {
        snprintf(want, sizeof want, " %s%.6f", kl[m] == lowest ? "*" : "", kl[m]);
        if (!strstr(line, want)) fail_msg("expected '%s' in the row '%s'", want, line);
    }
    doc_block_printed("## Methods side by side", 0, out);

    /* the plan: 12.5 bits per weight need q and down both in FP4 (bf16 everywhere else, 16
     * bits: down alone in FP4 leaves at least 13.0 on average), and every FP4 pair of q with
     * down fits, so the exact plan takes for each of them its lowest-KL (method, format) */
    char plan_path[700];
    snprintf(plan_path, sizeof plan_path, "%s/plan.yaml", dir);
    const char *plan[] = {"plan",    "tiny-methods", "--budget-bits", "12.5", "-o",
                          plan_path, "--db",         conninfo,        NULL};
    qsweep_ok(plan, out, sizeof out);
    printf("%s", out);
    assert_non_null(strstr(out, "method       format"));
    doc_block_printed("## Plans over methods", 1, out);
    plan_rows_are_cheapest(c, "tiny-methods", out);
    static char grid[1 << 15];
    read_text(plan_path, grid, sizeof grid);
    assert_non_null(strstr(grid, "- {name: per-linear, options: {"));
    assert_non_null(strstr(grid, "calibration: {chunks: 4}"));
    assert_non_null(strstr(grid, "modes: [policy]"));
    /* --methods refusals: an empty list or name, per-linear, an unknown name exit 1 naming
     * the option and store nothing; a chosen list names the plan's experiment and header */
    long n_jobs = query_long(c, "SELECT count(*) FROM jobs"),
         n_exps = query_long(c, "SELECT count(*) FROM experiments");
    static const char *const bad[][2] = {{"", "an empty method name"},
                                         {"rtn,,gptq", "an empty method name"},
                                         {"per-linear", "not a candidate"},
                                         {"gptq,foo", "unknown method 'foo'"},
                                         {"gptq+search", "unknown method 'gptq+search'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *refused[] = {"plan",    "tiny-methods", "--budget-bits", "12.5",   "--methods",
                                 bad[i][0], "--validate",   "--db",          conninfo, NULL};
        int rc = fx_run(QSWEEP_BIN, refused, out, sizeof out);
        if (rc != 1 || !strstr(out, "--methods '") || !strstr(out, bad[i][1]))
            fail_msg("qsweep plan --methods '%s': exit %d:\n%s", bad[i][0], rc, out);
    }
    /* a method the sweep did not run: exit 2 naming it (not a budget no assignment meets) */
    const char *unrun[] = {
        "plan",       "tiny-methods", "--budget-bits", "12.5", "--methods", "gptq,smoothquant",
        "--validate", "--db",         conninfo,        NULL};
    int rc = fx_run(QSWEEP_BIN, unrun, out, sizeof out);
    if (rc != 2 || !strstr(out, "no component-mode results of method smoothquant"))
        fail_msg("qsweep plan --methods gptq,smoothquant: exit %d:\n%s", rc, out);
    char mplan_path[700];
    snprintf(mplan_path, sizeof mplan_path, "%s/plan-rtn-gptq.yaml", dir);
    const char *mplan[] = {"plan",     "tiny-methods", "--budget-bits", "12.5", "--methods",
                           "rtn,gptq", "-o",           mplan_path,      "--db", conninfo,
                           NULL};
    qsweep_ok(mplan, out, sizeof out);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs"), n_jobs);
    assert_int_equal(query_long(c, "SELECT count(*) FROM experiments"), n_exps);
    {
        static char text[1 << 15];
        read_text(mplan_path, text, sizeof text);
        assert_non_null(strstr(text, "--objective kl_mean --methods rtn,gptq\n"));
        assert_non_null(strstr(text, "\nname: tiny-methods-plan-12.5b-methods-rtn+gptq\n"));
    }
    {
        /* gptq ran in one setting, labelled "gptq": naming it by an option it has (damp 0.01,
         * the default) is the same candidate and the same plan; another value names none */
        static char by_label[1 << 15], by_option[1 << 15];
        const char *a[] = {"plan",     "tiny-methods", "--budget-bits", "12.5", "--methods",
                           "rtn,gptq", "--db",         conninfo,        NULL};
        const char *b[] = {"plan", "tiny-methods", "--budget-bits",
                           "12.5", "--methods",    "rtn,gptq+damp=0.010",
                           "--db", conninfo,       NULL};
        qsweep_ok(a, by_label, sizeof by_label);
        qsweep_ok(b, by_option, sizeof by_option);
        const char *pa = strstr(by_label, "\npredicted "), *pb = strstr(by_option, "\npredicted ");
        assert_non_null(pa);
        assert_non_null(pb);
        if (strcspn(pa + 1, "\n") != strcspn(pb + 1, "\n") ||
            strncmp(pa, pb, strcspn(pa + 1, "\n")))
            fail_msg("--methods gptq+damp=0.010 planned otherwise than gptq:\n%s\n---\n%s",
                     by_label, by_option);
        b[5] = "rtn,gptq+damp=0.5";
        rc = fx_run(QSWEEP_BIN, b, out, sizeof out);
        if (rc != 2 || !strstr(out, "no component-mode results of method gptq+damp=0.5"))
            fail_msg("qsweep plan --methods rtn,gptq+damp=0.5: exit %d:\n%s", rc, out);
    }
    assert_non_null(strstr(grid, "\nname: tiny-methods-plan-12.5b\n"));
    run_grid_reopen(&db, dir, plan_path, out, sizeof out);
    c = db.c;
    conninfo = qc_pgserver_conninfo(db.pg);
    /* one policy job of method per-linear, q and down of the 3 blocks named, calibrated on
     * the 4 chunks in each block */
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded' AND "
                                   "spec ->> 'method' = 'per-linear' AND spec ->> 'mode' = "
                                   "'policy'"),
                     1);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs j, jsonb_object_keys(j.spec -> "
                                   "'method_options' -> 'linears') k WHERE j.spec ->> 'method' "
                                   "= 'per-linear'"),
                     6);
    assert_int_equal(query_long(c, "SELECT r.value FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE j.spec ->> 'method' = 'per-linear' AND r.final AND "
                                   "r.name = 'calibration_tokens'"),
                     768);
    double measured = query_double(c, "SELECT s.value FROM v_sensitivity s JOIN jobs j ON j.id = "
                                      "s.job_id WHERE j.spec ->> 'method' = 'per-linear' AND "
                                      "s.metric = 'kl_mean'");
    const char *replan[] = {"plan",    "tiny-methods", "--budget-bits", "12.5", "-o",
                            plan_path, "--db",         conninfo,        NULL};
    qsweep_ok(replan, out, sizeof out);
    snprintf(want, sizeof want, "measured kl_mean of the plan: %.6g (policy", measured);
    if (!strstr(out, want)) fail_msg("expected '%s' in:\n%s", want, out);

    /* per-linear with one method on one component in every block is that method's component
     * job: the same weights, the same calibration, the same KL to the last bit */
    char hand[700];
    snprintf(hand, sizeof hand, "%s/per-linear.yaml", dir);
    write_per_linear_grid(hand, "tiny-per-linear", "mr-gptq", "mr-gptq", "mr-gptq");
    run_grid_reopen(&db, dir, hand, out, sizeof out);
    c = db.c;
    conninfo = qc_pgserver_conninfo(db.pg);
    double by_linear = query_double(c, "SELECT s.value FROM v_sensitivity s WHERE s.experiment = "
                                       "'tiny-per-linear' AND s.metric = 'kl_mean'");
    double component = query_double(
        c, "SELECT s.value FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id WHERE "
           "s.experiment = 'tiny-methods' AND s.format = 'mxfp4' AND s.part = 'down' AND "
           "s.metric = 'kl_mean' AND j.spec ->> 'method' = 'mr-gptq'");
    assert_true(by_linear == component);
    /* the HTML report keeps each method's jobs apart too: their options name it */
    char html[800];
    snprintf(html, sizeof html, "%s/report.html", dir);
    const char *report[] = {"report", "tiny-methods", "-o", html, "--db", conninfo, NULL};
    qsweep_ok(report, out, sizeof out);
    static char page[1 << 22];
    assert_non_null(strstr(read_text(html, page, sizeof page), "mr-gptq"));
    db_close(&db);
    fx_rmtree(dir);
    free(dir);
}

/* mr-gptq with and without scale_search in one sweep: `qsweep results` and `qsweep plan` name
 * them mr-gptq and mr-gptq+search (kinds/method_label.h qs_method_label), the plan takes for q and
 * down each its lowest-KL (label, format), --methods picks either variant by its label, and
 * the grid the plan writes runs the variant it chose: its per-linear job names, linear by
 * linear, the plan's labels and is read back as the plan measured. A per-linear grid giving
 * down mr-gptq+search in every block measures what the mr-gptq+search component job measured,
 * bit for bit, and one giving the blocks different variants keeps its labels and runs. */
static void plan_tells_mr_gptq_from_mr_gptq_search(void **state) {
    (void)state;
    char *dir = private_dirs();
    static char out[1 << 16];
    const char *run[] = {"run",
                         GRID,
                         "--set",
                         "name=tiny-methods-search",
                         "--set",
                         "sensitivity.method=[rtn, mr-gptq, {name: mr-gptq, options: "
                         "{scale_search: true}}]",
                         "--workers",
                         "2",
                         NULL};
    qsweep_ok(run, out, sizeof out);
    if (!strstr(out, "13 jobs: 13 new")) fail_msg("expected 13 new jobs in:\n%s", out);
    private_db db;
    db_open(&db, dir);
    const char *conninfo = qc_pgserver_conninfo(db.pg);
    const char *results[] = {"results", "tiny-methods-search", "--db", conninfo, NULL};
    qsweep_ok(results, out, sizeof out);
    char line[512];
    line_after(out, "mean KL divergence by method", "  part", line, sizeof line);
    if (!strstr(line, " mr-gptq ") || !strstr(line, " mr-gptq+search") ||
        strstr(line, " mr-gptq ") > strstr(line, " mr-gptq+search") || strchr(line, '{'))
        fail_msg("columns rtn, mr-gptq, mr-gptq+search expected: '%s'", line);

    char plan_path[700];
    snprintf(plan_path, sizeof plan_path, "%s/plan.yaml", dir);
    const char *plan[] = {
        "plan", "tiny-methods-search", "--budget-bits", "12.5", "-o", plan_path, "--db", conninfo,
        NULL};
    qsweep_ok(plan, out, sizeof out);
    printf("%s", out);
    assert_non_null(strstr(out, "  mr-gptq/nvfp4 "));
    assert_non_null(strstr(out, "  mr-gptq+search/nvfp4 "));
    assert_null(strstr(out, "measured twice"));
    plan_rows_are_cheapest(db.c, "tiny-methods-search", out);
    char q_label[32], down_label[32];
    plan_row_method(out, "q", q_label, sizeof q_label);
    plan_row_method(out, "down", down_label, sizeof down_label);

    /* --methods by label: mr-gptq alone writes no scale_search, mr-gptq+search alone writes
       it for every mr-gptq linear */
    static const char *const pick[][3] = {{"rtn,mr-gptq", "mr-gptq", "\"scale_search\""},
                                          {"rtn,mr-gptq+search", "mr-gptq+search", NULL}};
    for (int i = 0; i < 2; i++) {
        char path[760];
        snprintf(path, sizeof path, "%s/plan-%d.yaml", dir, i);
        const char *picked[] = {"plan",
                                "tiny-methods-search",
                                "--budget-bits",
                                "12.5",
                                "--methods",
                                pick[i][0],
                                "-o",
                                path,
                                "--db",
                                conninfo,
                                NULL};
        qsweep_ok(picked, out, sizeof out);
        char got[32];
        plan_row_method(out, "down", got, sizeof got);
        assert_string_equal(got, pick[i][1]);
        static char text[1 << 15];
        read_text(path, text, sizeof text);
        if (pick[i][2] ? !!strstr(text, pick[i][2]) : !strstr(text, "\"scale_search\":true"))
            fail_msg("--methods %s wrote:\n%s", pick[i][0], text);
    }

    /* the plan's grid runs the variants the plan chose, linear by linear */
    run_grid_reopen(&db, dir, plan_path, out, sizeof out);
    conninfo = qc_pgserver_conninfo(db.pg);
    static const char *const parts[] = {"q", "down"};
    const char *chosen[] = {q_label, down_label};
    for (int p = 0; p < 2; p++) {
        char sql[700];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM jobs j, jsonb_each_text(j.spec -> 'method_options' -> "
                 "'linears') l WHERE j.spec ->> 'method' = 'per-linear' AND l.key LIKE '%%.%s' "
                 "AND CASE WHEN l.value = 'mr-gptq' AND (j.spec -> 'method_options' ->> "
                 "'scale_search') = 'true' THEN 'mr-gptq+search' ELSE l.value END = '%s'",
                 parts[p], chosen[p]);
        assert_int_equal(query_long(db.c, sql), 3);
    }
    double measured = query_double(db.c, "SELECT s.value FROM v_sensitivity s JOIN jobs j ON "
                                         "j.id = s.job_id WHERE j.spec ->> 'method' = "
                                         "'per-linear' AND s.metric = 'kl_mean'");
    const char *replan[] = {
        "plan", "tiny-methods-search", "--budget-bits", "12.5", "-o", plan_path, "--db", conninfo,
        NULL};
    qsweep_ok(replan, out, sizeof out);
    char want[96];
    snprintf(want, sizeof want, "measured kl_mean of the plan: %.6g (policy", measured);
    if (!strstr(out, want)) fail_msg("expected '%s' in:\n%s", want, out);

    /* a per-linear grid by label: all of down searched is the +search component job; blocks
       of both variants keep their labels */
    char hand[700];
    snprintf(hand, sizeof hand, "%s/per-linear.yaml", dir);
    write_per_linear_grid(hand, "tiny-per-linear-search", "mr-gptq+search", "mr-gptq+search",
                          "mr-gptq+search");
    run_grid_reopen(&db, dir, hand, out, sizeof out);
    double by_linear = query_double(db.c, "SELECT s.value FROM v_sensitivity s WHERE "
                                          "s.experiment = 'tiny-per-linear-search' AND s.metric "
                                          "= 'kl_mean'");
    double component = query_double(
        db.c, "SELECT s.value FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id WHERE "
              "s.experiment = 'tiny-methods-search' AND s.format = 'mxfp4' AND s.part = 'down' "
              "AND s.metric = 'kl_mean' AND j.spec -> 'method_options' ->> 'scale_search' = "
              "'true'");
    assert_true(by_linear == component);
    write_per_linear_grid(hand, "tiny-per-linear-mixed", "mr-gptq+search", "mr-gptq",
                          "mr-gptq+search");
    run_grid_reopen(&db, dir, hand, out, sizeof out);
    assert_int_equal(query_long(db.c, "SELECT count(*) FROM jobs WHERE state = 'succeeded' AND "
                                      "spec -> 'method_options' -> 'linears' = '{\"0.down\": "
                                      "\"mr-gptq+search\", \"1.down\": \"mr-gptq\", \"2.down\": "
                                      "\"mr-gptq+search\"}' AND NOT spec -> 'method_options' ? "
                                      "'scale_search'"),
                     1);
    double mixed = query_double(db.c, "SELECT s.value FROM v_sensitivity s WHERE s.experiment = "
                                      "'tiny-per-linear-mixed' AND s.metric = 'kl_mean'");
    assert_true(mixed != by_linear);
    db_close(&db);
    fx_rmtree(dir);
    free(dir);
}

/* GPTQ on each block alone (block mode), NVFP4, through qsweep run with one
 * worker, the prefix cache as cache_mb says ("0": off); into kl[job's block] the KL of each,
 * and the calibration blocks the jobs skipped. */
static long block_gptq_run(const char *cache_mb, double kl[3]) {
    char *dir = private_dirs();
    setenv("QSWEEP_PREFIX_CACHE_MB", cache_mb, 1);
    static char out[1 << 16];
    char grid[700], yaml[1024];
    snprintf(grid, sizeof grid, "%s/blocks.yaml", dir);
    snprintf(yaml, sizeof yaml,
             "name: tiny-methods-blocks\nkind: sensitivity\nmodels:\n  - %s/tests/engine/data/"
             "llama3_gqa\ndataset:\n  tokens: %s/experiments/data/gpl3.bytes.tokens\n  ctx: 64\n"
             "  max_chunks: 8\n  calibration: {chunks: 4}\nsensitivity:\n  formats: [nvfp4]\n"
             "  method: [gptq]\n  quantize: [weights]\n  modes: [block]\n  metrics: [kl]\n",
             QSWEEP_SOURCE_DIR, QSWEEP_SOURCE_DIR);
    assert_int_equal(fx_write_text(grid, yaml), 0);
    const char *run[] = {"run", grid, "--workers", "1", NULL};
    qsweep_ok(run, out, sizeof out);
    unsetenv("QSWEEP_PREFIX_CACHE_MB");
    private_db db;
    db_open(&db, dir);
    PGconn *c = db.c;
    for (int b = 0; b < 3; b++) {
        char sql[400];
        snprintf(sql, sizeof sql,
                 "SELECT s.value FROM v_sensitivity s WHERE s.experiment = "
                 "'tiny-methods-blocks' AND s.part = '%d' AND s.metric = 'kl_mean'",
                 b);
        kl[b] = query_double(c, sql);
    }
    /* each job calibrates one block: one pass of 4 chunks of 64 tokens */
    assert_int_equal(query_long(c, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE r.final AND r.name = 'calibration_tokens' AND r.value "
                                   "= 256"),
                     3);
    long skipped = query_long(c, "SELECT sum(r.value)::bigint FROM results r WHERE r.final AND "
                                 "r.name = 'calibration_blocks_skipped'");
    db_close(&db);
    fx_rmtree(dir);
    free(dir);
    return skipped;
}

/* Jobs of one model and calibration whose quantized block comes after the same unquantized
 * prefix share their calibration forwards through the model's prefix cache: of the block jobs
 * of blocks 1 and 2, whichever runs second starts its 4 calibration chunks at block 1 from the
 * residuals the other stored (4 blocks skipped, in either order; block 0's job has no prefix),
 * and the KL of every job is the one it measures with the cache off, bit for bit. */
static void calibration_is_shared_across_jobs(void **state) {
    (void)state;
    double shared[3], alone[3];
    assert_int_equal(block_gptq_run("1024", shared), 4);
    assert_int_equal(block_gptq_run("0", alone), 0);
    for (int b = 0; b < 3; b++)
        if (shared[b] != alone[b])
            fail_msg("block %d: KL %.17g with the calibration shared, %.17g without", b, shared[b],
                     alone[b]);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(run_methods_grid_end_to_end),
                                       cmocka_unit_test(plan_tells_mr_gptq_from_mr_gptq_search),
                                       cmocka_unit_test(calibration_is_shared_across_jobs)};
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
