"""Read a GGUF header (metadata only, no weights) and check the file is whole.

A small reader of its own: the ``gguf`` package parses every tokenizer string (seconds for a
50k vocabulary), while this skips arrays and answers in milliseconds. It reads from a
:class:`ByteSource`, the start of a file fetched as far as the header needs: a local file here, a
remote one through HTTP ranges (:mod:`cliff_tui.models.remote`). A split model
(``-00001-of-00003.gguf``) is read part by part, each part's tensors counted.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from cliff_tui.errors import BadInput, file_error
from cliff_tui.records import ModelInfo
from cliff_tui.text import inert
from cliff_tui.units import MiB

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_BLOCK_RE = re.compile(r"blk\.(\d+)\.")
# llama.cpp's split names (llama_split_path): PREFIX-00001-of-00003.gguf
SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
MAX_SPLIT_PARTS = 9999
FIRST_READ = 1 * MiB  # the first read of a header; each further one doubles what is held
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


class HeaderTooLarge(Exception):
    """The header runs past what its source lets be fetched."""


class ByteSource(Protocol):
    """One GGUF file, fetched from its start as far as its header needs."""

    label: str  # the path or URL, as messages name it
    size: int  # the whole file's bytes
    limit: int | None  # the most bytes of header this source fetches (None: up to the file's end)

    def read_at(self, offset: int, at_least: int) -> bytes:
        """At least ``at_least`` bytes from ``offset`` (fewer only where the file ends)."""
        ...


class FileSource:
    """A local file: each read takes at least as much again as is held, so a header of any size
    takes a few reads and at most twice its bytes."""

    def __init__(self, f: BinaryIO, label: str) -> None:
        self.f = f
        self.label = label
        self.size = os.fstat(f.fileno()).st_size
        self.limit: int | None = None

    def read_at(self, offset: int, at_least: int) -> bytes:
        self.f.seek(offset)
        return self.f.read(max(at_least, offset, FIRST_READ))


@dataclass(frozen=True)
class GgufHeader:
    """One file's header: its metadata (arrays of scalars up to 4096 items kept, others as their
    length), where its tensor data starts, and each tensor's (name, offset) in file order."""

    label: str
    size: int
    meta: dict[str, Any]
    data_start: int
    tensors: tuple[tuple[str, int], ...]
    header_bytes: int = 0  # where the tensor infos end: the bytes a header read needs


