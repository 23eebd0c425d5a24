"""A recording that can be shared without naming the machine (``record --redact``, ``export --redact``).

Replaced, in the header and in every event: the hostname (``<host>``), user paths
(``/home/<user>/…``, ``/Users/<user>/…``, ``C:\\Users\\<user>\\…``, ``/root/…`` → ``~/…``), other
absolute paths given on the command line, in a path field or as a found server's setting (→ ``…/<file name>``), a server URL's
host unless it is loopback, and PIDs (→ 1, 2, … in the order they appear, the same number for
the same process all through). The header says what was redacted.

The redactor works on the plain JSON form of a record: a key says which rule a value gets
(``pid``, a path field, ``url``); every other string is free text, where the same replacements are
made wherever they occur.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cliff_tui.codec import event_to_plain
from cliff_tui.recording.reader import Recording, parse_recording

HOST = "<host>"
WHAT = ["hostname", "user paths", "command-line paths", "PIDs"]
PATH_KEYS = frozenset({"path", "model_path", "prompt_file"})
SETTING_VALUE = "value"  # a found server's setting: a path there came from its command line
_HOMES = r"(?:/home/|/Users/|\b[A-Za-z]:\\Users\\)[^/\\\s'\"`(),;:]+|/root"
_END = r"(?=[/\\\s'\"`(),;:]|$)"
_PID_TEXT = re.compile(r"\b(pid|process)([\s=:]+)(\d+)\b", re.IGNORECASE)  # "PID 1234", "process 1234 has exited"
_PID_FLAG = "--pid"
_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


class Redactor:
    def __init__(self, hostnames: Iterable[str | None] = (), homes: Iterable[str] = ()) -> None:
        extra = "".join(f"|{re.escape(h.rstrip('/'))}" for h in homes if len(h.rstrip("/")) > 1)
        self._home = re.compile(f"(?:{_HOMES}{extra}){_END}")
        # a name of one or two letters would hit ordinary words: only the header's field is replaced then
        names = {n for h in hostnames if h for n in (h, h.split(".")[0]) if len(n) >= 3}
        self._host = (
            re.compile(
                r"\b(?:" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b", re.IGNORECASE
            )
            if names
            else None
        )
        self._pids: dict[int, int] = {}
        self._paths: dict[str, str] = {}

    @classmethod
    def for_this_machine(cls) -> Redactor:
        return cls([socket.gethostname()], [str(Path.home())])

    @classmethod
    def for_header(cls, header: dict[str, Any]) -> Redactor:
        hostname = (header.get("machine") or {}).get("hostname")
        return cls([hostname] if isinstance(hostname, str) else [])

    # --- the rules ------------------------------------------------------------------------

    def pid(self, pid: int) -> int:
        return self._pids.setdefault(pid, len(self._pids) + 1)

    def path(self, path: str) -> str:
        """A user's path from its home (``~/…``), any other absolute path as ``…/<file name>``."""
        shown = self._paths.get(path)
        if shown is None:
            shown = self._home.sub("~", path)
            if shown == path and _is_absolute(path):
                shown = "…/" + re.split(r"[/\\]", path.rstrip("/\\"))[-1]
            self._paths[path] = shown = self.text(shown)
        return shown

    def url(self, url: str) -> str:
        try:
            parts = urllib.parse.urlsplit(url)
        except ValueError:  # not a URL after all: redacted as any other text
            return self.text(url)
        if parts.hostname and parts.hostname not in _LOOPBACK:
            netloc = HOST + (f":{parts.port}" if _port(parts) else "")
            url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        return self.text(url)

    def text(self, text: str) -> str:
        for original, shown in sorted(self._paths.items(), key=lambda item: -len(item[0])):
            if original in text:
                text = text.replace(original, shown)
        text = self._home.sub("~", text)
        if self._host is not None:
            text = self._host.sub(HOST, text)
        return _PID_TEXT.sub(lambda m: f"{m[1]}{m[2]}{self.pid(int(m[3]))}", text)

    # --- records --------------------------------------------------------------------------

    def plain(self, value: Any, key: str = "") -> Any:
        """A record's plain JSON form, redacted; the key a value sits under chooses the rule."""
        if isinstance(value, dict):
            return {k: self.plain(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.plain(v, key) for v in value]
        if isinstance(value, int) and not isinstance(value, bool) and key == "pid":
            return self.pid(value)
        if isinstance(value, str):
            if key in PATH_KEYS or (key == SETTING_VALUE and _is_absolute(value)):
                return self.path(value)
            return self.url(value) if key == "url" else self.text(value)
        return value

    def command(self, argv: list[Any]) -> list[Any]:
        out: list[Any] = []
        for i, arg in enumerate(argv):
            if not isinstance(arg, str):
                out.append(arg)
            elif i and argv[i - 1] == _PID_FLAG and arg.isascii() and arg.isdigit():
                out.append(str(self.pid(int(arg))))
            elif arg.startswith("--") and "=" in arg:
                flag, _, value = arg.partition("=")
                out.append(f"{flag}={self.command([flag, value])[1]}")
            else:
                out.append(self.path(arg) if _is_absolute(arg) else self.text(arg))
        return out

    def header(self, header: dict[str, Any]) -> dict[str, Any]:
        out = self.plain({k: v for k, v in header.items() if k != "command"})
        if isinstance(out.get("machine"), dict):
            out["machine"]["hostname"] = HOST
        out["command"] = self.command(list(header.get("command") or []))
        out["redacted"] = WHAT
        return out


def _is_absolute(path: str) -> bool:
    return path.startswith(("/", "\\", "~")) or bool(re.match(r"[A-Za-z]:[\\/]", path))


def _port(parts: urllib.parse.SplitResult) -> int | None:
    try:
        return parts.port
    except ValueError:
        return None


def redact_recording(recording: Recording) -> Recording:
    """The same recording, redacted (its header says so); what could not be read is said again."""
    redactor = Redactor.for_header(recording.header)
    header = redactor.header(recording.header)
    lines = [json.dumps(header)] + [json.dumps(redactor.plain(event_to_plain(e))) for e in recording.events]
    out = parse_recording(("\n".join(lines) + "\n").encode(), redactor.path(recording.path))
    out.skipped = [redactor.text(line) for line in recording.skipped]
    out.truncated_tail = recording.truncated_tail
    return out


def recording_lines(recording: Recording) -> str:
    """A recording as its file: the header, then one event per line (``export -o jsonl``)."""
    lines = [json.dumps(recording.header, separators=(",", ":"))]
    lines += [json.dumps(event_to_plain(e), separators=(",", ":"), allow_nan=False) for e in recording.events]
    return "\n".join(lines)
