"""Read a recording back: clean one-line errors for files that are not recordings, and the
readable part of a damaged one (corrupt lines skipped and counted, a cut last line tolerated)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cliff_tui.codec import DecodeError, event_from_plain
from cliff_tui.engine.errors import BadInput
from cliff_tui.recording.schema import FORMAT, SCHEMA_VERSION


@dataclass
class Recording:
    path: str
    header: dict[str, Any]
    events: list[Any]
    skipped: list[str] = field(default_factory=list)
    truncated_tail: bool = False

    @property
    def problems(self) -> str:
        """One line on what was not readable, or ''."""
        parts = []
        if self.truncated_tail:
            parts.append("the last line was cut off (the recorder was stopped mid-write)")
        if self.skipped:
            parts.append(f"{len(self.skipped)} corrupt line(s) skipped, first: {self.skipped[0]}")
        return "; ".join(parts)


def open_recording(path: str | Path) -> Recording:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"recording not found: {p}") from None
    except IsADirectoryError:
        raise BadInput(f"{p} is a directory, not a recording") from None
    except OSError as exc:
        raise BadInput(f"cannot read {p}: {exc.strerror or exc}") from None
    return parse_recording(data, str(p))


def parse_recording(data: bytes, name: str = "recording") -> Recording:
    if not data.strip():
        raise BadInput(f"{name} is empty: not a cliff-tui recording (nothing was recorded)")
    lines = data.split(b"\n")
    header = _header(lines[0], name)
    ends_cleanly = data.endswith(b"\n")
    recording = Recording(name, header, [])
    last = len(lines) - 1
    for number, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        try:
            recording.events.append(event_from_plain(json.loads(raw)))
        except (ValueError, DecodeError, TypeError, RecursionError) as exc:
            if number - 1 == last and not ends_cleanly:
                recording.truncated_tail = True
            else:
                recording.skipped.append(f"line {number}: {_why(exc)}")
    return recording


def _header(raw: bytes, name: str) -> dict[str, Any]:
    not_ours = f"{name} is not a cliff-tui recording (its first line is not a cliff-tui header)"
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadInput(not_ours) from None
    if not isinstance(header, dict) or header.get("type") != "header" or header.get("format") != FORMAT:
        raise BadInput(not_ours)
    schema = header.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise BadInput(f"{name}: the header has no schema version: not a cliff-tui recording")
    if schema > SCHEMA_VERSION:
        raise BadInput(f"{name} was written with recording schema {schema}, newer than this cliff-tui reads "
                       f"({SCHEMA_VERSION}): upgrade cliff-tui (pip install -U cliff-tui)")
    return header


def _why(exc: Exception) -> str:
    if isinstance(exc, DecodeError):
        return str(exc)
    return "not a JSON line"
