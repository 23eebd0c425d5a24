"""The dashboard's drawing pieces: the fixed-scale graph and the line-API view."""

from __future__ import annotations

import pytest
from rich.style import Style
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from cliff_tui.recording import demo
from cliff_tui.recording.reader import open_recording
from cliff_tui.session import Session
from cliff_tui.ui.app import CliffApp
from cliff_tui.ui.graph import BARS, GAP, MARK, Graph, zoom_range
from cliff_tui.ui.render import fit_line
from cliff_tui.ui.widgets import KeysLine, LineView, one_paint
from textual_names import without
from ui.test_app import TRIANGULATION, replay_to_the_end, settled

GIB = 2**30
MIB = 2**20


def test_graph_keeps_a_fixed_scale_and_never_hides_a_small_value():
    graph = Graph([0, 1 * 2**20, 12 * GIB, 24 * GIB, None], 0, 24 * GIB)
    chars = "".join(char for char, _ in graph.cells(8)[0])
    assert chars == "   " + " " + BARS[1] + BARS[4] + BARS[8] + GAP


def test_graph_groups_cells_of_one_style_into_one_segment():
    red, green = Style(color="red"), Style(color="green")
    graph = Graph([1, 1, 9, 9, 1], 0, 10, lambda v: red if v > 5 else green)
    segments = graph.segments(5)[0]
    assert [(s.text, s.style) for s in segments] == [(BARS[1] * 2, green), (BARS[7] * 2, red), (BARS[1], green)]
    assert sum(s.cell_length for s in segments) == 5


def test_a_graph_of_several_rows_stacks_eighths_and_draws_its_mark_where_no_bar_covers_it():
    graph = Graph([0, 5, 10, 20, 30, 40], 0, 40, mark=30)
    rows = ["".join(char for char, _ in line) for line in graph.cells(6, rows=4)]
    assert rows == [
        "     " + BARS[8],
        MARK * 4 + BARS[8] * 2,  # the mark at 30 of 40, drawn where the bars stay below it
        "   " + BARS[8] * 3,
        " " + BARS[4] + BARS[8] * 4,
    ]


def test_the_zoom_shows_a_small_rise_on_a_big_tier_and_keeps_a_flat_series_flat():
    lo, hi = zoom_range([700 * MIB, 760 * MIB, 870 * MIB], 16 * MIB, MIB)
    assert (lo, hi) == (600 * MIB, 900 * MIB)  # round ends
    rise = Graph([700 * MIB, 870 * MIB], lo, hi).heights(2, rows=4)
    assert rise[1] - rise[0] >= 16  # half the graph, where 0 → 24 GiB shows less than one eighth
    lo, hi = zoom_range([800 * MIB] * 3, 16 * MIB, MIB)
    assert (lo, hi) == (790 * MIB, 810 * MIB)


def test_fit_line_cuts_with_an_ellipsis_only_when_too_wide():
    parts = [("System RAM", Style(bold=True)), ("  6.49 GiB / 24.0 GiB", None)]
    assert "".join(s.text for s in fit_line(parts, 80)) == "System RAM  6.49 GiB / 24.0 GiB"
    cut = fit_line(parts, 16)
    assert "".join(s.text for s in cut) == "System RAM  6.4…"
    assert sum(s.cell_length for s in cut) == 16
    wide = [("模型 Qwen", None), ("  ▁▂ 6.4 GiB", None)]  # a CJK name: two cells a character
    assert "".join(s.text for s in fit_line(wide, 21)) == "模型 Qwen  ▁▂ 6.4 GiB"  # 19 characters
    assert "".join(s.text for s in fit_line(wide, 20)) == "模型 Qwen  ▁▂ 6.4 G…"


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


def _record_frames(app, monkeypatch) -> list:
    frames: list = []
    display = app._display
    monkeypatch.setattr(app, "_display", lambda screen, update: (frames.append(update), display(screen, update)))
    return frames


