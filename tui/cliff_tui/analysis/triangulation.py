"""Triangulation: memory per token from several contexts, a check that the line is a line, and
the projection to the context a user wants.

Memory is a function of n_ctx (llama.cpp reserves the whole KV cache when it creates the
context), so each point is one run's context size against the memory it used on the tier that
holds the KV cache: dedicated VRAM when the buffer log puts the KV on a GPU, the worker's
resident memory when it lives in RAM (then swap is the cliff).

    projected bytes = intercept + n_ctx × slope      (intercept: model + fixed buffers)
    shown as:  model MiB + tokens × KiB/token ÷ 1024 = MiB
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.buffers import gpu_index_of
from cliff_tui.analysis.speed import fit_line
from cliff_tui.analysis.theory import N_CTX_PAD
from cliff_tui.analysis.trained_context import past_trained_note
from cliff_tui.events import RunFailed, TriangulationPlanned
from cliff_tui.records import CGROUP_TIER, ModelInfo, RunResult
from cliff_tui.units import KiB, MiB, fmt_bytes


@dataclass(frozen=True)
class MemoryPoint:
    n_ctx: int
    depth: int
    allocated_bytes: int
    touched_bytes: int | None
    noise_bytes: float | None
    beyond_bytes: int = 0  # growth on the tier past the cliff tier during the run (swap, shared VRAM, RAM)
    beyond_tier: str = ""


@dataclass(frozen=True)
class Slope:
    bytes_per_token: float | None
    intercept_bytes: float | None
    pairwise: tuple[float, ...] = ()

    def at(self, n_ctx: float) -> float | None:
        """The line's bytes at ``n_ctx``; None without a line."""
        if self.bytes_per_token is None or self.intercept_bytes is None:
            return None
        return self.intercept_bytes + n_ctx * self.bytes_per_token

    @property
    def kib_per_token(self) -> float | None:
        return None if self.bytes_per_token is None else self.bytes_per_token / KiB

    @property
    def mib_per_1k_tokens(self) -> float | None:
        return None if self.bytes_per_token is None else self.bytes_per_token * 1000 / MiB


@dataclass(frozen=True)
class PointCheck:
    """A point predicted from the shallower ones, against its measurement: ``figure`` says which
    (allocated memory is exact; touched memory is measured, with its own noise)."""

    n_ctx: int
    predicted_bytes: float
    actual_bytes: float
    tolerance_bytes: float
    figure: Literal["touched", "allocated"] = "touched"
    beyond_bytes: int = 0
    beyond_tier: str = ""

    @property
    def wall(self) -> bool:
        """The cliff tier flattened (less than the line) while the tier past it took the growth."""
        return self.miss_bytes < -self.tolerance_bytes and self.beyond_bytes > th.SWAP_SPILL_BYTES

    def describe(self) -> str:
        direction = "below" if self.miss_bytes < 0 else "above"
        return (
            f"{self.figure} memory at n_ctx {self.n_ctx:,} was {self.error_pct:.1f}% {direction} the line "
            f"through the shallower points (tolerance {fmt_bytes(self.tolerance_bytes)})"
        )

    @property
    def miss_bytes(self) -> float:
        return self.actual_bytes - self.predicted_bytes

    @property
    def error_pct(self) -> float:
        return abs(self.miss_bytes) / self.actual_bytes * 100 if self.actual_bytes else math.inf

    @property
    def on_line(self) -> bool:
        return abs(self.miss_bytes) <= self.tolerance_bytes


@dataclass(frozen=True)
class Projection:
    tier: str
    target: int
    projected_bytes: float | None
    capacity_bytes: int | None
    reserve_bytes: int | None
    max_context: int | None
    limited_by: str
    formula: str
    trained_note: str | None = None  # the largest context or the target is past the trained context

    @property
    def by_capacity(self) -> bool:
        """Whether the largest context is the tier's capacity minus the reserve (not a wall or a
        failed allocation)."""
        return self.limited_by == f"{self.tier} minus reserve"

    @property
    def fits(self) -> bool | None:
        if self.projected_bytes is None or self.capacity_bytes is None:
            return None
        return self.projected_bytes <= self.capacity_bytes - (self.reserve_bytes or 0)


