/* qsweep report, end to end: the tiny grid
 * (experiments/tiny.yaml) run in layer, component and block modes through the real binary
 * and a private PostgreSQL cluster, then `qsweep report`, then the page rendered by headless
 * Chromium (Debian's chromium package):
 *   - the DOM after the page's script ran has one heatmap cell / bar / strip cell per eval job
 *     of the experiment, and its block x component heatmap one cell per layer-mode job;
 *   - three sampled cells carry the views' values (v_sensitivity) exactly, for each metric
 *     the page can colour by, and "#metric=top1" switches the colour metric;
 *   - a screenshot is not blank: a real PNG, and several times the size of the screenshot
 *     of an empty page of the same size taken in the same run;
 *   - an unknown experiment is refused with exit code 2 and no file written;
 *   - a grid of three methods (experiments/tiny-methods.yaml) gets its component x method
 *     heatmaps: one "mcell" per job, each carrying the view's values, the colours on one
 *     scale across methods and formats;
 *   - two settings of one method (two damps) are two columns, each headed by its setting label
 *     (gptq+damp=0.01, gptq+damp=0.1), each job's cell in its own setting's column. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "fixtures.h"
#include "pgserver.h"

#define TINY QSWEEP_SOURCE_DIR "/experiments/tiny.yaml"
#define TINY_METHODS QSWEEP_SOURCE_DIR "/experiments/tiny-methods.yaml"
#define CHROMIUM "/usr/bin/chromium"
/* A description that would end the page's data element early if it were not escaped. */
#define HOSTILE "</script><script>document.title='x'</script> & <b>bold</b>"

typedef struct env {
    char *dir;
    char pg_dir[512];
    qc_pgserver *pg;
    PGconn *c;
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    e->dir = fx_tempdir("qsweep-report");
    if (!e->dir) {
        free(e);
        return -1;
    }
    char buf[600];
    snprintf(buf, sizeof buf, "%s/data", e->dir);
    setenv("XDG_DATA_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/state", e->dir);
    setenv("XDG_STATE_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/cache", e->dir);
    setenv("XDG_CACHE_HOME", buf, 1);
    /* chromium writes its profile under HOME */
    setenv("HOME", e->dir, 1);
    unsetenv("QSWEEP_DB");
    unsetenv("QSWEEP_BASELINE_DIR");
    snprintf(e->pg_dir, sizeof e->pg_dir, "%s/data/qsweep/pg", e->dir);
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    PQfinish(e->c);
    qc_pgserver_destroy(e->pg);
    fx_rmtree(e->dir);
    free(e->dir);
    free(e);
    return 0;
}

/* Runs argv[0] (a path) with stdout into out_path and stderr into err_path; returns its exit
 * code, 128 + signal, or -1. */
