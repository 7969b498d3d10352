/* The index of running attempts by worker name (coordinator/server/running.c) as pure code:
 * no sockets, no database. Each worker name's range holds exactly its jobs by increasing id,
 * whatever the order they were added in; a job leaves it when removed, a second add or a
 * remove of a job not there changes nothing, a job without a worker name is never held, and
 * the index grows past its first allocation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "running.h"

enum { N_JOBS = 300, N_NAMES = 7 };

static char names[N_NAMES][16];

/* Fails unless name's range in r is exactly the jobs of js[0..n) held (held[i]) with that
 * worker name, by increasing id. */
static void assert_range(const qc_running *r, const char *name, job *js, const bool *held,
                         size_t n) {
    job *const *of;
    size_t got = qc_srv_running_of(r, name, &of);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) { /* js are by increasing id */
        if (!held[i] || !js[i].worker_name || strcmp(js[i].worker_name, name) != 0) continue;
        if (k >= got)
            fail_msg("worker %s: job %lld missing from its range", name, (long long)js[i].id);
        if (of[k] != &js[i])
            fail_msg("worker %s: position %zu holds job %lld, want %lld", name, k,
                     (long long)of[k]->id, (long long)js[i].id);
        k++;
    }
    assert_int_equal(got, k);
}

static void ranges_hold_each_workers_jobs_by_id(void **state) {
    (void)state;
    qc_running s = {0};
    job *js = calloc(N_JOBS, sizeof *js);
    bool held[N_JOBS] = {0};
    assert_non_null(js);
    for (int i = 0; i < N_NAMES; i++)
        snprintf(names[i], sizeof names[i], "w%d", i);
    for (size_t i = 0; i < N_JOBS; i++) {
        js[i].id = (int64_t)i + 1;
        js[i].worker_name = i % 11 == 10 ? NULL : names[(i * 5) % N_NAMES];
    }
    /* added in a scrambled order (stride 7 is coprime with 300), some twice */
    for (size_t k = 0; k < N_JOBS; k++) {
        size_t i = (k * 7) % N_JOBS;
        qc_srv_running_add(&s, &js[i]);
        held[i] = js[i].worker_name != NULL;
        if (k % 13 == 0) qc_srv_running_add(&s, &js[i]);
    }
    assert_true(s.cap >= N_JOBS - N_JOBS / 11);
    for (int w = 0; w < N_NAMES; w++)
        assert_range(&s, names[w], js, held, N_JOBS);
    job *const *of;
    assert_int_equal(qc_srv_running_of(&s, "nobody", &of), 0);
    assert_int_equal(qc_srv_running_of(&s, "w", &of), 0); /* a prefix of every name */

    /* every third job leaves; removing one twice, or one never added, changes nothing */
    for (size_t i = 0; i < N_JOBS; i += 3) {
        qc_srv_running_remove(&s, &js[i]);
        qc_srv_running_remove(&s, &js[i]);
        held[i] = false;
    }
    job stranger = {.id = 5, .worker_name = names[0]};
    qc_srv_running_remove(&s, &stranger);
    size_t total = 0;
    for (int w = 0; w < N_NAMES; w++) {
        assert_range(&s, names[w], js, held, N_JOBS);
        total += qc_srv_running_of(&s, names[w], &of);
    }
    size_t want = 0;
    for (size_t i = 0; i < N_JOBS; i++)
        want += held[i];
    assert_int_equal(total, want);
    assert_int_equal(s.n, want);
    qc_srv_running_free(&s);
    free(js);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ranges_hold_each_workers_jobs_by_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
