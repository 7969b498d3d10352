/* qsweep results for pipelines: a training stage trains models (recipes x seeds), a
 * sensitivity stage sweeps each of them. Every baseline and eval job of such a sweep names the
 * training job that made its model ("trained_by" in its spec's model object). The tables put
 * the recipes side by side: per part, each recipe's damage (mean KL to the unquantized model,
 * relative perplexity increase) as the mean over its seeds, +- half the range (max - min) / 2
 * over them, read from v_pipeline_summary and v_pipeline_training
 * (schema/130_pipeline_views.sql). Half the range, not a standard deviation: with the two or
 * three seeds a study affords the range is what the seeds did, not an estimate. */
#include "pipeline_results.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "result_rows.h"

static const char *const IS_PIPELINE_SQL =
    "SELECT EXISTS (SELECT 1 FROM experiments e\n"
    "               JOIN experiment_jobs ej ON ej.experiment = e.id\n"
    "               JOIN jobs j ON j.id = ej.job\n"
    "               WHERE e.name = $1 AND j.kind IN ('baseline', 'eval')\n"
    "                 AND j.spec -> 'model' ? 'trained_by')";

/* One row per (shape, steps, lr, format, options, quantize, mode, part, recipe): the seeds,
 * mean, min and max over them of kl_mean, of the perplexity increase (delta) and of the
 * relative increase (delta / the model's own baseline perplexity), and the training runs' mean
 * final validation loss. Parts in model order: the block number first (blocks, "B.kind"
 * layers), then the component's place in a block; bf16 is the first recipe. $1 (or an SQL
 * literal for psql) is the experiment. */
static const char *const PIPELINE_SQL =
    "SELECT coalesce(shape, '(checkpoint)') AS shape, steps, lr, format, options, quantize,\n"
    "       mode, part, recipe, max(seeds) AS seeds,\n"
    "       max(mean_value) FILTER (WHERE metric = 'kl_mean') AS kl_mean,\n"
    "       max(min_value) FILTER (WHERE metric = 'kl_mean') AS kl_min,\n"
    "       max(max_value) FILTER (WHERE metric = 'kl_mean') AS kl_max,\n"
    "       max(mean_delta) FILTER (WHERE metric = 'ppl') AS delta_ppl,\n"
    "       max(min_delta) FILTER (WHERE metric = 'ppl') AS delta_ppl_min,\n"
    "       max(max_delta) FILTER (WHERE metric = 'ppl') AS delta_ppl_max,\n"
    "       max(mean_rel_delta) FILTER (WHERE metric = 'ppl') AS rel_delta_ppl,\n"
    "       max(min_rel_delta) FILTER (WHERE metric = 'ppl') AS rel_delta_ppl_min,\n"
    "       max(max_rel_delta) FILTER (WHERE metric = 'ppl') AS rel_delta_ppl_max,\n"
    "       max(mean_final_val_loss) AS final_val_loss\n"
    "FROM v_pipeline_summary\n"
    "WHERE experiment = %s AND metric IN ('kl_mean', 'ppl')\n"
    "GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9\n"
    "ORDER BY 1, 2, 3, 4, 5, 6, 7, substring(part FROM '^[0-9]+')::int NULLS LAST,\n"
    "         array_position(ARRAY['q', 'k', 'v', 'o', 'gate', 'up', 'down'],\n"
    "                        regexp_replace(part, '^[0-9]+\\.', '')) NULLS LAST,\n"
    "         part, recipe <> 'bf16', recipe";

enum {
    C_SHAPE,
    C_STEPS,
    C_LR,
    C_FORMAT,
    C_OPTIONS,
    C_QUANT,
    C_MODE,
    C_PART,
    C_RECIPE,
    C_SEEDS,
    C_KL,
    C_KL_MIN,
    C_KL_MAX,
    C_DPPL,
    C_DPPL_MIN,
    C_DPPL_MAX,
    C_REL,
    C_REL_MIN,
    C_REL_MAX,
    C_VAL,
    C_N
};
static const char *const col_names[C_N] = {
    "shape",         "steps",          "lr",             "format",        "options",
    "quantize",      "mode",           "part",           "recipe",        "seeds",
    "kl_mean",       "kl_min",         "kl_max",         "delta_ppl",     "delta_ppl_min",
    "delta_ppl_max", "rel_delta_ppl",  "rel_delta_ppl_min", "rel_delta_ppl_max",
    "final_val_loss"};
