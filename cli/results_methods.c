/* Component x method tables of `qsweep results` (results_methods.h). */
#include "results_methods.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "method.h"
#include "method_label.h"
#include "result_rows.h"

/* One row per (group, method and its options, part): the job's mean KL divergence. Policy,
 * compare and fused jobs have no place in a component x method table. rtn (a spec naming no
 * method) sorts first in its group, and a method before its "+search" label. */
static const char *const METHODS_SQL =
    "SELECT regexp_replace(s.model, '^.*/', '') AS model, s.format,\n"
    "       j.spec ->> 'format_options' AS format_options, s.quantize, s.mode,\n"
    "       coalesce(j.spec ->> 'method', 'rtn') AS method,\n"
    "       coalesce(j.spec ->> 'method_options', '{}') AS method_options, s.part,\n"
    "       max(s.value) FILTER (WHERE s.metric = 'kl_mean') AS kl_mean\n"
    "FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id\n"
    "WHERE s.experiment = $1 AND s.mode <> 'policy' AND NOT j.spec ? 'reference_model'\n"
    "  AND NOT j.spec ? 'fuse'\n"
    "GROUP BY 1, 2, 3, 4, 5, 6, 7, 8\n"
    "ORDER BY 1, 2, 3, 4, 5, coalesce(j.spec ->> 'method', 'rtn') <> 'rtn', 6,\n"
    "         coalesce(j.spec ->> 'method_options', '{}')::jsonb ? 'scale_search', 7, 8";

enum { M_MODEL, M_FORMAT, M_FOPTS, M_QUANT, M_MODE, M_METHOD, M_MOPTS, M_PART, M_KL, M_GROUP = 5 };

/* Whether rows a and b share the first k columns. */
static int same(PGresult *r, int a, int b, int k) {
    for (int c = 0; c < k; c++)
        if (strcmp(PQgetvalue(r, a, c), PQgetvalue(r, b, c))) return 0;
    return 1;
}

/* Whether rows a and b are one column: the same method with the same options. */
static int same_column(PGresult *r, int a, int b) {
    return !strcmp(PQgetvalue(r, a, M_METHOD), PQgetvalue(r, b, M_METHOD)) &&
           !strcmp(PQgetvalue(r, a, M_MOPTS), PQgetvalue(r, b, M_MOPTS));
}

/* The group of rows [g0, g1): its columns (first row of each method and options) and parts. */
typedef struct method_table {
    int n_cols, n_parts;
    int *col_row;  /* [n_cols] a row of each column */
    int *part_row; /* [n_parts] a row of each part */
    double *kl;    /* [n_parts][n_cols], NAN when not measured */
} method_table;

/* A part's place in the table and its KL in column 0 (round-to-nearest, or the first method),
 * which ranks the parts by damage as the sensitivity tables do, NaN last. */
typedef struct part_rank {
    int part;
    double kl;
} part_rank;

static int by_damage(const void *a, const void *b) {
    const part_rank *x = a, *y = b;
    if (isnan(x->kl) != isnan(y->kl)) return isnan(x->kl) ? 1 : -1;
    if (x->kl != y->kl && !isnan(x->kl)) return x->kl > y->kl ? -1 : 1;
    return x->part - y->part;
}

