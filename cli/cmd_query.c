/* qsweep status, cancel, requeue, workers and db: the subcommands that read or write the
 * store (coordinator/store/store.h, its read-only queries in queries.h) without running
 * anything. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "cli.h"
#include "migrate.h"
#include "queries.h"
#include "scheduler.h"

/* Parses the options of the store subcommands (--db, --help, and --job where allow_job),
 * leaving the positional arguments from o->first. Returns -1 to go on, else the exit code
 * to return. */
typedef struct common_opts {
    const char *db;
    const char *job; /* cancel --job */
    int first;
} common_opts;

static int parse_common(int argc, char **argv, const char *cmd, void (*usage)(FILE *),
                        int allow_job, common_opts *o) {
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"job", required_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:j:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            o->db = optarg;
            break;
        case 'j':
            if (!allow_job) {
                usage(stderr);
                return QS_EXIT_USAGE;
            }
            o->job = optarg;
            break;
        case 'h':
            usage(stdout);
            return QS_EXIT_OK;
        default:
            usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    o->first = optind;
    o->db = qsweep_find_db(o->db, cmd);
    if (!o->db) return QS_EXIT_USAGE;
    return -1;
}

/* Seconds of work left in an experiment's unfinished jobs: each counts the mean duration of the
 * succeeded attempts of its own kind (a baseline reads every chunk once, an eval job
 * quantizes and compares against it: one pace for both was 2.6 times optimistic on the
 * SmolLM2 sweep once the baseline alone had finished). -1 while a kind left to run has no
 * succeeded attempt yet, or on error. */
static double work_left_s(qc_store *s, int64_t experiment_id) {
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)experiment_id);
    const char *params[] = {id};
    PGresult *r = PQexecParams(
        qc_store_pgconn(s),
        "WITH ej AS (SELECT j.id, j.kind, j.state FROM jobs j"
        "            JOIN experiment_jobs x ON x.job = j.id WHERE x.experiment = $1::bigint),"
        " pace AS (SELECT ej.kind, extract(epoch FROM avg(a.ended_at - a.started_at)) AS s"
        "          FROM attempts a JOIN ej ON ej.id = a.job"
        "          WHERE a.outcome = 'succeeded' GROUP BY ej.kind)"
        " SELECT count(*) FILTER (WHERE p.s IS NULL), coalesce(sum(p.s), 0)"
        " FROM ej LEFT JOIN pace p ON p.kind = ej.kind WHERE ej.state IN ('pending', 'running')",
        1, NULL, params, NULL, NULL, 0);
    double left = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
        strtoll(PQgetvalue(r, 0, 0), NULL, 10) == 0)
        left = strtod(PQgetvalue(r, 0, 1), NULL);
    PQclear(r);
    return left;
}

/* Seconds left for an experiment: its unfinished jobs' work (work_left_s), shared among the
 * attempts running now (one per busy worker, which heartbeats keep alive). -1 until each kind
 * of job left has a succeeded attempt; -3 when none of its attempts runs but a live worker is
 * there (busy with another experiment's job, or about to take one); -2 when no worker is live
 * at all (an interrupted `run`, no worker started): then there is no pace to speak of. */
static double eta_seconds(qc_store *s, const qc_progress *p) {
    qc_pace pace;
    qs_error err = {0};
    if (qc_store_pace(s, p->experiment_id, &pace, &err) != QS_OK) return -1;
    if (pace.running_live == 0) return pace.workers_live > 0 ? -3 : -2;
    if (pace.mean_attempt_s < 0) return -1;
    double left = work_left_s(s, p->experiment_id);
    return left < 0 ? -1 : left / (double)pace.running_live;
}

/* Characters (code points) of UTF-8 text: bytes that do not continue a sequence. */
static int text_chars(const char *text) {
    int chars = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        chars += (*p & 0xC0) != 0x80;
    return chars;
}

/* Writes text (UTF-8) left-aligned in a column of width characters: printf's %-28s counts
 * bytes, so a name with accents or CJK came out short and shifted the columns after it.
 * A longer text is written whole, or with limit > 0 cut to limit characters (at a code
 * point, the last one replaced by '~'). */
