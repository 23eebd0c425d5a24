"""One monitoring session: the bus, the store, the sampler, the job, the recorder and the player.

The TUI, the headless front end, ``export`` and the tests all build a :class:`Session` and read
``session.store``; none of them wires these parts by hand. Producers (the sampler, a
job, a recording being replayed) publish on the bus; the session feeds each event into the
store, writes it to the recorder (in the order the store took it) and hands the alerts the store
raised to its listeners.

Two ways to feed: *queued* (the TUI: producers only append to an inbox, the UI thread calls
:meth:`drain` once a frame) and *direct* (headless: the event is fed on the producer's thread,
under a lock).
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from cliff_tui.bus import EventBus
from cliff_tui.errors import Cancelled, CliffError
from cliff_tui.events import Alert, Event, Notice, RunFailed, TargetChosen
from cliff_tui.jobs import Job, Outcome
from cliff_tui.store import Store
from cliff_tui.thread_priority import lower_other_threads

if TYPE_CHECKING:  # the probes (psutil, NVML) and the player load only where a session uses them
    from cliff_tui.probes.sampler import Sampler, SamplerThread, SamplesInLoop
    from cliff_tui.recording.player import Player, Seek
    from cliff_tui.recording.reader import Recording
    from cliff_tui.recording.writer import Recorder, RecordingSetup

AlertListener = Callable[[Alert], None]


class Session:
    def __init__(
        self,
        *,
        sampler: Sampler | None = None,
        job: Job | None = None,
        interval: float = 0.5,
        recording_setup: RecordingSetup | None = None,
        recording: Recording | None = None,
        speed: int = 1,
        preload: Iterable[Event] = (),
        queued: bool = True,
    ) -> None:
        """``recording_setup``: how this session's recordings are made (the command line their header
        names, text or not, redacted or not), whether at start (``--record``) or later (``r``)."""
        self.bus = EventBus()
        self.store = Store()
        self.sampler = sampler
        self.job = job
        self.interval = interval
        self.recording_setup = recording_setup
        self.recorder: Recorder | None = None
        self.recording_failure: str | None = None
        self.player: Player | None = None
        self.cancel = threading.Event()
        self.alert_listeners: list[AlertListener] = []
        self._inbox: deque[Event] = deque()
        self._lock = threading.RLock()  # a recording that fails under it says so through the bus
        self._preload = list(preload)
        self._sampling: SamplerThread | SamplesInLoop | None = None
        self._choices: list[Event] = []  # what the user chose in a replay, kept over a backward seek
        self.bus.subscribe(self._inbox.append if queued else self._feed_locked)
        if recording is not None:
            from cliff_tui.recording.player import Player

            self.player = Player(recording, speed=speed)

    # --- feeding --------------------------------------------------------------------------

    def feed(self, event: Event) -> list[Alert]:
        """Into the store, then to the recorder with the alerts it raised, then the alerts to the
        listeners: the recording holds what the store took, in the same order."""
        alerts = self.store.feed(event)
        if self.recorder is not None:
            self.recorder.write(event)
            for alert in alerts:
                self.recorder.write(alert)
        for alert in alerts:
            for listener in self.alert_listeners:
                listener(alert)
        return alerts

    def feed_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.feed(event)

    def drain(self) -> int:
        """Queued mode, on the consumer's thread: feed what the producers published so far."""
        n = 0
        while self._inbox:
            self.feed(self._inbox.popleft())
            n += 1
        return n

    def _feed_locked(self, event: Event) -> None:
        with self._lock:
            self.feed(event)

    @contextmanager
    def reading(self) -> Iterator[Store]:
        """The store held still for a reader on a thread of its own (an exporter's scrape):
        direct feeding waits on the same lock; in queued mode what was queued is fed first."""
        with self._lock:
            self.drain()
            yield self.store

    def choose_target(self, target: int) -> TargetChosen:
        """The user's projection target, as an event: recorded, and kept over a replay's seeks."""
        event = TargetChosen(time.time(), target)
        if self.player is not None:
            self._choices.append(event)
        self.bus.publish(event)
        return event

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, now: float | None = None) -> None:
        """Feed the preloaded events, start sampling, and start the replay clock."""
        self.feed_all(self._preload)
        self._preload = []
        self.start_sampling()
        if self.player is not None:
            self.feed_all(self.player.start(time.monotonic() if now is None else now))

    def start_sampling(self, in_loop: bool = False) -> None:
        """Start sampling (once): a front end calls it before it loads its own code, so that the
        first sample is waiting when the first frame is drawn. On a thread; or, where ``in_loop``,
        the sampler reads no GPU and nothing is recorded, in the front end's loop through
        :meth:`sample_if_due`. A recording keeps sampling on a thread while the loop stalls (a
        terminal that stops reading, a long frame)."""
        if self.sampler is not None and self._sampling is None:
            from cliff_tui.probes.sampler import SamplerThread, SamplesInLoop

            in_loop = in_loop and self.recorder is None and not self.sampler.reads_gpus()
            self._sample_with(self.sampler, SamplesInLoop if in_loop else SamplerThread)

    def _sample_with(self, sampler: Sampler, kind: type[SamplerThread] | type[SamplesInLoop]) -> None:
        self._sampling = kind(sampler, self.bus.publish, self.interval).start()

    def sample_if_due(self, now: float, early_s: float = 0.0) -> None:
        """A sample, where sampling is in the caller's loop and one is due."""
        if self._sampling is not None:
            self._sampling.take_if_due(now, early_s)

    def stop(self) -> None:
        """Cancel the job, stop sampling, close the recording (what was written stays readable)."""
        self.cancel.set()
        if self._sampling is not None:
            self._sampling.stop()
            self._sampling = None
        self.drain()
        self.stop_recording()

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the job --------------------------------------------------------------------------

    def run_job(self) -> Outcome:
        """Run the job to its end on this thread (the TUI's worker, or headless's main thread).

        A failure the user can fix is published as ``RunFailed`` (once) and raised again."""
        assert self.job is not None
        lower_other_threads()  # the screen and the sampler yield to the engine this thread drives
        on_worker = self.sampler.set_pid if self.sampler is not None else _ignore_pid
        try:
            return self.job.run(self.bus.publish, self.cancel, on_worker)
        except Cancelled:
            return "cancelled"
        except CliffError as exc:
            if not self.cancel.is_set() and not exc.published:
                self.bus.publish(RunFailed(time.time(), "job", exc.kind, str(exc)))
                exc.published = True
            raise

    def report_crash(self, error: BaseException) -> None:
        """A bug in a job must not vanish silently: it becomes a failure on the screen."""
        self.bus.publish(
            RunFailed(
                time.time(), "job", "error", f"internal error: {type(error).__name__}: {error} (please report it)"
            )
        )

    # --- recording ------------------------------------------------------------------------

    def start_recording(self, path: str | None = None, *, force: bool = False) -> Recorder:
        """Record to ``path`` (a timestamped name in the working directory where None) from now on,
        after what rebuilds the state so far: ``--record`` and ``r`` both come here, so their
        recordings have the same header. Raises :class:`CliffError` where the file cannot be made."""
        from cliff_tui.recording.writer import Recorder, RecordingSetup, timestamped_name

        setup = self.recording_setup or RecordingSetup(command=[])
        recorder = Recorder.create(path or timestamped_name(), setup, force=force)
        self._attach_recorder(recorder)
        return recorder

    def _attach_recorder(self, recorder: Recorder) -> None:
        with self._lock:  # direct feeding waits: nothing is fed between the snapshot and the first write
            self.stop_recording()
            self.drain()
            recorder.on_failure = self._recording_failed
            recorder.write_all(self.store.snapshot_events())
            self.recorder = recorder
        if self._sampling is not None and self._sampling.in_loop and self.sampler is not None:
            from cliff_tui.probes.sampler import SamplerThread

            self._sampling.stop()
            self._sample_with(self.sampler, SamplerThread)

    def _recording_failed(self, text: str) -> None:
        self.recording_failure = text
        self.bus.publish(Notice(time.time(), text, "warning"))

    def stop_recording(self) -> Recorder | None:
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            recorder.close()
        return recorder

    # --- replay ---------------------------------------------------------------------------

    def replay_tick(self, now: float) -> None:
        if self.player is not None:
            self.feed_all(self.player.advance(now))

    def replay_step(self) -> None:
        if self.player is not None:
            self.feed_all(self.player.step())

    def toggle_play(self, now: float) -> None:
        if self.player is not None:
            self._apply(self.player.toggle(now))

    def seek_by(self, seconds: float, now: float) -> None:
        if self.player is not None:
            self._apply(self.player.seek_by(seconds, now))

    def seek_fraction(self, fraction: float, now: float) -> None:
        if self.player is not None:
            self._apply(self.player.seek_fraction(fraction, now))

    def _apply(self, seek: Seek | None) -> None:
        """A seek announces no alerts: a backward one starts a new store (with what the user chose
        during the replay), then the events up to the new position are fed without judging the
        signs, which are judged once at the end."""
        if seek is None:
            return
        if seek.rebuild:
            self.store = Store()
        for event in [*seek.events, *(self._choices if seek.rebuild else ())]:
            self.store.feed(event, signs=False)
        self.store.refresh_signs()


def _ignore_pid(pid: int | None) -> None:
    """No sampler to tell which worker process to follow."""


@contextmanager
def stop_on_signals(cancel: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set ``cancel`` (the job stops at its next check) instead of killing us
    mid-write; a second one raises KeyboardInterrupt, also out of a call that blocks."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signum)
        cancel.set()

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