static int run_to(const char *const *argv, const char *out_path, const char *err_path) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The whole file at path, NUL-terminated (caller frees); *len its size. Fails the test when
 * it cannot be read. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail_msg("cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    if (len) *len = got;
    return buf;
}

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static long query_long(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fail_msg("%s: %s", sql, PQerrorMessage(c));
    long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* Headless Chromium on the page at file path html (URL fragment frag, may be ""), writing
 * what the renderer made of it: the DOM after the script ran (dump != NULL, into dump) or a
 * screenshot (png != NULL). Chromium runs as root here, hence --no-sandbox. */
static void chromium(const env *e, const char *html, const char *frag, const char *dump,
                     const char *png) {
    char url[1200], shot[1200], log[700], out[700];
    snprintf(url, sizeof url, "file://%s%s", html, frag);
    snprintf(shot, sizeof shot, "--screenshot=%s", png ? png : "");
    snprintf(log, sizeof log, "%s/chromium.log", e->dir);
    snprintf(out, sizeof out, "%s/chromium.out", e->dir);
    const char *argv[] = {CHROMIUM,
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--no-first-run",
                          "--hide-scrollbars",
                          "--window-size=1200,1400",
                          "--virtual-time-budget=10000",
                          png ? shot : "--dump-dom",
                          url,
                          NULL};
    int rc = run_to(argv, dump ? dump : out, log);
    if (rc != 0) {
        char *l = slurp(log, NULL);
        fail_msg("chromium exited %d on %s:\n%s", rc, url, l);
    }
}

/* The value of attribute attr of the first element in dom with data-job="job"; fails the
 * test when there is none. */
static void cell_attr(const char *dom, long job, const char *attr, char *out, size_t cap) {
    char key[64];
    snprintf(key, sizeof key, "data-job=\"%ld\"", job);
    const char *p = strstr(dom, key);
    if (!p) fail_msg("no cell with %s in the rendered page", key);
    const char *start = p;
    while (start > dom && *start != '<')
        start--;
    const char *end = strchr(p, '>');
    char pat[80];
    snprintf(pat, sizeof pat, " %s=\"", attr);
    const char *a = strstr(start, pat);
    if (!a || a > end) fail_msg("cell %s has no %s", key, attr);
    a += strlen(pat);
    size_t n = strcspn(a, "\"");
    if (n >= cap) n = cap - 1;
    memcpy(out, a, n);
    out[n] = 0;
}

/* Compares the page's value for (job, metric column of the report query) with the view's:
 * exactly for a value the view holds, within rel_tol for one the query derives (the mean
 * SQNR: avg() may add in another order when the plan differs). */
static void assert_cell_near_view_of(PGconn *c, const char *experiment, const char *dom, long job,
                                     const char *attr, const char *sql_value, double rel_tol) {
    char sql[1024], got[128];
    snprintf(sql, sizeof sql,
             "SELECT %s FROM v_sensitivity s WHERE s.experiment = '%s' AND s.job_id = %ld",
             sql_value, experiment, job);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) < 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    const char *want = PQgetvalue(r, 0, 0);
    cell_attr(dom, job, attr, got, sizeof got);
    if (PQgetisnull(r, 0, 0)) {
        assert_string_equal(got, "");
    } else {
        double w = strtod(want, NULL), g = strtod(got, NULL);
        /* both sides print the double shortest round-trip: the same number, exactly */
        if (!*got || !(fabs(w - g) <= rel_tol * fabs(w)))
            fail_msg("job %ld %s: page %s, view %s", job, attr, got, want);
    }
    PQclear(r);
}

static void assert_cell_near_view(PGconn *c, const char *dom, long job, const char *attr,
                                  const char *sql_value, double rel_tol) {
    assert_cell_near_view_of(c, "tiny", dom, job, attr, sql_value, rel_tol);
}

static void assert_cell_equals_view(PGconn *c, const char *dom, long job, const char *attr,
                                    const char *sql_value) {
    assert_cell_near_view(c, dom, job, attr, sql_value, 0.0);
}

