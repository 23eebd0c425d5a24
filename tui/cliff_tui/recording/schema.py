"""The recording file format, in one place.

Line 1 is a header object (``"type": "header"``); every further line is one event as
:func:`cliff_tui.codec.event_to_plain` writes it. Readers refuse a header whose schema is newer
than ``SCHEMA_VERSION``; older schemas are read as far as their records decode.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from cliff_tui import __version__

FORMAT = "cliff-tui-recording"
SCHEMA_VERSION = 1


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# What readers rely on in a header; a field of another shape is dropped when it is read.
HEADER_SHAPES: dict[str, Callable[[Any], bool]] = {
    "command": _strings,
    "machine": lambda v: isinstance(v, dict),
    "gpus": lambda v: isinstance(v, list) and all(isinstance(g, dict) for g in v),
    "redacted": _strings,
}


def make_header(
    command: list[str], record_text: bool, gpus: list[dict[str, Any]] | None = None, driver: str | None = None
) -> dict[str, Any]:
    return {
        "type": "header",
        "format": FORMAT,
        "schema": SCHEMA_VERSION,
        "tool_version": __version__,
        "created": time.time(),
        "command": command,
        "record_text": record_text,
        "machine": {
            "hostname": socket.gethostname(),
            "platform": sys.platform,
            "os": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
        "gpus": gpus or [],
        "driver": driver,
    }