static void put_column_cut(FILE *out, const char *text, int width, int limit) {
    int chars = text_chars(text);
    if (limit > 0 && chars > limit) {
        int kept = 0;
        const unsigned char *p = (const unsigned char *)text;
        for (; *p; p++) {
            if ((*p & 0xC0) != 0x80 && kept++ == limit - 1) break;
            fputc(*p, out);
        }
        fputc('~', out);
        chars = limit;
    } else {
        fputs(text, out);
    }
    for (; chars < width; chars++)
        fputc(' ', out);
}

static void put_column(FILE *out, const char *text, int width) {
    put_column_cut(out, text, width, 0);
}

/* Columns of the terminal out writes to (TIOCGWINSZ), else $COLUMNS, else 0 (unknown: the
 * full line). */
static int output_columns(FILE *out) {
    struct winsize ws;
    if (isatty(fileno(out)) && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *c = getenv("COLUMNS");
    long v = c ? strtol(c, NULL, 10) : 0;
    return v > 0 && v < 100000 ? (int)v : 0;
}

/* The chunks of the experiment's running baseline jobs: chunks done and in all, summed over
 * them, from each one's newest "baseline_chunks" point of its current attempt (the point a
 * worker reports per chunk: worker/jobs/jobs.h QW_JOBS_BASELINE_CHUNKS). False when none is
 * running or none has reported yet. */
static bool baseline_chunks(qc_store *s, int64_t experiment_id, long long *done, long long *total) {
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)experiment_id);
    const char *params[] = {id};
    PGresult *r = PQexecParams(
        qc_store_pgconn(s),
        "SELECT coalesce(sum(p.step), 0), coalesce(sum(p.value), 0), count(p.step)"
        " FROM jobs j JOIN experiment_jobs x ON x.job = j.id"
        " CROSS JOIN LATERAL (SELECT r.step, r.value FROM results r"
        "   WHERE r.job = j.id AND r.name = 'baseline_chunks' AND NOT r.final"
        "   AND r.attempt = (SELECT max(a.attempt) FROM attempts a WHERE a.job = j.id)"
        "   ORDER BY r.step DESC LIMIT 1) p"
        " WHERE x.experiment = $1::bigint AND j.state = 'running' AND j.kind = 'baseline'",
        1, NULL, params, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
              strtoll(PQgetvalue(r, 0, 2), NULL, 10) > 0;
    if (ok) {
        *done = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        *total = (long long)strtod(PQgetvalue(r, 0, 1), NULL);
    }
    PQclear(r);
    return ok;
}

