"""What ``-m`` names, resolved to models and read as far as their headers.

- a path: the file (a split model's other parts from beside its first);
- a folder: every GGUF in it, grouped as ``cliff-tui models`` groups them;
- ``http(s)://…/file.gguf``: the header over HTTP Range requests (:mod:`.remote`), every part's of a
  split model;
- ``hf:owner/repo[:quant]`` or ``hf:owner/repo/file.gguf``: the Hub's ``resolve/main/`` URL
  (:mod:`.hub`; ``HF_TOKEN``, ``HF_ENDPOINT``);
- ``ollama:name[:tag]``: the Ollama store's blob (:mod:`.ollama_store`); its ``num_ctx`` is the
  context to fit where none is given.

Remote headers are cached (:mod:`.header_cache`); ``offline`` reads the cache only.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from cliff_tui.engine.gguf_meta import (
    GgufHeader,
    model_info_from_headers,
    read_header,
    read_model_info,
    split_part_names,
)
from cliff_tui.errors import BadInput
from cliff_tui.models import hub, ollama_store
from cliff_tui.models.header_cache import CachedList, CachedModel, FileStamp, HeaderCache
from cliff_tui.models.remote import (
    DEFAULT_TIMEOUT,
    FIRST_READ,
    PART_FIRST_READ,
    Http,
    NotModified,
    RemoteFile,
    Validators,
    hub_token,
    origin,
    shown_url,
)
from cliff_tui.models.stores import Store, scan
from cliff_tui.records import ModelInfo
from cliff_tui.text import inert

SourceKind = Literal["file", "url", "hf", "ollama"]
CacheUse = Literal["none", "read", "validated", "offline"]
REMOTE_PREFIXES = ("http://", "https://", "hf:", "ollama:")


@dataclass(frozen=True)
class ModelRef:
    spec: str  # what -m said
    kind: SourceKind
    location: str  # the model's first file: a local path or a URL
    server_args: tuple[str, ...]  # how llama-server is told the same model
    num_ctx: int | None = None  # the context the model's store runs it with (Ollama)
    projector: str | None = None


@dataclass(frozen=True)
class ReadCost:
    """What reading a remote header took."""

    requests: int
    bytes_read: int
    header_bytes: int | None  # the header's own bytes (None where the cache answered)
    cache: CacheUse


@dataclass(frozen=True)
class OpenedModel:
    ref: ModelRef
    info: ModelInfo
    cost: ReadCost | None = None  # None for a local file

    def record(self) -> dict[str, object]:
        """The source as JSON: what was named, where it is, and what the read took."""
        record: dict[str, object] = {
            "spec": self.ref.spec,
            "kind": self.ref.kind,
            "location": self.ref.location,
            "server_args": list(self.ref.server_args),
            "num_ctx": self.ref.num_ctx,
            "projector": self.ref.projector,
        }
        if self.cost is not None:
            record |= dataclasses.asdict(self.cost)
        return record


def is_local(spec: str) -> bool:
    return not spec.lower().startswith(REMOTE_PREFIXES)


def check_local(spec: str, command: str) -> None:
    """A command that loads the model needs its file on this machine: a URL, a Hub or an Ollama
    model is one line saying what to pass instead."""
    if is_local(spec):
        return
    if spec.lower().startswith("ollama:"):
        blob = ollama_store.find(spec[len("ollama:") :]).blob
        raise BadInput(f"`{command}` loads a model from its file: {inert(spec)} is {blob}: pass -m {blob}")
    raise BadInput(
        f"`{command}` loads the model, so it needs the file on this machine: download {inert(spec)} and "
        f"pass its path (`cliff-tui fit -m {inert(spec)}` reads its header alone)"
    )


class ModelReader:
    """Resolves and reads ``-m`` specs for one command, under one network deadline."""

    def __init__(self, *, offline: bool = False, timeout: float = DEFAULT_TIMEOUT, cache: HeaderCache | None = None):
        self.offline = offline
        self.cache = cache or HeaderCache()
        self.http = Http(timeout, hub_token(), _hub_origin())

    def __enter__(self) -> ModelReader:
        self.http.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.http.__exit__(kind, exc, tb)

    def open(self, spec: str) -> list[OpenedModel]:
        """The models ``spec`` names (one, or a folder's), each read as far as its header; a remote
        model's cost counts what resolving it took (the Hub's file list, say)."""
        start = (self.http.traffic.requests, self.http.traffic.bytes)
        return [self.read(ref, start) for ref in self.resolve(spec)]

    def resolve(self, spec: str) -> list[ModelRef]:
        lower = spec.lower()
        if lower.startswith(("http://", "https://")):
            return [ModelRef(inert(spec), "url", spec, ("-mu", spec))]
        if lower.startswith("hf:"):
            return [self._resolve_hf(spec[3:])]
        if lower.startswith("ollama:"):
            found = ollama_store.find(spec[len("ollama:") :])
            projector = str(found.projector) if found.projector else None
            blob = str(found.blob)
            return [ModelRef(f"ollama:{found.name}", "ollama", blob, ("-m", blob), found.num_ctx, projector)]
        path = os.path.abspath(spec)
        if Path(path).is_dir():
            return self._folder(path)
        return [ModelRef(inert(spec), "file", path, ("-m", path))]

    def _folder(self, path: str) -> list[ModelRef]:
        found, skipped = scan([Store("folder", Path(path))])
        if not found:
            why = f" ({skipped[0].name}: {skipped[0].reason})" if skipped else ""
            raise BadInput(f"{inert(path)} holds no GGUF model{why}: pass a folder with .gguf files, or a file")
        return [ModelRef(m.name, "file", m.path, ("-m", m.path), projector=m.projector) for m in found]

    def _resolve_hf(self, text: str) -> ModelRef:
        spec = hub.parse_hf(text)
        base = hub.endpoint()
        file = spec.file or hub.pick_file(self._repo_files(base, spec.repo), spec)
        url = hub.resolve_url(base, spec.repo, file)
        shown = f"hf:{spec.repo}/{file}" if spec.file else f"hf:{inert(text)} ({inert(file)})"
        return ModelRef(shown, "hf", url, spec.server_args)

    def _repo_files(self, base: str, repo: str) -> tuple[str, ...]:
        key = f"tree:{hub.tree_url(base, repo)}"
        if self.offline:
            cached = self.cache.listing(key)
            if cached is None:
                raise BadInput(f"hf:{repo}: no file list cached: run it once without --offline")
            return cached.files
        files = hub.files_of(self.http.get_json(hub.tree_url(base, repo)))
        self.cache.put(CachedList(key, files))
        return files

    def read(self, ref: ModelRef, since: tuple[int, int] | None = None) -> OpenedModel:
        """``ref``'s header; a remote one's cost counted from ``since`` (requests, bytes)."""
        if ref.kind in ("file", "ollama"):
            return OpenedModel(ref, read_model_info(ref.location))
        return self._read_remote(ref, since or (self.http.traffic.requests, self.http.traffic.bytes))

    def _read_remote(self, ref: ModelRef, since: tuple[int, int]) -> OpenedModel:
        url = ref.location
        entry = self.cache.model(url)
        if self.offline:
            if entry is None:
                raise BadInput(f"{shown_url(url)}: no header cached: run it once without --offline")
            return OpenedModel(ref, dataclasses.replace(entry.model, path=url), ReadCost(0, 0, None, "offline"))
        requests, received = since

        def cost(header_bytes: int | None, use: CacheUse) -> ReadCost:
            traffic = self.http.traffic
            return ReadCost(traffic.requests - requests, traffic.bytes - received, header_bytes, use)

        if entry is not None and self._unchanged(entry):
            return OpenedModel(ref, dataclasses.replace(entry.model, path=url), cost(None, "validated"))
        headers, stamps = self._read_parts(url)
        info = model_info_from_headers(url, headers)
        self.cache.put(CachedModel(url, stamps, info))
        return OpenedModel(ref, info, cost(sum(h.header_bytes for h in headers), "read"))

    def _unchanged(self, entry: CachedModel) -> bool:
        """Whether every file is the one cached (a 304 each); a file without validators is read again."""
        for stamp in entry.files:
            validators = Validators(stamp.etag, stamp.last_modified)
            if not validators.conditional():
                return False
            try:
                RemoteFile(self.http, stamp.label, PART_FIRST_READ, validators).close()
            except NotModified:
                continue
            return False
        return True

    def _read_parts(self, url: str) -> tuple[list[GgufHeader], tuple[FileStamp, ...]]:
        first, stamp = self._read_one(url, FIRST_READ)
        headers, stamps = [first], [stamp]
        names = split_part_names(_file_name(url), first)
        for name in names[1:]:
            header, stamp = self._read_one(_sibling(url, name), PART_FIRST_READ)
            headers.append(header)
            stamps.append(stamp)
        return headers, tuple(stamps)

    def _read_one(self, url: str, first_read: int) -> tuple[GgufHeader, FileStamp]:
        with RemoteFile(self.http, url, first_read) as source:
            header = read_header(source)
        v = source.validators
        return header, FileStamp(url, source.size, etag=v.etag, last_modified=v.last_modified)


def _file_name(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])


def _sibling(url: str, name: str) -> str:
    """``url`` with its file name replaced (a split model's other part)."""
    parts = urllib.parse.urlsplit(url)
    folder = parts.path.rsplit("/", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(path=f"{folder}/{urllib.parse.quote(name)}"))


def _hub_origin() -> str | None:
    try:
        return origin(hub.endpoint())
    except BadInput:
        return None
