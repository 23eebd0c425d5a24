"""A recording started at any point replays to the state the live session had: the store writes
what rebuilds it (``snapshot_events``), the session records every event after it in the order the
store took it, and a new store fed the file reaches the same state."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cliff_tui.events import (
    Alert,
    BuffersReported,
    Event,
    LogLine,
    MeasuredCapacity,
    Notice,
    RunFailed,
    Sample,
    ServerMemory,
    ServerReading,
    ServersFound,
    TargetChosen,
)
from cliff_tui.recording import demo
from cliff_tui.recording.reader import open_recording
from cliff_tui.records import FoundServer, RamReading, ServedModel, ServerSetting, SlotReading, SwapReading
from cliff_tui.session import Session
from cliff_tui.store import Store
from cliff_tui.units import GiB, MiB
from paths import DATA

TRIANGULATION = list(open_recording(DATA / "smollm2_triangulation.jsonl").events)
LLAMA = "http://127.0.0.1:8080"


def view(store: Store) -> dict[str, Any]:
    """Everything a screen, a report or the exporter reads from the store."""
    runs, servers = store.runs, store.servers
    return {
        "signs": store.signs.current,
        "latest": store.machine.latest,
        "history": {name: store.history.get(name).points() for name in sorted(store.history.names())},
        "baselines": (store.machine.baselines.shared, store.machine.baselines.swap),
        "quota": store.machine.quota_use,
        "runs": {
            run_id: (v.started, v.buffers, v.progress, v.windows, v.result, v.failure, v.watch.evidence(), v.room)
            for run_id, v in runs.views.items()
        },
        "current": runs.current.started if runs.current else None,
        "plan": runs.plan,
        "target": runs.target,
        "errors": list(runs.errors),
        "text": list(runs.text),
        "triangulations": {k: (t.points, t.projection) for k, t in runs.triangulations().items()},
        "servers": servers.readings,
        "measured": servers.measured,
        "attached": servers.attached,
        "memory": store.server_memory(),
        "pool": servers.pool_gauge(),
        "points": list(servers.points),
        "session": store.signs.session_watch.evidence(),
        "throttle": store.signs.throttle,
        "log": list(store.messages.log),
        "notices": list(store.messages.notices),
        "gauge": store.gauge(),
        "cliff": store.cliff_verdict(),
        "speed": store.speed_verdict(),
        "window": store.last_window,
        "generating": store.generating,
        "kv_on_gpu": store.kv_on_gpu,
    }


def recorded(events: list[Event], split: int, path: Path) -> Store:
    """A session fed ``events``, recording from event ``split`` on; returns its store."""
    session = Session()
    session.feed_all(events[:split])
    session.start_recording(str(path))
    session.feed_all(events[split:])
    session.stop_recording()
    return session.store


def replayed(path: Path) -> tuple[Store, list[Alert]]:
    """A new store fed the recording as the player feeds it (alerts are raised again, not read)."""
    store, raised = Store(), []
    for event in open_recording(path).events:
        if not isinstance(event, Alert):
            raised += store.feed(event)
    return store, raised


def user_events(t: float) -> list[Event]:
    """What a session gets besides a run: a server, a measured capacity, a target, words."""
    slots = (SlotReading(0, 8192, 2048, True),)
    model = (ServedModel("qwen", 5 * GiB, 4 * GiB, 8192),)
    settings = (ServerSetting("pool_ctx", "8192", "command line (-c)"), ServerSetting("kv_unified", "true", "default"))
    found = FoundServer("llama-server", LLAMA, "process 42 listening on 127.0.0.1:8080", 42, settings=settings)
    return [
        ServersFound(t, (found,), LLAMA),
        ServerMemory(t, LLAMA, 42, 300 * MiB, 200 * MiB, 100 * MiB, 0, 90 * MiB, 180 * MiB, 22_500.0, 128 * MiB),
        ServerReading(t, "llama-server", LLAMA, "ok", requests_processing=1, slots=slots),
        ServerReading(t, "ollama", "http://127.0.0.1:11434", "ok", models=model),
        MeasuredCapacity(t, "model.gguf", "f16", "RAM", 50_000),
        TargetChosen(t, 24_576),
        RunFailed(t, "job", "bad_input", "prompt file not found: /x.txt"),
        Notice(t, "flash attention turned on"),
        LogLine(t, 2, "llama_kv_cache: CPU KV buffer size = 45.00 MiB"),
    ]


def test_a_recording_started_mid_run_holds_failures_buffers_capacity_and_the_target(tmp_path):
    events = [*demo.gpu_cliff_run()]
    middle = len(events) // 2
    events[middle:middle] = user_events(events[middle].t)
    path = tmp_path / "late.jsonl"
    live = recorded(events, middle + len(user_events(0)) + 3, path)
    written = {type(e) for e in open_recording(path).events}
    assert {RunFailed, MeasuredCapacity, BuffersReported, TargetChosen, ServerReading} <= written
    again, _ = replayed(path)
    assert view(again) == view(live)
    assert again.runs.target == 24_576 and again.servers.measured == live.servers.measured


BASES = {
    "gpu cliff run": demo.gpu_cliff_run,
    "cpu watch": demo.cpu_watch,
    "triangulation": lambda: TRIANGULATION,
}


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[Event], int]:
    """A real session's events (a demo run, a watch, a recorded triangulation) with what a user
    and an attached server add, at drawn places; and the event at which recording starts."""
    events = list(BASES[draw(st.sampled_from(sorted(BASES)))]())
    for at in sorted(draw(st.lists(st.integers(0, len(events) - 1), max_size=3)), reverse=True):
        extra = draw(st.lists(st.sampled_from(user_events(0)), min_size=1, max_size=3))
        events[at:at] = [dataclasses.replace(e, t=events[at].t) for e in extra]
    return events, draw(st.integers(0, len(events)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(session=sessions())
def test_a_recording_started_at_any_point_replays_to_the_live_state(tmp_path_factory, session):
    events, split = session
    path = tmp_path_factory.mktemp("rebuild") / "r.jsonl"
    live = recorded(events, split, path)
    again, raised = replayed(path)
    assert view(again) == view(live)
    live_alerts = [(a.sign, a.level, a.message) for a in live.signs.alerts]
    assert [(a.sign, a.level, a.message) for a in again.signs.alerts] == live_alerts
    assert raised == list(again.signs.alerts)


def test_a_seek_through_the_recording_reaches_the_same_state(tmp_path):
    """The player's seek feeds without judging the signs, then judges them once: the same state."""
    path = tmp_path / "r.jsonl"
    live = recorded([*demo.gpu_cliff_run(), *user_events(2_000_000_000.0)], 40, path)
    session = Session(recording=open_recording(path))
    session.start(now=0.0)
    session.seek_fraction(1.0, now=0.0)
    assert view(session.store) == view(live)


