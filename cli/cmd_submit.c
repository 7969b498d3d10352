/* qsweep submit GRID: validate, expand and queue a grid (or, with --dry-run, show it). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void submit_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep submit GRID [--set KEY=VALUE]... [--dry-run [--sample N]] [--db CONNINFO]\n"
        "  Validates GRID (every error names file:line:column), expands it into jobs and queues\n"
        "  the experiment and its jobs in one transaction. Jobs already known by their job_key\n"
        "  (from this grid or another experiment) are linked, not added again.\n"
        "  --set KEY=VALUE  override a grid value before validation (Hydra style: "
        "dataset.ctx=512,\n"
        "                   sensitivity.formats=[nvfp4], models.0=/path, +key=value adds a key)\n"
        "  --dry-run        print the job count per kind and mode (a pipeline: per stage, and its\n"
        "                   DAG) and a sample; queue nothing\n"
        "  --sample N       jobs shown by --dry-run, 0..1000000 (default 3)\n"
        "  --db CONNINFO    libpq connection string (default $QSWEEP_DB)\n");
}

/* Prints the counts of the jobs of list whose stage is `stage` (every job when NULL): jobs of
 * no mode by kind, in order of first appearance ("baseline"), then eval jobs by mode in mode
 * order, as "N jobs (a baseline, b component)". */
static void print_counts(const qc_job_list *jobs, const char *stage, FILE *out) {
    const char *kind[16] = {0};
    size_t per_kind[16] = {0}, n_kinds = 0, per_mode[QS_MODE_COUNT] = {0}, n = 0;
    for (size_t i = 0; i < jobs->n; i++) {
        const qc_job *j = &jobs->jobs[i];
        if (stage && strcmp(j->stage, stage)) continue;
        n++;
        if (j->mode >= 0 && j->mode < QS_MODE_COUNT) {
            per_mode[j->mode]++;
            continue;
        }
        size_t k = 0;
        while (k < n_kinds && strcmp(kind[k], j->kind))
            k++;
        if (k == n_kinds && n_kinds < 16) {
            kind[n_kinds] = j->kind;
            per_kind[n_kinds++] = 0;
        }
        if (k < n_kinds) per_kind[k]++;
    }
    fprintf(out, "%zu jobs (", n);
    const char *sep = "";
    for (size_t k = 0; k < n_kinds; k++, sep = ", ")
        fprintf(out, "%s%zu %s", sep, per_kind[k], kind[k]);
    for (int m = 0; m < QS_MODE_COUNT; m++)
        if (per_mode[m]) {
            fprintf(out, "%s%zu %s", sep, per_mode[m], qs_mode_name((qs_mode)m));
            sep = ", ";
        }
    fprintf(out, ")");
}

/* The " after jobs 5 and 1" of a job with dependencies (1-based numbers). */
static void print_after(const qc_job *j, FILE *out) {
    for (size_t d = 0; d < j->n_deps; d++)
        fprintf(out, "%s%ld",
                d == 0               ? (j->n_deps > 1 ? "  after jobs " : "  after job ")
                : d + 1 == j->n_deps ? " and "
                                     : ", ",
                j->deps[d] + 1);
}

/* A pipeline's DAG: each stage's counts, then every job no other job precedes with what
 * waits for it, a level at a time: the jobs that wait for it directly, and for each of those
 * that has waiting jobs itself, their counts. Jobs of a level that wait for the same jobs
 * are one line. */
