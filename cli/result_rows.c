/* CSV and JSON printing of query result rows (result_rows.h). */
#include "result_rows.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double qsweep_col_num(PGresult *r, int row, int col) {
    return PQgetisnull(r, row, col) ? NAN : strtod(PQgetvalue(r, row, col), NULL);
}

double qsweep_kl_shown(double kl, int decimals) {
    double half_unit = 0.5 * pow(10.0, -decimals);
    return kl <= 0 && kl > -half_unit ? 0.0 : kl;
}

void qsweep_print_views_query(PGconn *c, const char *note, const char *sql_fmt, const char *name,
                              FILE *out) {
    char *lit = PQescapeLiteral(c, name, strlen(name));
    const char *v = lit ? lit : "''";
    int n = snprintf(NULL, 0, sql_fmt, v);
    char *q = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!q) abort();
    snprintf(q, (size_t)n + 1, sql_fmt, v);
    PQfreemem(lit);
    fprintf(out, "\nThe same from the views%s:\npsql \"host=%s port=%s user=%s dbname=%s\" <<'SQL'\n%s;\nSQL\n",
            note, PQhost(c), PQport(c), PQuser(c), PQdb(c), q);
    free(q);
}

void qsweep_csv_field(const char *v, FILE *out) {
    if (!strpbrk(v, ",\"\n")) {
        fputs(v, out);
        return;
    }
    fputc('"', out); /* RFC 4180 quoting */
    for (; *v; v++) {
        if (*v == '"') fputc('"', out);
        fputc(*v, out);
    }
    fputc('"', out);
}

void qsweep_print_csv_rows(PGresult *r, const char *const *names, int ncols, FILE *out) {
    for (int c = 0; c < ncols; c++)
        fprintf(out, "%s%s", c ? "," : "", names[c]);
    fputc('\n', out);
    for (int i = 0; r && i < PQntuples(r); i++) {
        for (int c = 0; c < ncols; c++) {
            if (c) fputc(',', out);
            qsweep_csv_field(PQgetvalue(r, i, c), out); /* NULL prints as the empty field */
        }
        fputc('\n', out);
    }
}

/* Column c of row i as the JSON value its type says; NULL only when jansson fails. */
static json_t *json_of(PGresult *r, int i, int c, qsweep_col_type t) {
    if (PQgetisnull(r, i, c)) return json_null();
    const char *v = PQgetvalue(r, i, c);
    switch (t) {
    case QSWEEP_COL_REAL:
        return json_real(qsweep_col_num(r, i, c));
    case QSWEEP_COL_INT:
        return json_integer(strtoll(v, NULL, 10));
    case QSWEEP_COL_JSON:
        return json_loads(v, 0, NULL);
    case QSWEEP_COL_TEXT:
    default:
        return json_string(v);
    }
}

qs_status qsweep_print_json_rows(PGresult *r, const char *const *names,
                                 const qsweep_col_type *types, int ncols, FILE *out,
                                 qs_error *err) {
    json_t *arr = json_array();
    for (int i = 0; arr && r && i < PQntuples(r); i++) {
        json_t *o = json_object();
        for (int c = 0; c < ncols; c++) {
            json_t *v = json_of(r, i, c, types[c]);
            json_object_set_new(o, names[c], v ? v : json_null());
        }
        json_array_append_new(arr, o);
    }
    if (!arr || json_dumpf(arr, out, JSON_INDENT(2)) != 0) {
        json_decref(arr);
        return qs_error_set(err, QS_EIO, "cannot write the JSON output");
    }
    fputc('\n', out);
    json_decref(arr);
    return QS_OK;
}
