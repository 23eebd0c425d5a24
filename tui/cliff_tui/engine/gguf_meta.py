"""Read a GGUF header (metadata only, no weights) and check the file is whole.

A small reader of its own: the ``gguf`` package parses every tokenizer string (seconds for a
50k vocabulary), while this skips arrays and answers in milliseconds.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

from cliff_tui.errors import BadInput, file_error
from cliff_tui.events import ModelInfo
from cliff_tui.text import inert

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
               17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


class _Truncated(Exception):
    pass


class _Reader:
    def __init__(self, f: BinaryIO, version: int) -> None:
        self.f = f
        self.len_fmt = "<I" if version == 1 else "<Q"
        self.size = os.fstat(f.fileno()).st_size

    def read(self, n: int) -> bytes:
        if n > self.size - self.f.tell():  # a corrupt length: do not ask for exabytes
            raise _Truncated()
        data = self.f.read(n)
        if len(data) != n:
            raise _Truncated()
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.read(self.unpack(self.len_fmt)).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.f.seek(self.unpack(self.len_fmt), os.SEEK_CUR)

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.unpack("<I"), self.unpack(self.len_fmt)
            if item_type in _SCALARS:
                size = struct.calcsize(_SCALARS[item_type])
                if keep and count <= 4096:
                    return list(struct.unpack(f"<{count}{_SCALARS[item_type][1]}", self.read(size * count)))
                self.f.seek(size * count, os.SEEK_CUR)
                return None
            for _ in range(count):
                if item_type == _STRING:
                    self.skip_string()
                else:
                    self.value(item_type, keep=False)
            return None
        raise BadInput(f"unknown GGUF value type {vtype}")


def read_metadata(path: str | os.PathLike) -> tuple[dict[str, Any], int, int]:
    """Metadata (arrays of scalars up to 4096 items kept), data start offset, max tensor offset."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            magic = f.read(4)
            if magic != GGUF_MAGIC:
                shown = magic.decode("ascii", errors="replace") if magic else "nothing"
                raise BadInput(f"{p} is not a GGUF file (it starts with {shown!r}, not 'GGUF'): "
                               "pass -m a llama.cpp .gguf model")
            version = struct.unpack("<I", f.read(4) or b"\0\0\0\0")[0]
            if version not in (1, 2, 3):
                raise BadInput(f"{p}: GGUF version {version} is not one this tool reads (1–3); "
                               "is it a big-endian or newer file?")
            return _read_body(_Reader(f, version), p)
    except _Truncated:
        raise BadInput(f"{p} is a truncated GGUF (the header ends early): download or convert it again") from None
    except OSError as exc:
        raise file_error(exc, p, "model file", "pass -m PATH to a .gguf file") from None


def _read_body(r: _Reader, path: Path) -> tuple[dict[str, Any], int, int]:
    n_tensors, n_kv = r.unpack(r.len_fmt), r.unpack(r.len_fmt)
    if n_kv > 1_000_000 or n_tensors > 10_000_000:
        raise BadInput(f"{path} has an impossible GGUF header (corrupt file): download it again")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"), keep=True)
    max_offset = 0
    for _ in range(n_tensors):
        r.skip_string()
        n_dims = r.unpack("<I")
        r.f.seek(n_dims * (4 if r.len_fmt == "<I" else 8) + 4, os.SEEK_CUR)
        max_offset = max(max_offset, r.unpack("<Q"))
    alignment = int(meta.get("general.alignment", 32) or 32)
    pos = r.f.tell()
    data_start = -(-pos // alignment) * alignment
    return meta, data_start, max_offset


def read_model_info(path: str | os.PathLike) -> ModelInfo:
    p = Path(path)
    meta, data_start, max_offset = read_metadata(p)
    size = p.stat().st_size
    if size <= data_start + max_offset:
        raise BadInput(f"{p} is a truncated GGUF ({size:,} bytes, its tensors need more than "
                       f"{data_start + max_offset:,}): download or convert it again")
    return model_info_from_metadata(str(p), size, meta)


def model_info_from_metadata(path: str, size: int, meta: dict[str, Any]) -> ModelInfo:
    meta = {k: inert(v) if isinstance(v, str) else v for k, v in meta.items()}  # a downloaded file's words
    arch = meta.get("general.architecture")

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}") if arch else None

    n_head = _as_int(key("attention.head_count"))
    n_head_kv = _as_int(key("attention.head_count_kv")) or n_head
    embd = _as_int(key("embedding_length"))
    head_dim = embd // n_head if embd and n_head else None
    file_type = meta.get("general.file_type")
    return ModelInfo(
        path=path,
        name=str(meta.get("general.name") or Path(path).stem),
        size_bytes=size,
        architecture=arch,
        n_layer=_as_int(key("block_count")),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=_as_int(key("attention.key_length")) or head_dim,
        head_dim_v=_as_int(key("attention.value_length")) or head_dim,
        n_ctx_train=_as_int(key("context_length")),
        sliding_window=_as_int(key("attention.sliding_window")),
        file_type=_FILE_TYPES.get(file_type, None if file_type is None else str(file_type)),
    )


def _as_int(value: Any) -> int | None:
    """Per-layer arrays (some models vary KV heads by layer) become their rounded mean."""
    if isinstance(value, list):
        return round(sum(value) / len(value)) if value else None
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
