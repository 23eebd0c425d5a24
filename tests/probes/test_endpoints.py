"""The endpoint readers (llama-server, Ollama, discovery) against a loopback fake serving recorded
bodies (tests/data/endpoints)."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cliff_tui.errors import BadInput
from cliff_tui.jobs.attach import AttachJob, LiveDecodeMeter
from cliff_tui.jobs.attach_once import endpoint_record
from cliff_tui.probes.endpoints import http as ep
from cliff_tui.probes.endpoints.discovery import discover
from cliff_tui.probes.endpoints.http import BadUrl, describe_network_error, normalise_url
from cliff_tui.probes.endpoints.llama_server import (
    SlotProgress,
    SlotsRead,
    probe_llama_server,
    read_llama_server,
    read_model_file,
)
from cliff_tui.probes.endpoints.ollama import read_ollama
from cliff_tui.probes.endpoints.prometheus import parse_prometheus
from cliff_tui.records import SlotReading
from fakes.http_server import Route, closed_port
from fakes.servers import llama, ollama, plain

# --- parsing --------------------------------------------------------------------------------------


def test_prometheus_text_parses_counters_gauges_and_labels():
    text = (
        "# HELP x y\n# TYPE llamacpp:a counter\nllamacpp:a 12.5\nllamacpp:b 3e2\n"
        'm{position="0"} 4\nbad line\nnan_metric NaN\ninf_metric +Inf\n'
    )
    values = parse_prometheus(text)
    assert values["llamacpp:a"] == 12.5 and values["llamacpp:b"] == 300
    assert values['m{position="0"}'] == 4
    assert "bad" not in values and "nan_metric" not in values and "inf_metric" not in values


def test_a_counter_keeps_the_name_the_server_wrote():
    # prometheus_client's parser would call this sample llamacpp:n_tokens_max_total
    text = "# HELP llamacpp:n_tokens_max Largest\n# TYPE llamacpp:n_tokens_max counter\nllamacpp:n_tokens_max 1120\n"
    assert parse_prometheus(text) == {"llamacpp:n_tokens_max": 1120}


def test_one_bad_line_hides_none_of_the_good_ones():
    text = (
        'llamacpp:a 1\nx{a="1} 2\n\x00\x01\nllamacpp:b{slot="0",q="say \\"hi\\""} 2\n'
        "# TYPE broken\nllamacpp:c 3 1700000000000\n"
    )
    assert parse_prometheus(text) == {"llamacpp:a": 1, 'llamacpp:b{slot="0",q="say \\"hi\\""}': 2, "llamacpp:c": 3}


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_the_parser_never_raises(text):
    values = parse_prometheus(text)
    assert all(isinstance(v, float) and math.isfinite(v) for v in values.values())


@pytest.mark.parametrize(
    "given, base",
    [
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("http://localhost:8080/metrics", "http://localhost:8080"),
        ("https://box.lan/llm/v1", "https://box.lan/llm"),
        ("http://[::1]:11434/api/ps", "http://[::1]:11434"),
        ("http://127.0.0.1:8080/v1/chat/completions", "http://127.0.0.1:8080"),  # the URL a chat client is given
        ("https://box.lan/llm/v1/completions/", "https://box.lan/llm"),
        ("http://127.0.0.1:11434/api/generate", "http://127.0.0.1:11434"),
        ("http://127.0.0.1:8080/?from=me@box", "http://127.0.0.1:8080"),  # an @ past the host is no user name
    ],
)
def test_urls_are_normalised_to_the_server_base(given, base):
    assert normalise_url(given) == base


@pytest.mark.parametrize(
    "url",
    [
        "http://admin:hunter2@127.0.0.1:8080",
        "http://admin:hunter2@127.0.0.1:99999",
        "ftp://admin:hunter2@host",
        "http://admin:hunter2@[::1:8080",
        "admin:hunter2@gpu box",
    ],
)
def test_a_password_in_the_url_is_refused_and_not_printed(url):
    with pytest.raises(BadInput, match="carries a user name or password") as refused:
        AttachJob.from_urls({"llama-server": url, "ollama": None})
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://host",
        "http://",
        "http://host:99999x",
        "http://[::1:8080",
        "[x]:80",
        "http://user:pw@127.0.0.1:8080",
        "http://gpu box:8080",
    ],
)
def test_bad_urls_are_bad_input_not_a_traceback(bad):
    with pytest.raises(BadUrl):
        normalise_url(bad)
    with pytest.raises(BadInput, match="--llama-server"):
        AttachJob.from_urls({"llama-server": bad, "ollama": None})


def test_network_errors_read_as_one_line():
    url = "http://nowhere.invalid:8080/metrics"
    dns = describe_network_error(url, socket.gaierror(-2, "Name or service not known"), 2)
    assert dns.startswith("cannot resolve host 'nowhere.invalid'")
    assert "timeout" in describe_network_error(url, TimeoutError("timed out"), 2)
    assert "\n" not in describe_network_error(url, OSError("line one\nline two"), 2)


# --- llama-server -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "props, name",
    [
        (Route.file("llama_props.json"), "SmolLM2-135M-Instruct-Q4_1.gguf"),
        (Route.text(json.dumps({"model_path": "C:\\models\\q.gguf"}), content_type="application/json"), "q.gguf"),
        (
            Route.text(json.dumps({"model_path": "/m/\u001b]0;owned\u0007x.gguf"}), content_type="application/json"),
            "\x1b]0;owned\x07x.gguf",
        ),  # as written: compared raw, made inert where it is shown
        (Route.text(json.dumps({"model_path": ""}), content_type="application/json"), None),
        (Route.text(json.dumps({"model_path": "/"}), content_type="application/json"), None),
        (Route.text(json.dumps({"model_path": "none"}), content_type="application/json"), None),  # a router
        (Route.text(json.dumps({"model_path": ["/m/x.gguf"]}), content_type="application/json"), None),
        (Route.text("not json"), None),
        (Route.file("llama_props.json", status=500), None),
    ],
)
def test_the_served_model_file_is_read_from_props(server, props, name):
    s = server(llama, Route.file("llama_metrics_idle.txt"), props=props)
    assert read_model_file(s.url, timeout=1) == name


def test_a_server_without_props_names_no_model(server):
    assert read_model_file(server(llama, Route.file("llama_metrics_idle.txt")).url, timeout=1) is None


def test_llama_server_busy_reads_counters_and_slots(server):
    s = server(llama, Route.file("llama_metrics_busy_1.txt"))
    r = read_llama_server(s.url, 2)
    assert (r.status, r.source, r.url) == ("ok", "llama-server", s.url)
    assert r.tokens_predicted_total == 96 and r.tokens_predicted_seconds_total == 2
    assert r.prompt_tokens_total == 1024 and r.prompt_seconds_total == 4
    assert r.requests_processing == 1
    busy, idle = r.slots
    assert (busy.id, busy.n_ctx, busy.tokens_used, busy.processing) == (0, 4096, 1144, True)
    assert (idle.id, idle.n_ctx, idle.tokens_used, idle.processing) == (1, 4096, None, False)


def test_llama_server_idle_has_zero_counters(server):
    s = server(llama, Route.file("llama_metrics_idle.txt"))
    r = read_llama_server(s.url, 2)
    assert r.status == "ok" and r.tokens_predicted_total == 0 and r.requests_processing == 0


def test_legacy_server_slot_state_and_kv_cache_tokens(server):
    s = server(llama, Route.file("llama_metrics_legacy.txt"), Route.file("llama_slots_legacy.json"))
    r = read_llama_server(s.url, 2)
    (slot,) = r.slots
    assert (slot.n_ctx, slot.processing, slot.tokens_used) == (2048, True, 26)
    assert "kv_cache_tokens" in r.reasons["tokens_used"]


def test_without_metrics_flag_says_so_and_still_reads_slots(server):
    s = server(llama, Route.file("llama_no_metrics.json", 501))
    r = read_llama_server(s.url, 2)
    assert r.status == "no-metrics"
    assert "--metrics" in r.message
    assert r.tokens_predicted_total is None
    assert [slot.n_ctx for slot in r.slots] == [4096, 4096]


def test_without_metrics_and_slots_takes_n_ctx_from_props(server):
    s = server(
        llama,
        Route.file("llama_no_metrics.json", 501),
        Route.file("llama_no_slots.json", 501),
        props=Route.file("llama_props.json"),
    )
    r = read_llama_server(s.url, 2)
    assert r.status == "no-metrics"
    assert [(slot.n_ctx, slot.tokens_used) for slot in r.slots] == [(8192, None), (8192, None)]
    assert "--no-slots" in r.reasons["slots"]


def test_slots_failure_leaves_a_reason_not_an_error(server):
    s = server(llama, Route.file("llama_metrics_idle.txt"), Route.text("[", 200))
    r = read_llama_server(s.url, 2)
    assert r.status == "ok" and r.slots == () and "slots" in r.reasons


def test_html_page_is_not_llama(server):
    s = server(plain, {"/metrics": Route.file("not_llama.html")})
    r = read_llama_server(s.url, 2)
    assert r.status == "not-llama"
    assert "HTML page" in r.message and "check the URL" in r.message


def test_other_prometheus_exporter_is_not_llama(server):
    s = server(plain, {"/metrics": Route.file("other_metrics.txt")})
    r = read_llama_server(s.url, 2)
    assert r.status == "not-llama" and "vllm:*" in r.message


def test_ollama_port_given_as_llama_server_gets_a_hint(server):
    s = server(ollama, Route.file("ollama_ps.json"))
    s.route("/metrics", Route.file("ollama_404.txt", 404))
    r = read_llama_server(s.url, 2)
    assert r.status == "not-llama"
    assert f"--ollama {s.url}" in r.message


def test_a_404_from_a_llama_server_without_the_route_reads_as_no_metrics(server):
    s = server(llama, Route.text("", 404), Route.file("llama_slots.json"), props=Route.file("llama_props.json"))
    r = read_llama_server(s.url, 2)
    assert r.status == "no-metrics" and "HTTP 404" in r.message


@pytest.mark.parametrize(
    "body, status, words",
    [
        ("llama_api_key.json", 401, "--api-key"),
        ("llama_loading.json", 503, "not ready"),
    ],
)
def test_llama_server_errors_are_reported(server, body, status, words):
    s = server(llama, Route.file(body, status))
    r = read_llama_server(s.url, 2)
    assert r.status == "error" and words in r.message


def test_closed_port_is_unreachable():
    r = read_llama_server(f"http://127.0.0.1:{closed_port()}", 2)
    assert r.status == "unreachable" and "connection refused" in r.message


def test_hung_server_times_out_quickly(server):
    s = server(llama, Route.file("llama_metrics_idle.txt", delay_s=5))
    started = time.monotonic()
    r = read_llama_server(s.url, 0.3)
    assert r.status == "unreachable" and "timeout" in r.message
    assert time.monotonic() - started < 4  # not held until the server answers, at 5 s


def test_an_error_whose_body_never_comes_is_still_one_reply(server):
    s = server(plain, {"/metrics": Route(500, b"internal error", stall_body_s=5)})
    started = time.monotonic()
    reply = ep.fetch(s.url + "/metrics", 0.3)
    assert (reply.status, reply.body) == (500, "") and time.monotonic() - started < 4  # the body: at 5 s


@pytest.mark.parametrize("part", ["trickle_s", "trickle_head_s"])
def test_a_reply_trickled_a_byte_at_a_time_stops_at_twice_the_timeout(server, part):
    """The body, or the status line and headers before it."""
    s = server(llama, Route(200, Route.file("llama_metrics_idle.txt").body, **{part: 0.05}))
    started = time.monotonic()
    r = read_llama_server(s.url, 0.3)
    assert r.status == "unreachable" and "sent its reply too slowly: not all of it within 0.6 s" in r.message
    assert time.monotonic() - started < 10  # the whole reply trickles for over 2 minutes


def test_a_reply_slow_to_start_but_whole_in_time_is_read(server):
    s = server(plain, {"/metrics": Route(200, b"x 1\n" * 20, trickle_head_s=0.002, trickle_s=0.002)})
    reply = ep.fetch(s.url + "/metrics", 5.0)
    assert (reply.status, reply.body, reply.error) == (200, "x 1\n" * 20, None)


def test_a_slow_name_lookup_is_not_called_a_slow_reply(monkeypatch):
    def slow_resolver(*args, **kwargs):  # a resolver that answers late, then fails
        time.sleep(0.8)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", slow_resolver)
    reply = ep.fetch("http://llm.example.internal:8080/metrics", 0.3)
    assert reply.error == "cannot resolve host 'llm.example.internal' (DNS: Temporary failure in name resolution)"


def _trickler(payload: bytes, stop: threading.Event) -> int:
    """A port that accepts one connection, reads what comes, and answers ``payload`` a byte
    every 50 ms."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    listening.settimeout(10)  # a client that never comes does not hold the thread

    def serve() -> None:
        with listening, contextlib.suppress(TimeoutError):
            conn, _ = listening.accept()
            with conn:
                conn.recv(4096)
                for byte in payload:
                    if stop.wait(0.05):
                        return
                    conn.sendall(bytes([byte]))

    threading.Thread(target=serve, daemon=True).start()
    return listening.getsockname()[1]