void qsweep_print_progress(qc_store *s, const qc_progress *p, FILE *out) {
    int64_t done = p->succeeded + p->failed + p->cancelled;
    int pct = p->total ? (int)(100 * done / p->total) : 100;
    char eta[96] = "", eta_short[48] = "";
    if (p->pending + p->running > 0) {
        double e = eta_seconds(s, p);
        if (e >= 0) {
            snprintf(eta, sizeof eta, "  ETA %dm%02ds", (int)(e / 60), (int)e % 60);
            snprintf(eta_short, sizeof eta_short, " ETA %dm%02ds", (int)(e / 60), (int)e % 60);
        } else if (e == -2) {
            snprintf(eta, sizeof eta, "  no worker running");
            snprintf(eta_short, sizeof eta_short, " no worker");
        } else if (e == -3) {
            snprintf(eta, sizeof eta, "  ETA ? (waiting for a worker)");
            snprintf(eta_short, sizeof eta_short, " waiting");
        } else {
            snprintf(eta, sizeof eta, "  ETA ?");
            snprintf(eta_short, sizeof eta_short, " ETA ?");
        }
        /* the baseline moving: its chunks, before any job has finished */
        long long bd, bt;
        if (p->running > 0 && baseline_chunks(s, p->experiment_id, &bd, &bt)) {
            size_t n = strlen(eta), ns = strlen(eta_short);
            snprintf(eta + n, sizeof eta - n, "  baseline chunk %lld/%lld", bd, bt);
            snprintf(eta_short + ns, sizeof eta_short - ns, " base %lld/%lld", bd, bt);
        }
    }
    /* The full line (about 140 characters), or for a narrower terminal a short one with the
     * bar and the name shrunk to fit in cols - 1 (no wrap, so `run` rewrites it in place). */
    char tail[256];
    /* pending: ready to dispatch; waiting: pending on a dependency not yet succeeded (the
       view's pending counts both) */
    snprintf(tail, sizeof tail,
             " %3d%%  %lld/%lld  pending %lld  waiting %lld  running %lld  succeeded %lld  "
             "failed %lld  cancelled %lld%s",
             pct, (long long)done, (long long)p->total, (long long)(p->pending - p->waiting),
             (long long)p->waiting, (long long)p->running, (long long)p->succeeded,
             (long long)p->failed, (long long)p->cancelled, eta);
    int cols = output_columns(out), name_w = 28, bar_w = 30, limit = 0;
    int name_chars = text_chars(p->name);
    if (cols > 0 &&
        (name_chars > name_w ? name_chars : name_w) + 3 + bar_w + (int)strlen(tail) > cols - 1) {
        char wait[32] = "";
        if (p->waiting) snprintf(wait, sizeof wait, " wait %lld", (long long)p->waiting);
        snprintf(tail, sizeof tail, " %d%% %lld/%lld%s run %lld ok %lld fail %lld%s%s", pct,
                 (long long)done, (long long)p->total, wait, (long long)p->running,
                 (long long)p->succeeded, (long long)p->failed + p->cancelled,
                 p->cancelled ? " (cancelled incl.)" : "", eta_short);
        if ((int)strlen(tail) > cols - 1 - 16) /* drop the note first */
            snprintf(tail, sizeof tail, " %d%% %lld/%lld%s run %lld ok %lld fail %lld%s", pct,
                     (long long)done, (long long)p->total, wait, (long long)p->running,
                     (long long)p->succeeded, (long long)p->failed + p->cancelled, eta_short);
        int room = cols - 1 - (int)strlen(tail) - 3; /* for name, bar and " []" */
        bar_w = room / 3 > 20 ? 20 : room / 3;
        if (bar_w < 5) bar_w = 0;
        name_w = room - bar_w;
        if (name_w < 4) name_w = 4;
        limit = name_w;
        if (name_chars < name_w) name_w = name_chars;
    }
    char bar[64];
    int fill = p->total ? (int)(bar_w * done / p->total) : bar_w;
    for (int i = 0; i < bar_w; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[bar_w] = 0;
    put_column_cut(out, p->name, name_w, limit);
    if (bar_w > 0) fprintf(out, " [%s]", bar);
    fputs(tail, out);
}

static void status_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep status [EXPERIMENT] [--db CONNINFO]\n"
        "  A progress bar per experiment (all of them without EXPERIMENT), job counts by state\n"
        "  (pending: ready to run; waiting: on a dependency not yet succeeded), and the time\n"
        "  left at the pace of the attempts finished so far. Pending jobs that ask for GPUs\n"
        "  no registered worker has (memory per GPU, GPU count, native FP4) are named with what\n"
        "  they need, rather than left waiting silently; so are pending jobs waiting for a\n"
        "  numerics path (their experiment's pin, or the grid's numerics) no live worker is on,\n"
        "  and live workers whose --backend auto runs on the CPU, with why.\n");
}

/* Lines for the pending GPU needs of experiment (NULL: all) that no registered worker (one
 * that has not left) fits (scheduler.h qc_sched_fits_any). Nothing when no worker is
 * registered: the progress line already says "no worker running". */
