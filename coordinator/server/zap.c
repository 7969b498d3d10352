/* The coordinator's ZAP handler and its allow-list file (zap.h). */
#include "zap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "clock.h"
#include "log.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01" /* RFC 27: the handler's fixed address */
/* libzmq's ZMQ_ZAP_ENFORCE_DOMAIN (zmq.h, draft API, since 4.2.3): not declared unless the
 * includer defines ZMQ_BUILD_DRAFT_API, but accepted by a library built with drafts. */
#define ZAP_ENFORCE_DOMAIN_OPTION 93

enum {
    KEY_BYTES = 32,           /* a Curve25519 public key */
    KEY_Z85 = 40,             /* its Z85 text (ZeroMQ RFC 32): 5 characters per 4 bytes */
    FILE_MAX = 16 << 20,      /* allow-list file size limit (about 400000 keys) */
    REQ_FRAMES = 8,           /* RFC 27 request: 6 frames + credentials; more are dropped */
    LOG_KEYS = 64,            /* refused keys remembered for the per-key rate limit */
    LOG_PERIOD_MS = 60000,    /* a refused key is logged at most once per period */
    LOG_LINES_PER_PERIOD = 10 /* and at most this many refusal lines per period in all */
};

/* Z85's alphabet, value order (RFC 32). */
static const char z85_alphabet[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

struct qc_zap_keys {
    size_t n;
    uint8_t (*key)[KEY_BYTES]; /* n keys, sorted by memcmp, distinct */
};


/* ---- the allow-list file ---- */

typedef struct parsed_key {
    uint8_t key[KEY_BYTES];
    size_t line;
} parsed_key;

static int parsed_cmp(const void *a, const void *b) {
    const parsed_key *x = a, *y = b;
    int c = memcmp(x->key, y->key, KEY_BYTES);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

static int key_cmp(const void *a, const void *b) {
    return memcmp(a, b, KEY_BYTES);
}

static bool is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* One line (len bytes, no '\n'): *has_key false for a blank or comment line, else the
 * decoded key. Errors: QS_EFORMAT "<path>:<line>: ...". */
static qs_status parse_line(const char *path, size_t lineno, const char *s, size_t len,
                            bool *has_key, uint8_t key[KEY_BYTES], qs_error *err) {
    *has_key = false;
    size_t b = 0;
    while (b < len && is_blank(s[b]))
        b++;
    if (b == len || s[b] == '#') return QS_OK;
    size_t e = b;
    while (e < len && !is_blank(s[e]))
        e++;
    size_t rest = e;
    while (rest < len && is_blank(s[rest]))
        rest++;
    if (rest < len && s[rest] != '#')
        return qs_error_set(err, QS_EFORMAT,
                            "%s:%zu: text after the key at column %zu (one key per line; a "
                            "comment after it starts with '#')",
                            path, lineno, rest + 1);
    const char *tok = s + b;
    size_t n = e - b;
    if (n >= 7 && !memcmp(tok, "secret=", 7))
        return qs_error_set(err, QS_EFORMAT,
                            "%s:%zu: a secret key: the allow-list holds each worker's PUBLIC "
                            "key; remove this line and keep secret keys off the coordinator",
                            path, lineno);
    if (n >= 7 && !memcmp(tok, "public=", 7))
        return qs_error_set(err, QS_EFORMAT,
                            "%s:%zu: write the bare key, the 40 characters between the quotes "
                            "of qsweep keygen's public='...'",
                            path, lineno);
    if (n != KEY_Z85)
        return qs_error_set(err, QS_EFORMAT,
                            "%s:%zu: not a CURVE public key: %zu characters, a Z85 key has %d",
                            path, lineno, n, KEY_Z85);
    for (size_t i = 0; i < n; i++)
        if (!memchr(z85_alphabet, tok[i], sizeof z85_alphabet - 1)) {
            unsigned char c = (unsigned char)tok[i];
            char shown[8];
            if (c >= 0x20 && c < 0x7f)
                snprintf(shown, sizeof shown, "'%c'", c);
            else
                snprintf(shown, sizeof shown, "\\x%02x", c);
            return qs_error_set(err, QS_EFORMAT,
                                "%s:%zu: not valid Z85: character %s at column %zu is not in "
                                "the Z85 alphabet",
                                path, lineno, shown, b + i + 1);
        }
    /* Every character is in the alphabet; a group can still encode more than 2^32 - 1. */
    for (size_t g = 0; g < KEY_Z85; g += 5) {
        char group[6];
        memcpy(group, tok + g, 5);
        group[5] = '\0';
        if (!zmq_z85_decode(key + g / 5 * 4, group))
            return qs_error_set(err, QS_EFORMAT,
                                "%s:%zu: not valid Z85: the group of 5 characters at column "
                                "%zu encodes more than 32 bits",
                                path, lineno, b + g + 1);
    }
    *has_key = true;
    return QS_OK;
}

qs_status qc_zap_keys_load(const char *path, qc_zap_keys **out, qs_error *err) {
    *out = NULL;
    /* a FIFO or device could block open() or read(): refused on the descriptor, opened
       without blocking (as mapped_file.c does for checkpoints) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO,
                            "%s: cannot open the CURVE allow-list: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return qs_error_set(err, QS_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > FILE_MAX) {
        close(fd);
        return S_ISREG(sb.st_mode)
                   ? qs_error_set(err, QS_EINVAL, "%s: the CURVE allow-list is larger than %d MiB",
                                  path, FILE_MAX >> 20)
                   : qs_error_set(err, QS_EINVAL, "%s: not a regular file (%s)", path,
                                  S_ISDIR(sb.st_mode) ? "a directory" : "a FIFO, socket or device");
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return qs_error_set(err, QS_EIO, "%s: %s", path, strerror(errno));
    }
    parsed_key *keys = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    qs_status st = QS_OK;
    while (st == QS_OK && (len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        if (len > 0 && line[len - 1] == '\n') len--;
        uint8_t key[KEY_BYTES];
        bool has_key;
        st = parse_line(path, lineno, line, (size_t)len, &has_key, key, err);
        if (st != QS_OK || !has_key) continue;
        if (n == cap) {
            size_t c = cap ? 2 * cap : 16;
            parsed_key *p = realloc(keys, c * sizeof *keys);
            if (!p) {
                st = qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
                break;
            }
            keys = p;
            cap = c;
        }
        memcpy(keys[n].key, key, KEY_BYTES);
        keys[n++].line = lineno;
    }
    if (st == QS_OK && ferror(f)) st = qs_error_set(err, QS_EIO, "%s: read error", path);
    free(line);
    fclose(f);
    if (st == QS_OK && n == 0)
        st = qs_error_set(err, QS_EFORMAT,
                          "%s: no key in the CURVE allow-list (%zu lines, all blank or "
                          "comments): every worker would be refused",
                          path, lineno);
    if (st == QS_OK) {
        /* duplicates: sorted by (key, line), equal keys are adjacent; report the earliest
           repeated line */
        qsort(keys, n, sizeof *keys, parsed_cmp);
        size_t dup = 0;
        for (size_t i = 1; i < n; i++)
            if (!memcmp(keys[i].key, keys[i - 1].key, KEY_BYTES) &&
                (!dup || keys[i].line < keys[dup].line))
                dup = i;
        if (dup) {
            size_t first = dup;
            while (first > 0 && !memcmp(keys[first - 1].key, keys[dup].key, KEY_BYTES))
                first--;
            st = qs_error_set(err, QS_EFORMAT, "%s:%zu: duplicate key (first on line %zu)", path,
                              keys[dup].line, keys[first].line);
        }
    }
    qc_zap_keys *k = NULL;
    if (st == QS_OK) {
        k = calloc(1, sizeof *k);
        k->key = k ? malloc(n * sizeof *k->key) : NULL;
        if (!k || !k->key) {
            free(k);
            k = NULL;
            st = qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
        }
    }
    if (st == QS_OK) {
        for (size_t i = 0; i < n; i++)
            memcpy(k->key[i], keys[i].key, KEY_BYTES);
        k->n = n;
        *out = k;
    }
    free(keys);
    return st;
}

size_t qc_zap_keys_count(const qc_zap_keys *keys) {
    return keys ? keys->n : 0;
}

bool qc_zap_keys_contains(const qc_zap_keys *keys, const uint8_t key[32]) {
    return keys && bsearch(key, keys->key, keys->n, KEY_BYTES, key_cmp) != NULL;
}

void qc_zap_keys_free(qc_zap_keys *keys) {
    if (!keys) return;
    free(keys->key);
    free(keys);
}

/* ---- the handler ---- */

/* A refused key and when it was last logged (monotonic ms). */
typedef struct refused_key {
    uint8_t key[KEY_BYTES];
    int64_t logged_ms;
} refused_key;

struct qc_zap {
    void *sock; /* REP, bound to ZAP_ENDPOINT; used by the thread only while it runs */
    pthread_t thread;
    int stop_pipe[2]; /* a byte written to [1] ends the thread */
    char *path;       /* the allow-list file */
    pthread_mutex_t mu;
    qc_zap_keys *keys; /* guarded by mu */
    /* the log rate limit; the thread's own */
    refused_key recent[LOG_KEYS];
    int n_recent;
    int64_t period_start_ms;
    int lines_in_period;
    uint64_t not_logged; /* refusals not logged since the last refusal line */
};

/* A printable copy of a peer address (from the network: shown, never trusted). */
static void printable(const void *data, size_t len, char *out, size_t cap) {
    const unsigned char *p = data;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < cap; i++)
        o += (size_t)(p[i] >= 0x20 && p[i] < 0x7f ? snprintf(out + o, cap - o, "%c", p[i])
                                                  : snprintf(out + o, cap - o, "\\x%02x", p[i]));
    if (o == 0) snprintf(out, cap, "(address unknown)");
}

