/* The registry of typed job kinds: one entry per kind a job can have on the
 * wire and in the store ("baseline", "eval"; "train" joins with its own module). Each kind's
 * module owns its spec struct, validation, canonical JSON and names; the registry lets code
 * that holds only a kind name (the coordinator checking a submission, a worker refusing a
 * malformed spec before it loads anything) reach them.
 *
 * Adding a kind: a kinds/<kind>.{c,h} that defines a qs_job_kind, plus one line in
 * registry.c's table (and its source in kinds/CMakeLists.txt). A kind of a new family (a
 * new grid kind, as training was) also brings, each with one registry line:
 *   - coordinator/grid/grid_<kind>.c, its grid schema and expansion (a line in grid_kind.c);
 *   - its worker module (worker/<kind>/, with qw_<kind>_register) and
 *     cli/<kind>_results.c, its results table: one row of cli/kind_table.c names both, and
 *     `qsweep worker` and `qsweep results` read that row (tests/cli/kind_table_test.c checks
 *     that the three tables agree). */
#ifndef QS_KINDS_REGISTRY_H
#define QS_KINDS_REGISTRY_H

#include <jansson.h>
#include <stddef.h>

#include "error.h"

/* One job kind. */
typedef struct qs_job_kind {
    const char *name;      /* the kind as stored and sent ("eval") */
    const char *grid_kind; /* the grid kind that expands into it ("sensitivity") */
    /* Decodes and validates spec (the kind's typed decoder), keeping nothing. QS_OK, or
     * QS_EINVAL naming the field. */
    qs_status (*check)(const json_t *spec, qs_error *err);
} qs_job_kind;

/* The kind named name, NULL if none. */
const qs_job_kind *qs_job_kind_find(const char *name);

/* Number of registered kinds, and kind i (0 <= i < count) in registration order. */
size_t qs_job_kind_count(void);
const qs_job_kind *qs_job_kind_at(size_t i);

/* Checks spec text against its kind: the text must be a JSON object whose "kind" names a
 * registered kind that accepts it. Errors: QS_EFORMAT (not a JSON object: line and column),
 * QS_EINVAL (unknown kind, or the kind's own error), QS_ENOMEM. */
qs_status qs_job_spec_check(const char *spec_json, qs_error *err);

#endif
