"""The local Ollama store: ``manifests/HOST/NAMESPACE/MODEL/TAG`` JSON whose layers name blobs by
digest, ``blobs/sha256-<hex>`` the files.

The layer of media type ``application/vnd.ollama.image.model`` is the GGUF;
``…image.projector`` a vision projector; ``…image.params`` a small JSON whose ``num_ctx`` is the
context Ollama runs the model with. A manifest is outside text: a digest is only ever turned into
``blobs/sha256-`` and 64 hex digits, so no manifest opens a file outside ``blobs/``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cliff_tui.engine.gguf_meta import GGUF_MAGIC
from cliff_tui.errors import BadInput
from cliff_tui.text import inert
from cliff_tui.units import KiB, MiB

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MODEL_LAYER = "application/vnd.ollama.image.model"
PROJECTOR_LAYER = "application/vnd.ollama.image.projector"
PARAMS_LAYER = "application/vnd.ollama.image.params"
MAX_MANIFEST_BYTES = 1 * MiB
MAX_PARAMS_BYTES = 64 * KiB
_DIGEST_RE = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_NAME_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class NotUsable(Exception):
    """A manifest or a blob that names no usable GGUF; ``str()`` says why."""


@dataclass(frozen=True)
class OllamaModel:
    name: str  # as `ollama list` shows it: llama3:8b, user/model:tag, hf.co/owner/repo:Q4_K_M
    manifest: Path
    blob: Path
    projector: Path | None
    num_ctx: int | None


def store_roots() -> list[Path]:
    """Where Ollama keeps models: ``$OLLAMA_MODELS``, the user's store, the Linux service's store."""
    roots = []
    if os.environ.get("OLLAMA_MODELS"):
        roots.append(Path(os.environ["OLLAMA_MODELS"]).expanduser())
    roots += [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
    return list(dict.fromkeys(roots))


def parse_name(text: str) -> tuple[str, str, str, str]:
    """``name[:tag]`` → (host, namespace, model, tag), each a safe path part."""
    head, colon, tail = text.rpartition(":")
    path, tag = (head, tail) if colon and "/" not in tail else (text, "")
    parts = path.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    tag = tag or DEFAULT_TAG
    if len(parts) != 3 or not all(_NAME_PART_RE.match(p) for p in [*parts, tag]):
        raise BadInput(
            f"ollama:{inert(text)} is not an Ollama model name: give ollama:NAME[:TAG], e.g. ollama:llama3:8b"
        )
    host, namespace, model = parts
    return host, namespace, model, tag


def display_name(host: str, namespace: str, model: str, tag: str) -> str:
    if host == DEFAULT_HOST and namespace == DEFAULT_NAMESPACE:
        return f"{model}:{tag}"
    if host == DEFAULT_HOST:
        return f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def find(text: str, roots: list[Path] | None = None) -> OllamaModel:
    """The model ``ollama:text`` names, in the first store that has it."""
    host, namespace, model, tag = parse_name(text)
    searched = [r for r in (roots if roots is not None else store_roots()) if (r / "manifests").is_dir()]
    for root in searched:
        manifest = root / "manifests" / host / namespace / model / tag
        if manifest.is_file():
            try:
                return read_manifest(root, manifest, display_name(host, namespace, model, tag))
            except NotUsable as exc:
                raise BadInput(f"ollama:{inert(text)}: {exc}") from None
    where = ", ".join(str(r) for r in searched) or "no Ollama store here (set OLLAMA_MODELS)"
    raise BadInput(f"ollama:{inert(text)} is not in the Ollama store ({where}): `ollama pull` it, or check the name")


def scan(root: Path) -> Iterator[OllamaModel | tuple[str, str]]:
    """Every model of a store, or (name, why it is skipped)."""
    manifests = root / "manifests"
    for manifest in _manifest_files(manifests):
        parts = manifest.relative_to(manifests).parts
        name = display_name(*parts) if len(parts) == 4 else inert(str(manifest))
        try:
            yield read_manifest(root, manifest, name)
        except NotUsable as exc:
            yield name, str(exc)


def _manifest_files(manifests: Path) -> Iterator[Path]:
    """Files exactly four levels down (HOST/NAMESPACE/MODEL/TAG); links to folders are not followed."""
    level = [manifests]
    for depth in range(4):
        next_level = []
        for folder in level:
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if not _NAME_PART_RE.match(entry.name):
                    continue
                if depth < 3 and entry.is_dir(follow_symlinks=False):
                    next_level.append(Path(entry.path))
                elif depth == 3 and entry.is_file():
                    yield Path(entry.path)
        level = next_level


def read_manifest(root: Path, manifest: Path, name: str) -> OllamaModel:
    doc = _json(manifest, MAX_MANIFEST_BYTES, "manifest")
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise NotUsable("its manifest has no layers (not an Ollama manifest)")
    by_type: dict[str, Any] = {}  # media type: digest, checked by blob_path
    for layer in layers:
        if isinstance(layer, dict) and isinstance(layer.get("mediaType"), str):
            by_type.setdefault(layer["mediaType"], layer.get("digest"))
    if MODEL_LAYER not in by_type:
        raise NotUsable("its manifest names no model layer (an adapter or an embedding of another kind?)")
    blob = blob_path(root, by_type[MODEL_LAYER])
    _check_gguf(blob)
    projector = blob_path(root, by_type[PROJECTOR_LAYER]) if PROJECTOR_LAYER in by_type else None
    num_ctx = _num_ctx(root, by_type[PARAMS_LAYER]) if PARAMS_LAYER in by_type else None
    return OllamaModel(name, manifest, blob, projector, num_ctx)


def blob_path(root: Path, digest: Any) -> Path:
    """``blobs/sha256-<hex>`` for a digest of exactly sha256 and 64 hex digits; nothing else."""
    match = _DIGEST_RE.match(digest) if isinstance(digest, str) else None
    if match is None:
        shown = inert(digest, limit=80) if isinstance(digest, str) else type(digest).__name__
        raise NotUsable(f"its manifest names a blob by a digest that is not sha256 and 64 hex digits: {shown!r}")
    return root / "blobs" / f"sha256-{match[1]}"


def _check_gguf(blob: Path) -> None:
    try:
        with blob.open("rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise NotUsable(f"its model blob {blob.name} is missing (a pull that did not finish?)") from None
    except OSError as exc:
        raise NotUsable(f"its model blob {blob.name} cannot be read: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        shown = magic.decode("ascii", errors="replace") if magic else "nothing"
        raise NotUsable(f"its model blob is not GGUF (it starts with {inert(shown)!r}): a safetensors import?")


def _num_ctx(root: Path, digest: Any) -> int | None:
    try:
        params = _json(blob_path(root, digest), MAX_PARAMS_BYTES, "params")
    except NotUsable:
        return None  # the model still reads; only Ollama's context is unknown
    value = params.get("num_ctx") if isinstance(params, dict) else None
    return value if type(value) is int and 0 < value <= 2**31 - 1 else None


def _json(path: Path, limit: int, what: str) -> Any:
    try:
        if not path.is_file():
            raise NotUsable(f"its {what} {path.name} is not a file")
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise NotUsable(f"its {what} cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise NotUsable(f"its {what} is over {limit:,} bytes: not an Ollama {what}")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise NotUsable(f"its {what} is not JSON") from None
