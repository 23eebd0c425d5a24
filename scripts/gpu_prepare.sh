#!/usr/bin/env bash
# Prepare .gpu/ (git-ignored), everything scripts/gpu_check.sh needs on a GPU machine that has no
# package registry, small enough to carry over with the repository (≤ 64 MiB in all):
#   .gpu/llama-src.tar.xz   llama.cpp as llama-cpp-python's source distribution vendors it, pruned to
#                           what the CPU and CUDA shared libraries need (no models, docs, tests, tools,
#                           examples, other backends)
#   .gpu/wheels/            the project's runtime dependencies for CPython $PY_VERSION, manylinux x86-64,
#                           plus pip and setuptools (installed there with --no-index), and llama-cpp-python's
#                           Python package built here with its library build off (-DLLAMA_BUILD=OFF, a
#                           py3-none wheel of 0.1 MB): the check builds libllama itself and points the
#                           binding at it through LLAMA_CPP_LIB_PATH (read in llama_cpp/llama_cpp.py)
#   .gpu/model.gguf         a random-weight llama whose KV cache has SmolLM2-135M's shape (30 layers,
#                           3 KV heads × 64, 22.5 KiB per token in f16) and a 131,072-token trained context,
#                           F16 weights (11 MB). SmolLM2 itself does not fit: its GGUF is 98 MB (Q4_1; its
#                           576-wide rows rule out the smaller K-quants) and the carry limit is 64 MiB.
#   .gpu/MANIFEST.txt       versions and sizes
# The sdist (73 MB) is cached in .tools/gpu-prep/, outside what is carried.
#
# Usage: scripts/gpu_prepare.sh
# Environment:
#   PYTHON       interpreter with llama-cpp-python (for its version), gguf and numpy (for the model)
#                (default: .venv/bin/python, else python3)
#   VERSION      llama-cpp-python version to take (default: the one PYTHON has installed)
#   PY_VERSION   CPython version of the GPU machine, for the wheels (default 3.12)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.gpu"
CACHE="$ROOT/.tools/gpu-prep"
PY_VERSION="${PY_VERSION:-3.12}"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1

die() { echo "gpu_prepare: $*" >&2; exit 1; }
"$PYTHON" -c 'import gguf, numpy' 2>/dev/null \
    || die "$PYTHON lacks gguf/numpy (needed to write the model): set PYTHON to the project's venv"
command -v xz >/dev/null || die "xz not found (apt-get install xz-utils)"

VERSION="${VERSION:-$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)}"
[[ -n "$VERSION" ]] || die "llama-cpp-python is not installed in $PYTHON: set VERSION=0.3.x"

fetch_sdist() {
    mkdir -p "$CACHE/sdist"
    SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
    if [[ ! -f "$SDIST" ]]; then
        echo "downloading the llama-cpp-python $VERSION source distribution…"
        "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps -d "$CACHE/sdist" \
            "llama-cpp-python==$VERSION" || die "pip download llama-cpp-python==$VERSION failed"
    fi
    [[ -f "$SDIST" ]] || die "no $SDIST after the download"
}

# What the library build reads, relative to vendor/llama.cpp. Header-only vendor folders keep
# only their CMakeLists.txt (vendor/CMakeLists.txt adds them all; nothing in src/ or ggml/ includes them).
KEEP=(CMakeLists.txt LICENSE cmake include src vendor/CMakeLists.txt vendor/hash
      vendor/miniaudio/CMakeLists.txt vendor/nlohmann/CMakeLists.txt vendor/sheredom/CMakeLists.txt
      vendor/stb/CMakeLists.txt ggml/CMakeLists.txt ggml/cmake ggml/include
      ggml/src/ggml-cpu ggml/src/ggml-cuda)

