"""The attached servers' state: each server's newest reading, its decode speed at depth, and the
capacity a triangulation measured for the served model (``attach --from``)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from cliff_tui.analysis import thresholds as th
from cliff_tui.events import (
    ATTACH_RUN_ID,
    DecodeWindow,
    MeasuredCapacity,
    ServerMemory,
    ServerReading,
    ServersFound,
)
from cliff_tui.probes.endpoints.kinds import Report, reports
from cliff_tui.records import DecodePoint, FoundServer

if TYPE_CHECKING:
    from cliff_tui.analysis.gauge import CliffGauge

ServerKey = tuple[str, str]  # (source, url)
POINTS_KEPT = 2000  # decode windows of the attached servers
POOL_POINTS_KEPT = 600  # each server's cells in use, one per reading
MEMORY_KEPT = 600  # the attached server's memory readings


class ServersState:
    def __init__(self) -> None:
        self.readings: dict[ServerKey, ServerReading] = {}
        self.measured: MeasuredCapacity | None = None  # what an attached server's slots are held against
        self.points: deque[DecodePoint] = deque(maxlen=POINTS_KEPT)
        self.points_added = 0  # ever: what is judged from the points is judged again only once it moves
        self.last_window: DecodeWindow | None = None
        self.found: ServersFound | None = None  # what attach found on this machine, and follows
        self.last_failure_t: float | None = None  # when the attached server's log last said a request failed
        self.pool_points: dict[str, deque[tuple[float, int]]] = {}  # URL → (t, cells in use)
        self.memory: deque[ServerMemory] = deque(maxlen=MEMORY_KEPT)  # the attached server's
        self.preemptions: dict[str, deque[tuple[float, float]]] = {}  # URL → (t, vLLM's preemptions so far)

    def read(self, e: ServerReading) -> None:
        before = self.readings.get((e.source, e.url))
        self.readings[(e.source, e.url)] = e
        if e.context_failures and (before is None or (before.context_failures or 0) < e.context_failures):
            self.last_failure_t = e.t
        held = [slot.tokens_used for slot in e.slots if slot.tokens_used is not None]
        if e.kv_blocks is not None and e.kv_blocks.tokens_used is not None:
            held = [e.kv_blocks.tokens_used]
        if e.kv_blocks is not None and e.kv_blocks.preemptions_total is not None:
            kept = self.preemptions.setdefault(e.url, deque(maxlen=POOL_POINTS_KEPT))
            kept.append((e.t, e.kv_blocks.preemptions_total))
        if held:
            self.pool_points.setdefault(e.url, deque(maxlen=POOL_POINTS_KEPT)).append((e.t, sum(held)))

    def decoded(self, e: DecodeWindow) -> None:
        if e.run_id != ATTACH_RUN_ID:
            return
        self.last_window = e
        if e.n_tokens > 0 and e.tok_s > 0:
            self.points.append(DecodePoint(e.depth, 1000.0 / e.tok_s, e.n_tokens, "depth"))
            self.points_added += 1

    def remembered(self, e: ServerMemory) -> None:
        if self.memory and self.memory[-1].pid != e.pid:
            self.memory.clear()  # another process: its growth starts again
        self.memory.append(e)

    def servers_found(self, e: ServersFound) -> None:
        self.found = e

    @property
    def attached(self) -> FoundServer | None:
        """The found server attach follows, with its settings."""
        if self.found is None:
            return None
        return next((s for s in self.found.servers if s.url == self.found.attached), None)

    def pool_gauge(self) -> CliffGauge | None:
        """The attached server's context pool, from its settings and its slots."""
        server, shown = self.attached, self.shown
        if server is None or shown is None or shown.url != server.url:
            return None
        if shown.kv_blocks is not None:
            from cliff_tui.analysis.gauge import kv_blocks_gauge

            growth = self._pool_growth(shown.url, shown.t)
            return kv_blocks_gauge(shown.kv_blocks, self.preempted(shown.url, shown.t), growth)
        values = {s.name: s.value for s in server.settings}
        pool = _int(values.get("pool_ctx"))
        if pool is None or "kv_unified" not in values:
            return None
        held = [slot.tokens_used for slot in shown.slots]
        from cliff_tui.analysis.gauge import pool_gauge

        failing = self.last_failure_t is not None and shown.t - self.last_failure_t <= th.POOL_FAILURE_HOLD_S
        return pool_gauge(
            held,
            values["kv_unified"] == "true",
            pool,
            _int(values.get("slot_ctx")),
            failing=failing,
            growth_per_s=self._pool_growth(shown.url, shown.t),
        )

    def _pool_growth(self, url: str, now: float) -> float | None:
        """Cells per second the pool gained over the recent window (first to last point)."""
        points = [p for p in self.pool_points.get(url, ()) if now - p[0] <= th.POOL_GROWTH_WINDOW_S]
        if len(points) < 2 or points[-1][0] - points[0][0] <= 0:
            return None
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])

    def preempted(self, url: str, now: float) -> int:
        """Requests vLLM preempted over the last minute: its counter's rise (a restart resets it)."""
        points = [p for p in self.preemptions.get(url, ()) if now - p[0] <= th.PREEMPTION_WINDOW_S]
        before = [p for p in self.preemptions.get(url, ()) if now - p[0] > th.PREEMPTION_WINDOW_S]
        if before:
            points.insert(0, before[-1])
        if len(points) < 2:
            return 0
        return int(max(0.0, points[-1][1] - points[0][1]))

    def measured_capacity(self, e: MeasuredCapacity) -> None:
        self.measured = e

    @property
    def shown(self) -> ServerReading | None:
        """The server whose speed is shown: the newest llama-server reading (its counters carry the
        rates), else the newest of any."""
        readings = list(self.readings.values())
        counted = [r for r in readings if self.reports(r, "counters")]
        return max(counted or readings, key=lambda r: r.t, default=None)

    @staticmethod
    def reports(reading: ServerReading, report: Report) -> bool:
        """Whether the API ``reading`` came from can carry ``report`` (Ollama has no token counters)."""
        return reports(reading.source, report)

    @property
    def processing(self) -> bool:
        """Whether the shown server is generating now."""
        r = self.shown
        return bool(
            r
            and r.status in ("ok", "no-metrics")
            and ((r.requests_processing or 0) > 0 or any(slot.processing for slot in r.slots))
        )

    @property
    def kv_on_gpu(self) -> bool | None:
        """Whether a served model sits partly in VRAM (Ollama's size_vram); None where no server says."""
        models = [m for reading in self.readings.values() for m in reading.models]
        if models:
            return any((m.size_vram_bytes or 0) > 0 for m in models)
        return None

    def trend_points(self) -> tuple[float, float, int, list[DecodePoint]] | None:
        """What sign 3 judges for an attached server: its first rate, the rate of the latest windows,
        their depth, and every point (the latest as probes against the trend before them)."""
        points = list(self.points)
        if len(points) < th.FIT_MIN_POINTS + th.CONFIRMING_WINDOWS:
            return None
        recent = points[-th.CONFIRMING_WINDOWS :]
        ref = [
            DecodePoint(p.depth, p.ms_per_token, p.n_tokens, "probe", p.major_faults)
            for p in points[: -th.CONFIRMING_WINDOWS]
        ]
        rate = sum(p.n_tokens for p in recent) / sum(p.n_tokens * p.ms_per_token / 1000 for p in recent)
        return 1000.0 / points[0].ms_per_token, rate, recent[-1].depth, ref + recent


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
