"""Store state → Rich renderables and segments. Formatting only: every number comes from the core."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.cpu_quota import QuotaUse
from cliff_tui.analysis.signs import SIGNS, SignState
from cliff_tui.events import Sample
from cliff_tui.records import FoundServer, GpuReading, KvBlocks, ProcessReading
from cliff_tui.store import Store
from cliff_tui.text import inert
from cliff_tui.ui.graph import Graph, line_cells, zoom_range
from cliff_tui.units import GiB, MiB, fmt_bytes, fmt_duration, fmt_rate, fmt_share, fmt_tok_s

if TYPE_CHECKING:
    from cliff_tui.analysis.gauge import CliffGauge
    from cliff_tui.ui.widgets import Part

GREEN, AMBER, RED, DIM = Style(color="green"), Style(color="yellow"), Style(color="red"), Style(dim=True)
CYAN = Style(color="cyan")
BOLD = Style(bold=True)
Parts = list[tuple[str, Style | None]]  # one line of styled text
LEVEL_MARK = {
    "ok": ("✓", GREEN),
    "info": ("i", Style(color="cyan")),
    "amber": ("▲", AMBER),
    "red": ("✖", RED),
    "na": ("–", DIM),
}
NO_SOURCE = (
    "no token source — `cliff-tui run` loads a model and measures here; "
    "`cliff-tui attach` watches your llama-server or Ollama"
)


def fill_style(fraction: float) -> Style:
    if fraction >= th.FILL_RED:
        return RED
    if fraction >= th.FILL_AMBER:
        return AMBER
    return GREEN


@dataclass(frozen=True)
class Scaled:
    """A graph with the labels of its scale: the top and bottom values, and what the scale is."""

    graph: Graph
    top: str
    bottom: str
    caption: str

    def label(self, row: int, rows: int) -> str:
        if rows == 1:
            return f"{self.bottom}–{self.top} {self.caption}"
        if row == 0:
            return self.top
        if row == rows - 1:
            return self.bottom
        return self.caption if row == rows // 2 else ""


@dataclass(frozen=True)
class Panel:
    """One tier: a headline, its history on its capacity's scale and zoomed to the session's
    range (each labelled), a note."""

    key: str
    title: str
    value: str
    graphs: tuple[Scaled, ...] = ()
    note: str = ""
    note_style: Style = DIM
    version: int = 0  # changes when its graph's columns do
    rows: int = 1  # of graph

    @property
    def n_lines(self) -> int:
        return 1 + (self.rows if self.graphs else 0) + (1 if self.note else 0)

    @property
    def parts(self) -> tuple[Part, ...]:
        """Its lines in parts, each with a key (equal keys draw equal lines): the headline and
        the note change with every sample, the graph once a column, and each is rebuilt alone.
        The lines are segments cropped to the width, drawn without a Rich layout pass."""
        parts: list[Part] = [
            ((self.title, self.value), lambda width: [fit_line([(self.title, BOLD), ("  " + self.value, None)], width)])
        ]
        if self.graphs:
            parts.append(
                ((self.title, self.version, self.rows), lambda width: _graph_lines(self.graphs, width, self.rows))
            )
        if self.note:
            parts.append(
                ((self.note, str(self.note_style)), lambda width: [fit_line([(self.note, self.note_style)], width)])
            )
        return tuple(parts)


GRAPH_GAP = 2
TWO_GRAPHS_MIN_WIDTH = 60  # narrower: the zoomed graph alone (the headline says how full the tier is)


def _graph_lines(graphs: tuple[Scaled, ...], width: int, rows: int) -> list[list[Segment]]:
    if not graphs:
        return []
    if width < TWO_GRAPHS_MIN_WIDTH:
        graphs = graphs[-1:]
    label_widths = [max(len(g.label(r, rows)) for r in range(rows)) + 1 for g in graphs]
    room = max(0, width - sum(label_widths) - GRAPH_GAP * (len(graphs) - 1))
    # the capacity's graph a third of the room, the zoom the rest
    widths = [room] if len(graphs) == 1 else [room // 3, room - room // 3]
    blocks = [g.graph.segments(w, rows) for g, w in zip(graphs, widths)]
    lines = []
    for row in range(rows):
        line: list[Segment] = []
        for i, (g, block) in enumerate(zip(graphs, blocks)):
            if i:
                line.append(Segment(" " * GRAPH_GAP))
            line += block[row]
            line.append(Segment(" " + g.label(row, rows).ljust(label_widths[i] - 1), DIM))
        lines.append(line if room else fit_line_segments(line, width))
    return lines


def graph_rows(height: int, panels: list[Panel], most: int = 24) -> int:
    """Rows of graph per tier so that the tiers fill ``height`` lines, at least one."""
    graphed = sum(1 for panel in panels if panel.graphs)
    fixed = sum(panel.n_lines - (panel.rows if panel.graphs else 0) for panel in panels)
    if not graphed:
        return 1
    return max(1, min(most, (height - fixed) // graphed))


def with_rows(panels: list[Panel], rows: int) -> list[Panel]:
    return [replace(panel, rows=rows) for panel in panels]


def fit_line_segments(segments: list[Segment], width: int) -> list[Segment]:
    if line_cells(segments) <= width:
        return segments
    return Segment.adjust_line_length(segments, width)


def fit_line(parts: Parts, width: int) -> list[Segment]:
    """One line of styled parts, cut with an ellipsis where it is wider than ``width``. Segments
    are never markup; ``inert`` keeps a control character that got past the boundaries off the screen."""
    segments = [Segment(inert(text), style) for text, style in parts if text]
    if line_cells(segments) <= width:
        return segments
    if width <= 0:
        return []
    cut, style = Segment.adjust_line_length(segments, width - 1), segments[-1].style
    return [*cut, Segment("…", cut[-1].style if cut else style)]


def panels(p: Store, source_hint: str = NO_SOURCE, per_column: int = 1) -> list[Panel]:
    """The tiers, each graphed ``per_column`` samples a column (the app makes a column a second:
    a graph then moves once a second, and in between only its newest column changes)."""
    s = p.machine.latest
    if s is None:
        return [Panel("wait", "waiting", "for the first sample…", ())]
    out: list[Panel] = []
    for gpu in s.gpus:
        out.append(_vram_panel(p, gpu, per_column))
    if s.gpus:
        out.append(_shared_panel(p, s, per_column))
    out.append(_ram_panel(p, s, per_column))
    out.append(_swap_panel(p, s, per_column))
    if s.process is not None:
        out.append(_process_panel(p, s, s.process, per_column))
    if (use := p.machine.quota_use) is not None:
        out.append(_quota_panel(use, s.process))
    out.append(_tokens_panel(p, source_hint))
    return out


@lru_cache(maxsize=8)
def wrapped(text: str, style: Style | None, width: int) -> list[list[Segment]]:
    """A paragraph as lines of at most ``width`` cells, broken between words as Rich breaks them
    (a word longer than a line is cut). Kept for the few texts and widths asked for lately: a
    screen asks on every frame."""
    if width <= 0:
        return []
    console = _console()
    return console.render_lines(Text(inert(text), style=style or ""), console.options.update_width(width), pad=False)


@lru_cache(maxsize=1)
def _console() -> Console:
    """A console that lays out text and prints nothing."""
    return Console(file=io.StringIO(), width=80)


def _byte_graphs(
    p: Store, name: str, capacity: int | None, per_column: int, cliff: bool = False, width: int = 256
) -> tuple[Scaled, ...]:
    """A byte series on its tier's scale (the cliff line on it where this is the cliff tier) and
    zoomed around the session's own range, ``per_column`` samples a column."""
    values = p.history.get(name).columns(width, per_column)
    out = []
    if capacity:
        mark = capacity - th.default_reserve(capacity) if cliff else None
        style: Callable[[float], Style] | None = lambda v: fill_style(v / capacity)  # noqa: E731
        out.append(
            Scaled(
                Graph(values, 0, capacity, style, DIM, mark),
                fmt_bytes(capacity),
                "0",
                "cliff ╌" if mark is not None else "capacity",
            )
        )
    top = max((v for v in values if v is not None), default=0)
    lo, hi = zoom_range(values, ZOOM_MIN_SPAN, GiB if top >= GiB else MiB)  # round ends in the unit shown
    style = (lambda v: fill_style(v / capacity)) if capacity else None
    out.append(Scaled(Graph(values, lo, hi, style, DIM), fmt_bytes(hi), fmt_bytes(lo), "zoom"))
    return tuple(out)


