"""Sign 3, honestly: decode slows with depth by itself, so judge the drop against a fit.

Attention reads every cached token, so time per token grows with depth even with no spill at
all (see bench/RESULTS.md for measured curves). We fit ``ms/token ≈ a + b·depth`` on the run's shallower points and judge the deeper ones
against that line: a knee beyond the fit is the cliff, a steady decline is not.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from cliff_tui.analysis import thresholds as th
from cliff_tui.events import DecodePoint, SpeedVerdict
from cliff_tui.analysis.throttle import throttle_cause


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
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i])
              for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
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
        chunk = ordered[i:i + size]
        out.append(DecodePoint(int(statistics.median(p.depth for p in chunk)),
                               statistics.median(p.ms_per_token for p in chunk),
                               sum(p.n_tokens for p in chunk), chunk[0].phase))
    return out


def fit_decline(points: Sequence[DecodePoint]) -> LineFit | None:
    """The expected decline from the shallower half of the points (never a negative slope)."""
    ref = binned(reference_points(points))
    fit = robust_line([p.depth for p in ref], [p.ms_per_token for p in ref])
    if fit is None:
        return None
    if fit.slope < 0:  # noise on a flat curve
        return LineFit(intercept=statistics.median(p.ms_per_token for p in ref), slope=0.0)
    return fit


def reference_points(points: Sequence[DecodePoint]) -> list[DecodePoint]:
    ordered = sorted(points, key=lambda p: p.depth)
    if len(ordered) < 2:
        return ordered
    deepest = ordered[-1].depth
    shallow = [p for p in ordered if p.depth <= deepest / 2]
    if len(shallow) < 2:
        shallow = ordered[:-1] if len(ordered) > 2 else ordered[:1]
    return shallow


def classify_speed(
    baseline_tok_s: float | None,
    depth_tok_s: float | None,
    depth: int,
    points: Sequence[DecodePoint],
    throttle_seen: Iterable[str] = (),
) -> SpeedVerdict:
    raw_drop = _drop_pct(baseline_tok_s, depth_tok_s)
    if depth_tok_s is None or depth_tok_s <= 0:
        return SpeedVerdict("unknown", "no decode speed at depth yet", raw_drop, None, None)
    fit = fit_decline(points) if len(points) >= th.FIT_MIN_POINTS else None
    if fit is None:
        return _without_fit(raw_drop)
    expected = 1000.0 / fit.at(depth) if fit.at(depth) > 0 else None
    vs_expected = _drop_pct(expected, depth_tok_s)
    knee = find_knee(points, fit)
    causes = throttle_cause(throttle_seen)
    noise = noise_pct(points, fit)
    amber_at = max(th.SPEED_AMBER_PCT, th.SPEED_NOISE_SIGMAS * noise)
    red_at = max(th.SPEED_RED_PCT, th.SPEED_NOISE_SIGMAS * noise)
    if knee is not None or (vs_expected is not None and vs_expected >= red_at):
        where = f" near depth {knee:,}" if knee is not None else ""
        text = (f"cliff: decode fell {vs_expected:.0f}% below the depth trend{where} — the bottleneck "
                "moved to memory bandwidth / PCIe")
        return SpeedVerdict("red", text, raw_drop, expected, vs_expected, knee, causes)
    if vs_expected is not None and vs_expected >= amber_at:
        why = causes or UNEXPLAINED
        text = f"{vs_expected:.0f}% below the depth trend — likely {why}"
        return SpeedVerdict("amber", text, raw_drop, expected, vs_expected, None, why)
    text = (f"expected decline with depth (attention reads every cached token); "
            f"trend predicts {expected:.1f} tok/s, measured {depth_tok_s:.1f}")
    if vs_expected is not None and vs_expected >= th.SPEED_AMBER_PCT:
        text += f" — within this run's noise (±{noise:.0f}%)"
    return SpeedVerdict("ok", text, raw_drop, expected, vs_expected, None, causes)


def noise_pct(points: Sequence[DecodePoint], fit: LineFit) -> float:
    """How far the shallow points scatter around their own trend, in % (a robust sigma)."""
    ref = binned(reference_points(points))
    rel = [abs(p.ms_per_token - fit.at(p.depth)) / fit.at(p.depth) for p in ref if fit.at(p.depth) > 0]
    if len(rel) < 3:
        return 0.0
    return 1.4826 * statistics.median(rel) * 100


def find_knee(points: Sequence[DecodePoint], fit: LineFit) -> int | None:
    """First point past the reference set whose speed is ≥ 50 % below the trend and is
    confirmed by the next point (one slow window alone may be a hiccup)."""
    ref_ids = {id(p) for p in reference_points(points)}
    beyond = [p for p in sorted(points, key=lambda p: p.depth) if id(p) not in ref_ids]
    slow = [_drop_pct(1000.0 / fit.at(p.depth), 1000.0 / p.ms_per_token) >= th.SPEED_RED_PCT
            for p in beyond]
    for i in range(len(slow) - 1):
        if slow[i] and slow[i + 1]:
            return beyond[i].depth
    return None


UNEXPLAINED = ("not depth alone: background load, or the KV cache outgrowing a faster memory level "
               "(no throttling reported)")


def _without_fit(raw_drop: float | None) -> SpeedVerdict:
    if raw_drop is None:
        return SpeedVerdict("unknown", "no baseline to compare with", None, None, None)
    text = f"raw drop {raw_drop:.0f}% (too few depths to separate the cliff from normal decline)"
    level = "amber" if raw_drop >= th.SPEED_RED_PCT else "ok"
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
