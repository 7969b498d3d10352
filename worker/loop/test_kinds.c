/* Job kinds for tests and benchmarks: sleep, fail, echo, alloc, crash (test_kinds.h). */
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "loop.h"
#include "test_kinds.h"
#include "clock.h"

/* A spec's optional "model_key" stands for a loaded model: keep it in the worker's cache. */
static qs_status hold_model_key(qw_job_ctx *ctx, qs_error *err) {
    const json_t *key = json_object_get(qw_job_spec(ctx), "model_key");
    if (!key) return QS_OK;
    if (!json_is_string(key))
        return qs_error_set(err, QS_EINVAL, "spec field model_key: not a string");
    if (qw_job_cache_get(ctx, json_string_value(key))) return QS_OK;
    char *value = strdup(json_string_value(key));
    if (!value) return qs_error_set(err, QS_ENOMEM, "model_key");
    qs_status st = qw_job_cache_put(ctx, json_string_value(key), value, free, err);
    if (st != QS_OK) free(value);
    return st;
}

static qs_status kind_sleep(qw_job_ctx *ctx, qs_error *err) {
    const json_t *s = json_object_get(qw_job_spec(ctx), "seconds");
    if (!json_is_number(s) || json_number_value(s) < 0 || json_number_value(s) > 86400.0)
        return qs_error_set(err, QS_EINVAL,
                            "sleep: spec field seconds: need a number in [0, 86400]");
    qs_status st = hold_model_key(ctx, err);
    if (st != QS_OK) return st;
    /* Wall-clock deadline, so a process stopped (SIGSTOP) past it finishes as soon as it
       runs again: that is how tests make a late result. */
    double seconds = json_number_value(s);
    int64_t t0 = qs_clock_ms();
    uint64_t total_ms = (uint64_t)(seconds * 1000.0 + 0.5);
    for (;;) {
        uint64_t done_ms = (uint64_t)(qs_clock_ms() - t0);
        if (done_ms >= total_ms) break;
        if (qw_job_cancelled(ctx))
            return qs_error_set(err, QS_ECANCELLED, "sleep: cancelled after %llu of %llu ms",
                                (unsigned long long)done_ms, (unsigned long long)total_ms);
        qw_job_progress(ctx, done_ms, total_ms, "sleep");
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    qw_job_progress(ctx, total_ms, total_ms, "sleep");
    return qw_job_metric(ctx, "seconds", seconds, 0, true, err);
}

static qs_status kind_fail(qw_job_ctx *ctx, qs_error *err) {
    const json_t *m = json_object_get(qw_job_spec(ctx), "message");
    bool transient = json_is_true(json_object_get(qw_job_spec(ctx), "transient"));
    return qs_error_set(err, transient ? QS_EIO : QS_EINVAL, "%s",
                        json_is_string(m) ? json_string_value(m) : "fail job");
}

/* Allocates and touches "bytes" bytes (one write per 4 KiB page), then frees them. */
static qs_status kind_alloc(qw_job_ctx *ctx, qs_error *err) {
    const json_t *b = json_object_get(qw_job_spec(ctx), "bytes");
    if (!json_is_integer(b) || json_integer_value(b) < 1 ||
        json_integer_value(b) > ((json_int_t)1 << 40))
        return qs_error_set(err, QS_EINVAL,
                            "alloc: spec field bytes: need an integer in [1, 2^40]");
    size_t n = (size_t)json_integer_value(b);
    unsigned char *p = malloc(n);
    if (!p) return qs_error_set(err, QS_ENOMEM, "alloc: %zu bytes", n);
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (unsigned char)i;
    free(p);
    return qw_job_metric(ctx, "bytes", (double)n, 0, true, err);
}

/* A store through a null pointer, out of the undefined-behaviour sanitizer's sight (it would
 * report the store instead of letting it fault). */
__attribute__((noinline, no_sanitize("undefined"))) static void write_nowhere(void) {
    int *volatile nowhere = NULL;
    // cppcheck-suppress nullPointer
    *nowhere = 1; /* the point of the kind: a real segfault */
}

/* Ends the worker process by a signal, as a job that crashes it does: "SEGV" writes through
 * a null pointer, "ABRT" calls abort(), "KILL" sends itself SIGKILL (as the OOM killer does). */
static qs_status kind_crash(qw_job_ctx *ctx, qs_error *err) {
    const json_t *s = json_object_get(qw_job_spec(ctx), "signal");
    const char *name = json_is_string(s) ? json_string_value(s) : "";
    int sig = !strcmp(name, "SEGV")   ? SIGSEGV
              : !strcmp(name, "ABRT") ? SIGABRT
              : !strcmp(name, "KILL") ? SIGKILL
                                      : 0;
    if (!sig)
        return qs_error_set(err, QS_EINVAL, "crash: spec field signal: need SEGV, ABRT or KILL");
    /* the default action, set by the system call itself: a sanitizer intercepts signal()
       and sigaction() and keeps its own handler, which would turn the signal into an exit.
       An all-zero kernel sigaction is SIG_DFL, no flags, an empty mask, on every layout. */
    unsigned long dfl[4] = {0};
    syscall(SYS_rt_sigaction, sig, dfl, NULL, sizeof(unsigned long));
    if (sig == SIGSEGV) {
        write_nowhere();
    } else if (sig == SIGABRT) {
        abort();
    }
    raise(sig);
    return qs_error_set(err, QS_EINVAL, "crash: signal %s did not end the process", name);
}

static qs_status kind_echo(qw_job_ctx *ctx, qs_error *err) {
    const json_t *metrics = json_object_get(qw_job_spec(ctx), "metrics");
    if (!json_is_object(metrics))
        return qs_error_set(err, QS_EINVAL, "echo: spec field metrics: need an object");
    qs_status st = hold_model_key(ctx, err);
    if (st != QS_OK) return st;
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)metrics, name, v) {
        if (!json_is_number(v))
            return qs_error_set(err, QS_EINVAL, "echo: spec field metrics.%s: not a number", name);
        st = qw_job_metric(ctx, name, json_number_value(v), 0, true, err);
        if (st != QS_OK) return st;
    }
    /* "curve": {"name": [v0, v1, ...]}: points at steps 0, 1, ..., "step_ms" apart, sent as
       partial results while the job runs (a training curve's shape). */
    const json_t *curve = json_object_get(qw_job_spec(ctx), "curve");
    const json_t *step_ms = json_object_get(qw_job_spec(ctx), "step_ms");
    if (!curve) return QS_OK;
    if (!json_is_object(curve))
        return qs_error_set(err, QS_EINVAL, "echo: spec field curve: need an object");
    if (step_ms && (!json_is_integer(step_ms) || json_integer_value(step_ms) < 0 ||
                    json_integer_value(step_ms) > 60000))
        return qs_error_set(err, QS_EINVAL,
                            "echo: spec field step_ms: need an integer in [0, 60000]");
    long pause_ms = step_ms ? (long)json_integer_value(step_ms) : 0;
    json_object_foreach((json_t *)curve, name, v) {
        if (!json_is_array(v))
            return qs_error_set(err, QS_EINVAL, "echo: spec field curve.%s: need an array", name);
        for (size_t i = 0; i < json_array_size(v); i++) {
            const json_t *p = json_array_get(v, i);
            if (!json_is_number(p))
                return qs_error_set(err, QS_EINVAL, "echo: spec field curve.%s[%zu]: not a number",
                                    name, i);
            if (qw_job_cancelled(ctx))
                return qs_error_set(err, QS_ECANCELLED, "echo: cancelled at curve.%s[%zu]", name,
                                    i);
            st = qw_job_metric(ctx, name, json_number_value(p), (int64_t)i, false, err);
            if (st != QS_OK) return st;
            qw_job_progress(ctx, i + 1, json_array_size(v), "curve");
            nanosleep(&(struct timespec){.tv_sec = pause_ms / 1000,
                                         .tv_nsec = (pause_ms % 1000) * 1000000L},
                      NULL);
        }
    }
    return QS_OK;
}

qs_status qw_register_test_kinds(qs_error *err) {
    qs_status st = qw_register_kind("sleep", kind_sleep, err);
    if (st == QS_OK) st = qw_register_kind("fail", kind_fail, err);
    if (st == QS_OK) st = qw_register_kind("echo", kind_echo, err);
    if (st == QS_OK) st = qw_register_kind("alloc", kind_alloc, err);
    if (st == QS_OK) st = qw_register_kind("crash", kind_crash, err);
    return st;
}
