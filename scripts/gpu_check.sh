#!/usr/bin/env bash
# The GPU check: one command for a machine with an NVIDIA GPU (made for one H200: x86-64, nvcc,
# CMake, ninja, CPython 3.12, no package registry) that exercises cliff-tui's GPU path for real and
# brings back what it saw, within 8 minutes.
#
#   1. builds llama.cpp's shared libraries (libllama + ggml, nothing else) with CUDA for sm_90 only,
#      from the sources llama-cpp-python vendors (carried pruned in .gpu/), and points the binding at
#      them with LLAMA_CPP_LIB_PATH (llama_cpp/llama_cpp.py reads it; libggml*, cudart and cublas are
#      found through the build tree's run path) — while that compiles:
#   2. installs cliff-tui and its runtime dependencies into a venv from the carried wheels
#      (--no-index), with llama-cpp-python's Python package built without its library;
#   3. runs, writing into OUTDIR:
#        watch_once.json    cliff-tui watch --once --json
#        run.json           cliff-tui run --headless -ngl -1 -o json (the KV buffer must read CUDA0)
#        triangulate.json   cliff-tui triangulate --headless --depths 16k,32k,65k -o json
#        watch.jsonl        a 60 s `watch --headless --record` while `run --headless` decodes
#        nvml_shapes.json   raw NVML readings, idle and during the decode (scripts/gpu_nvml_dump.py),
#                           for tests/support/fakes/nvml.py to replay
#      and one context far too large for the GPU (`run -c 16777216`: a real CUDA allocation fails, the
#      "does not fit" line and exit code land in steps.log and steps.tsv);
#   4. steps.tsv (step, seconds, exit code, note), steps.log (each step's command and stderr tail),
#      build.log.tail (the build log's last 100 lines). 8 files in all, flat, each well under 16 MiB.
# Every step has its own time limit, capped by what is left of the 8 minutes (BUDGET_S); a failed or
# timed-out step is recorded and the next one runs. Exit code: 0 when every step passed, 1 otherwise,
# 2 when the inputs are missing.
#
# The model is .gpu/model.gguf, a random-weight llama with SmolLM2-135M's KV shape (30 layers, 3 KV
# heads × 64: 22.5 KiB per token in f16) and a 131,072-token trained context. SmolLM2's own GGUF is
# 98 MB, over the 64 MiB that can be carried; speeds are this model's, memory per token is SmolLM2's.
#
# Usage: scripts/gpu_check.sh OUTDIR [--cpu]
#   --cpu   the same steps with a CPU build (no CUDA, GGML_NATIVE=OFF), -ngl 0 and depths 1k,2k,4k: the
#           dry run that proves the script before it meets the GPU.
# Prepare first, on a machine with a registry: scripts/gpu_prepare.sh (writes .gpu/, carried along).
# Environment:
#   PYTHON     interpreter for the venv (default: python3.12, else python3); must match .gpu's wheels
#   WORK       scratch folder for the sources, build and venv (default .gpu-work/, git-ignored: a second
#              run on the same machine reuses the build)
#   JOBS       compile jobs (default: nproc)
#   BUDGET_S   seconds for the whole check (default 470)
#   HUGE_CTX   the context that must not fit (default 16777216: 360 GiB of KV cache)
#   SLOW       multiplies every step's time limit (default 1; 10 with --cpu on a small shared machine)
set -uo pipefail

set -a  # the steps run functions in child shells under `timeout`: they read these
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GPU_DIR="$ROOT/.gpu"
OUTDIR="${1:-}"
MODE=cuda
[[ "${2:-}" == "--cpu" ]] && MODE=cpu
if [[ -z "$OUTDIR" || "$OUTDIR" == -* || ( -n "${2:-}" && "${2:-}" != "--cpu" ) ]]; then
    echo "usage: scripts/gpu_check.sh OUTDIR [--cpu]" >&2
    exit 2
fi
mkdir -p "$OUTDIR" && OUTDIR="$(cd "$OUTDIR" && pwd)"
WORK="${WORK:-$ROOT/.gpu-work}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
BUDGET_S="${BUDGET_S:-470}"
HUGE_CTX="${HUGE_CTX:-16777216}"
START=$(date +%s)
DEADLINE=$((START + BUDGET_S))
STEPS="$OUTDIR/steps.tsv"
LOG="$OUTDIR/steps.log"
MODEL="$GPU_DIR/model.gguf"
SRC="$WORK/llama.cpp"
BUILD="$WORK/build-$MODE"
VENV="$WORK/venv"
FAILED=()

