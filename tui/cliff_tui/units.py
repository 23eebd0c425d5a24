"""Formatting of bytes, rates and durations: one place, explicit units."""

from __future__ import annotations

import math
import re
from typing import Literal

KiB = 1024
MiB = 1024**2
GiB = 1024**3

_UNIT_SIZES = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB}
C_INT_MAX = 2**31 - 1
MAX_TOKENS = C_INT_MAX  # llama.cpp counts positions in an int32
LLAMA_MAX_SEQ = 256  # the most sequences (llama-server slots) one llama.cpp context holds
LARGEST = 2**63  # past anything measured (bytes, seconds, tokens): a number beyond it is corrupt
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": KiB,
    "kb": KiB,
    "kib": KiB,
    "m": MiB,
    "mb": MiB,
    "mib": MiB,
    "g": GiB,
    "gb": GiB,
    "gib": GiB,
    "t": 1024 * GiB,
    "tb": 1024 * GiB,
    "tib": 1024 * GiB,
}


def fmt_bytes(n: float | None, na: str = "n/a") -> str:
    if n is None:
        return na
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            value = n / size
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{sign}{value:.{digits}f} {unit}"
    return f"{sign}{int(n)} B"


def fmt_bytes_in(n: float, unit: Literal["B", "KiB", "MiB", "GiB"]) -> str:
    """``n`` in one given unit, without trailing zeros: ``1.5 GiB``, ``256 MiB`` (an axis's tick labels)."""
    return f"{round(n / _UNIT_SIZES[unit], 6):g} {unit}"


def fmt_rate(bytes_per_s: float | None, na: str = "n/a") -> str:
    return na if bytes_per_s is None else f"{fmt_bytes(bytes_per_s)}/s"


def fmt_tok_s(tok_s: float | None, na: str = "–") -> str:
    if tok_s is None:
        return na
    return f"{tok_s:.1f}" if tok_s < 100 else f"{tok_s:.0f}"


def fmt_pct(pct: float | None, na: str = "–", signed: bool = False) -> str:
    if pct is None:
        return na
    return f"{pct:+.0f}%" if signed else f"{pct:.0f}%"


def fmt_share(part: float | None, whole: float | None, na: str = "–") -> str:
    """``part`` of ``whole`` as a percentage; ``na`` where there is no whole to divide by."""
    if part is None or not whole or whole < 0:
        return na
    return f"{part / whole:.0%}"


def fmt_duration(seconds: float | None, na: str = "–") -> str:
    if seconds is None:
        return na
    seconds = max(0, round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def fmt_tokens(n: float) -> str:
    """A token count in three significant digits: 8000 → ``8k``, 41,472 → ``41.5k``, 1,000,000 → ``1M``
    (k is 1000, as in :func:`parse_tokens`)."""
    value = float(f"{n:.3g}")
    for suffix, size in (("M", 1_000_000), ("k", 1000)):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:g}"


def is_number(value: object) -> bool:
    """A number read from outside (JSON, a server's reply) that arithmetic can use: not a bool,
    not NaN or infinite, below ``LARGEST`` in size."""
    if type(value) not in (int, float) or not isinstance(value, (int, float)):
        return False
    return abs(value) < LARGEST and abs(float(value)) < LARGEST


def parse_tokens(text: str) -> int:
    """``16k`` → 16000, ``65k`` → 65000 (k is 1000, as in the method's depths), ``2048`` → 2048."""
    given, text = text, text.strip().lower()
    if not text:
        raise ValueError("empty token count")
    mult = 1
    if text.endswith("k"):
        text, mult = text[:-1], 1000
    try:
        value = float(text) * mult
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TOKENS or value != int(value):  # NaN fails too
        raise ValueError(f"not a whole number of tokens from 1 to {MAX_TOKENS:,}: {given!r}")
    return int(value)


def parse_size(text: str) -> int:
    """``2GiB``, ``512m``, ``1.5g`` → bytes (binary units)."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (try 512MiB or 2GiB)")
    number, unit = match.groups()
    value = float(number) * _SIZE_UNITS[(unit or "").lower()]
    if value >= LARGEST:
        raise ValueError(f"not a size this machine could have: {text!r}")
    return int(value)