/* Prints the table of the group starting at row g0. Errors: QS_ENOMEM. */
static qs_status print_group(PGresult *r, int g0, FILE *out, const method_table *t, qs_error *err) {
    int nc = t->n_cols;
    /* a column is its setting's label (kinds/method.h): its method's label, with the options
       that tell it from another column of that label (gptq+damp=0.1 beside gptq+damp=0.01) */
    char *label[16] = {0}; /* whole: a per-linear label grows with the linears that differ */
    json_t *mo[16];
    qs_method_setting set[16];
    int width[16], pw = 8, ok = 1;
    for (int c = 0; c < nc; c++) {
        mo[c] = json_loads(PQgetvalue(r, t->col_row[c], M_MOPTS), 0, NULL);
        set[c] =
            (qs_method_setting){qs_method_by_name(PQgetvalue(r, t->col_row[c], M_METHOD)), mo[c]};
    }
    for (int c = 0; ok && c < nc; c++) {
        char probe[1];
        int n = qs_method_setting_label(&set[c], set, (size_t)nc, probe, sizeof probe);
        label[c] = n >= 0 ? malloc((size_t)n + 1) : NULL;
        ok = label[c] != NULL;
        if (ok) qs_method_setting_label(&set[c], set, (size_t)nc, label[c], (size_t)n + 1);
        width[c] = ok && n + 2 > 11 ? n + 2 : 11;
    }
    for (int c = 0; c < nc; c++)
        json_decref(mo[c]);
    if (!ok) {
        for (int c = 0; c < nc; c++)
            free(label[c]);
        return qs_error_set(err, QS_ENOMEM, "results by method");
    }
    for (int p = 0; p < t->n_parts; p++) {
        int w = (int)strlen(PQgetvalue(r, t->part_row[p], M_PART));
        pw = w > pw ? w : pw;
    }
    fprintf(out, "\n%s  %s %s  %s  %s-wise\n", PQgetvalue(r, g0, M_MODEL),
            PQgetvalue(r, g0, M_FORMAT), PQgetvalue(r, g0, M_FOPTS), PQgetvalue(r, g0, M_QUANT),
            PQgetvalue(r, g0, M_MODE));
    fprintf(out, "  %-*s", pw, "part");
    for (int c = 0; c < nc; c++)
        fprintf(out, " %*s", width[c], label[c]);
    fprintf(out, "\n");
    for (int c = 0; c < nc; c++)
        free(label[c]);
    part_rank *order = malloc((size_t)t->n_parts * sizeof *order);
    if (!order) return qs_error_set(err, QS_ENOMEM, "results by method");
    for (int p = 0; p < t->n_parts; p++)
        order[p] = (part_rank){p, t->kl[(size_t)p * (size_t)nc]};
    qsort(order, (size_t)t->n_parts, sizeof *order, by_damage);
    for (int i = 0; i < t->n_parts; i++) {
        int p = order[i].part;
        const double *row = &t->kl[(size_t)p * (size_t)nc];
        int best = -1;
        for (int c = 0; c < nc; c++)
            if (!isnan(row[c]) && (best < 0 || row[c] < row[best])) best = c;
        fprintf(out, "  %-*s", pw, PQgetvalue(r, t->part_row[p], M_PART));
        for (int c = 0; c < nc; c++) {
            char cellv[32];
            if (isnan(row[c]))
                snprintf(cellv, sizeof cellv, "-");
            else
                snprintf(cellv, sizeof cellv, "%s%.6f", c == best ? "*" : "",
                         qsweep_kl_shown(row[c], 6));
            fprintf(out, " %*s", width[c], cellv);
        }
        fprintf(out, "\n");
    }
    free(order);
    return QS_OK;
}

qs_status qsweep_print_method_tables(PGconn *c, const char *name, FILE *out, qs_error *err) {
    const char *params[1] = {name};
    PGresult *r = PQexecParams(c, METHODS_SQL, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st =
            qs_error_set(err, QS_EDB, "results of %s by method: %s", name, PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    int n = PQntuples(r), printed = 0;
    qs_status st = QS_OK;
    for (int g0 = 0, g1; g0 < n && !st; g0 = g1) {
        for (g1 = g0 + 1; g1 < n && same(r, g0, g1, M_GROUP);)
            g1++;
        method_table t = {0};
        int rows = g1 - g0;
        t.col_row = malloc((size_t)rows * sizeof *t.col_row);
        t.part_row = malloc((size_t)rows * sizeof *t.part_row);
        if (!t.col_row || !t.part_row) st = qs_error_set(err, QS_ENOMEM, "results by method");
        for (int i = g0; !st && i < g1; i++) {
            int col = 0, part = 0;
            while (col < t.n_cols && !same_column(r, t.col_row[col], i))
                col++;
            if (col == t.n_cols) t.col_row[t.n_cols++] = i;
            while (part < t.n_parts &&
                   strcmp(PQgetvalue(r, t.part_row[part], M_PART), PQgetvalue(r, i, M_PART)))
                part++;
            if (part == t.n_parts) t.part_row[t.n_parts++] = i;
        }
        /* two methods or more, and as many columns as a line can hold */
        if (!st && t.n_cols > 1 && t.n_cols <= 16) {
            t.kl = malloc((size_t)t.n_parts * (size_t)t.n_cols * sizeof *t.kl);
            if (!t.kl) st = qs_error_set(err, QS_ENOMEM, "results by method");
            for (int i = 0; !st && i < t.n_parts * t.n_cols; i++)
                t.kl[i] = NAN;
            for (int i = g0; !st && i < g1; i++) {
                int col = 0, part = 0;
                while (!same_column(r, t.col_row[col], i))
                    col++;
                while (strcmp(PQgetvalue(r, t.part_row[part], M_PART), PQgetvalue(r, i, M_PART)))
                    part++;
                t.kl[(size_t)part * (size_t)t.n_cols + (size_t)col] = qsweep_col_num(r, i, M_KL);
            }
            if (!st && !printed++)
                fprintf(out, "\nmean KL divergence by method: a row per part, a column per "
                             "method (* the lowest of its row):\n");
            if (!st) st = print_group(r, g0, out, &t, err);
        }
        free(t.col_row);
        free(t.part_row);
        free(t.kl);
    }
    PQclear(r);
    return st;
}
