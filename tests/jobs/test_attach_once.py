"""``cliff-tui attach --once``: the record of one reading per endpoint, against a loopback fake
serving recorded bodies (tests/data/endpoints)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from cliff_tui.events import ServerReading
from cliff_tui.jobs.attach import AttachJob
from cliff_tui.jobs.attach_once import NOTHING_GENERATED, attach_once, endpoint_record
from cliff_tui.probes.endpoints.discovery import Found
from cliff_tui.probes.sampler import Sampler
from fakes.http_server import Route, closed_port
from fakes.servers import BUSY, DECODING, llama, ollama


def once(job: AttachJob, pid: int | None = None) -> tuple[dict, bool]:
    record, ok = attach_once(job, Sampler(pid=pid), sleep=lambda s: None)
    json.dumps(record)  # plain JSON all the way down
    return record, ok


def test_once_measures_decode_between_two_readings(server):
    s = server(llama, BUSY)
    record, ok = once(AttachJob.from_urls({"llama-server": s.url, "ollama": None}, 0.5, 2))
    lr = record["llama_server"]
    assert ok and record["ok"] and lr["status"] == "ok" and lr["reason"] is None
    assert lr["decode_tok_s"] == pytest.approx(48.0) and lr["decode_basis"].startswith(
        "server counters between the two readings"
    )
    assert lr["prompt_tok_s"] == pytest.approx(256.0) and "average" in lr["prompt_basis"]
    assert lr["slots"][0] == {
        "id": 0,
        "n_ctx": 4096,
        "tokens_used": 1144,
        "processing": True,
        "context_used_pct": pytest.approx(27.93),
    }
    effect = lr["context_in_effect"]
    assert (effect["n_ctx_per_slot"], effect["slots"], effect["tokens_held"]) == (4096, 2, 1144)
    assert effect["unified"] is None and effect["n_ctx_total"] is None  # the server does not say
    assert effect["text"].startswith("2 slots, each up to 4,096 tokens: one pool of 4,096 if the cache is unified")
    assert "2 × 4,096 = 8,192 split if -np without --kv-unified" in effect["text"]
    assert "ram" in record and "swap" in record


def split_slots(n_ctx: int, held: list[int]) -> Route:
    """The recorded /slots shape, one item per slot, each holding ``held[i]`` tokens."""
    item = json.loads((Path(__file__).parents[1] / "data" / "endpoints" / "llama_slots.json").read_text())[0]
    slots = [
        {**item, "id": i, "n_ctx": n_ctx, "n_prompt_tokens": tokens, "is_processing": tokens > 0}
        for i, tokens in enumerate(held)
    ]
    return Route.text(json.dumps(slots), content_type="application/json")


def test_slots_holding_more_than_one_slot_context_read_as_a_split_cache(server):
    s = server(llama, BUSY, split_slots(8192, [6000, 5000, 0, 0]))
    record, ok = once(AttachJob.from_urls({"llama-server": s.url, "ollama": None}, 0.5, 2))
    effect = record["llama_server"]["context_in_effect"]
    assert ok and effect["unified"] is False and effect["n_ctx_total"] == 32768
    assert effect["text"].startswith("n_ctx 8,192 per slot, 4 slots share 32,768")
    assert "hold 11,000 tokens together" in effect["text"]


def test_one_slot_has_its_whole_context(server):
    s = server(llama, BUSY, split_slots(4096, [100]))
    effect = once(AttachJob.from_urls({"llama-server": s.url, "ollama": None}, 0.5, 2))[0]["llama_server"][
        "context_in_effect"
    ]
    assert effect["text"] == "1 slot, up to 4,096 tokens" and effect["n_ctx_total"] == 4096


def test_once_mid_request_reports_the_live_rate(server):
    s = server(llama, Route.file("llama_metrics_busy_1.txt"), DECODING)
    record, ok = attach_once(AttachJob.from_urls({"llama-server": s.url, "ollama": None}, 0.2, 2), Sampler())
    lr = record["llama_server"]
    basis = re.fullmatch(r"live: /slots n_decoded, 24 tokens in (\d+\.\d\d) s", lr["decode_basis"])
    assert ok and basis, lr["decode_basis"]
    # the 24 tokens the slot decoded between two reads, over the time between them (however
    # long a loaded machine took: at least the 0.2 s interval)
    seconds = float(basis.group(1))
    assert seconds >= 0.2 and lr["decode_tok_s"] == pytest.approx(24 / seconds, rel=0.03)


def test_once_after_a_request_reports_the_server_average(server):
    s = server(llama, Route.file("llama_metrics_done.txt"))
    lr = once(AttachJob.from_urls({"llama-server": s.url, "ollama": None}))[0]["llama_server"]
    assert lr["decode_tok_s"] == pytest.approx(128 / 2.66667)
    assert lr["decode_basis"].startswith("average since llama-server started")


def test_once_on_a_fresh_server_gives_null_with_a_reason(server):
    s = server(llama, Route.file("llama_metrics_idle.txt"))
    record, ok = once(AttachJob.from_urls({"llama-server": s.url, "ollama": None}))
    lr = record["llama_server"]
    assert ok
    assert lr["decode_tok_s"] is None and lr["decode_reason"] == NOTHING_GENERATED
    assert lr["prompt_tok_s"] is None and lr["prompt_reason"] == NOTHING_GENERATED


def test_once_ollama_reports_models(server):
    s = server(ollama, Route.file("ollama_ps.json"))
    record, ok = once(AttachJob.from_urls({"llama-server": None, "ollama": s.url}))
    o = record["ollama"]
    assert ok and "llama_server" not in record
    assert o["models"] == [
        {
            "name": "qwen2.5:14b",
            "size_bytes": 11957419008,
            "size_vram_bytes": 8405385216,
            "context_length": 32768,
            "in_ram_bytes": 11957419008 - 8405385216,
            "in_ram_pct": 29.7,
            "context_in_effect": 32768,
            "text": "30 % of the model in system RAM",
        }
    ]
    assert o["decode_tok_s"] is None and "no token counters" in o["decode_reason"]


@pytest.mark.parametrize(
    "route, status",
    [
        (Route.file("llama_no_metrics.json", 501), "no-metrics"),
        (Route.file("not_llama.html"), "not-llama"),
        (Route.file("llama_loading.json", 503), "error"),
    ],
)
def test_once_reports_every_failure_in_a_field(server, route, status):
    s = server(llama, route)
    record, ok = once(AttachJob.from_urls({"llama-server": s.url, "ollama": None}))
    lr = record["llama_server"]
    assert not ok and not record["ok"] and lr["status"] == status
    assert lr["reason"] and lr["decode_tok_s"] is None and lr["decode_reason"]
    assert status in record["reason"]


def test_once_with_a_pid_and_no_server_is_fine(monkeypatch):
    nobody = f"http://127.0.0.1:{closed_port()}"
    nowhere = {"llama-server": nobody, "ollama": nobody, "vllm": nobody}
    monkeypatch.setattr("cliff_tui.probes.endpoints.discovery.DEFAULT_URLS", nowhere)
    monkeypatch.setattr("cliff_tui.jobs.attach.DEFAULT_URLS", nowhere)
    monkeypatch.setattr("cliff_tui.jobs.attach.find_servers", lambda *a, **k: Found([]))  # no server process here
    record, ok = once(AttachJob.from_urls({"llama-server": None, "ollama": None}), pid=os.getpid())
    assert ok and record["process"]["rss_bytes"] > 0 and "no llama-server" in record["discovery"]
    record, ok = once(AttachJob.from_urls({"llama-server": None, "ollama": None}))
    assert not ok and "--llama-server URL" in record["discovery"]


def test_endpoint_record_of_a_single_reading_keeps_the_status():
    reading = ServerReading(1.0, "llama-server", "http://x", "unreachable", "nothing is listening")
    rec = endpoint_record(reading)
    assert rec["status"] == "unreachable" and rec["reason"] == "nothing is listening"
    assert rec["decode_tok_s"] is None and rec["slots"] == []
