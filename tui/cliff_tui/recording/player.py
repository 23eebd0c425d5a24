"""A recording's clock: play, pause, speed, step and seek.

The player only says which events come next; the session feeds them into its store, where the
detectors recompute the signs from the recorded samples. A seek backward tells the session to
start a new store (``Seek.rebuild``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cliff_tui.events import Alert, Sample
from cliff_tui.recording.reader import Recording
from cliff_tui.units import fmt_duration

SPEEDS = (1, 4, 16)
_DESCRIPTORS = re.compile(r"/dev/fd|/proc/(self|\d+)/fd")  # where a shell's <(…) points


@dataclass(frozen=True)
class Seek:
    """Where a seek landed: the events to feed, and whether to feed them into a new store."""

    rebuild: bool
    events: list[Any]


class Player:
    def __init__(self, recording: Recording, speed: int = 1) -> None:
        self.recording = recording
        times = [t for t in recording.times if not math.isnan(t)]
        self.t_start = min(times) if times else 0.0
        self.t_end = max(times) if times else 0.0
        self.speed = speed if speed in SPEEDS else 1
        self.playing = False
        self.position = self.t_start
        self.cursor = 0
        self._wall: float | None = None

    # --- the clock ------------------------------------------------------------------------

    def start(self, now: float) -> list[Any]:
        """Play from the start; returns the events up to the first sample, to show at once."""
        self.playing, self._wall = True, now
        return self.step(pause=False)

    def advance(self, now: float) -> list[Any]:
        if self.playing and self._wall is not None:
            self.position = min(self.t_end, self.position + (now - self._wall) * self.speed)
            if self.position >= self.t_end:
                self.playing = False
        self._wall = now
        return self._take_until(self.position)

    def toggle(self, now: float) -> Seek | None:
        """Play or pause; playing at the end starts again from the beginning (a :class:`Seek`)."""
        seek = self.seek_to(self.t_start, now) if not self.playing and self.position >= self.t_end else None
        self.playing, self._wall = not self.playing, now
        return seek

    def cycle_speed(self, now: float) -> None:
        self.speed = SPEEDS[(SPEEDS.index(self.speed) + 1) % len(SPEEDS)]
        self._wall = now

    def step(self, pause: bool = True) -> list[Any]:
        """Move to the next sample (pausing, unless told not to)."""
        self.playing = self.playing and not pause
        out = []
        while self.cursor < len(self.recording):
            event = self._next()
            if event is None:
                continue
            out.append(event)
            self.position = min(max(self.position, event.t), self.t_end)
            if isinstance(event, Sample):
                break
        return out

    def seek_to(self, t: float, now: float) -> Seek:
        """Move to ``t``: forward, the events in between; backward, every event from the start."""
        target = min(max(t, self.t_start), self.t_end)
        rebuild = target < self.position
        if rebuild:
            self.cursor = 0
        self.position = target
        self._wall = now
        self.playing = self.playing and target < self.t_end
        return Seek(rebuild, self._take_until(self.position))

    def seek_by(self, seconds: float, now: float) -> Seek:
        return self.seek_to(self.position + seconds, now)

    def seek_fraction(self, fraction: float, now: float) -> Seek:
        return self.seek_to(self.t_start + fraction * (self.t_end - self.t_start), now)

    def _take_until(self, t: float) -> list[Any]:
        out = []
        times = self.recording.times
        while self.cursor < len(times) and not times[self.cursor] > t:  # NaN: a corrupt line, skipped
            event = self._next()
            if event is not None:
                out.append(event)
        return out

    def _next(self) -> Any | None:
        """The event at the cursor, moving past it; alerts are recomputed, so not replayed."""
        event = self.recording.event(self.cursor)
        self.cursor += 1
        return None if isinstance(event, Alert) else event

    # --- words ----------------------------------------------------------------------------

    def describe(self) -> str:
        path = Path(self.recording.path)
        name = str(path) if _DESCRIPTORS.fullmatch(str(path.parent)) else path.name  # /dev/fd/63, not 63
        state = "▶" if self.playing else "⏸"
        return f"replay {name} {state} ×{self.speed}"

    def cursor_line(self, width: int = 40) -> str:
        span = max(self.t_end - self.t_start, 1e-9)
        done = int((self.position - self.t_start) / span * width)  # every setter keeps position in the recording
        bar = "━" * done + "╸" + "─" * max(0, width - done - 1)
        elapsed = fmt_duration(self.position - self.t_start)
        total = fmt_duration(self.t_end - self.t_start)
        note = f" · {self.recording.problems}" if self.recording.problems else ""
        return f"{'▶' if self.playing else '⏸'} ×{self.speed} {elapsed} / {total} {bar}{note}"