static void test_report_of_tiny_sweep_renders_the_views_values(void **state) {
    env *e = *state;
    static char out[1 << 16];
    /* 1 baseline + nvfp4 W4A16 x (7 components + 3 blocks x 7 layers + 3 blocks) */
    const char *run[] = {"run",       TINY,
                         "--workers", "2",
                         "--set",     "sensitivity.modes=[component,layer,block]",
                         "--set",     "sensitivity.formats=[nvfp4]",
                         "--set",     "sensitivity.quantize=[weights]",
                         "--set",     "description=" HOSTILE,
                         NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);

    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK);
    const char *conninfo = qc_pgserver_conninfo(e->pg);
    e->c = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(e->c), CONNECTION_OK);
    long evals = query_long(e->c, "SELECT count(*) FROM jobs WHERE kind = 'eval'");
    assert_int_equal(evals, 31);
    assert_int_equal(
        query_long(e->c,
                   "SELECT count(DISTINCT job_id) FROM v_sensitivity WHERE experiment = 'tiny'"),
        evals);

    char html[600], dom_path[600];
    snprintf(html, sizeof html, "%s/report.html", e->dir);
    snprintf(dom_path, sizeof dom_path, "%s/dom.html", e->dir);
    const char *rep[] = {"report", "tiny", "-o", html, "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, rep, out, sizeof out);
    if (rc != 0) fail_msg("qsweep report exited %d:\n%s", rc, out);
    size_t html_len = 0;
    char *page = slurp(html, &html_len);
    /* self-contained: nothing loaded from elsewhere */
    assert_null(strstr(page, "src=\"http"));
    assert_null(strstr(page, "href=\"http"));
    assert_non_null(strstr(page, "FROM v_sensitivity"));
    free(page);

    chromium(e, html, "", dom_path, NULL);
    char *dom = slurp(dom_path, NULL);
    assert_int_equal((long)count(dom, "class=\"cell\""), evals);
    /* the hostile description is shown as text (escaped by the DOM), not run */
    assert_non_null(strstr(dom, "&lt;/script&gt;&lt;script&gt;document.title='x'&lt;/script&gt; "
                                "&amp; &lt;b&gt;bold&lt;/b&gt;"));
    assert_non_null(strstr(dom, "<title>qsweep report</title>"));
    /* a sweep without training shows no empty Training section */
    assert_non_null(strstr(dom, "<h2>Sensitivity</h2>"));
    assert_null(strstr(dom, "<h2>Training</h2>"));
    /* the heatmap: one cell per layer-mode job, in its own figure */
    const char *heat = strstr(dom, "data-mode=\"layer\"");
    assert_non_null(heat);
    const char *heat_end = strstr(heat, "</svg>");
    assert_non_null(heat_end);
    size_t heat_cells = 0;
    for (const char *p = heat; (p = strstr(p, "class=\"cell\"")) && p < heat_end; p++)
        heat_cells++;
    assert_int_equal((long)heat_cells,
                     query_long(e->c, "SELECT count(*) FROM jobs WHERE spec ->> 'mode' = 'layer'"));
    assert_non_null(strstr(dom, "v_sensitivity"));

    /* three sampled cells: the first, middle and last eval job */
    long jobs[3] = {
        query_long(e->c, "SELECT min(id) FROM jobs WHERE kind = 'eval'"),
        query_long(e->c, "SELECT id FROM jobs WHERE kind = 'eval' ORDER BY id OFFSET 15 LIMIT 1"),
        query_long(e->c, "SELECT max(id) FROM jobs WHERE kind = 'eval'")};
    for (int i = 0; i < 3; i++) {
        assert_cell_equals_view(e->c, dom, jobs[i], "data-kl_mean",
                                "max(value) FILTER (WHERE metric = 'kl_mean')");
        assert_cell_equals_view(e->c, dom, jobs[i], "data-shown",
                                "max(value) FILTER (WHERE metric = 'kl_mean')");
        assert_cell_equals_view(e->c, dom, jobs[i], "data-delta_ppl",
                                "max(delta) FILTER (WHERE metric = 'ppl')");
        assert_cell_equals_view(e->c, dom, jobs[i], "data-kl_p99",
                                "max(value) FILTER (WHERE metric = 'kl_p99')");
        assert_cell_equals_view(e->c, dom, jobs[i], "data-top1",
                                "max(value) FILTER (WHERE metric = 'top1')");
        assert_cell_near_view(e->c, dom, jobs[i], "data-sqnr_db",
                              "avg(value) FILTER (WHERE metric LIKE 'sqnr\\_db.%')", 1e-13);
    }
    free(dom);

    /* the colour metric from the URL: cells now show top-1 */
    chromium(e, html, "#metric=top1", dom_path, NULL);
    dom = slurp(dom_path, NULL);
    assert_int_equal((long)count(dom, "class=\"cell\""), evals);
    assert_cell_equals_view(e->c, dom, jobs[1], "data-shown",
                            "max(value) FILTER (WHERE metric = 'top1')");
    free(dom);

    /* a screenshot that is not blank, next to one of an empty page of the same size */
    char png[600], blank[600], blank_png[600];
    snprintf(png, sizeof png, "%s/report.png", e->dir);
    snprintf(blank, sizeof blank, "%s/blank.html", e->dir);
    snprintf(blank_png, sizeof blank_png, "%s/blank.png", e->dir);
    assert_int_equal(fx_write_text(blank, "<!DOCTYPE html><html><body></body></html>\n"), 0);
    chromium(e, html, "", NULL, png);
    chromium(e, blank, "", NULL, blank_png);
    size_t n_png = 0, n_blank = 0;
    char *shot = slurp(png, &n_png), *empty = slurp(blank_png, &n_blank);
    assert_true(n_png > 24);
    assert_memory_equal(shot, "\x89PNG\r\n\x1a\n", 8);
    /* IHDR width, big-endian at offset 16: the window's 1200 pixels */
    const unsigned char *w = (const unsigned char *)shot + 16;
    assert_int_equal(((uint32_t)w[0] << 24) | (w[1] << 16) | (w[2] << 8) | w[3], 1200);
    if (n_png < 4 * n_blank)
        fail_msg("screenshot %zu bytes, an empty page %zu: looks blank", n_png, n_blank);
    free(shot);
    free(empty);
}

