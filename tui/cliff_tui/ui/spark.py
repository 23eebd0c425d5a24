"""A sparkline on a fixed scale with one style per run of equal cells.

Textual's built-in ``Sparkline`` rescales to its data's own min–max (a 0 → 1 MiB series fills the
height) and emits a full colour sequence per cell; over SSH at 4 Hz that is ~100 KiB/s. This one
maps values onto ``lo → hi`` (0 → the tier's total) and groups cells that share a style.
"""

from __future__ import annotations

from typing import Callable, Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

BARS = " ▁▂▃▄▅▆▇█"
GAP = "·"


class FixedSpark:
    def __init__(self, values: Sequence[float | None], lo: float, hi: float,
                 style_for: Callable[[float], Style] | None = None, default: Style | None = None) -> None:
        self.values = values
        self.lo, self.hi = lo, hi
        self.style_for = style_for
        self.default = default or Style()

    def cells(self, width: int) -> list[tuple[str, Style]]:
        values = list(self.values)[-width:]
        span = self.hi - self.lo
        out: list[tuple[str, Style]] = [(" ", self.default)] * (width - len(values))
        for v in values:
            if v is None:
                out.append((GAP, self.default))
                continue
            fraction = 0.0 if span <= 0 else min(max((v - self.lo) / span, 0.0), 1.0)
            level = round(fraction * (len(BARS) - 1))
            if level == 0 and v > self.lo:
                level = 1  # something, however small, is not nothing
            style = self.style_for(fraction) if self.style_for else self.default
            out.append((BARS[level], style))
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        cells = self.cells(options.max_width)
        run_text, run_style = "", None
        for char, style in cells:
            if style != run_style and run_text:
                yield Segment(run_text, run_style)
                run_text = ""
            run_text += char
            run_style = style
        if run_text:
            yield Segment(run_text, run_style)
        yield Segment.line()