static const qsweep_col_type col_types[C_N] = {
    QSWEEP_COL_TEXT, QSWEEP_COL_INT,  QSWEEP_COL_REAL, QSWEEP_COL_TEXT, QSWEEP_COL_JSON,
    QSWEEP_COL_TEXT, QSWEEP_COL_TEXT, QSWEEP_COL_TEXT, QSWEEP_COL_TEXT, QSWEEP_COL_INT,
    QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL,
    QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL};

/* The training runs behind the sweep, per (shape, steps, lr, recipe): runs, those with a final
 * validation loss, its mean, min and max over them, and the distinct seeds. */
static const char *const TRAINING_SQL =
    "SELECT coalesce(shape, '(checkpoint)'), steps, lr, recipe, count(*),\n"
    "       count(final_val_loss), avg(final_val_loss), min(final_val_loss),\n"
    "       max(final_val_loss), count(DISTINCT seed),\n"
    "       count(*) FILTER (WHERE state IN ('failed', 'cancelled'))\n"
    "FROM v_pipeline_training WHERE experiment = $1\n"
    "GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, recipe <> 'bf16', recipe";

static PGresult *query(PGconn *c, const char *sql, const char *name, const char *what,
                       qs_status *st, qs_error *err) {
    const char *params[1] = {name};
    PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        *st = qs_error_set(err, QS_EDB, "%s of %s: %s", what, name, PQerrorMessage(c));
        PQclear(r);
        return NULL;
    }
    *st = QS_OK;
    return r;
}

qs_status qsweep_is_pipeline_experiment(qc_store *db, const char *name, int *is_pipeline,
                                        qs_error *err) {
    qs_status st;
    *is_pipeline = 0;
    PGresult *r = query(qc_store_pgconn(db), IS_PIPELINE_SQL, name, "experiment kind", &st, err);
    if (!r) return st;
    *is_pipeline = !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    return QS_OK;
}

/* "mean +-h" with h = (max - min) / 2 into buf, in printf format f (a conversion of one
 * double, e.g. "%.6f") scaled by k, unit after each number ("" or "%"); "-" when the mean is
 * NULL, the mean alone for one seed. */
static void spread(char *buf, size_t cap, const char *f, double k, const char *unit, double mean,
                   double lo, double hi, long seeds) {
    char m[32], h[32];
    if (isnan(mean)) {
        snprintf(buf, cap, "-");
        return;
    }
    snprintf(m, sizeof m, f, k * mean);
    if (seeds < 2 || isnan(lo) || isnan(hi)) {
        snprintf(buf, cap, "%s%s", m, unit);
        return;
    }
    snprintf(h, sizeof h, f, k * (hi - lo) / 2);
    snprintf(buf, cap, "%s%s +-%s%s", m, unit, h[0] == '+' ? h + 1 : h, unit);
}

/* Rows a and b belong to one table: same shape, steps, lr, format, options, quantize, mode. */
static int same_table(PGresult *r, int a, int b) {
    for (int c = C_SHAPE; c <= C_MODE; c++)
        if (strcmp(PQgetvalue(r, a, c), PQgetvalue(r, b, c))) return 0;
    return 1;
}

enum { MAX_RECIPES = 16, KL_W = 21, PPL_W = 17 };

/* A table line, built column by column then printed without its trailing blanks. */
typedef struct line_buf {
    char text[MAX_RECIPES * 64 + 256];
    size_t len;
} line_buf;

static void line_add(line_buf *l, const char *fmt, int w, const char *s) {
    if (l->len < sizeof l->text) {
        int n = snprintf(l->text + l->len, sizeof l->text - l->len, fmt, w, s);
        if (n > 0) l->len += (size_t)n;
        if (l->len >= sizeof l->text) l->len = sizeof l->text - 1;
    }
}

static void line_end(line_buf *l, FILE *out) {
    while (l->len > 0 && l->text[l->len - 1] == ' ')
        l->len--;
    fprintf(out, "%.*s\n", (int)l->len, l->text);
    l->len = 0;
}

/* One table: rows [from, to) of r, a line per part, a column pair per recipe (in order of
 * first appearance, at most MAX_RECIPES). */