ZOOM_MIN_SPAN = 16 * MiB


def _version(p: Store, name: str, per_column: int) -> int:
    return p.history.get(name).columns_version(per_column)


def _vram_panel(p: Store, g: GpuReading, per_column: int) -> Panel:
    used, total = g.vram_used_bytes, g.vram_total_bytes
    value = f"{fmt_bytes(used)} / {fmt_bytes(total)}"
    if used is not None and total:
        value += f"  {used / total:.0%}"
    extras = []
    if g.util_pct is not None:
        extras.append(f"util {g.util_pct:.0f}%")
    if g.temperature_c is not None:
        extras.append(f"{g.temperature_c:.0f}°C")
    if g.pcie_rx_bytes_s is not None:
        extras.append(f"PCIe rx {fmt_rate(g.pcie_rx_bytes_s)} tx {fmt_rate(g.pcie_tx_bytes_s)}")
    if g.vram_reserved_bytes:
        extras.append(f"reserved {fmt_bytes(g.vram_reserved_bytes)}")
    note = "  ".join(extras)
    style = DIM
    if g.throttle_reasons and set(g.throttle_reasons) - {"idle"}:
        note = f"throttling: {', '.join(g.throttle_reasons)}  " + note
        style = AMBER
    if used is None:
        note, style = g.reasons.get("vram_used_bytes", "n/a"), AMBER
    return Panel(
        f"gpu{g.index}",
        f"GPU{g.index} VRAM",
        f"{value}  · {g.name}",
        _byte_graphs(p, f"gpu{g.index}.vram", total, per_column, cliff=True),
        note,
        style,
        _version(p, f"gpu{g.index}.vram", per_column),
    )


