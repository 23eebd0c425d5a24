"""The projection pane: runs, slope, third-point verdict, projection and the chart."""

from __future__ import annotations

from typing import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cliff_tui.analysis.triangulation import Triangulation
from cliff_tui.events import RunFailed, RunResult
from cliff_tui.pipeline import Pipeline
from cliff_tui.report import RUN_COLUMNS, fmt_slope, kv_ratios, run_rows
from cliff_tui.units import MiB, fmt_bytes

_COLORS = [("cyan", "red"), ("green", "magenta"), ("blue", "yellow")]
# The pane is narrow: model (in the title), depth (n_ctx says it) and drop (vs trend says more) go.
TABLE_COLUMNS = [c for c in RUN_COLUMNS if c[0] not in ("model", "depth", "drop")]
SHORT_TITLES = {"mem_base": "base", "mem_peak": "peak", "shared": "shared", "tok_s": "tok/s", "vs_trend": "Δtrend"}


def runs_table(results: Sequence[RunResult], failures: Sequence[RunFailed]) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="bold", expand=False)
    for key, title in TABLE_COLUMNS:
        table.add_column(SHORT_TITLES.get(key, title), justify="left" if key in ("kv", "verdict") else "right",
                         no_wrap=True)
    for row in run_rows(results):
        style = {"red": "red", "amber": "yellow"}.get(row["verdict"], "")
        table.add_row(*(Text(row[key]) for key, _ in TABLE_COLUMNS), style=style)  # a str cell is markup
    for f in failures:
        if f.kind == "does_not_fit":
            table.add_row("", f"{f.n_ctx:,}" if f.n_ctx else "?", f"{f.depth:,}" if f.depth else "?",
                          "does not fit", *[""] * (len(TABLE_COLUMNS) - 4), style="red")
    return table


def summary(tris: dict[str, Triangulation]) -> Text:
    text = Text()
    for key, tri in tris.items():
        p = tri.projection
        text.append(f"{key}: ", style="bold")
        verdict_style = "red" if tri.wall_near or tri.does_not_fit_at else "green" if tri.checks else ""
        text.append(f"{tri.verdict}\n", style=verdict_style)
        text.append(f"  touched {fmt_slope(tri.touched, short=True)} · allocated {fmt_slope(tri.allocated, short=True)}")
        if tri.theory_bytes_per_token:
            text.append(f" · theory KV {tri.theory_bytes_per_token / 1024:.2f} KiB/tok")
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
            text.append(f" ({p.limited_by})")
        text.append("\n")
    for ratio in kv_ratios(tris):
        m = ratio["measured_touched"]
        text.append(f"  {ratio['types']}: measured {'–' if m is None else f'{m:.2f}'}"
                    f" (expected {ratio['expected']:.2f})\n")
    return text


def chart(tris: dict[str, Triangulation], width: int, height: int, color: bool = True) -> Text:
    """Memory against context: measured points, the fitted line, capacity, and the cliff.

    The x axis spans the measured points and the target; a cliff or capacity far beyond that
    is named below the chart instead of squashing the points into one column."""
    import plotext as plt  # only when there is a chart to draw: it is a slow import

    plt.clf()
    plt.plotsize(max(width, 30), max(height, 8))
    plt.theme("clear")
    measured = [pt for tri in tris.values() for pt in tri.points if pt.touched_bytes is not None]
    if not measured:
        return Text("")
    span = max(max(pt.n_ctx for pt in measured), *(t.projection.target for t in tris.values())) * 1.1
    notes = []
    top = 0.0
    for index, (key, tri) in enumerate(tris.items()):
        pts = [pt for pt in tri.points if pt.touched_bytes is not None]
        if not pts:
            continue
        line_color, point_color = _COLORS[index % len(_COLORS)] if color else ("default", "default")
        slope = tri.touched
        if slope.bytes_per_token is not None:  # the line first: the measured points go on top
            ends = [0, span]
            ys = [(slope.intercept_bytes + x * slope.bytes_per_token) / MiB for x in ends]
            plt.plot(ends, ys, label=f"{key} fit", color=line_color)
            top = max(top, *ys)
        plt.scatter([pt.n_ctx for pt in pts], [pt.touched_bytes / MiB for pt in pts], marker="●",
                    label=f"{key} measured", color=point_color)
        top = max(top, *(pt.touched_bytes / MiB for pt in pts))
        cliff = tri.projection.max_context
        if cliff is not None and cliff <= span:
            plt.vline(cliff, "red" if color else "default")
        elif cliff is not None:
            notes.append(f"{key}: cliff at {cliff:,} tokens, off the chart")
    capacity = _usable_capacity(tris)
    if capacity is not None and capacity <= top * 1.5:
        plt.hline(capacity, "yellow" if color else "default")
    elif capacity is not None:
        notes.append(f"capacity {fmt_bytes(capacity * MiB)}, off the chart")
    plt.xlabel("context (tokens)")
    plt.ylabel("MiB")
    plt.xlim(0, span)
    text = Text.from_ansi(plt.build())
    if notes:
        text.append("\n" + " · ".join(notes), style="dim")
    return text


def _usable_capacity(tris: dict[str, Triangulation]) -> float | None:
    for tri in tris.values():
        p = tri.projection
        if p.capacity_bytes is not None:
            return (p.capacity_bytes - (p.reserve_bytes or 0)) / MiB
    return None


def pane(p: Pipeline, width: int, chart_height: int, color: bool = True) -> RenderableType:
    tris = p.triangulations()
    parts: list[RenderableType] = []
    plan = p.plan
    if plan is not None:
        depths = ", ".join(f"{d:,}" for d in plan.depths)
        parts.append(Text(f"depths {depths} · target {p.target or plan.target:,} tokens"
                          + (f" · {plan.note}" if plan.note else ""), style="dim"))
    parts.append(runs_table(p.results, p.failures))
    if tris:
        parts.append(summary(tris))
        if any(len(t.points) for t in tris.values()):
            parts.append(chart(tris, width, chart_height, color))
    else:
        parts.append(Text("waiting for the first run to finish…", style="dim"))
    return Group(*parts)