static void print_table(PGresult *r, int from, int to, FILE *out) {
    const char *recipes[MAX_RECIPES];
    long seeds[MAX_RECIPES];
    double val[MAX_RECIPES];
    int nr = 0, pw = 8, more = 0;
    for (int i = from; i < to; i++) {
        const char *rc = PQgetvalue(r, i, C_RECIPE);
        int k = 0;
        while (k < nr && strcmp(recipes[k], rc))
            k++;
        if (k == nr && nr < MAX_RECIPES) {
            recipes[nr] = rc;
            seeds[nr] = 0;
            val[nr++] = qsweep_col_num(r, i, C_VAL);
        } else if (k == nr) {
            more = 1;
        }
        if (k < nr) {
            long s = strtol(PQgetvalue(r, i, C_SEEDS), NULL, 10);
            if (s > seeds[k]) seeds[k] = s;
        }
        if ((int)strlen(PQgetvalue(r, i, C_PART)) > pw) pw = (int)strlen(PQgetvalue(r, i, C_PART));
    }
    const char *options = PQgetvalue(r, from, C_OPTIONS);
    fprintf(out, "\n%s (%s steps, lr %s)  %s%s%s  %s  %s-wise\n", PQgetvalue(r, from, C_SHAPE),
            PQgetvalue(r, from, C_STEPS), PQgetvalue(r, from, C_LR), PQgetvalue(r, from, C_FORMAT),
            strcmp(options, "{}") ? " " : "", strcmp(options, "{}") ? options : "",
            PQgetvalue(r, from, C_QUANT), PQgetvalue(r, from, C_MODE));
    line_buf l = {.len = 0};
    line_add(&l, "  %-*s", pw, "");
    for (int k = 0; k < nr; k++) {
        char head[96];
        if (isnan(val[k]))
            snprintf(head, sizeof head, "%s, %ld seed%s", recipes[k], seeds[k],
                     seeds[k] == 1 ? "" : "s");
        else
            snprintf(head, sizeof head, "%s, %ld seed%s, val loss %.4f", recipes[k], seeds[k],
                     seeds[k] == 1 ? "" : "s", val[k]);
        line_add(&l, "   %-*s", KL_W + 1 + PPL_W, head);
    }
    line_end(&l, out);
    line_add(&l, "  %-*s", pw, "part");
    for (int k = 0; k < nr; k++) {
        line_add(&l, "   %-*s", KL_W, "KL mean");
        line_add(&l, " %-*s", PPL_W, "ppl increase");
    }
    line_end(&l, out);
    for (int i = from; i < to;) {
        int j = i;
        while (j < to && !strcmp(PQgetvalue(r, j, C_PART), PQgetvalue(r, i, C_PART)))
            j++;
        line_add(&l, "  %-*s", pw, PQgetvalue(r, i, C_PART));
        for (int k = 0; k < nr; k++) {
            char kl[80] = "-", ppl[80] = "-";
            for (int x = i; x < j; x++) {
                if (strcmp(PQgetvalue(r, x, C_RECIPE), recipes[k])) continue;
                long s = strtol(PQgetvalue(r, x, C_SEEDS), NULL, 10);
                spread(kl, sizeof kl, "%.6f", 1.0, "", qsweep_kl_shown(qsweep_col_num(r, x, C_KL), 6),
                       qsweep_col_num(r, x, C_KL_MIN), qsweep_col_num(r, x, C_KL_MAX), s);
                spread(ppl, sizeof ppl, "%+.2f", 100.0, "%", qsweep_col_num(r, x, C_REL),
                       qsweep_col_num(r, x, C_REL_MIN), qsweep_col_num(r, x, C_REL_MAX), s);
            }
            line_add(&l, "   %-*s", KL_W, kl);
            line_add(&l, " %-*s", PPL_W, ppl);
        }
        line_end(&l, out);
        i = j;
    }
    if (more)
        fprintf(out, "  (more than %d recipes: the others are in --csv and --json)\n",
                MAX_RECIPES);
}

/* The training runs per recipe: final validation loss, mean +- half the range over seeds, and
 * how many runs have finished. */
