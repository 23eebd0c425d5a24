"""Lay real GGUF files out as the local stores lay theirs out, under a home folder:

- Ollama ``~/.ollama/models``: ``manifests/registry.ollama.ai/library/NAME/TAG`` JSON whose layers
  name ``blobs/sha256-<hex>`` (model, projector, a params blob holding ``num_ctx``);
- LM Studio ``~/.lmstudio/models/PUBLISHER/REPO/FILE.gguf``;
- the Hugging Face cache ``~/.cache/huggingface/hub/models--ORG--REPO``: ``blobs/<sha256>`` and
  ``snapshots/REV/FILE`` links to ``../../blobs/<sha256>``;
- llama.cpp's older flat cache ``~/.cache/llama.cpp/ORG_REPO_FILE.gguf``.

Files are hard links to the real ones where the file system allows (no copy of 250 MB), else
symbolic links.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MODEL = "application/vnd.ollama.image.model"
PROJECTOR = "application/vnd.ollama.image.projector"
PARAMS = "application/vnd.ollama.image.params"


def place(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system
        target.symlink_to(source)
    return target


def digest_of(name: str) -> str:
    """A stand-in digest: the real one would hash the file (seconds for 250 MB); unique per name."""
    return hashlib.sha256(name.encode()).hexdigest()


def ollama_root(home: Path) -> Path:
    return home / ".ollama" / "models"


def ollama_blob(home: Path, source: Path | bytes, key: str) -> str:
    """A blob in the store (a link to ``source``, or these bytes), and its digest."""
    digest = digest_of(key)
    blob = ollama_root(home) / "blobs" / f"sha256-{digest}"
    if isinstance(source, bytes):
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(source)
    elif not blob.exists():
        place(source, blob)
    return f"sha256:{digest}"


def ollama_manifest(
    home: Path, name: str, tag: str, layers: list[dict], host: str = "registry.ollama.ai/library"
) -> Path:
    path = ollama_root(home) / "manifests" / host / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "0" * 64},
        "layers": layers,
    }
    path.write_text(json.dumps(doc))
    return path


def ollama_model(
    home: Path,
    name: str,
    tag: str,
    source: Path,
    *,
    num_ctx: int | None = None,
    projector: Path | None = None,
    host: str = "registry.ollama.ai/library",
) -> Path:
    layers = [{"mediaType": MODEL, "digest": ollama_blob(home, source, str(source)), "size": source.stat().st_size}]
    if projector is not None:
        layers.append({"mediaType": PROJECTOR, "digest": ollama_blob(home, projector, str(projector)), "size": 1})
    if num_ctx is not None:
        params = json.dumps({"num_ctx": num_ctx, "stop": ["<|im_end|>"]}).encode()
        layers.append({"mediaType": PARAMS, "digest": ollama_blob(home, params, f"params-{name}-{tag}"), "size": 1})
    return ollama_manifest(home, name, tag, layers, host)


def lmstudio_model(home: Path, repo: str, file: str, source: Path) -> Path:
    return place(source, home / ".lmstudio" / "models" / repo / file)


def hf_cache_root(home: Path) -> Path:
    return home / ".cache" / "huggingface" / "hub"


def hf_cache_model(home: Path, repo: str, file: str, source: Path, revision: str = "a" * 40) -> Path:
    folder = hf_cache_root(home) / ("models--" + repo.replace("/", "--"))
    digest = digest_of(f"{repo}/{source}")
    blob = folder / "blobs" / digest
    if not blob.exists():
        place(source, blob)
    link = folder / "snapshots" / revision / file
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    return link


def llama_cache_model(home: Path, file: str, source: Path) -> Path:
    return place(source, home / ".cache" / "llama.cpp" / file)


def store_env(home: Path) -> dict[str, str]:
    """The environment of a user whose stores are all under ``home`` at their default places."""
    dropped = {"OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "LLAMA_CACHE"}
    return {k: v for k, v in os.environ.items() if k not in dropped} | {"HOME": str(home)}
