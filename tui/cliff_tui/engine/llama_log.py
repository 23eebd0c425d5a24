"""llama.cpp's log, captured through ``llama_log_set`` (never by redirecting fds 1/2, which
would blank a Textual screen), kept raw and parsed for its buffer sizes:

    load_tensors:   CPU_Mapped model buffer size =    92.10 MiB
    llama_kv_cache:        CPU KV buffer size =    45.00 MiB
    sched_reserve:        CPU compute buffer size =   102.51 MiB

Only the ``<device> <kind> buffer size = X MiB`` suffix is matched: the function-name prefix
changes between llama.cpp versions. A line carries a GGUF's own words (its name, its chat
template), so each is kept inert (:func:`cliff_tui.text.inert`) and cut to ``LOG_LIMIT``; a line
that never ends is let go at ``MAX_PARTIAL`` characters.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from collections import deque
from collections.abc import Callable

from cliff_tui.events import LogLine
from cliff_tui.records import BufferKind, BufferSize
from cliff_tui.text import LOG_LIMIT, inert
from cliff_tui.units import KiB, MiB

BUFFER_RE = re.compile(
    r"(?P<device>[A-Za-z][\w.-]*(?:\[[^\]]*\])?)\s+(?P<kind>model|KV|compute|output|RS)\s+buffer size\s*=\s*"
    r"(?P<mib>[0-9]+(?:\.[0-9]+)?)\s*MiB"
)
FLASH_RE = re.compile(r"Flash Attention (enabled|disabled)", re.IGNORECASE)

# ggml_log_level: NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5 (continues the previous line)
LEVEL_DEBUG, LEVEL_INFO, LEVEL_WARN, LEVEL_ERROR, LEVEL_CONT = 1, 2, 3, 4, 5
KIND_NAMES: dict[str, BufferKind] = {
    "model": "model",
    "KV": "kv",
    "compute": "compute",
    "output": "output",
    "RS": "recurrent",
}
MAX_PARTIAL = 64 * KiB


def parse_buffer_line(text: str) -> BufferSize | None:
    match = BUFFER_RE.search(text)
    if not match:
        return None
    return BufferSize(device=match["device"], kind=KIND_NAMES[match["kind"]], bytes=round(float(match["mib"]) * MiB))


def parse_flash_attn(text: str) -> bool | None:
    match = FLASH_RE.search(text)
    return None if not match else match.group(1).lower() == "enabled"


class LlamaLog:
    """The process-wide capture. ``listen`` adds a per-line listener; debug lines are dropped
    (llama.cpp prints hundreds per graph build) unless ``keep_debug``."""

    _instance: LlamaLog | None = None
    _instance_lock = threading.Lock()

    def __init__(self, capacity: int = 4000, keep_debug: bool = False) -> None:
        self.lines: deque[LogLine] = deque(maxlen=capacity)
        self.keep_debug = keep_debug
        self._partial = ""
        self._partial_level = LEVEL_INFO
        self._listeners: list[Callable[[LogLine], None]] = []
        self._lock = threading.Lock()
        self._callback: object = None  # the ctypes callback must outlive llama.cpp's pointer to it

    @classmethod
    def install(cls) -> LlamaLog:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
                cls._instance._install()
            return cls._instance

    def _install(self) -> None:
        import llama_cpp

        @llama_cpp.llama_log_callback
        def callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            self.feed(level, text.decode("utf-8", errors="replace") if text else "")

        self._callback = callback
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))

    def listen(self, listener: Callable[[LogLine], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def feed(self, level: int, text: str) -> None:
        with self._lock:
            if level != LEVEL_CONT:
                self._partial_level = level
            self._partial += text
            if len(self._partial) > MAX_PARTIAL and "\n" not in self._partial:
                self._partial += "\n"
            if "\n" not in self._partial:
                return
            *complete, self._partial = self._partial.split("\n")
            level = self._partial_level
            listeners = list(self._listeners)
        if level == LEVEL_DEBUG and not self.keep_debug:
            return
        for line in complete:
            if not line.strip():
                continue
            record = LogLine(t=time.time(), level=level, text=inert(line.rstrip(), limit=LOG_LIMIT))
            self.lines.append(record)
            for listener in listeners:
                listener(record)
