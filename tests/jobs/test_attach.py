"""``cliff-tui attach``: the polling job, the command line, and a real llama-server.

The job tests run against a loopback fake serving recorded bodies (tests/data/endpoints); the last
tests run against a real ``llama-server`` when one is found ($LLAMA_SERVER, PATH, or the binary
scripts/build_llama_tools.sh leaves in .tools/llama-server/bin).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cliff_tui.events import DecodeWindow, Notice, ServerReading
from cliff_tui.jobs.attach import AttachJob, Poller
from cliff_tui.probes.endpoints.discovery import Found
from cliff_tui.probes.endpoints.llama_server import SlotsRead
from cliff_tui.records import UNKNOWN_MODEL
from cliff_tui.store import Store
from fakes.http_server import Route, closed_port
from fakes.servers import BUSY, DECODING, llama, ollama
from llama_server import post_json

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("http_proxy", "HTTP_PROXY")}
    return subprocess.run(
        [sys.executable, "-m", "cliff_tui", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


# --- the polling job --------------------------------------------------------------------------------


class FlakyEndpoint:
    source, url = "llama-server", "http://127.0.0.1:1"

    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses

    def read(self, timeout: float) -> ServerReading:
        return ServerReading(time.time(), self.source, self.url, self.statuses.pop(0), "down")

    def probe(self, timeout: float) -> tuple[ServerReading, SlotsRead]:
        return self.read(timeout), SlotsRead()


def test_poller_backs_off_exponentially_and_recovers():
    poller = Poller(FlakyEndpoint(["unreachable"] * 7 + ["ok"]), interval=0.5)  # type: ignore[arg-type]
    delays = []
    for _ in range(8):
        reading = poller.poll(1)
        delays.append(poller.delay)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 0.5]
    assert reading.status == "ok" and poller.failures == 0


def test_failed_readings_say_when_the_next_try_is():
    poller = Poller(FlakyEndpoint(["unreachable"]), interval=0.5)  # type: ignore[arg-type]
    assert poller.poll(1).message == "down; retrying in 1 s"


def run_job(job: AttachJob, until, limit: float = 10.0) -> tuple[list, float]:
    """Run the job in a thread until ``until(events)``; returns the events and how long cancel took."""
    events: list = []
    cancel = threading.Event()
    thread = threading.Thread(target=job.run, args=(events.append, cancel, lambda pid: None), daemon=True)
    thread.start()
    deadline = time.monotonic() + limit
    while not until(events) and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    cancel.set()
    thread.join(5)
    assert not thread.is_alive()
    return events, time.monotonic() - started


def readings(events: list) -> list[ServerReading]:
    return [e for e in events if isinstance(e, ServerReading)]


def test_job_feeds_the_store_tok_s_and_quits(server):
    s = server(llama, BUSY)
    job = AttachJob.from_urls({"llama-server": s.url, "ollama": None}, interval=0.05, timeout=1)
    events, _ = run_job(job, lambda ev: len(readings(ev)) >= 3)  # it ends on cancel
    store = Store()
    for event in events:
        store.feed(event)
    assert store.servers.shown.status == "ok"
    assert store.servers.shown.rates.decode_tok_s == pytest.approx(48.0)
    assert store.live_tok_s() == pytest.approx(48.0)
    assert store.generating
    assert job.title == f"llama-server {s.url}"


def _measured_smollm2():
    from cliff_tui.cli.commands import _measured_capacity

    return _measured_capacity(str(ROOT / "tests" / "data" / "smollm2_triangulation.jsonl"))


def _props(model_path: str) -> Route:
    return Route.text(json.dumps({"total_slots": 1, "model_path": model_path}), content_type="application/json")


def test_job_from_a_triangulation_holds_the_slots_against_its_largest_context(server):
    measured = _measured_smollm2()
    s = server(llama, BUSY)
    job = AttachJob.from_urls({"llama-server": s.url, "ollama": None}, interval=0.05, timeout=1, measured=measured)
    events, _ = run_job(job, lambda ev: len(readings(ev)) >= 2)
    store = Store()
    for event in events:
        store.feed(event)
    gauge = store.gauge()
    assert gauge is not None and gauge.source == "measured"
    assert gauge.max_context == measured.max_context == 852_992  # the recorded projection's
    assert gauge.tokens == max(slot.tokens_used for slot in store.servers.shown.slots if slot.tokens_used is not None)


def test_job_warns_once_when_the_server_serves_another_file_than_the_one_measured(server):
    measured = _measured_smollm2()
    s = server(llama, BUSY, props=Route.file("llama_props.json"))  # its model_path ends -Q4_1.gguf
    job = AttachJob.from_urls({"llama-server": s.url, "ollama": None}, interval=0.05, timeout=1, measured=measured)
    events, _ = run_job(job, lambda ev: len(readings(ev)) >= 4)
    warnings = [e for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert [w.text for w in warnings] == [
        "llama-server serves SmolLM2-135M-Instruct-Q4_1.gguf, the triangulation measured "
        "SmolLM2-135M-Instruct.Q4_1.gguf: unless they are the same model and quantisation, the gauge holds its "
        "slots against another model's largest context (triangulate the served file to hold them against its own)"
    ]
    assert s.hits.count("/props") == 1


def test_a_hostile_served_name_is_shown_inert(server):
    s = server(llama, BUSY, props=_props("/m/\x1b]0;owned\x07x.gguf"))
    job = AttachJob.from_urls(
        {"llama-server": s.url, "ollama": None}, interval=0.05, timeout=1, measured=_measured_smollm2()
    )
    events, _ = run_job(job, lambda ev: any(isinstance(e, Notice) and e.level == "warning" for e in ev))
    warning = next(e for e in events if isinstance(e, Notice) and e.level == "warning")
    assert warning.text.startswith("llama-server serves ␛]0;owned␇x.gguf, ") and "\x1b" not in warning.text


def test_job_checks_the_served_file_again_when_the_server_is_back(server):
    loading = Route.file("llama_loading.json", status=503)  # a restart: maybe with another model
    s = server(llama, [BUSY[0], loading, *BUSY], props=Route.file("llama_props.json"))
    job = AttachJob.from_urls(
        {"llama-server": s.url, "ollama": None}, interval=0.05, timeout=1, measured=_measured_smollm2()
    )
    events, _ = run_job(job, lambda ev: sum(r.status == "ok" for r in readings(ev)) >= 3)
    assert [r.status for r in readings(events)][:3] == ["ok", "error", "ok"]
    assert sum(isinstance(e, Notice) and e.level == "warning" for e in events) == 2


def test_job_says_nothing_when_the_server_serves_the_file_measured(server):
    s = server(llama, BUSY, props=_props("C:\\models\\smollm2-135m-instruct.q4_1.GGUF"))  # case-blind
    job = AttachJob.from_urls(
        {"llama-server": s.url, "ollama": None}, interval=0.05, timeout=1, measured=_measured_smollm2()
    )
    events, _ = run_job(job, lambda ev: len(readings(ev)) >= 3)
    assert not [e for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert s.hits.count("/props") == 1


@pytest.mark.parametrize("measured", [None, dataclasses.replace(_measured_smollm2(), model=UNKNOWN_MODEL)])
def test_job_asks_no_props_without_a_measured_file(server, measured):
    s = server(llama, BUSY, props=Route.file("llama_props.json"))
    job = AttachJob.from_urls({"llama-server": s.url, "ollama": None}, interval=0.05, timeout=1, measured=measured)
    events, _ = run_job(job, lambda ev: len(readings(ev)) >= 3)
    assert "/props" not in s.hits
    assert not [e for e in events if isinstance(e, Notice) and e.level == "warning"]


def test_job_shows_live_tok_s_while_a_request_runs(server):
    """The /metrics counters stand still mid-request (busy_1 twice); /slots' n_decoded moves."""
    s = server(llama, Route.file("llama_metrics_busy_1.txt"), DECODING)
    job = AttachJob.from_urls({"llama-server": s.url, "ollama": None}, interval=0.1, timeout=1)
    events, _ = run_job(job, lambda ev: any(isinstance(e, DecodeWindow) for e in ev))
    window = next(e for e in events if isinstance(e, DecodeWindow))
    assert window.n_tokens == 24 and window.depth == 1088 and window.tok_s > 0
    store = Store()
    for event in events:
        store.feed(event)
    assert store.live_tok_s() == pytest.approx(window.tok_s)


