#!/usr/bin/env bash
# llama.cpp as the independent evaluator of qsweep's GGUF export: SmolLM2-135M with every block
# linear in MXFP4 (W4A16, round to nearest) exported by qsweep (--to gguf's writer), and
# llama.cpp's llama-perplexity run on that file and on the source, beside qsweep's perplexity of
# the same job on the same token ids. Run by hand (label-free: never part of CI or the product);
# docs/export.md has the figures and the bound.
#
# 1. Uses llama-perplexity and llama-tokenize as llama_cpp_peer.sh builds them from the
#    llama-cpp-python sdist under build/peer/ (run that script first; its build step suffices).
# 2. build/release/tests/export/export_test peer: qsweep's perplexity of the source, of the job
#    (the policy applied by the engine) and of the export read back (equal to the job's), ctx
#    512, the first CHUNKS chunks of tests/engine/data/gpl3.smollm2.tokens, and the export
#    itself (build/peer/smollm2-mxfp4/model.gguf).
# 3. Checks that llama.cpp tokenizes the GPL-3 text of the export into the ids qsweep scores.
# 4. llama-perplexity (ctx 512, batch 512, CHUNKS chunks, 2 threads) on the source and on the
#    export; prints the four perplexities and the relative gaps, and exits 1 when the export's
#    gap exceeds BOUND (default 0.01: 1 %, docs/export.md says why).
#
# With chunks 4, qsweep's two perplexities must appear in docs/export.md as printed (the table
# there is this script's output); the ctest export_llama_cpp_perplexity (label peer) runs it so.
# Exit 0, 1 (a failure, or the gap outside the bound), 77 (SmolLM2 or llama.cpp not there).
#
# Usage: bench/peer/llama_cpp_export_ppl.sh [chunks=4] [bound=0.01]
#   Needs: python3; build/release (export_test) and build/peer (llama_cpp_peer.sh) built;
#   SmolLM2 fetched (tools/fetch_smollm2.sh). Environment: LLAMA_CPP_PYTHON_VERSION (0.3.36).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
chunks="${1:-4}"
bound="${2:-0.01}"
gguf="$HOME/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
peer="$root/build/peer"
tool="$root/build/release/tests/export/export_test"
tokens="$root/tests/engine/data/gpl3.smollm2.tokens"
text=/usr/share/common-licenses/GPL-3
out="$peer/smollm2-mxfp4"

die() { echo "llama_cpp_export_ppl.sh: $*" >&2; exit 1; }
skip() { echo "skipped: $*"; exit 77; }
[ -f "$gguf" ] || skip "$gguf absent (tools/fetch_smollm2.sh fetches it)"
[ -x "$tool" ] || die "$tool not built (cmake --build build/release --target export_test)"
[ -f "$text" ] || skip "$text absent (Debian's base-files ships it)"
echo "load average at start: $(cat /proc/loadavg)"

# ---- 1. llama.cpp, as llama_cpp_peer.sh builds it (that script's step 1)
lbuild="$peer/llama.cpp-build"
sdist="$peer/llama_cpp_python-$version.tar.gz"
for b in llama-perplexity llama-tokenize; do
  [ -x "$lbuild/bin/$b" ] ||
    skip "$lbuild/bin/$b not built: bench/peer/llama_cpp_peer.sh builds llama.cpp (its step 1)"
done
echo "llama.cpp: llama-cpp-python $version sdist, sha256 $(sha256sum "$sdist" | cut -d' ' -f1)"

# ---- 2. qsweep: the job, its export, their perplexities
rm -rf "$out"
"$tool" peer "$gguf" "$out" "$tokens" 512 "$chunks" | tee "$peer/qsweep-export-ppl.txt"

# ---- 3. the same ids, from the export's own tokenizer
"$lbuild/bin/llama-tokenize" -m "$out/model.gguf" -f "$text" --ids --log-disable 2>/dev/null |
  tail -n 1 >"$peer/export.ids"
python3 - "$tokens" "$peer/export.ids" "$chunks" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"QSWTOKS\0", "not a qsweep token file"
version, _, _, _, count = struct.unpack_from("<IIIIQ", data, 8)
ids = struct.unpack_from("<%dI" % count, data, 32 if version == 1 else 64)
llama = [int(t) for t in open(sys.argv[2]).read().strip().strip("[]").split(",") if t.strip()]
need = 512 * int(sys.argv[3])
bad = next((i for i in range(need) if i >= len(llama) or ids[i] != llama[i]), None)
if len(ids) < need or bad is not None:
    sys.exit("not the same ids (first difference at %s)" % bad)
print("same ids: the first %d tokens agree" % need)
PY

# ---- 4. llama-perplexity on the source and the export
ppl() {  # ppl GGUF: llama-perplexity's final estimate
  "$lbuild/bin/llama-perplexity" -m "$1" -f "$text" -c 512 -b 512 -t 2 --chunks "$chunks" \
    >"$peer/llama-ppl.log" 2>&1 || { tail -n 5 "$peer/llama-ppl.log" >&2; die "llama-perplexity $1 failed"; }
  sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2/p' "$peer/llama-ppl.log"
}
read -r lsrc lsrc_err < <(ppl "$gguf")
read -r lexp lexp_err < <(ppl "$out/model.gguf")
echo "load average at end: $(cat /proc/loadavg)"
python3 - "$peer/qsweep-export-ppl.txt" "$lsrc" "$lexp" "$bound" "$chunks" <<'PY'
import sys
q = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "qsweep" and f[2] == "ppl":
        q[f[1]] = float(f[3])
lsrc, lexp, bound = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
gsrc, gexp = lsrc / q["source"] - 1, lexp / q["mxfp4-w4a16"] - 1
print("SmolLM2-135M, GPL-3, ctx 512, %s chunks (%d scored tokens), perplexity:" % (sys.argv[5], 255 * int(sys.argv[5])))
print("%-34s %10s %16s %10s" % ("model", "qsweep", "llama-perplexity", "gap"))
print("%-34s %10.4f %16.4f %+9.3f%%" % ("source (Q4_1, Q8_0 embeddings)", q["source"], lsrc, 100 * gsrc))
print("%-34s %10.4f %16.4f %+9.3f%%" % ("export (block linears MXFP4)", q["mxfp4-w4a16"], lexp, 100 * gexp))
ok = abs(gexp) <= bound
print("export gap %+.3f%%: %s the bound of %.2f%%" % (100 * gexp, "within" if ok else "OUTSIDE", 100 * bound))
sys.exit(0 if ok else 1)
PY
if [ "$chunks" = 4 ]; then  # the figures docs/export.md shows (the ctest's own check)
  bash "$root/tests/export/docs_ppl_test.sh" "$tool" "$root" "$peer/qsweep-export-ppl.txt" ||
    die "rerun and update docs/export.md's table"
fi
