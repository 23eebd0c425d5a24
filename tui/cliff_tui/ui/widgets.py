"""The widgets the dashboard is made of; each repaints only what changed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.containers import Horizontal, VerticalScroll
from textual.geometry import Region, Size
from textual.message import Message
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from cliff_tui.ui.graph import line_cells
from cliff_tui.ui.textual_private import dirty_widgets, mark_dirty, update_now

_painting: ContextVar[Screen | None] = ContextVar("painting", default=None)


@contextmanager
def one_paint(screen: Screen) -> Iterator[None]:
    """The line views changed inside the block are composited and written as it ends. Refreshed,
    a widget is repainted through a chain of messages (its idle pass tells its screen, whose idle
    pass starts the 1/60 s timer that composites): for the dashboard's three views that change
    every frame, five of the event loop's tasks run and its thread wakes twice (measured against
    Textual's own path: bench/RESULTS.md, section 'Textual private paths')."""
    dirty = dirty_widgets(screen)
    if dirty is None or not screen.is_current:
        yield
        return
    token = _painting.set(screen)
    try:
        yield
    finally:
        _painting.reset(token)
        if dirty:
            update_now(screen)
        if dirty:  # not composited (an update batch is open): Textual's own pass will
            screen.check_idle()


class Pane(VerticalScroll):
    """A scrolling pane whose content is drawn for its size: it tells the app when that size
    changes (a layout that shows or hides a pane resizes the others), so the content is drawn
    again at once rather than at the next frame."""

    class Resized(Message):
        pass

    def on_resize(self) -> None:
        self.post_message(self.Resized())


class DashPane(Pane):
    """The tiers' pane. Like the body row and the dashboard's screen, it has a background and
    no border, and its children cover the rest: ``BLANK`` has Textual draw its lines as one blank
    line rather than through its styling pass, which the compositor runs on every container
    beside a change, for all its lines, each frame (Textual 7.1 on; before, it goes unread)."""

    BLANK = True


class Body(Horizontal):
    BLANK = True  # as DashPane


class DashboardScreen(Screen):
    BLANK = True  # as DashPane


class PanelView(Static):
    """A Static that builds and repaints its content only when the content's key changes (few
    bytes per frame), and asks for a new layout only when its height changes (a relayout costs
    the whole screen)."""

    _key: object = None
    _lines: int | None = None

    def show(self, key: object, make: Callable[[], Any], lines: int | None = None) -> None:
        if self._key != key:
            self._key = key
            self.update(make(), layout=lines is None or lines != self._lines)
            self._lines = lines


Lines = Callable[[int], list[list[Segment]]]  # width → the lines, each cut to that width
Part = tuple[object, Lines]  # a key and its lines: equal keys draw equal lines


