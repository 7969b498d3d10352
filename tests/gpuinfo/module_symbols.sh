#!/bin/sh
# gpu_cuda_module_symbols: every symbol the CUDA backend module (worker/gpu/cuda_module.h) leaves
# undefined is defined by each binary that loads it (they export their symbols) or by a shared
# library the module names, and the binaries link no CUDA library. Usage: MODULE BINARY...
set -eu
mod=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# weak references the toolchain leaves (transactional memory, gprof) and the loader's own
nm -D --undefined-only "$mod" | awk '$1 == "U" {print $2}' | sed 's/@.*//' | sort -u |
    grep -v -x -e __tls_get_addr >"$tmp/undef"
for lib in $(ldd "$mod" | awk '/=>/ {print $3}'); do
    nm -D --defined-only "$lib" 2>/dev/null | awk '{print $3}' | sed 's/@.*//'
done | sort -u >"$tmp/libs"
status=0
for bin in "$@"; do
    if ldd "$bin" | grep -E 'libcu|libnccl' >/dev/null; then
        echo "FAIL: $bin links a CUDA library:"
        ldd "$bin" | grep -E 'libcu|libnccl'
        status=1
    fi
    nm -D --defined-only "$bin" | awk '{print $3}' | sort -u >"$tmp/bin"
    comm -23 "$tmp/undef" "$tmp/bin" | comm -23 - "$tmp/libs" >"$tmp/missing"
    if [ -s "$tmp/missing" ]; then
        echo "FAIL: $bin does not define what $(basename "$mod") needs:"
        cat "$tmp/missing"
        status=1
    else
        echo "ok: $bin defines the $(wc -l <"$tmp/undef") symbols $(basename "$mod") takes from its host"
    fi
done
exit $status
