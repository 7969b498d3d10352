#!/bin/sh
# Builds ggml_quantize_rows (this folder) against llama.cpp's ggml-base library (CPU only,
# static) from the llama-cpp-python sdist on PyPI, for make_kquants.py. Test-data tooling only:
# nothing here is part of the product or of CI.
# Usage: build_ggml_quantize.sh WORKDIR   (prints the tool's path; needs pip, cmake, cc, c++)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: build_ggml_quantize.sh WORKDIR}
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
mkdir -p "$work"
cd "$work"
if [ ! -d "llama_cpp_python-$version" ]; then
    python3 -m pip download --no-binary :all: --no-deps "llama-cpp-python==$version" >&2
    tar xzf "llama_cpp_python-$version.tar.gz"
fi
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF >&2
# ggml-base holds ggml_quantize_chunk and the reference quantizers (ggml-quants.c).
cmake --build "$work/build" -j2 --target ggml-base >&2
cc -O2 -I"$src/ggml/include" "$here/ggml_quantize_rows.c" "$work/build/ggml/src/libggml-base.a" \
    -lstdc++ -lm -lpthread -o "$work/ggml_quantize_rows"
echo "$work/ggml_quantize_rows"