/* Logs a refusal unless the rate limit holds it back (zap.h). */
static void log_refusal(qc_zap *z, const char *what, const uint8_t *key, const char *address,
                        const char *why) {
    int64_t now = qs_clock_ms();
    if (now - z->period_start_ms >= LOG_PERIOD_MS) {
        z->period_start_ms = now;
        z->lines_in_period = 0;
    }
    refused_key *r = NULL;
    for (int i = 0; key && i < z->n_recent && !r; i++)
        if (!memcmp(z->recent[i].key, key, KEY_BYTES)) r = &z->recent[i];
    if ((r && now - r->logged_ms < LOG_PERIOD_MS) || z->lines_in_period >= LOG_LINES_PER_PERIOD) {
        z->not_logged++;
        return;
    }
    if (key && !r) {
        if (z->n_recent < LOG_KEYS) {
            r = &z->recent[z->n_recent++];
        } else { /* forget the key logged longest ago */
            r = &z->recent[0];
            for (int i = 1; i < LOG_KEYS; i++)
                if (z->recent[i].logged_ms < r->logged_ms) r = &z->recent[i];
        }
        memcpy(r->key, key, KEY_BYTES);
    }
    if (r) r->logged_ms = now;
    z->lines_in_period++;
    char held[96] = "";
    if (z->not_logged)
        snprintf(held, sizeof held, " (%llu earlier refusals not logged: rate limit)",
                 (unsigned long long)z->not_logged);
    z->not_logged = 0;
    qc_log("CURVE: refused %s from %s: %s%s", what, address, why, held);
}

