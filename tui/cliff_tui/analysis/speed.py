"""Sign 3, honestly: decode slows with depth by itself, so judge it against the run's own trend.

Attention reads every cached token, so time per token grows with depth even with no spill at
all, and on a CPU it bends upward as the KV cache leaves each cache level (see bench/RESULTS.md,
'Cliff honesty'). The decode at depth is judged against what the probes just before it predict
(a local line through the deepest few), inside a noise band from how well each probe was
predicted by the ones before it. Falling beyond that band is the cliff only with a memory sign.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.throttle import throttle_cause
from cliff_tui.records import DecodePoint, SpeedVerdict, VerdictLevel


@dataclass(frozen=True)
class LineFit:
    intercept: float
    slope: float

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LineFit | None:
    """Least squares; ``None`` for fewer than two distinct x."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    return LineFit(intercept=my - slope * mx, slope=slope)


def robust_line(xs: Sequence[float], ys: Sequence[float]) -> LineFit | None:
    """Theil–Sen: the median of pairwise slopes. One slow probe (a scheduler hiccup on a busy
    machine) moves it far less than it moves least squares."""
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]
    ]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    return LineFit(intercept=statistics.median(y - slope * x for x, y in zip(xs, ys)), slope=slope)


MAX_FIT_POINTS = 40  # Theil–Sen is quadratic: a long attach session is binned by depth first


