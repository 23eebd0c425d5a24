"""Every GGUF on this machine: the Ollama store, LM Studio's folders, the Hugging Face cache,
llama.cpp's download cache, and folders given.

A folder store is walked for ``*.gguf`` names (the Hugging Face layout's snapshot links carry the
names; its ``blobs/`` do not); links to folders are followed once each, so a link loop ends. In one
folder, a split model's parts are one model (listed by its first part) and a vision projector
(``mmproj``) belongs to the models beside it. One file under two names (two Ollama tags, a
snapshot link, a hard link from one store into another) is one model, its other names kept.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from cliff_tui.engine.gguf_meta import SPLIT_RE
from cliff_tui.models import ollama_store
from cliff_tui.text import inert

StoreKind = Literal["ollama", "lm-studio", "hf-cache", "llama.cpp", "folder"]
STORE_NAMES: dict[str, str] = {
    "ollama": "Ollama",
    "lm-studio": "LM Studio",
    "hf-cache": "HF cache",
    "llama.cpp": "llama.cpp cache",
    "folder": "folder",
}
MAX_DEPTH = 16
MAX_ENTRIES = 200_000  # a walk that meets more is cut short (a folder store is not a whole disk)


@dataclass(frozen=True)
class Store:
    kind: StoreKind
    root: Path


@dataclass(frozen=True)
class FoundModel:
    name: str  # what its store calls it
    store: StoreKind
    path: str  # its first file: what -m takes
    parts: tuple[str, ...]  # every file of it, the first included
    projector: str | None = None
    num_ctx: int | None = None  # the context its store runs it with (Ollama's num_ctx)
    also: tuple[str, ...] = ()  # the same file under other names: "HF cache: org/repo/file.gguf"


@dataclass(frozen=True)
class Skipped:
    name: str
    store: StoreKind
    reason: str


def default_stores(folders: list[str] | None = None) -> list[Store]:
    """The stores that exist here, then ``folders`` (in the order given)."""
    home = Path.home()
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    hf_home = Path(os.environ["HF_HOME"]).expanduser() if os.environ.get("HF_HOME") else xdg / "huggingface"
    hf_hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    llama = os.environ.get("LLAMA_CACHE")
    candidates: list[Store] = [Store("ollama", root) for root in ollama_store.store_roots()]
    candidates += [
        Store("lm-studio", home / ".lmstudio" / "models"),
        Store("lm-studio", home / ".cache" / "lm-studio" / "models"),
    ]
    candidates.append(Store("hf-cache", Path(hf_hub).expanduser() if hf_hub else hf_home / "hub"))
    if llama:
        candidates.append(Store("llama.cpp", Path(llama).expanduser()))
    else:  # llama.cpp's fs_get_cache_directory: XDG on Linux, ~/Library/Caches on macOS
        candidates += [
            Store("llama.cpp", xdg / "llama.cpp"),
            Store("llama.cpp", home / "Library" / "Caches" / "llama.cpp"),
        ]
    found = [s for s in candidates if s.root.is_dir()]
    found += [Store("folder", Path(f)) for f in folders or []]
    return _unique_roots(found)


def _unique_roots(stores: list[Store]) -> list[Store]:
    seen: set[str] = set()
    out = []
    for store in stores:
        real = os.path.realpath(store.root)
        if real not in seen:
            seen.add(real)
            out.append(store)
    return out


def scan(stores: list[Store]) -> tuple[list[FoundModel], list[Skipped]]:
    """The models of ``stores``, each file once (the first store's name first), and what was skipped."""
    models: list[FoundModel] = []
    skipped: list[Skipped] = []
    by_file: dict[tuple[int, int], int] = {}
    for store in stores:
        for item in _scan_store(store):
            if isinstance(item, Skipped):
                skipped.append(item)
                continue
            try:
                st = os.stat(item.path)
            except OSError as exc:
                skipped.append(Skipped(item.name, store.kind, f"cannot be read: {exc.strerror or exc}"))
                continue
            identity = (st.st_dev, st.st_ino)
            if identity in by_file:
                i = by_file[identity]
                other = f"{STORE_NAMES[store.kind]}: {item.name}"
                if (item.store, item.name) != (models[i].store, models[i].name) and other not in models[i].also:
                    models[i] = replace(models[i], also=(*models[i].also, other))
                continue
            by_file[identity] = len(models)
            models.append(item)
    return models, skipped


def _scan_store(store: Store) -> Iterator[FoundModel | Skipped]:
    if store.kind == "ollama":
        for item in ollama_store.scan(store.root):
            if isinstance(item, tuple):
                yield Skipped(item[0], "ollama", item[1])
            else:
                projector = str(item.projector) if item.projector else None
                yield FoundModel(item.name, "ollama", str(item.blob), (str(item.blob),), projector, item.num_ctx)
        return
    for folder, names, problems in walk_gguf(store.root):
        for name, reason in problems:
            yield Skipped(_model_name(store, folder / name), store.kind, reason)
        yield from _group(store, folder, names)


def walk_gguf(root: Path) -> Iterator[tuple[Path, list[str], list[tuple[str, str]]]]:
    """Each folder under ``root`` with its ``*.gguf`` files, and the ``*.gguf`` names that are no
    readable file (a broken link, a link loop); hidden folders (``.locks``, ``.no_exist``) skipped."""
    seen: set[tuple[int, int]] = set()
    stack = [(root, 0)]
    entries_seen = 0
    while stack and entries_seen < MAX_ENTRIES:
        folder, depth = stack.pop()
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        entries_seen += len(entries)
        files, problems, subfolders = [], [], []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            kind = _kind(entry)
            if entry.name.lower().endswith(".gguf"):
                if kind == "file":
                    files.append(entry.name)
                elif kind != "dir":
                    problems.append((entry.name, kind))
            elif kind == "dir" and depth < MAX_DEPTH:
                subfolders.append((Path(entry.path), depth + 1))
        if files or problems:
            yield folder, files, problems
        stack.extend(reversed(subfolders))


def _kind(entry: os.DirEntry) -> str:
    """ "file", "dir", or why the entry is neither."""
    try:
        if entry.is_dir():
            return "dir"
        if entry.is_file():
            return "file"
    except OSError as exc:  # ELOOP: a link loop
        return f"cannot be read: {exc.strerror or exc}"
    if entry.is_symlink():
        return "a broken link (its target is gone)"
    return "not a regular file"


def _group(store: Store, folder: Path, names: list[str]) -> Iterator[FoundModel | Skipped]:
    """The models of one folder: split parts as one, projectors given to the models beside them."""
    projectors = [n for n in names if "mmproj" in n.lower()]
    projector = str(folder / projectors[0]) if projectors else None
    splits: dict[tuple[str, int], dict[int, str]] = {}
    for name in names:
        if name in projectors:
            continue
        match = SPLIT_RE.match(name)
        if match is None:
            path = folder / name
            yield FoundModel(_model_name(store, path), store.kind, str(path), (str(path),), projector)
            continue
        splits.setdefault((match["prefix"], int(match["count"])), {})[int(match["no"])] = name
    for (_prefix, count), parts in splits.items():
        first = folder / parts.get(1, next(iter(parts.values())))
        missing = [i for i in range(1, count + 1) if i not in parts]
        if missing:
            shown = ", ".join(str(i) for i in missing[:5]) + ("…" if len(missing) > 5 else "")
            yield Skipped(_model_name(store, first), store.kind, f"part {shown} of {count} missing beside it")
            continue
        paths = tuple(str(folder / parts[i]) for i in range(1, count + 1))
        yield FoundModel(_model_name(store, first), store.kind, paths[0], paths, projector)


def _model_name(store: Store, path: Path) -> str:
    """What the store calls the file: ORG/REPO/FILE in the Hugging Face layout, else its path below
    the store's root."""
    try:
        parts = path.relative_to(store.root).parts
    except ValueError:
        parts = (path.name,)
    if len(parts) > 3 and parts[0].startswith("models--") and parts[1] == "snapshots":
        repo = parts[0].removeprefix("models--").replace("--", "/")
        parts = (repo, *parts[3:])
    return inert("/".join(parts))
