/* One job's own bookkeeping (job.h): its state, the chunks of a split RESULT, the digest a
 * training job's RESULT records, the class of a supervisor's exit note, and freeing it. */
#include <stdlib.h>
#include <string.h>

#include "job.h"

void qc_srv_set_state(job *j, jstate st) {
    j->state = st;
    j->q.pending = st == J_PENDING;
}

void qc_srv_chunks_drop(job *j) {
    for (size_t i = 0; i < j->n_chunk_rows; i++)
        free(j->chunk_rows[i].name);
    free(j->chunk_rows);
    j->chunk_rows = NULL;
    j->n_chunk_rows = j->cap_chunk_rows = 0;
    j->chunks = j->chunk_next = 0;
}

void qc_srv_job_free(job *j) {
    if (!j) return;
    free(j->kind);
    free(j->spec);
    free(j->model_key);
    free(j->deps);
    free(j->error);
    free(j->worker_name);
    free(j->avoid);
    free(j->exit_note);
    free(j->job_key);
    free(j->trained_by);
    free(j->model_digest);
    free(j->numerics);
    qc_srv_chunks_drop(j);
    free(j);
}

const char *qc_srv_exit_cause(const char *note) {
    if (strncmp(note, "killed by signal ", 17) == 0)
        return strstr(note, "; out of memory") ? "oom" : "signal";
    if (strncmp(note, "exit status ", 12) == 0) return "exit";
    return NULL;
}

bool qc_srv_is_digest(const char *text) {
    size_t n = 0;
    for (; text[n]; n++)
        if (!((text[n] >= '0' && text[n] <= '9') || (text[n] >= 'a' && text[n] <= 'f')))
            return false;
    return n == 64;
}

void qc_srv_keep_model_digest(job *j, const chunk_metric *m, size_t n) {
    static const char prefix[] = "model_digest.";
    if (strcmp(j->kind, "train") != 0) return;
    for (size_t i = 0; i < n; i++) {
        if (!m[i].final || strncmp(m[i].name, prefix, sizeof prefix - 1) != 0) continue;
        const char *hex = m[i].name + sizeof prefix - 1;
        if (!qc_srv_is_digest(hex)) continue;
        free(j->model_digest);
        if (!(j->model_digest = strdup(hex))) abort();
    }
}