def test_job_retries_an_unreachable_server_and_quits_during_backoff():
    url = f"http://127.0.0.1:{closed_port()}"
    job = AttachJob.from_urls({"llama-server": url, "ollama": None}, interval=0.05, timeout=1)
    events, quit_s = run_job(job, lambda ev: len(readings(ev)) >= 2)
    first, second = readings(events)[:2]
    assert first.status == second.status == "unreachable"
    assert "retrying in 1 s" in first.message and "retrying in 2 s" in second.message
    assert quit_s < 1.5  # the 2 s backoff wait ends when cancel is set, not when it runs out


def test_job_polls_both_servers(server):
    llama_srv = server(llama, Route.file("llama_metrics_idle.txt"))
    ollama_srv = server(ollama, Route.file("ollama_ps.json"))
    job = AttachJob.from_urls({"llama-server": llama_srv.url, "ollama": ollama_srv.url}, interval=0.05, timeout=1)
    events, _ = run_job(job, lambda ev: {r.source for r in readings(ev)} == {"llama-server", "ollama"})
    assert {r.source for r in readings(events)} == {"llama-server", "ollama"}


def test_job_without_urls_looks_on_the_default_ports(server, monkeypatch):
    s = server(llama, Route.file("llama_metrics_idle.txt"))
    nobody = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr("cliff_tui.jobs.attach.DEFAULT_URLS", {"llama-server": s.url, "ollama": nobody})
    monkeypatch.setattr("cliff_tui.jobs.attach.find_servers", lambda *a, **k: Found([]))  # no server process here
    job = AttachJob.from_urls({"llama-server": None, "ollama": None}, interval=0.05, timeout=1)
    assert job.discover_defaults and job.title.startswith("looking for")
    events, _ = run_job(job, lambda ev: len(readings(ev)) >= 2)
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any(f"found llama-server at {s.url}" in n and "no ollama" in n for n in notices)
    assert all(r.source == "llama-server" and r.status == "ok" for r in readings(events))


