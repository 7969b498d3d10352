/* Result rows of a PostgreSQL query printed as CSV or JSON, shared by `qsweep results` for
 * sensitivity sweeps (results.c), pipelines (pipeline_results.c) and training sweeps
 * (train_results.c), with what their tables print alike: KL values and the psql footer. */
#ifndef QSWEEP_RESULT_ROWS_H
#define QSWEEP_RESULT_ROWS_H

#include <stdio.h>

#include <libpq-fe.h>

#include "error.h"

/* How a column's text becomes a JSON value (SQL NULL is always JSON null). */
typedef enum qsweep_col_type {
    QSWEEP_COL_TEXT, /* a JSON string, the text as stored */
    QSWEEP_COL_REAL, /* a JSON real (strtod) */
    QSWEEP_COL_INT,  /* a JSON integer (strtoll, base 10) */
    QSWEEP_COL_JSON, /* the text parsed as JSON (null when it does not parse) */
} qsweep_col_type;

/* Column col of row `row` as a double: NaN when SQL NULL, else strtod of its text. */
double qsweep_col_num(PGresult *r, int row, int col);

/* A KL divergence as a table prints it with `decimals` decimal places: a negative value that
 * rounds to zero there becomes +0, so it prints 0.000000 rather than -0.000000. A KL is >= 0
 * mathematically; a slightly negative mean is the rounding of its sum of p log(p/q) terms
 * in floating point. Any other value (NaN, a larger negative value) is returned unchanged. */
double qsweep_kl_shown(double kl, int decimals);

/* The footer under a results table that gives the same numbers from the views: "\nThe same
 * from the views<note>:" then a psql command for connection c reading sql_fmt (a query with
 * one %s, the experiment) with experiment name as an SQL literal, as a here-document. note:
 * "" or e.g. " (each seed: v_pipeline_sensitivity)". Aborts without memory. */
void qsweep_print_views_query(PGconn *c, const char *note, const char *sql_fmt, const char *name,
                              FILE *out);

/* Writes one CSV field, quoted per RFC 4180 when it holds ',', '"' or a newline. */
void qsweep_csv_field(const char *v, FILE *out);

/* A header line of names[0..ncols) then every row of r (NULL: the header alone), columns
 * 0..ncols-1, SQL NULL as the empty field. */
void qsweep_print_csv_rows(PGresult *r, const char *const *names, int ncols, FILE *out);

/* Every row of r (NULL: none) as an indented JSON array of objects keyed names[c], each column
 * typed by types[c]. Errors: QS_EIO when the output cannot be written. */
qs_status qsweep_print_json_rows(PGresult *r, const char *const *names,
                                 const qsweep_col_type *types, int ncols, FILE *out, qs_error *err);

#endif
