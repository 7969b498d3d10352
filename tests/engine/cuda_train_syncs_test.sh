#!/bin/bash
# The CUDA training ops are stream-ordered (worker/engine/ops_cuda_train.cu): the host waits for
# the stream only where it reads what the device wrote. This counts every wait in the file and
# names the function each is in, against the list below, so a new wait cannot slip in unnamed:
# - host_wait: the file's one cudaStreamSynchronize;
# - done: only when an op's output is managed or host memory (the GPU tests' buffers);
# - qw_cuda_train_copy: a fetch into host memory, or a copy from managed memory;
# - qw_cuda_train_sumsq: the gradient norm's partial sums, read by the host.
# Usage: cuda_train_syncs_test.sh SOURCE
set -u
src=$1
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
want="sync host_wait 1
wait done 1
wait qw_cuda_train_copy 1
wait qw_cuda_train_sumsq 1"
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
[ $fails = 0 ] && echo "ok   the 4 waits named above, each with its host read"
exit $fails
