"""A real llama-server for the tests: found ($LLAMA_SERVER, PATH, or the binary
scripts/build_llama_tools.sh leaves in .tools/llama-server/bin), started on a free loopback port
with SmolLM2, stopped by PID at the end (``real_llama_server``, a module-scoped fixture)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cliff_tui.errors import BadInput
from cliff_tui.probes.endpoints import http as ep
from fakes.http_server import free_port
from needs import unavailable
from paths import ROOT


def find_llama_server() -> str | None:
    candidates = [
        os.environ.get("LLAMA_SERVER"),
        shutil.which("llama-server"),
        str(ROOT / ".tools" / "llama-server" / "bin" / "llama-server"),
    ]
    return next((c for c in candidates if c and os.access(c, os.X_OK) and Path(c).is_file()), None)


def post_json(url: str, body: dict, timeout: float = 120) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_healthy(url: str, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama-server exited with {proc.returncode}")
        reply = ep.fetch(url + "/health", 1)
        if reply.status == 200:
            return
        time.sleep(0.25)
    pytest.fail("llama-server did not become healthy in time")


@dataclass
class StartedServer:
    url: str
    port: int
    proc: subprocess.Popen
    log: Path


def llama_server_paths() -> tuple[str, Path]:
    """The binary and SmolLM2, or the test is unavailable."""
    binary = find_llama_server()
    if binary is None:
        unavailable(
            "no llama-server binary: set LLAMA_SERVER, put one on PATH, or run "
            "scripts/build_llama_tools.sh llama-server"
        )
    from cliff_tui.engine.default_model import default_model_path

    try:
        return binary, default_model_path()
    except BadInput as exc:
        unavailable(str(exc))


@contextlib.contextmanager
def started_llama_server(
    log_dir: Path, *flags: str, env: dict[str, str] | None = None, ctx: str = "1024", terminal: bool = False
) -> Iterator[StartedServer]:
    """A llama-server on a free loopback port with ``flags`` (after -m, --host, --port, -c, -t 1,
    -ngl 0; ``env`` added to its environment), healthy; stopped by its PID at the end. Its output
    goes to a log file, or with ``terminal`` to a pseudo-terminal (as when run by hand), copied to
    the log file by a thread."""
    binary, model = llama_server_paths()
    port = free_port()
    log = log_dir / f"llama-server-{port}.log"
    argv = [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", ctx, "-t", "1"]
    argv += ["-ngl", "0", *flags]
    with contextlib.ExitStack() as stack:
        if terminal:
            out = stack.enter_context(_terminal_copied_to(log))
        else:
            out = stack.enter_context(open(log, "wb")).fileno()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc)
            yield StartedServer(url, port, proc, log)
        finally:
            stop(proc)


@contextlib.contextmanager
def _terminal_copied_to(log: Path) -> Iterator[int]:
    """A pseudo-terminal's slave end; what is written to it lands in ``log``."""
    import pty
    import threading

    master, slave = pty.openpty()

    def copy() -> None:
        with open(log, "wb") as out:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    return
                if not data:
                    return
                out.write(data)
                out.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    try:
        yield slave
    finally:
        os.close(slave)
        thread.join(5)
        os.close(master)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def real_llama_server(tmp_path_factory):
    binary, model = llama_server_paths()
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                "-m",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--metrics",
                "-c",
                "2048",
                "-np",
                "1",
                "-t",
                "2",
                "-ngl",
                "0",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        stop(proc)
