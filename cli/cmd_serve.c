/* qsweep coordinator and qsweep worker: the two long-running processes of a sweep, thin
 * shells over qc_server_run (coordinator/server/server.h) and qw_run (worker/loop/loop.h).
 * The worker registers every job kind of cli/kind_table.c before it connects. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "cli.h"
#include "gpu_info.h"
#include "jobs.h"
#include "jobs_backend.h"
#include "loop.h"
#include "new_file.h"
#include "server.h"
#include "supervise.h"

static void coordinator_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep coordinator [--bind ENDPOINT] [--db CONNINFO] [--lease-ms MS]\n"
        "                          [--authorized-keys FILE] [--exit-when-done] [--quiet]\n"
        "                          [--standby]\n"
        "  Serves the database's jobs to workers over ZeroMQ; the only writer of job state.\n"
        "  --bind ENDPOINT  ZeroMQ endpoint to listen on (default tcp://0.0.0.0:5555)\n"
        "  --db CONNINFO    libpq connection string (default $QSWEEP_DB)\n"
        "  --lease-ms MS    a running job's lease, renewed by worker heartbeats, 100..2147483647\n"
        "                   (default 30000)\n"
        "  --exit-when-done return once every job in the database is finished\n"
        "  --quiet          log only warnings and errors (not each worker, lease and job)\n"
        "  --standby        while another coordinator holds the database's coordinator lock,\n"
        "                   wait for it instead of exiting 4; take over (bind, rebuild from the\n"
        "                   database) once it is free\n"
        "  --authorized-keys FILE  the workers allowed to connect (default\n"
        "                   $QSWEEP_CURVE_AUTHORIZED): one worker public key (Z85, 40\n"
        "                   characters, from qsweep keygen) per line, '#' comments; any other\n"
        "                   key is refused at the handshake and logged. Needs\n"
        "                   $QSWEEP_CURVE_SECRET. SIGHUP re-reads the file.\n"
        "  $QSWEEP_CURVE_SECRET  the coordinator's CURVE secret key (Z85): traffic is\n"
        "                   encrypted and workers must know its public key; without\n"
        "                   --authorized-keys any client that knows it can connect\n");
}

int qsweep_cmd_coordinator(int argc, char **argv) {
    static const struct option opts[] = {{"bind", required_argument, 0, 'b'},
                                         {"db", required_argument, 0, 'd'},
                                         {"lease-ms", required_argument, 0, 'l'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"exit-when-done", no_argument, 0, 'x'},
                                         {"authorized-keys", required_argument, 0, 'a'},
                                         {"standby", no_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    qc_server_options o = {.bind_endpoint = "tcp://0.0.0.0:5555"};
    const char *db = NULL, *authorized = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "b:d:l:qxa:sh", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            o.standby = true;
            break;
        case 'b':
            o.bind_endpoint = optarg;
            break;
        case 'a':
            authorized = optarg;
            break;
        case 'd':
            db = optarg;
            break;
        case 'l':
            if (qsweep_parse_int("coordinator", "--lease-ms", optarg, 100, INT_MAX, &o.lease_ms))
                return QS_EXIT_USAGE;
            break;
        case 'q':
            o.quiet = true;
            break;
        case 'x':
            o.exit_when_done = true;
            break;
        case 'h':
            coordinator_usage(stdout);
            return QS_EXIT_OK;
        default:
            coordinator_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    o.conninfo = qsweep_db_arg(db);
    if (optind != argc || !o.conninfo) {
        if (!o.conninfo)
            fprintf(stderr,
                    "qsweep coordinator: no database: give --db CONNINFO or set QSWEEP_DB\n");
        coordinator_usage(stderr);
        return QS_EXIT_USAGE;
    }
    const char *curve = getenv("QSWEEP_CURVE_SECRET");
    if (curve && *curve) o.curve_secret_key = curve;
    const char *authorized_env = getenv("QSWEEP_CURVE_AUTHORIZED");
    if (!authorized && authorized_env && *authorized_env) authorized = authorized_env;
    if (authorized && !*authorized) {
        fprintf(stderr, "qsweep coordinator: --authorized-keys: empty file name\n");
        return QS_EXIT_USAGE;
    }
    if (authorized && !o.curve_secret_key) {
        fprintf(stderr,
                "qsweep coordinator: an allow-list of worker keys (%s) needs CURVE: set "
                "$QSWEEP_CURVE_SECRET to the coordinator's secret key (qsweep keygen)\n",
                authorized);
        return QS_EXIT_USAGE;
    }
    o.curve_allowed_keys = authorized;
    qs_error err = {0};
    qs_status st = qc_server_run(&o, &err);
    return st ? qsweep_fail("coordinator", &err) : QS_EXIT_OK;
}

static void worker_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep worker [--connect ENDPOINT] [--id NAME] [--threads N] [--gpus LIST]\n"
        "                     [--backend auto|cpu|cuda] [--exit-when-idle SECONDS] [--quiet]\n"
        "                     [--max-restarts N | --no-supervise]\n"
        "  Runs the coordinator's jobs (kinds baseline and eval) until SIGTERM/SIGINT, keeping\n"
        "  loaded models between jobs.\n"
        "  --connect ENDPOINT  the coordinator (default tcp://127.0.0.1:5555); several\n"
        "                      separated by commas (an active coordinator and its standbys):\n"
        "                      after a silence of the coordinator the worker tries the next\n"
        "                      one\n"
        "  --id NAME           worker name (default <host>-<pid>)\n"
        "  --threads N         CPU threads per job, 1..1024 (default: OMP_NUM_THREADS, else the\n"
        "                      CPUs of the affinity mask)\n"
        "  --gpus LIST         the GPUs it offers: indexes among the visible ones (0,1; after\n"
        "                      CUDA_VISIBLE_DEVICES), all (default) or none (CPU only). Each is\n"
        "                      reported to the coordinator (name, memory, compute capability,\n"
        "                      native FP4), which gives a job asking for GPUs only to a worker\n"
        "                      whose GPUs fit it; without CUDA or a GPU jobs run on the CPU\n"
        "                      backend. An index not present exits 2\n"
        "  --backend KIND      where models run: auto (default, else $QSWEEP_BACKEND): CUDA on\n"
        "                      the first offered GPU when the build has CUDA, else the CPU; cpu;\n"
        "                      cuda (exits 2 without CUDA or with --gpus none). Results record\n"
        "                      gemm_path\n"
        "  --exit-when-idle SECONDS  leave (BYE, exit 0) after SECONDS, 1..2000000, without a\n"
        "                      job (e.g. a SLURM array task once the sweep has no work left)\n"
        "  --quiet             log only warnings and errors (not each job started and finished)\n"
        "  --max-restarts N    this process supervises the worker, its child: a child ended by a\n"
        "                      signal (a segfault, an abort, the OOM killer) is started again\n"
        "                      with the same id, at most N times (0..1000000, default 100), and\n"
        "                      says how the last one ended: its attempt records it. SIGTERM,\n"
        "                      SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to\n"
        "                      the child (and a child they end is not started again)\n"
        "  --no-supervise      run the worker in this process (a launcher that restarts it and\n"
        "                      passes --previous-exit itself, as qsweep run does)\n"
        "  --previous-id ID --previous-exit TEXT  (set by a supervisor restarting a worker, as\n"
        "                      qsweep run does) how the process of worker ID ended; the attempt\n"
        "                      it was running records it\n"
        "  $QSWEEP_CURVE_SERVER, $QSWEEP_CURVE_PUBLIC, $QSWEEP_CURVE_SECRET  CURVE keys (Z85):\n"
        "                      the coordinator's public key and this worker's key pair\n"
        "  Baseline log-probabilities are kept in $QSWEEP_BASELINE_DIR, else\n"
        "  ${XDG_CACHE_HOME:-~/.cache}/qsweep/baselines.\n");
}

int qsweep_cmd_worker(int argc, char **argv) {
    static const struct option opts[] = {{"connect", required_argument, 0, 'c'},
                                         {"id", required_argument, 0, 'i'},
                                         {"threads", required_argument, 0, 't'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"exit-when-idle", required_argument, 0, 'e'},
                                         {"gpus", required_argument, 0, 'g'},
                                         {"backend", required_argument, 0, 'b'},
                                         {"previous-id", required_argument, 0, 'P'},
                                         {"previous-exit", required_argument, 0, 'X'},
                                         {"max-restarts", required_argument, 0, 'R'},
                                         {"no-supervise", no_argument, 0, 'N'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    qw_options o = {.endpoint = "tcp://127.0.0.1:5555"};
    int c, idle_s = 0, restarts = QW_SUPERVISE_RESTARTS;
    bool supervise = true;
    const char *gpus_arg = NULL, *backend_arg = NULL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:i:t:e:g:b:P:X:R:Nqh", opts, NULL)) != -1) {
        switch (c) {
        case 'R':
            if (qsweep_parse_int("worker", "--max-restarts", optarg, 0, 1000000, &restarts))
                return QS_EXIT_USAGE;
            break;
        case 'N':
            supervise = false;
            break;
        case 'P': /* set by qsweep run when it restarts a worker that a signal ended */
            o.previous_worker_id = optarg;
            break;
        case 'X':
            o.previous_exit = optarg;
            break;
        case 'b':
            backend_arg = optarg;
            break;
        case 'g':
            gpus_arg = optarg;
            break;
        case 'c':
            o.endpoint = optarg;
            break;
        case 'i':
            o.worker_id = optarg;
            break;
        case 't':
            if (qsweep_parse_int("worker", "--threads", optarg, 1, 1024, &o.threads))
                return QS_EXIT_USAGE;
            break;
        case 'e':
            if (qsweep_parse_int("worker", "--exit-when-idle", optarg, 1, 2000000, &idle_s))
                return QS_EXIT_USAGE;
            o.exit_when_idle_ms = idle_s * 1000;
            break;
        case 'q':
            o.quiet = true;
            break;
        case 'h':
            worker_usage(stdout);
            return QS_EXIT_OK;
        default:
            worker_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        worker_usage(stderr);
        return QS_EXIT_USAGE;
    }
    char id[96], prev[512];
    if (supervise) { /* before any thread, socket or GPU context: the child is a clean copy */
        int code = 0;
        if (!qw_supervise_worker("qsweep worker", restarts, o.quiet, &o, id, sizeof id, prev,
                                 sizeof prev, &code))
            return code;
    }
    o.curve_server_key = getenv("QSWEEP_CURVE_SERVER");
    o.curve_public_key = getenv("QSWEEP_CURVE_PUBLIC");
    o.curve_secret_key = getenv("QSWEEP_CURVE_SECRET");
    qs_error err = {0};
    qw_gpu all[QW_GPUS_MAX], chosen[QW_GPUS_MAX];
    size_t n_all = 0;
    char why[256] = "";
    qw_gpu_discover(all, QW_GPUS_MAX, &n_all, why, sizeof why);
    if (qw_gpu_select(all, n_all, gpus_arg, why, chosen, QW_GPUS_MAX, &o.n_gpus, &err)) {
        fprintf(stderr, "qsweep worker: %s\n", err.msg);
        return QS_EXIT_INPUT;
    }
    o.gpus = chosen;
    qw_jobs_backend be; /* the job kinds' backend (worker/jobs/jobs_backend.h) */
    if (qw_jobs_backend_config(backend_arg, chosen, o.n_gpus, qw_backend_cuda_built(), &be, &err)) {
        /* why no GPU was found explains only a CUDA build's "offers no GPU" */
        int gpu_why = *why && err.code == QS_EUNSUPPORTED && qw_backend_cuda_built();
        fprintf(stderr, "qsweep worker: %s%s%s\n", err.msg, gpu_why ? ": " : "",
                gpu_why ? why : "");
        return err.code == QS_EUNSUPPORTED ? QS_EXIT_INPUT : QS_EXIT_USAGE;
    }
    if (qw_jobs_backend_set(&be, &err)) { /* cuda whose module cannot be used: refused */
        fprintf(stderr, "qsweep worker: %s\n", err.msg);
        return QS_EXIT_INPUT;
    }
    be = qw_jobs_backend_get(); /* auto: the CPU when the CUDA module cannot be loaded */
    qw_gpu_probe_native_fp4(chosen, o.n_gpus); /* native FP4 as each device proves it */
    /* a worker fallen back to the CPU offers no GPU, so no GPU job is fitted on it */
    qw_jobs_offer offer = qw_jobs_backend_offer(be.kind, o.n_gpus, be.fallback_code);
    size_t n_listed = o.n_gpus;
    o.n_gpus = offer.n_gpus;
    char note[sizeof be.fallback + sizeof offer.why + 2];
    snprintf(note, sizeof note, "%s%s%s", be.fallback, offer.why[0] ? "; " : "", offer.why);
    /* announced in HELLO: the scheduler pins each experiment to one path (scheduler.h) */
    char npath[160];
    qw_jobs_numerics_path(qw_jobs_backend_pick(&be, qw_backend_cuda_built(), false).use_cuda, be.cc,
                          be.gemm, qw_backend_cpu_path(), npath, sizeof npath);
    o.numerics_path = npath;
    o.backend_note = note;
    if (!o.quiet && qw_jobs_backend_pick(&be, qw_backend_cuda_built(), false).use_cuda)
        fprintf(stderr, "qsweep worker: models run on the CUDA backend, GPU %d\n", be.device);
    if (!o.quiet) {
        for (size_t i = 0; i < n_listed; i++) {
            char d[160];
            qw_gpu_describe(&chosen[i], d, sizeof d);
            fprintf(stderr, "qsweep worker: GPU %zu: %s%s\n", i, d,
                    i < o.n_gpus ? "" : " (not offered: jobs run on the CPU backend)");
        }
        if (offer.why[0]) fprintf(stderr, "qsweep worker: %s\n", offer.why);
        if (n_listed == 0)
            fprintf(stderr, "qsweep worker: no GPU (%s): jobs run on the CPU backend\n",
                    gpus_arg && !strcmp(gpus_arg, "none") ? "--gpus none"
                    : *why                                ? why
                                                          : "none visible");
    }
    qs_status st = qsweep_register_worker_kinds(&err); /* every kind (cli/kind_table.c) */
    if (!st) st = qw_run(&o, &err);
    return st ? qsweep_fail("worker", &err) : QS_EXIT_OK;
}

