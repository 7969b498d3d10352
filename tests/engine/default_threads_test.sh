#!/bin/bash
# A model created with threads 0 takes its team size from OMP_NUM_THREADS, else from the CPU
# affinity mask (common/threads.h), as coreutils' nproc counts them: the probe's count must be
# nproc's in each environment, and taskset -c 0 or OMP_NUM_THREADS=1 must give 1.
# Usage: default_threads_test.sh PROBE
set -u
probe=$1
fails=0
check() { # check EXPECTED DESCRIPTION COMMAND...
    local want=$1 what=$2 got
    shift 2
    got=$("$@" "$probe") || { echo "FAIL $what: probe exited $?"; fails=$((fails + 1)); return; }
    if [ "$got" != "$want" ]; then
        echo "FAIL $what: $got threads, expected $want"
        fails=$((fails + 1))
    else
        echo "ok   $what: $got threads"
    fi
}
unset OMP_NUM_THREADS OMP_THREAD_LIMIT
check "$(nproc)" "environment as it is (nproc)" env
check 1 "taskset -c 0" taskset -c 0
check "$(taskset -c 0 nproc)" "taskset -c 0 (nproc)" taskset -c 0
check 1 "OMP_NUM_THREADS=1" env OMP_NUM_THREADS=1
check 3 "OMP_NUM_THREADS=3 under taskset -c 0 (OpenMP: the variable wins)" \
    env OMP_NUM_THREADS=3 taskset -c 0
check "$(OMP_NUM_THREADS=3 taskset -c 0 nproc)" "OMP_NUM_THREADS=3 under taskset -c 0 (nproc)" \
    env OMP_NUM_THREADS=3 taskset -c 0
check 5 "OMP_NUM_THREADS=5,2 (the outer level)" env OMP_NUM_THREADS=5,2
check "$(nproc)" "OMP_NUM_THREADS=abc (ignored)" env OMP_NUM_THREADS=abc
check 2 "OMP_NUM_THREADS=4 OMP_THREAD_LIMIT=2" env OMP_NUM_THREADS=4 OMP_THREAD_LIMIT=2
check "$(OMP_NUM_THREADS=4 OMP_THREAD_LIMIT=2 nproc)" "OMP_THREAD_LIMIT=2 (nproc)" \
    env OMP_NUM_THREADS=4 OMP_THREAD_LIMIT=2
exit $((fails > 0))