static qs_status print_unfit_needs(qc_store *s, const char *experiment, FILE *out, qs_error *err) {
    qc_worker_row *w = NULL;
    qc_need_row *need = NULL;
    size_t n_w = 0, n_need = 0;
    qs_status st = qc_store_workers(s, &w, &n_w, err);
    if (!st) st = qc_store_pending_needs(s, experiment, &need, &n_need, err);
    qc_sched_gpu(*gpus)[QC_SCHED_GPUS_MAX] = n_w ? calloc(n_w, sizeof *gpus) : NULL;
    qc_sched_worker *sw = n_w ? calloc(n_w, sizeof *sw) : NULL;
    const qc_sched_worker **ws = n_w ? calloc(n_w, sizeof *ws) : NULL;
    if (!st && n_w && (!gpus || !sw || !ws)) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    size_t live = 0;
    int64_t biggest = 0;
    int native = 0;
    for (size_t i = 0; !st && i < n_w; i++) {
        if (!strcmp(w[i].state, "left")) continue;
        int ng = 0;
        qc_sched_gpus_from_json(w[i].gpus, gpus[live], QC_SCHED_GPUS_MAX, &ng);
        sw[live] = (qc_sched_worker){.n_gpus = ng, .gpus = gpus[live]};
        for (int g = 0; g < ng; g++) {
            if (gpus[live][g].mem_mb > biggest) biggest = gpus[live][g].mem_mb;
            native += gpus[live][g].native_fp4;
        }
        ws[live] = &sw[live];
        live++;
    }
    for (size_t i = 0; !st && live && i < n_need; i++) {
        qc_sched_job j = {.gpus = need[i].gpus,
                          .gpu_mem_mb = need[i].gpu_mem_mb,
                          .native_fp4 = need[i].native_fp4,
                          .model_key = ""};
        if (qc_sched_fits_any(ws, live, &j)) continue;
        char have[160];
        if (biggest == 0) /* no GPU at all: "largest GPU has 0 MiB" read as a GPU with none */
            snprintf(have, sizeof have, "no registered worker has a GPU");
        else
            snprintf(have, sizeof have,
                     "the %zu registered worker%s' largest GPU has %lld MiB; %d GPU%s with "
                     "native FP4",
                     live, live == 1 ? "" : "s", (long long)biggest, native,
                     native == 1 ? "" : "s");
        fprintf(out,
                "%s: %lld pending job%s no registered worker can take: each needs %d GPU%s "
                "with %lld MiB%s (%s)\n",
                need[i].experiment, (long long)need[i].n_jobs, need[i].n_jobs == 1 ? "" : "s",
                j.gpus > 0 ? j.gpus : 1, j.gpus > 1 ? "s" : "", (long long)j.gpu_mem_mb,
                j.native_fp4 ? " and native FP4 (compute capability 10.x)" : "", have);
    }
    free(ws);
    free(sw);
    free(gpus);
    free(need);
    free(w);
    return st;
}

/* Lines for the pending jobs of experiment (NULL: all) that wait for a worker on a numerics
 * path no live worker (connected or silent) announced: the experiment's pin, or the path its
 * grid asks for (scheduler.h qc_sched_on_path). Then one line for each live worker whose
 * --backend auto runs on the CPU, saying why. */
static qs_status print_path_waits(qc_store *s, const char *experiment, FILE *out, qs_error *err) {
    qc_worker_row *w = NULL;
    qc_path_need_row *need = NULL;
    size_t n_w = 0, n_need = 0;
    qs_status st = qc_store_workers(s, &w, &n_w, err);
    if (!st) st = qc_store_pending_paths(s, experiment, &need, &n_need, err);
    qc_sched_worker *sw = n_w ? calloc(n_w, sizeof *sw) : NULL;
    const qc_sched_worker **live = n_w ? calloc(n_w, sizeof *live) : NULL;
    if (!st && n_w && (!sw || !live)) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    size_t n_live = 0;
    for (size_t k = 0; !st && k < n_w; k++)
        if (!strcmp(w[k].state, "connected") || !strcmp(w[k].state, "silent")) {
            sw[n_live] = (qc_sched_worker){.numerics_path = w[k].numerics_path};
            live[n_live] = &sw[n_live];
            n_live++;
        }
    for (size_t i = 0; !st && i < n_need; i++) {
        const char *pin = need[i].pinned[0] ? need[i].pinned : NULL;
        qc_sched_job j = {.numerics = need[i].want[0] ? need[i].want : NULL, .pinned = &pin};
        if (qc_sched_on_path_any(live, n_live, &j)) continue;
        char why[512];
        if (pin && need[i].pinned_by[0])
            snprintf(why, sizeof why,
                     "its jobs are also experiment %s's, pinned to it: a shared job follows the "
                     "oldest experiment's pin%s%s",
                     need[i].pinned_by, j.numerics ? "; its grid asks for numerics: " : "",
                     j.numerics ? j.numerics : "");
        else if (pin)
            snprintf(why, sizeof why,
                     "the experiment is pinned to it: its first job ran there, or qsweep pin%s%s",
                     j.numerics ? "; its grid asks for numerics: " : "",
                     j.numerics ? j.numerics : "");
        else
            snprintf(why, sizeof why, "its grid asks for numerics: %s", j.numerics);
        fprintf(out, "%s: %lld pending job%s waiting: no worker on path %s (%s)\n",
                need[i].experiment, (long long)need[i].n_jobs, need[i].n_jobs == 1 ? "" : "s",
                pin ? pin : need[i].want, why);
    }
    for (size_t k = 0; !st && k < n_w; k++)
        if (w[k].backend_note[0] &&
            (!strcmp(w[k].state, "connected") || !strcmp(w[k].state, "silent")))
            fprintf(out, "worker %s: numerics path %s: --backend auto runs on the CPU: %s\n",
                    w[k].id, w[k].numerics_path[0] ? w[k].numerics_path : "(not announced)",
                    w[k].backend_note);
    free(live);
    free(sw);
    free(need);
    free(w);
    return st;
}