static void print_training(PGresult *t, FILE *out) {
    fprintf(out, "training runs behind the sweep (v_pipeline_training): final validation loss,"
                 " mean +- half the range over seeds\n");
    for (int i = 0; i < PQntuples(t); i++) {
        if (i == 0 || strcmp(PQgetvalue(t, i, 0), PQgetvalue(t, i - 1, 0)) ||
            strcmp(PQgetvalue(t, i, 1), PQgetvalue(t, i - 1, 1)) ||
            strcmp(PQgetvalue(t, i, 2), PQgetvalue(t, i - 1, 2)))
            fprintf(out, "  %s  %s steps  lr %s\n", PQgetvalue(t, i, 0), PQgetvalue(t, i, 1),
                    PQgetvalue(t, i, 2));
        long runs = strtol(PQgetvalue(t, i, 4), NULL, 10), done = strtol(PQgetvalue(t, i, 5), NULL, 10);
        char v[80];
        spread(v, sizeof v, "%.4f", 1.0, "", qsweep_col_num(t, i, 6), qsweep_col_num(t, i, 7),
               qsweep_col_num(t, i, 8), done);
        char seeds[32];
        snprintf(seeds, sizeof seeds, "%s seed%s", PQgetvalue(t, i, 9),
                 strcmp(PQgetvalue(t, i, 9), "1") ? "s" : "");
        long ended = strtol(PQgetvalue(t, i, 10), NULL, 10); /* failed or cancelled */
        fprintf(out, "    %-18s %-9s %s", PQgetvalue(t, i, 3), seeds,
                done ? v : ended == runs ? "(failed)" : "(not finished)");
        if (ended) fprintf(out, "  (%ld of %ld runs failed or cancelled)", ended, runs);
        if (done + ended < runs)
            fprintf(out, "  (%ld of %ld runs finished)", done, runs);
        fputc('\n', out);
    }
}

/* The experiment's sweep jobs that ran on weights other than the ones their training job
 * recorded (v_trained_model_use.matches false: a model folder written again, or copied over
 * with its record): their results mix two models, so they are listed under the tables.
 * Errors: QS_EDB. */
static const char *const MISMATCH_SQL =
    "SELECT u.job_id, u.train_job_id, left(u.recorded_digest, 12), left(u.loaded_digest, 12)\n"
    "FROM v_trained_model_use u\n"
    "JOIN experiment_jobs ej ON ej.job = u.job_id\n"
    "JOIN experiments e ON e.id = ej.experiment\n"
    "WHERE e.name = $1 AND u.matches = false ORDER BY u.job_id";

static qs_status print_mismatches(PGconn *c, const char *name, FILE *out, qs_error *err) {
    qs_status st;
    PGresult *m = query(c, MISMATCH_SQL, name, "trained model use", &st, err);
    if (!m) return st;
    int n = PQntuples(m);
    if (n > 0) {
        fprintf(out,
                "\nmodel mismatch: %d sweep job%s of %s ran on weights other than the ones their "
                "training job recorded (v_trained_model_use, matches = false), so %s results "
                "mix two models:",
                n, n == 1 ? "" : "s", name, n == 1 ? "its" : "their");
        for (int i = 0; i < n && i < 10; i++)
            fprintf(out, "%s job %s (training job %s recorded %s..., it loaded %s...)",
                    i ? ";" : "", PQgetvalue(m, i, 0), PQgetvalue(m, i, 1), PQgetvalue(m, i, 2),
                    PQgetvalue(m, i, 3));
        if (n > 10) fprintf(out, "; and %d more", n - 10);
        fputc('\n', out);
    }
    PQclear(m);
    return QS_OK;
}

qs_status qsweep_print_pipeline_results(qc_store *db, const char *name, int format, FILE *out,
                                        qs_error *err) {
    PGconn *c = qc_store_pgconn(db);
    char sql[4096];
    snprintf(sql, sizeof sql, PIPELINE_SQL, "$1");
    qs_status st;
    PGresult *r = query(c, sql, name, "pipeline results", &st, err);
    if (!r) return st;
    if (format == 1) {
        qsweep_print_csv_rows(r, col_names, C_N, out);
        PQclear(r);
        return QS_OK;
    }
    if (format == 2) {
        st = qsweep_print_json_rows(r, col_names, col_types, C_N, out, err);
        PQclear(r);
        return st;
    }
    PGresult *t = query(c, TRAINING_SQL, name, "pipeline training runs", &st, err);
    if (!t) {
        PQclear(r);
        return st;
    }
    fprintf(out, "experiment %s: pipeline, sensitivity of trained models, each recipe's damage "
                 "as the mean over its seeds +- half the range (max - min) / 2\n", name);
    print_training(t, out);
    PQclear(t);
    int n = PQntuples(r);
    if (n == 0) fprintf(out, "\nno sensitivity results of the trained models\n");
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && same_table(r, i, j))
            j++;
        print_table(r, i, j, out);
        i = j;
    }
    PQclear(r);
    if ((st = print_mismatches(c, name, out, err))) return st;
    fprintf(out, "\nKL mean: mean KL divergence from the model's own unquantized baseline; ppl "
                 "increase: (ppl - baseline ppl) / baseline ppl.");
    qsweep_print_views_query(c, " (each seed: v_pipeline_sensitivity)", PIPELINE_SQL, name, out);
    return QS_OK;
}
