#!/usr/bin/env bash
# Build llama.cpp's own tools from the sources vendored in llama-cpp-python's source
# distribution (no git clone, no network beyond PyPI), into .tools/<tool>/bin/<tool> (git-ignored):
#   llama-server  for the attach integration test (tests/jobs/test_attach.py finds it there,
#                 through $LLAMA_SERVER, or on PATH)
#   llama-bench   the C++ anchor of bench/run_overhead.py (there, $LLAMA_BENCH, or PATH)
#   rpc-server    llama.cpp's RPC device server (CMake target ggml-rpc-server): each one started on
#                 loopback is a device RPC0, RPC1… for llama-server --rpc (tests/jobs/test_rpc_devices.py;
#                 there, $RPC_SERVER, or PATH)
#   llama-fit-params  llama.cpp's own fitting, printed (--fit-print on: model, context and compute MiB
#                 per device); there, $LLAMA_FIT_PARAMS, or PATH
# The build has the RPC backend on (-DGGML_RPC=ON), so llama-server takes --rpc; a kept build
# configured without it is reconfigured.
# One build compiles ggml/llama/common once for every tool asked for (several minutes on 2 cores).
# The build matches llama-cpp-python's portable one (GGML_NATIVE=OFF, AVX2/FMA/F16C/BMI2 when this
# CPU has them), so a ratio against it compares the Python layer, not two compilers' choices.
# Run it with `nice` next to anything that measures speed.
#
# Usage: scripts/build_llama_tools.sh [TOOL…]      (default: llama-server llama-bench)
#        e.g. scripts/build_llama_tools.sh llama-server rpc-server llama-fit-params
# Environment:
#   VERSION      llama-cpp-python version to take the sources from (default: the installed one)
#   PYTHON       interpreter with pip (default: .venv/bin/python, else python3)
#   JOBS         parallel compile jobs (default: nproc)
#   CMAKE_ARGS   extra CMake arguments (e.g. -DGGML_CUDA=ON)
#   KEEP_BUILD   1: keep .tools/llama-build for a quick rebuild of another tool later
#   LLAMA_BUILD_DIR  where the sources and the build go (default: .tools/llama-build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${LLAMA_BUILD_DIR:-$ROOT/.tools/llama-build}"
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
        -DGGML_RPC=ON "${SIMD[@]}" ${CMAKE_ARGS:-}
elif ! grep -q '^GGML_RPC:BOOL=ON' "$BUILD/CMakeCache.txt"; then
    echo "reconfiguring the kept build with the RPC backend (-DGGML_RPC=ON)…"
    cmake -B "$BUILD" -DGGML_RPC=ON
fi

target_of() {  # the CMake target and the binary it makes, for a tool's name
    case "$1" in
        rpc-server | ggml-rpc-server) echo ggml-rpc-server ;;
        *) echo "$1" ;;
    esac
}

for tool in "${TOOLS[@]}"; do
    [[ "$tool" == ggml-rpc-server ]] && tool=rpc-server
    target="$(target_of "$tool")"
    cmake --build "$BUILD" --config Release --target "$target" -j "$JOBS"
    BIN="$(find "$BUILD" -type f -name "$target" -perm -u+x | head -n 1)"
    [[ -n "$BIN" ]] || die "the build finished but no $target binary was found under $BUILD"
    mkdir -p "$ROOT/.tools/$tool/bin"
    cp "$BIN" "$ROOT/.tools/$tool/bin/.$tool.new"  # then a rename: a running copy keeps its file
    mv -f "$ROOT/.tools/$tool/bin/.$tool.new" "$ROOT/.tools/$tool/bin/$tool"
    "$ROOT/.tools/$tool/bin/$tool" --help >/dev/null 2>&1 || die "$tool was built but --help fails"
    echo "$tool: $ROOT/.tools/$tool/bin/$tool"
done
[[ "${KEEP_BUILD:-0}" == 1 ]] || rm -rf "$WORK/src" "$BUILD"  # keep the binaries and the sdist
