#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

qs_status qs_error_set(qs_error *err, qs_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

qs_status qs_error_wrap(qs_error *err, const char *fmt, ...) {
    if (!err) return QS_OK;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation of a very long chain is acceptable; build it piecewise so it is explicit. */
    size_t n = strnlen(prefix, sizeof err->msg - 3);
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3;
    size_t m = strnlen(old, room);
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = '\0';
    return err->code;
}

void qs_error_clear(qs_error *err) {
    if (!err) return;
    err->code = QS_OK;
    err->msg[0] = '\0';
}

const char *qs_status_name(qs_status code) {
    static const char *const names[] = {
        [QS_OK] = "OK",         [QS_EINVAL] = "EINVAL",       [QS_EIO] = "EIO",
        [QS_EFORMAT] = "EFORMAT", [QS_ENOMEM] = "ENOMEM",     [QS_EUNSUPPORTED] = "EUNSUPPORTED",
        [QS_EDB] = "EDB",       [QS_ENET] = "ENET",           [QS_ESTATE] = "ESTATE",
        [QS_ENOTFOUND] = "ENOTFOUND", [QS_ECANCELLED] = "ECANCELLED",
    };
    if ((unsigned)code < sizeof names / sizeof names[0] && names[code]) return names[code];
    return "E?";
}