class LineView(Widget):
    """Lines of segments through Textual's line API, for what changes every frame (a tier's
    graph, the signs, the progress): no Rich layout pass, and a change repaints only the lines
    it touched. The lines come in parts, each with a key: a part whose key and width are as
    before keeps its lines without building them."""

    DEFAULT_CSS = "LineView { height: auto; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._parts: tuple[Part, ...] = ()
        self._built: list[tuple[object, int, list[list[Segment]]]] = []  # per part: key, width, lines
        self._strips: list[Strip] = []
        self._lines: list[list[Segment]] = []
        self._drawn: tuple = ()
        self._base = Style()
        self._look: tuple[bool, Color] = (True, Color(0, 0, 0, 0))  # styling pass skipped; background
        self._shown: tuple[list[Strip], object, list[Strip]] = ([], None, [])  # strips, filters and look: lines

    def show(self, key: object, lines: Lines) -> None:
        self.show_parts(((key, lines),))

    def show_parts(self, parts: tuple[Part, ...]) -> None:
        width = self.size.width
        keys = tuple(key for key, _ in parts)
        if (keys, width) == self._drawn:
            return
        self._parts = parts
        old = self._build(keys, width)
        if len(self._strips) != len(old):
            self.refresh(layout=True)
            return
        changed = [y for y, (before, after) in enumerate(zip(old, self._strips)) if before is not after]
        if changed:
            self._repaint(_row_runs(changed, width))

    def _repaint(self, regions: list[Region]) -> None:
        """Inside :func:`one_paint`, the regions are marked on the screen for it to composite;
        elsewhere, one refresh (each asks Textual for an idle pass)."""
        screen = _painting.get()
        dirty = dirty_widgets(screen) if screen is not None and self.display and self.screen is screen else None
        if dirty is not None:
            mark_dirty(self, regions, dirty)
        else:
            self.refresh(*regions)

    def _make(self, width: int) -> list[list[Segment]]:
        """The parts' lines at ``width``, each part built again only where its key or the width
        changed."""
        built = {(key, w): lines for key, w, lines in self._built}
        self._built = [
            (key, width, built[key, width] if (key, width) in built else lines(width)) for key, lines in self._parts
        ]
        return [line for _, _, lines in self._built for line in lines]

    def _build(self, keys: tuple[object, ...] | None, width: int) -> list[Strip]:
        """New strips for the lines whose segments changed; the old strips are returned."""
        if self._drawn[1:] != (width,):
            self._base, self._lines = self.rich_style, []
            self._look = (self._plain(), self.background_colors[1])
        lines, old, old_lines = self._make(width), self._strips, self._lines
        self._strips = [
            old[y]
            if y < len(old_lines) and (old_lines[y] is line or old_lines[y] == line)
            else self._strip(line, width)
            for y, line in enumerate(lines)
        ]
        self._lines, self._drawn = lines, (keys, width)
        return old

    def _strip(self, line: list[Segment], width: int) -> Strip:
        """A line as the strip ``render_line`` returns on every call: full width already, so the
        compositor's cuts of it, which Textual caches on the strip, are made once. One strip
        (Textual's ``apply_style`` and ``extend_cell_length`` make one each, with its caches)."""
        cells, base = line_cells(line), self._base
        segments = list(Segment.apply_style(line, base))
        if cells < width:
            segments.append(Segment(" " * (width - cells), base))
        return Strip(segments, max(cells, width))

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drawn = self._drawn[:1]  # a new theme: the base style of every line changed

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self._drawn[1:] == (width,):
            return max(1, len(self._lines))  # built for this width already
        return max(1, len(self._make(width)))

    def render_lines(self, crop: Region) -> list[Strip]:
        """The lines in ``crop`` as built, through the app's line filters only. Textual's
        styling pass, which would lay a border, padding, tint or opacity on each line, would here
        only copy lines that already hold the widget's style at its full width; a view given any
        of those, or a text opacity or a hatch, gets it. The compositor asks for every line of
        each widget beside a change, four times a second, for the few it repaints: the filtered
        lines are kept until a line, a filter or the style changes."""
        width = self._built_for_width()
        if not self._look[0]:
            return super().render_lines(crop)
        strips = self._filtered(crop.bottom)[crop.y : crop.bottom]
        if crop.column_span != (0, width):
            strips = [strip.crop(*crop.column_span) for strip in strips]
        return strips

    def _filtered(self, height: int) -> list[Strip]:
        """The first ``height`` lines through the app's line filters, blank below the last."""
        filters = tuple(self.get_line_filters())
        key = (filters, self._look)
        kept_strips, kept_key, kept = self._shown
        if kept_strips is self._strips and kept_key == key and len(kept) >= height:
            return kept
        if kept_key != key:
            kept_strips = []
        lines = []
        for y in range(max(height, len(self._strips))):
            strip = self._line(y)
            if y < len(kept_strips) and kept_strips[y] is strip:
                lines.append(kept[y])  # an unchanged line: filtered before
                continue
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, self._look[1])
            lines.append(strip)
        self._shown = (self._strips, key, lines)
        return lines

    def _plain(self) -> bool:
        styles = self.styles
        return (
            not any(styles.gutter)
            and not any(edge for edge, _ in styles.outline)
            and not styles.tint.a
            and self.opacity == 1.0
            and styles.text_opacity == 1.0
            and not (styles.has_rule("hatch") and styles.hatch != "none")
        )

    def render_line(self, y: int) -> Strip:
        self._built_for_width()
        return self._line(y)

    def _built_for_width(self) -> int:
        """The view's width, its lines built again first where it changed."""
        width = self.size.width
        if self._drawn[1:] != (width,):
            self._build(self._drawn[0] if self._drawn else None, width)
        return width

    def _line(self, y: int) -> Strip:
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self._drawn[1], self._base)


def _row_runs(rows: list[int], width: int) -> list[Region]:
    """Each run of consecutive rows as one region ``width`` wide."""
    regions: list[Region] = []
    start = previous = rows[0]
    for y in [*rows[1:], -1]:
        if y != previous + 1:
            regions.append(Region(0, start, width, previous - start + 1))
            start = y
        previous = y
    return regions


class KeysLine(LineView):
    """The keys at the foot of the screen, in the footer's colours, each a link that runs its
    action when clicked. One line of segments: Textual's ``Footer`` is a widget per key, and
    looks up each key's Unicode name to learn whether it types a character."""

    COMPONENT_CLASSES = {"keys-line--key"}
    DEFAULT_CSS = """
    KeysLine { height: 1; background: $footer-background; color: $footer-foreground; }
    KeysLine > .keys-line--key { color: $footer-key-foreground; text-style: bold; }
    """

    def render_lines(self, crop: Region) -> list[Strip]:
        if self.hover_style.link_id:  # Textual's pass styles the key under the mouse
            return Widget.render_lines(self, crop)
        return super().render_lines(crop)

    def show_keys(self, keys: list[tuple[str, str, str]]) -> None:
        """``keys``: each key as shown, what it does, and the app's action it runs."""
        key_style = self.get_component_rich_style("keys-line--key", partial=True)
        line = [
            segment
            for shown, description, action in keys
            for segment in (
                Segment(f" {shown} ", key_style + Style.from_meta({"@click": f"app.{action}"})),
                Segment(f"{description} ", Style.from_meta({"@click": f"app.{action}"})),
            )
        ]
        self.show(
            tuple(keys), lambda width: [Segment.adjust_line_length(line, width) if width < line_cells(line) else line]
        )
