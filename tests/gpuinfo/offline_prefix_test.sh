#!/usr/bin/env bash
# tools/offline-prefix.sh on hand-made tarballs shaped as tools/offline-bundle.sh writes them
# (that one needs a package archive; this needs none): a bundled library whose soname this
# machine has becomes a link to the machine's own, one it lacks stays the bundle's file, the
# printed lines put the prefix's PostgreSQL, pkg-config files and libraries to use, and a bundle
# built against a newer glibc, one without its manifest and a missing file are refused with the
# reason and nothing to eval.
# Usage: offline_prefix_test.sh REPO_ROOT
set -uo pipefail
root="$1"
tool="$root/tools/offline-prefix.sh"
D="$(mktemp -d)"
trap 'rm -rf "$D"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# a soname this machine has (the C library's zlib user: libz.so.1 is everywhere qsweep builds)
sys_so=libz.so.1
sys_path=$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p | awk -v s="$sys_so" '$1 == s && /x86-64/ {print $NF; exit}')
[ -n "$sys_path" ] || fail "ldconfig -p lists no $sys_so"
glibc=$(ldd --version | head -n 1 | awk '{print $NF}')

# make_bundle NAME GLIBC [no-manifest]: a tarball in $D/NAME.tar.xz
make_bundle() {
  local r="$D/src-$1"
  mkdir -p "$r/usr/lib/x86_64-linux-gnu/pkgconfig" "$r/usr/lib/postgresql/15/bin" "$r/usr/bin"
  echo "not the system's zlib" >"$r/usr/lib/x86_64-linux-gnu/$sys_so"
  echo "a library no machine has" >"$r/usr/lib/x86_64-linux-gnu/libqsweep-offline-test.so.7"
  ln -s libqsweep-offline-test.so.7 "$r/usr/lib/x86_64-linux-gnu/libqsweep-offline-test.so"
  printf 'prefix=/usr\nName: qsweep-offline-test\nVersion: 1\nDescription: test\n' \
    >"$r/usr/lib/x86_64-linux-gnu/pkgconfig/qsweep-offline-test.pc"
  printf '#!/bin/sh\necho initdb\n' >"$r/usr/lib/postgresql/15/bin/initdb"
  chmod +x "$r/usr/lib/postgresql/15/bin/initdb"
  [ "${3:-}" = no-manifest ] || printf 'zlib1g 1 libz.so.1\nglibc %s\n' "$2" >"$r/MANIFEST.qsweep-offline"
  tar -C "$r" -cJf "$D/$1.tar.xz" .
}

# --- a bundle this machine can take
make_bundle good "$glibc"
p="$D/prefix"
lines=$(bash "$tool" "$D/good.tar.xz" "$p" 2>"$D/err") || fail "good bundle refused: $(cat "$D/err")"
grep -q "1 of its libraries are the machine's own" "$D/err" || fail "the count of shared libraries: $(cat "$D/err")"
lib="$p/usr/lib/x86_64-linux-gnu"
[ -L "$lib/$sys_so" ] && [ "$(readlink "$lib/$sys_so")" = "$sys_path" ] ||
  fail "$sys_so is not a link to the machine's $sys_path: $(ls -l "$lib/$sys_so")"
[ -f "$lib/libqsweep-offline-test.so.7" ] && [ ! -L "$lib/libqsweep-offline-test.so.7" ] ||
  fail "a library the machine lacks was not kept as the bundle's file"
[ "$(stat -c %a "$p")" = 755 ] || fail "prefix mode $(stat -c %a "$p"), want 755 (the server's user reads it)"
(
  eval "$lines"
  [ "${PATH%%:*}" = "$p/usr/lib/postgresql/15/bin" ] || fail "PATH does not start with the prefix's PostgreSQL: $PATH"
  [ "$(initdb)" = initdb ] || fail "initdb is not the prefix's"
  [ "$PKG_CONFIG_SYSROOT_DIR" = "$p" ] || fail "PKG_CONFIG_SYSROOT_DIR=$PKG_CONFIG_SYSROOT_DIR"
  case ":$PKG_CONFIG_LIBDIR:" in *":$lib/pkgconfig:"*) ;; *) fail "PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR" ;; esac
  case ":$LD_LIBRARY_PATH:" in *":$lib:"*) ;; *) fail "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" ;; esac
  if command -v pkg-config >/dev/null 2>&1; then
    [ "$(pkg-config --variable=prefix qsweep-offline-test)" = "$p/usr" ] ||
      fail "pkg-config does not read the prefix's .pc under its sysroot"
  fi
) || exit 1
# a second unpack replaces the first
echo stale >"$p/stale"
bash "$tool" "$D/good.tar.xz" "$p" >/dev/null 2>&1 || fail "second unpack failed"
[ ! -e "$p/stale" ] || fail "the prefix was not replaced"

# --- refusals: stdout empty, the reason on stderr, exit 1
refused() { # what tarball pattern
  local out rc=0
  out=$(bash "$tool" "$2" "$D/prefix-refused" 2>"$D/err") || rc=$?
  [ "$rc" = 1 ] || fail "$1: exit $rc, want 1"
  [ -z "$out" ] || fail "$1: printed lines to eval: $out"
  grep -q "$3" "$D/err" || fail "$1: the reason does not say '$3': $(cat "$D/err")"
}
make_bundle newer 99.0
refused "a newer glibc" "$D/newer.tar.xz" "built against glibc 99.0; this machine has"
make_bundle bare "$glibc" no-manifest
refused "no manifest" "$D/bare.tar.xz" "no MANIFEST.qsweep-offline"
refused "no file" "$D/absent.tar.xz" "absent.tar.xz: no such file"
echo "junk" >"$D/junk.tar.xz"
refused "not a tarball" "$D/junk.tar.xz" "could not be unpacked"
echo "offline-prefix: ok"
