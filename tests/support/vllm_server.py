"""A real vLLM server (the CPU build) for the tests: its Python found ($VLLM_PYTHON, or the venv that
scripts/build_vllm.sh leaves in .tools/vllm/venv), started with SmolLM2 (the HF folder that script
converts, or $VLLM_MODEL) on a free loopback port, stopped with its engine-core children by PID at
the end (``started_vllm``).

The KV cache is kept small on purpose (``blocks`` blocks of 128 tokens on the CPU backend: 1,280
tokens for the default 10), so that a few concurrent long requests fill it and vLLM preempts: the
state a monitor has to show. Startup takes about 30 s on 2 idle cores with ``--enforce-eager`` (always given here:
torch.compile would add a minute).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from cliff_tui.probes.endpoints import http as ep
from fakes.http_server import free_port
from needs import unavailable
from paths import ROOT

VLLM_HOME = ROOT / ".tools" / "vllm"
SERVED_NAME = "smollm2"  # --served-model-name: what /v1/models lists and requests name
BUILD_HINT = "run scripts/build_vllm.sh (a CPU vLLM in .tools/vllm, about 3 GB), or set VLLM_PYTHON"
STARTUP_S = 300.0  # 30 s idle; much longer next to a build on 2 cores
STOP_S = 30.0


class StartedVllm(NamedTuple):
    url: str
    port: int
    proc: subprocess.Popen
    log: Path


def find_vllm() -> str | None:
    """The Python of an environment with vLLM: $VLLM_PYTHON, else .tools/vllm/venv/bin/python."""
    candidates = [os.environ.get("VLLM_PYTHON"), str(VLLM_HOME / "venv" / "bin" / "python")]
    return next((c for c in candidates if c and os.access(c, os.X_OK) and Path(c).is_file()), None)


def find_vllm_model() -> Path | None:
    """The HF model folder vLLM serves: $VLLM_MODEL, else .tools/vllm/smollm2-hf."""
    folder = Path(os.environ.get("VLLM_MODEL") or VLLM_HOME / "smollm2-hf")
    return folder if (folder / "config.json").is_file() else None


def vllm_paths() -> tuple[str, Path]:
    """vLLM's Python and the model folder, or the test is unavailable."""
    python = find_vllm()
    if python is None:
        unavailable(f"vLLM is not installed: {BUILD_HINT}")
    model = find_vllm_model()
    if model is None:
        unavailable(f"no SmolLM2 folder for vLLM (.tools/vllm/smollm2-hf or $VLLM_MODEL): {BUILD_HINT}")
    return python, model


def log_tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, limit: float = STARTUP_S) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode} before /health answered; {log}:\n{log_tail(log)}")
        if ep.fetch(url + "/health", 2).status == 200:
            return
        time.sleep(0.5)
    pytest.fail(f"vLLM did not answer /health 200 within {limit:.0f} s; {log}:\n{log_tail(log)}")


@contextlib.contextmanager
def started_vllm(
    log_dir: Path,
    *flags: str,
    max_model_len: int = 1024,
    blocks: int | None = 10,
    max_seqs: int = 8,
    env: dict[str, str] | None = None,
) -> Iterator[StartedVllm]:
    """vLLM's OpenAI API server on a free loopback port serving SmolLM2 as ``smollm2``, healthy.

    ``blocks``: --num-gpu-blocks-override (None: as many as VLLM_CPU_KVCACHE_SPACE, 1 GiB here, holds);
    ``flags`` come last; ``env`` is added to its environment. Stopped, children too, at the end."""
    python, model = vllm_paths()
    port = free_port()
    log = log_dir / f"vllm-{port}.log"
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port), "--enforce-eager"]
    argv += ["--max-model-len", str(max_model_len), "--max-num-seqs", str(max_seqs)]
    if blocks is not None:
        argv += ["--num-gpu-blocks-override", str(blocks)]
    argv += list(flags)
    # vLLM's torch.distributed file store (vllm_dist_*, left behind) and ZMQ sockets go to the temp
    # folder: a short one of its own (socket paths are limited to 107 bytes), removed at the end
    scratch = tempfile.mkdtemp(prefix="vllm-")
    environment = {
        **os.environ,
        "TMPDIR": scratch,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: 364 blocks of 128 tokens for SmolLM2 before any override
        "VLLM_CACHE_ROOT": str(VLLM_HOME / "cache"),
        **(env or {}),
    }
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment
            )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc, log)
            yield StartedVllm(url, port, proc, log)
        finally:
            stop(proc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the API server (it stops its EngineCore child), then make sure no child is left."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(alive, timeout=5)
