/* The one numerics path a plan reads (cmd_plan_parts.h qsweep_plan_pick_path): costs measured
 * on two paths differ in their last digits (docs/gpu.md "Numerics paths and baselines"), so a
 * plan never sums one path's costs with another's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_plan_parts.h"

/* The experiment's paths, most jobs first, as "a (n jobs), b (m jobs)" into list. */
static void describe(const PGresult *r, char *list, size_t cap) {
    size_t at = 0;
    list[0] = 0;
    for (int i = 0; i < PQntuples(r) && at < cap; i++)
        at += (size_t)snprintf(list + at, cap - at, "%s%s (%s jobs)", i ? ", " : "",
                               PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
}

qs_status qsweep_plan_pick_path(PGconn *c, const qsweep_plan_opts *o, qsweep_plan_input *in,
                                qs_error *err) {
    in->path[0] = 0;
    const char *p[] = {o->experiment};
    PGresult *r = PQexecParams(c,
                               "SELECT COALESCE(n.worker_path, n.path), count(*) "
                               "FROM v_numerics_path n JOIN experiment_jobs ej ON ej.job = "
                               "n.job_id JOIN experiments e ON e.id = ej.experiment "
                               "WHERE e.name = $1 GROUP BY 1 ORDER BY 2 DESC, 1",
                               1, NULL, p, NULL, NULL, 0);
    PGresult *pin = PQexecParams(c,
                                 "SELECT n.path FROM experiment_numerics n JOIN experiments e "
                                 "ON e.id = n.experiment WHERE e.name = $1",
                                 1, NULL, p, NULL, NULL, 0);
    qs_status st = QS_OK;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQresultStatus(pin) != PGRES_TUPLES_OK) {
        st = qs_error_set(err, QS_EDB, "plan: numerics paths: %s", PQerrorMessage(c));
        goto done;
    }
    int n = PQntuples(r);
    const char *pinned = PQntuples(pin) ? PQgetvalue(pin, 0, 0) : "";
    const char *want = o->numerics ? o->numerics : n == 1 ? PQgetvalue(r, 0, 0) : pinned;
    int found = 0;
    for (int i = 0; i < n; i++)
        found |= !strcmp(PQgetvalue(r, i, 0), want);
    char list[1024];
    describe(r, list, sizeof list);
    if (n == 0) { /* no result names a path: nothing to keep apart */
        snprintf(in->path, sizeof in->path, "%s", o->numerics ? o->numerics : "");
    } else if (o->numerics && !found) {
        st = qs_error_set(err, QS_EINVAL,
                          "plan: --numerics %s: experiment '%s' has no results on that path; its "
                          "results ran on %s",
                          o->numerics, o->experiment, list);
    } else if (!found) {
        st =
            qs_error_set(err, QS_EINVAL,
                         "plan: experiment '%s' ran on %d numerics paths, %s, and is %s; a plan "
                         "reads one path: give --numerics PATH",
                         o->experiment, n, list, *pinned ? "pinned to none of them" : "not pinned");
    } else {
        snprintf(in->path, sizeof in->path, "%s", want);
        if (n > 1)
            fprintf(stderr,
                    "qsweep plan: note: experiment '%s' ran on %d numerics paths, %s; the plan "
                    "reads %s (%s), --numerics PATH reads another\n",
                    o->experiment, n, list, in->path,
                    o->numerics ? "--numerics" : "the path the experiment is pinned to");
    }
done:
    PQclear(r);
    PQclear(pin);
    return st;
}
