#!/usr/bin/env bash
# qsweep export from the command line: a plan-shaped grid (one policy job) and one job of
# experiments/tiny.yaml exported, a W4A4 NVFP4 plan in ModelOpt's layout, a GPTQ job of
# experiments/tiny-methods.yaml (its codes its own, not rtn's) and a per-linear plan of GPTQ
# linears; the refusals (an
# existing folder, an unknown layout, a plan for another model, a grid of several jobs without
# --job, a method (a rotation, SmoothQuant, alone or in a per-linear plan) or activations the
# layout cannot hold, calibration chunks that would overlap
# the scored ones) exit 2 with the reason and leave nothing; a full disk (the file size limit)
# fails naming the file and leaves nothing.
# Usage: cli_export_test.sh QSWEEP SOURCE_DIR
set -euo pipefail
q=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "NOT OK: $*"; exit 1; }
# expect_refusal NEEDLE ARGS...: exit 2, NEEDLE in stderr, nothing written to $tmp/out
expect_refusal() {
    local needle=$1 rc=0
    shift
    "$q" export "$@" 2> "$tmp/err" > /dev/null || rc=$?
    [ "$rc" = 2 ] || fail "qsweep export $*: exit $rc, expected 2 ($(cat "$tmp/err"))"
    grep -qF -- "$needle" "$tmp/err" || fail "qsweep export $*: no \"$needle\" in: $(cat "$tmp/err")"
    [ ! -e "$tmp/out" ] || [ -z "$(ls -A "$tmp/out")" ] || fail "qsweep export $*: wrote into $tmp/out"
    ls "$tmp" | grep '\.tmp-' >/dev/null && fail "qsweep export $*: left a temporary folder"
    echo "OK refused: $needle"
}

cat > "$tmp/plan.yaml" <<YAML
name: tiny-plan
kind: sensitivity
models:
  - $src/tests/engine/data/llama3_gqa
dataset:
  tokens: $src/experiments/data/gpl3.bytes.tokens
  ctx: 64
  max_chunks: 8
sensitivity:
  formats:
    - {name: nvfp4, options: {"clamp": "none", "rounding": "rne"}}
    - {name: mxfp4, options: {"rounding": "rne", "scale_rule": "rceil"}}
  quantize: [weights]
  modes: [policy]
  metrics: [kl, ppl]
  policy:
    "0.q": nvfp4
    "0.k": nvfp4
    "0.v": nvfp4
    "1.down": mxfp4
    "2.gate": mxfp4
    "2.up": mxfp4
YAML
"$q" export "$tmp/plan.yaml" -o "$tmp/plan-export" 2> "$tmp/err" || fail "$(cat "$tmp/err")"
python3 - "$tmp/plan-export" <<'PY' || fail "the plan's export"
import json, sys
qc = json.load(open(sys.argv[1] + "/config.json"))["quantization_config"]
groups = {g["format"]: sorted(g["targets"]) for g in qc["config_groups"].values()}
assert qc["format"] == "mixed-precision", qc["format"]
assert groups["nvfp4-pack-quantized"] == sorted(f"model.layers.0.self_attn.{k}_proj" for k in "qkv"), groups
assert groups["mxfp4-pack-quantized"] == ["model.layers.1.mlp.down_proj", "model.layers.2.mlp.gate_proj",
                                          "model.layers.2.mlp.up_proj"], groups
assert len(qc["ignore"]) == 3 * 7 + 1 - 6 and "lm_head" in qc["ignore"], qc["ignore"]
print("OK plan: two config groups, 16 linears ignored")
PY

job=(--set sensitivity.formats=[nvfp4] --set sensitivity.quantize=[weights]
     --set sensitivity.modes=[cumulative])
"$q" export "$src/experiments/tiny.yaml" "${job[@]}" --job "llama3_gqa nvfp4 weights cumulative 2" \
    -o "$tmp/job-export" 2> "$tmp/err" || fail "$(cat "$tmp/err")"
[ -s "$tmp/job-export/model.safetensors" ] && [ -s "$tmp/job-export/config.json" ] ||
    fail "the job's export has no model.safetensors or config.json"
echo "OK job export"