static void keygen_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep keygen [--env] [--out PREFIX]\n"
        "  A new CURVE key pair (Z85, libzmq's zmq_curve_keypair), printed as\n"
        "  public='...' / secret='...', or:\n"
        "  --env         as export QSWEEP_CURVE_PUBLIC='...' / export QSWEEP_CURVE_SECRET='...'\n"
        "                lines, so eval \"$(qsweep keygen --env)\" sets a worker's key pair (or,\n"
        "                on the coordinator, its secret key)\n"
        "  --out PREFIX  written to PREFIX.key (both keys as those export lines, mode 0600:\n"
        "                `. PREFIX.key` loads them) and PREFIX.pub (the public key alone, the\n"
        "                line the coordinator's allow-list takes); existing files are refused.\n"
        "                Nothing secret is printed.\n"
        "  Run it once for the coordinator and once per worker:\n"
        "  - the coordinator runs with its secret key in $QSWEEP_CURVE_SECRET;\n"
        "  - each worker with $QSWEEP_CURVE_SERVER = the coordinator's public key and its own\n"
        "    key pair in $QSWEEP_CURVE_PUBLIC / $QSWEEP_CURVE_SECRET;\n"
        "  - each worker's PUBLIC key goes on a line of the coordinator's allow-list file\n"
        "    (qsweep coordinator --authorized-keys FILE, or $QSWEEP_CURVE_AUTHORIZED),\n"
        "    '# name' comments allowed; send SIGHUP to the coordinator after editing it.\n"
        "  The traffic is encrypted; peers without the coordinator's public key cannot\n"
        "  connect, and with an allow-list only the listed workers can. Keep each secret key\n"
        "  on its own machine.\n");
}

