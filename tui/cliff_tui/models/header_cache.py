"""Headers already read, kept in the user's cache directory: a second look at a remote model costs
one validation request per file (none with ``--offline``), at a local one a ``stat``.

An entry is the model the header described (:class:`~cliff_tui.events.ModelInfo`) and, per file,
what says the file is still the one read: the URL's ETag or Last-Modified, or the local file's
device, inode, size and change times. Entries are read back through :mod:`cliff_tui.codec`, so a
damaged one is a miss (and its words come out inert), never a crash. The directory is
``$XDG_CACHE_HOME/cliff-tui/headers`` (``~/.cache/cliff-tui/headers``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cliff_tui.codec import DecodeError, from_plain, to_plain
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.records import ModelInfo

CACHE_VERSION = 1
MAX_ENTRIES = 2000
MAX_ENTRY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class FileStamp:
    """What says a file is the one read: a remote one's validators, a local one's inode and times."""

    label: str
    size: int
    etag: str | None = None
    last_modified: str | None = None
    device: int | None = None
    inode: int | None = None
    mtime_ns: int | None = None
    ctime_ns: int | None = None


@dataclass(frozen=True)
class CachedModel:
    key: str
    files: tuple[FileStamp, ...]
    model: ModelInfo
    version: int = CACHE_VERSION


@dataclass(frozen=True)
class CachedList:
    """A repository's file list (so ``--offline`` can pick a quant without the Hub)."""

    key: str
    files: tuple[str, ...]
    version: int = CACHE_VERSION


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cliff-tui" / "headers"


def local_stamp(path: str | os.PathLike) -> FileStamp:
    st = os.stat(path)
    return FileStamp(
        str(path), st.st_size, device=st.st_dev, inode=st.st_ino, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns
    )


class HeaderCache:
    """Entries by key (a URL, or ``file:`` and a real path); a cache that cannot be written is only
    slower."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_dir()

    def _path(self, key: str) -> Path:
        return self.root / (hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:40] + ".json")

    def model(self, key: str) -> CachedModel | None:
        entry = self._load(CachedModel, key)
        return entry if isinstance(entry, CachedModel) else None

    def listing(self, key: str) -> CachedList | None:
        entry = self._load(CachedList, key)
        return entry if isinstance(entry, CachedList) else None

    def put(self, entry: CachedModel | CachedList) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        except OSError:
            return
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(to_plain(entry), f)
            os.replace(tmp, self._path(entry.key))
            self._prune()
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _load(self, kind: type, key: str) -> object | None:
        try:
            with self._path(key).open("rb") as f:
                data = f.read(MAX_ENTRY_BYTES + 1)
            if len(data) > MAX_ENTRY_BYTES:
                return None
            entry = from_plain(kind, json.loads(data))
        except (OSError, ValueError, RecursionError, DecodeError):
            return None
        return entry if entry.key == key and entry.version == CACHE_VERSION else None

    def _prune(self) -> None:
        """Past ``MAX_ENTRIES``, the least recently written tenth goes."""
        entries = list(os.scandir(self.root))
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for entry in entries[: len(entries) // 10]:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def read_local_cached(path: str, parts: tuple[str, ...], cache: HeaderCache) -> ModelInfo:
    """A local model's header, from the cache where every file is unchanged (inode, size, times)."""
    try:
        stamps = tuple(dataclasses.replace(local_stamp(p), label=os.path.realpath(p)) for p in parts)
    except OSError:
        return read_model_info(path)
    key = f"file:{stamps[0].label}"
    entry = cache.model(key)
    if entry is not None and entry.files == stamps:
        return dataclasses.replace(entry.model, path=path)
    info = read_model_info(path)
    cache.put(CachedModel(key, stamps, info))
    return info
