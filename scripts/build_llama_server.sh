#!/usr/bin/env bash
# Build a llama-server binary from the llama.cpp sources vendored in llama-cpp-python's source
# distribution (no git clone, no network beyond PyPI). The result lands in .tools/llama-server/
# (git-ignored); tests/test_attach.py finds it there, through $LLAMA_SERVER, or on PATH.
#
# Usage: scripts/build_llama_server.sh [VERSION]
#   VERSION  llama-cpp-python version to take the sources from (default: the installed one)
# Environment:
#   PYTHON       interpreter with pip (default: .venv/bin/python, else python3)
#   JOBS         parallel compile jobs (default: nproc)
#   CMAKE_ARGS   extra CMake arguments (e.g. -DGGML_CUDA=ON)
# Takes several minutes on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.tools/llama-server"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

die() { echo "build_llama_server: $*" >&2; exit 1; }
command -v cmake >/dev/null || die "cmake not found (apt-get install cmake, or pip install cmake)"
command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler found (apt-get install g++)"

VERSION="${1:-$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)}"
SPEC="llama-cpp-python${VERSION:+==$VERSION}"

mkdir -p "$DEST/sdist"
SDIST="$(ls "$DEST"/sdist/llama_cpp_python-"${VERSION:-}"*.tar.gz 2>/dev/null | head -n 1 || true)"
if [[ -z "$SDIST" ]]; then
    echo "downloading the $SPEC source distribution…"
    "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps -d "$DEST/sdist" "$SPEC" \
        || die "pip download $SPEC failed"
    SDIST="$(ls -t "$DEST"/sdist/llama_cpp_python-*.tar.gz | head -n 1)"
fi
echo "sources: $SDIST"

SRC="$DEST/src"
rm -rf "$SRC" && mkdir -p "$SRC"
tar -xzf "$SDIST" -C "$SRC" --strip-components=1
LLAMA="$SRC/vendor/llama.cpp"
[[ -f "$LLAMA/CMakeLists.txt" ]] || die "no vendor/llama.cpp/CMakeLists.txt in $SDIST"

# Portable build (GGML_NATIVE=OFF); AVX2/FMA/F16C when this CPU has them, as most x86-64 machines
# of the last decade do. Without them the build is plain SSE and decode is several times slower.
SIMD=()
if [[ "$(uname -m)" == "x86_64" ]] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    SIMD=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
fi

BUILD="$DEST/build"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of words on purpose
cmake -S "$LLAMA" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
    "${SIMD[@]}" ${CMAKE_ARGS:-}
cmake --build "$BUILD" --config Release --target llama-server -j "$JOBS"

BIN="$(find "$BUILD" -type f -name llama-server -perm -u+x | head -n 1)"
[[ -n "$BIN" ]] || die "the build finished but no llama-server binary was found under $BUILD"
mkdir -p "$DEST/bin"
cp "$BIN" "$DEST/bin/llama-server"
rm -rf "$SRC" "$BUILD"  # keep the binary and the sdist only
echo "llama-server: $DEST/bin/llama-server"
echo "run the integration test with: LLAMA_SERVER=$DEST/bin/llama-server pytest -q tests/test_attach.py"
