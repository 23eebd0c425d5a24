"""A local server's resident memory split by kind: ``/proc/PID/status`` gives anonymous, file-backed
and shared pages; ``/proc/PID/smaps`` the pages of the model file it maps (llama.cpp mmaps the GGUF
by default, so the weights are file-backed and the KV cache, compute buffers and prompt cache are
anonymous)."""

from __future__ import annotations

import os
from dataclasses import dataclass

KIB = 1024


@dataclass(frozen=True)
class ProcessMemory:
    rss: int
    anon: int
    file: int
    shmem: int
    model_mapped: int | None  # resident pages of the model file; None where smaps is unreadable


def read_process_memory(
    pid: int, model_path: str | None = None, before: ProcessMemory | None = None
) -> ProcessMemory | str:
    """The split, or one line on why it cannot be read. ``before``: the same process's previous
    split; where its file-backed pages have not moved since, the model file's pages have not
    either, and smaps (a walk of every mapping, the costliest read here) is not read again."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except PermissionError:
        return f"/proc/{pid}/status: permission denied (another user's process)"
    except OSError as exc:
        return f"/proc/{pid}/status: {exc.strerror or exc} (the process ended?)"
    values = {k: _kib(fields.get(k)) for k in ("VmRSS", "RssAnon", "RssFile", "RssShmem")}
    if values["VmRSS"] is None:
        return f"/proc/{pid}/status has no VmRSS (a kernel thread or a zombie)"
    file = values["RssFile"] or 0
    if before is not None and before.file == file and before.model_mapped is not None:
        mapped: int | None = before.model_mapped
    else:
        mapped = _mapped(pid, model_path) if model_path else None
    return ProcessMemory(values["VmRSS"], values["RssAnon"] or 0, file, values["RssShmem"] or 0, mapped)


def _kib(text: str | None) -> int | None:
    if not text:
        return None
    parts = text.split()
    try:
        return int(parts[0]) * KIB
    except (ValueError, IndexError):
        return None


def _mapped(pid: int, model_path: str) -> int | None:
    """Resident bytes of every mapping of the model file (smaps: a header line names the file, its
    ``Rss:`` line follows)."""
    try:
        target = os.path.realpath(model_path)
        total, inside = 0, False
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if line[:1].isdigit() or (line[:1] in "abcdef" and "-" in line.split(" ", 1)[0]):
                    inside = line.rstrip("\n").endswith(target) or line.rstrip("\n").endswith(model_path)
                elif inside and line.startswith("Rss:"):
                    total += _kib(line.split(":", 1)[1]) or 0
        return total
    except OSError:
        return None
