/* The monotonic clock every qsweep module times with (leases, heartbeats, backoff, benchmark
 * intervals). CLOCK_MONOTONIC: never jumps with the wall clock; stops counting only while the
 * machine is suspended. */
#ifndef QS_COMMON_CLOCK_H
#define QS_COMMON_CLOCK_H

#include <stdint.h>

/* Milliseconds since an arbitrary fixed point (boot); differences are elapsed time. */
int64_t qs_clock_ms(void);

/* Seconds, with nanosecond resolution, on the same clock; for benchmark intervals. */
double qs_clock_s(void);

#endif
