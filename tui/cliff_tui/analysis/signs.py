"""The three signs of the cliff, evaluated live from samples and decode speeds.

1. shared VRAM above its baseline (on a CPU-only machine: swap above its baseline);
2. system RAM rising — a trend at rest, an alarm only while a generation runs with the KV cache
   on a GPU (with the KV in RAM, growth is expected: information, not alarm);
3. decode speed down against the run's own depth trend (see :mod:`cliff_tui.analysis.speed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.cliff import RunWatch
from cliff_tui.analysis.speed import fit_line
from cliff_tui.events import Sample
from cliff_tui.records import SpeedVerdict
from cliff_tui.units import fmt_bytes, fmt_rate

LEVELS = ("na", "ok", "info", "amber", "red")


@dataclass(frozen=True)
class Sign:
    """One of the three signs, as every front end names it; the store judges it with ``judge``."""

    number: int
    name: str  # on the screen; lower case, the exporter's ``name`` label
    what: str  # what it watches, in one line (the help screen)
    judge: str  # the function below that judges it

    @property
    def label(self) -> str:
        return self.name.lower()


SIGNS: tuple[Sign, ...] = (
    Sign(1, "spill", "shared VRAM above its baseline (CPU-only: swap above its baseline)", "sign1"),
    Sign(
        2,
        "RAM",
        "the model's RAM rising (an attached server's own process); an alarm only while generating with the KV "
        "cache on a GPU",
        "sign2",
    ),
    Sign(3, "speed", "decode tok/s against the depth trend of the run itself (time/token ≈ a + b·depth)", "sign3"),
)
SIGN_BY_NUMBER = {s.number: s for s in SIGNS}


@dataclass(frozen=True)
class SignState:
    sign: int
    level: str  # one of LEVELS
    headline: str
    detail: str

    @property
    def alarming(self) -> bool:
        return self.level in ("amber", "red")


@dataclass(frozen=True)
class RamTrend:
    slope_bytes_s: float
    rise_bytes: int
    window_s: float

    @property
    def rising(self) -> bool:
        return self.slope_bytes_s > th.RAM_RISE_BYTES_PER_S and self.rise_bytes > th.RAM_RISE_MIN_BYTES

    @property
    def arrow(self) -> str:
        if self.rising:
            return "↑"
        if self.slope_bytes_s < -th.RAM_RISE_BYTES_PER_S:
            return "↓"
        return "→"


def ram_trend(points: Sequence[tuple[float, float]]) -> RamTrend | None:
    """Slope of RAM used over the window's (t, bytes) points, and how far it rose from its low."""
    if len(points) < 3:
        return None
    fit = fit_line([t for t, _ in points], [v for _, v in points])
    if fit is None:
        return None
    low = min(v for _, v in points)
    return RamTrend(fit.slope, int(points[-1][1] - low), points[-1][0] - points[0][0])


class SpillBaselines:
    """Sign 1's baselines: the first reading of shared VRAM per GPU (or of swap), re-taken when a
    run starts so a spill is measured against that run."""

    def __init__(self) -> None:
        self.shared: dict[int, int] = {}
        self.swap: int | None = None
        self._retake = True

    def retake(self) -> None:
        self._retake = True

    def update(self, sample: Sample) -> None:
        if self._retake:
            self.shared = {g.index: g.shared_used_bytes for g in sample.gpus if g.shared_used_bytes is not None}
            self.swap = sample.swap.used_bytes
            self._retake = False
        for g in sample.gpus:
            if g.shared_used_bytes is not None and g.index not in self.shared:
                self.shared[g.index] = g.shared_used_bytes

    def shared_deltas(self, sample: Sample) -> dict[int, int]:
        """Shared VRAM above its baseline, per GPU that reports it."""
        return {
            g.index: g.shared_used_bytes - self.shared.get(g.index, g.shared_used_bytes)
            for g in sample.gpus
            if g.shared_used_bytes is not None
        }

    def swap_delta(self, sample: Sample) -> int:
        return sample.swap.used_bytes - (self.swap if self.swap is not None else sample.swap.used_bytes)


def sign1(sample: Sample, base: SpillBaselines, watch: RunWatch | None = None) -> SignState:
    """``watch``: the running run's (or the session's) memory signs: on a CPU-only machine swap
    growth is red only where it reads the model's pages back, the rule its verdict uses."""
    if not sample.gpus:
        return _swap_sign(sample, base, watch)
    by_index = base.shared_deltas(sample)
    deltas = [(g, by_index[g.index]) for g in sample.gpus if g.index in by_index]
    if not deltas:
        reason = next(
            (why for g in sample.gpus if (why := g.reasons.get("shared_used_bytes"))),
            "not reported on this platform",
        )
        return SignState(1, "na", "shared VRAM n/a", reason)
    gpu, delta = max(deltas, key=lambda d: d[1])
    if delta > th.SHARED_SPILL_BYTES:
        return SignState(
            1,
            "red",
            f"shared +{fmt_bytes(delta)}",
            f"GPU{gpu.index}: the driver moved {fmt_bytes(delta)} of GPU memory into system RAM",
        )
    return SignState(1, "ok", f"shared +{fmt_bytes(max(delta, 0))}", "shared VRAM at its baseline")