def test_a_proxy_that_trickles_its_connect_reply_stops_at_twice_the_timeout(monkeypatch):
    stop = threading.Event()
    port = _trickler(b"HTTP/1.1 200 Connection established\r\nX-Slow: " + b"a" * 1000, stop)
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    reply = ep.fetch("https://llm.example.internal/metrics", 0.3)
    stop.set()
    assert "sent its reply too slowly: not all of it within 0.6 s" in reply.error
    assert time.monotonic() - started < 10  # the whole reply trickles for 50 s


def test_a_tls_handshake_trickled_a_byte_at_a_time_stops_at_the_timeout():
    """The ssl module bounds a whole handshake by the socket's timeout, not each read of it."""
    stop = threading.Event()
    # a TLS record header, then a ServerHello that never ends
    port = _trickler(b"\x16\x03\x03\x40\x00\x02\x00\x3f\xfc" + b"\x00" * 1000, stop)
    started = time.monotonic()
    reply = ep.fetch(f"https://127.0.0.1:{port}/metrics", 0.3)
    stop.set()
    assert reply.error == f"no answer from 127.0.0.1:{port} within 0.3 s (timeout)"
    assert time.monotonic() - started < 10  # the whole handshake trickles for 50 s


def test_a_body_past_the_size_limit_is_refused_not_read_in_part(server, monkeypatch):
    monkeypatch.setattr(ep, "MAX_BODY_BYTES", 1000)
    s = server(plain, {"/metrics": Route(200, b"llamacpp:tokens_predicted_total 1\n" * 40)})
    reply = ep.fetch(s.url + "/metrics", 2)
    assert reply.status is None and reply.error.endswith("sent a reply over 1000 B, more than cliff-tui reads")
    exact = server(plain, {"/metrics": Route(200, b"x" * 1000)})
    assert ep.fetch(exact.url + "/metrics", 2).body == "x" * 1000


