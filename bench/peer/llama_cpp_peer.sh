#!/usr/bin/env bash
# qsweep against llama.cpp on SmolLM2-135M: the same GGUF, the same token ids, context 512, the
# same thread counts, runs alternating in one call. Run by hand; never part of CI or the product.
#
# 1. Downloads the llama-cpp-python sdist from PyPI with pip (no binary, no dependencies) and
#    builds llama.cpp's llama-perplexity, llama-bench, llama-quantize and llama-tokenize from the
#    llama.cpp it vendors, under build/peer/ (ignored by git), at nice 19 with $PEER_JOBS jobs
#    (default 2). A second run reuses the build.
# 2. Writes the F32 GGUF of the same model with llama.cpp's own llama-quantize (Q4_1 -> F32,
#    --allow-requantize): the Q4_1 file's values dequantized, so both files hold the same
#    weights and differ only in the arithmetic each engine runs on them.
# 3. Checks that llama.cpp tokenizes the text into exactly the ids qsweep evaluates
#    (tests/engine/data/gpl3.smollm2.tokens, `qsweep tokenize` of /usr/share/common-licenses/GPL-3):
#    llama-perplexity reads text, so the comparison is only of the same work when they agree.
#    It stops when they differ, naming the first differing position.
# 4. For each round, for 1 and 2 threads, for the F32 and Q4_1 files, one after the other:
#    llama-perplexity (ctx 512, batch 512, CHUNKS chunks; tokens/s of its whole computation,
#    every position of every chunk, from its log's timestamps), llama-bench (pp512), and
#    qsweep's bench_engine --table-only
#    (tokens/s of whole ctx-512 forwards with logits of the scored half, as an evaluation runs).
#    A tool that fails is reported with its exit status and the end of its stderr, and the
#    other measurements go on (the script then exits 1). Then prints, per file and thread count, each tool's tokens/s and the ratios
#    qsweep/llama-perplexity and qsweep/llama-bench, with the load average before and after.
#
# Usage: bench/peer/llama_cpp_peer.sh [gguf] [chunks=4] [rounds=2]
#   gguf defaults to ~/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf (tools/fetch_smollm2.sh)
#   Needs: pip, cmake, a C++17 compiler, python3; build/release/bench/engine/bench_engine built.
#   Environment: PEER_JOBS (build jobs, 2), LLAMA_CPP_PYTHON_VERSION (0.3.36).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
gguf="${1:-$HOME/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
chunks="${2:-4}"
rounds="${3:-2}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
jobs="${PEER_JOBS:-2}"
peer="$root/build/peer"
bench="$root/build/release/bench/engine/bench_engine"
tokens="$root/tests/engine/data/gpl3.smollm2.tokens"
text=/usr/share/common-licenses/GPL-3

die() { echo "llama_cpp_peer.sh: $*" >&2; exit 1; }
[ -f "$gguf" ] || die "$gguf absent (tools/fetch_smollm2.sh fetches it)"
[ -x "$bench" ] || die "$bench not built (cmake --build build/release --target bench_engine)"
[ -f "$text" ] || die "$text absent (Debian's base-files ships it)"
echo "load average at start: $(cat /proc/loadavg)"

# ---- 1. llama.cpp from the sdist
mkdir -p "$peer"
sdist="$peer/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  if command -v pip >/dev/null 2>&1; then pipcmd=(pip); else pipcmd=(python3 -m pip); fi
  # the sdist alone: --no-binary :all: would also build every build dependency from source
  "${pipcmd[@]}" download --no-deps --no-binary llama-cpp-python --dest "$peer" \
    "llama-cpp-python==$version" >&2
fi
[ -f "$sdist" ] || die "pip did not produce $sdist"
echo "sdist $(basename "$sdist") sha256 $(sha256sum "$sdist" | cut -d' ' -f1)"
src="$peer/llama_cpp_python-$version/vendor/llama.cpp"
[ -d "$src" ] || tar -xzf "$sdist" -C "$peer"
[ -f "$src/CMakeLists.txt" ] || die "$src: no vendored llama.cpp in the sdist"
lbuild="$peer/llama.cpp-build"
bins=(llama-perplexity llama-bench llama-quantize llama-tokenize)
need_build=0
for b in "${bins[@]}"; do [ -x "$lbuild/bin/$b" ] || need_build=1; done
if [ "$need_build" = 1 ]; then
  echo "building llama.cpp ($src) with $jobs jobs at nice 19 ..."
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
                                                 -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  nice -n 19 cmake -S "$src" -B "$lbuild" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF "${launcher[@]}" >/dev/null
  nice -n 19 cmake --build "$lbuild" -j "$jobs" --target "${bins[@]}"
fi
for b in "${bins[@]}"; do [ -x "$lbuild/bin/$b" ] || die "$lbuild/bin/$b missing after the build"; done
echo "llama.cpp built: $("$lbuild/bin/llama-perplexity" --version 2>&1 | grep -m1 version || true)"

# ---- 2. the F32 file
f32="$peer/$(basename "${gguf%.gguf}").F32.gguf"
if [ ! -f "$f32" ]; then
  "$lbuild/bin/llama-quantize" --allow-requantize "$gguf" "$f32.tmp" F32 >/dev/null 2>&1 ||
    die "llama-quantize could not write $f32"
  mv "$f32.tmp" "$f32"
fi

# ---- 3. the same ids
"$lbuild/bin/llama-tokenize" -m "$gguf" -f "$text" --ids --log-disable 2>/dev/null |
  tail -n 1 >"$peer/llama.ids"
