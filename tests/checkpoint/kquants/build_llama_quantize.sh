#!/bin/sh
# Builds llama.cpp's llama-quantize (CPU only, static) from the llama-cpp-python sdist on PyPI,
# for tests/checkpoint/kquants/make_kquants.py. Test-data tooling only: nothing here is part of
# the product or of CI. Usage: build_llama_quantize.sh WORKDIR  (prints the binary's path).
# Needs pip, cmake and a C/C++ compiler; takes several minutes on two cores.
set -eu
work=${1:?usage: build_llama_quantize.sh WORKDIR}
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
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON >&2
cmake --build "$work/build" -j2 --target llama-quantize >&2
echo "$work/build/bin/llama-quantize"
