#!/usr/bin/env bash
# Unpacks the tarball of tools/offline-bundle.sh into a private prefix on a machine that has
# no package archive, and prints the shell lines that put the prefix to use (eval them):
# PATH (PostgreSQL's bin, then protoc-c and pkg-config where the machine has none),
# PKG_CONFIG_LIBDIR and PKG_CONFIG_SYSROOT_DIR (the bundle's .pc files only, their paths inside
# the prefix) and LD_LIBRARY_PATH. Nothing outside the prefix is written.
#
# A bundled library whose soname the machine already provides (ldconfig -p) is replaced by a
# link to the machine's own: one copy of each library per process, and no program of the
# machine's own is handed an older copy of a library it has through LD_LIBRARY_PATH. So the
# prefix adds only what is missing, and fits any machine whose C library is at least the one
# the bundle was built against (MANIFEST.qsweep-offline's "glibc" line; checked here).
#
# Usage: eval "$(bash tools/offline-prefix.sh TARBALL [PREFIX])"
#   PREFIX defaults to ${TMPDIR:-/tmp}/qsweep-offline; it is replaced. Its folders are
#   world-readable: the private PostgreSQL runs as an unprivileged user when started by root.
# Exit status: 0 with the lines on stdout; 1 with the reason on stderr (nothing to eval).
set -euo pipefail

die() { echo "offline-prefix: $*" >&2; exit 1; }
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: eval \"\$(bash tools/offline-prefix.sh TARBALL [PREFIX])\""
tarball="$1"
prefix="${2:-${TMPDIR:-/tmp}/qsweep-offline}"
[ -f "$tarball" ] || die "$tarball: no such file (tools/offline-bundle.sh makes it)"
command -v tar >/dev/null 2>&1 || die "needs tar"
. "$(dirname "$0")/lib/ldcache.sh"
cache=$(ld_cache) || die "needs ldconfig (the C library's)"
# xz, else Python's tarfile (a machine may have either without the other)
unpack() {
  if command -v xz >/dev/null 2>&1; then
    tar -C "$2" -xJf "$1"
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1], "r:xz")
if hasattr(tarfile, "tar_filter"):
    t.extractall(sys.argv[2], filter="tar")
else:
    t.extractall(sys.argv[2])' "$1" "$2"
  else
    echo "offline-prefix: needs xz or python3 to unpack $1" >&2
    return 1
  fi
}

rm -rf "$prefix"
mkdir -p "$prefix"
chmod 755 "$prefix"
unpack "$tarball" "$prefix" || die "$tarball: could not be unpacked (a tarball of tools/offline-bundle.sh?)"
manifest="$prefix/MANIFEST.qsweep-offline"
[ -f "$manifest" ] || die "$tarball: no MANIFEST.qsweep-offline (not made by tools/offline-bundle.sh)"

# the C library: the bundle's binaries need the one they were built against, or newer
need=$(awk '$1 == "glibc" {print $2}' "$manifest")
# (awk reads all of ldd's lines: a reader that stops early would fail the pipeline on SIGPIPE)
have=$(ldd --version 2>/dev/null | awk 'NR == 1 {print $NF}')
[ -n "$need" ] || die "$manifest: no glibc line"
if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | awk 'NR == 1')" != "$need" ]; then
  die "$tarball was built against glibc $need; this machine has ${have:-an unknown C library}: make the bundle on an older Debian"
fi

# bundled libraries the machine has: links to the machine's own
libdirs=("$prefix/usr/lib/x86_64-linux-gnu" "$prefix/usr/lib/x86_64-linux-gnu/openblas-pthread"
  "$prefix/lib/x86_64-linux-gnu")
shared=0
for d in "${libdirs[@]}"; do
  [ -d "$d" ] || continue
  while IFS= read -r -d '' f; do
    so=$(basename "$f")
    sys=$(ld_cache_path "$cache" "$so")
    [ -n "$sys" ] || continue
    case "$sys" in "$prefix"/*) continue ;; esac
    rm -f "$f"
    ln -s "$sys" "$f"
    shared=$((shared + 1))
  done < <(find "$d" -maxdepth 1 \( -type f -o -type l \) -name '*.so.*' -print0)
done
echo "offline-prefix: $prefix from $(basename "$tarball") ($(grep -vc '^glibc ' "$manifest") packages, built against glibc $need; this machine $have; $shared of its libraries are the machine's own)" >&2

pgbin=$(ls -d "$prefix"/usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] && [ -x "$pgbin/initdb" ] || die "$tarball: no PostgreSQL initdb inside"
ld=""
for d in "${libdirs[@]}"; do [ -d "$d" ] && ld="$ld${ld:+:}$d"; done
pc="$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig:$prefix/usr/share/pkgconfig"
printf 'export PATH=%q\n' "$pgbin:$PATH:$prefix/usr/bin"
printf 'export PKG_CONFIG_LIBDIR=%q PKG_CONFIG_SYSROOT_DIR=%q\n' "$pc" "$prefix"
printf 'export LD_LIBRARY_PATH=%q\n' "$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