static bool frame_is(zmq_msg_t *m, const char *s) {
    size_t n = strlen(s);
    return zmq_msg_size(m) == n && !memcmp(zmq_msg_data(m), s, n);
}

/* Sends the RFC 27 reply: version, request id, status code, status text, user id, metadata
 * (empty). REP adds the envelope. */
static void reply(qc_zap *z, zmq_msg_t *request_id, const char *code, const char *text,
                  const char *user_id) {
    const char *frames[6] = {"1.0", NULL, code, text, user_id ? user_id : "", ""};
    for (int i = 0; i < 6; i++) {
        int flags = i < 5 ? ZMQ_SNDMORE : 0;
        int rc = i == 1 ? zmq_send(z->sock, request_id ? zmq_msg_data(request_id) : "",
                                   request_id ? zmq_msg_size(request_id) : 0, flags)
                        : zmq_send(z->sock, frames[i], strlen(frames[i]), flags);
        if (rc < 0) {
            qc_log("ZAP handler: reply: %s", zmq_strerror(errno));
            return;
        }
    }
}

/* Answers one request (RFC 27): version "1.0", request id, domain, address, identity,
 * mechanism, then the mechanism's credentials (CURVE: the client's 32-byte public key). */
static void answer(qc_zap *z) {
    zmq_msg_t f[REQ_FRAMES], extra;
    int n = 0, total = 0;
    bool more = true;
    while (more) {
        /* the parts of a message arrive together: none of these waits */
        zmq_msg_t *m = n < REQ_FRAMES ? &f[n] : &extra;
        zmq_msg_init(m);
        int rc;
        do
            rc = zmq_msg_recv(m, z->sock, ZMQ_DONTWAIT);
        while (rc < 0 && errno == EINTR);
        if (rc < 0) {
            zmq_msg_close(m);
            if (!total) return; /* nothing there after all */
            break;
        }
        total++;
        more = zmq_msg_more(m);
        if (m == &extra)
            zmq_msg_close(m);
        else
            n++;
    }
    if (n < 6 || !frame_is(&f[0], "1.0")) {
        qc_log("ZAP handler: malformed request (%d frames), refused", total);
        reply(z, n >= 2 ? &f[1] : NULL, "500", "malformed ZAP request", NULL);
    } else {
        char address[200];
        printable(zmq_msg_data(&f[3]), zmq_msg_size(&f[3]), address, sizeof address);
        if (!frame_is(&f[5], "CURVE") || n != 7 || zmq_msg_size(&f[6]) != KEY_BYTES) {
            char mech[40];
            printable(zmq_msg_data(&f[5]), zmq_msg_size(&f[5]), mech, sizeof mech);
            char what[80];
            snprintf(what, sizeof what, "a client with mechanism %s", mech);
            log_refusal(z, what, NULL, address, "only CURVE clients are served");
            reply(z, &f[1], "400", "only CURVE clients with an authorised key", NULL);
        } else {
            const uint8_t *key = zmq_msg_data(&f[6]);
            char z85[KEY_Z85 + 1];
            zmq_z85_encode(z85, key, KEY_BYTES);
            pthread_mutex_lock(&z->mu);
            bool allowed = !z->path || qc_zap_keys_contains(z->keys, key); /* no list: any */
            pthread_mutex_unlock(&z->mu);
            if (allowed) {
                reply(z, &f[1], "200", "OK", z85);
            } else {
                char what[64], why[1100];
                snprintf(what, sizeof what, "worker key %s", z85);
                snprintf(why, sizeof why, "not in the allow-list %s", z->path);
                log_refusal(z, what, key, address, why);
                reply(z, &f[1], "400", "key not authorised", NULL);
            }
        }
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg) {
    qc_zap *z = arg;
    for (;;) {
        zmq_pollitem_t items[2] = {{.socket = z->sock, .events = ZMQ_POLLIN},
                                   {.fd = z->stop_pipe[0], .events = ZMQ_POLLIN}};
        if (zmq_poll(items, 2, -1) < 0) {
            if (errno == EINTR) continue;
            /* Handshakes now wait for a reply that never comes: nobody gets in. */
            qc_log("ZAP handler: zmq_poll: %s: no more workers are admitted", zmq_strerror(errno));
            break;
        }
        if (items[1].revents & ZMQ_POLLIN) break;
        if (items[0].revents & ZMQ_POLLIN) answer(z);
    }
    return NULL;
}

qs_status qc_zap_start(void *zctx, const char *path, qc_zap_keys *keys, qc_zap **out,
                       qs_error *err) {
    *out = NULL;
    qc_zap *z = calloc(1, sizeof *z);
    char *p = path ? strdup(path) : NULL;
    if (!z || (path && !p)) {
        free(z);
        free(p);
        qc_zap_keys_free(keys);
        return qs_error_set(err, QS_ENOMEM, "ZAP handler");
    }
    z->path = p;
    z->keys = keys;
    z->stop_pipe[0] = z->stop_pipe[1] = -1;
    z->period_start_ms = qs_clock_ms();
    pthread_mutex_init(&z->mu, NULL);
    qs_status st = QS_OK;
    int linger = 0;
    z->sock = zmq_socket(zctx, ZMQ_REP);
    if (!z->sock)
        st = qs_error_set(err, QS_ENET, "ZAP handler: zmq_socket(REP): %s", zmq_strerror(errno));
    else if (zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
             zmq_bind(z->sock, ZAP_ENDPOINT) != 0)
        st = qs_error_set(err, QS_ENET, "ZAP handler: bind %s: %s", ZAP_ENDPOINT,
                          zmq_strerror(errno));
    else if (pipe2(z->stop_pipe, O_CLOEXEC) != 0)
        st = qs_error_set(err, QS_EIO, "ZAP handler: pipe: %s", strerror(errno));
    else {
        /* The thread blocks every signal (as libzmq's own threads do): SIGHUP, SIGTERM and
           the like go to the threads that handle them. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&z->thread, NULL, zap_main, z);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) st = qs_error_set(err, QS_EIO, "ZAP handler: thread: %s", strerror(rc));
    }
    if (st != QS_OK) {
        if (z->sock) zmq_close(z->sock);
        if (z->stop_pipe[0] >= 0) close(z->stop_pipe[0]);
        if (z->stop_pipe[1] >= 0) close(z->stop_pipe[1]);
        pthread_mutex_destroy(&z->mu);
        qc_zap_keys_free(z->keys);
        free(z->path);
        free(z);
        return st;
    }
    if (path)
        qc_log("CURVE: %zu authorised worker keys from %s; other clients are refused",
               qc_zap_keys_count(keys), path);
    *out = z;
    return QS_OK;
}

qs_status qc_zap_configure_socket(void *sock, qs_error *err) {
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, QC_ZAP_DOMAIN, strlen(QC_ZAP_DOMAIN)) != 0)
        return qs_error_set(err, QS_ENET, "ZMQ_ZAP_DOMAIN: %s", zmq_strerror(errno));
    /* A libzmq without draft options refuses this (EINVAL): the handler is then still bound
       before the socket binds and stopped after it is closed, so no handshake of the running
       coordinator can miss it. */
    int enforce = 1;
    (void)zmq_setsockopt(sock, ZAP_ENFORCE_DOMAIN_OPTION, &enforce, sizeof enforce);
    return QS_OK;
}

qs_status qc_zap_reload(qc_zap *z, qs_error *err) {
    if (!z->path) return QS_OK; /* no allow-list: nothing to re-read */
    qc_zap_keys *keys;
    qs_error e;
    qs_status st = qc_zap_keys_load(z->path, &keys, &e);
    if (st != QS_OK) {
        pthread_mutex_lock(&z->mu);
        size_t n = qc_zap_keys_count(z->keys);
        pthread_mutex_unlock(&z->mu);
        qc_log("CURVE: allow-list not reloaded, the %zu keys in use stay: %s", n, e.msg);
        if (err) *err = e;
        return st;
    }
    pthread_mutex_lock(&z->mu);
    qc_zap_keys *old = z->keys;
    z->keys = keys;
    pthread_mutex_unlock(&z->mu);
    qc_log("CURVE: allow-list reloaded from %s: %zu authorised worker keys (was %zu)", z->path,
         qc_zap_keys_count(keys), qc_zap_keys_count(old));
    qc_zap_keys_free(old);
    return QS_OK;
}

void qc_zap_stop(qc_zap *z) {
    if (!z) return;
    char byte = 1;
    while (write(z->stop_pipe[1], &byte, 1) < 0 && errno == EINTR) {
    }
    pthread_join(z->thread, NULL);
    if (z->not_logged)
        qc_log("CURVE: %llu refusals since the last refusal line were not logged (rate limit)",
             (unsigned long long)z->not_logged);
    zmq_close(z->sock);
    close(z->stop_pipe[0]);
    close(z->stop_pipe[1]);
    pthread_mutex_destroy(&z->mu);
    qc_zap_keys_free(z->keys);
    free(z->path);
    free(z);
}