def test_samples_kept_for_a_recording_are_as_many_as_the_history_keeps():
    store = Store(history_capacity=5)
    for t in range(12):
        store.feed(Sample(float(t), RamReading(GiB, 4 * GiB, 3 * GiB), SwapReading(0, 0)))
    kept = [e.t for e in store.snapshot_events() if isinstance(e, Sample)]
    assert kept == [7.0, 8.0, 9.0, 10.0, 11.0] == [t for t, _ in store.history.get("ram.used").points()]


def test_a_day_of_server_readings_keeps_a_bounded_journal_that_still_rebuilds_the_state():
    store = Store(history_capacity=50)
    slots = (SlotReading(0, 8192, 100, True),)
    for i in range(2_000):
        t = float(i)
        store.feed(Sample(t, RamReading(GiB, 4 * GiB, 3 * GiB), SwapReading(0, 0)))
        store.feed(ServerReading(t, "llama-server", LLAMA, "ok", requests_processing=1, slots=slots))
        store.feed(ServerMemory(t, LLAMA, 42, (300 + i % 7) * MiB, 200 * MiB, 100 * MiB, 0))
        if i % 100 == 0:
            store.feed(user_events(t)[0])
    kept = list(store.snapshot_events())
    assert len(kept) <= 3 * 50 + 2
    again = Store(history_capacity=50)
    for event in kept:
        again.feed(event)
    assert view(again) == view(store)