/* The value of attribute attr (with its leading space and '="') in the element starting at
 * tag; "" when absent. */
static void tag_attr(const char *tag, const char *attr, char *out, size_t cap) {
    const char *end = strchr(tag, '>'), *a = strstr(tag, attr);
    out[0] = 0;
    if (!a || !end || a > end) return;
    a += strlen(attr);
    size_t n = strcspn(a, "\"");
    if (n >= cap) n = cap - 1;
    memcpy(out, a, n);
    out[n] = 0;
}

/* experiments/tiny-methods.yaml (rtn, gptq, mr-gptq on NVFP4 and MXFP4, q and down in
 * component mode): one component x method heatmap per format, a cell per eval job carrying
 * the view's values, and the colour range of every legend the minimum and maximum over the
 * cells of both formats: one scale across methods and formats. */
static void test_report_puts_methods_side_by_side(void **state) {
    env *e = *state;
    static char out[1 << 16];
    const char *run[] = {"run", TINY_METHODS, "--workers", "2", NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK);
    const char *conninfo = qc_pgserver_conninfo(e->pg);
    e->c = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(e->c), CONNECTION_OK);
    long evals = query_long(e->c, "SELECT count(*) FROM jobs WHERE kind = 'eval'");
    assert_int_equal(evals, 12);
    char html[600], dom_path[600];
    snprintf(html, sizeof html, "%s/methods.html", e->dir);
    snprintf(dom_path, sizeof dom_path, "%s/methods-dom.html", e->dir);
    const char *rep[] = {"report", "tiny-methods", "-o", html, "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, rep, out, sizeof out);
    if (rc != 0) fail_msg("qsweep report exited %d:\n%s", rc, out);
    chromium(e, html, "", dom_path, NULL);
    char *dom = slurp(dom_path, NULL);
    assert_non_null(strstr(dom, "data-method-cells=\"12\""));
    assert_int_equal((long)count(dom, "class=\"mcell\""), evals);
    assert_int_equal((long)count(dom, "class=\"method-heatmap\""), 2);
    /* the ordinary figures keep one cell per job */
    assert_int_equal((long)count(dom, "class=\"cell\""), evals);
    /* every cell: its method is the job's, its values the view's */
    PGresult *r = PQexec(e->c, "SELECT id, coalesce(spec ->> 'method', 'rtn'), spec ->> 'format', "
                               "spec ->> 'part' FROM jobs WHERE kind = 'eval' ORDER BY id");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    for (int i = 0; i < PQntuples(r); i++) {
        long job = strtol(PQgetvalue(r, i, 0), NULL, 10);
        char key[64], got[128];
        snprintf(key, sizeof key, "class=\"mcell\" data-job=\"%ld\"", job);
        const char *tag = strstr(dom, key);
        if (!tag) fail_msg("no mcell for job %ld", job);
        tag_attr(tag, " data-method=\"", got, sizeof got);
        assert_string_equal(got, PQgetvalue(r, i, 1));
        tag_attr(tag, " data-format=\"", got, sizeof got);
        assert_string_equal(got, PQgetvalue(r, i, 2));
        tag_attr(tag, " data-part=\"", got, sizeof got);
        assert_string_equal(got, PQgetvalue(r, i, 3));
        assert_cell_near_view_of(e->c, "tiny-methods", tag, job, "data-kl_mean",
                                 "max(value) FILTER (WHERE metric = 'kl_mean')", 0.0);
        assert_cell_near_view_of(e->c, "tiny-methods", tag, job, "data-shown",
                                 "max(value) FILTER (WHERE metric = 'kl_mean')", 0.0);
        assert_cell_near_view_of(e->c, "tiny-methods", tag, job, "data-top1",
                                 "max(value) FILTER (WHERE metric = 'top1')", 0.0);
    }
    PQclear(r);
    /* one scale: each legend spans the smallest and largest KL of all 12 jobs */
    double lo = 0, hi = 0;
    r = PQexec(e->c, "SELECT min(value), max(value) FROM v_sensitivity WHERE experiment = "
                     "'tiny-methods' AND metric = 'kl_mean'");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    lo = strtod(PQgetvalue(r, 0, 0), NULL);
    hi = strtod(PQgetvalue(r, 0, 1), NULL);
    PQclear(r);
    int legends = 0;
    for (const char *p = dom; (p = strstr(p, "class=\"method-legend")); p++, legends++) {
        char got[128];
        tag_attr(p, " data-lo=\"", got, sizeof got);
        assert_true(strtod(got, NULL) == lo);
        tag_attr(p, " data-hi=\"", got, sizeof got);
        assert_true(strtod(got, NULL) == hi);
    }
    assert_int_equal(legends, 2);
    free(dom);
}

