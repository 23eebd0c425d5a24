#!/usr/bin/env bash
# Build llama.cpp's own tools from the sources vendored in llama-cpp-python's source
# distribution (no git clone, no network beyond PyPI), into .tools/<tool>/bin/<tool> (git-ignored):
#   llama-server  for the attach integration test (tests/jobs/test_attach.py finds it there,
#                 through $LLAMA_SERVER, or on PATH)
#   llama-bench   the C++ anchor of bench/run_overhead.py (there, $LLAMA_BENCH, or PATH)
# One build compiles ggml/llama/common once for every tool asked for (several minutes on 2 cores).
# The build matches llama-cpp-python's portable one (GGML_NATIVE=OFF, AVX2/FMA/F16C/BMI2 when this
# CPU has them), so a ratio against it compares the Python layer, not two compilers' choices.
# Run it with `nice` next to anything that measures speed.
#
# Usage: scripts/build_llama_tools.sh [TOOL…]      (default: llama-server llama-bench)
# Environment:
#   VERSION      llama-cpp-python version to take the sources from (default: the installed one)
#   PYTHON       interpreter with pip (default: .venv/bin/python, else python3)
#   JOBS         parallel compile jobs (default: nproc)
#   CMAKE_ARGS   extra CMake arguments (e.g. -DGGML_CUDA=ON)
#   KEEP_BUILD   1: keep .tools/llama-build for a quick rebuild of another tool later
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$ROOT/.tools/llama-build"
TOOLS=("$@")
((${#TOOLS[@]})) || TOOLS=(llama-server llama-bench)
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

die() { echo "build_llama_tools: $*" >&2; exit 1; }
command -v cmake >/dev/null || die "cmake not found (apt-get install cmake, or pip install cmake)"
command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler found (apt-get install g++)"

BUILD="$WORK/build"
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    VERSION="${VERSION:-$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)}"
    SPEC="llama-cpp-python${VERSION:+==$VERSION}"
    mkdir -p "$WORK/sdist"
    SDIST="$(ls "$WORK"/sdist/llama_cpp_python-"${VERSION:-}"*.tar.gz 2>/dev/null | head -n 1 || true)"
    if [[ -z "$SDIST" ]]; then
        echo "downloading the $SPEC source distribution…"
        "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps -d "$WORK/sdist" "$SPEC" \
            || die "pip download $SPEC failed"
        SDIST="$(ls -t "$WORK"/sdist/llama_cpp_python-*.tar.gz | head -n 1)"
    fi
    echo "sources: $SDIST"
    SRC="$WORK/src"
    rm -rf "$SRC" && mkdir -p "$SRC"
    tar -xzf "$SDIST" -C "$SRC" --strip-components=1
    LLAMA="$SRC/vendor/llama.cpp"
    [[ -f "$LLAMA/CMakeLists.txt" ]] || die "no vendor/llama.cpp/CMakeLists.txt in $SDIST"

    SIMD=()
    if [[ "$(uname -m)" == "x86_64" ]] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
        SIMD=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
        grep -qw bmi2 /proc/cpuinfo && SIMD+=(-DGGML_BMI2=ON)
    fi
    # shellcheck disable=SC2086  # CMAKE_ARGS is a list of words on purpose
    cmake -S "$LLAMA" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
        "${SIMD[@]}" ${CMAKE_ARGS:-}
fi

for tool in "${TOOLS[@]}"; do
    cmake --build "$BUILD" --config Release --target "$tool" -j "$JOBS"
    BIN="$(find "$BUILD" -type f -name "$tool" -perm -u+x | head -n 1)"
    [[ -n "$BIN" ]] || die "the build finished but no $tool binary was found under $BUILD"
    mkdir -p "$ROOT/.tools/$tool/bin"
    cp "$BIN" "$ROOT/.tools/$tool/bin/$tool"
    "$ROOT/.tools/$tool/bin/$tool" --help >/dev/null 2>&1 || die "$tool was built but --help fails"
    echo "$tool: $ROOT/.tools/$tool/bin/$tool"
done
[[ "${KEEP_BUILD:-0}" == 1 ]] || rm -rf "$WORK/src" "$BUILD"  # keep the binaries and the sdist
