"""The dashboard's drawing pieces: the fixed-scale sparkline and the line-API view."""

from __future__ import annotations

from rich.style import Style
from textual.app import App, ComposeResult
from textual.geometry import Region

from cliff_tui.ui.render import fit_line
from cliff_tui.ui.spark import BARS, GAP, FixedSpark
from cliff_tui.ui.widgets import LineView

GIB = 2**30


def test_spark_keeps_a_fixed_scale_and_never_hides_a_small_value():
    spark = FixedSpark([0, 1 * 2**20, 12 * GIB, 24 * GIB, None], 0, 24 * GIB)
    chars = "".join(char for char, _ in spark.cells(8))
    assert chars == "   " + " " + BARS[1] + BARS[4] + BARS[8] + GAP


def test_spark_groups_cells_of_one_style_into_one_segment():
    red, green = Style(color="red"), Style(color="green")
    spark = FixedSpark([1, 1, 9, 9, 1], 0, 10, lambda f: red if f > 0.5 else green)
    segments = spark.segments(5)
    assert [(s.text, s.style) for s in segments] == [(BARS[1] * 2, green), (BARS[7] * 2, red), (BARS[1], green)]
    assert sum(s.cell_length for s in segments) == 5


def test_fit_line_cuts_with_an_ellipsis_only_when_too_wide():
    parts = [("System RAM", Style(bold=True)), ("  6.49 GiB / 24.0 GiB", None)]
    assert "".join(s.text for s in fit_line(parts, 80)) == "System RAM  6.49 GiB / 24.0 GiB"
    cut = fit_line(parts, 16)
    assert "".join(s.text for s in cut) == "System RAM  6.4…"
    assert sum(s.cell_length for s in cut) == 16


class _OneView(App):
    def compose(self) -> ComposeResult:
        yield LineView(id="view")


async def test_line_view_repaints_only_the_line_that_changed():
    app = _OneView()
    async with app.run_test(size=(40, 6)) as pilot:
        view = app.query_one(LineView)
        view.show(1, lambda w: [fit_line([("head", None)], w), fit_line([("spark ▁▂", None)], w)])
        await pilot.pause()
        assert view.size.height == 2
        refreshed = []
        view.refresh = lambda *regions, **kw: refreshed.append((regions, kw))
        view.show(2, lambda w: [fit_line([("head", None)], w), fit_line([("spark ▂▃", None)], w)])
        assert refreshed == [((Region(0, 1, 40, 1),), {})]
        assert view.render_line(1).text.rstrip() == "spark ▂▃"
        del view.refresh
        view.show(3, lambda w: [fit_line([("head", None)], w)] * 3)
        await pilot.pause()
        assert view.size.height == 3
