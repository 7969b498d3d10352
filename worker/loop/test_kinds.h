/* qw_test_kinds: job kinds for tests and benchmarks, registered only by test binaries
 * (qsweep-worker, in-process tests), never by a production worker:
 *   "sleep" {"seconds": s}                 sleeps s wall-clock seconds, polling cancel every 10 ms;
 *                                          metric "seconds" = s (final);
 *   "fail"  {"message": "..."}             fails with that message (QS_EINVAL: a permanent job
 *                                          error); with "transient": true, QS_EIO (a transient
 *                                          worker error, retried);
 *   "alloc" {"bytes": n}                   allocates and touches n bytes (QS_ENOMEM when
 *                                          malloc fails); metric "bytes" = n (final);
 *   "crash" {"signal": "SEGV"|"ABRT"|"KILL"}  ends the worker process by that signal (a null
 *                                          write, abort(), SIGKILL as the OOM killer sends);
 *   "echo"  {"metrics": {"name": v, ...}}  reports each number as a final metric, and with
 *           "curve": {"name": [v0, v1, ...]}, "step_ms": ms   each list as a curve (non-final
 *                                          metrics at steps 0, 1, ...), ms apart; other spec
 *                                          fields are ignored (a big spec is just padding).
 * "sleep" and "echo" with a string "model_key" in their spec put that key in the worker's
 * cache (a stand-in for a loaded model), so tests can see model affinity. */
#ifndef QW_TEST_KINDS_H
#define QW_TEST_KINDS_H

#include "error.h"

/* Registers "sleep", "fail", "echo", "alloc" and "crash" (qw_register_kind). Errors: those of
 * qw_register_kind. */
qs_status qw_register_test_kinds(qs_error *err);

#endif