static void print_dag(const qc_grid *g, const qc_job_list *jobs, FILE *out) {
    size_t n_stages = qc_grid_pipeline_stages(g);
    for (size_t s = 0; s < n_stages; s++) {
        const char *kind = NULL, *name = qc_grid_pipeline_stage(g, s, &kind);
        fprintf(out, "stage %s (%s): ", name, kind);
        print_counts(jobs, name, out);
        fputc('\n', out);
    }
    size_t edges = 0;
    for (size_t i = 0; i < jobs->n; i++)
        edges += jobs->jobs[i].n_deps;
    fprintf(out, "dependencies: %zu edges\nDAG (each job, then the jobs that wait for it):\n",
            edges);
    for (size_t i = 0; i < jobs->n; i++) {
        const qc_job *r = &jobs->jobs[i];
        if (r->n_deps) continue;
        fprintf(out, "  job %zu [%s] %s %s\n", i + 1, r->stage, r->kind, r->label);
        /* the jobs that wait for r first of all (r is their first or only dependency
           besides a job that itself waits for r) */
        for (size_t k = i + 1; k < jobs->n; k++) {
            const qc_job *b = &jobs->jobs[k];
            int direct = 0, via = 0;
            for (size_t d = 0; d < b->n_deps; d++) {
                direct |= b->deps[d] == (long)i;
                via |= b->deps[d] != (long)i;
            }
            if (!direct || via) continue;
            fprintf(out, "    job %zu [%s] %s %s", k + 1, b->stage, b->kind, b->label);
            print_after(b, out);
            fputc('\n', out);
            /* the jobs that wait for b (and perhaps r): counted by kind and mode */
            size_t n_wait = 0, per_mode[QS_MODE_COUNT] = {0}, other = 0;
            const qc_job *one = NULL;
            for (size_t m = k + 1; m < jobs->n; m++) {
                const qc_job *e = &jobs->jobs[m];
                int on_b = 0;
                for (size_t d = 0; d < e->n_deps; d++)
                    on_b |= e->deps[d] == (long)k;
                if (!on_b) continue;
                n_wait++;
                one = e;
                if (e->mode >= 0 && e->mode < QS_MODE_COUNT)
                    per_mode[e->mode]++;
                else
                    other++;
            }
            if (!n_wait) continue;
            fprintf(out, "      %zu jobs (", n_wait);
            const char *sep = "";
            for (int m = 0; m < QS_MODE_COUNT; m++)
                if (per_mode[m]) {
                    fprintf(out, "%s%zu %s", sep, per_mode[m], qs_mode_name((qs_mode)m));
                    sep = ", ";
                }
            if (other) fprintf(out, "%s%zu other", sep, other);
            fprintf(out, ")");
            print_after(one, out);
            fprintf(out, " (each)\n");
        }
    }
}

/* Prints what a grid expands to: counts per job kind (eval jobs per mode), a pipeline's DAG,
 * then `sample` jobs spread over the list (the first, then evenly), each with its key and
 * spec. */
static void print_dry_run(const qc_grid *g, const qc_job_list *jobs, int sample, FILE *out) {
    fprintf(out, "experiment %s: ", g->name);
    print_counts(jobs, NULL, out);
    fputc('\n', out);
    if (qc_grid_pipeline_stages(g)) print_dag(g, jobs, out);
    size_t n = (size_t)sample < jobs->n ? (size_t)sample : jobs->n;
    for (size_t s = 0; s < n; s++) {
        size_t i = n > 1 ? s * (jobs->n - 1) / (n - 1) : 0;
        const qc_job *j = &jobs->jobs[i];
        fprintf(out, "\njob %zu/%zu  %s\n  kind %s  job_key %s", i + 1, jobs->n, j->label, j->kind,
                j->key);
        print_after(j, out);
        if (j->need.gpus > 0)
            fprintf(out, "\n  needs %d GPU%s x %lld MiB%s", j->need.gpus,
                    j->need.gpus > 1 ? "s" : "", (long long)j->need.gpu_mem_mb,
                    j->need.native_fp4 ? " with native FP4" : "");
        fprintf(out, "\n  spec %s\n", j->spec);
    }
}

qs_status qsweep_submit_jobs(qc_store *db, const qc_grid *g, const qc_job_list *jobs,
                             qc_submit_counts *counts, qs_error *err) {
    return qsweep_submit_jobs_pinned(db, g, jobs, NULL, counts, err);
}