int qsweep_cmd_status(int argc, char **argv) {
    common_opts o = {0};
    int rc = parse_common(argc, argv, "status", status_usage, 0, &o);
    if (rc >= 0) return rc;
    if (argc - o.first > 1) {
        fprintf(stderr, "qsweep status: unexpected argument '%s'\n", argv[o.first + 1]);
        status_usage(stderr);
        return QS_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_store *s = NULL;
    qc_progress *rows = NULL;
    size_t n = 0;
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(o.db), "status", &s, &err);
    if (!st) st = qc_store_progress(s, o.first < argc ? argv[o.first] : NULL, &rows, &n, &err);
    for (size_t i = 0; !st && i < n; i++) {
        qsweep_print_progress(s, &rows[i], stdout);
        putchar('\n');
    }
    if (!st && n == 0) printf("no experiments\n");
    if (!st) st = print_unfit_needs(s, o.first < argc ? argv[o.first] : NULL, stdout, &err);
    if (!st) st = print_path_waits(s, o.first < argc ? argv[o.first] : NULL, stdout, &err);
    free(rows);
    qc_store_close(s);
    return st ? qsweep_fail("status", &err) : QS_EXIT_OK;
}

static void cancel_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep cancel EXPERIMENT | --job JOB_KEY [--db CONNINFO]\n"
            "  Asks the coordinator to cancel every unfinished job of EXPERIMENT, or one job.\n"
            "  Running attempts are stopped; finished jobs keep their results.\n");
}

int qsweep_cmd_cancel(int argc, char **argv) {
    common_opts o = {0};
    int rc = parse_common(argc, argv, "cancel", cancel_usage, 1, &o);
    if (rc >= 0) return rc;
    if ((o.job != NULL) == (o.first < argc) || argc - o.first > 1) {
        cancel_usage(stderr);
        return QS_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_store *s = NULL;
    const char *exp = o.job ? NULL : argv[o.first];
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(o.db), "cancel", &s, &err);
    /* Nothing to cancel when everything is finished: say so rather than "cancel requested". */
    int finished = 0;
    char what[300] = "";
    if (!st && exp) {
        qc_progress *rows = NULL;
        size_t n = 0;
        st = qc_store_progress(s, exp, &rows, &n, &err);
        if (!st && n == 0) st = qs_error_set(&err, QS_ENOTFOUND, "no experiment named %s", exp);
        if (!st && rows[0].pending + rows[0].running == 0) {
            finished = 1;
            snprintf(what, sizeof what,
                     "experiment %s is finished (%lld succeeded, %lld failed, %lld cancelled)", exp,
                     (long long)rows[0].succeeded, (long long)rows[0].failed,
                     (long long)rows[0].cancelled);
        }
        free(rows);
    } else if (!st) {
        char state[32];
        st = qc_store_job_state(s, o.job, state, sizeof state, &err);
        if (!st && strcmp(state, "pending") && strcmp(state, "running")) {
            finished = 1;
            snprintf(what, sizeof what, "job %s is finished (%s)", o.job, state);
        }
    }
    if (!st && !finished) st = qc_store_request_cancel(s, o.job, exp, "qsweep cancel", &err);
    qc_store_close(s);
    if (st) return qsweep_fail("cancel", &err);
    if (finished) {
        printf("%s: nothing to cancel\n", what);
        return QS_EXIT_OK;
    }
    printf("cancel requested for %s %s; the coordinator applies it\n", o.job ? "job" : "experiment",
           o.job ? o.job : exp);
    return QS_EXIT_OK;
}