def test_server_that_hangs_up_is_unreachable(server):
    s = server(plain, {"/metrics": Route(drop=True)})
    r = read_llama_server(s.url, 2)
    assert r.status == "unreachable" and "\n" not in r.message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
bodies = st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    st.sampled_from(
        [
            "llamacpp:tokens_predicted_total x\n",
            "llamacpp:requests_processing NaN\n",
            "llamacpp:kv_cache_tokens +Inf\n",
            '[{"id": 0, "n_ctx": NaN}]',
            '{"error": {"message": 5}}',
            '{"error": {"message": "metrics"}}',
            '{"error": "model not found"}',
            '{"models": []}',
            "llamacpp:requests_processing 1\n",
            '[{"id": "a", "n_ctx": true}]',
            '[{"id": 0, "n_ctx": 1' + "0" * 400 + "}]",
            '{"models": [{"name": "m", "size": 1' + "0" * 400 + "}]}",
            "[" * 100_000 + "]" * 100_000,
        ]
    ),
)


def _replayed(replies: list) -> ep.Getter:
    queue = list(replies)

    def get(url: str, timeout: float) -> ep.Reply:
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        return ep.Reply(url, status, body if status else "", None if status else "no answer")

    return get


def _llama_statuses(metrics: ep.Reply) -> set[str]:
    """What llama-server's reader can make of a server whose /metrics gave ``metrics``."""
    if metrics.status is None:
        return {"unreachable"}
    if metrics.status == 200:
        return {"ok", "not-llama"} if "llamacpp:" in metrics.body else {"not-llama"}
    return {"error", "no-metrics", "not-llama"}  # which: its error body, then /props


