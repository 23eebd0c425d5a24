"""cliff-tui next to a real vLLM (the CPU build, SmolLM2, 10 KV blocks of 128 tokens): found by its
process with its flags; under eight concurrent long requests the gauge goes amber, then red while
vLLM preempts, on the screen at 120×40 and in ``attach --once --json``; a dead engine, one line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from cliff_process import cliff
from cliff_tui.jobs.attach import AttachJob
from cliff_tui.probes.endpoints import discovery
from cliff_tui.probes.sampler import Sampler
from cliff_tui.session import Session
from cliff_tui.ui.app import CliffApp
from paths import ROOT
from screen import screen_text, wait_for
from vllm_server import SERVED_NAME, started_vllm

pytestmark = [pytest.mark.model, pytest.mark.slow]

PROMPT = " ".join((ROOT / "README.md").read_text().split()[:90])  # about 120 tokens


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    with started_vllm(tmp_path_factory.mktemp("vllm")) as server:
        yield server


def test_discovery_finds_vllm_by_its_process_and_names_its_flags(vllm):
    found = discovery.find_servers(2.0)
    ours = [s for s in found.servers if s.pid == vllm.proc.pid]
    assert ours, found.servers
    server = ours[0]
    assert server.kind == "vllm" and server.url == vllm.url and "listening on" in server.how
    settings = {s.name: s for s in server.settings}
    assert settings["max_model_len"].value == "1024"
    assert settings["max_model_len"].source == "command line (--max-model-len)"
    assert settings["num_gpu_blocks_override"].value == "10"
    assert settings["cpu_kvcache_space"].source == "environment (VLLM_CPU_KVCACHE_SPACE)"


async def test_eight_long_requests_turn_the_gauge_amber_then_red_with_the_preemptions(vllm):
    job = AttachJob.from_urls({"vllm": vllm.url}, interval=0.25, timeout=2.0)
    session = Session(sampler=Sampler(), job=job, interval=0.25)
    app = CliffApp("attach", session)
    levels: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "KV tokens in use" in screen_text(app), 60)
        load = Load(vllm.url, requests=8, max_tokens=500)
        load.start()
        try:

            def red_with_preemptions() -> bool:
                gauge = session.store.servers.pool_gauge()
                if gauge is not None and (not levels or levels[-1] != gauge.level):
                    levels.append(gauge.level)
                return "vLLM preempts," in screen_text(app)

            await wait_for(pilot, red_with_preemptions, 240)
            flat = " ".join(screen_text(app).split())
            record = json.loads(cliff("attach", "--vllm", vllm.url, "--once", "--json"))
        finally:
            load.join()
    assert "of 1,280 KV tokens in use" in flat and "in the last minute" in flat, flat
    assert "KV: 10 blocks × 128 tokens" in flat and "preempted since start" in flat, flat
    assert "amber" in levels and levels.index("amber") < levels.index("red"), levels
    assert load.codes and set(load.codes) == {200}, load.codes  # preempted, never failed
    kv = record["vllm"]["kv_blocks"]
    assert kv["capacity_tokens"] == 1280 and kv["preemptions_total"] > 0 and kv["max_model_len"] == 1024
    assert record["pool"]["max_context"] == 1280 and record["pool"]["level"] in ("amber", "red", "ok")
    assert record["attached"]["pid"] == vllm.proc.pid


def test_a_vllm_whose_engine_died_reads_as_one_line(tmp_path):
    """vLLM's API server exits once its engine core dies: attach says so in one line, exit 3."""
    with started_vllm(tmp_path, blocks=10) as server:
        engine = [c for c in _children(server.proc.pid) if c.name().startswith("VLLM::Engine")]
        assert engine, "no engine process to stop"
        for c in engine:
            c.kill()
        server.proc.wait(60)
        done = subprocess.run(
            [sys.executable, "-m", "cliff_tui", "attach", "--vllm", server.url, "--once", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    record = json.loads(done.stdout)
    assert done.returncode == 3 and not record["ok"] and record["vllm"]["status"] == "unreachable"
    assert "nothing is listening" in record["reason"] and "\n" not in record["reason"]
    assert "Traceback" not in done.stderr


# --- helpers --------------------------------------------------------------------------------------


def _children(pid: int):
    import psutil

    return psutil.Process(pid).children(recursive=True)


class Load:
    """``requests`` completions at once, each ``max_tokens`` long whatever the model would say."""

    def __init__(self, url: str, requests: int, max_tokens: int) -> None:
        self.url, self.max_tokens = url, max_tokens
        self.codes: list[int] = []
        self.threads = [threading.Thread(target=self._one, daemon=True) for _ in range(requests)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join(600)

    def _one(self) -> None:
        body = {"model": SERVED_NAME, "prompt": PROMPT, "max_tokens": self.max_tokens, "ignore_eos": True}
        request = urllib.request.Request(
            self.url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=600) as reply:
                self.codes.append(reply.status)
        except urllib.error.HTTPError as exc:
            self.codes.append(exc.code)