def test_job_finding_nothing_shows_one_status_and_keeps_looking(monkeypatch):
    nobody = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr("cliff_tui.jobs.attach.DEFAULT_URLS", {"llama-server": nobody, "ollama": nobody})
    monkeypatch.setattr("cliff_tui.jobs.attach.find_servers", lambda *a, **k: Found([]))  # no server process here
    events, _ = run_job(
        AttachJob.from_urls({"llama-server": None, "ollama": None}, 0.05, 1), lambda ev: len(readings(ev)) >= 1
    )
    (reading,) = readings(events)[:1]
    assert reading.status == "unreachable" and "looking again in" in reading.message
    assert any(isinstance(e, Notice) and e.level == "warning" for e in events)


# --- the command line -------------------------------------------------------------------------------


def test_cli_unreachable_exits_3_with_a_reason_and_no_traceback():
    port = closed_port()
    proc = run_cli("attach", "--llama-server", f"http://127.0.0.1:{port}", "--once", "--json")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    record = json.loads(proc.stdout)
    assert record["ok"] is False and "connection refused" in record["reason"]
    assert record["llama_server"]["status"] == "unreachable"


def test_cli_port_9_exits_3():
    proc = run_cli("attach", "--llama-server", "http://127.0.0.1:9", "--once", "--json")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["llama_server"]["reason"]


def test_cli_reads_a_fake_llama_server(server):
    s = server(llama, BUSY)
    proc = run_cli("attach", "--llama-server", s.url, "--once", "--json", "-i", "0.1")
    assert proc.returncode == 0, proc.stderr
    lr = json.loads(proc.stdout)["llama_server"]
    assert lr["decode_tok_s"] == pytest.approx(48.0) and lr["slots"][0]["n_ctx"] == 4096


