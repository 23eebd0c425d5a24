"""Prometheus text exposition, read as llama-server's ``/metrics`` serves it."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Unlabelled samples by name (labelled ones keep their ``{…}`` in the key)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, raw = match.groups()
        try:
            values[name + (labels or "")] = float(raw)
        except ValueError:
            continue
    return values