python3 - "$tokens" "$peer/llama.ids" "$chunks" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"QSWTOKS\0", "not a qsweep token file"
version, _, _, _, count = struct.unpack_from("<IIIIQ", data, 8)
off = 32 if version == 1 else 64
ids = list(struct.unpack_from("<%dI" % count, data, off))
llama = [int(t) for t in open(sys.argv[2]).read().strip().strip("[]").split(",") if t.strip()]
need = 512 * int(sys.argv[3])
if len(llama) < need or len(ids) < need:
    sys.exit("fewer than %d tokens (qsweep %d, llama.cpp %d)" % (need, len(ids), len(llama)))
for i in range(need):
    if ids[i] != llama[i]:
        sys.exit("token %d: qsweep %d, llama.cpp %d: not the same ids" % (i, ids[i], llama[i]))
print("same ids: the first %d of %d tokens agree (qsweep %d tokens)" % (need, len(llama), len(ids)))
PY

# ---- 4. alternating runs
# Each measurement runs on its own: a tool that fails (llama.cpp's Q4_1 repacked path crashed
# on one CPU) is reported with its exit status and the tail of its log, its figure is nan,
# and the other measurements go on.
out="$peer/runs.txt"
: >"$out"
failures=0
# measure LABEL LOG CMD...: runs CMD, its stdout into LOG and its stderr into LOG.err; 0, or
# says how it failed and returns 1.
measure() {
  local label=$1 log=$2 rc=0
  shift 2
  "$@" >"$log" 2>"$log.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "llama_cpp_peer.sh: $label failed with exit status $rc$([ "$rc" -gt 128 ] && echo " (signal $((rc - 128)))"); its stderr ($log.err) ends:" >&2
    tail -n 5 "$log.err" | sed 's/^/  /' >&2
    failures=$((failures + 1))
    return 1
  fi
}
for r in $(seq 1 "$rounds"); do
  for t in 1 2; do
    for kind in F32 Q4_1; do
      model="$gguf"
      [ "$kind" = F32 ] && model="$f32"
      # Its log lines start with the time since start, minutes.seconds.milliseconds.microseconds:
      # tokens/s from "calculating perplexity" to "Final estimate", every pass of every chunk.
      log="$peer/perplexity-$kind-$t-$r.log" s=nan
      measure "llama-perplexity ($kind, $t threads, round $r)" "$log" "$lbuild/bin/llama-perplexity" \
        -m "$model" -f "$text" -c 512 -b 512 -t "$t" --chunks "$chunks" &&
        s=$(python3 -c '
import sys
t = {}
for line in sys.stdin:
    for key in ("calculating perplexity", "Final estimate"):
        if key in line:
            m, s, ms, us = (int(x) for x in line.split()[0].split("."))
            t[key] = 60 * m + s + ms / 1e3 + us / 1e6
dt = t.get("Final estimate", 0) - t.get("calculating perplexity", 0)
print("%.1f" % (512 * int(sys.argv[1]) / dt) if dt > 0 else "nan")' "$chunks" < <(cat "$log" "$log.err"))
      echo "$kind $t perplexity ${s:-nan}" >>"$out"
      log="$peer/bench-$kind-$t-$r.log" s=nan
      measure "llama-bench ($kind, $t threads, round $r)" "$log" "$lbuild/bin/llama-bench" \
        -m "$model" -p 512 -n 0 -t "$t" -r 2 -o csv &&
        s=$(python3 -c 'import csv,sys; rows=list(csv.DictReader(sys.stdin)); print(rows[-1]["avg_ts"] if rows else "nan")' <"$log")
      echo "$kind $t bench ${s:-nan}" >>"$out"
      log="$peer/qsweep-$kind-$t-$r.log" s=nan
      measure "qsweep bench_engine ($kind, $t threads, round $r)" "$log" \
        env OMP_NUM_THREADS="$t" "$bench" --table-only "$model" 512 "$chunks" &&
        s=$(awk -v t="$t" '$1 == t && NF == 9 {v = $2} END {print v ? v : "nan"}' "$log")
      echo "$kind $t qsweep ${s:-nan}" >>"$out"
    done
  done
done
echo "load average at end: $(cat /proc/loadavg)"
python3 - "$out" "$rounds" "$chunks" <<'PY'
import sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    kind, t, tool, v = line.split()
    runs[(kind, int(t), tool)].append(float(v))
print("\nSmolLM2-135M, ctx 512, %s chunks, %s rounds (tokens/s per run, alternating)" % (sys.argv[3], sys.argv[2]))
print("%-5s %3s  %-22s %-22s %-22s %-11s %-11s" % ("file", "thr", "llama-perplexity", "llama-bench pp512",
      "qsweep bench_engine", "q/perplex", "q/bench"))
for kind in ("F32", "Q4_1"):
    for t in (1, 2):
        p, b, q = ([v for v in runs[(kind, t, x)] if v == v] for x in ("perplexity", "bench", "qsweep"))
        f = lambda v: " ".join("%.1f" % x for x in v)
        rp = "%.2f-%.2f" % (min(q) / max(p), max(q) / min(p)) if p and q and min(p) > 0 else "n/a"
        rb = "%.2f-%.2f" % (min(q) / max(b), max(q) / min(b)) if b and q and min(b) > 0 else "n/a"
        print("%-5s %3d  %-22s %-22s %-22s %-11s %-11s" % (kind, t, f(p), f(b), f(q), rp, rb))
print("(ratios: qsweep's tokens/s over the peer's, lowest-highest over the runs; llama-perplexity"
      " computes logits at every position, bench_engine at the scored half)")
PY
if [ "$failures" -gt 0 ]; then
  echo "llama_cpp_peer.sh: $failures measurement(s) failed (above); their figures are left out" >&2
  exit 1
fi
