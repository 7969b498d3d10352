/* The names of job states, attempt outcomes and attempt causes, as the schema spells them.
 * Contract: store.h. */
#include "store.h"

#include <string.h>

static const char *const job_state_names[] = {"pending", "running", "succeeded", "failed",
                                              "cancelled"};
static const char *const outcome_names[] = {"running", "succeeded", "failed",
                                            "lost",    "preempted", "cancelled"};

const char *qc_job_state_name(qc_job_state s) {
    return (unsigned)s < sizeof job_state_names / sizeof job_state_names[0] ? job_state_names[s]
                                                                            : NULL;
}

const char *qc_attempt_outcome_name(qc_attempt_outcome o) {
    return (unsigned)o < sizeof outcome_names / sizeof outcome_names[0] ? outcome_names[o] : NULL;
}

/* attempts.cause's names, as schema/170_attempt_cause.sql's CHECK lists them. */
static const char *const cause_names[] = {"oom",         "signal",    "exit",      "lease",
                                          "restart",     "grace",     "job_error", "worker_error",
                                          "preempted",   "bye",       "undeliverable",
                                          "assign_lost", "cancelled"};

bool qc_attempt_cause_known(const char *cause) {
    for (size_t i = 0; i < sizeof cause_names / sizeof cause_names[0]; i++)
        if (strcmp(cause, cause_names[i]) == 0) return true;
    return false;
}

qs_status qc_job_state_parse(const char *text, qc_job_state *out, qs_error *err) {
    for (size_t i = 0; i < sizeof job_state_names / sizeof job_state_names[0]; i++) {
        if (strcmp(text, job_state_names[i]) == 0) {
            *out = (qc_job_state)i;
            return QS_OK;
        }
    }
    return qs_error_set(err, QS_EINVAL, "job state: unknown value '%s'", text);
}