def _swap_sign(sample: Sample, base: SpillBaselines, watch: RunWatch | None) -> SignState:
    if sample.swap.total_bytes == 0:
        return SignState(
            1,
            "na",
            "no GPU, no swap",
            "CPU-only with no swap: the cliff here is an out-of-memory kill, watch RAM available",
        )
    delta = base.swap_delta(sample)
    if delta > th.SWAP_SPILL_BYTES:
        red = next((e for e in watch.evidence() if e.tier == "swap" and e.level == "red"), None) if watch else None
        if red is not None:
            return SignState(1, "red", f"swap +{fmt_bytes(delta)}", f"{red.text}: the CPU-only cliff")
        return SignState(1, "info", f"swap +{fmt_bytes(delta)}", swap_words(sample, delta, watch))
    if sample.process is not None and sample.process.swap_bytes:
        return SignState(1, "ok", f"swap +{fmt_bytes(max(delta, 0))}", swap_words(sample, max(delta, 0), watch))
    return SignState(1, "ok", f"swap +{fmt_bytes(max(delta, 0))}", "CPU-only: swap is the cliff; at baseline")


def swap_words(sample: Sample, grew: int, watch: RunWatch | None) -> str:
    """Whose pages the swap holds, as measured: the followed process's (since when, read back or
    not), and what grew besides."""
    proc = sample.process
    if proc is None or proc.swap_bytes is None:
        return f"swap grew {fmt_bytes(grew)}: whose pages is not known here (no process followed), not read back"
    since = watch.process_swap_at_start if watch is not None else None
    mine = f"PID {proc.pid} holds {fmt_bytes(proc.swap_bytes)} in swap"
    if since:
        mine += f" ({fmt_bytes(since)} of it from before the run's baseline)"
    others = max(grew - max(proc.swap_bytes - (since or 0), 0), 0)
    return f"swap grew {fmt_bytes(grew)}: {mine}, not read back; other processes' pages: {fmt_bytes(others)}"


def sign2(trend: RamTrend | None, generating: bool, kv_on_gpu: bool | None, model: RamTrend | None = None) -> SignState:
    """``trend`` is the system's RAM, ``model`` the followed process's own (None: not followed)."""
    if trend is None:
        return SignState(2, "ok", "RAM trend …", "collecting samples")
    rate = f"RAM {trend.arrow} {fmt_rate(abs(trend.slope_bytes_s))}" if trend.arrow != "→" else "RAM → steady"
    if trend.arrow == "↓":
        return SignState(2, "ok", rate, f"RAM falling over the last {trend.window_s:.0f}s")
    if not trend.rising:
        return SignState(2, "ok", rate, f"RAM steady over {trend.window_s:.0f}s")
    if model is not None and not model.rising:
        return SignState(
            2, "info", rate, f"RAM rose {fmt_bytes(trend.rise_bytes)} in other processes, not this model's memory"
        )
    if not generating:
        return SignState(2, "info", rate, f"RAM rose {fmt_bytes(trend.rise_bytes)} (no generation running)")
    if kv_on_gpu is False:
        return SignState(2, "info", rate, "expected: the KV cache lives in RAM for this run")
    level = "red" if kv_on_gpu else "amber"
    where = "with the KV cache on the GPU" if kv_on_gpu else "(KV location unknown)"
    return SignState(2, level, rate, f"RAM rising while generating {where}: overflow is landing in system memory")


def not_visible_sign2(how: str) -> SignState:
    """An attached server whose process this machine cannot see: its RAM is not this machine's."""
    return SignState(
        2,
        "na",
        "server RAM n/a",
        f"the server's process is not visible from here ({how}): this machine's RAM says nothing of it",
    )


def sign3(verdict: SpeedVerdict | None, live_tok_s: float | None = None) -> SignState:
    if verdict is None:
        if live_tok_s is None:
            return SignState(3, "na", "tok/s –", "no token source: use `cliff-tui run` or `cliff-tui attach`")
        return SignState(3, "ok", f"{live_tok_s:.1f} tok/s", "measuring the baseline")
    level = {"unknown": "info"}.get(verdict.level, verdict.level)
    if verdict.drop_vs_expected_pct is not None:
        head = f"{-verdict.drop_vs_expected_pct:+.0f}% vs trend"
    elif verdict.raw_drop_pct is not None:
        head = f"{-verdict.raw_drop_pct:+.0f}% raw"
    else:
        head = "tok/s –"
    return SignState(3, level, head, verdict.text)
