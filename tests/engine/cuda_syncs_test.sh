#!/bin/bash
# A stream-ordered CUDA source (worker/engine/ops_cuda*.cu) waits for its stream only where the
# host reads what the device wrote (or frees or overwrites what it reads). This counts every
# synchronizing call in the file and names the function each is in, against the list given, so
# a new wait cannot slip in unnamed:
# - host_wait: the file's one cudaStreamSynchronize, and no other synchronizing call;
# - FUNCTION:COUNT, one per function that calls host_wait(c), with how many times;
# and every host_wait(c) call carries a '/* host read: ... */' comment saying which read it serves.
# Usage: cuda_syncs_test.sh SOURCE FUNCTION:COUNT...
set -u
src=$1
shift
[ -r "$src" ] || { echo "FAIL cannot read $src"; exit 1; }
fails=0
# every synchronizing CUDA call, by the function it is in (a function starts at a line that
# begins with a name and holds '(')
got=$(awk '
    /^[A-Za-z_].*\(/ { s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ *]+/); fn = w[n] }
    /cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaMemcpy\(|cudaMemset\(|cudaStreamQuery/ {
        print "sync " fn
    }
    /host_wait\(c\)/ && fn != "host_wait" { print "wait " fn }
' "$src" | sort | uniq -c | awk '{print $2, $3, $1}')
want=$( (echo "sync host_wait 1"; for a in "$@"; do echo "wait ${a%%:*} ${a##*:}"; done) | sort)
echo "$got" | sed 's/^/found: /'
if [ "$got" != "$want" ]; then
    echo "FAIL the waits of $src are not the named ones; expected:"
    echo "$want" | sed 's/^/  /'
    fails=1
fi
# each wait says which host read it serves
unnamed=$(grep -n 'host_wait(c)' "$src" | grep -v 'static cudaError_t host_wait' | grep -vc 'host read:')
if [ "$unnamed" != 0 ]; then
    echo "FAIL $unnamed host_wait call(s) without a '/* host read: ... */' comment"
    fails=1
fi
[ $fails = 0 ] && echo "ok   the $# waiting functions named above, each wait with its host read"
exit $fails