static void requeue_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep requeue EXPERIMENT [--db CONNINFO]\n"
            "  Puts EXPERIMENT's failed and cancelled jobs back in the queue with a fresh attempt\n"
            "  budget (their earlier attempts and results stay as history). A running coordinator\n"
            "  reads jobs when it starts: stop it first, then run or start it again.\n");
}

int qsweep_cmd_requeue(int argc, char **argv) {
    common_opts o = {0};
    int rc = parse_common(argc, argv, "requeue", requeue_usage, 0, &o);
    if (rc >= 0) return rc;
    if (argc - o.first != 1) {
        if (argc - o.first > 1)
            fprintf(stderr, "qsweep requeue: unexpected argument '%s'\n", argv[o.first + 1]);
        requeue_usage(stderr);
        return QS_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_store *s = NULL;
    size_t n = 0;
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(o.db), "requeue", &s, &err);
    if (!st) st = qc_store_requeue(s, argv[o.first], &n, &err);
    qc_store_close(s);
    if (st) return qsweep_fail("requeue", &err);
    printf("%zu job(s) of experiment %s queued again\n", n, argv[o.first]);
    return QS_EXIT_OK;
}

static void workers_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep workers [--db CONNINFO]\n"
            "  The workers the coordinator has seen: state (connected: seen in the last 90 s;\n"
            "  silent: not seen since; lost: not seen for 5 minutes and no BYE, e.g. killed;\n"
            "  left: said BYE or timed out), host, pid, threads, GPUs,\n"
            "  seconds since the last message, the job each is running now, and its GPUs: name,\n"
            "  memory, compute capability and whether its FP4 GEMMs are native (compute\n"
            "  capability 10.x: B200, B300) or emulated in BF16 (Hopper, Ada, 12.x); \"none (CPU)\"\n"
            "  for a worker that runs its jobs on the CPU backend.\n");
}

/* A worker's GPUs (workers.gpus, as the coordinator stores HELLO's: [{"name", "memory_mb",
 * "cc", "native_fp4"}]) in words: "NVIDIA H200 140.4 GiB cc 9.0 FP4 emulated; ...", or
 * "none (CPU)"; the stored text itself when it is not such an array. */
static void describe_gpus(const char *json, char *buf, size_t cap) {
    json_t *a = json_loads(json, 0, NULL);
    size_t at = 0;
    buf[0] = 0;
    if (!json_is_array(a)) {
        snprintf(buf, cap, "%s", json);
    } else if (json_array_size(a) == 0) {
        snprintf(buf, cap, "none (CPU)");
    } else {
        for (size_t i = 0; i < json_array_size(a) && at < cap; i++) {
            const json_t *g = json_array_get(a, i);
            const char *name = json_string_value(json_object_get(g, "name"));
            const char *cc = json_string_value(json_object_get(g, "cc"));
            double mb = (double)json_integer_value(json_object_get(g, "memory_mb"));
            int k =
                snprintf(buf + at, cap - at, "%s%s %.1f GiB cc %s FP4 %s", i ? "; " : "",
                         name ? name : "?", mb / 1024.0, cc ? cc : "?",
                         json_is_true(json_object_get(g, "native_fp4")) ? "native" : "emulated");
            if (k < 0) break;
            at += (size_t)k;
        }
    }
    json_decref(a);
}

