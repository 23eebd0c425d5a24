"""User-facing failures: each carries one line that says what is wrong and what to do."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal


class CliffError(Exception):
    """A problem the user can fix; ``str()`` is the one line to show.

    ``published`` is set once the failure went out on the event stream as a ``RunFailed``,
    so whoever catches it does not announce it twice."""

    kind: Literal["does_not_fit", "bad_input", "cancelled", "error"] = "error"  # a RunFailed's kind
    published = False


class BadInput(CliffError):
    kind = "bad_input"


class DoesNotFit(CliffError):
    """The context could not be allocated: a data point for triangulation, not a crash."""

    kind = "does_not_fit"

    def __init__(self, message: str, n_ctx: int | None = None) -> None:
        super().__init__(message)
        self.n_ctx = n_ctx


class Cancelled(CliffError):
    kind = "cancelled"


def file_error(exc: OSError, path: str | os.PathLike, what: str, hint: str = "") -> BadInput:
    """The one line for a file that could not be opened, read or written.

    ``what`` names the file's role ("recording", "prompt file"…); ``hint`` is what to do, appended
    to the not-found and not-a-file cases."""
    p = Path(path)
    tail = f" ({hint})" if hint else ""
    if isinstance(exc, FileNotFoundError):
        return BadInput(f"{what} not found: {p}{tail}")
    if isinstance(exc, IsADirectoryError):
        return BadInput(f"{p} is a directory, not a {what}{tail}")
    if isinstance(exc, FileExistsError) and p.is_dir():
        return BadInput(f"{p} is a directory, not a {what}: give a file's path")
    if isinstance(exc, FileExistsError):
        return BadInput(f"{p} already exists: pass --force to overwrite it or choose another name")
    if isinstance(exc, PermissionError):
        return BadInput(f"permission denied: {p} ({what})")
    return BadInput(f"cannot use the {what} {p}: {exc.strerror or exc}")


def check_readable(path: str | os.PathLike, what: str) -> None:
    """:class:`BadInput` for what cannot be read to its end as a file: a directory, a device
    (``/dev/zero`` never ends) or a socket. A pipe is read as the stream it is."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise file_error(exc, path, what) from None
    if stat.S_ISDIR(mode):
        raise file_error(IsADirectoryError(), path, what)
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise BadInput(f"{Path(path)} is a device, not a {what}: pass a file")


def read_bytes(path: str | os.PathLike, what: str) -> bytes:
    """The file's bytes; :class:`BadInput` (``file_error``'s line) when it cannot be read."""
    check_readable(path, what)
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise file_error(exc, path, what) from None


def read_text(path: str | os.PathLike, what: str) -> str:
    """The file as UTF-8 text, undecodable bytes replaced; :class:`BadInput` when it cannot be read."""
    check_readable(path, what)
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise file_error(exc, path, what) from None
