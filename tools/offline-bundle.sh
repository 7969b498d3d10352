#!/usr/bin/env bash
# Makes, on a Debian machine that reaches its package archive, the one file that a GPU machine
# without one needs to build qsweep and run its private PostgreSQL: the -dev libraries of
# CMakeLists.txt's pkg-config modules, protoc-c, pkg-config, and this Debian release's
# PostgreSQL server, initdb, pg_ctl and psql, with every shared library their programs and
# libraries load (ELF DT_NEEDED, followed until closed) except the C library's own (glibc),
# the C++ and GCC runtimes and OpenMP's (libstdc++, libgcc_s, libgomp: any machine with a
# compiler has them). Documentation, translations, static libraries, PostgreSQL's JIT (LLVM)
# and its client programs other than psql are left out. tools/offline-prefix.sh unpacks it on
# the other machine; tools/device-check.sh does so itself when the file is there.
#
# Usage: bash tools/offline-bundle.sh [FILE]   (default build/offline/qsweep-offline.tar.xz)
# The tarball holds usr/... as the packages lay it out and MANIFEST.qsweep-offline: one line
# per package (name, version, why: "named", "runtime of" a -dev package, or the soname a file
# needs), then "glibc X.Y", the C library the binaries were built against (the machine that
# unpacks them needs that one or newer).
# Needs: apt-get, dpkg-deb, readelf (binutils), ldconfig, xz. No root.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
file="${1:-$root/build/offline/qsweep-offline.tar.xz}"
die() { echo "offline-bundle: $*" >&2; exit 1; }
for t in apt-get apt-cache dpkg-deb dpkg readelf xz; do
  command -v "$t" >/dev/null 2>&1 || die "needs $t (Debian's apt, dpkg, binutils and xz-utils)"
done
. "$(dirname "$0")/lib/ldcache.sh"
cache=$(ld_cache) || die "needs ldconfig (the C library's)"
# the PostgreSQL major version Debian's "postgresql" depends on in this release
pg=$(apt-cache depends postgresql 2>/dev/null | sed -n 's/.*Depends: postgresql-\([0-9][0-9]*\)$/\1/p' | awk 'NR == 1')
[ -n "$pg" ] || die "apt-cache knows no postgresql package (apt-get update?)"
named=(
  libcmocka-dev libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libpq-dev
  libopenblas-dev libopenblas-pthread-dev libjansson-dev libfyaml-dev libsodium-dev
  libpcre2-dev pkgconf pkgconf-bin "postgresql-$pg" "postgresql-client-$pg"
)
# sonames every machine with a C/C++ compiler has: glibc's, the C++/GCC runtimes, libgomp
base_re='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|ld-linux-x86-64|libstdc\+\+|libgcc_s|libgomp)\.so'

mkdir -p "$(dirname "$file")"
file="$(cd "$(dirname "$file")" && pwd)/$(basename "$file")"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
out="$stage/debs"
mkdir -p "$out" "$stage/root"
# apt downloads as its sandbox user, who cannot write here; as root, apt itself does
sandbox=()
[ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
manifest="$stage/manifest"
: >"$manifest"

# add PKG WHY: downloads PKG (this release's candidate) and unpacks it into the stage
declare -A have=()
add() {
  [ -n "${have[$1]:-}" ] && return 0
  have[$1]=1
  (cd "$out" && apt-get "${sandbox[@]}" download -qq "$1" >/dev/null) || die "apt-get download $1 failed"
  local deb
  deb=$(compgen -G "$out/${1}_*.deb" | awk 'NR == 1')
  [ -n "$deb" ] || die "apt-get download $1 wrote no .deb"
  dpkg-deb -x "$deb" "$stage/root"
  echo "$1 $(dpkg-deb -f "$deb" Version) $2" >>"$manifest"
}
for p in "${named[@]}"; do add "$p" named; done
# the runtime libraries the -dev packages' .so links point at: their direct lib* Depends
for p in "${named[@]}"; do
  case "$p" in *-dev) ;; *) continue ;; esac
  for d in $(apt-cache depends "$p" 2>/dev/null | sed -n 's/^ *Depends: \(lib[^ <>]*\)$/\1/p'); do
    case "$d" in *-dev | libc6 | libgcc-s1 | libstdc++6 | libgomp1) ;; *) add "$d" "runtime of $p" ;; esac
  done
