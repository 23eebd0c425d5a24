"""The session: one owner of the bus, store, job, recorder and replay player."""

from __future__ import annotations

import threading

import pytest

from cliff_tui.errors import BadInput, Cancelled
from cliff_tui.events import Alert, RunFailed, Sample
from cliff_tui.recording import demo
from cliff_tui.recording.reader import open_recording
from cliff_tui.recording.writer import Recorder, RecordingSetup
from cliff_tui.records import RamReading, SwapReading
from cliff_tui.session import Session
from cliff_tui.units import GiB, MiB


class FailingJob:
    title = "fails"
    follows_own_process = False

    def __init__(self, error: Exception) -> None:
        self.error = error

    def check(self) -> None:
        pass

    def run(self, publish, cancel: threading.Event, on_worker) -> str:
        raise self.error


def swap_sample(t: float, swap_used: int) -> Sample:
    return Sample(t, RamReading(4 * GiB, 16 * GiB, 12 * GiB), SwapReading(swap_used, 4 * GiB))


@pytest.fixture
def demo_path(tmp_path):
    path = tmp_path / "demo.jsonl"
    with Recorder.create(path, RecordingSetup(["test"])) as recorder:
        for event in demo.gpu_cliff_run():
            recorder.write(event)
    return path


def test_a_user_error_in_a_job_is_published_once_and_raised():
    session = Session(job=FailingJob(BadInput("model file not found: /x.gguf")), queued=False)
    with pytest.raises(BadInput):
        session.run_job()
    (failure,) = session.store.runs.errors
    assert (failure.kind, failure.message) == ("bad_input", "model file not found: /x.gguf")


def test_a_failure_the_job_already_published_is_not_repeated():
    error = BadInput("already said")
    error.published = True
    session = Session(job=FailingJob(error), queued=False)
    with pytest.raises(BadInput):
        session.run_job()
    assert not session.store.runs.errors


def test_a_cancelled_job_is_an_outcome_not_a_failure():
    session = Session(job=FailingJob(Cancelled("cancelled")), queued=False)
    assert session.run_job() == "cancelled"
    assert not session.store.runs.errors


def test_queued_events_wait_for_drain_direct_ones_do_not():
    queued, direct = Session(), Session(queued=False)
    for session in (queued, direct):
        session.bus.publish(swap_sample(0, 0))
    assert queued.store.machine.latest is None and direct.store.machine.latest is not None
    assert queued.drain() == 1 and queued.store.machine.latest is not None


def test_alerts_reach_the_recorder_and_the_listeners(tmp_path):
    path = tmp_path / "s.jsonl"
    heard: list[Alert] = []
    session = Session(queued=False)
    session.start_recording(str(path))
    session.alert_listeners.append(heard.append)
    for t, used in ((0, 0), (1, 300 * MiB)):
        session.bus.publish(swap_sample(t, used))
    session.stop()
    recorded = [e for e in open_recording(path).events if isinstance(e, Alert)]
    assert [a.level for a in heard] == ["red"] and recorded == heard
    assert session.recorder is None


def test_replay_restarted_at_the_end_feeds_each_event_once_into_a_new_store(demo_path):
    session = Session(recording=open_recording(demo_path), speed=16)
    session.start(now=0.0)
    first = session.store
    session.seek_fraction(1.0, now=0.0)
    assert not session.player.playing  # the end stops the clock
    session.toggle_play(now=0.0)  # play again: from the start
    assert session.store is not first and session.player.playing
    session.replay_tick(now=1_000.0)
    times = [t for t, _ in session.store.history.get("ram.used").points()]
    samples = [e.t for e in open_recording(demo_path).events if isinstance(e, Sample)]
    assert times == samples


def test_recording_started_mid_session_begins_with_what_a_replay_needs(tmp_path):
    session = Session(preload=demo.gpu_cliff_run()[:40])
    session.start()
    path = tmp_path / "late.jsonl"
    session.start_recording(str(path))
    session.stop_recording()
    events = open_recording(path).events
    assert isinstance(events[-1], Sample) and events[-1] == session.store.machine.latest
    assert not any(isinstance(e, RunFailed) for e in events)
