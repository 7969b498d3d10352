/* The qsweep command: one binary, one function per subcommand.
 *
 * Exit codes: the one table of every qsweep program, QS_EXIT_* and qs_exit_code in
 * common/exit_status.h (listed in docs/failures.md and `qsweep --help`). */
#ifndef QSWEEP_CLI_H
#define QSWEEP_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "exit_status.h"
#include "grid.h"
#include "pgserver.h"
#include "store.h"

/* Prints "qsweep <cmd>: <message>" on stderr (a leading "<cmd>: " in the message is not
 * repeated; the connection string's password is redacted, qsweep_redact_message) and returns
 * qs_exit_code(err->code). */
int qsweep_fail(const char *cmd, const qs_error *err);

/* Flushes standard output at a command's exit and checks it for write errors (fflush,
 * ferror). Returns rc when all went out; else prints "qsweep CMD: writing standard output:
 * <reason>" on stderr and returns rc, or QS_EXIT_RUNTIME when rc was QS_EXIT_OK (a
 * result that was not written is a failure). cmd: the command's name, or NULL. */
int qsweep_stdout_close(const char *cmd, int rc);

/* Parses a numeric flag: the whole of arg must be a decimal integer in [lo, hi]. Otherwise
 * prints "qsweep <cmd>: <flag> <arg>: expected an integer in [lo, hi]" on stderr and returns
 * -1 (the caller exits QS_EXIT_USAGE); 0 and *out set on success. */
int qsweep_parse_int(const char *cmd, const char *flag, const char *arg, long lo, long hi,
                     int *out);

/* Writes conninfo (a libpq key=value string or a postgresql:// URI) into out (cap bytes) as
 * key=value pairs without the password (libpq's PQconninfoParse); a string libpq cannot parse
 * is not shown at all. */
void qsweep_redact_conninfo(const char *conninfo, char *out, size_t cap);

/* Copies msg into out (cap bytes) with the connection string in use (the last one
 * qsweep_db_arg returned) replaced by its redacted form and its password masked. */
void qsweep_redact_message(const char *msg, char *out, size_t cap);

/* Opens the store for a command that uses an existing schema (status, results, unpin, ...): never
 * migrates. Errors: QS_EDB when the database has no qsweep schema or an older one (naming
 * qsweep db migrate), and qc_store_open's. */
qs_status qsweep_open_existing_store(const char *conninfo, const char *role, qc_store **out,
                                     qs_error *err);

/* Path of the running qsweep binary (/proc/self/exe), for starting its own subcommands. */
const char *qsweep_self_exe(void);

/* The command as the user typed it (argv[0]: build/release/cli/qsweep, or qsweep when found on
 * PATH), for the hints that name a command to run next: each works as printed, from the same
 * folder. "qsweep" before main has run. */
const char *qsweep_invoked(void);

/* Bytes in the cache folders qsweep computes again when needed (baselines, tokens: the
 * environment overrides and XDG paths the worker uses; cmd_cache.c). */
qs_status qsweep_cache_derived_bytes(int64_t *bytes, qs_error *err);
/* "1.23 GB", "45.6 MB", "7.8 kB" or "12 B" (decimal units). */
void qsweep_format_bytes(int64_t bytes, char *out, size_t cap);

/* Connection string: the --db argument, else $QSWEEP_DB; NULL when neither is set. */
const char *qsweep_db_arg(const char *opt);

/* The database of a command that reads the store or asks the coordinator (status, workers,
 * results, cancel, requeue): --db (opt), else $QSWEEP_DB, else the private cluster of
 * `qsweep run` in ${XDG_DATA_HOME:-~/.local/share}/qsweep/pg when a server runs there
 * (adopted and left running; nothing is started). NULL, after a message on stderr
 * "qsweep <cmd>: no database: ..." naming all three and `eval "$(qsweep db start)"`, when
 * there is none. */
const char *qsweep_find_db(const char *opt, const char *cmd);

/* mkdir -p path: parents 0755, the last 0700. Errors: QS_EIO naming the directory. */
qs_status qsweep_make_dirs(const char *path, qs_error *err);

/* "<$var, else $HOME/fallback>/qsweep/<leaf>" (XDG Base Directory specification), e.g.
 * ("XDG_DATA_HOME", ".local/share", "pg"). Errors: QS_EINVAL (no HOME, too long). */
