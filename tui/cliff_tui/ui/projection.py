"""The projection pane: runs, slope, third-point verdict, projection and the chart."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cliff_tui.analysis.triangulation import MemoryPoint, Triangulation
from cliff_tui.events import RunFailed
from cliff_tui.records import RunResult
from cliff_tui.report.runs import RUN_COLUMNS, run_rows
from cliff_tui.report.triangulation import fmt_slope, kv_ratios
from cliff_tui.store import Store
from cliff_tui.units import GiB, KiB, MiB, fmt_bytes, fmt_bytes_in, fmt_tokens

_COLORS = [("cyan", "red"), ("green", "magenta"), ("blue", "yellow")]
# The pane is narrow: model (in the title), depth (n_ctx says it) and drop (vs trend says more) go.
TABLE_COLUMNS = [c for c in RUN_COLUMNS if c[0] not in ("model", "depth", "drop")]
# The x axis spans at most REACH times the deepest point: wider, the points would share a column.
REACH = 8
X_TICK_COLUMNS = 16  # about one x tick per this many columns
Y_TICK_ROWS = 2.5  # about one y tick per this many rows
Y_MARGIN = 0.06  # of the data's height, above and below
SHORT_TITLES = {"mem_base": "base", "mem_peak": "peak", "shared": "shared", "tok_s": "tok/s", "vs_trend": "Δtrend"}


def runs_table(results: Sequence[RunResult], failures: Sequence[RunFailed]) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="bold", expand=False)
    for key, title in TABLE_COLUMNS:
        table.add_column(
            SHORT_TITLES.get(key, title), justify="left" if key in ("kv", "verdict") else "right", no_wrap=True
        )
    for row in run_rows(results):
        style = {"red": "red", "amber": "yellow"}.get(row["verdict"], "")
        table.add_row(*(Text(row[key]) for key, _ in TABLE_COLUMNS), style=style)  # a str cell is markup
    for f in failures:
        if f.kind == "does_not_fit":
            table.add_row(
                "",
                f"{f.n_ctx:,}" if f.n_ctx else "?",
                f"{f.depth:,}" if f.depth else "?",
                "does not fit",
                *[""] * (len(TABLE_COLUMNS) - 4),
                style="red",
            )
    return table


def summary(tris: dict[str, Triangulation]) -> Text:
    text = Text()
    for key, tri in tris.items():
        p = tri.projection
        text.append(f"{key}: ", style="bold")
        verdict_style = "red" if tri.wall_near or tri.does_not_fit_at else "green" if tri.checks else ""
        text.append(f"{tri.verdict}\n", style=verdict_style)
        text.append(
            f"  touched {fmt_slope(tri.touched, short=True)} · allocated {fmt_slope(tri.allocated, short=True)}"
        )
        if tri.theory_bytes_per_token:
            text.append(f" · theory KV {tri.theory_bytes_per_token / KiB:.2f} KiB/tok")
        text.append("\n")
        if p.projected_bytes is not None:
            fits = {True: ("fits", "green"), False: ("does NOT fit", "red"), None: ("", "")}[p.fits]
            text.append(f"  at {p.target:,} tokens: {p.formula} ")
            text.append(f"{fits[0]}\n", style=fits[1])
        if p.capacity_bytes is not None:
            text.append(f"  {p.tier} {fmt_bytes(p.capacity_bytes)} − reserve {fmt_bytes(p.reserve_bytes)}")
        if p.max_context is not None:
            text.append(" → largest context before the cliff: ")
            text.append(f"{p.max_context:,} tokens", style="bold")
            if not p.by_capacity:
                text.append(f", limited by the {p.limited_by}")
        text.append("\n")
        if p.trained_note:
            text.append(f"  {p.trained_note}\n", style="yellow")
    for ratio in kv_ratios(tris):
        m = ratio["measured_touched"]
        text.append(
            f"  {ratio['types']}: measured {'–' if m is None else f'{m:.2f}'} (expected {ratio['expected']:.2f})\n"
        )
    return text


def chart(tris: dict[str, Triangulation], width: int, height: int, color: bool = True) -> Text:
    """Memory against context: measured points, the fitted line, the capacity and where they meet.

    The x axis spans the measured points, the target and the cliff, but never more than ``REACH``
    times the deepest point: a cliff or capacity beyond the chart is named below it."""
    series = {key: tri for key, tri in tris.items() if _measured(tri)}
    if not series:
        return Text("")
    import plotext as plt  # only when there is a chart to draw: it is a slow import

    deepest = max(pt.n_ctx for tri in series.values() for pt in _measured(tri))
    x = _x_axis(series, deepest, width)
    capacity = _usable_capacity(tris)
    y, capacity_shown = _y_axis(series, x, capacity, height)
    plt.clf()
    plt.limitsize(False, False)  # the pane's width, not the terminal's that plotext read at import
    plt.plotsize(max(width, 30), max(height, 6))
    plt.theme("clear")
    _draw_series(plt, series, x, color)
    if capacity_shown:
        plt.plot([x.lo, x.hi], [capacity, capacity], color="yellow" if color else "default", label="capacity")
    notes = _mark_cliffs(plt, series, x, y, capacity if capacity_shown else None, width, color)
    if capacity is not None and not capacity_shown:
        notes.append(f"{'↑' if capacity > y.hi else '↓'} capacity {fmt_bytes(capacity)} (off the chart)")
    plt.xticks(list(x.ticks), list(x.labels))
    plt.yticks(list(y.ticks), list(y.labels))
    plt.xlim(x.lo, x.hi)
    plt.ylim(y.lo, y.hi)
    plt.xlabel("context (tokens)")
    text = Text.from_ansi(plt.build())
    for note in notes:
        text.append("\n" + note, style="dim")
    return text


def _draw_series(plt, series: dict[str, Triangulation], x: Axis, color: bool) -> None:
    """Each cache type's fitted line, then its measured points on top; one legend line each."""
    single = len(series) == 1
    for index, (key, tri) in enumerate(series.items()):
        line_color, point_color = _COLORS[index % len(_COLORS)] if color else ("default", "default")
        if tri.touched.bytes_per_token is not None:
            plt.plot(
                [x.lo, x.hi],
                [tri.touched.at(x.lo), tri.touched.at(x.hi)],
                color=line_color,
                label="fit" if single else None,
            )
        pts = _measured(tri)
        plt.scatter(
            [pt.n_ctx for pt in pts],
            [pt.touched_bytes for pt in pts],
            marker="●",
            color=point_color,
            label="measured" if single else key,
        )


