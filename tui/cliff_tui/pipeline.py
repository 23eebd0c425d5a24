"""The consumer every front end shares: feed it events, read what the screens show.

Live, replayed and headless sessions all push their events through :meth:`Pipeline.feed`; the
signs, the run views and the triangulation are recomputed here, never stored by a producer, so
a replayed recording shows exactly what the live session showed.

What only a run or an attached server needs (the cliff gauge, a server's rates, the
triangulation and the KV theory behind it) is imported where it is first used: the screen of
a ``watch`` never needs it, and its first frame waits for every import before it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.buffers import by_kind, gpu_index_of, kv_device
from cliff_tui.analysis.cliff import RunWatch, cliff_verdict, memory_sign
from cliff_tui.analysis.cpu_quota import QuotaMeter
from cliff_tui.analysis.signs import SignState, SpillBaselines, ram_trend, sign1, sign2, sign3
from cliff_tui.analysis.speed import classify_speed
from cliff_tui.events import (
    ATTACH_RUN_ID,
    Alert,
    BuffersReported,
    CliffVerdict,
    DecodePoint,
    DecodeWindow,
    GeneratedText,
    LogLine,
    MeasuredCapacity,
    ModelInfo,
    Notice,
    RunFailed,
    RunFinished,
    RunProgress,
    RunResult,
    RunStarted,
    Sample,
    SessionReading,
    SpeedVerdict,
    TriangulationPlanned,
)
from cliff_tui.history import DEFAULT_CAPACITY, History

if TYPE_CHECKING:
    from cliff_tui.analysis.gauge import CliffGauge, CliffRoom
    from cliff_tui.analysis.server_rates import SessionRateMeter, SessionRates
    from cliff_tui.analysis.triangulation import Triangulation

GENERATING_PHASES = ("baseline", "decode")


@dataclass
class RunView:
    started: RunStarted
    buffers: tuple = ()
    progress: RunProgress | None = None
    windows: list[DecodeWindow] = field(default_factory=list)
    result: RunResult | None = None
    failure: RunFailed | None = None
    watch: RunWatch = field(default_factory=RunWatch)
    room: CliffRoom | None = None  # its cliff tier's room, as last seen while it ran

    def gauge(self, triangulation: Triangulation | None) -> CliffGauge | None:
        """Its context against the largest before the cliff: measured where a triangulation
        projects one, else from its own KV cells and the room its tier had left."""
        from cliff_tui.analysis.gauge import CliffGauge, run_gauge

        tokens = self.result.depth if self.result is not None else self.progress.depth if self.progress else 0
        projection = triangulation.projection if triangulation is not None else None
        if projection is not None and projection.max_context is not None and len(triangulation.points) >= 2:
            return CliffGauge(tokens, projection.max_context, projection.tier, "measured")
        kv = sum(by_kind(self.buffers)["kv"].values())
        return run_gauge(tokens, self.started.n_ctx, kv, self.room) if self.room is not None else None

    @property
    def kv_device(self) -> str | None:
        return kv_device(self.buffers)

    @property
    def finished(self) -> bool:
        return self.result is not None or self.failure is not None

    def points(self) -> list[DecodePoint]:
        return [DecodePoint(w.depth, 1000.0 / w.tok_s, w.n_tokens, w.phase) for w in self.windows if _measured(w)]

    def rate(self, phase: str) -> float | None:
        windows = [w for w in self.windows if w.phase == phase and _measured(w)]
        if not windows:
            return None
        tokens = sum(w.n_tokens for w in windows)
        return tokens / sum(w.n_tokens / w.tok_s for w in windows)

    def verdict(self, throttle: set[str]) -> SpeedVerdict | None:
        if self.result is not None:
            return self.result.verdict
        if not any(w.phase == "depth" for w in self.windows):
            return None
        spilled = memory_sign(self.watch.evidence())
        return classify_speed(
            self.rate("baseline"),
            self.rate("depth"),
            self.started.settings.depth,
            self.points(),
            throttle,
            cpu_cause=self.watch.cpu_cause,
            kv_on_gpu=self.watch.kv_on_gpu,
            memory_sign=spilled.text if spilled else None,
        )

    def cliff(self, throttle: set[str]) -> CliffVerdict:
        """The run's one verdict: its record's once it finished, else the same rule on what came so far."""
        if self.result is not None and self.result.cliff is not None:
            return self.result.cliff
        return cliff_verdict(self.watch.evidence(), self.verdict(throttle))


@dataclass
class RunGroup:
    model: ModelInfo | None
    type_k: str
    type_v: str
    results: list[RunResult] = field(default_factory=list)
    failures: list[RunFailed] = field(default_factory=list)


class Pipeline:
    def __init__(self, *, target: int | None = None, history_capacity: int = DEFAULT_CAPACITY) -> None:
        self.history = History(history_capacity)
        self.first: Sample | None = None
        self.latest: Sample | None = None
        self.runs: dict[str, RunView] = {}
        self.current: RunView | None = None
        self.plan: TriangulationPlanned | None = None
        self.target = target
        self.log: deque[LogLine] = deque(maxlen=4000)
        self.notices: deque[Notice] = deque(maxlen=50)
        self.alerts: deque[Alert] = deque(maxlen=200)
        self.text: deque[str] = deque(maxlen=200)
        self.errors: deque[RunFailed] = deque(maxlen=50)
        self.session: SessionReading | None = None  # the one whose tok/s is shown (llama-server first)
        self.session_rates: SessionRates | None = None
        self.sessions: dict[tuple[str, str], SessionReading] = {}
        self.server_rates: dict[tuple[str, str], SessionRates] = {}  # every attached server's, by (source, url)
        self.last_window: DecodeWindow | None = None  # the newest decode window, of a run or a server
        self._session_meters: dict[tuple[str, str], SessionRateMeter] = {}
        self._session_points: deque[DecodePoint] = deque(maxlen=2000)
        self._baselines = SpillBaselines()
        self._watch = RunWatch()  # an attached server's, or a watch with no run
        self._throttle: set[str] = set()
        self.quota_meter = QuotaMeter()  # the latest sample's cgroup CPU quota, and how often it ran out lately
        self.signs: dict[int, SignState] = {
            1: SignState(1, "na", "…", "waiting for a sample"),
            2: SignState(2, "ok", "RAM trend …", "collecting samples"),
            3: sign3(None),
        }
        self._triangulations: dict[str, Triangulation] | None = None
        self.measured: MeasuredCapacity | None = None  # what an attached server's slots are held against
        self.changes = itertools.count()
        self.version = 0

    # --- feeding --------------------------------------------------------------------------

    def feed(self, event: Any, *, signs: bool = True) -> list[Alert]:
        """Take one event; returns the alerts it raised (already kept in ``alerts``).
        ``signs=False`` skips the detectors (a replay seeking forward calls
        :meth:`refresh_signs` once at the end instead)."""
        handler = self._HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)
        self.version = next(self.changes)
        return self._update_signs(event) if signs else []

    def _on_sample(self, s: Sample) -> None:
        self.first = self.first or s
        self.latest = s
        self.quota_meter.observe(s.t, s.cpu_quota)
        h = self.history
        h.add("ram.used", s.t, s.ram.used_bytes)
        h.add("swap.used", s.t, s.swap.used_bytes)
        if s.cgroup is not None:
            h.add("ram.cgroup", s.t, s.cgroup.usage_bytes)
        for g in s.gpus:
            h.add(f"gpu{g.index}.vram", s.t, g.vram_used_bytes)
            h.add(f"gpu{g.index}.shared", s.t, g.shared_used_bytes)
            h.add(f"gpu{g.index}.pcie_rx", s.t, g.pcie_rx_bytes_s)
            if self.generating and g.throttle_reasons:
                self._throttle.update(g.throttle_reasons)
        if s.process is not None:
            h.add("process.rss", s.t, s.process.total_rss_bytes)
        self._baselines.update(s)
        running = self.current is not None and not self.current.finished
        if running and self.current.buffers:
            from cliff_tui.analysis.gauge import cliff_room

            self.current.room = cliff_room(s, self.current.kv_device)
        watch = self.current.watch if self.current is not None and not self.current.finished else self._watch
        progress = self.current.progress if self.current is not None else None
        watch.observe(s, progress.depth if progress else None, self.generating)

    def _on_run_started(self, e: RunStarted) -> None:
        self.current = self.runs[e.run_id] = RunView(e)
        self._baselines.retake()
        self._throttle = set()

    def _on_buffers(self, e: BuffersReported) -> None:
        if e.run_id in self.runs:
            view = self.runs[e.run_id]
            view.buffers = e.buffers
            view.watch.kv_on_gpu = gpu_index_of(view.kv_device) is not None

    def _on_progress(self, e: RunProgress) -> None:
        if e.run_id in self.runs:
            self.runs[e.run_id].progress = e

    def _on_window(self, e: DecodeWindow) -> None:
        self.last_window = e
        if e.run_id in self.runs:
            self.runs[e.run_id].windows.append(e)
            self.runs[e.run_id].watch.decoded(e)
        elif e.run_id == ATTACH_RUN_ID and _measured(e):
            self._session_points.append(DecodePoint(e.depth, 1000.0 / e.tok_s, e.n_tokens, "depth"))
        self.history.add("tok_s", e.t, e.tok_s)

    def _on_finished(self, e: RunFinished) -> None:
        view = self.runs.get(e.result.run_id)
        if view is not None:
            view.result = e.result
        self._triangulations = None

    def _on_failed(self, e: RunFailed) -> None:
        self.errors.append(e)
        view = self.runs.get(e.run_id)
        if view is not None:
            view.failure = e
        self._triangulations = None

    def _on_plan(self, e: TriangulationPlanned) -> None:
        self.plan = e
        self.target = self.target or e.target
        self._triangulations = None

    def _on_session(self, e: SessionReading) -> None:
        """Kept for the screen; the server's decode rate arrives as DecodeWindows of its own."""
        from cliff_tui.analysis.server_rates import SessionRateMeter

        key = (e.source, e.url)
        self.sessions[key] = e
        rates = self.server_rates[key] = self._session_meters.setdefault(key, SessionRateMeter()).update(e)
        if e.source == "ollama" and any(source != "ollama" for source, _ in self.sessions):
            return  # llama-server's reading carries the rates; Ollama's models stay in `sessions`
        self.session = e
        self.session_rates = rates

    _HANDLERS: dict[type, Any] = {
        Sample: _on_sample,
        RunStarted: _on_run_started,
        BuffersReported: _on_buffers,
        RunProgress: _on_progress,
        DecodeWindow: _on_window,
        RunFinished: _on_finished,
        RunFailed: _on_failed,
        TriangulationPlanned: _on_plan,
        SessionReading: _on_session,
        LogLine: lambda self, e: self.log.append(e),
        Notice: lambda self, e: self.notices.append(e),
        GeneratedText: lambda self, e: self.text.append(e.text),
        MeasuredCapacity: lambda self, e: setattr(self, "measured", e),
    }

    # --- what the screens read ------------------------------------------------------------

    @property
    def generating(self) -> bool:
        if self.current is not None and not self.current.finished:
            progress = self.current.progress
            return progress is not None and progress.phase in GENERATING_PHASES
        session = self.session
        return bool(
            session
            and session.status in ("ok", "no-metrics")
            and ((session.requests_processing or 0) > 0 or any(slot.processing for slot in session.slots))
        )

    @property
    def kv_on_gpu(self) -> bool | None:
        if self.current is not None and self.current.kv_device:
            return gpu_index_of(self.current.kv_device) is not None
        models = [m for session in self.sessions.values() for m in session.models]
        if models:
            return any((m.size_vram_bytes or 0) > 0 for m in models)
        return None

    @property
    def model(self) -> ModelInfo | None:
        return self.current.started.model if self.current else None

    @property
    def results(self) -> list[RunResult]:
        return [v.result for v in self.runs.values() if v.result is not None]

    @property
    def failures(self) -> list[RunFailed]:
        return [v.failure for v in self.runs.values() if v.failure is not None]

    @property
    def last_failure(self) -> RunFailed | None:
        """The newest failure worth showing (a cancel is the user's own doing)."""
        return next((e for e in reversed(self.errors) if e.kind != "cancelled"), None)

    def speed_verdict(self) -> SpeedVerdict | None:
        if self.current is not None:
            return self.current.verdict(self._throttle)
        points = list(self._session_points)
        if len(points) < th.FIT_MIN_POINTS + th.CONFIRMING_WINDOWS:
            return None
        # The latest windows are judged against the trend of the ones before them.
        recent = points[-th.CONFIRMING_WINDOWS :]
        ref = [dataclasses.replace(p, phase="probe") for p in points[: -th.CONFIRMING_WINDOWS]]
        rate = sum(p.n_tokens for p in recent) / sum(p.n_tokens * p.ms_per_token / 1000 for p in recent)
        self._watch.kv_on_gpu = self.kv_on_gpu
        spilled = memory_sign(self._watch.evidence())
        return classify_speed(
            1000.0 / points[0].ms_per_token,
            rate,
            recent[-1].depth,
            ref + recent,
            self._throttle,
            cpu_cause=self._watch.cpu_cause,
            kv_on_gpu=self.kv_on_gpu,
            memory_sign=spilled.text if spilled else None,
        )

    def cliff_verdict(self) -> CliffVerdict:
        """The one verdict, live: the current run's, else the attached server's."""
        if self.current is not None:
            return self.current.cliff(self._throttle)
        return cliff_verdict(self._watch.evidence(), self.speed_verdict())

    def live_tok_s(self) -> float | None:
        return self.history.get("tok_s").last

    def shared_above_baseline(self) -> dict[int, int]:
        """Sign 1's measure: each GPU's shared VRAM now, minus its baseline."""
        return self._baselines.shared_deltas(self.latest) if self.latest is not None else {}

    def swap_above_baseline(self) -> int | None:
        """Sign 1's measure on a machine with no GPU."""
        return self._baselines.swap_delta(self.latest) if self.latest is not None else None

    def set_target(self, target: int) -> None:
        self.target = target
        self._triangulations = None
        self.version = next(self.changes)

    def gauge(self) -> CliffGauge | None:
        """The current run's cliff gauge; attached to a server, its fullest slot against the
        context measured for its model; none otherwise."""
        view = self.current
        if view is not None:
            return view.gauge(self.triangulations().get(view.started.settings.cache_label))
        m, session = self.measured, self.session
        slots = [slot.tokens_used for slot in session.slots if slot.tokens_used is not None] if session else []
        if m is None or not slots:
            return None
        from cliff_tui.analysis.gauge import CliffGauge

        return CliffGauge(max(slots), m.max_context, f"{m.tier}, {m.model} {m.kv_type}", "measured")

    def triangulations(self) -> dict[str, Triangulation]:
        """One triangulation per KV cache type, over the runs finished so far."""
        if self._triangulations is None:
            self._triangulations = self._triangulate()
        return self._triangulations

    def run_groups(self) -> dict[str, RunGroup]:
        """Runs by KV cache type (``f16``, ``q8_0``…), in the order they started."""
        groups: dict[str, RunGroup] = {}
        for view in self.runs.values():
            s = view.started.settings
            group = groups.setdefault(s.cache_label, RunGroup(view.started.model, s.cache_type_k, s.cache_type_v))
            if view.result is not None:
                group.results.append(view.result)
            elif view.failure is not None:
                group.failures.append(view.failure)
        return groups

    def _triangulate(self) -> dict[str, Triangulation]:
        from cliff_tui.analysis.triangulation import triangulate

        out = {}
        for key, g in self.run_groups().items():
            if g.results or g.failures:
                out[key] = triangulate(g.results, g.failures, self.plan, _theory_per_token(g), self.target)
        return out

    # --- signs ----------------------------------------------------------------------------

    def refresh_signs(self) -> None:
        """The three signs from the current state, announcing nothing."""
        if self.latest is not None:
            self.signs.update(self._signs_after(self.latest))
        self.signs[3] = sign3(self.speed_verdict(), self.live_tok_s())
        self.version = next(self.changes)

    def _signs_after(self, event: Any) -> dict[int, SignState]:
        if isinstance(event, Sample):
            since = event.t - th.RAM_TREND_WINDOW_S
            system = ram_trend(self.history.get("ram.used").since(since))
            model = ram_trend(self.history.get("process.rss").since(since)) if event.process is not None else None
            return {1: sign1(event, self._baselines), 2: sign2(system, self.generating, self.kv_on_gpu, model)}
        if isinstance(event, (DecodeWindow, RunFinished, SessionReading)):
            return {3: sign3(self.speed_verdict(), self.live_tok_s())}
        return {}

    def _update_signs(self, event: Any) -> list[Alert]:
        new = self._signs_after(event)
        raised = []
        for sign, state in new.items():
            old = self.signs.get(sign)
            if state.alarming and (old is None or _rank(state) > _rank(old)):
                alert = Alert(getattr(event, "t", 0.0), sign, state.level, f"{state.headline}: {state.detail}")
                self.alerts.append(alert)
                raised.append(alert)
            self.signs[sign] = state
        return raised


def _theory_per_token(group: RunGroup) -> float | None:
    """What llama.cpp allocates per token of n_ctx for these runs' settings, from the header."""
    from cliff_tui.analysis.theory import InvalidSettings, KvSettings, kv_breakdown

    if group.model is None or not group.results:
        return None
    first = group.results[0]
    try:
        breakdown = kv_breakdown(group.model, KvSettings.from_run(first.settings, first.n_ctx))
    except (InvalidSettings, KeyError):  # KeyError: a recorded cache type this version does not know
        return None
    return breakdown.bytes_per_token if breakdown is not None else None


def _rank(state: SignState) -> int:
    return {"amber": 1, "red": 2}.get(state.level, 0)


def _measured(window: DecodeWindow) -> bool:
    """A window that timed some tokens; a corrupt or empty one would divide by zero."""
    return window.n_tokens > 0 and window.tok_s > 0