def _shared_panel(p: Store, s: Sample, per_column: int) -> Panel:
    known = [g for g in s.gpus if g.shared_used_bytes is not None]
    if not known:
        reason = next(
            (why for g in s.gpus if (why := g.reasons.get("shared_used_bytes"))),
            "not available on this platform",
        )
        return Panel("shared", "Shared VRAM", "n/a", (), reason)
    g = max(known, key=lambda x: x.shared_used_bytes or 0)
    hi = g.shared_total_bytes or s.ram.total_bytes
    value = f"{fmt_bytes(g.shared_used_bytes)}" + (
        f" / {fmt_bytes(g.shared_total_bytes)}" if g.shared_total_bytes else ""
    )
    sign = p.signs.current.get(1)
    note, style = (sign.detail, _level_style(sign.level)) if sign else ("", DIM)
    return Panel(
        "shared",
        f"Shared VRAM (GPU{g.index})",
        value,
        _byte_graphs(p, f"gpu{g.index}.shared", hi, per_column),
        note,
        style,
        _version(p, f"gpu{g.index}.shared", per_column),
    )


def _ram_panel(p: Store, s: Sample, per_column: int) -> Panel:
    r, cg = s.ram, s.cgroup
    sign = p.signs.current.get(2)
    note, style = (f"{sign.headline} — {sign.detail}", _level_style(sign.level)) if sign else ("", DIM)
    used, total = s.ram_used_bytes, s.ram_capacity_bytes
    if cg is not None and used is not None:
        value = (
            f"{fmt_bytes(used)} / {fmt_bytes(total)}  {fmt_share(used, total)}"
            f"  · the machine has {fmt_bytes(r.total_bytes)}"
        )
        return Panel(
            "ram",
            cg.tier,
            value,
            _byte_graphs(p, "ram.cgroup", total, per_column, cliff=not s.gpus),
            note,
            style,
            _version(p, "ram.cgroup", per_column),
        )
    value = (
        f"{fmt_bytes(r.used_bytes)} / {fmt_bytes(r.total_bytes)}  {fmt_share(r.used_bytes, r.total_bytes)}"
        f"  · available {fmt_bytes(r.available_bytes)}"
    )
    return Panel(
        "ram",
        "System RAM",
        value,
        _byte_graphs(p, "ram.used", r.total_bytes, per_column, cliff=not s.gpus),
        note,
        style,
        _version(p, "ram.used", per_column),
    )