def test_cli_bad_url_is_bad_input():
    proc = run_cli("attach", "--llama-server", "ftp://nowhere", "--once")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "--llama-server" in proc.stderr


ALLOCATE = "import sys, time; block = bytearray(96 * 1024 * 1024); print('ready', flush=True); time.sleep(60)"


def test_cli_attaches_to_a_process_by_pid():
    child = subprocess.Popen([sys.executable, "-c", ALLOCATE], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        proc = run_cli("attach", "--pid", str(child.pid), "--once", "--json")
        assert proc.returncode in (0, 3) and "Traceback" not in proc.stderr
        record = json.loads(proc.stdout)
        process = record["process"]
        assert process["pid"] == child.pid and process["name"].startswith("python")
        assert process["rss_bytes"] >= 96 * 1024 * 1024  # bytearray() zero-fills: every page touched
        assert "discovery" in record
        # With only --pid, finding no server on the default ports is not a failure.
        if not any(record.get(k, {}).get("status") == "ok" for k in ("llama_server", "ollama")):
            assert proc.returncode == 0
    finally:
        child.kill()
        child.wait()


@pytest.mark.model
def test_real_llama_server_names_the_file_it_serves(real_llama_server):
    from cliff_tui.engine.default_model import default_model_path
    from cliff_tui.probes.endpoints.llama_server import read_model_file

    assert read_model_file(real_llama_server, timeout=5) == default_model_path().name


@pytest.mark.model
def test_real_llama_server_after_one_chat_request(real_llama_server):
    url = real_llama_server
    reply = post_json(
        url + "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
            "max_tokens": 32,
            "temperature": 0,
        },
    )
    assert reply["usage"]["completion_tokens"] > 0
    proc = run_cli("attach", "--llama-server", url, "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    lr = json.loads(proc.stdout)["llama_server"]
    print(
        f"\nreal llama-server: decode {lr['decode_tok_s']:.1f} tok/s ({lr['decode_basis']}), "
        f"prompt {lr['prompt_tok_s']:.1f} tok/s, slots {lr['slots']}"
    )
    assert lr["status"] == "ok"
    # the server's own figure for the request: /metrics' average is the same decode, give or take
    # other requests this server served before
    assert lr["decode_tok_s"] == pytest.approx(reply["timings"]["predicted_per_second"], rel=0.5)
    assert lr["slots"][0]["n_ctx"] == 2048
    assert lr["slots"][0]["tokens_used"] >= reply["usage"]["completion_tokens"]


@pytest.mark.model
def test_real_llama_server_tok_s_moves_while_a_request_runs(real_llama_server):
    url = real_llama_server
    job = AttachJob.from_urls({"llama-server": url, "ollama": None}, interval=0.25, timeout=2)
    request = threading.Thread(
        target=post_json,
        args=(
            url + "/completion",
            {"prompt": "Once upon a time", "n_predict": 200, "ignore_eos": True, "temperature": 0},
        ),
        daemon=True,
    )
    store = Store()
    events: list = []
    cancel = threading.Event()
    poller = threading.Thread(target=job.run, args=(events.append, cancel, lambda pid: None), daemon=True)
    poller.start()
    request.start()
    request.join(120)
    time.sleep(0.5)
    cancel.set()
    poller.join(5)
    for event in events:
        store.feed(event)
    rates = [v for _, v in store.history.get("tok_s").points() if v]
    live = [e.tok_s for e in events if isinstance(e, DecodeWindow)]
    busy = [r for r in readings(events) if (r.requests_processing or 0) > 0]
    print(
        f"\nreal llama-server live: {len(readings(events))} readings, {len(busy)} while busy, "
        f"live tok/s {[round(v, 1) for v in live]}, series {[round(v, 1) for v in rates]}"
    )
    assert busy, "no reading caught the request running"
    assert len(live) >= 3, "the tok/s series should move while the request runs, not only after it"
    assert rates and all(v > 0 for v in rates)