/* Writes text to a new file path with mode (O_EXCL: an existing file is refused; fchmod:
 * whatever the umask). Errors: QS_EIO naming the file. */
int qsweep_cmd_keygen(int argc, char **argv) {
    static const struct option opts[] = {{"env", no_argument, 0, 'e'},
                                         {"out", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int env = 0, c;
    const char *prefix = NULL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "eo:h", opts, NULL)) != -1) {
        switch (c) {
        case 'e':
            env = 1;
            break;
        case 'o':
            prefix = optarg;
            break;
        case 'h':
            keygen_usage(stdout);
            return QS_EXIT_OK;
        default:
            keygen_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "qsweep keygen: unexpected argument '%s'\n", argv[optind]);
        keygen_usage(stderr);
        return QS_EXIT_USAGE;
    }
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0) {
        fprintf(stderr, "qsweep keygen: zmq_curve_keypair: %s (libzmq built without CURVE?)\n",
                zmq_strerror(zmq_errno()));
        return QS_EXIT_RUNTIME;
    }
    char exports[160];
    snprintf(exports, sizeof exports,
             "export QSWEEP_CURVE_PUBLIC='%s'\nexport QSWEEP_CURVE_SECRET='%s'\n", pub, sec);
    if (prefix) {
        char key[PATH_MAX], pubf[PATH_MAX], publine[48];
        if (snprintf(key, sizeof key, "%s.key", prefix) >= (int)sizeof key ||
            snprintf(pubf, sizeof pubf, "%s.pub", prefix) >= (int)sizeof pubf) {
            fprintf(stderr, "qsweep keygen: --out %s: path too long\n", prefix);
            return QS_EXIT_USAGE;
        }
        snprintf(publine, sizeof publine, "%s\n", pub);
        qs_error err = {0};
        qs_status st = qs_write_new_file(key, exports, strlen(exports), 0600, &err);
        if (!st) {
            st = qs_write_new_file(pubf, publine, strlen(publine), 0644, &err);
            if (st) unlink(key);
        }
        memset(exports, 0, sizeof exports);
        memset(sec, 0, sizeof sec);
        if (st) return qsweep_fail("keygen", &err);
        printf("secret key pair in %s (mode 0600), public key in %s: %s\n", key, pubf, pub);
        return QS_EXIT_OK;
    }
    if (env)
        fputs(exports, stdout);
    else
        printf("public='%s'\nsecret='%s'\n", pub, sec);
    return QS_EXIT_OK;
}
