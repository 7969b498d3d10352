#!/usr/bin/env bash
# qsweep cache on a private cache folder: list counts each folder's files and bytes; prune
# --older-than DAYS removes the baselines and token files not written for DAYS days and
# nothing else; clear removes every baseline and token file and never a model or a trained
# checkpoint; bad arguments exit 1 and remove nothing.
# Usage: cache_test.sh QSWEEP_BIN
set -euo pipefail
Q=$1
D=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-cache-test.XXXXXX")
trap 'rm -rf "$D"' EXIT
fail() { echo "cache_test: $*" >&2; exit 1; }
export XDG_CACHE_HOME=$D/cache
unset QSWEEP_BASELINE_DIR QSWEEP_TOKENS_DIR
C=$XDG_CACHE_HOME/qsweep
mkdir -p "$C/baselines" "$C/tokens/sub" "$C/models" "$C/train/run1"
head -c 4000 /dev/zero >"$C/baselines/old"
touch -d '10 days ago' "$C/baselines/old"
head -c 300 /dev/zero >"$C/baselines/new"
head -c 2000 /dev/zero >"$C/tokens/sub/old"
touch -d '10 days ago' "$C/tokens/sub/old"
head -c 7000 /dev/zero >"$C/models/m.gguf"
touch -d '100 days ago' "$C/models/m.gguf"
head -c 50 /dev/zero >"$C/train/run1/ckpt"
touch -d '100 days ago' "$C/train/run1/ckpt"

out=$("$Q" cache)
echo "$out"
grep -q "^baselines *2 files *4.3 kB  $C/baselines$" <<<"$out" || fail "list: baselines"
grep -q "^tokens *1 files *2.0 kB  $C/tokens$" <<<"$out" || fail "list: tokens"
grep -q "^models *1 files *7.0 kB  $C/models$" <<<"$out" || fail "list: models"
grep -q "^total *13.3 kB$" <<<"$out" || fail "list: total"

rc=0; "$Q" cache prune >/dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "prune without --older-than exited $rc"
rc=0; "$Q" cache wipe >/dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "an unknown action exited $rc"
[ -f "$C/baselines/old" ] || fail "a refused command removed a file"

out=$("$Q" cache prune --older-than 5)
echo "$out"
grep -q "^removed *6.0 kB$" <<<"$out" || fail "prune: removed"
[ ! -e "$C/baselines/old" ] && [ ! -e "$C/tokens/sub/old" ] || fail "prune left an old file"
[ -f "$C/baselines/new" ] || fail "prune removed a new baseline"
[ -f "$C/models/m.gguf" ] && [ -f "$C/train/run1/ckpt" ] || fail "prune removed a model or checkpoint"

out=$("$Q" cache clear)
echo "$out"
grep -q "^removed *300 B$" <<<"$out" || fail "clear: removed"
[ -z "$(find "$C/baselines" "$C/tokens" -type f)" ] || fail "clear left a file"
[ -f "$C/models/m.gguf" ] && [ -f "$C/train/run1/ckpt" ] || fail "clear removed a model or checkpoint"
echo "cache_test: OK"