async def test_a_line_view_changed_in_one_paint_is_written_as_the_block_ends(monkeypatch):
    app = _OneView()
    async with app.run_test(size=(40, 6)) as pilot:
        view = app.query_one(LineView)
        view.show(1, lambda w: [fit_line([("head", None)], w), fit_line([("6.1 GiB", None)], w)])
        await pilot.pause()
        frames = _record_frames(app, monkeypatch)
        with one_paint(app.screen):
            view.show(2, lambda w: [fit_line([("head", None)], w), fit_line([("6.2 GiB", None)], w)])
            assert frames == []
        assert len(frames) == 1 and {y for y, _, _ in frames[0].spans} == {1}  # only the changed row
        await pilot.pause()
        assert len(frames) == 1  # and no second pass for it


async def test_a_line_view_changed_outside_one_paint_or_without_its_private_names_is_written_a_pass_later(monkeypatch):
    app = _OneView()
    async with app.run_test(size=(40, 6)) as pilot:
        view = app.query_one(LineView)
        view.show(1, lambda w: [fit_line([("6.1 GiB", None)], w)])
        await pilot.pause()
        frames = _record_frames(app, monkeypatch)
        view.show(2, lambda w: [fit_line([("6.2 GiB", None)], w)])
        with without("Widget._set_dirty"), one_paint(app.screen):
            view.show(3, lambda w: [fit_line([("6.3 GiB", None)], w)])
        assert frames == []
        await pilot.pause()
        assert len(frames) == 1 and view.render_line(0).text.rstrip() == "6.3 GiB"


async def test_line_view_hands_textual_one_full_width_strip_per_line_until_it_changes():
    """Textual caches its cuts of a strip on the strip: the same object, call after call."""
    app = _OneView()
    async with app.run_test(size=(40, 6)) as pilot:
        view = app.query_one(LineView)
        view.show(1, lambda w: [fit_line([("head", None)], w), fit_line([("6.1 GiB", None)], w)])
        await pilot.pause()
        first = view.render_line(1)
        assert view.render_line(1) is first and first.cell_length == 40
        view.show(2, lambda w: [fit_line([("head", None)], w), fit_line([("6.2 GiB", None)], w)])
        assert view.render_line(0).text.rstrip() == "head" and view.render_line(1) is not first
        await pilot.resize_terminal(30, 6)
        await pilot.pause()
        assert view.render_line(0).cell_length == 30


async def test_line_view_builds_again_only_the_parts_whose_key_changed():
    app = _OneView()
    built = []

    def part(name: str, text: str):
        def lines(width: int):
            built.append(name)
            return [fit_line([(text, None)], width)]

        return lines

    async with app.run_test(size=(40, 6)) as pilot:
        view = app.query_one(LineView)
        view.show_parts(((("head", 1), part("head", "6.1 GiB")), (("graph", 1), part("graph", "▁▂"))))
        await pilot.pause()
        built.clear()
        view.show_parts(((("head", 2), part("head", "6.2 GiB")), (("graph", 1), part("graph", "▇█"))))
        assert built == ["head"]  # the graph's key is as before: its lines are kept, not built
        assert [view.render_line(y).text.rstrip() for y in (0, 1)] == ["6.2 GiB", "▁▂"]


class _StyledViews(App):
    CSS = """
    #plain { color: $text-muted; background: $panel; }
    #padded { padding: 0 2; }
    #faded { text-opacity: 50%; }
    """

    def compose(self) -> ComposeResult:
        yield LineView(id="plain")
        yield LineView(id="padded")
        yield LineView(id="faded")
        yield KeysLine(id="keys")


def _cells(strips) -> list[list[tuple[str, Style | None]]]:
    return [[(text, style) for text, style, _ in strip for _ in text] for strip in strips]


def _as_textual_draws(views) -> None:
    for view in views:
        height = view.size.height
        for crop in (Region(0, 0, 40, height), Region(3, height - 1, 20, 1), Region(0, 0, 40, 1)):
            assert _cells(view.render_lines(crop)) == _cells(Widget.render_lines(view, crop)), (view.id, crop)


