# The dynamic loader's cache, for the scripts that decide from it which libraries a machine has
# (tools/offline-bundle.sh, tools/offline-prefix.sh, tools/device-check.sh). Sourced, not run.

# ld_cache: `ldconfig -p` whole (ldconfig from /sbin or /usr/sbin where PATH leaves them out, as
# a non-root shell's does); status 1, nothing printed, where there is no ldconfig. Readers take
# all of its output, so that under pipefail no early exit of theirs SIGPIPEs ldconfig.
ld_cache() {
  local bin
  bin=$(command -v ldconfig || ls /sbin/ldconfig /usr/sbin/ldconfig 2>/dev/null | awk 'NR == 1')
  [ -n "$bin" ] || return 1
  "$bin" -p
}

# ld_cache_path CACHE SONAME: the x86-64 path CACHE (ld_cache's output) lists for SONAME, empty
# when it lists none.
ld_cache_path() {
  awk -v s="$2" '$1 == s && /x86-64/ {print $NF; exit}' <<<"$1"
}
