#!/usr/bin/env bash
# Fails (exit 1) when a tracked file of the repository refers to a path outside it: the
# parent folder's shared/ tree, absolute paths of the machine that built it, documents that
# live only there, or a tracker's issue numbers. Prints each offending line as FILE:LINE:TEXT.
# A clone must build, test and read on its own: cite a file of the repository instead (docs/numerics.md for the FP4 facts,
# docs/architecture.md for the design, tests/kernels/data/ for the vectors).
# Usage: bash tools/check_paths.sh   (from anywhere inside the repository)
set -uo pipefail
cd "$(dirname "$0")/.."
self=tools/check_paths.sh
# Each pattern is an extended regular expression; the names of the outside documents are
# written in two halves so that this file does not match itself.
patterns=(
  '\.\./shared'
  '(^|[^A-Za-z0-9_.])/work/'
  "fp4""-spec"
  "shared/""testdata"
  '(^|[^A-Za-z0-9_/])(DESIGN|STYLE|references)\.md'
  # a tracker's issue number, which a reader of the repository cannot follow (cite an upstream
  # project's issue as project#N)
  '(^|[^A-Za-z])[Ii]ssues? #?[0-9]+'
)
rc=0
for p in "${patterns[@]}"; do
  if git grep -n -I -E -e "$p" -- . ":(exclude)$self"; then rc=1; fi
done
if [ "$rc" -ne 0 ]; then
  echo "check_paths: the lines above refer to paths outside the repository or to tracker issues" >&2
fi
exit $rc