mkdir "$tmp/out"
expect_refusal "already exists" "$tmp/plan.yaml" -o "$tmp/out"
rmdir "$tmp/out"
expect_refusal "is not a GGUF file" "$tmp/plan.yaml" -o "$tmp/out" --to gguf
expect_refusal 'unknown layout "safetensors-bf16"' "$tmp/plan.yaml" -o "$tmp/out" --to safetensors-bf16
# -o: an existing file, a missing or non-folder parent, refused before any work, naming -o
touch "$tmp/file"
expect_refusal "already exists: an export never writes over a file" "$tmp/plan.yaml" -o "$tmp/file"
expect_refusal "-o $tmp/nope/out: $tmp/nope: No such file or directory" "$tmp/plan.yaml" \
    -o "$tmp/nope/out"
expect_refusal "-o $tmp/file/out: $tmp/file: is not a folder" "$tmp/plan.yaml" -o "$tmp/file/out"
rm "$tmp/file"
# --calib-chunks with a layout that does not calibrate: a usage error, not silently ignored
rc=0
"$q" export "$tmp/plan.yaml" -o "$tmp/out" --calib-chunks 2 2> "$tmp/err" > /dev/null || rc=$?
[ "$rc" = 1 ] && grep -qF -- "--calib-chunks: only --to modelopt" "$tmp/err" && [ ! -e "$tmp/out" ] ||
    fail "--calib-chunks with compressed-tensors: exit $rc, $(cat "$tmp/err")"
echo "OK refused: --calib-chunks without --to modelopt"
# a trailing '/' on -o names the same folder
"$q" export "$tmp/plan.yaml" -o "$tmp/slash/" 2> "$tmp/err" > /dev/null || fail "$(cat "$tmp/err")"
[ -s "$tmp/slash/model.safetensors" ] || fail "-o DIR/ wrote no DIR/model.safetensors"
echo "OK -o DIR/"
expect_refusal "a plan for another model" "$tmp/plan.yaml" -o "$tmp/out" \
    --model "$src/tests/engine/data/llama32_tied"
# a plan grid (qsweep plan writes the model's digest beside its path) pointed at another model
sed "s|^  - $src/tests/engine/data/llama3_gqa\$|  - {path: $src/tests/engine/data/llama32_tied, digest: $(printf '0%.0s' {1..64})}|" \
    "$tmp/plan.yaml" > "$tmp/plan-other.yaml"
grep -q "llama32_tied, digest: 0000" "$tmp/plan-other.yaml" || fail "plan-other.yaml: the sed did not apply"
expect_refusal "this grid was made for (the file changed, or the grid is for another model)" \
    "$tmp/plan-other.yaml" -o "$tmp/out"
expect_refusal "name one with --job" "$src/experiments/tiny.yaml" "${job[@]}" -o "$tmp/out"
expect_refusal "matches no eval job" "$src/experiments/tiny.yaml" "${job[@]}" -o "$tmp/out" --job zz

# ModelOpt: a W4A4 NVFP4 plan whose fused groups share their amax, calibrated on 2 chunks
sed -e 's/quantize: \[weights\]/quantize: [weights+activations]\n  fuse: [qkv, gate_up]/' \
    -e '/mxfp4/d' "$tmp/plan.yaml" > "$tmp/plan-w4a4.yaml"
"$q" export "$tmp/plan-w4a4.yaml" -o "$tmp/mo" --to modelopt --calib-chunks 2 2> "$tmp/err" ||
    fail "$(cat "$tmp/err")"
python3 - "$tmp/mo" <<'PY' || fail "the ModelOpt export"
import json, struct, sys
d = sys.argv[1]
hq = json.load(open(d + "/hf_quant_config.json"))["quantization"]
assert hq["quant_algo"] == "NVFP4" and hq["group_size"] == 16, hq
assert len(hq["exclude_modules"]) == 3 * 7 + 1 - 3, hq["exclude_modules"]
qc = json.load(open(d + "/config.json"))["quantization_config"]
assert qc["quant_method"] == "modelopt" and qc["quant_algo"] == "NVFP4", qc
raw = open(d + "/model.safetensors", "rb").read()
(n,) = struct.unpack_from("<Q", raw)
h = json.loads(raw[8:8 + n])
scale = lambda k: struct.unpack_from("<f", raw, 8 + n + h[k]["data_offsets"][0])[0]
for k in "qkv":
    m = f"model.layers.0.self_attn.{k}_proj"
    assert h[m + ".weight"]["dtype"] == "U8" and h[m + ".weight_scale"]["dtype"] == "F8_E4M3", h[m + ".weight"]
    assert h[m + ".input_scale"]["shape"] == [] and h[m + ".weight_scale_2"]["shape"] == []
    assert scale(m + ".input_scale") == scale("model.layers.0.self_attn.q_proj.input_scale") > 0
