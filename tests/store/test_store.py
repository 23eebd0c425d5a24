"""The store's own rules: alert escalation, an attached server's readings and rates, notices."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cliff_tui.analysis.server_rates import ServerRateMeter
from cliff_tui.codec import event_to_plain
from cliff_tui.events import ATTACH_RUN_ID, DecodeWindow, Notice, RunFinished, Sample, ServerReading
from cliff_tui.recording import demo
from cliff_tui.recording.reader import parse_recording
from cliff_tui.recording.schema import make_header
from cliff_tui.records import GpuReading, ProcessReading, RamReading, ServedModel, SlotReading, SwapReading
from cliff_tui.store import Store
from cliff_tui.units import GiB, MiB

URL = "http://127.0.0.1:8080"


def swap_sample(t: float, swap_used: int) -> Sample:
    return Sample(t, RamReading(4 * GiB, 16 * GiB, 12 * GiB), SwapReading(swap_used, 4 * GiB))


def llama_reading(
    t: float, tokens: float, seconds: float, *, used: int = 1024, processing: bool = True, status: str = "ok"
) -> ServerReading:
    return ServerReading(
        t,
        "llama-server",
        URL,
        status,
        "",
        tokens_predicted_total=tokens,
        tokens_predicted_seconds_total=seconds,
        requests_processing=int(processing),
        slots=(SlotReading(0, 4096, used, processing),),
    )


def window(t: float, tok_s: float, depth: int = 1024) -> DecodeWindow:
    return DecodeWindow(t, ATTACH_RUN_ID, "depth", depth, 8, tok_s, 0.0)


# --- alerts -----------------------------------------------------------------------------------------


def test_an_alert_is_raised_once_per_escalation_and_again_after_a_recovery():
    p = Store()
    assert p.feed(swap_sample(0, 0)) == []  # the baseline
    (red,) = p.feed(swap_sample(1, 200 * MiB))
    assert (red.sign, red.level) == (1, "red") and "swap +200 MiB" in red.message
    assert p.feed(swap_sample(2, 300 * MiB)) == []  # still red: no second alert
    assert p.feed(swap_sample(3, 0)) == []  # back to the baseline: fine, nothing to announce
    (again,) = p.feed(swap_sample(4, 250 * MiB))
    assert again.level == "red" and list(p.signs.alerts) == [red, again]


def test_amber_then_red_on_one_sign_is_two_alerts_and_a_fall_back_to_amber_none():
    """Sign 2 while a server generates and RAM climbs: amber while nobody knows where the KV cache
    is, red once Ollama says its model sits in VRAM, and back to amber (unknown again) is no news."""
    p = Store()
    p.feed(llama_reading(0, 0, 0, processing=True))
    ollama = "http://127.0.0.1:11434"

    def climbing(t: int) -> list:
        ram = RamReading(4 * GiB + t * 64 * MiB, 16 * GiB, 12 * GiB - t * 64 * MiB)
        return p.feed(Sample(float(t), ram, SwapReading(0, 4 * GiB)))

    raised = [a for t in range(5) for a in climbing(t)]
    in_vram = (ServedModel("qwen", 5 * GiB, 4 * GiB, 8192),)
    raised += p.feed(ServerReading(5, "ollama", ollama, "ok", "", models=in_vram))  # red as Ollama says so
    raised += climbing(6) + climbing(7)
    raised += p.feed(ServerReading(8, "ollama", ollama, "ok", "", models=()))
    raised += climbing(9) + climbing(10)
    assert [(a.sign, a.level) for a in raised] == [(2, "amber"), (2, "red")]
    assert p.signs.current[2].level == "amber"  # the lower level is shown, only not announced


def test_signs_false_feeds_without_announcing_and_refresh_catches_up():
    p = Store()
    p.feed(swap_sample(0, 0))
    assert p.feed(swap_sample(1, 200 * MiB), signs=False) == []
    assert p.signs.current[1].level != "red"
    p.refresh_signs()
    assert p.signs.current[1].level == "red" and not p.signs.alerts


# --- an attached server -------------------------------------------------------------------------------


def test_server_readings_never_write_the_tok_s_series_their_windows_do():
    """llama-server's counters move only when a request ends: during the next request a reading
    repeats the old rate. Only the job's DecodeWindows (one stream) may feed tok/s and sign 3."""
    p, meter = Store(), ServerRateMeter()

    def stamped(reading: ServerReading) -> ServerReading:  # as the attach job's poller publishes them
        return dataclasses.replace(reading, rates=meter.update(reading)[0])

    p.feed(stamped(llama_reading(0, 0, 0)))
    p.feed(stamped(llama_reading(1, 480, 10)))  # a request ended: the counters say 48 tok/s
    for t, live in ((2, 30.0), (3, 31.0), (4, 29.0)):  # the next request, live from /slots
        p.feed(stamped(llama_reading(t, 480, 10)))  # the stale counters, repeated
        p.feed(window(t + 0.5, live))
    assert [v for _, v in p.history.get("tok_s").points()] == [30.0, 31.0, 29.0]
    assert p.live_tok_s() == 29.0
    assert p.servers.shown.rates.decode_tok_s == pytest.approx(48.0)  # still shown as the server's counters


def test_the_speed_verdict_of_an_attached_server_comes_from_its_windows():
    p = Store()
    for i in range(6):
        p.feed(window(float(i), 50.0 - i, depth=512 * (i + 1)))
    verdict = p.speed_verdict()
    assert verdict is not None and verdict.level == "ok"
    assert p.signs.current[3].level == "ok"


