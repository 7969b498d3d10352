#!/usr/bin/env bash
# qsweep export from the command line: a plan-shaped grid (one policy job) and one job of
# experiments/tiny.yaml exported; the refusals (an existing folder, an unknown layout, a plan for
# another model, a grid of several jobs without --job) exit 2 with the reason and leave nothing.
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
    ls "$tmp" | grep -q '\.tmp-' && fail "qsweep export $*: left a temporary folder"
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
expect_refusal "a plan for another model" "$tmp/plan.yaml" -o "$tmp/out" \
    --model "$src/tests/engine/data/llama32_tied"
expect_refusal "name one with --job" "$src/experiments/tiny.yaml" "${job[@]}" -o "$tmp/out"
expect_refusal "matches no eval job" "$src/experiments/tiny.yaml" "${job[@]}" -o "$tmp/out" --job zz