def _swap_panel(p: Store, s: Sample, per_column: int) -> Panel:
    sw = s.swap
    if sw.total_bytes == 0:
        return Panel(
            "swap",
            "Swap",
            "none configured",
            (),
            "no swap: past RAM the kernel kills the process instead of slowing it",
        )
    value = f"{fmt_bytes(sw.used_bytes)} / {fmt_bytes(sw.total_bytes)}  {fmt_share(sw.used_bytes, sw.total_bytes)}"
    note, style = "", DIM
    if not s.gpus and (sign := p.signs.current.get(1)) is not None:
        note, style = sign.detail, _level_style(sign.level)
    return Panel(
        "swap",
        "Swap",
        value,
        _byte_graphs(p, "swap.used", sw.total_bytes, per_column),
        note,
        style,
        _version(p, "swap.used", per_column),
    )


def _process_panel(p: Store, s: Sample, proc: ProcessReading, per_column: int) -> Panel:
    if proc.rss_bytes is None:
        return Panel("proc", f"PID {proc.pid}", "n/a", (), proc.reasons.get("rss_bytes", ""), AMBER)
    value = f"RSS {fmt_bytes(proc.total_rss_bytes)}"
    if proc.n_children:
        value += f" (incl. {proc.n_children} children {fmt_bytes(proc.children_rss_bytes)})"
    if proc.gpu_used_bytes is not None:
        value += f"  · GPU {fmt_bytes(proc.gpu_used_bytes)}"
    return Panel(
        "proc",
        f"PID {proc.pid} {proc.name or ''}".rstrip(" "),
        value,
        _byte_graphs(p, "process.rss", s.ram_capacity_bytes, per_column),
        version=_version(p, "process.rss", per_column),
    )


def _quota_panel(use: QuotaUse, process: ProcessReading | None) -> Panel:
    """The CPU time a cgroup may use (Docker --cpus, a Kubernetes limit): the followed process's,
    else cliff-tui's own; and how often its processes spent it and waited for the next period."""
    quota = use.quota
    whose = f"PID {process.pid}'s" if process is not None else "cliff-tui's own"
    value = f"{quota.words}  · cgroup {quota.path} ({whose})"
    if use.throttled_share is None:
        return Panel("cpu", "CPU quota", value, (), "counting its periods…")
    note = f"throttled in {use.throttled_share:.0%} of its periods over the last {use.seconds:.0f} s"
    if use.throttled:
        note += ": its processes spent the quota and waited for the next period"
    return Panel("cpu", "CPU quota", value, (), note, AMBER if use.throttled else DIM)


def _tokens_panel(p: Store, hint: str) -> Panel:
    series = p.history.get("tok_s")
    if not len(series):
        return Panel("tok", "Tokens/s", "–", (), hint)
    values = [v for v in series.tail(len(series)) if v is not None]
    hi = max(values) * 1.15 if values else 1
    graph = Scaled(Graph(series.tail(512), 0, hi, None, CYAN), f"{fmt_tok_s(hi)} tok/s", "0", "")
    verdict = p.speed_verdict()
    now = fmt_tok_s(series.last)
    value = f"{now} tok/s"
    view = p.runs.current
    if view is not None:
        base, depth = view.rate("baseline"), view.rate("depth")
        value += f"  · baseline {fmt_tok_s(base)} → at depth {fmt_tok_s(depth)}"
        if verdict is not None and verdict.raw_drop_pct is not None:
            value += f" ({-verdict.raw_drop_pct:+.0f}% raw)"
    sign = p.signs.current.get(3)
    note = sign.detail if sign and verdict else "measuring…"
    return Panel("tok", "Tokens/s", value, (graph,), note, _level_style(sign.level) if sign else DIM, series.appended)


def _level_style(level: str) -> Style:
    """Notes stay dim unless they carry a warning."""
    return {"amber": AMBER, "red": RED}.get(level, DIM)


def signs_line(signs: dict[int, SignState]) -> Parts:
    parts: Parts = []
    for sign in SIGNS:
        n = sign.number
        state = signs.get(n)
        if state is None:
            continue
        mark, style = LEVEL_MARK.get(state.level, ("?", DIM))
        parts += [
            (f" {mark} ", style + BOLD),
            (f"{n} {sign.name}: ", BOLD),
            (state.headline, style if state.level in ("amber", "red") else None),
            ("  ", None),
        ]
    return parts


GAUGE_CELLS = 20


