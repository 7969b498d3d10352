/* The sensitivity tables of `qsweep results` per method side by side (results.c): for each
 * (model, format, format options, quantize, mode) whose jobs ran more than one method
 * (kinds/method.h), one table of mean KL divergence with a row per part and a column per
 * method, so a method's repair of a component reads across the row. */
#ifndef QSWEEP_RESULTS_METHODS_H
#define QSWEEP_RESULTS_METHODS_H

#include <stdio.h>

#include <libpq-fe.h>

#include "error.h"

/* Prints the tables of experiment name (nothing when no group has two methods). Errors:
 * QS_EDB, QS_ENOMEM. */
qs_status qsweep_print_method_tables(PGconn *c, const char *name, FILE *out, qs_error *err);

#endif
