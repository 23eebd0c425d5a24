"""Hostile server replies: a llama-server or Ollama (or anything on their ports) answering with
control sequences, bidi characters, markup or megabytes in its model names and error messages.
The readings come out inert and bounded, and so does what the screen and ``attach --once`` show."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import given, settings

from cliff_tui.events import ServerReading
from cliff_tui.probes.endpoints.llama_server import read_llama_server
from cliff_tui.probes.endpoints.ollama import read_ollama
from cliff_tui.store import Store
from cliff_tui.text import LINE_LIMIT, inert
from cliff_tui.ui.render import fit_line, server_line
from fakes.http_server import Route
from fakes.servers import llama, ollama
from hostile import EVIL, hostile_text


def runnable(text: str) -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def strings(reading: ServerReading) -> list[str]:
    return [reading.message, reading.url, *reading.reasons.values(), *(m.name for m in reading.models)]


def drawn(reading: ServerReading) -> str:
    """The attach screen's session line, as the segments the line widget draws."""
    store = Store()
    store.feed(reading)
    return "".join(segment.text for segment in fit_line(server_line(store), 10_000))


def _ps(name: str) -> Route:
    body = {"models": [{"name": name, "model": name, "size": 10, "size_vram": 5, "context_length": 4096}]}
    return Route(200, json.dumps(body).encode(), "application/json")


def _llama_error(message: str, status: int = 500) -> Route:
    return Route(
        status, json.dumps({"error": {"code": status, "message": message, "type": "x"}}).encode(), "application/json"
    )


@pytest.fixture(scope="module")
def servers():
    """One fake Ollama and one fake llama-server for every example; each example sets their replies."""
    pair = ollama(_ps("m")), llama(_llama_error("x"))
    yield pair
    for s in pair:
        s.stop()


@settings(max_examples=80, deadline=None)
@given(hostile_text().map(lambda text: "m" + text))
def test_hostile_replies_come_out_inert(servers, text):
    ours, theirs = servers
    ours.route("/api/ps", _ps(text))
    reading = read_ollama(ours.url, 5)
    assert reading.status == "ok" and reading.models[0].name == inert(text)
    assert not any(runnable(s) for s in strings(reading)) and not runnable(drawn(reading))
    assert inert(text) in drawn(reading)  # markup shown as written, not interpreted (segments are never markup)

    ours.route("/api/ps", Route(500, json.dumps({"error": text}).encode(), "application/json"))
    reading = read_ollama(ours.url, 5)
    assert reading.status == "error" and inert(text) in reading.message
    assert not runnable(drawn(reading))

    theirs.route("/metrics", _llama_error(text, 503))
    reading = read_llama_server(theirs.url, 5)
    assert reading.status == "error" and inert(text) in reading.message
    assert not any(runnable(s) for s in strings(reading)) and not runnable(drawn(reading))


def test_a_megabyte_model_name_is_cut_with_a_note(server):
    reading = read_ollama(server(ollama, _ps("m" * 1_048_576)).url, 5)
    name = reading.models[0].name
    assert len(name) == LINE_LIMIT and name.endswith("… [cut from 1,048,576 chars]")


def test_a_plain_text_reply_and_a_bad_slots_body_are_inert(server):
    ours = server(llama, Route.text(f"{EVIL}\nmore", 200), slots=_llama_error(EVIL, 500))
    reading = read_llama_server(ours.url, 5)
    assert reading.status == "not-llama" and not runnable(reading.message)
    other = server(llama, Route.text("llamacpp:requests_processing 0\n"), slots=_llama_error(EVIL, 500))
    reading = read_llama_server(other.url, 5)
    assert reading.status == "ok" and "␛]0;TITLE-OWNED␇" in reading.reasons["slots"]


def test_attach_once_prints_hostile_replies_as_inert_json(server):
    ours = server(ollama, _ps(EVIL))
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "attach", "--ollama", ours.url, "--once"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and not runnable(proc.stdout.replace("\n", ""))
    assert inert(EVIL) in json.dumps(json.loads(proc.stdout)["ollama"], ensure_ascii=False)


def test_a_context_or_a_token_count_that_cannot_be_true_is_unreadable_never_a_percentage():
    from cliff_tui.jobs.attach import AttachJob
    from cliff_tui.jobs.attach_once import attach_once
    from cliff_tui.probes.sampler import Sampler

    slots = [
        {"id": 0, "n_ctx": -1, "n_prompt_tokens": 5, "is_processing": True},
        {"id": 1, "n_ctx": 2**40, "n_prompt_tokens": 5, "is_processing": True},
        {"id": 2, "n_ctx": 4096, "n_prompt_tokens": 10**6, "is_processing": True},
        {"id": 3, "n_ctx": 4096, "n_prompt_tokens": 1024, "is_processing": True},
    ]
    server = llama(Route.file("llama_metrics_busy_1.txt"), Route(200, json.dumps(slots).encode(), "application/json"))
    try:
        job = AttachJob.from_urls({"llama-server": server.url}, 0.05, 2.0)
        record, _ = attach_once(job, Sampler(), sleep=lambda s: None)
        store = Store()
        job.poll_all(job.pollers(job.targets(store.feed)), store.feed)
    finally:
        server.stop()
    read = record["llama_server"]
    assert [s["context_used_pct"] for s in read["slots"]] == [None, None, None, 25.0]
    assert [(s["n_ctx"], s["tokens_used"]) for s in read["slots"][:3]] == [(None, 5), (None, 5), (4096, None)]
    assert "n_ctx -1" in read["reasons"]["slot 0 n_ctx"] and "1000000 tokens" in read["reasons"]["slot 2 tokens"]
    logged = " ".join(line.text for line in store.messages.log)
    assert "n_ctx -1" in logged and str(2**40) in logged and "unreadable" in logged
    shown = server_line(store)[0][0]
    assert "slot 0" not in shown and "slot 2: –/4,096 tokens" in shown and "slot 3: 1,024/4,096 tokens" in shown