qs_status qsweep_submit_jobs_pinned(qc_store *db, const qc_grid *g, const qc_job_list *jobs,
                                    const char *pin, qc_submit_counts *counts, qs_error *err) {
    qc_job_submit *js = calloc(jobs->n ? jobs->n : 1, sizeof *js);
    const char **deps = calloc(jobs->n ? jobs->n * QC_JOB_DEPS_MAX : 1, sizeof *deps);
    if (!js || !deps) {
        free(js);
        free(deps);
        return qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < jobs->n; i++) {
        const qc_job *j = &jobs->jobs[i];
        js[i] = (qc_job_submit){.job_key = j->key,
                                .kind = j->kind,
                                .spec_json = j->spec,
                                .priority = g->priority,
                                .gpus = j->need.gpus,
                                .gpu_mem_mb = j->need.gpu_mem_mb,
                                .native_fp4 = j->need.native_fp4,
                                .model_key = j->model_key[0] ? j->model_key : NULL,
                                .max_attempts = g->max_attempts,
                                .stage = j->stage};
        for (size_t d = 0; d < j->n_deps; d++)
            deps[i * QC_JOB_DEPS_MAX + d] = jobs->jobs[j->deps[d]].key;
        if (j->n_deps) {
            js[i].depends_on = &deps[i * QC_JOB_DEPS_MAX];
            js[i].n_depends_on = j->n_deps;
        }
    }
    qs_status st =
        qc_store_submit_pinned(db, g->name, g->description, g->source, NULL, js, jobs->n, pin,
                               counts, err);
    if (st == QS_ESTATE) {
        /* the name is taken by another grid: bad input, and the way out is a new name */
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        st = qs_error_set(err, QS_EINVAL, "%s (e.g. --set name=%s-2)", msg, g->name);
    }
    free(js);
    free(deps);
    return st;
}

void qsweep_print_submit(const qc_grid *g, size_t n_jobs, const qc_submit_counts *c, FILE *out) {
    fprintf(out, "experiment %s (id %lld%s): %zu jobs: %zu new, %zu already done, %zu already queued",
            g->name, (long long)c->experiment_id, c->experiment_new ? "" : ", submitted before",
            n_jobs, c->jobs_new, c->reused_done, c->reused_pending);
    /* the failed ones only when there are some: "0 failed before (left as they are...)" read
       as a warning about nothing */
    if (c->reused_failed)
        fprintf(out, ", %zu failed before (left as they are: %s requeue %s runs them again)",
                c->reused_failed, qsweep_invoked(), g->name);
    fputc('\n', out);
}

int qsweep_cmd_submit(int argc, char **argv) {
    static const struct option opts[] = {
        {"set", required_argument, 0, 's'},    {"dry-run", no_argument, 0, 'n'},
        {"sample", required_argument, 0, 'k'}, {"db", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    size_t n_sets = 0;
    int dry = 0, sample = 3, c;
    const char *db = NULL;
    if (!sets) return QS_EXIT_RUNTIME;
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:nk:d:h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            sets[n_sets++] = optarg;
            break;
        case 'n':
            dry = 1;
            break;
        case 'k':
            if (qsweep_parse_int("submit", "--sample", optarg, 0, 1000000, &sample)) {
                free(sets);
                return QS_EXIT_USAGE;
            }
            break;
        case 'd':
            db = optarg;
            break;
        case 'h':
            submit_usage(stdout);
            free(sets);
            return QS_EXIT_OK;
        default:
            submit_usage(stderr);
            free(sets);
            return QS_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        if (optind < argc - 1)
            fprintf(stderr, "qsweep submit: unexpected argument '%s'\n", argv[optind + 1]);
        submit_usage(stderr);
        free(sets);
        return QS_EXIT_USAGE;
    }
    const char *conninfo = qsweep_db_arg(db);
    if (!dry && !conninfo) {
        fprintf(stderr, "qsweep submit: no database: give --db CONNINFO or set QSWEEP_DB (or use "
                        "qsweep run)\n");
        free(sets);
        return QS_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_grid *g = NULL;
    qc_job_list jobs = {0};
    int rc = QS_EXIT_OK;
    qs_status st = qsweep_load_grid(argv[optind], sets, n_sets, &g, &jobs, &err);
    if (st) {
        rc = qsweep_fail("submit", &err);
    } else if (dry) {
        print_dry_run(g, &jobs, sample, stdout);
    } else {
        qc_store *store = NULL;
        qc_submit_counts counts = {0};
        st = qc_store_open(conninfo, "submit", &store, &err);
        if (!st) st = qsweep_submit_jobs(store, g, &jobs, &counts, &err);
        if (st)
            rc = qsweep_fail("submit", &err);
        else
            qsweep_print_submit(g, jobs.n, &counts, stdout);
        qc_store_close(store);
    }
    qc_job_list_free(&jobs);
    qc_grid_free(g);
    free(sets);
    return rc;
}