# SLOW scales every step's time limit: the limits are set for the GPU machine (16 CPUs, idle).
if [[ "$MODE" == cuda ]]; then
    SLOW=${SLOW:-1} NGL=-1 DEPTHS=16k,32k,65k RUN_DEPTH=4096 RUN_GEN=128 DECODE_DEPTH=16000 DECODE_GEN=4096
    KV_EXPECT=CUDA0
else
    SLOW=${SLOW:-10} NGL=0 DEPTHS=1k,2k,4k RUN_DEPTH=1024 RUN_GEN=32 DECODE_DEPTH=512 DECODE_GEN=128
    KV_EXPECT=CPU
fi
set +a

printf 'step\tseconds\texit_code\tnote\n' >"$STEPS"
: >"$LOG"
mkdir -p "$WORK"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
left() { echo $((DEADLINE - $(date +%s))); }
log() { echo "$*" >>"$LOG"; }

# record NAME SECONDS RC [NOTE] — a step passed when RC is $EXPECT (0 unless the caller sets it)
record() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$STEPS"
    [[ "$3" == "${EXPECT:-0}" ]] || FAILED+=("$1")
    echo "[$1] ${2}s exit $3 ${4:-}"
}

# step NAME LIMIT_S STDOUT_FILE CMD… — runs CMD under a time limit (its own, capped by the budget
# left), stdout to STDOUT_FILE, stderr's tail to steps.log, a row in steps.tsv. Returns CMD's exit code.
step() {
    local name=$1 limit=$2 out=$3 t0 rc note=""
    shift 3
    local remaining
    remaining=$(left)
    if ((remaining < 5)); then
        record "$name" 0 skipped "no time left"
        return 99
    fi
    limit=$((limit * SLOW))
    ((limit > remaining)) && limit=$remaining
    log "== $name (limit ${limit}s): $*"
    t0=$(now)
    if declare -F "$1" >/dev/null; then
        timeout -k 5 "$limit" bash -c '"$@"' _ "$@" >"$out" 2>"$WORK/$name.err"
    else
        timeout -k 5 "$limit" "$@" >"$out" 2>"$WORK/$name.err"
    fi
    rc=$?
    ((rc == 124 || rc == 137)) && note="timed out after ${limit}s"
    [[ -z "$note" && "${EXPECT:-0}" != 0 ]] && note="expected exit $EXPECT"
    [[ "$out" == "$WORK"/* ]] && tail -n 40 "$out" | cut -c 1-2000 >>"$LOG"
    tail -n 60 "$WORK/$name.err" | cut -c 1-2000 >>"$LOG"
    record "$name" "$(since "$t0")" "$rc" "$note"
    return $rc
}

# check NAME NOTE CMD… — a zero-time step: did an output say what it must?
check() {
    local name=$1 note=$2
    shift 2
    if "$@" >>"$LOG" 2>&1; then record "$name" 0 0 "$note"; else record "$name" 0 1 "$note"; fi
}

inputs() {
    local missing=()
    for f in "$GPU_DIR/llama-src.tar.xz" "$GPU_DIR/MANIFEST.txt" "$MODEL"; do
        [[ -f "$f" ]] || missing+=("$f")
    done
    compgen -G "$GPU_DIR/wheels/llama_cpp_python-*.whl" >/dev/null || missing+=("$GPU_DIR/wheels/llama_cpp_python-*.whl")
    if ((${#missing[@]})); then
        echo "missing ${missing[*]}: run scripts/gpu_prepare.sh first and carry .gpu" >&2
        return 2
    fi
    PYTHON="${PYTHON:-$(command -v python3.12 || command -v python3)}"
    local want have
    want=$(awk '$1 == "python" { print $2 }' "$GPU_DIR/MANIFEST.txt")
    have=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [[ "$want" != "$have" ]]; then
        echo "$PYTHON is Python $have but the wheels in .gpu are for $want: set PYTHON, or prepare with PY_VERSION=$have" >&2
        return 2
    fi
    for tool in cmake timeout tar; do
        command -v "$tool" >/dev/null || { echo "$tool not found" >&2; return 2; }
    done
    if [[ "$MODE" == cuda ]]; then
        [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
        command -v nvcc >/dev/null || { echo "nvcc not found (PATH or /usr/local/cuda/bin)" >&2; return 2; }
        nvcc --version | tail -n 2
        command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    fi
    echo "python $PYTHON ($have), $JOBS jobs, mode $MODE, $(uname -m), $(nproc) CPUs"
    cat "$GPU_DIR/MANIFEST.txt"
}

extract() {
    local stamp="$WORK/llama-src.stamp" sum
    sum=$(cksum <"$GPU_DIR/llama-src.tar.xz")
    if [[ -f "$SRC/CMakeLists.txt" && "$(cat "$stamp" 2>/dev/null)" == "$sum" ]]; then
        echo "sources already extracted"
        return 0
    fi
    rm -rf "$SRC" && mkdir -p "$SRC"
    if ! tar -xJf "$GPU_DIR/llama-src.tar.xz" -C "$SRC"; then
        "$PYTHON" -m tarfile -e "$GPU_DIR/llama-src.tar.xz" "$SRC" || return 1  # no xz binary
    fi
    echo "$sum" >"$stamp"
}

build() {
    local gen=() simd=() cuda=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    if [[ "$(uname -m)" == x86_64 ]] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
        simd=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
        grep -qw bmi2 /proc/cpuinfo && simd+=(-DGGML_BMI2=ON)
    fi
    [[ "$MODE" == cuda ]] && cuda=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF)
    # The libraries stay where they are built: CMake's build-tree run path (absolute: bin/ and the
    # CUDA library folder) finds libggml*, cudart and cublas without LD_LIBRARY_PATH.
    # A configure that failed leaves a cache but no build file: configure again then.
    [[ -f "$BUILD/build.ninja" || -f "$BUILD/Makefile" ]] || cmake -S "$SRC" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF "${simd[@]}" "${cuda[@]}" || return 1
    cmake --build "$BUILD" --config Release --target llama -j "$JOBS" || return 1
    ls -la "$BUILD"/bin/lib*.so*
    command -v readelf >/dev/null && readelf -d "$BUILD/bin/libllama.so" | grep -E 'RUNPATH|RPATH|NEEDED'
}

install() {
    local pip
    pip=$(compgen -G "$GPU_DIR/wheels/pip-*.whl" | head -n 1)
    [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv --without-pip "$VENV" || return 1
    # pip runs from its own wheel: the machine's Python needs neither pip nor ensurepip.
    PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" "$pip/pip" install --no-index --find-links "$GPU_DIR/wheels" \
        --no-cache-dir --disable-pip-version-check --root-user-action=ignore --progress-bar off "$ROOT" \
        || return 1
    # llama_cpp loads libllama on import, which the build is still making: only find it here.
    "$VENV/bin/python" -c 'import importlib.util as u, cliff_tui, numpy, pynvml, textual
assert u.find_spec("llama_cpp"), "llama_cpp is not installed"
print("imports: ok")'
}

binding() {
    "$VENV/bin/python" - "$MODE" <<'EOF'
import sys
import llama_cpp as L
print("llama_cpp", L.__version__, L.__file__)
print("lib", L.llama_cpp._lib._name)
gpu = bool(L.llama_supports_gpu_offload())
print("supports_gpu_offload", gpu)
print(L.llama_print_system_info().decode())
sys.exit(0 if gpu == (sys.argv[1] == "cuda") else 1)
EOF
}

kv_device() {
    "$VENV/bin/python" - "$OUTDIR/run.json" "$KV_EXPECT" <<'EOF'
import json, sys
rec = json.load(open(sys.argv[1]))
rec = rec[0] if isinstance(rec, list) else rec
print("kv_device", rec.get("kv_device"), "kv_buffers", rec.get("kv_buffers"))
sys.exit(0 if rec.get("kv_device") == sys.argv[2] else 1)
EOF
}

# The 60 s recording: watch records, a decode loop runs beside it, NVML is dumped while it decodes.
watch_record() {
    local secs=$1 t0 pids=()
    t0=$(date +%s)
    timeout --preserve-status -s INT -k 5 "$secs" "$VENV/bin/cliff-tui" watch --headless --json -i 0.5 --force \
        --record "$OUTDIR/watch.jsonl" >/dev/null &
    pids+=($!)
    sleep 2
    (
        local rem
        while rem=$((secs - 3 - ($(date +%s) - t0))); ((rem >= 5)); do
            timeout --preserve-status -s INT -k 5 "$rem" "$VENV/bin/cliff-tui" run --headless -m "$MODEL" -ngl "$NGL" \
                --depth "$DECODE_DEPTH" --n-gen "$DECODE_GEN" -o json
            echo "decode run: exit $?" >&2
        done
    ) &
    pids+=($!)
    sleep 5
    "$VENV/bin/python" "$ROOT/scripts/gpu_nvml_dump.py" "$OUTDIR/nvml_shapes.json" --phase decode \
        --count 6 --every 4 >&2
    local rc=0 pid
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    # watch ends by SIGINT at its time limit (exit 0); the decode loop's runs log their own exit
    # codes (a run cut short by the limit says "cancelled", exit 2).
    return "$rc"
}

export -f now since left log inputs extract build install binding kv_device watch_record

main() {
    step inputs 20 "$WORK/inputs.out" inputs
    local rc=$?
    if ((rc != 0)); then
        echo "inputs missing: see $LOG" >&2
        exit 2
    fi
    export PYTHON="${PYTHON:-$(command -v python3.12 || command -v python3)}"
    [[ "$MODE" == cuda && -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"

    step extract 60 "$WORK/extract.out" extract
    local build_t0 build_pid
    build_t0=$(now)
    # The build runs beside the install and the idle readings (it needs the CPUs, they barely do).
    timeout -k 5 $(($(left) - 150 > 60 ? $(left) - 150 : 60)) bash -c build >"$WORK/build.log" 2>&1 &
    build_pid=$!
    log "== build (background, pid $build_pid): cmake, target llama, $JOBS jobs"

    step install 240 "$WORK/install.out" install
    export LLAMA_CPP_LIB_PATH="$BUILD/bin"
    step nvml_idle 30 "$WORK/nvml_idle.out" "$VENV/bin/python" "$ROOT/scripts/gpu_nvml_dump.py" \
        "$OUTDIR/nvml_shapes.json" --phase idle --count 2 --every 1
    step watch_once 30 "$OUTDIR/watch_once.json" "$VENV/bin/cliff-tui" watch --once --json

    wait "$build_pid"
    local build_rc=$?
    tail -n 100 "$WORK/build.log" >"$OUTDIR/build.log.tail"
    record build "$(since "$build_t0")" "$build_rc" "$( ((build_rc == 124)) && echo timed out)"
    ((build_rc == 0)) || log "build failed: see build.log.tail"

    step binding 30 "$WORK/binding.out" binding

    step run 90 "$OUTDIR/run.json" "$VENV/bin/cliff-tui" run --headless -m "$MODEL" -ngl "$NGL" \
        --depth "$RUN_DEPTH" --n-gen "$RUN_GEN" -o json
    check kv_device "KV buffer on $KV_EXPECT" kv_device

    EXPECT=2 step too_large 60 "$WORK/too_large.out" "$VENV/bin/cliff-tui" run --headless -m "$MODEL" -ngl "$NGL" \
        -c "$HUGE_CTX" --depth 256 --n-gen 8 -o json
    local tl_rc=$?
    check does_not_fit "exit $tl_rc, expected 2 with a does-not-fit line" \
        bash -c "[[ $tl_rc == 2 ]] && grep -m 2 'does not fit' '$WORK/too_large.err'"

    step triangulate 150 "$OUTDIR/triangulate.json" "$VENV/bin/cliff-tui" triangulate --headless \
        -m "$MODEL" -ngl "$NGL" --depths "$DEPTHS" -o json

    local secs=60
    (($(left) < secs + 15)) && secs=$(($(left) - 15))
    if ((secs >= 20)); then
        step watch_record $((secs + 15)) "$WORK/decode.out" watch_record "$secs"
    else
        record watch_record 0 skipped "no time left"
    fi

    log "== outputs"
    (cd "$OUTDIR" && ls -la) >>"$LOG"
    echo "total $(since "$START.0")s; outputs in $OUTDIR:"
    (cd "$OUTDIR" && ls -la)
    column -t -s $'\t' "$STEPS" 2>/dev/null || cat "$STEPS"
    if ((${#FAILED[@]})); then
        echo "failed: ${FAILED[*]}"
        exit 1
    fi
    echo "all steps passed"
}

main
