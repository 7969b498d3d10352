/* Error records shared by every qsweep module.
 *
 * Functions that can fail return a qs_status and, when the caller passes a non-NULL
 * qs_error, fill it with a message that names the file, offset, field or peer involved
 * (a caller can always ask what went wrong, as with libpq's PQerrorMessage). */
#ifndef QS_COMMON_ERROR_H
#define QS_COMMON_ERROR_H

#include <stddef.h>

/* Status codes; 0 is success. Stable numbers: they are stored in the database and used as
 * process exit codes by the qsweep command. */
typedef enum qs_status {
    QS_OK = 0,
    QS_EINVAL = 1,       /* bad argument or bad input value (names the field) */
    QS_EIO = 2,          /* file or socket I/O failed (names the path or peer, errno text) */
    QS_EFORMAT = 3,      /* malformed input file or message (names file and offset/line) */
    QS_ENOMEM = 4,       /* allocation failed */
    QS_EUNSUPPORTED = 5, /* valid but not supported (dtype, format, feature) */
    QS_EDB = 6,          /* PostgreSQL error (carries the server's message) */
    QS_ENET = 7,         /* ZeroMQ or protocol error */
    QS_ESTATE = 8,       /* operation not allowed in the current state */
    QS_ENOTFOUND = 9,    /* named thing does not exist (file, tensor, job) */
    QS_ECANCELLED = 10,  /* stopped on request (signal, cancel) */
} qs_status;

/* A caller-owned error record. msg is always NUL-terminated; empty when code is QS_OK. */
typedef struct qs_error {
    qs_status code;
    char msg[1024];
} qs_error;

/* Records (code, printf-style message) in err when err is non-NULL and returns code, so that
 * `return qs_error_set(err, QS_EFORMAT, "%s: offset %zu: ...", path, off);` reads as one step.
 * A message longer than the buffer is truncated. */
qs_status qs_error_set(qs_error *err, qs_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an error already recorded, to add context as it travels up
 * (e.g. the job id around a loader error). Returns err->code. err may be NULL. */
qs_status qs_error_wrap(qs_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Resets err to QS_OK with an empty message. err may be NULL. */
void qs_error_clear(qs_error *err);

/* Short stable name of a status ("EINVAL", "EFORMAT", ...); "E?" for unknown values. */
const char *qs_status_name(qs_status code);

#endif