pack_sources() {
    local src="$CACHE/src"
    rm -rf "$src" && mkdir -p "$src"
    tar -xzf "$SDIST" -C "$src" --strip-components=1
    local llama="$src/vendor/llama.cpp"
    [[ -f "$llama/CMakeLists.txt" ]] || die "no vendor/llama.cpp/CMakeLists.txt in $SDIST"
    local files=("${KEEP[@]}")
    while IFS= read -r f; do files+=("${f#"$llama/"}"); done < <(find "$llama/ggml/src" -maxdepth 1 -type f)
    tar -C "$llama" --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01' \
        --exclude='*.md' -cf - "${files[@]}" | xz -6 -T0 >"$OUT/llama-src.tar.xz"
    echo "pruned sources: $(du -sh "$llama" | cut -f1) → $(tar -tJf "$OUT/llama-src.tar.xz" | wc -l) files, " \
         "$(du -h "$OUT/llama-src.tar.xz" | cut -f1) xz"
}

# Runtime requirements: the project's, less llama-cpp-python (built below), plus llama-cpp-python's own.
requirements() {
    "$PYTHON" - "$ROOT/pyproject.toml" "$CACHE/src/pyproject.toml" <<'EOF'
import re, sys, tomllib
ours, theirs = (tomllib.load(open(p, "rb")) for p in sys.argv[1:3])
reqs = [r for r in ours["project"]["dependencies"] if not re.match(r"llama[-_]cpp[-_]python", r, re.I)]
reqs += theirs["project"]["dependencies"] + ours["build-system"]["requires"] + ["pip"]
print("\n".join(reqs))
EOF
}

download_wheels() {
    mkdir -p "$OUT/wheels"
    local reqs=()
    mapfile -t reqs < <(requirements)
    "$PYTHON" -m pip download --quiet --no-cache-dir --only-binary :all: --python-version "$PY_VERSION" \
        --implementation cp --abi "cp${PY_VERSION/./}" --platform manylinux_2_28_x86_64 \
        --platform manylinux2014_x86_64 -d "$OUT/wheels" "${reqs[@]}" \
        2> >(grep -v '^WARNING: Location' >&2) || die "pip download of the runtime wheels failed"
    # The binding's Python files only: its CMakeLists skips the library with LLAMA_BUILD=OFF.
    CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$PYTHON" -m pip wheel --quiet --no-deps --no-cache-dir \
        -w "$OUT/wheels" "$SDIST" 2> >(grep -v '^WARNING: Location' >&2) \
        || die "building the llama-cpp-python wheel without its library failed"
}

write_model() {
    "$PYTHON" - "$ROOT/tests" "$OUT/model.gguf" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tiny_model import write_tiny_llama
# SmolLM2-135M's KV shape: 30 layers × 3 KV heads × head_dim 64 (n_embd / n_head = 192 / 3).
write_tiny_llama(Path(sys.argv[2]), n_layer=30, n_embd=192, n_head=3, n_head_kv=3, n_ff=64,
                 n_ctx_train=131072, f16=True)
EOF
}

manifest() {
    {
        echo "llama_cpp_python $VERSION"
        echo "python $PY_VERSION"
        echo "model tiny-llama 30 layers, n_embd 192, 3 heads, 3 KV heads, head_dim 64, n_ctx_train 131072, F16"
        echo "prepared $(date -u +%FT%TZ)"
        (cd "$OUT" && find . -type f ! -name MANIFEST.txt -printf '%s %P\n' | sort -k2)
    } >"$OUT/MANIFEST.txt"
}

rm -rf "$OUT" && mkdir -p "$OUT"
fetch_sdist
pack_sources
download_wheels
write_model
manifest
rm -rf "$CACHE/src"  # 217 MB extracted; the sdist stays for the next run
echo "wheels: $(find "$OUT/wheels" -name '*.whl' | wc -l), $(du -sh "$OUT/wheels" | cut -f1); model: $(du -h "$OUT/model.gguf" | cut -f1)"
echo "carried: $(du -sh "$OUT" | cut -f1) in .gpu; the repository's tracked files: " \
     "$(cd "$ROOT" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1) bytes"