def gauge_line(p: Store) -> Parts:
    """The cliff gauge: the context now against the largest before the cliff, as a bar."""
    gauge = p.gauge()
    if gauge is None:
        return []
    style = {"ok": GREEN, "amber": AMBER, "red": RED}[gauge.level]
    filled = min(GAUGE_CELLS, round(gauge.fraction * GAUGE_CELLS))
    if gauge.tokens > 0:
        filled = max(filled, 1)
    if gauge.failing:
        filled = GAUGE_CELLS
    source = {
        "measured": "measured",
        "this run": "from this run's KV cache",
        "context pool": "server flags + /slots",
        "kv blocks": "vLLM /metrics",
    }[gauge.source]
    return [
        (" cliff ", BOLD),
        ("▕", DIM),
        ("█" * filled, style),
        ("░" * (GAUGE_CELLS - filled), DIM),
        ("▏ ", DIM),
        (
            _gauge_words(gauge),
            style,
        ),
        (f" · {gauge.fraction:.0%}" if gauge.fraction >= 0.01 or not gauge.tokens else " · <1%", style),
        (f"  on {gauge.tier} ({source})", DIM),
        *([(f"; {gauge.note}", DIM)] if gauge.note else []),
    ]


def _gauge_words(gauge: CliffGauge) -> str:
    if gauge.source == "kv blocks":
        text = f"{gauge.tokens:,} of {gauge.max_context:,} KV tokens in use"
        if gauge.failing:
            text += f": vLLM preempts, {gauge.preempted} in the last minute"
        elif gauge.fraction >= 1.0:
            text += ": every block in use, preemption next"
        if gauge.seconds_to_full is not None and not gauge.failing:
            text += f", full in ~{fmt_duration(gauge.seconds_to_full)} at this growth"
        return text
    if gauge.source == "context pool":
        text = f"{gauge.tokens:,} of {gauge.max_context:,} cells in use"
        if gauge.failing:
            text += ": requests fail, no free cells (Context size has been exceeded)"
        elif gauge.level == "red":
            text += ": the context is full"
        if gauge.seconds_to_full is not None and not gauge.failing:
            text += f", full in ~{fmt_duration(gauge.seconds_to_full)} at this growth"
        return text
    if gauge.level == "red":
        return f"{gauge.tokens:,} tokens: past the cliff at ~{_about(gauge.max_context):,}"
    return f"{gauge.tokens:,} of ~{_about(gauge.max_context):,} tokens before the cliff"


def _about(n: int) -> int:
    """``n`` to three significant figures: the largest context is an estimate."""
    digits = max(0, len(str(n)) - 3)
    return int(round(n, -digits))


def notice_line(p: Store) -> Parts:
    """The newest notice (what cliff-tui changed, chose or found), or nothing; all of them are in
    the log screen."""
    if not p.messages.notices:
        return []
    notice = p.messages.notices[-1]
    if notice.level == "warning":
        return [(" ▲ ", AMBER + BOLD), (notice.text, AMBER)]
    return [(" i ", LEVEL_MARK["info"][1] + BOLD), (notice.text, DIM)]


def progress_line(p: Store) -> Parts:
    view = p.runs.current
    if view is None:
        return []
    pr = view.progress
    if view.failure is not None:
        return [(f"{view.failure.kind.replace('_', ' ')}: {view.failure.message}", RED)]
    if view.result is not None:
        r = view.result
        return [
            (
                f"done · n_ctx {r.n_ctx:,} · depth {r.depth:,} · {fmt_tok_s(r.baseline_tok_s)} → "
                f"{fmt_tok_s(r.depth_tok_s)} tok/s · {_cliff_words(r)}",
                None,
            )
        ]
    if pr is None:
        return [("starting…", None)]
    parts = [pr.phase, f"depth {pr.depth:,}/{pr.depth_target:,}", f"n_ctx {view.started.n_ctx:,}"]
    if pr.prefill_tok_s:
        parts.append(f"prefill {pr.prefill_tok_s:.0f} tok/s")
    if pr.eta_s is not None:
        parts.append(f"ETA {fmt_duration(pr.eta_s)}")
    if view.kv_device:
        parts.append(f"KV on {view.kv_device}")
    return [(" · ".join(parts), None)]


def _cliff_words(r) -> str:
    cliff = r.cliff
    return f"{cliff.level}: {cliff.text}" if cliff is not None else f"{r.verdict.level}: {r.verdict.text}"


