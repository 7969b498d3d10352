/* qsweep status, cancel, workers and db migrate: the subcommands that read or write the
 * store (coordinator/store/store.h) without running anything. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "migrate.h"

/* Parses the options of the store subcommands (--db, --help, and --job where allow_job),
 * leaving the positional arguments from o->first. Returns -1 to go on, else the exit code
 * to return. */
typedef struct common_opts {
    const char *db;
    const char *job; /* cancel --job */
    int first;
} common_opts;

static int parse_common(int argc, char **argv, void (*usage)(FILE *), int allow_job,
                        common_opts *o) {
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
                return QSWEEP_EXIT_USAGE;
            }
            o->job = optarg;
            break;
        case 'h':
            usage(stdout);
            return QSWEEP_EXIT_OK;
        default:
            usage(stderr);
            return QSWEEP_EXIT_USAGE;
        }
    }
    o->first = optind;
    if (!qsweep_db_arg(o->db)) {
        fprintf(stderr, "qsweep %s: no database: give --db CONNINFO or set QSWEEP_DB\n", argv[0]);
        return QSWEEP_EXIT_USAGE;
    }
    return -1;
}

/* Seconds left for an experiment: the jobs not yet finished times the mean duration of its
 * succeeded attempts, shared among the attempts running now (one per busy worker, which
 * heartbeats keep alive). -1 until one attempt has succeeded. */
static double eta_seconds(qc_store *s, const qc_progress *p) {
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)p->experiment_id);
    const char *params[1] = {id};
    PGresult *r = PQexecParams(
        qc_store_pgconn(s),
        "SELECT extract(epoch FROM avg(a.ended_at - a.started_at) "
        "                FILTER (WHERE a.outcome = 'succeeded')),"
        "       count(*) FILTER (WHERE a.outcome = 'running' AND a.lease_expires_at > now())"
        " FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job"
        " WHERE ej.experiment = $1",
        1, NULL, params, NULL, NULL, 0);
    double eta = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)) {
        double mean = strtod(PQgetvalue(r, 0, 0), NULL);
        long running = strtol(PQgetvalue(r, 0, 1), NULL, 10);
        eta = (double)(p->pending + p->running) * mean / (double)(running > 0 ? running : 1);
    }
    PQclear(r);
    return eta;
}

/* Writes text (UTF-8) left-aligned in a column of width characters: printf's %-28s counts
 * bytes, so a name with accents or CJK came out short and shifted the columns after it.
 * Counts code points (bytes that do not continue a sequence); a longer text is written
 * whole. */
static void put_column(FILE *out, const char *text, int width) {
    int chars = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        chars += (*p & 0xC0) != 0x80;
    fputs(text, out);
    for (; chars < width; chars++)
        fputc(' ', out);
}

void qsweep_print_progress(qc_store *s, const qc_progress *p, FILE *out) {
    const int width = 30;
    int64_t done = p->succeeded + p->failed + p->cancelled;
    int fill = p->total ? (int)(width * done / p->total) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    put_column(out, p->name, 28);
    fprintf(out,
            " [%s] %3d%%  %lld/%lld  pending %lld  running %lld  succeeded %lld  failed %lld  "
            "cancelled %lld",
            bar, p->total ? (int)(100 * done / p->total) : 100, (long long)done,
            (long long)p->total, (long long)p->pending, (long long)p->running,
            (long long)p->succeeded, (long long)p->failed, (long long)p->cancelled);
    if (p->pending + p->running > 0) {
        double eta = eta_seconds(s, p);
        if (eta >= 0)
            fprintf(out, "  ETA %dm%02ds", (int)(eta / 60), (int)eta % 60);
        else
            fprintf(out, "  ETA ?");
    }
}

static void status_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep status [EXPERIMENT] [--db CONNINFO]\n"
        "  A progress bar per experiment (all of them without EXPERIMENT), job counts by state,\n"
        "  and the time left at the pace of the attempts finished so far.\n");
}

int qsweep_cmd_status(int argc, char **argv) {
    common_opts o = {0};
    int rc = parse_common(argc, argv, status_usage, 0, &o);
    if (rc >= 0) return rc;
    if (argc - o.first > 1) {
        fprintf(stderr, "qsweep status: unexpected argument '%s'\n", argv[o.first + 1]);
        status_usage(stderr);
        return QSWEEP_EXIT_USAGE;
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
    free(rows);
    qc_store_close(s);
    return st ? qsweep_fail("status", &err) : QSWEEP_EXIT_OK;
}

static void cancel_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep cancel EXPERIMENT | --job JOB_KEY [--db CONNINFO]\n"
            "  Asks the coordinator to cancel every unfinished job of EXPERIMENT, or one job.\n"
            "  Running attempts are stopped; finished jobs keep their results.\n");
}