done

# pkg-config modules named by the stage's .pc files (Requires and Requires.private: pkg-config
# looks for both) that no .pc in the stage provides: the -dev package that installs the
# module's .pc on this machine, until closed.
pcdirs=(/usr/lib/x86_64-linux-gnu/pkgconfig /usr/share/pkgconfig /usr/lib/pkgconfig)
while :; do
  new=0
  for mod in $(find "$stage/root" -name '*.pc' -exec sed -n 's/^Requires\(\.private\)\{0,1\}:\(.*\)$/\2/p' {} + |
    tr ',' ' ' | tr ' ' '\n' | grep -E '^[A-Za-z0-9_.+-]+$' | grep -vE '^[0-9.]+$' | sort -u); do
    pcfile="" staged=0
    for d in "${pcdirs[@]}"; do [ -f "$stage/root$d/$mod.pc" ] && staged=1; done
    [ "$staged" = 1 ] && continue
    for d in "${pcdirs[@]}"; do [ -f "$d/$mod.pc" ] && pcfile="$d/$mod.pc" && break; done
    [ -n "$pcfile" ] || die "no $mod.pc on this machine (a .pc in the bundle requires it)"
    # the package of the path pkg-config reads (a link, say), else of the file it points to
    owner=$(dpkg -S "$pcfile" 2>/dev/null || dpkg -S "$(readlink -f "$pcfile")" 2>/dev/null || true)
    owner=${owner%%:*}
    [ -n "$owner" ] || die "$pcfile belongs to no Debian package"
    if [ -z "${have[$owner]:-}" ]; then
      add "$owner" "$mod.pc"
      new=1
    fi
    # a .pc that is a link: the package of the file behind it too
    real=$(readlink -f "$pcfile")
    if [ "$real" != "$pcfile" ]; then
      owner=$(dpkg -S "$real" 2>/dev/null || true)
      owner=${owner%%:*}
      [ -n "$owner" ] && [ -z "${have[$owner]:-}" ] && add "$owner" "$mod.pc behind a link" && new=1
    fi
  done
  [ "$new" = 0 ] && break
done

# Follow DT_NEEDED until every soname is in the stage or in the base set.
while :; do
  provided=$(find "$stage/root" \( -type f -o -type l \) -name '*.so*' -printf '%f\n' | sort -u)
  new=0
  while IFS= read -r so; do
    [[ "$so" =~ $base_re ]] && continue
    grep -qxF "$so" <<<"$provided" && continue
    path=$(ld_cache_path "$cache" "$so")
    [ -n "$path" ] || die "no library on this machine provides $so (needed by the bundle)"
    owner=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null || true)
    owner=${owner%%:*}
    [ -n "$owner" ] || die "$so ($path) belongs to no Debian package"
    if [ -z "${have[$owner]:-}" ]; then
      add "$owner" "$so"
      new=1
    fi
  done < <(find "$stage/root" -type f ! -name 'llvmjit*' -print0 |
    xargs -0 -r readelf -d 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' | sort -u)
  [ "$new" = 0 ] && break
done
glibc=$(ldd --version | awk 'NR == 1 {print $NF}')
{ sort "$manifest"; echo "glibc $glibc"; } >"$stage/root/MANIFEST.qsweep-offline"
# what the build and the private cluster do not read
r="$stage/root"
rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/locale" "$r/usr/share/lintian" \
  "$r/usr/share/bug" "$r/usr/lib/postgresql/$pg/lib/bitcode" "$r/usr/lib/postgresql/$pg/lib/pgxs"
rm -f "$r/usr/lib/postgresql/$pg/lib/llvmjit"* "$r/usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so"*
find "$r" -name '*.a' -delete
find "$r/usr/lib/postgresql/$pg/bin" -type f ! -name initdb ! -name pg_ctl ! -name postgres \
  ! -name psql ! -name pg_config -delete
find "$r" -xtype l -delete # links to what was left out
tar -C "$r" -cf - . | xz -T0 -6 >"$file.part"
mv "$file.part" "$file"
n=$(grep -c . "$r/MANIFEST.qsweep-offline")
echo "offline-bundle: $((n - 1)) packages, $(du -sh "$r" | cut -f1) unpacked, $(du -h "$file" | cut -f1) in $file (PostgreSQL $pg; built against glibc $glibc)"
