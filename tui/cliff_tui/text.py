"""Text that cliff-tui did not write, made inert before it is kept, drawn or printed.

A GGUF's ``general.name``, a shared recording, a server's reply, a process name and llama.cpp's
log can all hold terminal control sequences (``ESC ] 0 ;`` sets the window title, ``ESC ] 52 ;``
writes the clipboard, ``ESC [ 2 J`` clears the screen), bidi overrides that reorder what is shown,
invisible characters, or megabytes of one line. :func:`inert` shows every control and format
character as a visible stand-in (``ESC`` → ``␛``, ``U+202E`` → ``<U+202E>``), so a sequence can be
read but never runs, and cuts what is too long with a note. Rich markup is left as it is: the
screens draw outside text as plain text, never as markup.
"""

from __future__ import annotations

import bisect
import itertools
import unicodedata
from functools import lru_cache
from typing import Any

LINE_LIMIT = 1000  # a name, a message, a reason: more is noise (or an attack), not information
LOG_LIMIT = 4000  # one line of llama.cpp's log
TEXT_LIMIT = 1 << 20  # generated text (recorded with --record-text), the one multi-line field

# C0 controls and DEL as the Unicode "Control Pictures" (␀…␟, ␡); a tab is only whitespace.
_PICTURES = {chr(c): chr(0x2400 + c) for c in range(0x20)} | {"\x7f": "\u2421", "\t": " "}
# Categories shown as <U+XXXX>: controls (C1), format (bidi, zero-width), surrogates,
# unassigned, line and paragraph separators. Private-use and the wider spaces stay as they are.
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})


@lru_cache(maxsize=4096)
def _shown(ch: str) -> str:
    if ch in _PICTURES:
        return _PICTURES[ch]
    if unicodedata.category(ch) in _ESCAPED:
        return f"<U+{ord(ch):04X}>"
    return ch


def cut(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters long, the note included (so cutting twice is cutting once)."""
    if len(text) <= limit:
        return text
    return _with_note(list(text), limit, len(text))


def inert(text: str, *, multiline: bool = False, limit: int = LINE_LIMIT) -> str:
    """``text`` with nothing a terminal would run: controls, escape sequences, bidi and invisible
    characters shown as visible stand-ins; a newline kept only where ``multiline``. At most ``limit``
    characters, stand-ins and the cut note included, so it is idempotent."""
    if len(text) <= limit and text.isprintable():  # the common case, at C speed
        return text
    # A stand-in is never shorter than its character: past limit + 1 characters nothing more can show.
    shown = [ch if ch.isprintable() or (multiline and ch == "\n") else _shown(ch) for ch in text[: limit + 1]]
    if sum(map(len, shown)) <= limit:
        return "".join(shown)
    return _with_note(shown, limit, len(text))


def _with_note(pieces: list[str], limit: int, total: int) -> str:
    """The whole pieces that fit before the note saying how long the text was."""
    note = f"… [cut from {total:,} chars]"
    n = bisect.bisect_right(list(itertools.accumulate(map(len, pieces))), limit - len(note))
    return ("".join(pieces[:n]) + note)[:limit]


def inert_tree(value: Any, limit: int = LINE_LIMIT) -> Any:
    """A JSON-like value (a recording's header, a record) with every string made inert, keys too."""
    if isinstance(value, str):
        return inert(value, limit=limit)
    if isinstance(value, dict):
        return {inert(str(k), limit=limit): inert_tree(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert_tree(v, limit) for v in value]
    return value


def is_inert(text: str, *, multiline: bool = False) -> bool:
    """Whether ``text`` holds nothing :func:`inert` would change (for the tests and the checks)."""
    return all(ch.isprintable() or (multiline and ch == "\n") or _shown(ch) == ch for ch in text)


def file_name(path: str) -> str:
    """The last part of a path written with ``/`` or ``\\`` (a server or a recording may come from
    another platform)."""
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
