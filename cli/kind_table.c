/* The job kinds' parts that live above the coordinator and the worker library, one row per
 * grid kind (cli.h: qsweep_kind_row). kinds/registry.c lists the job kinds themselves (spec,
 * validation); this table gives each family of them, by its grid kind, the function that
 * registers its job functions in `qsweep worker` and, unless it is the default sensitivity
 * layout, its results table. A new kind adds its row here: cmd_serve.c and results.c read
 * the table and name no kind. */
#include <stddef.h>
#include <string.h>

#include "cli.h"
#include "jobs.h"
#include "loop.h"
#include "registry.h"
#include "train_kind.h"

static const qsweep_kind_row rows[] = {
    /* grid kind     worker's job functions  holds its jobs, its results (NULL: sensitivity) */
    {"sensitivity", qw_jobs_register, NULL, NULL},
    {"training", qw_train_register, qsweep_is_train_experiment, qsweep_print_train_results},
};

size_t qsweep_kind_rows(const qsweep_kind_row **out) {
    *out = rows;
    return sizeof rows / sizeof rows[0];
}

qs_status qsweep_register_worker_kinds(qs_error *err) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        qs_status st = rows[i].register_worker(err);
        if (st) return qs_error_wrap(err, "job kinds of grid kind %s", rows[i].grid_kind);
    }
    /* every job kind the coordinator accepts must be runnable here */
    for (size_t i = 0; i < qs_job_kind_count(); i++) {
        const qs_job_kind *k = qs_job_kind_at(i);
        if (!qw_kind_registered(k->name))
            return qs_error_set(err, QS_ESTATE,
                                "job kind %s (grid kind %s, kinds/registry.c) has no worker "
                                "function: its row in cli/kind_table.c does not register it",
                                k->name, k->grid_kind);
    }
    return QS_OK;
}

qs_status qsweep_print_kind_tables(qc_store *db, const char *name, int format, FILE *out,
                                   int *printed, qs_error *err) {
    *printed = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (!rows[i].holds) continue;
        int holds = 0;
        qs_status st = rows[i].holds(db, name, &holds, err);
        if (st) return st;
        if (!holds) continue;
        *printed = 1;
        return rows[i].print_results(db, name, format, out, err);
    }
    return QS_OK;
}