async def test_line_view_hands_the_compositor_what_textuals_styling_pass_would():
    app = _StyledViews()
    async with app.run_test(size=(40, 8)) as pilot:
        views = [app.query_one(f"#{name}", LineView) for name in ("plain", "padded", "faded", "keys")]

        def lines(w):
            return [
                fit_line([("RAM ", Style(bold=True)), ("6.1 GiB ▁▂▃", Style(color="red"))], w),
                fit_line([("swap", None)], w),
            ]

        for view in views[:3]:
            view.show(1, lines)
        views[3].show_keys([("q", "quit", "quit"), ("l", "log", "show_log")])
        await pilot.pause()
        _plain, padded, _, _keys = views
        assert [view._plain() for view in views] == [True, False, False, True]  # the first skips the pass
        _as_textual_draws(views)
        assert padded.render_lines(Region(0, 0, 40, 1))[0].text.startswith("  RAM")
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"  # new backgrounds
        await pilot.pause()
        _as_textual_draws(views)


async def test_line_view_filters_a_line_once_until_it_changes(monkeypatch):
    filtered = []
    apply_filter = Strip.apply_filter
    monkeypatch.setattr(Strip, "apply_filter", lambda strip, *a: filtered.append(strip.text) or apply_filter(strip, *a))
    app = _StyledViews()
    async with app.run_test(size=(40, 8)) as pilot:
        view = app.query_one("#plain", LineView)
        whole = Region(0, 0, 40, 2)
        view.show(1, lambda w: [fit_line([("RAM 6.1 GiB", None)], w), fit_line([("swap", None)], w)])
        await pilot.pause()
        filtered.clear()
        before = view.render_lines(whole)
        assert view.render_lines(whole) == before and filtered == []  # the compositor asks again: kept
        view.show(2, lambda w: [fit_line([("RAM 6.2 GiB", None)], w), fit_line([("swap", None)], w)])
        after = view.render_lines(whole)
        assert after[0].text.startswith("RAM 6.2") and after[1] is before[1]
        assert {text.rstrip() for text in filtered} == {"RAM 6.2 GiB"}  # only the line that changed


async def test_the_key_under_the_mouse_is_styled_as_a_link():
    app = _StyledViews()
    async with app.run_test(size=(40, 8)) as pilot:
        keys = app.query_one(KeysLine)
        keys.show_keys([("q", "quit", "quit"), ("l", "log", "show_log")])
        await pilot.pause()
        whole = Region(0, 0, 40, 1)
        plain = _cells(keys.render_lines(whole))
        keys.hover_style = next(segment.style for segment in keys.render_line(0) if "log" in segment.text)
        hovered = _cells(keys.render_lines(whole))
        assert hovered == _cells(Widget.render_lines(keys, whole))
        assert [cell for cell in hovered[0] if "log" in cell[0]] != [cell for cell in plain[0] if "log" in cell[0]]


def _visible_cells(app) -> list[list[tuple[str, object, object]]]:
    """Each cell as seen: its character, its background, and its colour where it draws one."""
    return [
        [(char, style.bgcolor, None if char == " " else style.color) for text, style, _ in strip for char in text]
        for strip in app.screen._compositor.render_strips()
    ]


@pytest.mark.parametrize("mode, size", [("run", (120, 40)), ("replay", (120, 40)), ("replay", (200, 50))])
async def test_the_containers_drawn_blank_hide_nothing(mode, size, monkeypatch):
    if mode == "run":
        app = CliffApp("run", Session(preload=demo.gpu_cliff_run()))
    else:
        app = CliffApp("replay", Session(recording=open_recording(TRIANGULATION)))
    async with app.run_test(size=size) as pilot:
        await (settled(pilot) if mode == "run" else replay_to_the_end(pilot))
        blank = [node for node in app.screen.walk_children(with_self=True) if getattr(node, "BLANK", False)]
        assert {node.id for node in blank} == {"_default", "body", "dash"}
        seen = _visible_cells(app)
        for cls in {type(node) for node in blank}:
            monkeypatch.setattr(cls, "BLANK", False)
        for node in blank:
            node.refresh()
        await pilot.pause()
        assert _visible_cells(app) == seen  # as Textual's styling pass draws them