/* Two settings of one method in one figure (experiments/tiny-methods.yaml cut to q in NVFP4,
 * gptq with damp 0.01 and 0.1, mr-gptq+search with damp 0.01 and 0.02): each setting is a column
 * of its own, headed by its setting label as `qsweep results` heads it (kinds/method.h
 * qs_method_setting_label), in the order of its columns, and each job's cell sits in the column
 * of its own method and damp, carrying its own KL. */
static void test_report_names_two_settings_of_a_method_apart(void **state) {
    env *e = *state;
    static char out[1 << 16];
    const char *run[] = {"run",
                         TINY_METHODS,
                         "--workers",
                         "1",
                         "--set",
                         "name=rsettings",
                         "--set",
                         "sensitivity.parts=[q]",
                         "--set",
                         "sensitivity.formats=[nvfp4]",
                         "--set",
                         "sensitivity.method=[rtn, gptq, {name: gptq, options: {damp: 0.1}},"
                         " {name: mr-gptq, options: {scale_search: true}},"
                         " {name: mr-gptq, options: {scale_search: true, damp: 0.02}}]",
                         NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK);
    const char *conninfo = qc_pgserver_conninfo(e->pg);
    e->c = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(e->c), CONNECTION_OK);
    char html[600], dom_path[600];
    snprintf(html, sizeof html, "%s/settings.html", e->dir);
    snprintf(dom_path, sizeof dom_path, "%s/settings-dom.html", e->dir);
    const char *rep[] = {"report", "rsettings", "-o", html, "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, rep, out, sizeof out);
    if (rc != 0) fail_msg("qsweep report exited %d:\n%s", rc, out);
    chromium(e, html, "", dom_path, NULL);
    char *dom = slurp(dom_path, NULL);
    assert_int_equal((long)count(dom, "class=\"method-heatmap\""), 1);
    assert_int_equal((long)count(dom, "class=\"mcell\""), 5);
    static const char *const labels[] = {"rtn", "gptq+damp=0.01", "gptq+damp=0.1",
                                         "mr-gptq+search+damp=0.01", "mr-gptq+search+damp=0.02"};
    /* the column heads, left to right */
    const char *p = strstr(dom, "class=\"method-heatmap\"");
    for (size_t i = 0; i < 5; i++) {
        p = strstr(p, "text-anchor=\"middle\">");
        if (!p) fail_msg("the heatmap has %zu column heads, expected 5", i);
        p += strlen("text-anchor=\"middle\">");
        size_t n = strcspn(p, "<");
        if (n != strlen(labels[i]) || strncmp(p, labels[i], n))
            fail_msg("column %zu is headed '%.*s', expected '%s'", i, (int)n, p, labels[i]);
    }
    /* each job's cell: the label of its own setting, in that label's column, its own KL */
    PGresult *r = PQexec(e->c, "SELECT id, coalesce(spec ->> 'method', 'rtn'),"
                               " coalesce((spec -> 'method_options' ->> 'damp')::float8, 0),"
                               " coalesce(spec -> 'method_options' ->> 'scale_search', 'false')"
                               " FROM jobs WHERE kind = 'eval' ORDER BY id");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 5);
    double x_of[5] = {0};
    for (int i = 0; i < PQntuples(r); i++) {
        long job = strtol(PQgetvalue(r, i, 0), NULL, 10);
        const char *method = PQgetvalue(r, i, 1);
        double damp = strtod(PQgetvalue(r, i, 2), NULL);
        bool search = !strcmp(PQgetvalue(r, i, 3), "true");
        int want = !strcmp(method, "rtn")                 ? 0
                   : !strcmp(method, "gptq") && !search   ? (damp == 0.1 ? 2 : 1)
                   : !strcmp(method, "mr-gptq") && search ? (damp == 0.02 ? 4 : 3)
                                                          : -1;
        if (want < 0) fail_msg("job %ld: unexpected setting %s damp %g", job, method, damp);
        char key[64], got[128];
        snprintf(key, sizeof key, "class=\"mcell\" data-job=\"%ld\"", job);
        const char *tag = strstr(dom, key);
        if (!tag) fail_msg("no mcell for job %ld", job);
        tag_attr(tag, " data-label=\"", got, sizeof got);
        assert_string_equal(got, labels[want]);
        const char *rect = tag;
        while (rect > dom && strncmp(rect, "<rect", 5))
            rect--;
        tag_attr(rect, " x=\"", got, sizeof got);
        x_of[want] = strtod(got, NULL);
        assert_cell_near_view_of(e->c, "rsettings", tag, job, "data-kl_mean",
                                 "max(value) FILTER (WHERE metric = 'kl_mean')", 0.0);
    }
    PQclear(r);
    for (int i = 1; i < 5; i++)
        if (!(x_of[i] > x_of[i - 1]))
            fail_msg("the cell of %s (x %g) is not right of %s's (x %g)", labels[i], x_of[i],
                     labels[i - 1], x_of[i - 1]);
    free(dom);
}