def _ollama_status(ps: ep.Reply) -> str:
    """Ollama's reader decides from /api/ps alone."""
    if ps.status is None:
        return "unreachable"
    body = ps.json()
    if ps.status == 200 and isinstance(body, dict) and isinstance(body.get("models"), list):
        return "ok"
    return "error" if isinstance(body, dict) and isinstance(body.get("error"), str) else "not-llama"


@settings(max_examples=150, deadline=None)
@given(replies=st.lists(st.tuples(st.sampled_from([None, 200, 404, 500, 501, 503]), bodies), min_size=1, max_size=5))
@example(replies=[(None, "")])
@example(replies=[(200, '{"models": []}')])
@example(replies=[(404, '{"error": "model not found"}')])
@example(replies=[(200, "llamacpp:requests_processing 1\n"), (200, "[]")])
@example(replies=[(200, "# HELP up\nup 1\n")])
def test_readers_never_raise_whatever_the_server_says(replies):
    """Any status and body, in any order, gives a reading and no exception: the status the first
    reply calls for, and a message with anything but ok."""
    first = _replayed(replies)("http://127.0.0.1:1/first", 1)
    llama_reading = read_llama_server("http://127.0.0.1:1", 1, get=_replayed(replies))
    assert llama_reading.status in _llama_statuses(first)
    ollama_reading = read_ollama("http://127.0.0.1:1", 1, get=_replayed(replies))
    assert ollama_reading.status == _ollama_status(first)
    for r in (llama_reading, ollama_reading):
        assert r.status == "ok" or r.message
        if r.status == "unreachable":
            assert r.message == "no answer"
        endpoint_record(r)


