"""The cliff a chat meets first: a real llama-server's unified context pool running out under four
conversations (a real document, summarised turn by turn, in lockstep). The gauge, attached without
a URL and without ``--from``, turns amber before the first request fails and red at it."""

from __future__ import annotations

import threading
import time

import pytest

from chat import chat_turn, document_turns
from cliff_tui.analysis.gauge import pool_gauge
from cliff_tui.jobs.attach import AttachJob
from cliff_tui.jobs.attach_once import attach_once
from cliff_tui.probes.endpoints import discovery
from cliff_tui.probes.sampler import Sampler
from cliff_tui.store import Store
from cliff_tui.ui.render import gauge_line
from llama_server import started_llama_server

POOL = 2048


def test_a_unified_pool_counts_every_slot_and_a_split_one_the_fullest():
    unified = pool_gauge([900, 800, None, 200], True, 2048, 2048)
    assert (unified.tokens, unified.max_context, unified.level) == (1900, 2048, "amber")
    assert "1 idle slot not counted" in unified.note
    split = pool_gauge([200, 250, 240, 100], False, 1024, 256)
    assert (split.tokens, split.max_context, split.level) == (250, 256, "amber")
    assert pool_gauge([10, 10], True, 2048, None, failing=True).level == "red"
    growing = pool_gauge([1000], True, 2048, None, growth_per_s=8.0)
    assert growing.seconds_to_full == pytest.approx(131.0)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("terminal", [False, True], ids=["log-file", "terminal"])
def test_the_pool_runs_out_amber_before_the_first_failure_red_at_it(tmp_path, monkeypatch, terminal):
    """Red at the first failure whether the server logs to a file (which names the failures) or to
    a terminal (the dropped requests show in /slots); an ``--once`` started after the failure counts
    none of them (failures are counted from when attach starts)."""
    flags = ("-np", "4", "--kv-unified", "--metrics")
    with started_llama_server(tmp_path, *flags, ctx=str(POOL), terminal=terminal) as server:
        events, lock, cancel, watcher = attach_in_background(monkeypatch, server.proc.pid)
        try:
            seen = run_until_failure(server.url, events, lock)
        finally:
            cancel.set()
            watcher.join(10)
    levels, failed_turn, screen, record = seen
    assert failed_turn is not None, "the pool never ran out"
    assert "amber" in levels["screen"][:failed_turn] and "amber" in levels["json"][:failed_turn]
    assert "red" not in levels["screen"][:failed_turn] and "red" not in levels["json"][:failed_turn]
    assert levels["screen"][failed_turn] == "red" and "requests fail" in screen
    assert not record["pool"]["failing"] and record["pool"]["context_failures_in_log"] == 0
    assert record["pool"]["unified"] and record["pool"]["max_context"] == POOL
    assert record["attached"]["settings"]["kv_unified"]["value"] == "true"
    assert ("/slots" in record["pool"]["log"]) == terminal


def run_until_failure(url: str, events: list, lock: threading.Lock):
    chats = [[{"role": "system", "content": "Summarise each part in one line."}] for _ in range(4)]
    turns = document_turns()
    levels: dict[str, list[str]] = {"screen": [], "json": []}
    for turn in range(60):
        text = [turns[(turn * 4 + i) % len(turns)] for i in range(4)]
        answers = chat_turn(url, chats, text)
        failed = any(code != 200 for code, _ in answers)
        store = store_after_a_poll(events, lock)
        gauge = store.gauge()
        levels["screen"].append(gauge.level if gauge else "none")
        record, _ = attach_once(
            AttachJob.from_urls({"llama-server": None, "ollama": None}, 0.1, 2.0), Sampler(), sleep=lambda s: None
        )
        levels["json"].append((record.get("pool") or {}).get("level", "none"))
        if failed:
            assert all("Context size has been exceeded" in body for code, body in answers if code != 200)
            return levels, turn, "".join(text for text, _ in gauge_line(store)), record
    return levels, None, "", {}


def store_after_a_poll(events: list, lock: threading.Lock) -> Store:
    """The screen's state once attach has polled after the turn ended."""
    with lock:
        start = len(events)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with lock:
            fresh = [e for e in events[start:] if type(e).__name__ == "ServerReading"]
        if len(fresh) >= 2:
            break
        time.sleep(0.05)
    store = Store()
    with lock:
        for event in list(events):
            store.feed(event)
    return store


