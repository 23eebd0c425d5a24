"""``hf:owner/repo[:quant]`` and ``hf:owner/repo/file.gguf``: a model on the Hugging Face Hub, as
its ``resolve/main/`` URL.

A quant tag picks the file as ``llama-server -hf`` does (llama.cpp common/download.cpp,
``find_best_model``): the first model file (not an mmproj, imatrix or draft model) whose name holds
the tag followed by ``.`` or ``-``, a split model's first part; without a tag, Q4_K_M, then Q8_0,
then the first model file. The repository's files come from the Hub's tree API.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from cliff_tui.engine.gguf_meta import SPLIT_RE
from cliff_tui.errors import BadInput
from cliff_tui.text import inert

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_REPO_RE = re.compile(r"^[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)*/[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_PATH_PART_RE = re.compile(r"^[^\x00-\x1f\x7f/\\]+$")


@dataclass(frozen=True)
class HubSpec:
    repo: str
    tag: str | None = None
    file: str | None = None

    @property
    def server_args(self) -> tuple[str, ...]:
        """How llama-server names the same model."""
        if self.file:
            return ("-hf", self.repo, "-hff", self.file)
        return ("-hf", f"{self.repo}:{self.tag}" if self.tag else self.repo)


def endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` where set (a mirror, or a local Hub-shaped server)."""
    value = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).strip().rstrip("/")
    if urllib.parse.urlsplit(value).scheme not in ("http", "https"):
        raise BadInput(f"HF_ENDPOINT={inert(value)!r} is not an http(s) URL")
    return value


def parse_hf(text: str) -> HubSpec:
    """``owner/repo``, ``owner/repo:Q4_K_M`` or ``owner/repo/path/file.gguf`` (after ``hf:``)."""
    usage = "give hf:owner/repo[:quant] or hf:owner/repo/file.gguf"
    parts = text.split("/")
    if len(parts) > 2:
        repo, file = "/".join(parts[:2]), "/".join(parts[2:])
        if not _REPO_RE.match(repo) or not check_file_path(file):
            raise BadInput(f"hf:{inert(text)} is not a Hub repo and file: {usage}")
        return HubSpec(repo, file=file)
    repo, _, tag = text.partition(":")
    if not _REPO_RE.match(repo) or len(repo) > 256 or (tag and not _TAG_RE.match(tag)):
        raise BadInput(f"hf:{inert(text)} is not a Hub repo: {usage}")
    return HubSpec(repo, tag=tag or None)


def check_file_path(path: str) -> bool:
    """A file path inside a repo: no empty, ``.`` or ``..`` part, no control character."""
    parts = path.split("/")
    return len(path) <= 1024 and all(_PATH_PART_RE.match(p) and p not in (".", "..") for p in parts)


def resolve_url(base: str, repo: str, file: str) -> str:
    return f"{base}/{repo}/resolve/main/{urllib.parse.quote(file)}"


def tree_url(base: str, repo: str) -> str:
    return f"{base}/api/models/{repo}/tree/main?recursive=true"


def files_of(listing: Any) -> tuple[str, ...]:
    """The file paths of a tree listing, those that are safe paths only (the listing is outside text)."""
    if not isinstance(listing, list):
        raise BadInput("the Hub's file list is not a list: is HF_ENDPOINT a Hugging Face Hub?")
    return tuple(
        item["path"]
        for item in listing
        if isinstance(item, dict)
        and item.get("type") == "file"
        and isinstance(item.get("path"), str)
        and check_file_path(item["path"])
    )


def is_model_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.lower().endswith(".gguf") and not any(word in name for word in NOT_MODELS)


def pick_file(files: tuple[str, ...], spec: HubSpec) -> str:
    """The file ``llama-server -hf`` would take for ``spec``."""
    tags = (spec.tag,) if spec.tag else DEFAULT_TAGS
    models = [f for f in files if is_model_file(f) and _first_part(f)]
    for tag in tags:
        pattern = re.compile(re.escape(tag) + r"[.-]", re.IGNORECASE)
        found = next((f for f in models if pattern.search(f)), None)
        if found:
            return found
    if not spec.tag and models:
        return models[0]
    shown = ", ".join(inert(f) for f in models[:8]) or "none"
    wanted = f"{inert(spec.tag)} file" if spec.tag else "GGUF model"
    raise BadInput(f"hf:{spec.repo} has no {wanted} (its GGUF models: {shown})")


def _first_part(path: str) -> bool:
    match = SPLIT_RE.match(path.rsplit("/", 1)[-1])
    return match is None or int(match["no"]) == 1
