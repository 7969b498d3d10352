# The set-up of the shell tests that train on the King James Bible (tools/study_data.sh); source
# it after setting Q (the qsweep binary) and src (the source tree), then call
#   study_data_setup NAME PREFIX
# which exits 77 (skipped, saying why) without Debian's `bible` reader or without the SmolLM2
# GGUF ($QSWEEP_SMOLLM2_GGUF, else the user cache's; tools/study_data.sh tokenizes for it too),
# and otherwise runs pg_test_setup NAME PREFIX (tests/lib/pg.sh) and writes the study's texts and
# token files into the test's own cache, $D/cache/qsweep/data (its log: $D/study_data.log).
. "$(dirname "${BASH_SOURCE[0]}")/pg.sh"

study_data_setup() {
  local gguf=${QSWEEP_SMOLLM2_GGUF:-${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf}
  if ! command -v bible >/dev/null; then
    echo "$1: skipped: no 'bible' command (tools/install-deps.sh installs bible-kjv)"
    exit 77
  fi
  if [ ! -s "$gguf" ]; then
    echo "$1: skipped: $gguf missing (bash tools/fetch_smollm2.sh)"
    exit 77
  fi
  pg_test_setup "$1" "$2"
  mkdir -p "$D/cache/qsweep/models"
  ln -s "$gguf" "$D/cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  QSWEEP=$Q bash "$src/tools/study_data.sh" >"$D/study_data.log" 2>&1 || fail "tools/study_data.sh"
}
