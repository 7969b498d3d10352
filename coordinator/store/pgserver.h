/* A private PostgreSQL cluster, for tests and for `qsweep run`.
 *
 * The cluster listens on a Unix socket only (listen_addresses = ''), with trust
 * authentication, so nothing outside this machine can reach it and no password is needed.
 * The socket lives in the data directory when the path fits in a sockaddr_un (~107 bytes),
 * otherwise in a fresh short directory under /tmp that is removed with the handle.
 *
 * PostgreSQL refuses to run as root. When the effective uid is 0, initdb, pg_ctl and the
 * server run as the unprivileged system user `qsweep` (created with useradd when missing; the
 * user `nobody` when useradd fails) in a forked child that drops privileges with
 * setgid/setuid; the data directory is chowned to that user. Its parent directories must be
 * traversable by that user (qc_pgserver_start_temp arranges this).
 *
 * Server binaries come from `pg_config --bindir`, else the newest /usr/lib/postgresql/NN/bin.
 *
 * The database superuser is `qsweep` and the database `qsweep` is created on first start, so
 * the conninfo string is "host=<socket dir> port=<port> user=qsweep dbname=qsweep".
 *
 * Errors: QS_EIO when a command cannot be run or exits non-zero (the message names the
 * command line and carries the tail of its output, including the server log on a failed
 * start), QS_EINVAL for a bad data_dir, QS_ESTATE for an operation on a stopped server
 * where a running one is needed, QS_EDB when creating the database fails, QS_ENOMEM. */
#ifndef QC_STORE_PGSERVER_H
#define QC_STORE_PGSERVER_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

typedef struct qc_pgserver qc_pgserver;

/* Starts (and if needed creates) the cluster in data_dir. data_dir is created (mode 0700) if
 * missing; `initdb` runs when it holds no PG_VERSION file (it must then be empty). When a
 * server is already running on data_dir (postmaster.pid names a live process) it is adopted:
 * its socket directory and port are read from postmaster.pid. Blocks until the server
 * accepts connections (pg_ctl start -w). The server log is data_dir/server.log.
 * On success *out owns the handle; qc_pgserver_destroy stops the server and frees it. */
qs_status qc_pgserver_start(const char *data_dir, qc_pgserver **out, qs_error *err);

/* As qc_pgserver_start on a fresh directory <base>/qspg-XXXXXX/data, where <base> is
 * $QSWEEP_PG_TMPDIR when set, else /dev/shm (tmpfs) when writable with 1 GiB free, else
 * /tmp. The whole qspg-XXXXXX tree is removed by qc_pgserver_destroy (after an immediate
 * shutdown: no checkpoint). For tests: one per test binary. Orphans in <base> (trees whose
 * owner.pid names a process that has exited: a test killed before its teardown) are stopped
 * and removed first. */
qs_status qc_pgserver_start_temp(qc_pgserver **out, qs_error *err);

/* libpq conninfo string for the `qsweep` database ("host=... port=... user=qsweep
 * dbname=qsweep"). Valid until the handle is destroyed; unchanged by restart/kill/start. */
const char *qc_pgserver_conninfo(const qc_pgserver *srv);

/* Absolute path of the data directory. */
const char *qc_pgserver_data_dir(const qc_pgserver *srv);

/* Process id of the running postmaster, from postmaster.pid; 0 when not running. */
pid_t qc_pgserver_pid(const qc_pgserver *srv);

/* Stops the server (pg_ctl stop -m fast -w: open transactions are rolled back, connections
 * are closed, the shutdown checkpoint completes). A server that is already stopped is not
 * an error. */
qs_status qc_pgserver_stop(qc_pgserver *srv, qs_error *err);

/* Starts a stopped (or killed) server again on the same data directory, socket and port;
 * no-op when it is running. After qc_pgserver_kill the server goes through crash recovery;
 * failed starts are retried for 30 s while the killed server's backends exit. */
qs_status qc_pgserver_resume(qc_pgserver *srv, qs_error *err);

/* qc_pgserver_stop then qc_pgserver_resume: every client connection is dropped. */
qs_status qc_pgserver_restart(qc_pgserver *srv, qs_error *err);

/* Sends SIGKILL to the postmaster (a crash, for tests) and waits until it is gone. Its
 * backends notice the postmaster's death and exit on their own; the server stays down
 * until qc_pgserver_resume. QS_ESTATE when it is not running. */
qs_status qc_pgserver_kill(qc_pgserver *srv, qs_error *err);

/* Stops the server if it runs (also one that qc_pgserver_start adopted), removes a temporary
 * tree (qc_pgserver_start_temp) or socket directory, frees the handle. NULL is allowed.
 * Errors while stopping are ignored. */
void qc_pgserver_destroy(qc_pgserver *srv);

#endif
