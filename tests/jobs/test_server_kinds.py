"""The other llama.cpp-family servers, found by their processes: llama-cpp-python's own server (real),
and Ollama and LM Studio, which cannot run here, as processes with their real command-line shapes
(a thin stand-in that runs the real llama-server, or serves LM Studio's recorded reply)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from cliff_tui.probes.endpoints import kinds
from cliff_tui.probes.endpoints.discovery import find_servers
from fakes.http_server import free_port
from llama_server import llama_server_paths, stop, wait_healthy
from needs import unavailable
from paths import DATA

LLAMA_CPP_PYTHON, LM_STUDIO = kinds.LLAMA_CPP_PYTHON.name, kinds.LM_STUDIO.name
OLLAMA_RUNNER, OLLAMA_SERVE = kinds.OLLAMA_RUNNER.name, kinds.OLLAMA_SERVE.name


def found_by_pid(pids: set[int], want: int, limit: float = 60) -> list:
    """Look until ``want`` of those processes are found answering (servers take a while to load)."""
    deadline = time.monotonic() + limit
    mine: list = []
    while time.monotonic() < deadline:
        mine = [s for s in find_servers(1.0, ports=()).servers if s.pid in pids]
        if sum(1 for s in mine if s.status in ("ok", "no-metrics", "listed")) >= want:
            return mine
        time.sleep(0.5)
    return mine


def children(pid: int) -> set[int]:
    import psutil

    try:
        return {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    except psutil.NoSuchProcess:
        return {pid}


@pytest.mark.model
@pytest.mark.slow
def test_llama_cpp_python_s_server_is_found_by_its_process(tmp_path):
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError as exc:
        unavailable(f"llama-cpp-python's server dependencies are missing ({exc}): pip install -e '.[test]'")
    _, model = llama_server_paths()
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--n_ctx", "512", "--n_threads", "1"]
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        [server] = found_by_pid({proc.pid}, 1)
        assert server.kind == LLAMA_CPP_PYTHON and server.url == f"http://127.0.0.1:{port}"
        assert server.status == "listed" and "SmolLM2" in server.message
        flags = {s.name: (s.value, s.source) for s in server.settings}
        assert flags["ctx_size"] == ("512", "command line (--n_ctx)")
        assert flags["n_gpu_layers"] == ("0", "default (not given)")
    finally:
        stop(proc)


def stand_in(tmp_path, name: str, script: str) -> str:
    """A file ``name`` in ``tmp_path`` holding a shell script: ``exec -a ollama sh NAME …`` then runs
    it with the command line ``ollama NAME …``, the real program's shape."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    return str(path)


@pytest.mark.model
@pytest.mark.slow
def test_ollama_s_runners_are_found_by_their_command_lines(tmp_path):
    binary, model = llama_server_paths()
    new_port, old_port = free_port(), free_port()
    # newer Ollama: `ollama serve` starts llama-server as its runner
    stand_in(tmp_path, "serve", f'"$LLAMA" -m "$MODEL" --host 127.0.0.1 --port {new_port} -c 512 -t 1 & wait\n')
    # older Ollama: `ollama runner --model BLOB --port N` (the stand-in serves through llama-server)
    stand_in(tmp_path, "runner", '"$LLAMA" -m "$2" --host 127.0.0.1 --port "$4" -c 512 -t 1 & wait\n')
    env = {**os.environ, "LLAMA": binary, "MODEL": str(model)}
    sh = shutil.which("sh")
    started = [
        subprocess.Popen(["bash", "-c", f"exec -a ollama {sh} serve"], cwd=tmp_path, env=env),
        subprocess.Popen(
            ["bash", "-c", f'exec -a ollama {sh} runner --model "$MODEL" --port {old_port} --ctx-size 512'],
            cwd=tmp_path,
            env=env,
        ),
    ]
    try:
        for port, proc in ((new_port, started[0]), (old_port, started[1])):
            wait_healthy(f"http://127.0.0.1:{port}", proc)
        pids = children(started[0].pid) | children(started[1].pid)
        found = found_by_pid(pids, 2)
        by_url = {s.url: s for s in found}
        new, old = by_url[f"http://127.0.0.1:{new_port}"], by_url[f"http://127.0.0.1:{old_port}"]
        assert new.kind == OLLAMA_RUNNER and new.pid != started[0].pid and "listening on" in new.how
        assert old.kind == OLLAMA_RUNNER and new.status == old.status == "no-metrics"
        serve = [s for s in found if s.pid == started[0].pid]
        assert serve and serve[0].kind == OLLAMA_SERVE
    finally:
        for proc in started:
            for pid in sorted(children(proc.pid), reverse=True):
                if pid != proc.pid:
                    try:
                        os.kill(pid, 15)
                    except ProcessLookupError:
                        pass
            stop(proc)


def test_lm_studio_is_found_by_its_process_and_its_rest_reply(tmp_path):
    port = free_port()
    server = tmp_path / "lms_stand_in.py"
    server.write_text(
        textwrap.dedent(
            f"""
            import http.server
            BODY = open({str(DATA / "endpoints" / "lmstudio_models.json")!r}, "rb").read()
            class H(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    ok = self.path == "/api/v0/models"
                    self.send_response(200 if ok else 404)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(BODY if ok else b"{{}}")
                def log_message(self, *a):
                    pass
            http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
            """
        )
    )
    proc = subprocess.Popen(["bash", "-c", f"exec -a /opt/lm-studio/lm-studio {sys.executable} {server}"])
    try:
        [found] = found_by_pid({proc.pid}, 1, limit=20)
        assert found.kind == LM_STUDIO and found.url == f"http://127.0.0.1:{port}"
        assert found.status == "listed" and found.message == "/api/v0/models: qwen2.5-7b-instruct (context 8,192)"
    finally:
        stop(proc)
