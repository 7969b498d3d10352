#!/usr/bin/env python3
"""Smoke test of bench_scale_search (bench/kernels/bench_scale_search.c) on a tiny shape.

Runs `BENCH 1 32 64 64` (one repeat, 32 x 64 and 64 x 32, 64 calibration rows) and checks that
every line of its output parses: the load average at start and end, the header, and one row
per (shape, format) -- nvfp4 and mxfp4 on 32 x 64, then on 64 x 32 -- whose two times are
positive seconds and whose ratio is the search time over the amax-rule time as printed (to the
rounding of the three columns). Then checks that bad arguments are refused naming them.
Usage: bench_scale_search_smoke.py BENCH
"""
import re
import subprocess
import sys

LOAD = re.compile(r"^load average (at start|at end): (\S+ \S+ \S+ .*)$")
HEADER = re.compile(r"^format +rows x k +amax rule s +search s +ratio$")
ROW = re.compile(r"^(nvfp4|mxfp4) +(\d+) x (\d+) +(\d+\.\d{6}) +(\d+\.\d{6}) +(\d+\.\d{2}|inf|nan)$")


def fail(msg, out):
    print(f"bench_scale_search_smoke: {msg}\n--- output ---\n{out}", file=sys.stderr)
    sys.exit(1)


def main(bench):
    run = subprocess.run([bench, "1", "32", "64", "64"], capture_output=True, text=True)
    out = run.stdout
    if run.returncode != 0:
        fail(f"exit {run.returncode}: {run.stderr}", out)
    lines = out.rstrip("\n").split("\n")
    if len(lines) != 7:
        fail(f"expected 7 lines (load, header, 4 rows, load), got {len(lines)}", out)
    if not LOAD.match(lines[0]) or LOAD.match(lines[0]).group(1) != "at start":
        fail(f"line 1 is not the load average at start: {lines[0]!r}", out)
    if not LOAD.match(lines[-1]) or LOAD.match(lines[-1]).group(1) != "at end":
        fail(f"last line is not the load average at end: {lines[-1]!r}", out)
    if not HEADER.match(lines[1]):
        fail(f"line 2 is not the header: {lines[1]!r}", out)
    want = [("nvfp4", 32, 64), ("mxfp4", 32, 64), ("nvfp4", 64, 32), ("mxfp4", 64, 32)]
    for line, (fmt, rows, k) in zip(lines[2:6], want):
        m = ROW.match(line)
        if not m:
            fail(f"row does not parse: {line!r}", out)
        if (m.group(1), int(m.group(2)), int(m.group(3))) != (fmt, rows, k):
            fail(f"expected {fmt} {rows} x {k}: {line!r}", out)
        a, b, ratio = float(m.group(4)), float(m.group(5)), float(m.group(6))
        if a <= 0 or b <= 0:
            fail(f"a time is not positive: {line!r}", out)
        # the ratio is of the unrounded times: bound it by the printed times' half-units
        lo, hi = (b - 5e-7) / (a + 5e-7), (b + 5e-7) / max(a - 5e-7, 1e-12)
        if not (lo - 0.005 <= ratio <= hi + 0.005):
            fail(f"ratio {ratio} is not search / amax ({lo:.3f}..{hi:.3f}): {line!r}", out)
    for args, name in ((["0"], "REPEATS"), (["1", "32", "48"], "K"), (["1", "x", "64"], "ROWS"),
                       (["1", "32"], "usage")):
        bad = subprocess.run([bench] + args, capture_output=True, text=True)
        if bad.returncode != 2 or name not in bad.stderr:
            fail(f"arguments {args}: exit {bad.returncode}, stderr {bad.stderr!r}", bad.stdout)
    # a shape whose buffers cannot be allocated (here under a 1 GiB address-space limit) is
    # refused naming it, not a silent exit; AddressSanitizer's shadow needs more than the limit
    with open(bench, "rb") as f:
        asan = b"__asan_init" in f.read()
    big = subprocess.run(["sh", "-c", 'ulimit -v 1048576; exec "$0" 1 8192 8192 1024', bench],
                         capture_output=True, text=True)
    if not asan and (big.returncode != 1 or "8192 x 8192" not in big.stderr):
        fail(f"an unallocatable shape: exit {big.returncode}, stderr {big.stderr!r}", big.stdout)
    print("bench_scale_search_smoke: 4 rows, the header and both load averages parse; "
          "bad arguments and an unallocatable shape refused")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