static void test_report_of_unknown_experiment_writes_nothing(void **state) {
    env *e = *state;
    static char out[1 << 14];
    qs_error err = {0};
    if (qc_pgserver_start_temp(&e->pg, &err) != QS_OK) fail_msg("%s", err.msg);
    const char *conninfo = qc_pgserver_conninfo(e->pg);
    const char *mig[] = {"db", "migrate", "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, mig, out, sizeof out), 0);
    char html[600];
    snprintf(html, sizeof html, "%s/none.html", e->dir);
    const char *rep[] = {"report", "no-such-experiment", "-o", html, "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, rep, out, sizeof out), 2);
    assert_non_null(strstr(out, "no experiment named 'no-such-experiment'"));
    assert_int_not_equal(access(html, F_OK), 0);
    const char *bad[] = {"report", "-o", html, "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, bad, out, sizeof out), 1);
}

/* Files in dir (".", ".." left out), so a test sees that no temporary file was left behind. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

/* -o FILE is replaced whole (a temporary file renamed over it) only when FILE is a regular
 * file or absent: a FIFO, a device (made with mknod when root) or a symlink is refused with
 * exit 2 naming it and left as it was; an existing page keeps its mode and no temporary file
 * is left behind. */
static void test_report_output_that_is_not_a_regular_file_is_refused(void **state) {
    env *e = *state;
    static char out[1 << 14];
    qs_error err = {0};
    if (qc_pgserver_start_temp(&e->pg, &err) != QS_OK) fail_msg("%s", err.msg);
    const char *conninfo = qc_pgserver_conninfo(e->pg);
    const char *sub[] = {"submit", TINY, "--db", conninfo, NULL};
    int rc = fx_run(QSWEEP_BIN, sub, out, sizeof out);
    if (rc != 0) fail_msg("qsweep submit exited %d:\n%s", rc, out);
    char odir[600], fifo[700], link[700], page[700], dev[700];
    snprintf(odir, sizeof odir, "%s/out", e->dir);
    assert_int_equal(mkdir(odir, 0755), 0);
    snprintf(fifo, sizeof fifo, "%s/fifo", odir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *to_fifo[] = {"report", "tiny", "-o", fifo, "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, to_fifo, out, sizeof out), 2);
    assert_non_null(strstr(out, "/out/fifo: exists and is not a regular file"));
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    if (geteuid() == 0) {
        snprintf(dev, sizeof dev, "%s/null", odir); /* a null device of our own */
        assert_int_equal(mknod(dev, S_IFCHR | 0666, makedev(1, 3)), 0);
        const char *to_dev[] = {"report", "tiny", "-o", dev, "--db", conninfo, NULL};
        assert_int_equal(fx_run(QSWEEP_BIN, to_dev, out, sizeof out), 2);
        assert_non_null(strstr(out, "/out/null: exists and is not a regular file"));
        assert_int_equal(lstat(dev, &st), 0);
        assert_true(S_ISCHR(st.st_mode));
        unlink(dev);
    }
    snprintf(page, sizeof page, "%s/page.html", odir);
    snprintf(link, sizeof link, "%s/link.html", odir);
    assert_int_equal(fx_write_text(page, "old page\n"), 0);
    assert_int_equal(chmod(page, 0640), 0);
    assert_int_equal(symlink("page.html", link), 0);
    const char *to_link[] = {"report", "tiny", "-o", link, "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, to_link, out, sizeof out), 2);
    assert_non_null(strstr(out, "/out/link.html: is a symbolic link"));
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    const char *to_page[] = {"report", "tiny", "-o", page, "--db", conninfo, NULL};
    rc = fx_run(QSWEEP_BIN, to_page, out, sizeof out);
    if (rc != 0) fail_msg("qsweep report exited %d:\n%s", rc, out);
    assert_int_equal(stat(page, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_true(st.st_size > 1000);
    assert_int_equal(count_entries(odir), 3); /* fifo, page.html, link.html */
}

/* Views of the training sweeps (schema 020 of the train module) with the columns the
 * report reads, for a database that does not have them yet; where the migrations made them,
 * the test uses those. */
static const char *const TRAIN_VIEWS =
    "CREATE VIEW v_train_curves AS SELECT e.name AS experiment, j.id AS job_id,"
    " j.spec -> 'shape' ->> 'name' AS shape, j.spec -> 'recipe' ->> 'name' AS recipe,"
    " (j.spec ->> 'lr')::double precision AS lr, (j.spec ->> 'seed')::bigint AS seed,"
    " r.step, r.name AS metric, r.value FROM results r JOIN jobs j ON j.id = r.job"
    " JOIN experiment_jobs ej ON ej.job = j.id JOIN experiments e ON e.id = ej.experiment"
    " WHERE j.kind = 'train' AND r.step >= 0;"
    "CREATE VIEW v_train_final AS SELECT e.name AS experiment, j.id AS job_id,"
    " j.spec -> 'shape' ->> 'name' AS shape, j.spec -> 'recipe' ->> 'name' AS recipe,"
    " (j.spec ->> 'lr')::double precision AS lr, (j.spec ->> 'seed')::bigint AS seed,"
    " r.name AS metric, r.value, b.value AS bf16_value, r.value - b.value AS gap,"
    " (r.value - b.value) / NULLIF(b.value, 0) AS rel_gap, b.job_id AS bf16_job_id"
    " FROM results r JOIN jobs j ON j.id = r.job JOIN experiment_jobs ej ON ej.job = j.id"
    " JOIN experiments e ON e.id = ej.experiment LEFT JOIN LATERAL (SELECT bj.id AS job_id,"
    " br.value FROM jobs bj JOIN results br ON br.job = bj.id AND br.name = r.name AND br.final"
    " WHERE bj.kind = 'train' AND bj.spec -> 'recipe' ->> 'name' = 'bf16'"
    " AND (bj.spec - 'recipe') = (j.spec - 'recipe') ORDER BY bj.id DESC LIMIT 1) b ON true"
    " WHERE j.kind = 'train' AND r.final";

static void exec_ok(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

/* Training: a curve per recipe (mean over two seeds) and the final gap to bf16, from the
 * training views, for two recipes x two seeds of train jobs as the store records them. */
static void test_report_draws_training_curves_from_the_views(void **state) {
    env *e = *state;
    static char out[1 << 14];
    qs_error err = {0};
    if (qc_pgserver_start_temp(&e->pg, &err) != QS_OK) fail_msg("%s", err.msg);
    const char *conninfo = qc_pgserver_conninfo(e->pg);
    const char *mig[] = {"db", "migrate", "--db", conninfo, NULL};
    assert_int_equal(fx_run(QSWEEP_BIN, mig, out, sizeof out), 0);
    e->c = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(e->c), CONNECTION_OK);
    if (query_long(e->c, "SELECT (to_regclass('v_train_curves') IS NULL)::int") == 1)
        exec_ok(e->c, TRAIN_VIEWS);
    exec_ok(e->c, "INSERT INTO experiments (name, grid) VALUES ('fp4-train', 'kind: training')");
    /* final validation loss: bf16 3.0 and 3.2, nvfp4 3.1 and 3.35 for seeds 1 and 2, so the
       gaps to bf16 are 0.1 and 0.15, mean 0.125 */
    exec_ok(e->c, "INSERT INTO jobs (job_key, kind, spec, state) VALUES"
                  " ('t1', 'train', '{\"recipe\": {\"name\": \"bf16\"}, \"shape\": {\"name\": "
                  "\"tiny\"}, \"lr\": 0.001, \"seed\": 1}', 'succeeded'),"
                  " ('t2', 'train', '{\"recipe\": {\"name\": \"bf16\"}, \"shape\": {\"name\": "
                  "\"tiny\"}, \"lr\": 0.001, \"seed\": 2}', 'succeeded'),"
                  " ('t3', 'train', '{\"recipe\": {\"name\": \"nvfp4\"}, \"shape\": {\"name\": "
                  "\"tiny\"}, \"lr\": 0.001, \"seed\": 1}', 'succeeded'),"
                  " ('t4', 'train', '{\"recipe\": {\"name\": \"nvfp4\"}, \"shape\": {\"name\": "
                  "\"tiny\"}, \"lr\": 0.001, \"seed\": 2}', 'succeeded')");
    exec_ok(e->c, "INSERT INTO experiment_jobs SELECT 1, id FROM jobs");
    exec_ok(e->c, "INSERT INTO results (job, attempt, name, value, step, final)"
                  " SELECT j.id, 1, 'train_loss', 5.0 / (1 + s) + j.id * 0.01, s, false"
                  " FROM jobs j, generate_series(0, 19) s");
    exec_ok(e->c, "INSERT INTO results (job, attempt, name, value, step, final) SELECT id, 1,"
                  " 'final_val_loss', CASE job_key WHEN 't1' THEN 3.0 WHEN 't2' THEN 3.2"
                  " WHEN 't3' THEN 3.1 ELSE 3.35 END, -1, true FROM jobs");
    char html[600], dom_path[600];
    snprintf(html, sizeof html, "%s/train.html", e->dir);
    snprintf(dom_path, sizeof dom_path, "%s/train-dom.html", e->dir);
    const char *rep[] = {"report", "fp4-train", "-o", html, "--db", conninfo, NULL};
    int rc = fx_run(QSWEEP_BIN, rep, out, sizeof out);
    if (rc != 0) fail_msg("qsweep report exited %d:\n%s", rc, out);
    chromium(e, html, "", dom_path, NULL);
    char *dom = slurp(dom_path, NULL);
    assert_int_equal((long)count(dom, "class=\"curve\""), 2);
    assert_non_null(strstr(dom, "data-line=\"bf16  tiny  lr 0.001\""));
    assert_non_null(strstr(dom, "data-line=\"nvfp4  tiny  lr 0.001\""));
    /* the curves' mean over the two seeds at the last step, from the view */
    assert_non_null(strstr(dom, "20 steps, last mean 0.26"));
    /* final table: nvfp4's mean gap to bf16 */
    assert_non_null(strstr(dom, "<td class=\"num\">0.125</td>"));
    assert_int_equal((long)count(dom, "class=\"cell\""), 0);
    /* and no empty Sensitivity section above it */
    assert_non_null(strstr(dom, "<h2>Training</h2>"));
    assert_null(strstr(dom, "<h2>Sensitivity</h2>"));
    free(dom);
}

int main(int argc, char **argv) {
    const struct CMUnitTest all[] = {
        cmocka_unit_test_setup_teardown(test_report_of_tiny_sweep_renders_the_views_values, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_report_of_unknown_experiment_writes_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_report_draws_training_curves_from_the_views, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_report_output_that_is_not_a_regular_file_is_refused,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_puts_methods_side_by_side, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_names_two_settings_of_a_method_apart, setup,
                                        teardown),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(all, NULL, NULL);
}