@dataclass(frozen=True)
class Triangulation:
    cache_types: str
    points: tuple[MemoryPoint, ...]
    allocated: Slope
    touched: Slope
    allocated_per_device: dict[str, float]
    theory_bytes_per_token: float | None
    checks: tuple[PointCheck, ...]
    verdict: str
    wall_near: int | None
    does_not_fit_at: int | None
    projection: Projection
    allocated_checks: tuple[PointCheck, ...] = ()

    @property
    def linear(self) -> bool | None:
        return None if not self.checks else self.wall_near is None


def memory_point(result: RunResult) -> MemoryPoint:
    gpu = gpu_index_of(result.kv_device)
    devices = [d for d in _devices(result) if (gpu_index_of(d) == gpu)]
    allocated = sum(_buffer_total(result, d) for d in devices)
    if gpu is None:
        touched, noise = result.rss_peak_bytes, result.rss_noise_bytes
        beyond, tier = result.swap_delta_bytes, "swap"
    else:
        delta = next((g for g in result.gpus if g.index == gpu), None)
        touched, noise = (delta.peak_bytes if delta else None), None
        shared = (delta.shared_delta_bytes if delta else None) or 0
        rss = (result.rss_peak_bytes or 0) - (result.rss_baseline_bytes or 0)
        beyond, tier = (shared, f"GPU{gpu} shared VRAM") if shared >= rss else (rss, "RAM")
    return MemoryPoint(
        n_ctx=result.n_ctx,
        depth=result.depth,
        allocated_bytes=allocated,
        touched_bytes=touched,
        noise_bytes=noise,
        beyond_bytes=max(0, beyond),
        beyond_tier=tier,
    )


def _devices(result: RunResult) -> set[str]:
    return set(result.kv_buffers) | set(result.compute_buffers) | set(result.model_buffers)


def _buffer_total(result: RunResult, device: str) -> int:
    return (
        result.kv_buffers.get(device, 0) + result.compute_buffers.get(device, 0) + result.model_buffers.get(device, 0)
    )


