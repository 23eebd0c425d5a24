"""Every private name of Textual that the screens use, and nothing else: each is looked up once,
and where one is missing (a Textual release that renamed it) the screens take Textual's stock
path instead: its own Linux driver, its own refresh.

The names (present from Textual 6.0 through 8.x):

- ``textual._xterm_parser.XTermParser`` and ``textual._parser.ParseError``: the parser that
  the quiet input thread feeds (``ui/terminal.py``); without either, Textual's ``LinuxDriver``.
- ``Driver._debug``: the parser's debug flag; without it, False.
- ``Widget._set_dirty``, ``Screen._dirty_widgets`` and ``Screen._on_timer_update``: the paint at
  the end of a tick (``ui/widgets.py``); without any of them, ``Widget.refresh``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from textual.driver import Driver
from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget


class InputParser(Protocol):
    """What the input thread asks of Textual's terminal parser."""

    def feed(self, data: str) -> Iterable[Any]: ...

    def tick(self) -> Iterable[Any]: ...


@dataclass(frozen=True)
class Parsing:
    """Textual's terminal parser, and the error it raises at a truncated sequence."""

    parser: Callable[[bool], InputParser]
    error: type[Exception]


@dataclass(frozen=True)
class Found:
    """Which private paths this Textual offers."""

    parsing: Parsing | None
    paint: bool


@cache
def found() -> Found:
    """The probe, made once a process."""
    return Found(parsing=_parsing(), paint=_can_paint())


def probe_again() -> Found:
    """Forget the probe and make it again (after Textual's names changed under a running
    process: only tests do that)."""
    found.cache_clear()
    return found()


def _parsing() -> Parsing | None:
    try:
        from textual._parser import ParseError
        from textual._xterm_parser import XTermParser
    except ImportError:
        return None
    return Parsing(parser=XTermParser, error=ParseError)


def _can_paint() -> bool:
    if not (callable(getattr(Widget, "_set_dirty", None)) and callable(getattr(Screen, "_on_timer_update", None))):
        return False
    return isinstance(getattr(Screen(), "_dirty_widgets", None), set)


def parser_debug(driver: Driver) -> bool:
    """Whether Textual's driver was asked to log what its parser reads."""
    return bool(getattr(driver, "_debug", False))


def dirty_widgets(screen: Screen) -> set[Widget] | None:
    """The widgets ``screen`` composites at its next update, where this Textual lets a frame be
    painted at once; else None."""
    if not found().paint:
        return None
    dirty = getattr(screen, "_dirty_widgets", None)
    return dirty if isinstance(dirty, set) else None


def mark_dirty(widget: Widget, regions: list[Region], dirty: set[Widget]) -> None:
    """``regions`` of ``widget`` marked for its screen's next update, without a refresh message."""
    widget._set_dirty(*regions)
    dirty.add(widget)


def update_now(screen: Screen) -> None:
    """What the screen's update timer runs: composite the dirty widgets, write the frame."""
    screen._on_timer_update()
