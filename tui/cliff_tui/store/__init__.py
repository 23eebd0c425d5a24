"""The store: every front end's state, built only from the event stream.

Live, replayed and headless sessions push their events through :meth:`Store.feed`, the one
ingest. It hands each to the state of its kind: the machine (samples, history, baselines), the
runs, the attached servers, the messages; then it judges the signs anew and raises an alert where
one grew worse. Values that combine kinds (whether a generation runs, the verdicts, the gauge) are
computed where they are read. Nothing else writes this state, so a replayed recording shows exactly
what the live session showed; :meth:`snapshot_events` gives the events that rebuild it, for a
recording that starts mid-session.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from cliff_tui.analysis.buffers import gpu_index_of
from cliff_tui.analysis.cliff import cliff_verdict, memory_sign
from cliff_tui.analysis.signs import SignState, not_visible_sign2, ram_trend, sign1, sign2, sign3
from cliff_tui.analysis.speed import classify_speed
from cliff_tui.analysis.thresholds import RAM_TREND_WINDOW_S
from cliff_tui.events import (
    Alert,
    BuffersReported,
    DecodeWindow,
    Event,
    GeneratedText,
    LogLine,
    MeasuredCapacity,
    Notice,
    RunFailed,
    RunFinished,
    RunProgress,
    RunStarted,
    Sample,
    ServerMemory,
    ServerReading,
    ServersFound,
    TargetChosen,
    TriangulationPlanned,
)
from cliff_tui.history import DEFAULT_CAPACITY, History
from cliff_tui.records import CliffVerdict, SpeedVerdict
from cliff_tui.store.journal import Journal
from cliff_tui.store.machine import MachineState
from cliff_tui.store.messages import MessagesState
from cliff_tui.store.runs import RunsState
from cliff_tui.store.servers import ServersState
from cliff_tui.store.signs import WAITING, SignsState

if TYPE_CHECKING:
    from collections.abc import Iterator

    from cliff_tui.analysis.gauge import CliffGauge
    from cliff_tui.analysis.server_memory import MemorySplit

SAYS_NOTHING_OF_THE_SIGNS = (LogLine, Notice, GeneratedText, Alert)


class Store:
    def __init__(self, *, history_capacity: int = DEFAULT_CAPACITY) -> None:
        self.history = History(history_capacity)
        self.machine = MachineState(self.history)
        self.runs = RunsState()
        self.servers = ServersState()
        self.messages = MessagesState()
        self.signs = SignsState()
        self.version = 0  # moves with every event fed and every judgement of the signs
        self._journal = Journal(history_capacity)
        self._server_speed: tuple[tuple[object, ...], SpeedVerdict] | None = None  # its inputs, the verdict

    # --- the one ingest ---------------------------------------------------------------------

    def feed(self, event: Event, *, signs: bool = True) -> list[Alert]:
        """Take one event; returns the alerts it raised (kept in ``signs.alerts`` too).
        ``signs=False`` leaves the signs as they were (a replay seeking forward calls
        :meth:`refresh_signs` once at the end instead)."""
        self._take(event)
        self.version += 1
        self._journal.keep(self.version, event)
        if not signs or isinstance(event, SAYS_NOTHING_OF_THE_SIGNS):
            return []
        return self.signs.update(getattr(event, "t", 0.0), self._judge_signs())

    def _take(self, event: Event) -> None:
        runs, servers = self.runs, self.servers
        if isinstance(event, Sample):
            self._sampled(event)
        elif isinstance(event, RunStarted):
            runs.started(event)
            self.machine.baselines.retake()
            self.signs.throttle = set()
        elif isinstance(event, BuffersReported):
            runs.buffers(event)
        elif isinstance(event, RunProgress):
            runs.progressed(event)
        elif isinstance(event, DecodeWindow):
            if not runs.decoded(event):
                servers.decoded(event)
            self.history.add("tok_s", event.t, event.tok_s)
        elif isinstance(event, RunFinished):
            runs.finished(event)
        elif isinstance(event, RunFailed):
            runs.failed(event)
        elif isinstance(event, TriangulationPlanned):
            runs.planned(event)
        elif isinstance(event, TargetChosen):
            runs.target_chosen(event)
        elif isinstance(event, GeneratedText):
            runs.generated(event)
        elif isinstance(event, ServerReading):
            servers.read(event)
            self.signs.session_watch.kv_on_gpu = servers.kv_on_gpu
        elif isinstance(event, MeasuredCapacity):
            servers.measured_capacity(event)
        elif isinstance(event, ServersFound):
            servers.servers_found(event)
        elif isinstance(event, ServerMemory):
            servers.remembered(event)
            self.history.add("server.rss", event.t, event.rss_bytes)
        elif isinstance(event, LogLine):
            self.messages.log.append(event)
        elif isinstance(event, Notice):
            self.messages.notices.append(event)

    def _sampled(self, s: Sample) -> None:
        self.machine.observe(s)
        generating = self.generating
        if generating:
            for g in s.gpus:
                self.signs.throttle.update(g.throttle_reasons or ())
        running = self.runs.running
        if running is not None:
            running.observe(s)
        else:
            self.signs.session_watch.observe(s, None, generating)

    # --- the signs --------------------------------------------------------------------------

    def refresh_signs(self) -> None:
        """The three signs judged from the state as it is, announcing nothing."""
        self.signs.current = self._judge_signs()
        self.version += 1

    def _judge_signs(self) -> dict[int, SignState]:
        s = self.machine.latest
        three = sign3(self.speed_verdict(), self.live_tok_s())
        if s is None:
            return {1: WAITING[1], 2: WAITING[2], 3: three}
        running = self.runs.running
        two = self._sign2(s) if running is not None or self.servers.attached is None else self._server_sign2(s)
        watch = running.watch if running is not None else self.signs.session_watch
        return {1: sign1(s, self.machine.baselines, watch), 2: two, 3: three}

    def _sign2(self, s: Sample) -> SignState:
        """This machine's RAM, and the followed process's own where one is followed."""
        since = s.t - RAM_TREND_WINDOW_S
        system = ram_trend(self.history.get("ram.used").since(since))
        model = ram_trend(self.history.get("process.rss").since(since)) if s.process is not None else None
        return sign2(system, self.generating, self.kv_on_gpu, model)

    def _server_sign2(self, s: Sample) -> SignState:
        """Attached to a server: its own process's memory, never this machine's RAM alone."""
        attached = self.servers.attached
        assert attached is not None
        if attached.pid is None:
            return not_visible_sign2(attached.how)
        server = ram_trend(self.history.get("server.rss").since(s.t - RAM_TREND_WINDOW_S))
        return sign2(server, self.generating, self.kv_on_gpu)

    # --- what combines the kinds, computed where read ---------------------------------------

    @property
    def generating(self) -> bool:
        """A run decodes (its baseline or at depth), else the attached server processes a request."""
        current = self.runs.current
        if current is not None and not current.finished:
            return current.generating
        return self.servers.processing

    @property
    def kv_on_gpu(self) -> bool | None:
        current = self.runs.current
        if current is not None and current.kv_device:
            return gpu_index_of(current.kv_device) is not None
        return self.servers.kv_on_gpu

    def speed_verdict(self) -> SpeedVerdict | None:
        """Sign 3: the current run's, else the attached server's latest windows against the trend of
        the ones before them."""
        if self.runs.current is not None:
            return self.runs.current.verdict(self.signs.throttle)
        watch = self.signs.session_watch
        spilled = memory_sign(watch.evidence())
        inputs = (
            self.servers.points_added,
            frozenset(self.signs.throttle),
            watch.cpu_cause,
            self.kv_on_gpu,
            spilled.text if spilled else None,
        )
        if self._server_speed is not None and self._server_speed[0] == inputs:
            return self._server_speed[1]  # judged over thousands of points: not again on every event
        trend = self.servers.trend_points()
        if trend is None:
            return None
        first_rate, rate, depth, points = trend
        verdict = classify_speed(
            first_rate,
            rate,
            depth,
            points,
            inputs[1],
            cpu_cause=inputs[2],
            kv_on_gpu=inputs[3],
            memory_sign=inputs[4],
        )
        self._server_speed = (inputs, verdict)
        return verdict

    def cliff_verdict(self) -> CliffVerdict:
        """The one verdict, live: the current run's, else the session's."""
        if self.runs.current is not None:
            return self.runs.current.cliff(self.signs.throttle)
        return cliff_verdict(self.signs.session_watch.evidence(), self.speed_verdict())

    def live_tok_s(self) -> float | None:
        return self.history.get("tok_s").last

    @property
    def last_window(self) -> DecodeWindow | None:
        """The newest decode window, of a run or a server."""
        windows = [w for w in (self.runs.last_window, self.servers.last_window) if w is not None]
        return max(windows, key=lambda w: w.t, default=None)

    def gauge(self) -> CliffGauge | None:
        """The current run's cliff gauge; attached to a server, its fullest slot against the
        context measured for its model; none otherwise."""
        view = self.runs.current
        if view is not None:
            return view.gauge(self.runs.triangulations().get(view.started.settings.cache_label))
        m, shown = self.servers.measured, self.servers.shown
        slots = [slot.tokens_used for slot in shown.slots if slot.tokens_used is not None] if shown else []
        if m is None:
            return self.servers.pool_gauge()
        if not slots:
            return None
        from cliff_tui.analysis.gauge import CliffGauge

        return CliffGauge(max(slots), m.max_context, f"{m.tier}, {m.model} {m.kv_type}", "measured")

    def server_memory(self) -> MemorySplit | None:
        """The attached server's memory explained, its growth against what RAM has left."""
        if not self.servers.memory:
            return None
        from cliff_tui.analysis.server_memory import memory_split

        s = self.machine.latest
        room = s.ram_room_bytes if s is not None else None
        return memory_split(list(self.servers.memory), room, gpus=s.gpus if s is not None else ())

    # --- rebuilding -------------------------------------------------------------------------

    def snapshot_events(self) -> Iterator[Event]:
        """The events that rebuild this state in a new store, in the order they were fed: what a
        recording started now writes first."""
        return self._journal.events()

    def frozen(self) -> Store:
        """A copy that no later event changes (a paused screen draws it). The events and records
        are immutable values: the copy shares those the journal holds and copies only the state
        built from them."""
        memo = {id(event): event for event in self._journal.held()}
        return copy.deepcopy(self, memo)
