"""Read a recording back: clean one-line errors for files that are not recordings, and the
readable part of a damaged one (corrupt lines skipped and counted, a cut last line tolerated).

Lines are decoded on demand: an hour at 4 Hz is ~15k lines and ~20 MiB, and decoding them all
takes seconds, while the first replayed frame needs a handful. Every event line starts with its
timestamp (``{"t":…``), so the time index is read from the line prefixes alone. A line is let go
once decoded, and a long one is decoded at once: its strings come out inert and cut to a line's
length (the codec does that), so a 10 MB line is not held.

The header's strings are made inert too: export and the replay's title show them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from cliff_tui.codec import DecodeError, event_from_plain
from cliff_tui.errors import BadInput, read_bytes
from cliff_tui.recording.schema import FORMAT, HEADER_SHAPES, SCHEMA_VERSION
from cliff_tui.text import inert_tree
from cliff_tui.units import KiB

_T_PREFIX = re.compile(rb'\{"t":\s*(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)[,}]')
_UNDECODED = object()
LATEST_T = 2.0**34  # seconds since 1970: the year 2514
LONG_LINE = 64 * KiB  # bytes: a line this long is decoded when the file is opened, not held


class Recording:
    def __init__(self, path: str, header: dict[str, Any], lines: list[tuple[int, bytes]], ends_cleanly: bool) -> None:
        self.path = path
        self.header = header
        self._numbers = [number for number, _ in lines]  # file line numbers, for messages
        self._lines: list[bytes | None] = [line for _, line in lines]
        self._ends_cleanly = ends_cleanly
        self._cache: list[Any] = [_UNDECODED] * len(lines)
        self.skipped: list[str] = []
        self.truncated_tail = False
        self.times = [self._time_of(i) for i in range(len(lines))]
        for i, (_, line) in enumerate(lines):
            if len(line) > LONG_LINE:
                self.event(i)

    def __len__(self) -> int:
        return len(self._lines)

    def event(self, i: int) -> Any | None:
        """The event on line ``i`` (decoded once), or None for a corrupt line (counted)."""
        cached = self._cache[i]
        if cached is _UNDECODED:
            cached = self._cache[i] = self._decode(i)
        return cached

    @property
    def events(self) -> list[Any]:
        """Every readable event, in file order (decodes the whole file)."""
        return [e for e in (self.event(i) for i in range(len(self))) if e is not None]

    @property
    def problems(self) -> str:
        """One line on what was not readable so far, or ''."""
        parts = []
        if self.truncated_tail:
            parts.append("the last line was cut off (the recorder was stopped mid-write)")
        if self.skipped:
            parts.append(f"{len(self.skipped)} corrupt line(s) skipped, first: {self.skipped[0]}")
        return "; ".join(parts)

    def _time_of(self, i: int) -> float:
        line = self._lines[i]
        match = _T_PREFIX.match(line) if line is not None else None
        if match and _is_time(t := float(match.group(1))):
            return t
        event = self.event(i)  # no timestamp prefix: decode now (a corrupt line, most likely)
        return event.t if event is not None else math.nan

    def _decode(self, i: int) -> Any | None:
        line, self._lines[i] = self._lines[i], None  # decoded once: the event is kept, not the line
        try:
            if line is None:
                raise ValueError("decoded twice")
            event = event_from_plain(json.loads(line))
            if not _is_time(event.t):
                raise DecodeError(f"t must be seconds since 1970, not {event.t!r:.40}")
            return event
        except (ValueError, DecodeError, TypeError, RecursionError) as exc:
            if i == len(self._lines) - 1 and not self._ends_cleanly:
                self.truncated_tail = True
            else:
                self.skipped.append(f"line {self._numbers[i]}: {_why(exc)}")
            return None


def _is_time(t: float) -> bool:
    return 0 <= t < LATEST_T  # NaN fails too


def open_recording(path: str | Path, *, lazy: bool = False) -> Recording:
    """Open and check a recording. ``lazy``: decode lines as they are needed (replay);
    otherwise decode everything now (export, tests), so ``problems`` is complete."""
    p = Path(path)
    return parse_recording(read_bytes(p, "recording"), str(p), lazy=lazy)


def parse_recording(data: bytes, name: str = "recording", *, lazy: bool = False) -> Recording:
    if not data.strip():
        raise BadInput(f"{name} is empty: not a cliff-tui recording (nothing was recorded)")
    first, *rest = data.split(b"\n")
    header = _header(first, name)
    # `not line.isspace()` stops at a line's first character; strip() would copy every line
    lines = [(number, line) for number, line in enumerate(rest, start=2) if line and not line.isspace()]
    recording = Recording(name, header, lines, ends_cleanly=data.endswith(b"\n"))
    if lines:
        recording.event(len(lines) - 1)  # a cut last line is reported from the start
    if not lazy:
        recording.events  # noqa: B018 - decode everything now
    return recording


def _header(raw: bytes, name: str) -> dict[str, Any]:
    not_ours = f"{name} is not a cliff-tui recording (its first line is not a cliff-tui header)"
    too_deep = f"{name}: its header is nested too deep: not a cliff-tui recording"
    try:
        header = json.loads(raw)
    except ValueError:
        raise BadInput(not_ours) from None
    except RecursionError:
        raise BadInput(too_deep) from None
    if not isinstance(header, dict) or header.get("type") != "header" or header.get("format") != FORMAT:
        raise BadInput(not_ours)
    schema = header.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise BadInput(f"{name}: the header has no schema version: not a cliff-tui recording")
    if schema > SCHEMA_VERSION:
        raise BadInput(
            f"{name} was written with recording schema {schema}, newer than this cliff-tui reads "
            f"({SCHEMA_VERSION}): upgrade cliff-tui (pip install -U cliff-tui)"
        )
    try:
        return inert_tree({k: v for k, v in header.items() if k not in HEADER_SHAPES or HEADER_SHAPES[k](v)})
    except RecursionError:
        raise BadInput(too_deep) from None


def _why(exc: Exception) -> str:
    if isinstance(exc, DecodeError):
        return str(exc)
    return "not a JSON line"