print("OK modelopt export: 3 NVFP4 linears, one input_scale for q/k/v, 18 excluded")
PY
expect_refusal "always quantizes the input" "$tmp/plan.yaml" -o "$tmp/out" --to modelopt
expect_refusal "would overlap them" "$tmp/plan-w4a4.yaml" -o "$tmp/out" --to modelopt \
    --calib-chunks 100000
# GPTQ exports its own codes and scales: the q_proj codes differ from the RTN job's export
# (a grid of rtn and a calibrated method: the grid refuses calibration no method reads)
gq=(--set sensitivity.formats=[nvfp4] --set sensitivity.parts=[q])
for m in rtn gptq; do
    label="llama3_gqa nvfp4 weights component q"
    [ $m = rtn ] || label="$label method $m"
    "$q" export "$src/experiments/tiny-methods.yaml" "${gq[@]}" \
        --set "sensitivity.method=[rtn,gptq]" --job "$label" -o "$tmp/$m-export" 2> "$tmp/err" > /dev/null || fail "$m: $(cat "$tmp/err")"
done
python3 - "$tmp/rtn-export" "$tmp/gptq-export" <<'PY' || fail "the GPTQ job's export"
import json, struct, sys
def tensors(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack_from("<Q", raw)[0]
    h = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k != "__metadata__"}
r, g = tensors(sys.argv[1]), tensors(sys.argv[2])
assert r.keys() == g.keys(), sorted(r.keys() ^ g.keys())
q = [f"model.layers.{b}.self_attn.q_proj.weight_packed" for b in range(3)]
assert all(k in g for k in q), sorted(g)
assert all(r[k] != g[k] for k in q), "GPTQ's q_proj codes equal round-to-nearest's"
assert all(r[k] == g[k] for k in r if ".q_proj." not in k), "a tensor GPTQ does not make differs"
print("OK GPTQ export: 3 q_proj in NVFP4 with codes of their own, every other tensor as rtn's")
PY
# the methods whose input transform no layout holds, alone or in a per-linear plan
for m in rotate16 mr-gptq smoothquant; do
    expect_refusal "export: method $m: it " "$src/experiments/tiny-methods.yaml" -o "$tmp/out" \
        "${gq[@]}" --set "sensitivity.method=[gptq,$m]" \
        --job "llama3_gqa nvfp4 weights component q method $m"
done
per_linear='{name: per-linear, options: {linears: {"0.q": gptq, "2.up": rotate32}}}'
sed -e 's|^  max_chunks: 8$|  max_chunks: 8\n  calibration: {chunks: 4}|' \
    -e "s|^  quantize: \\[weights\\]\$|  quantize: [weights]\\n  method: [$per_linear]|" \
    "$tmp/plan.yaml" > "$tmp/plan-rot.yaml"
grep -q "rotate32" "$tmp/plan-rot.yaml" && grep -q "chunks: 4" "$tmp/plan-rot.yaml" ||
    fail "plan-rot.yaml: the sed did not apply"
expect_refusal "export: method rotate32 (model.layers.2.mlp.up_proj): it rotates" \
    "$tmp/plan-rot.yaml" -o "$tmp/out"
sed 's|"2.up": rotate32|"2.up": gptq|' "$tmp/plan-rot.yaml" > "$tmp/plan-gptq.yaml"
"$q" export "$tmp/plan-gptq.yaml" -o "$tmp/plan-gptq-export" 2> "$tmp/err" > /dev/null ||
    fail "a per-linear plan of gptq linears: $(cat "$tmp/err")"
echo "OK per-linear plan of gptq linears exported"

# a full disk: the file size limit (SIGXFSZ ignored, so the write fails with EFBIG)
rc=0
(trap '' XFSZ; ulimit -f 16; exec "$q" export "$tmp/plan.yaml" -o "$tmp/out") 2> "$tmp/err" > /dev/null ||
    rc=$?
[ "$rc" != 0 ] || fail "an export past the file size limit succeeded"
grep -q "model.safetensors" "$tmp/err" || fail "the full disk's error names no file: $(cat "$tmp/err")"
[ ! -e "$tmp/out" ] || fail "a failed export left $tmp/out"
ls "$tmp" | grep '\.tmp-' >/dev/null && fail "a failed export left a temporary folder"
echo "OK full disk: exit $rc, $(tail -n 1 "$tmp/err")"
