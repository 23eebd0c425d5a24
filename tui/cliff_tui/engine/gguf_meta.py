"""Read a GGUF header (metadata only, no weights) and check the file is whole.

A small reader of its own: the ``gguf`` package parses every tokenizer string (seconds for a
50k vocabulary), while this skips arrays and answers in milliseconds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import struct
from pathlib import Path
from typing import Any, BinaryIO

from cliff_tui.errors import BadInput, file_error
from cliff_tui.records import ModelInfo
from cliff_tui.text import inert

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_BLOCK_RE = re.compile(r"blk\.(\d+)\.")
# general.file_type → the name llama.cpp gives it (enum llama_ftype; gguf.LlamaFileType)
FILE_TYPE_NAMES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
}


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

    def skip(self, n: int) -> None:
        if n > self.size - self.f.tell():
            raise _Truncated()
        self.f.seek(n, os.SEEK_CUR)

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.read(self.unpack(self.len_fmt)).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.skip(self.unpack(self.len_fmt))

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
                self.skip(size * count)
                return SkippedArray(count)
            for _ in range(count):
                if item_type == _STRING:
                    self.skip_string()
                else:
                    self.value(item_type, keep=False)
            return SkippedArray(count)
        raise BadInput(f"unknown GGUF value type {vtype}")


class SkippedArray(int):
    """An array the reader skipped (strings, or over 4096 items): only its length is kept."""


def read_metadata(path: str | os.PathLike) -> tuple[dict[str, Any], int, list[tuple[str, int]]]:
    """Metadata (arrays of scalars up to 4096 items kept, others as their length), data start
    offset, and each tensor's (name, offset) in file order."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO would block here, llama.cpp maps a file
            raise BadInput(f"{p} is not a regular file: pass -m a llama.cpp .gguf model")
        with p.open("rb") as f:
            magic = f.read(4)
            if magic != GGUF_MAGIC:
                shown = magic.decode("ascii", errors="replace") if magic else "nothing"
                raise BadInput(
                    f"{p} is not a GGUF file (it starts with {shown!r}, not 'GGUF'): pass -m a llama.cpp .gguf model"
                )
            version = struct.unpack("<I", f.read(4) or b"\0\0\0\0")[0]
            if version not in (1, 2, 3):
                raise BadInput(
                    f"{p}: GGUF version {version} is not one this tool reads (1–3); is it a big-endian or newer file?"
                )
            return _read_body(_Reader(f, version), p)
    except _Truncated:
        raise BadInput(f"{p} is a truncated GGUF (the header ends early): download or convert it again") from None
    except RecursionError:
        raise BadInput(f"{p} has arrays nested too deep for a GGUF header (corrupt file): download it again") from None
    except OSError as exc:
        raise file_error(exc, p, "model file", "pass -m PATH to a .gguf file") from None