class _Reader:
    """The header's bytes held from the file's start, parsed at ``pos``; more are fetched as the
    parse needs them, never past the file's size or the source's limit."""

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.buf = bytearray()
        self.pos = 0
        self.len_fmt = struct.Struct("<Q")

    def _fetch(self, end: int) -> None:
        if end > self.source.size:  # a corrupt length: do not ask for exabytes
            raise _Truncated()
        if self.source.limit is not None and end > self.source.limit:
            raise HeaderTooLarge()
        while len(self.buf) < end:
            chunk = self.source.read_at(len(self.buf), end - len(self.buf))
            if not chunk:
                raise _Truncated()
            self.buf += chunk

    def peek(self, n: int) -> bytes:
        """Up to ``n`` bytes at the start of the file: fewer where it is shorter."""
        try:
            self._fetch(min(n, self.source.size))
        except _Truncated:
            pass
        return bytes(self.buf[:n])

    def read(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            self._fetch(end)
        data = bytes(self.buf[self.pos : end])
        self.pos = end
        return data

    def skip(self, n: int) -> None:
        if self.pos + n > self.source.size:
            raise _Truncated()
        self.pos += n

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def length(self) -> int:
        return self.len_fmt.unpack(self.read(self.len_fmt.size))[0]

    def string(self) -> str:
        return self.read(self.length()).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """``count`` strings skipped: each is its length and its bytes, so each length is read (a
        tokenizer holds hundreds of thousands, hence the tight loop)."""
        unpack, step = self.len_fmt.unpack_from, self.len_fmt.size
        done = 0
        while done < count:
            pos = self.pos
            try:
                while done < count:
                    pos += step + unpack(self.buf, pos)[0]
                    done += 1
            except struct.error:  # the next length lies past what is held
                self.skip(pos - self.pos)
                self._fetch(self.pos + step)
                continue
            self.skip(pos - self.pos)

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.unpack("<I"), self.length()
            if item_type in _SCALARS:
                size = struct.calcsize(_SCALARS[item_type])
                if keep and count <= 4096:
                    return list(struct.unpack(f"<{count}{_SCALARS[item_type][1]}", self.read(size * count)))
                self.skip(size * count)
                return SkippedArray(count)
            if item_type == _STRING:
                self.skip_strings(count)
                return SkippedArray(count)
            for _ in range(count):
                self.value(item_type, keep=False)
            return SkippedArray(count)
        raise BadInput(f"unknown GGUF value type {vtype}")


class SkippedArray(int):
    """An array the reader skipped (strings, or over 4096 items): only its length is kept."""


def read_header(source: ByteSource) -> GgufHeader:
    """The header of the file ``source`` fetches; :class:`BadInput` for anything but a whole GGUF
    header (a network source raises its own :class:`BadInput` for what the network did)."""
    label = source.label
    r = _Reader(source)
    try:
        magic = r.peek(4)
        if magic != GGUF_MAGIC:
            shown = magic.decode("ascii", errors="replace") if magic else "nothing"
            raise BadInput(
                f"{label} is not a GGUF file (it starts with {shown!r}, not 'GGUF'): pass -m a llama.cpp .gguf model"
            )
        r.pos = 4
        version = r.unpack("<I")
        if version not in (1, 2, 3):
            raise BadInput(
                f"{label}: GGUF version {version} is not one this tool reads (1–3); is it a big-endian or newer file?"
            )
        if version == 1:
            r.len_fmt = struct.Struct("<I")
        return _read_body(r, label)
    except _Truncated:
        raise BadInput(f"{label} is a truncated GGUF (the header ends early): download or convert it again") from None
    except HeaderTooLarge:
        raise BadInput(
            f"{label}: the header runs past {source.limit:,} bytes, more than a GGUF header needs "
            "(a corrupt file, or a server sending something else): download the file and pass its path"
        ) from None
    except RecursionError:
        raise BadInput(
            f"{label} has arrays nested too deep for a GGUF header (corrupt file): download it again"
        ) from None


def _read_body(r: _Reader, label: str) -> GgufHeader:
    n_tensors, n_kv = r.length(), r.length()
    if n_kv > 1_000_000 or n_tensors > 10_000_000:
        raise BadInput(f"{label} has an impossible GGUF header (corrupt file): download it again")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"), keep=True)
    tensors = []
    dim_bytes = r.len_fmt.size
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        r.skip(n_dims * dim_bytes + 4)
        tensors.append((name, r.unpack("<Q")))
    alignment = _as_int(meta.get("general.alignment", 32)) or 32
    if alignment < 0 or alignment & (alignment - 1) or alignment > 2**20:
        raise BadInput(f"{label} has an impossible GGUF alignment {alignment} (corrupt file): download it again")
    data_start = -(-r.pos // alignment) * alignment
    return GgufHeader(label, r.source.size, meta, data_start, tuple(tensors), r.pos)


def read_local_header(path: str | os.PathLike) -> GgufHeader:
    p = Path(path)
    try:
        mode = p.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO would block here, llama.cpp maps a file
            raise BadInput(f"{p} is not a regular file: pass -m a llama.cpp .gguf model")
        with p.open("rb") as f:
            return read_header(FileSource(f, str(p)))
    except OSError as exc:
        raise file_error(exc, p, "model file", "pass -m PATH to a .gguf file") from None


def read_metadata(path: str | os.PathLike) -> tuple[dict[str, Any], int, list[tuple[str, int]]]:
    """Metadata (arrays of scalars up to 4096 items kept, others as their length), data start
    offset, and each tensor's (name, offset) in file order."""
    header = read_local_header(path)
    return header.meta, header.data_start, list(header.tensors)


def read_model_info(path: str | os.PathLike) -> ModelInfo:
    """A local model's header; a split model's other parts are read from beside its first."""
    p = Path(path)
    first = read_local_header(p)
    parts = split_part_names(p.name, first)
    return model_info_from_headers(str(p), [first, *(read_local_header(p.with_name(n)) for n in parts[1:])])


def split_part_names(file_name: str, first: GgufHeader) -> list[str]:
    """Every part's file name, the first included, where ``first`` is a split model's first part
    (one name where the model is one file)."""
    count = _as_int(first.meta.get("split.count")) or 1
    if count <= 1:
        return [file_name]
    number = _as_int(first.meta.get("split.no")) or 0
    match = SPLIT_RE.match(file_name)
    if not 1 < count <= MAX_SPLIT_PARTS:
        raise BadInput(f"{first.label} claims {count:,} split parts (corrupt file): download it again")
    if number != 0:
        raise BadInput(
            f"{first.label} is part {number + 1} of a {count}-part model: pass its first part "
            f"(…-00001-of-{count:05d}.gguf), llama.cpp loads the others from beside it"
        )
    if match is None or int(match["count"]) != count or int(match["no"]) != 1:
        raise BadInput(
            f"{first.label} is the first of {count} parts, but its name does not say where the others are: "
            f"keep llama.cpp's names (NAME-00001-of-{count:05d}.gguf)"
        )
    stem, digits = match["prefix"], len(match["no"])
    return [f"{stem}-{i:0{digits}d}-of-{count:0{digits}d}.gguf" for i in range(1, count + 1)]


def model_info_from_headers(path: str, headers: Sequence[GgufHeader]) -> ModelInfo:
    """The model the headers describe: the first file's metadata, every part's tensors and size."""
    first = headers[0]
    count = len(headers)
    sizes: dict[str, int] = {}
    for i, h in enumerate(headers):
        if i and (_as_int(h.meta.get("split.no")) != i or _as_int(h.meta.get("split.count")) != count):
            raise BadInput(
                f"{h.label} is not part {i + 1} of {count} of {first.label} (its split keys differ): "
                "download the parts again, all from one release"
            )
        max_offset = max((offset for _, offset in h.tensors), default=0)
        if h.size <= h.data_start + max_offset:
            raise BadInput(
                f"{h.label} is a truncated GGUF ({h.size:,} bytes, its tensors need more than "
                f"{h.data_start + max_offset:,}): download or convert it again"
            )
        sizes.update(tensor_sizes(list(h.tensors), h.size - h.data_start))
    info = model_info_from_metadata(path, sum(h.size for h in headers), first.meta)
    if count > 1:
        n_tensors = sum(len(h.tensors) for h in headers)
    else:  # a split model's first file read alone (its header says how many tensors all hold)
        n_tensors = _as_int(first.meta.get("split.tensors.count")) or len(first.tensors)
    if info.n_layer is not None and not 0 <= info.n_layer <= n_tensors:  # each layer holds tensors
        raise BadInput(
            f"{path} claims {info.n_layer:,} layers but holds {n_tensors:,} tensors (corrupt file): "
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
        file_type=None if file_type is None else FILE_TYPE_NAMES.get(file_type, str(file_type)),
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
        rope_scaling=_rope_scaling(key("rope.scaling.type"), key("rope.scale_linear")),
        rope_scaling_factor=_finite(key("rope.scaling.factor")) or _finite(key("rope.scale_linear")),
        rope_scaling_original_ctx=num("rope.scaling.original_context_length"),
    )


def _rope_scaling(kind: Any, scale_linear: Any) -> str | None:
    """The header's rope scaling type ("none" counts as none); older files wrote only a linear factor."""
    if isinstance(kind, str) and kind and kind != "none":
        return kind
    return "linear" if _finite(scale_linear) else None


def _finite(value: Any) -> float | None:
    """A positive finite factor other than 1 (which scales nothing); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 and value != 1 else None


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