def test_slots_progress_carries_the_running_request(server):
    s = server(llama, Route.file("llama_metrics_busy_1.txt"), Route.file("llama_slots_decoding_1.json"))
    found = probe_llama_server(s.url, 2)
    assert found.slots.t is not None and found.reading.slots == found.slots.slots
    busy, idle = found.slots.progress
    assert (busy.id, busy.id_task, busy.n_decoded, busy.processing) == (0, 7, 40, True)
    assert (idle.id_task, idle.n_decoded, idle.processing) == (None, None, False)


def test_legacy_slots_progress_reads_the_next_token_object(server):
    s = server(llama, Route.file("llama_metrics_legacy.txt"), Route.file("llama_slots_legacy.json"))
    (progress,) = probe_llama_server(s.url, 2).slots.progress
    assert (progress.id_task, progress.n_decoded, progress.processing) == (0, 0, True)


def slots_read(t: float, n_decoded: int, task: int = 7, processing: bool = True) -> SlotsRead:
    return SlotsRead(
        (SlotReading(0, 4096, 1024 + n_decoded, processing),), {}, (SlotProgress(0, task, n_decoded, processing),), t
    )


def test_live_decode_rate_counts_only_decoding_time():
    meter = LiveDecodeMeter()
    assert meter.update(slots_read(10.0, 0)) == []
    assert meter.update(slots_read(10.5, 8)) == []  # the gap held prompt processing too
    (rate,) = meter.update(slots_read(11.0, 32))
    assert (rate.n_tokens, rate.seconds, rate.depth, rate.tok_s) == (24, 0.5, 1056, 48.0)
    assert meter.update(slots_read(11.5, 4, task=8)) == []  # another request
    assert meter.update(slots_read(12.0, 20, task=8, processing=False)) == []  # finished
    assert meter.update(SlotsRead()) == []