def slope_of(xs: Sequence[int], ys: Sequence[float]) -> Slope:
    fit = fit_line(xs, ys)
    pairs = sorted(zip(xs, ys))
    pairwise = tuple((b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(pairs) if b[0] != a[0])
    if fit is None:
        return Slope(None, None, pairwise)
    return Slope(fit.slope, fit.intercept, pairwise)


def check_points(points: Sequence[MemoryPoint]) -> tuple[list[PointCheck], int | None]:
    """Predict each point past the second from the line through the points before it.

    Returns the checks and the index of the first point that is a wall (its touched memory below
    the line while another tier grew), if any: a miss alone, in either direction, is not one."""
    ordered = sorted((p for p in points if p.touched_bytes is not None), key=lambda p: p.n_ctx)
    checks: list[PointCheck] = []
    for i in range(2, len(ordered)):
        before = ordered[:i]
        fit = fit_line([p.n_ctx for p in before], [_touched(p) for p in before])
        if fit is None:
            continue
        point = ordered[i]
        check = PointCheck(
            point.n_ctx,
            fit.at(point.n_ctx),
            float(_touched(point)),
            _tolerance([*before, point], point),
            "touched",
            point.beyond_bytes,
            point.beyond_tier,
        )
        checks.append(check)
        if check.wall:
            return checks, i
    return checks, None


def check_allocated(points: Sequence[MemoryPoint]) -> list[PointCheck]:
    """llama.cpp's own allocation, which is exact: each point against the line before it."""
    ordered = sorted(points, key=lambda p: p.n_ctx)
    checks = []
    for i in range(2, len(ordered)):
        fit = fit_line([p.n_ctx for p in ordered[:i]], [p.allocated_bytes for p in ordered[:i]])
        if fit is not None:
            point = ordered[i]
            tolerance = max(th.ALLOCATED_FLOOR_BYTES, th.ALLOCATED_FLOOR_PCT / 100 * point.allocated_bytes)
            checks.append(
                PointCheck(point.n_ctx, fit.at(point.n_ctx), float(point.allocated_bytes), tolerance, "allocated")
            )
    return checks


def _touched(point: MemoryPoint) -> int:
    """The touched bytes of a point kept for having them."""
    if point.touched_bytes is None:
        raise ValueError(f"the point at n_ctx {point.n_ctx} has no touched bytes")
    return point.touched_bytes


def _tolerance(points: Sequence[MemoryPoint], point: MemoryPoint) -> float:
    noises = [p.noise_bytes for p in points if p.noise_bytes is not None]
    noise = math.sqrt(sum(n * n for n in noises) / len(noises)) if noises else 0.0
    return max(th.THIRD_POINT_SIGMAS * noise, th.THIRD_POINT_FLOOR_PCT / 100 * _touched(point))


def locate_wall(points: Sequence[MemoryPoint], first_off: int) -> int:
    """Where the curve leaves the line: the crossing of the lines before and after the knee when
    two points follow it, else halfway between the last point on the line and the first off it."""
    ordered = sorted((p for p in points if p.touched_bytes is not None), key=lambda p: p.n_ctx)
    lo, hi = ordered[first_off - 1].n_ctx, ordered[first_off].n_ctx
    before = fit_line([p.n_ctx for p in ordered[:first_off]], [_touched(p) for p in ordered[:first_off]])
    after = fit_line([p.n_ctx for p in ordered[first_off:]], [_touched(p) for p in ordered[first_off:]])
    if before and after and after.slope != before.slope:
        x = (before.intercept - after.intercept) / (after.slope - before.slope)
        if lo <= x <= hi:
            return round(x)
    return (lo + hi) // 2


@dataclass(frozen=True)
class Capacity:
    tier: str
    bytes: int | None
    reserve_bytes: int | None


def capacity_for(kv_device: str | None, plan: TriangulationPlanned | None, reserve: int | None) -> Capacity:
    gpu = gpu_index_of(kv_device)
    if gpu is None:
        total = plan.ram_available_bytes if plan else None
        tier = plan.ram_tier if plan else "RAM (swap beyond)"
    else:
        totals = plan.vram_total_bytes if plan else ()
        total = totals[gpu] if gpu < len(totals) else None
        tier = f"GPU{gpu} dedicated VRAM"
    if total is None:
        return Capacity(tier, None, reserve)
    in_cgroup = gpu is None and plan is not None and plan.ram_tier.startswith(CGROUP_TIER)
    return Capacity(tier, total, th.default_reserve(total, in_cgroup) if reserve is None else reserve)


def triangulate(
    results: Sequence[RunResult],
    failures: Sequence[RunFailed] = (),
    plan: TriangulationPlanned | None = None,
    theory_bytes_per_token: float | None = None,
    target: int | None = None,
    model: ModelInfo | None = None,
) -> Triangulation:
    points = tuple(sorted((memory_point(r) for r in results), key=lambda p: p.n_ctx))
    kv_device = next((r.kv_device for r in results if r.kv_device), None)
    cache_types = _cache_types(results)
    allocated = slope_of([p.n_ctx for p in points], [p.allocated_bytes for p in points])
    checks, first_off = check_points(points)
    on_line = [p for p in points if p.touched_bytes is not None]
    wall = None
    if first_off is not None:
        wall = locate_wall(points, first_off)
        on_line = on_line[:first_off]
    touched = slope_of([p.n_ctx for p in on_line], [_touched(p) for p in on_line])
    no_fit = sorted((f for f in failures if f.kind == "does_not_fit" and f.n_ctx), key=lambda f: f.n_ctx or 0)
    does_not_fit_at = no_fit[0].n_ctx if no_fit else None
    no_fit_why = "OOM kill" if no_fit and no_fit[0].oom is not None else "failed allocation"
    allocated_checks = check_allocated(points)
    verdict = _verdict(points, checks, allocated_checks, wall, does_not_fit_at)
    capacity = capacity_for(kv_device, plan, plan.reserve_bytes if plan else None)
    target = target or (plan.target if plan else None) or (points[-1].n_ctx * 2 if points else 0)
    projection = project(
        touched if touched.bytes_per_token is not None else allocated,
        capacity,
        target,
        wall,
        does_not_fit_at,
        no_fit_why,
    )
    if model is not None:
        projection = dataclasses.replace(projection, trained_note=trained_note(model, projection))
    return Triangulation(
        cache_types=cache_types,
        points=points,
        allocated=allocated,
        touched=touched,
        allocated_per_device=_per_device_slopes(results),
        theory_bytes_per_token=theory_bytes_per_token,
        checks=tuple(checks),
        verdict=verdict,
        wall_near=wall,
        does_not_fit_at=does_not_fit_at,
        projection=projection,
        allocated_checks=tuple(allocated_checks),
    )


def _verdict(
    points: Sequence[MemoryPoint],
    checks: Sequence[PointCheck],
    allocated: Sequence[PointCheck],
    wall: int | None,
    does_not_fit_at: int | None,
) -> str:
    if wall is not None:
        check = next(c for c in checks if c.wall)
        return (
            f"memory wall near {wall:,} tokens: {check.describe()} while {check.beyond_tier} grew "
            f"{fmt_bytes(check.beyond_bytes)}"
        )
    if does_not_fit_at is not None:
        return (
            f"linear up to {points[-1].n_ctx:,} tokens; does not fit at {does_not_fit_at:,}"
            if points
            else f"does not fit at {does_not_fit_at:,} tokens"
        )
    if not checks:
        return f"not enough points ({len(points)} of 3) to check the line"
    notes = [f"{c.describe()}, and no other tier grew: noise, not a wall" for c in checks if not c.on_line]
    notes += [c.describe() for c in allocated if not c.on_line]
    return "linear" + (f" ({'; '.join(notes)})" if notes else "")


def project(
    slope: Slope,
    capacity: Capacity,
    target: int,
    wall: int | None,
    does_not_fit_at: int | None,
    no_fit_why: str = "failed allocation",
) -> Projection:
    per_token, intercept = slope.bytes_per_token, slope.intercept_bytes
    if per_token is None or intercept is None:
        return Projection(
            capacity.tier,
            target,
            None,
            capacity.bytes,
            capacity.reserve_bytes,
            _bound_only(wall, does_not_fit_at),
            "bound only",
            "needs two points",
        )
    projected = intercept + target * per_token
    formula = (
        f"{intercept / MiB:,.0f} MiB + {target:,} tok × {per_token / KiB:.2f} KiB/tok ÷ 1024"
        f" = {projected / MiB:,.0f} MiB"
    )
    limit, limited_by = None, "no growth measured"
    if capacity.bytes is not None and per_token > 0:
        usable = capacity.bytes - (capacity.reserve_bytes or 0)
        limit, limited_by = int((usable - intercept) / per_token), f"{capacity.tier} minus reserve"
    for bound, why in ((wall, "memory wall"), (does_not_fit_at, no_fit_why)):
        if bound is not None and (limit is None or bound - N_CTX_PAD < limit):
            limit, limited_by = bound - N_CTX_PAD, why
    if limit is not None:
        limit = max(0, limit // N_CTX_PAD * N_CTX_PAD)
    return Projection(
        capacity.tier, target, projected, capacity.bytes, capacity.reserve_bytes, limit, limited_by, formula
    )


def trained_note(model: ModelInfo, p: Projection) -> str | None:
    """Where the largest context (else the target) is past the model's trained context, the words."""
    largest = None if p.max_context is None else f"the largest context, {p.max_context:,} tokens,"
    return (largest and past_trained_note(model, p.max_context, largest)) or past_trained_note(
        model, p.target, f"the target, {p.target:,} tokens,"
    )


def _bound_only(wall: int | None, does_not_fit_at: int | None) -> int | None:
    bounds = [b - N_CTX_PAD for b in (wall, does_not_fit_at) if b is not None]
    return max(0, min(bounds) // N_CTX_PAD * N_CTX_PAD) if bounds else None


def _per_device_slopes(results: Sequence[RunResult]) -> dict[str, float]:
    devices = set.intersection(*(_devices(r) for r in results)) if results else set()
    out = {}
    for device in sorted(devices):
        slope = slope_of([r.n_ctx for r in results], [_buffer_total(r, device) for r in results])
        if slope.bytes_per_token is not None:
            out[device] = slope.bytes_per_token
    return out


def _cache_types(results: Sequence[RunResult]) -> str:
    return results[0].settings.cache_label if results else "?"