def binned(points: Sequence[DecodePoint], most: int = MAX_FIT_POINTS) -> list[DecodePoint]:
    """At most ``most`` points: consecutive points (by depth) merged into their median."""
    ordered = sorted(points, key=lambda p: p.depth)
    if len(ordered) <= most:
        return ordered
    size = -(-len(ordered) // most)
    out = []
    for i in range(0, len(ordered), size):
        chunk = ordered[i : i + size]
        out.append(
            DecodePoint(
                int(statistics.median(p.depth for p in chunk)),
                statistics.median(p.ms_per_token for p in chunk),
                sum(p.n_tokens for p in chunk),
                chunk[0].phase,
            )
        )
    return out


def local_model(ref: Sequence[DecodePoint]) -> LineFit | None:
    """The trend the deepest reference points follow: Theil–Sen over the last few (time per token
    bends upward with depth on a CPU, so a line through the shallow ones under-predicts deep
    ones); never a negative slope (noise on a flat curve)."""
    recent = sorted(ref, key=lambda p: p.depth)[-th.LOCAL_FIT_POINTS :]
    fit = robust_line([p.depth for p in recent], [p.ms_per_token for p in recent])
    if fit is None:
        return None
    if fit.slope < 0:
        return LineFit(intercept=statistics.median(p.ms_per_token for p in recent), slope=0.0)
    return fit


@dataclass(frozen=True)
class DepthTrend:
    """What the points before each later one predicted for it, and how far they scatter.

    ``fit`` is the trend before the first confirmed fall (``knee``): what depth alone explains."""

    fit: LineFit
    noise_pct: float  # robust sigma of each probe against what the probes before it predicted
    slope_growth: float | None  # the deep probes' slope over the shallow ones' (> 1: it bends up)
    knee: int | None  # the first of CONFIRMING_WINDOWS points in a row beyond the band
    beyond: tuple[DecodePoint, ...] = ()

    def expected_ms(self, depth: int) -> float:
        return self.fit.at(depth)

    @property
    def band_pct(self) -> float:
        return max(th.SPEED_AMBER_PCT, th.SPEED_NOISE_SIGMAS * self.noise_pct)


def depth_trend(points: Sequence[DecodePoint]) -> DepthTrend | None:
    """The running depth model: each point, in depth order, against a local line through the
    points before it that were on their trend (the baseline, the probes, then the windows)."""
    ref = binned([p for p in points if p.phase != "depth"])
    if len(ref) < th.FIT_MIN_POINTS or len({p.depth for p in ref}) < 2:
        return None
    noise = _sequential_noise(ref)
    band = max(th.SPEED_AMBER_PCT, th.SPEED_NOISE_SIGMAS * noise)
    ordered = ref + sorted((p for p in points if p.phase == "depth"), key=lambda p: p.depth)
    trend: list[DecodePoint] = []
    run: list[DecodePoint] = []
    beyond: list[DecodePoint] = []
    knee = None
    for point in ordered:
        fit = local_model(trend) if len(trend) >= th.FIT_MIN_POINTS else None
        if (
            fit is not None
            and fit.at(point.depth) > 0
            and (drop := _drop_pct(1000.0 / fit.at(point.depth), 1000.0 / point.ms_per_token)) is not None
            and drop >= band
        ):
            run.append(point)
            beyond.append(point)
            if knee is None and len(run) >= th.CONFIRMING_WINDOWS:
                knee = run[0].depth
            continue
        run = []
        if knee is None:
            trend.append(point)
    fit = local_model([p for p in trend if p.phase != "depth"] or trend)
    if fit is None:
        return None
    first = robust_line(
        [p.depth for p in ref[: th.LOCAL_FIT_POINTS]], [p.ms_per_token for p in ref[: th.LOCAL_FIT_POINTS]]
    )
    growth = fit.slope / first.slope if first is not None and first.slope > 0 else None
    return DepthTrend(fit, noise, growth, knee, tuple(beyond))


def _sequential_noise(ref: Sequence[DecodePoint]) -> float:
    """How well each probe was predicted by the ones before it: a robust sigma, in %."""
    errors = []
    for i in range(th.FIT_MIN_POINTS, len(ref)):
        before = local_model(ref[:i])
        if before is not None and before.at(ref[i].depth) > 0:
            errors.append(abs(ref[i].ms_per_token - before.at(ref[i].depth)) / before.at(ref[i].depth))
    return 1.4826 * statistics.median(errors) * 100 if len(errors) >= 2 else 0.0


def classify_speed(
    baseline_tok_s: float | None,
    depth_tok_s: float | None,
    depth: int,
    points: Sequence[DecodePoint],
    throttle_seen: Iterable[str] = (),
    *,
    cpu_cause: str | None = None,
    kv_on_gpu: bool | None = None,
    memory_sign: str | None = None,
) -> SpeedVerdict:
    """Sign 3: decode at depth against what the probes before it predict.

    Beyond the trend, the level says what else was measured: red only with a memory sign
    (``memory_sign`` names it: the decode is its corroboration), amber with another measured cause
    (clock throttling; ``cpu_cause``: other processes' CPU use, a cgroup's quota running out), info
    with none (a CPU's caches, or noise)."""
    raw_drop = _drop_pct(baseline_tok_s, depth_tok_s)
    if depth_tok_s is None or depth_tok_s <= 0:
        return SpeedVerdict("unknown", "no decode speed at depth yet", raw_drop, None, None)
    trend = depth_trend(points)
    if trend is None or trend.expected_ms(depth) <= 0:
        return _without_fit(raw_drop)
    expected = 1000.0 / trend.expected_ms(depth)
    vs_expected = _drop_pct(expected, depth_tok_s)
    knee = trend.knee
    if vs_expected is None or vs_expected < trend.band_pct or knee is None:
        return _on_trend(raw_drop, expected, vs_expected, depth_tok_s, trend, kv_on_gpu, memory_sign)
    where = f"{vs_expected:.0f}% below its depth trend from depth {knee:,}"
    if memory_sign is not None:
        bus = " / PCIe" if kv_on_gpu else ""
        text = f"cliff: decode fell {where}, after {memory_sign} — the bottleneck moved to memory bandwidth{bus}"
        return SpeedVerdict("red", text, raw_drop, expected, vs_expected, knee, memory_sign)
    cause = throttle_cause(throttle_seen) or cpu_cause
    if cause is not None:
        return SpeedVerdict(
            "amber", f"decode fell {where}: {cause} (no memory sign)", raw_drop, expected, vs_expected, knee, cause
        )
    text = f"decode fell {where} with no memory sign, load or throttling seen ({_slower_why(kv_on_gpu)})"
    return SpeedVerdict("info", text, raw_drop, expected, vs_expected, knee, None)


def _on_trend(
    raw_drop: float | None,
    expected: float,
    vs_expected: float | None,
    measured: float,
    trend: DepthTrend,
    kv_on_gpu: bool | None,
    memory_sign: str | None = None,
) -> SpeedVerdict:
    text = f"on its depth trend: {expected:.1f} tok/s predicted, {measured:.1f} measured"
    if vs_expected is not None and vs_expected >= th.SPEED_AMBER_PCT:
        text += f" (within this run's noise, ±{trend.band_pct:.0f}%)"
    if trend.slope_growth is not None and trend.slope_growth >= th.BEND_SLOPE_GROWTH:
        if memory_sign is not None:  # the bend is the memory sign's doing, not a cache level's
            text = (
                f"cliff: decode slowed ×{trend.slope_growth:.1f} faster than linear in depth, with {memory_sign}"
                f" — the bottleneck moved to memory bandwidth{' / PCIe' if kv_on_gpu else ''}"
            )
            return SpeedVerdict("red", text, raw_drop, expected, vs_expected, None, memory_sign)
        text += (
            f"; decode slowed faster than linear in depth (×{trend.slope_growth:.1f} per token deeper): "
            f"{_slower_why(kv_on_gpu)}"
        )
        return SpeedVerdict("info", text, raw_drop, expected, vs_expected)
    return SpeedVerdict("ok", text, raw_drop, expected, vs_expected)


def _slower_why(kv_on_gpu: bool | None) -> str:
    if kv_on_gpu:
        return "attention reading more cells"
    return "the KV cache outgrew a CPU cache level"


def _without_fit(raw_drop: float | None) -> SpeedVerdict:
    if raw_drop is None:
        return SpeedVerdict("unknown", "no baseline to compare with", None, None, None)
    text = f"raw drop {raw_drop:.0f}% (too few depths to separate the cliff from normal decline)"
    level: VerdictLevel = "info" if raw_drop >= th.SPEED_RED_PCT else "ok"
    return SpeedVerdict(level, text, raw_drop, None, None)


def _drop_pct(reference: float | None, measured: float | None) -> float | None:
    if reference is None or measured is None or reference <= 0:
        return None
    return (1.0 - measured / reference) * 100.0


def window_rate(durations_s: Sequence[float]) -> tuple[float, float]:
    """tok/s over a window of per-token durations, and the spread (stdev) of per-token rates."""
    total = sum(durations_s)
    rate = len(durations_s) / total if total > 0 else 0.0
    rates = [1.0 / d for d in durations_s if d > 0]
    spread = statistics.pstdev(rates) if len(rates) > 1 else 0.0
    return rate, spread


def steady(windows: Sequence[tuple[float, float | None]]) -> bool:
    """Whether decode windows (tok/s, major faults per token) have settled: the last
    ``STEADY_WINDOWS`` lie within ``STEADY_WINDOW_SPREAD`` of their median and none of them paged."""
    last = windows[-th.STEADY_WINDOWS :]
    if len(last) < th.STEADY_WINDOWS:
        return False
    if any(f is not None and f >= th.SWAP_IN_FAULTS_PER_TOKEN for _, f in last):
        return False
    middle = statistics.median(rate for rate, _ in last)
    return middle > 0 and all(abs(rate - middle) <= th.STEADY_WINDOW_SPREAD * middle for rate, _ in last)