qs_status qsweep_xdg_path(const char *var, const char *fallback, const char *leaf, char *out,
                          size_t cap, qs_error *err);

/* How a run came by the private cluster (qsweep_private_db_start's *adopted). */
enum {
    QSWEEP_PG_STARTED = 0, /* it was stopped: this run started it */
    QSWEEP_PG_ADOPTED = 1, /* running, started outside any run (qsweep db start): left running */
    QSWEEP_PG_SHARED = 2   /* running, started by another qsweep run still alive: shared */
};

/* Starts (or adopts, when it already runs) the private cluster in pg_dir, default
 * ${XDG_DATA_HOME:-~/.local/share}/qsweep/pg, creating the directory. As root the server
 * runs as an unprivileged user (pgserver.h): the directories above pg_dir get the o+x bit
 * when they lack it, with a note on stderr. Starting and stopping are serialised by an
 * exclusive flock on "<pg_dir>.lock", so runs started at the same moment never race
 * pg_ctl. With adopted (a qsweep run) this process is added to the cluster's users in
 * "<pg_dir>.runs" unless the cluster was started outside any run, and *adopted says which
 * of QSWEEP_PG_* it was; qsweep_private_db_end then stops it when the last of its users
 * leaves. adopted NULL (qsweep db start|stop): the users' list is emptied, the cluster is
 * the user's and no run stops it. Errors: qc_pgserver_start's, QS_EIO (lock, users' file). */
qs_status qsweep_private_db_start(const char *pg_dir, qc_pgserver **out, int *adopted,
                                  qs_error *err);

/* The end of a run's use of pg (from qsweep_private_db_start with adopted): under the lock,
 * this process leaves the users' list; when it was on it and no live user is left the server
 * is stopped and the handle freed, otherwise the handle is kept (never freed, the server left
 * running). NULL is allowed. */
void qsweep_private_db_end(qc_pgserver *pg);

/* Loads and expands a grid with the real loaders (probe.h). *grid and *jobs are owned by
 * the caller (qc_grid_free, qc_job_list_free). Errors: as qc_grid_load. */
qs_status qsweep_load_grid(const char *path, const char *const *sets, size_t n_sets, qc_grid **grid,
                           qc_job_list *jobs, qs_error *err);

/* Submits an expanded grid (qc_store_submit): the experiment and its jobs in one
 * transaction. Each eval job depends on its baseline; every job's model_key is its
 * qc_job.model_key ("model:<digest>", kinds/spec.h qs_affinity_key), the key a worker caches
 * the model under (worker/jobs/jobs.h), so the coordinator's affinity sends a model's jobs to
 * the worker that holds it. */
qs_status qsweep_submit_jobs(qc_store *db, const qc_grid *g, const qc_job_list *jobs,
                             qc_submit_counts *counts, qs_error *err);

/* qsweep_submit_jobs with the experiment pinned to numerics path pin in the same transaction
 * (qc_store_submit_pinned; NULL: none). */
qs_status qsweep_submit_jobs_pinned(qc_store *db, const qc_grid *g, const qc_job_list *jobs,
                                    const char *pin, qc_submit_counts *counts, qs_error *err);

/* Prints one experiment's progress line, without a newline: bar, counts by state, ETA
 * (cmd_query.c). */
void qsweep_print_progress(qc_store *s, const qc_progress *p, FILE *out);

/* Prints one line on what a submission did: new jobs, reused ones. */
void qsweep_print_submit(const qc_grid *g, size_t n_jobs, const qc_submit_counts *c, FILE *out);

/* Prints the sensitivity tables of experiment `name` (cmd_results.c): one per (model, format,
 * quantize), parts sorted by damage. format: 0 table, 1 CSV, 2 JSON. */
qs_status qsweep_print_results(qc_store *db, const char *name, int format, FILE *out,
                               qs_error *err);

/* The training results of experiment name (cli/train_results.c). format 0: the progress, the
 * final validation loss per recipe (the training loss when there is no validation) with mean
 * and spread over seeds and the gap to bf16 ("no bf16 run" when there is none), failed runs
 * with their errors, each run's loss curve as a sparkline; 1 CSV, 2 JSON: the table's rows
 * (shape, lr, recipe, metric, seeds, value, value_sd, seeds_with_bf16, gap, gap_sd, rel_gap,
 * rel_gap_sd; a missing gap is empty / null). Errors: QS_EDB, QS_EIO (JSON output). */