def _read_body(r: _Reader, path: Path) -> tuple[dict[str, Any], int, list[tuple[str, int]]]:
    n_tensors, n_kv = r.unpack(r.len_fmt), r.unpack(r.len_fmt)
    if n_kv > 1_000_000 or n_tensors > 10_000_000:
        raise BadInput(f"{path} has an impossible GGUF header (corrupt file): download it again")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"), keep=True)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        r.skip(n_dims * (4 if r.len_fmt == "<I" else 8) + 4)
        tensors.append((name, r.unpack("<Q")))
    alignment = _as_int(meta.get("general.alignment", 32)) or 32
    if alignment < 0 or alignment & (alignment - 1) or alignment > 2**20:
        raise BadInput(f"{path} has an impossible GGUF alignment {alignment} (corrupt file): download it again")
    pos = r.f.tell()
    data_start = -(-pos // alignment) * alignment
    return meta, data_start, tensors


def read_model_info(path: str | os.PathLike) -> ModelInfo:
    p = Path(path)
    meta, data_start, tensors = read_metadata(p)
    size = p.stat().st_size
    max_offset = max((offset for _, offset in tensors), default=0)
    if size <= data_start + max_offset:
        raise BadInput(
            f"{p} is a truncated GGUF ({size:,} bytes, its tensors need more than "
            f"{data_start + max_offset:,}): download or convert it again"
        )
    sizes = tensor_sizes(tensors, size - data_start)
    info = model_info_from_metadata(str(p), size, meta)
    n_tensors = _as_int(meta.get("split.tensors.count")) or len(tensors)  # a split model's first file
    if info.n_layer is not None and not 0 <= info.n_layer <= n_tensors:  # each layer holds tensors
        raise BadInput(
            f"{p} claims {info.n_layer:,} layers but holds {n_tensors:,} tensors (corrupt file): "
            "download or convert it again"
        )
    output = sizes.get("output.weight", sizes.get("token_embd.weight"))
    return dataclasses.replace(info, block_weight_bytes=block_weight_bytes(sizes), output_weight_bytes=output)


def tensor_sizes(tensors: list[tuple[str, int]], data_bytes: int) -> dict[str, int]:
    """Each tensor's bytes, taken as the gap to the next offset (alignment padding included)."""
    ordered = sorted(tensors, key=lambda t: t[1])
    ends = [offset for _, offset in ordered[1:]] + [data_bytes]
    return {name: end - offset for (name, offset), end in zip(ordered, ends)}


def block_weight_bytes(sizes: dict[str, int]) -> tuple[int, ...] | None:
    """Bytes of each ``blk.N.*`` group."""
    blocks: dict[int, int] = {}
    for name, size in sizes.items():
        match = _BLOCK_RE.match(name)
        if match:
            blocks[int(match[1])] = blocks.get(int(match[1]), 0) + size
    if not blocks or max(blocks) >= len(sizes):  # a block index past the tensor count: a corrupt name
        return None
    return tuple(blocks.get(i, 0) for i in range(max(blocks) + 1))


def model_info_from_metadata(path: str, size: int, meta: dict[str, Any]) -> ModelInfo:
    meta = {k: inert(v) if isinstance(v, str) else v for k, v in meta.items()}  # a downloaded file's words
    arch = meta.get("general.architecture")

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}") if arch else None

    def num(name: str) -> int | None:
        return _as_int(key(name))

    n_head = num("attention.head_count")
    # llama.cpp takes the query heads where the key is absent; a hybrid's per-layer 0s stay 0s
    n_head_kv = n_head if key("attention.head_count_kv") is None else num("attention.head_count_kv")
    embd = num("embedding_length")
    head_dim = embd // n_head if embd and n_head else None
    file_type = meta.get("general.file_type")
    pattern = key("attention.sliding_window_pattern")
    tokens = meta.get("tokenizer.ggml.tokens")
    return ModelInfo(
        path=path,
        name=str(meta.get("general.name") or Path(path).stem),
        size_bytes=size,
        architecture=arch,
        n_layer=num("block_count"),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=num("attention.key_length") or head_dim,
        head_dim_v=num("attention.value_length") or head_dim,
        n_ctx_train=num("context_length"),
        sliding_window=num("attention.sliding_window"),
        file_type=FILE_TYPE_NAMES.get(file_type, None if file_type is None else str(file_type)),
        n_embd=embd,
        n_vocab=num("vocab_size") or (int(tokens) if isinstance(tokens, SkippedArray) else None),
        n_head_kv_layers=_per_layer(key("attention.head_count_kv")),
        n_ff_layers=_per_layer(key("feed_forward_length")),
        swa_layers=tuple(bool(x) for x in pattern) if isinstance(pattern, list) else None,
        swa_period=None if isinstance(pattern, list) else _as_int(pattern),
        head_dim_k_swa=num("attention.key_length_swa"),
        head_dim_v_swa=num("attention.value_length_swa"),
        head_dim_k_mla=num("attention.key_length_mla"),
        head_dim_v_mla=num("attention.value_length_mla"),
        kv_lora_rank=num("attention.kv_lora_rank"),
        n_rot=num("rope.dimension_count"),
        n_layer_nextn=num("nextn_predict_layers"),
        shared_kv_layers=num("attention.shared_kv_layers"),
        full_attention_interval=num("full_attention_interval"),
        ssm_conv_kernel=num("ssm.conv_kernel"),
        ssm_inner_size=num("ssm.inner_size"),
        ssm_state_size=num("ssm.state_size"),
        ssm_group_count=num("ssm.group_count"),
        wkv_head_size=num("wkv.head_size"),
        token_shift_count=num("token_shift_count"),
        shortconv_l_cache=num("shortconv.l_cache"),
    )


def _per_layer(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(isinstance(v, int) or math.isfinite(v) for v in value):
        return tuple(int(v) for v in value)
    return None


def _as_int(value: Any) -> int | None:
    """Per-layer arrays (some models vary KV heads by layer) become their rounded mean."""
    if isinstance(value, SkippedArray):
        return None
    if isinstance(value, bool) or value is None:
        return None
    try:
        if isinstance(value, list):
            return round(sum(value) / len(value)) if value else None
        return int(value)
    except (TypeError, ValueError, OverflowError):  # a string, NaN or infinity: not a count
        return None