SHOWN_SETTINGS = (
    *("ctx_size", "parallel", "kv_unified", "cache_type_k", "cache_type_v", "flash_attn", "n_gpu_layers"),
    *("rpc", "device", "tensor_split", "split_mode", "main_gpu"),
)
SHOWN_ALWAYS = ("kv_unified", "cache_ram", "ctx_checkpoints")


def attached_lines(p: Store) -> list[Parts]:
    """Under the server line: how the attached server was found, its flags, its memory explained."""
    found = p.servers.attached
    if found is None:
        return []
    lines = [[(line, DIM if i == 0 else None)] for i, line in enumerate(_found_parts(found))]
    reading = next((r for r in p.servers.readings.values() if r.url == found.url), None)
    if reading is not None and reading.kv_blocks is not None:
        lines.append([(kv_blocks_line(reading.kv_blocks), None)])
    split = p.server_memory()
    if split is not None:
        gone = reading is not None and reading.status != "ok" and reading.t > p.servers.memory[-1].t
        lines.append([(("before it stopped answering: " if gone else "") + split.short_text(), DIM if gone else None)])
        lines.extend([(f"  {line}", DIM)] for line in split.device_lines())
    return lines


SHORT_SOURCES = {"command line": "flags", "environment": "env", "/props": "/props", "default": "defaults"}


def _found_parts(found: FoundServer) -> list[str]:
    """How the attached server was found, and its settings grouped by where they were read."""
    parts = [f"found: {found.how}"]
    groups: dict[str, list[str]] = {}
    for x in found.settings:
        if x.name in SHOWN_ALWAYS or (x.name in SHOWN_SETTINGS and not x.source.startswith("default")):
            unit = "MiB" if x.name == "cache_ram" else ""
            where = SHORT_SOURCES.get(x.source.split(" (")[0], x.source)
            groups.setdefault(where, []).append(f"{x.name}={inert(x.value)}{unit}")
    if groups:
        parts.append(" · ".join(f"{where}: {' '.join(items)}" for where, items in groups.items()))
    if found.unreadable:
        parts.append(f"could not read {found.unreadable}")
    return parts


def server_line(p: Store) -> Parts:
    """One line per attached server, joined: status, rates, slots, where Ollama's models live."""
    parts, warn = [], False
    for s in p.servers.readings.values():
        warn = warn or s.status != "ok"
        parts.append(f"{s.source} {s.url} " + (s.status if s.status == "ok" else f"{s.status}: {s.message}"))
        if s.rates is not None and s.status == "ok" and p.servers.reports(s, "counters"):
            r = s.rates
            parts.append(f"decode {fmt_tok_s(r.decode_tok_s)} tok/s · prompt {fmt_tok_s(r.prompt_tok_s)} tok/s")
        for slot in s.slots:
            if slot.n_ctx:
                used = f"{slot.tokens_used:,}" if slot.tokens_used is not None else "–"
                parts.append(f"slot {slot.id}: {used}/{slot.n_ctx:,} tokens")
        for m in s.models:
            in_ram = (m.size_bytes or 0) - (m.size_vram_bytes or 0)
            share = f" ({100 * in_ram / m.size_bytes:.0f} % of the model)" if m.size_bytes and in_ram > 0 else ""
            context = f", context {m.context_length:,}" if m.context_length else ""
            parts.append(
                f"{m.name}: {fmt_bytes(m.size_vram_bytes)} in VRAM, {fmt_bytes(in_ram)} in RAM{share}{context}"
            )
        if s.requests_processing:
            parts.append(f"{s.requests_processing} request(s) running")
    return [(" · ".join(parts), AMBER if warn else None)]


def kv_blocks_line(kv: KvBlocks) -> str:
    """A paged KV cache (vLLM): its blocks, its queue, and the preemptions since the server started."""
    parts = [f"KV: {kv.blocks:,} blocks × {kv.block_size} tokens" if kv.blocks and kv.block_size else "KV blocks"]
    if kv.waiting is not None:
        capacity = f" ({kv.waiting_for_capacity} for blocks)" if kv.waiting_for_capacity else ""
        parts.append(f"{kv.running or 0} running, {kv.waiting} waiting{capacity}")
    if kv.preemptions_total is not None:
        parts.append(f"{kv.preemptions_total:,.0f} preempted since start")
    if kv.max_model_len:
        parts.append(f"max-model-len {kv.max_model_len:,}")
    return " · ".join(parts)