def test_the_attached_servers_speed_verdict_follows_each_new_window():
    p = Store()
    for i in range(8):
        p.feed(window(float(i), 50.0 - i, depth=512 * (i + 1)))
    assert p.speed_verdict().level == "ok"
    for i in range(8, 11):  # the decode falls far below its trend
        p.feed(window(float(i), 12.0, depth=512 * (i + 1)))
    fallen = p.speed_verdict()
    assert fallen.level != "ok" and "below its depth trend" in fallen.text
    assert p.signs.current[3].level != "ok"


def test_llama_server_readings_carry_the_rates_and_ollama_only_its_models():
    p = Store()
    p.feed(llama_reading(0, 0, 0))
    ollama = ServerReading(
        1, "ollama", "http://127.0.0.1:11434", "ok", "", models=(ServedModel("qwen", 5 * GiB, 4 * GiB, 8192),)
    )
    p.feed(ollama)
    assert p.servers.shown.source == "llama-server"  # Ollama's reading does not replace it
    assert set(p.servers.readings) == {("llama-server", URL), ("ollama", "http://127.0.0.1:11434")}
    assert p.kv_on_gpu is True  # Ollama says part of a model sits in VRAM


def test_generating_follows_the_servers_slots():
    p = Store()
    p.feed(llama_reading(0, 0, 0, processing=True))
    assert p.generating
    p.feed(llama_reading(1, 0, 0, processing=False))
    assert not p.generating
    p.feed(llama_reading(2, 0, 0, processing=True, status="unreachable"))
    assert not p.generating


# --- notices and the words records hold -------------------------------------------------------------


def test_notices_are_kept_for_the_screen():
    p = Store()
    p.feed(Notice(1.0, "flash attention turned on: a quantised V cache (-ctv q8_0) needs it"))
    p.feed(Notice(2.0, "16k/32k/65k would take about 1h09m here", "warning"))
    assert [n.level for n in p.messages.notices] == ["info", "warning"]


def test_a_recording_with_a_word_no_record_knows_is_a_clear_error_not_a_style():
    notice = event_to_plain(Notice(1.0, "depths scaled", "warning"))
    recording = parse_recording(recording_bytes(notice, {**notice, "level": "warn"}))
    assert [e.level for e in recording.events] == ["warning"]
    assert "level must be one of 'info', 'warning', not 'warn'" in recording.problems
    sample = event_to_plain(
        Sample(
            2.0, RamReading(GiB, 2 * GiB, GiB), SwapReading(0, 0), gpus=(GpuReading(0, "RTX", "nvidia", GiB, 8 * GiB),)
        )
    )
    recording = parse_recording(recording_bytes(sample, {**sample, "gpus": [{**sample["gpus"][0], "vendor": "intel"}]}))
    assert [e.gpus[0].vendor for e in recording.events] == ["nvidia"]
    assert "gpus[0].vendor must be one of 'nvidia', 'amd', not 'intel'" in recording.problems


def recording_bytes(*events: dict) -> bytes:
    lines = [make_header(["test"], False), *events]
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


def test_an_attached_servers_fullest_slot_is_held_against_the_measured_capacity():
    from cliff_tui.events import MeasuredCapacity, ServerReading
    from cliff_tui.records import SlotReading

    p = Store()
    slots = (SlotReading(0, 8192, 1200, True), SlotReading(1, 8192, 7900, True))
    p.feed(ServerReading(1.0, "llama-server", "http://127.0.0.1:8080", "ok", slots=slots))
    assert p.gauge() is None  # nothing measured to hold it against
    p.feed(MeasuredCapacity(2.0, "model.gguf", "f16", "GPU0 dedicated VRAM", 8448))
    gauge = p.gauge()
    assert (gauge.tokens, gauge.max_context, gauge.source, gauge.level) == (7900, 8448, "measured", "amber")
    assert gauge.tier == "GPU0 dedicated VRAM, model.gguf f16"


def test_a_window_that_timed_no_tokens_is_left_out_of_the_rates():
    events = [e for e in demo.gpu_cliff_run() if not isinstance(e, RunFinished)]  # judged live, not from its result
    clean, padded = Store(), Store()
    for e in events:
        if isinstance(e, DecodeWindow):  # as a corrupt recording could hold: no tokens, or a negative count
            for n_tokens in (0, -e.n_tokens):
                padded.feed(DecodeWindow(e.t, e.run_id, e.phase, e.depth, n_tokens, e.tok_s, 0.0))
                padded.feed(DecodeWindow(e.t, ATTACH_RUN_ID, "depth", e.depth, n_tokens, e.tok_s, 0.0))
                padded.speed_verdict()
        clean.feed(e)
        padded.feed(e)
    assert padded.speed_verdict() == clean.speed_verdict() is not None


def test_the_session_knows_the_kv_cache_is_on_a_gpu_without_anyone_asking_for_a_verdict():
    """Where an attached server's model sits is taken when its reading arrives: the RAM sign of
    its process rising fires whether or not a screen asked for the speed verdict meanwhile."""
    p = Store()
    p.feed(llama_reading(0, 0, 0, processing=True))
    in_vram = (ServedModel("qwen", 5 * GiB, 4 * GiB, 8192),)
    p.feed(ServerReading(0, "ollama", "http://127.0.0.1:11434", "ok", "", models=in_vram))
    for t in range(6):
        process = ProcessReading(4242, "llama-server", 1 * GiB + t * 200 * MiB, 0)
        p.feed(Sample(float(t), RamReading(8 * GiB, 32 * GiB, 24 * GiB), SwapReading(0, 0), process=process))
    verdict = p.cliff_verdict()
    assert (verdict.level, verdict.tier) == ("red", "RAM")