qs_status qsweep_print_train_results(qc_store *db, const char *name, int format, FILE *out,
                                     qs_error *err);

/* *is_train = 1 when experiment name has a `train` job. Errors: QS_EDB. */
qs_status qsweep_is_train_experiment(qc_store *db, const char *name, int *is_train,
                                     qs_error *err);

/* One family of job kinds as the command line knows it (cli/kind_table.c, one row per grid
 * kind; kinds/registry.c lists the job kinds themselves). */
typedef struct qsweep_kind_row {
    const char *grid_kind; /* qs_job_kind.grid_kind of the job kinds of the row ("training") */
    /* Registers the row's job functions in this process's worker (qw_register_kind). */
    qs_status (*register_worker)(qs_error *err);
    /* *holds = 1 when experiment name has jobs of this row's kinds. NULL: the default
     * (sensitivity) layout of qsweep_print_results. Errors: QS_EDB. */
    qs_status (*holds)(qc_store *db, const char *name, int *holds, qs_error *err);
    /* Prints experiment name's results in this row's layout (format 0 text, 1 CSV, 2 JSON).
     * Errors: QS_EDB, QS_EIO. */
    qs_status (*print_results)(qc_store *db, const char *name, int format, FILE *out,
                               qs_error *err);
} qsweep_kind_row;

/* The table: *rows and its length. */
size_t qsweep_kind_rows(const qsweep_kind_row **rows);

/* Registers every row's job functions (`qsweep worker`), then checks that each job kind of
 * kinds/registry.c has one. Errors: a row's own, QS_ESTATE naming a kind left without a
 * function. */
qs_status qsweep_register_worker_kinds(qs_error *err);

/* Prints experiment name's results in the layout of the first row whose kinds it holds
 * (*printed = 1), or prints nothing (*printed = 0: the caller prints the default table).
 * Errors: the row's. */
qs_status qsweep_print_kind_tables(qc_store *db, const char *name, int format, FILE *out,
                                   int *printed, qs_error *err);

/* The --gpus value of local worker i (0-based) of qsweep run on a machine with n_gpus visible
 * GPUs, when the grid's largest job asks for per_job GPUs (tensor_parallel / data_parallel /
 * gpu_count; <= 1: one): per = min(max(per_job, 1), n_gpus) GPUs, worker i offering
 * (i*per + j) mod n_gpus for j = 0..per-1 as a comma list ("0,1"). So one worker offers one
 * GPU round robin (local workers do not all offer every GPU), and a job of N GPUs finds a
 * worker that offers N of them. "none" when n_gpus <= 0 (or i < 0). Into buf (cap bytes, NUL
 * included; truncated, still terminated). */
void qsweep_run_worker_gpus(int i, int n_gpus, int per_job, char *buf, size_t cap);

/* The subcommands; each parses its own options (argv[0] is "qsweep <name>",
 * which getopt's messages begin with) and returns
 * an exit code. */
int qsweep_cmd_run(int argc, char **argv);
int qsweep_cmd_submit(int argc, char **argv);
int qsweep_cmd_status(int argc, char **argv);
int qsweep_cmd_cancel(int argc, char **argv);
int qsweep_cmd_requeue(int argc, char **argv);
int qsweep_cmd_pin(int argc, char **argv);
int qsweep_cmd_unpin(int argc, char **argv);
int qsweep_cmd_results(int argc, char **argv);
int qsweep_cmd_coordinator(int argc, char **argv);
int qsweep_cmd_worker(int argc, char **argv);
int qsweep_cmd_workers(int argc, char **argv);
int qsweep_cmd_db(int argc, char **argv);
int qsweep_cmd_cache(int argc, char **argv);
int qsweep_cmd_keygen(int argc, char **argv);
int qsweep_cmd_report(int argc, char **argv);
int qsweep_cmd_plan(int argc, char **argv);
int qsweep_cmd_slurm(int argc, char **argv);
int qsweep_cmd_tokenize(int argc, char **argv);

#endif