int qsweep_cmd_workers(int argc, char **argv) {
    common_opts o = {0};
    int rc = parse_common(argc, argv, "workers", workers_usage, 0, &o);
    if (rc >= 0) return rc;
    if (o.first < argc) {
        fprintf(stderr, "qsweep workers: unexpected argument '%s'\n", argv[o.first]);
        workers_usage(stderr);
        return QS_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_store *s = NULL;
    qc_worker_row *w = NULL;
    size_t n = 0;
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(o.db), "workers", &s, &err);
    if (!st) st = qc_store_workers(s, &w, &n, &err);
    qc_store_close(s);
    if (st) return qsweep_fail("workers", &err);
    printf("%-32s %-9s %-16s %8s %7s %10s %-10s %s | %s\n", "worker", "state", "host", "pid",
           "threads", "last seen", "running", "gpus", "numerics path");
    for (size_t i = 0; i < n; i++) {
        put_column(stdout, w[i].id, 32);
        printf(" %-9s ", w[i].state);
        put_column(stdout, w[i].host, 16);
        char gpus[2048];
        describe_gpus(w[i].gpus, gpus, sizeof gpus);
        printf(" %8d %7d %9llds %-10s %s | %s%s%s%s\n", (int)w[i].pid, (int)w[i].threads,
               (long long)w[i].seen_s_ago, w[i].running, gpus,
               w[i].numerics_path[0] ? w[i].numerics_path : "-",
               w[i].backend_note[0] ? " (--backend auto on the CPU: " : "", w[i].backend_note,
               w[i].backend_note[0] ? ")" : "");
    }
    free(w);
    return QS_EXIT_OK;
}

/* The cluster `qsweep db start` started or adopted: kept, never destroyed (volatile: the
 * store stays, so LeakSanitizer sees the handle reachable). */
static qc_pgserver *volatile db_started;

static void db_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep db migrate [--db CONNINFO]\n"
        "       qsweep db start [--pg-dir DIR]\n"
        "       qsweep db stop [--pg-dir DIR]\n"
        "  migrate  applies the schema migrations (schema/NNN_*.sql) not yet applied; an edited\n"
        "           applied migration is refused\n"
        "  start    starts the private cluster of qsweep run (default DIR:\n"
        "           ${XDG_DATA_HOME:-~/.local/share}/qsweep/pg) and prints\n"
        "           export QSWEEP_DB='...', so eval \"$(qsweep db start)\" points qsweep and psql "
        "at it\n"
        "  stop     stops it\n");
}

int qsweep_cmd_db(int argc, char **argv) {
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"pg-dir", required_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL, *pg_dir = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:p:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            db = optarg;
            break;
        case 'p':
            pg_dir = optarg;
            break;
        case 'h':
            db_usage(stdout);
            return QS_EXIT_OK;
        default:
            db_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    const char *verb = optind == argc - 1 ? argv[optind] : "";
    qs_error err = {0};
    qs_status st = QS_OK;
    if (!strcmp(verb, "start") || !strcmp(verb, "stop")) {
        qc_pgserver *pg = NULL;
        st = qsweep_private_db_start(pg_dir, &pg, NULL, &err);
        if (!st && !strcmp(verb, "start")) {
            /* the handle is kept, never destroyed, so the server keeps running (and the
             * handle stays reachable: no leak report under LeakSanitizer) */
            db_started = pg;
            printf("export QSWEEP_DB='%s'\n", qc_pgserver_conninfo(pg));
            return QS_EXIT_OK;
        }
        if (!st) st = qc_pgserver_stop(pg, &err);
        qc_pgserver_destroy(pg);
        if (st) return qsweep_fail("db", &err);
        printf("stopped\n");
        return QS_EXIT_OK;
    }
    if (strcmp(verb, "migrate") != 0 || !qsweep_db_arg(db)) {
        if (!strcmp(verb, "migrate"))
            fprintf(stderr, "qsweep db migrate: give --db CONNINFO or set QSWEEP_DB\n");
        db_usage(stderr);
        return QS_EXIT_USAGE;
    }
    PGconn *conn = PQconnectdb(qsweep_db_arg(db));
    int applied = 0;
    if (PQstatus(conn) != CONNECTION_OK)
        st = qs_error_set(&err, QS_EDB, "cannot connect to the database: %s", PQerrorMessage(conn));
    if (!st) st = qc_migrate(conn, &applied, &err);
    PQfinish(conn);
    if (st) return qsweep_fail("db migrate", &err);
    printf("%d migration%s applied (%zu known)\n", applied, applied == 1 ? "" : "s",
           qc_schema_migrations_count);
    return QS_EXIT_OK;
}