int qsweep_cmd_cancel(int argc, char **argv) {
    common_opts o = {0};
    int rc = parse_common(argc, argv, cancel_usage, 1, &o);
    if (rc >= 0) return rc;
    if ((o.job != NULL) == (o.first < argc) || argc - o.first > 1) {
        cancel_usage(stderr);
        return QSWEEP_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_store *s = NULL;
    const char *exp = o.job ? NULL : argv[o.first];
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(o.db), "cancel", &s, &err);
    if (!st) st = qc_store_request_cancel(s, o.job, exp, "qsweep cancel", &err);
    qc_store_close(s);
    if (st) return qsweep_fail("cancel", &err);
    printf("cancel requested for %s %s; the coordinator applies it\n", o.job ? "job" : "experiment",
           o.job ? o.job : exp);
    return QSWEEP_EXIT_OK;
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
    int rc = parse_common(argc, argv, requeue_usage, 0, &o);
    if (rc >= 0) return rc;
    if (argc - o.first != 1) {
        if (argc - o.first > 1)
            fprintf(stderr, "qsweep requeue: unexpected argument '%s'\n", argv[o.first + 1]);
        requeue_usage(stderr);
        return QSWEEP_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_store *s = NULL;
    size_t n = 0;
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(o.db), "requeue", &s, &err);
    if (!st) st = qc_store_requeue(s, argv[o.first], &n, &err);
    qc_store_close(s);
    if (st) return qsweep_fail("requeue", &err);
    printf("%zu job(s) of experiment %s queued again\n", n, argv[o.first]);
    return QSWEEP_EXIT_OK;
}

static void workers_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep workers [--db CONNINFO]\n"
        "  The workers the coordinator has seen: state (connected: seen in the last 90 s;\n"
        "  silent: not seen since; left: said BYE or timed out), host, pid, threads, GPUs,\n"
        "  seconds since the last message, and the job each is running now.\n");
}

int qsweep_cmd_workers(int argc, char **argv) {
    common_opts o = {0};
    int rc = parse_common(argc, argv, workers_usage, 0, &o);
    if (rc >= 0) return rc;
    if (o.first < argc) {
        fprintf(stderr, "qsweep workers: unexpected argument '%s'\n", argv[o.first]);
        workers_usage(stderr);
        return QSWEEP_EXIT_USAGE;
    }
    qs_error err = {0};
    qc_store *s = NULL;
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(o.db), "workers", &s, &err);
    if (st) return qsweep_fail("workers", &err);
    PGconn *c = qc_store_pgconn(s);
    /* connected: seen within 90 s (the coordinator refreshes last_seen every half lease,
       15 s by default); silent: not seen for longer, e.g. the worker hangs or the coordinator
       is down; left: it said BYE or the coordinator timed it out (workers.left_at). */
    PGresult *r = PQexec(
        c, "SELECT w.id, w.host, w.pid, w.threads, w.gpus::text,"
           "       round(extract(epoch FROM now() - w.last_seen))::bigint,"
           "       coalesce(string_agg(a.job::text, ',' ORDER BY a.job), '-'),"
           "       CASE WHEN w.left_at IS NOT NULL THEN 'left'"
           "            WHEN now() - w.last_seen < interval '90 seconds' THEN 'connected'"
           "            ELSE 'silent' END AS state"
           " FROM workers w LEFT JOIN attempts a ON a.worker = w.id AND a.outcome = 'running'"
           " GROUP BY w.id ORDER BY w.left_at IS NOT NULL, w.last_seen DESC, w.id");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_error_set(&err, QS_EDB, "workers: %s", PQerrorMessage(c));
        rc = qsweep_fail("workers", &err);
    } else {
        printf("%-32s %-9s %-16s %8s %7s %10s %-10s %s\n", "worker", "state", "host", "pid",
               "threads", "last seen", "running", "gpus");
        for (int i = 0; i < PQntuples(r); i++) {
            put_column(stdout, PQgetvalue(r, i, 0), 32);
            printf(" %-9s ", PQgetvalue(r, i, 7));
            put_column(stdout, PQgetvalue(r, i, 1), 16);
            printf(" %8s %7s %9ss %-10s %s\n", PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
                   PQgetvalue(r, i, 5), PQgetvalue(r, i, 6), PQgetvalue(r, i, 4));
        }
        rc = QSWEEP_EXIT_OK;
    }
    PQclear(r);
    qc_store_close(s);
    return rc;
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
            return QSWEEP_EXIT_OK;
        default:
            db_usage(stderr);
            return QSWEEP_EXIT_USAGE;
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
            return QSWEEP_EXIT_OK;
        }
        if (!st) st = qc_pgserver_stop(pg, &err);
        qc_pgserver_destroy(pg);
        if (st) return qsweep_fail("db", &err);
        printf("stopped\n");
        return QSWEEP_EXIT_OK;
    }
    if (strcmp(verb, "migrate") != 0 || !qsweep_db_arg(db)) {
        if (!strcmp(verb, "migrate"))
            fprintf(stderr, "qsweep db migrate: give --db CONNINFO or set QSWEEP_DB\n");
        db_usage(stderr);
        return QSWEEP_EXIT_USAGE;
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
    return QSWEEP_EXIT_OK;
}
