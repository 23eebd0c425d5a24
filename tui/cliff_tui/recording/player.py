"""Replay a recording through a :class:`Pipeline` on a clock of its own: play, pause, speed,
step and seek. The detectors recompute the signs from the recorded samples."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from cliff_tui.events import Alert, Sample
from cliff_tui.pipeline import Pipeline
from cliff_tui.recording.reader import Recording
from cliff_tui.units import fmt_duration

SPEEDS = (1, 4, 16)


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
        self.pipeline = Pipeline()

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

    def toggle(self, now: float) -> None:
        if not self.playing and self.position >= self.t_end:
            self.seek_to(self.t_start, now)
        self.playing, self._wall = not self.playing, now

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
            self.position = max(self.position, event.t)
            if isinstance(event, Sample):
                break
        return out

    def seek_to(self, t: float, now: float) -> None:
        """Move to ``t`` announcing no alerts: forward, the pipeline takes the events in between;
        backward, it is rebuilt from the start."""
        target = min(max(t, self.t_start), self.t_end)
        if target < self.position:
            self.pipeline = Pipeline()
            self.cursor = 0
        self.position = target
        for event in self._take_until(self.position):
            self.pipeline.feed(event, signs=False)
        self.pipeline.refresh_signs()
        self._wall = now

    def seek_by(self, seconds: float, now: float) -> None:
        self.seek_to(self.position + seconds, now)

    def seek_fraction(self, fraction: float, now: float) -> None:
        self.seek_to(self.t_start + fraction * (self.t_end - self.t_start), now)

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
        name = Path(self.recording.path).name
        state = "▶" if self.playing else "⏸"
        return f"replay {name} {state} ×{self.speed}"

    def cursor_line(self, width: int = 40) -> str:
        span = max(self.t_end - self.t_start, 1e-9)
        done = int((self.position - self.t_start) / span * width)
        bar = "━" * done + "╸" + "─" * max(0, width - done - 1)
        elapsed = fmt_duration(self.position - self.t_start)
        total = fmt_duration(self.t_end - self.t_start)
        note = f" · {self.recording.problems}" if self.recording.problems else ""
        return f"{'▶' if self.playing else '⏸'} ×{self.speed} {elapsed} / {total} {bar}{note}"