def attach_in_background(monkeypatch, pid: int):
    """A live attach without a URL, following the test's server (others may run on this machine)."""
    real_find = discovery.find_servers

    def only_ours(*args, **kwargs):
        return discovery.Found([s for s in real_find(*args, **kwargs).servers if s.pid == pid])

    monkeypatch.setattr("cliff_tui.jobs.attach.find_servers", only_ours)
    monkeypatch.setattr("cliff_tui.jobs.attach_once.find_servers", only_ours)
    events, lock, cancel = [], threading.Lock(), threading.Event()

    def publish(event) -> None:
        with lock:
            events.append(event)

    job = AttachJob.from_urls({"llama-server": None, "ollama": None}, interval=0.2, timeout=2.0)
    watcher = threading.Thread(target=job.run, args=(publish, cancel, lambda *a: None), daemon=True)
    watcher.start()
    return events, lock, cancel, watcher


@pytest.mark.model
@pytest.mark.slow
def test_a_long_chat_s_host_memory_is_explained(tmp_path, monkeypatch):
    from cliff_tui.analysis.theory import KvSettings, kv_total_bytes
    from cliff_tui.engine.gguf_meta import read_model_info
    from cliff_tui.ui.render import attached_lines, server_line
    from cliff_tui.units import MiB

    with started_llama_server(tmp_path, "-np", "4", "--cache-ram", "256", "--metrics", ctx="4096") as server:
        events, lock, cancel, watcher = attach_in_background(monkeypatch, server.proc.pid)
        try:
            chats = [[{"role": "system", "content": "Summarise each part in one line."}] for _ in range(4)]
            turns = document_turns()
            for turn in range(8):
                answers = chat_turn(server.url, chats, [turns[(turn * 4 + i) % len(turns)] for i in range(4)])
                assert all(code == 200 for code, _ in answers), answers
            store = store_after_a_poll(events, lock)
            record, _ = attach_once(
                AttachJob.from_urls({"llama-server": None, "ollama": None}, 0.2, 2.0), Sampler(), sleep=time.sleep
            )
        finally:
            cancel.set()
            watcher.join(10)
        split = store.server_memory()
        model = read_model_info(record["attached"]["settings"]["model"]["value"])
        kv = kv_total_bytes(model, KvSettings(n_ctx=4096, n_seq=4, kv_unified=False))
    assert split is not None and split.kv_cache == kv and kv > 0
    assert split.model is not None and 0 < split.model <= split.rss and split.model <= model.size_bytes
    assert split.prompt_cache is not None and 0 < split.prompt_cache < 256 * MiB, split.cache_basis
    assert split.saved_tokens and split.saved_tokens > 0
    assert split.cache_ram == 256 * MiB
    line = " ".join(text for parts in [server_line(store), *attached_lines(store)] for text, _ in parts)
    assert "prompt cache " in line and " tok) / --cache-ram 256 MiB" in line
    assert f"listening on 127.0.0.1:{server.port}" in line and "cache_ram=256MiB" in line
    memory = record["memory"]
    assert memory["kv_cache"] == kv and memory["model"] > 0 and "RSS" in memory["text"]
    largest = record["pool"]["largest_context_by_memory"]
    assert largest["tokens"] > 4096 and largest["basis"].startswith("theory + measured base")


def test_the_split_names_each_gpu_s_share_from_nvml_s_process_list():
    from cliff_tui.analysis.server_memory import memory_split
    from cliff_tui.events import ServerMemory
    from cliff_tui.records import GpuProcess, GpuReading

    def gpu(index: int, processes: tuple) -> GpuReading:
        return GpuReading(index, "NVIDIA H100", "nvidia", 10 << 30, 80 << 30, processes=processes)

    gpus = [gpu(0, (GpuProcess(42, 6 << 30), GpuProcess(7, 1 << 30))), gpu(1, (GpuProcess(42, 2 << 30),))]
    reading = ServerMemory(1.0, "http://127.0.0.1:8080", 42, 900 << 20, 300 << 20, 600 << 20, 0, 500 << 20)
    split = memory_split([reading], gpus=gpus)
    assert split.vram == ((0, 6 << 30), (1, 2 << 30))
    assert "GPU0 VRAM 6.00 GiB (NVML, this process)" in split.text() and "GPU1 2.00 GiB" in split.short_text()
