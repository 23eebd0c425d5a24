"""Append-only recorder: one JSON line per event, line-buffered so a ``kill -9`` loses at most
the line being written. Never overwrites a file unless told to. ``redact``: the hostname, user
paths, command-line paths and PIDs are replaced as they are written (:mod:`.redact`). A write
that fails (a full disk) stops the recording, says so once through ``on_failure`` and leaves
what was written readable; monitoring goes on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cliff_tui.codec import event_to_plain
from cliff_tui.errors import BadInput, file_error
from cliff_tui.events import Event, GeneratedText
from cliff_tui.recording.redact import Redactor
from cliff_tui.recording.schema import make_header


@dataclass(frozen=True)
class RecordingSetup:
    """How a session's recordings are made: the command line their header names, whether the
    prompt and generated text go in, whether they are redacted to share."""

    command: list[str] = field(default_factory=list)
    record_text: bool = False
    redact: bool = False


def timestamped_name(prefix: str = "cliff") -> str:
    return time.strftime(f"{prefix}-%Y%m%d-%H%M%S.jsonl")


class Recorder:
    def __init__(self, path: Path, handle: Any, record_text: bool, redact: bool = False) -> None:
        self.path = path
        self._file = handle
        self.record_text = record_text
        self.redactor = Redactor.for_this_machine() if redact else None
        self._lock = threading.Lock()
        self.count = 0
        self.failure: str | None = None
        self.failure_reason = ""
        self.on_failure: Callable[[str], None] = lambda text: None

    @classmethod
    def create(
        cls,
        path: str | Path,
        setup: RecordingSetup,
        *,
        force: bool = False,
    ) -> Recorder:
        path = Path(path)
        try:
            handle = path.open("w" if force else "x", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise file_error(exc, path, "recording") from None
        recorder = cls(path, handle, setup.record_text, setup.redact)
        header = make_header(setup.command, setup.record_text, *_gpu_identity())
        recorder._write_line(header if recorder.redactor is None else recorder.redactor.header(header), redact=False)
        if recorder.failure is not None:
            raise BadInput(
                f"cannot write the recording {path}: {recorder.failure_reason}: record elsewhere (--record FILE)"
            )
        return recorder

    def write(self, event: Event) -> None:
        if isinstance(event, GeneratedText) and not self.record_text:
            return
        self._write_line(event_to_plain(event))

    def write_all(self, events: Iterable[Event]) -> None:
        """Many events (what rebuilds a session's state, when recording starts mid-session)."""
        for event in events:
            self.write(event)

    def _write_line(self, plain: dict[str, Any], redact: bool = True) -> None:
        with self._lock:  # the redactor numbers PIDs in the order they are written
            if self._file is None:
                return
            if redact and self.redactor is not None:
                plain = self.redactor.plain(plain)
            try:
                self._file.write(json.dumps(plain, separators=(",", ":"), allow_nan=False) + "\n")
                self.count += 1
                return
            except OSError as exc:
                failed = self._stop(exc)
        self.on_failure(failed)  # outside the lock: the listener may publish, and so reach write()

    def _stop(self, exc: OSError) -> str:
        """Close the file after a failed write; the one line that says so."""
        try:
            self._file.close()
        except OSError:
            pass  # the same failure again, flushing what the write left
        self._file = None
        self.failure_reason = exc.strerror or str(exc)
        self.failure = (
            f"recording to {self.path} stopped: {self.failure_reason}; "
            f"the {self.count:,} lines before it are kept and readable"
        )
        return self.failure

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            handle, self._file = self._file, None
            if handle is not None:
                try:
                    handle.close()
                except OSError as exc:
                    self.failure = self.failure or f"recording to {self.path}: {exc.strerror or exc} on closing it"


def _gpu_identity() -> tuple[list[dict[str, Any]], str | None]:
    """GPU names and the driver version for the header; empty on a machine without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return [], None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name, "vendor": "nvidia"})
        return gpus, driver.decode() if isinstance(driver, bytes) else driver
    except Exception:
        return [], None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