def _mark_cliffs(
    plt, series: dict[str, Triangulation], x: Axis, y: Axis, capacity: float | None, width: int, color: bool
) -> list[str]:
    """Marks each cliff on the chart; returns a line for each one past its right edge."""
    notes = []
    for key, tri in series.items():
        cliff, name = tri.projection.max_context, "cliff" if len(series) == 1 else f"{key} cliff"
        if cliff is None:
            continue
        if cliff <= x.hi:
            _mark_cliff(plt, tri, cliff, name, x, y, capacity, width, color)
        else:
            times = cliff / max(pt.n_ctx for pt in _measured(tri))
            notes.append(f"→ {name} at {cliff:,} tokens (off the chart, {times:.0f}× the deepest point)")
    return notes


ByteUnit = Literal["B", "KiB", "MiB", "GiB"]


def _measured(tri: Triangulation) -> list[MemoryPoint]:
    return [pt for pt in tri.points if pt.touched_bytes is not None]


def _x_axis(series: dict[str, Triangulation], deepest: int, width: int) -> Axis:
    cliffs = [t.projection.max_context for t in series.values() if t.projection.max_context is not None]
    wanted = [deepest, *(t.projection.target for t in series.values()), *cliffs]
    end = max(w for w in wanted if w <= REACH * deepest)
    return token_axis(end * 1.05, max(2, (width - 12) // X_TICK_COLUMNS))


def _y_axis(series: dict[str, Triangulation], x: Axis, capacity: float | None, height: int) -> tuple[Axis, bool]:
    """The axis over the points and lines, and whether the capacity is on it: only when the
    measured data still fill half the height."""
    ys = [float(pt.touched_bytes) for tri in series.values() for pt in tri.points if pt.touched_bytes is not None]
    ys += [y for tri in series.values() for y in (tri.touched.at(x.lo), tri.touched.at(x.hi)) if y is not None]
    lo, hi = min(ys), max(ys)
    if hi == lo:  # one point: halfway up from zero
        lo, hi = 0.0, 2 * hi
    shown = capacity is not None and lo - (hi - lo) <= capacity <= hi + (hi - lo)
    if shown and capacity is not None:
        lo, hi = min(lo, capacity), max(hi, capacity)
    return byte_axis(lo, hi, max(2, round((height - 4) / Y_TICK_ROWS))), shown


def _mark_cliff(
    plt, tri: Triangulation, cliff: int, name: str, x: Axis, y: Axis, capacity: float | None, width: int, color: bool
) -> None:
    """A vertical line at the cliff and a labelled point where the fitted line meets it."""
    red = "red" if color else "default"
    plt.vline(cliff, red)
    at = tri.touched.at(cliff)
    at = capacity if at is None else at
    if at is not None:
        plt.scatter([cliff], [at], marker="◆", color=red)
    column = (x.hi - x.lo) / max(1, width - 12)
    left = cliff > (x.lo + x.hi) / 2
    plt.text(
        f"{name} ≈ {fmt_tokens(cliff)}",
        cliff - column if left else cliff + column,
        (y.lo + y.hi) / 2 if at is None else at,
        color=red,
        alignment="right" if left else "left",
    )


@dataclass(frozen=True)
class Axis:
    lo: float
    hi: float
    ticks: tuple[float, ...]
    labels: tuple[str, ...]


def nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    """Round ticks from at or below ``lo`` to at or above ``hi``: about ``count`` steps of 1, 2 or 5
    times a power of ten (the one nearest to an even split)."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda step: abs(math.log(step / raw)))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 9) for k in range(first, last + 1)]


def token_axis(end: float, count: int) -> Axis:
    """From zero context to the first round tick at or past ``end``, labelled ``8k``, ``16k``, ``1M``."""
    ticks = nice_ticks(0, end, count)
    return Axis(0.0, ticks[-1], tuple(ticks), tuple(fmt_tokens(t) for t in ticks))


def byte_axis(lo: float, hi: float, count: int) -> Axis:
    """``lo`` to ``hi`` with a margin, ticked at round values in the unit of the largest: ``256 MiB``, ``1.5 GiB``."""
    margin = (hi - lo) * Y_MARGIN or abs(hi) * Y_MARGIN or 1.0
    lo, hi = lo - margin, hi + margin
    units: tuple[tuple[ByteUnit, int], ...] = (("GiB", GiB), ("MiB", MiB), ("KiB", KiB))
    unit, size = next(((u, s) for u, s in units if hi >= s), ("B", 1))
    ticks = [t * size for t in nice_ticks(lo / size, hi / size, count) if lo <= t * size <= hi]
    return Axis(lo, hi, tuple(ticks), tuple(fmt_bytes_in(t, unit) for t in ticks))


def _usable_capacity(tris: dict[str, Triangulation]) -> float | None:
    """The cliff tier's capacity less the reserve, in bytes."""
    for tri in tris.values():
        p = tri.projection
        if p.capacity_bytes is not None:
            return float(p.capacity_bytes - (p.reserve_bytes or 0))
    return None


def has_chart(p: Store) -> bool:
    return any(len(t.points) for t in p.runs.triangulations().values())


def pane(p: Store, width: int, chart_height: int, color: bool = True) -> RenderableType:
    tris = p.runs.triangulations()
    parts: list[RenderableType] = []
    plan = p.runs.plan
    if plan is not None:
        depths = ", ".join(f"{d:,}" for d in plan.depths)
        parts.append(
            Text(
                f"depths {depths} · target {p.runs.target or plan.target:,} tokens"
                + (f" · {plan.note}" if plan.note else ""),
                style="dim",
            )
        )
    parts.append(runs_table(p.runs.results, p.runs.failures))
    if tris:
        parts.append(summary(tris))
        if has_chart(p):
            parts.append(chart(tris, width, chart_height, color))
    else:
        parts.append(Text("waiting for the first run to finish…", style="dim"))
    return Group(*parts)
