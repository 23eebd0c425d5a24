"""The runs' state: each run as its events left it, the triangulation plan and target, failures.

What only a run needs (the cliff gauge, the triangulation and the KV theory behind it) is
imported where it is first used: the screen of a ``watch`` never needs it, and its first frame
waits for every import before it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cliff_tui.analysis.buffers import by_kind, gpu_index_of, kv_device
from cliff_tui.analysis.cliff import RunWatch, cliff_verdict, killed_verdict, memory_sign
from cliff_tui.analysis.speed import classify_speed
from cliff_tui.events import (
    BuffersReported,
    DecodeWindow,
    GeneratedText,
    RunFailed,
    RunFinished,
    RunProgress,
    RunStarted,
    TargetChosen,
    TriangulationPlanned,
)
from cliff_tui.records import CliffVerdict, DecodePoint, ModelInfo, RunResult, SpeedVerdict

if TYPE_CHECKING:
    from cliff_tui.analysis.gauge import CliffGauge, CliffRoom
    from cliff_tui.analysis.triangulation import Triangulation
    from cliff_tui.events import Sample

GENERATING_PHASES = ("baseline", "decode")
FAILURES_KEPT = 50
TEXT_KEPT = 200  # pieces of generated text


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
        if (
            triangulation is not None
            and projection is not None
            and projection.max_context is not None
            and len(triangulation.points) >= 2
        ):
            return CliffGauge(tokens, projection.max_context, projection.tier, "measured")
        kv = sum(by_kind(self.buffers)["kv"].values())
        return run_gauge(tokens, self.started.n_ctx, kv, self.room) if self.room is not None else None

    @property
    def kv_device(self) -> str | None:
        return kv_device(self.buffers)

    @property
    def finished(self) -> bool:
        return self.result is not None or self.failure is not None

    @property
    def generating(self) -> bool:
        return not self.finished and self.progress is not None and self.progress.phase in GENERATING_PHASES

    @property
    def depth(self) -> int | None:
        return self.progress.depth if self.progress is not None else None

    def observe(self, sample: Sample) -> None:
        """A sample taken while it runs: its memory signs, and its cliff tier's room."""
        if self.buffers:
            from cliff_tui.analysis.gauge import cliff_room

            self.room = cliff_room(sample, self.kv_device)
        self.watch.observe(sample, self.depth, self.generating)

    def points(self) -> list[DecodePoint]:
        return [DecodePoint(w.depth, 1000.0 / w.tok_s, w.n_tokens, w.phase) for w in self.windows if measured(w)]

    def rate(self, phase: str) -> float | None:
        windows = [w for w in self.windows if w.phase == phase and measured(w)]
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
        if self.failure is not None and self.failure.oom is not None:
            return killed_verdict(self.failure.oom, self.watch.evidence())
        return cliff_verdict(self.watch.evidence(), self.verdict(throttle))


@dataclass
class RunGroup:
    model: ModelInfo | None
    type_k: str
    type_v: str
    results: list[RunResult] = field(default_factory=list)
    failures: list[RunFailed] = field(default_factory=list)


class RunsState:
    def __init__(self) -> None:
        self.views: dict[str, RunView] = {}
        self.current: RunView | None = None
        self.plan: TriangulationPlanned | None = None
        self.chosen_target: int | None = None
        self.errors: deque[RunFailed] = deque(maxlen=FAILURES_KEPT)
        self.text: deque[str] = deque(maxlen=TEXT_KEPT)
        self.last_window: DecodeWindow | None = None
        self._triangulations: dict[str, Triangulation] | None = None

    # --- taking events ----------------------------------------------------------------------

    def started(self, e: RunStarted) -> None:
        self.current = self.views[e.run_id] = RunView(e)

    def buffers(self, e: BuffersReported) -> None:
        view = self.views.get(e.run_id)
        if view is not None:
            view.buffers = e.buffers
            view.watch.kv_on_gpu = gpu_index_of(view.kv_device) is not None

    def progressed(self, e: RunProgress) -> None:
        view = self.views.get(e.run_id)
        if view is not None:
            view.progress = e

    def decoded(self, e: DecodeWindow) -> bool:
        """A window of one of its runs (False: not a run's)."""
        view = self.views.get(e.run_id)
        if view is None:
            return False
        self.last_window = e
        view.windows.append(e)
        view.watch.decoded(e)
        return True

    def finished(self, e: RunFinished) -> None:
        view = self.views.get(e.result.run_id)
        if view is not None:
            view.result = e.result
        self._triangulations = None

    def failed(self, e: RunFailed) -> None:
        self.errors.append(e)
        view = self.views.get(e.run_id)
        if view is not None:
            view.failure = e
        self._triangulations = None

    def planned(self, e: TriangulationPlanned) -> None:
        self.plan = e
        self._triangulations = None

    def target_chosen(self, e: TargetChosen) -> None:
        self.chosen_target = e.target
        self._triangulations = None

    def generated(self, e: GeneratedText) -> None:
        self.text.append(e.text)

    # --- reading --------------------------------------------------------------------------

    @property
    def running(self) -> RunView | None:
        """The current run while it has not finished."""
        return self.current if self.current is not None and not self.current.finished else None

    @property
    def target(self) -> int | None:
        """The context the projection is held against: the user's choice, else the plan's."""
        if self.chosen_target is not None:
            return self.chosen_target
        return self.plan.target if self.plan is not None else None

    @property
    def model(self) -> ModelInfo | None:
        return self.current.started.model if self.current else None

    @property
    def results(self) -> list[RunResult]:
        return [v.result for v in self.views.values() if v.result is not None]

    @property
    def failures(self) -> list[RunFailed]:
        return [v.failure for v in self.views.values() if v.failure is not None]

    @property
    def last_failure(self) -> RunFailed | None:
        """The newest failure worth showing (a cancel is the user's own doing)."""
        return next((e for e in reversed(self.errors) if e.kind != "cancelled"), None)

    def groups(self) -> dict[str, RunGroup]:
        """Runs by KV cache type (``f16``, ``q8_0``…), in the order they started."""
        groups: dict[str, RunGroup] = {}
        for view in self.views.values():
            s = view.started.settings
            group = groups.setdefault(s.cache_label, RunGroup(view.started.model, s.cache_type_k, s.cache_type_v))
            if view.result is not None:
                group.results.append(view.result)
            elif view.failure is not None:
                group.failures.append(view.failure)
        return groups

    def triangulations(self) -> dict[str, Triangulation]:
        """One triangulation per KV cache type, over the runs finished so far."""
        if self._triangulations is None:
            self._triangulations = self._triangulate()
        return self._triangulations

    def _triangulate(self) -> dict[str, Triangulation]:
        from cliff_tui.analysis.triangulation import triangulate

        out = {}
        for key, g in self.groups().items():
            if g.results or g.failures:
                out[key] = triangulate(g.results, g.failures, self.plan, _theory_per_token(g), self.target, g.model)
        return out


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


def measured(window: DecodeWindow) -> bool:
    """A window that timed some tokens; a corrupt or empty one would divide by zero."""
    return window.n_tokens > 0 and window.tok_s > 0