# --- Ollama -----------------------------------------------------------------------------------------


def test_ollama_ps_reports_the_part_in_system_ram(server):
    s = server(ollama, Route.file("ollama_ps.json"))
    r = read_ollama(s.url, 2)
    (m,) = r.models
    assert r.status == "ok" and r.source == "ollama"
    assert (m.name, m.size_bytes, m.size_vram_bytes, m.context_length) == (
        "qwen2.5:14b",
        11957419008,
        8405385216,
        32768,
    )
    assert m.size_vram_bytes < m.size_bytes


def test_older_ollama_without_context_length_says_why(server):
    s = server(ollama, Route.file("ollama_ps_old.json"))
    r = read_ollama(s.url, 2)
    assert r.models[0].context_length is None and "context_length" in r.reasons


def test_ollama_with_no_model_loaded(server):
    r = read_ollama(server(ollama, Route.file("ollama_ps_empty.json")).url, 2)
    assert r.status == "ok" and r.models == () and "no model loaded" in r.message


@pytest.mark.parametrize(
    "route, status",
    [
        (Route.file("not_llama.html"), "not-llama"),
        (Route.file("ollama_error.json", 500), "error"),
    ],
)
def test_ollama_failures(server, route, status):
    r = read_ollama(server(ollama, route).url, 2)
    assert r.status == status and r.message


def test_ollama_unreachable():
    r = read_ollama(f"http://127.0.0.1:{closed_port()}", 2)
    assert r.status == "unreachable" and r.source == "ollama"


# --- discovery --------------------------------------------------------------------------------------


def test_discovery_says_what_was_found(server):
    s = server(llama, Route.file("llama_metrics_idle.txt"))
    nobody = f"http://127.0.0.1:{closed_port()}"
    found = discover(1, {"llama-server": s.url, "ollama": nobody})
    assert found.found == {"llama-server": s.url}
    assert f"found llama-server at {s.url}" in found.message
    assert "no ollama on" in found.message and "connection refused" in found.message


def test_discovery_finding_nothing_says_what_to_pass():
    nobody = f"http://127.0.0.1:{closed_port()}"
    found = discover(1, {"llama-server": nobody, "ollama": nobody})
    assert found.found == {} and "--llama-server URL" in found.message


def test_a_proxy_in_the_environment_is_not_used_for_a_local_server(server, monkeypatch):
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{closed_port()}")
    s = server(plain, {"/metrics": Route.text("x 1\n")})
    assert ep.fetch(s.url + "/metrics", 2).body == "x 1\n"


def test_a_proxy_in_the_environment_is_used_for_a_remote_server(server, monkeypatch):
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    proxy = server(plain, {"http://llm.example.internal:8080/metrics": Route.text("x 1\n")})
    monkeypatch.setenv("http_proxy", proxy.url)
    assert ep.fetch("http://llm.example.internal:8080/metrics", 2).body == "x 1\n"
