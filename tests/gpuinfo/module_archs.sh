#!/bin/sh
# gpu_cuda_archs: every CUDA target of the build compiles for each architecture of its
# CMAKE_CUDA_ARCHITECTURES, machine code (SASS) for each and PTX for those given without
# -real, so an A100 (sm_80) or an L40S (sm_89) finds its kernels: read from the nvcc flags CMake
# writes (flags.make: --generate-code=arch=compute_N,code=[...]), which no target overrides;
# and from the CUDA module's fatbinary itself (fatbin_archs.c, no cuobjdump needed).
# Usage: BUILD_DIR MODULE FATBIN_ARCHS ARCH... (CMake's list: 80-real 86-real ... 120). Runs on
# any machine.
set -eu
build=$1
mod=$2
fatbin_archs=$3
shift 3
status=0
n_targets=0
# one line per CUDA target (Makefiles: its flags.make) or per CUDA object (Ninja: build.ninja)
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
find "$build" -name flags.make -exec grep -H '^CUDA_FLAGS' {} + >"$lines" || true
[ -f "$build/build.ninja" ] && grep -n '^ *FLAGS = .*--generate-code' "$build/build.ninja" |
    sed "s|^|$build/build.ninja:|" >>"$lines"
while IFS= read -r line; do
    n_targets=$((n_targets + 1))
    f=${line%%:*}
    flags=${line#*:}
    for a in "$@"; do
        n=${a%%-*}
        case $a in
        *-real) want="code=\[sm_$n\]" ;;
        *-virtual) want="code=\[compute_$n\]" ;;
        *) want="code=\[compute_$n,sm_$n\]" ;;
        esac
        if ! echo "$flags" | grep -q -- "--generate-code=arch=compute_$n,$want"; then
            echo "FAIL: $f: no --generate-code for $a ($flags)"
            status=1
        fi
    done
    # nothing beyond the list either: a target property would add or replace architectures
    extra=$(echo "$flags" | grep -o -- '--generate-code=arch=compute_[0-9a-z]*' | wc -l)
    if [ "$extra" -ne $# ]; then
        echo "FAIL: $f: $extra --generate-code flags for $# architectures"
        status=1
    fi
done <"$lines"
if [ $n_targets -eq 0 ]; then
    echo "FAIL: no CUDA target under $build"
    exit 1
fi
echo "$n_targets CUDA targets (or objects) compile for $*"
# the module's fatbinary: what its code holds (fatbin_archs reads the .nv_fatbin section)
got=$("$fatbin_archs" "$mod") || exit 1
sass=" $(echo "$got" | sed -n 's/^sass//p') "
ptx=" $(echo "$got" | sed -n 's/^ptx//p') "
for a in "$@"; do
    n=${a%%-*}
    case $a in *-virtual) ;; *)
        case $sass in *" $n "*) ;; *) echo "FAIL: $mod has no sm_$n machine code"; status=1 ;; esac ;;
    esac
    case $a in *-real) ;; *)
        case $ptx in *" $n "*) ;; *) echo "FAIL: $mod has no compute_$n PTX"; status=1 ;; esac ;;
    esac
done
echo "$(basename "$mod"): machine code for sm$(echo $sass | sed 's/ /, sm_/g; s/^/_/'), PTX for compute$(echo $ptx | sed 's/ /, compute_/g; s/^/_/')"
exit $status
