"""What fits in vLLM before it preempts: its paged KV cache, computed as vLLM 0.32 computes it.

vLLM reserves the KV cache at start-up and never spills: when a running request needs a block and
none is free, the scheduler preempts a request and recomputes it later. Every layer's page holds
``block_size`` tokens: ``2 × KV heads × head size × dtype bytes × block_size`` (MLA: one latent
vector, no ×2; ``AttentionSpec.page_size_bytes``). The KV space becomes blocks as in
``vllm/v1/core/kv_cache_utils.py``:

- Layers are grouped (``get_kv_cache_groups``): one group when every layer has the same spec; for a
  hybrid model (full and sliding-window layers) each kind is split into groups of ``group_size``
  layers, the smallest kind's layer count (the largest one's where it is under 1.5× the smallest).
- ``num_blocks = space // (group_size × page)`` (``get_kv_cache_config_from_groups``), or
  ``--num-gpu-blocks-override``; one block is the block pool's null block, never handed out.
- A request of ``max_model_len`` tokens takes, from that one pool, ``cdiv(max_model_len, block_size)``
  blocks per full-attention group and ``cdiv(min(window - 1 + in-flight tokens, max_model_len),
  block_size) + 1`` per sliding-window group (``max_memory_usage_bytes``). vLLM refuses to start
  when one such request does not fit the usable blocks, and reports ``num_blocks / per-request
  blocks × max_model_len`` as its "KV cache size: N tokens" (``update_kv_cache_capacity``; the
  ``kv_cache_size_tokens`` label of ``vllm:cache_config_info``).

So ``max_num_seqs`` requests of ``max_model_len`` each can run without preemption when
``max_num_seqs × per-request blocks ≤ num_blocks - 1``. The KV space itself is given
(``--kv-cache-memory-bytes``; ``VLLM_CPU_KVCACHE_SPACE`` GiB on the CPU backend) or estimated as
``--gpu-memory-utilization × device memory - weights - activation``, where the activation peak,
non-torch memory and CUDA graphs are what vLLM profiles at start-up: not derivable from a config,
so it is an input whose default is an estimate.
"""

from __future__ import annotations

import math
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import Literal, get_args

from cliff_tui.errors import BadInput
from cliff_tui.units import GiB, fmt_bytes

LayerKind = Literal["full_attention", "sliding_attention"]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"]
Backend = Literal["gpu", "cpu"]
SpaceSource = Literal["kv-cache-memory-bytes", "cpu-kvcache-space", "gpu-memory-utilization", "num-gpu-blocks-override"]
Kept = Literal["max-model-len", "max-num-seqs"]

FULL: LayerKind = "full_attention"
SLIDING: LayerKind = "sliding_attention"
KV_CACHE_DTYPES: tuple[KvCacheDtype, ...] = get_args(KvCacheDtype)
DEFAULT_BLOCK_SIZE: dict[Backend, int] = {"gpu": 16, "cpu": 128}  # CacheConfig.DEFAULT_BLOCK_SIZE; CpuPlatform
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
DEFAULT_ACTIVATION_BYTES = 2 * GiB  # an estimate: vLLM measures it at start-up
DEFAULT_MAX_LEN = 2048  # vLLM's when the config names no length
MAX_LEN = 2**31 - 1
HYBRID_GROUP_RATIO = 1.5  # _get_kv_cache_groups_uniform_page_size
_KV_BYTES: dict[KvCacheDtype, int | None] = {
    "auto": None,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "bfloat16": 2,
    "float16": 2,
}
_MODEL_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


@dataclass(frozen=True)
class AttentionShape:
    """What the KV cache of one model is made of (from its config)."""

    layers: tuple[LayerKind, ...]
    kv_heads: int
    head_dim: int
    dtype: str | None  # the config's dtype
    sliding_window: int | None
    mla: bool = False
    max_position_embeddings: int | None = None  # vLLM's derived max_model_len


@dataclass(frozen=True)
class KvSpace:
    """The bytes vLLM gives its KV cache, and how that number came about."""

    bytes: int
    source: SpaceSource
    text: str
    estimated: bool
    flags: tuple[str, ...]  # the vLLM flags (and environment) that give it
    blocks_override: int | None = None


@dataclass(frozen=True)
class Paging:
    """The KV cache's layout in blocks for one KV dtype and block size."""

    kv_cache_dtype: KvCacheDtype
    dtype_bytes: int
    block_size: int
    bytes_per_token: int  # every layer's K and V for one token
    page_bytes: int  # one layer's block
    group_size: int  # layers per KV cache group
    groups: tuple[LayerKind, ...]  # each group's attention kind
    block_bytes: int  # what one block costs in the pool: group_size × page
    num_blocks: int

    @property
    def usable_blocks(self) -> int:
        return max(0, self.num_blocks - 1)


@dataclass(frozen=True)
class VllmFit:
    """One KV dtype's answer: the cache vLLM builds and what it holds without preempting."""

    paging: Paging
    max_model_len: int
    max_num_seqs: int
    blocks_per_request: int
    kv_cache_size_tokens: int  # what vLLM logs and exports
    max_concurrency: float  # vLLM's "Maximum concurrency" for max_model_len
    starts: bool  # one request of max_model_len fits; vLLM refuses to start otherwise
    no_preemption: bool  # max_num_seqs requests of max_model_len fit at once
    seqs_at_len: int  # the most requests of max_model_len at once without preemption
    len_at_seqs: int  # the largest max_model_len for max_num_seqs without preemption (0: none)
    kept: Kept  # which of the two the suggestion keeps
    suggested_len: int
    suggested_seqs: int
    command: str  # the vLLM flags for the suggestion; "" where nothing fits


@dataclass(frozen=True)
class VllmPlan:
    """Every inputs-dependent number for one model: the space, then a fit per KV dtype."""

    backend: Backend
    space: KvSpace
    max_model_len: int
    max_model_len_text: str
    max_num_seqs: int
    max_num_seqs_text: str
    in_flight_tokens: int  # tokens a sliding-window layer holds beyond its window (scheduled, unsettled)
    fits: tuple[VllmFit, ...]
    notes: tuple[str, ...]


def kv_dtype_bytes(kv_cache_dtype: KvCacheDtype, model_dtype: str | None) -> int:
    """Bytes per KV value: ``auto`` follows the dtype vLLM serves the model in, which for a float32
    (or unnamed) config is a 16-bit type (``_resolve_auto_dtype`` downcasts it)."""
    given = _KV_BYTES[kv_cache_dtype]
    if given is not None:
        return given
    return min(_MODEL_DTYPE_BYTES.get((model_dtype or "float32").lower(), 2), 2)


def page_bytes_per_token(shape: AttentionShape, dtype_bytes: int) -> int:
    """One layer's KV bytes per token: K and V (MLA: one latent vector) of every KV head."""
    return (1 if shape.mla else 2) * shape.kv_heads * shape.head_dim * dtype_bytes


def kv_groups(layers: tuple[LayerKind, ...]) -> tuple[int, tuple[LayerKind, ...]]:
    """vLLM's KV cache groups: their common layer count and each one's attention kind."""
    counts = Counter(layers)
    if len(counts) <= 1:
        return len(layers), tuple(counts)
    low, high = min(counts.values()), max(counts.values())
    size = high if high < low * HYBRID_GROUP_RATIO else low
    groups: list[LayerKind] = []
    for kind, n in counts.items():
        groups += [kind] * math.ceil(n / size)
    return size, tuple(groups)


def paging(shape: AttentionShape, space: KvSpace, kv_cache_dtype: KvCacheDtype, block_size: int) -> Paging:
    """The blocks ``space`` holds (a sliding layer with no window is a full one)."""
    layers = shape.layers if shape.sliding_window else (FULL,) * len(shape.layers)
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype, shape.dtype)
    per_layer = page_bytes_per_token(shape, dtype_bytes)
    size, groups = kv_groups(layers)
    block_bytes = size * per_layer * block_size
    blocks = space.blocks_override if space.blocks_override is not None else space.bytes // block_bytes
    return Paging(
        kv_cache_dtype=kv_cache_dtype,
        dtype_bytes=dtype_bytes,
        block_size=block_size,
        bytes_per_token=per_layer * len(shape.layers),
        page_bytes=per_layer * block_size,
        group_size=size,
        groups=groups,
        block_bytes=block_bytes,
        num_blocks=blocks,
    )


def blocks_per_request(page: Paging, window: int | None, max_model_len: int, in_flight: int) -> int:
    """Blocks one request of ``max_model_len`` tokens may hold across the groups (vLLM's own bound)."""
    full = math.ceil(max_model_len / page.block_size)
    if window is None:
        return full * len(page.groups)
    sliding = math.ceil(min(window - 1 + in_flight, max_model_len) / page.block_size) + 1
    return sum(full if kind == "full_attention" else sliding for kind in page.groups)


def kv_cache_size_tokens(page: Paging, per_request: int, max_model_len: int) -> int:
    """vLLM's reported capacity: its max concurrency × max_model_len, floats as vLLM has them."""
    return int(page.num_blocks / per_request * max_model_len)


def largest_len(page: Paging, window: int | None, seqs: int, in_flight: int, cap: int) -> int:
    """The largest max_model_len up to ``cap`` whose ``seqs`` requests fit the usable blocks (0: none)."""

    def fits(length: int) -> bool:
        return seqs * blocks_per_request(page, window, length, in_flight) <= page.usable_blocks

    if not fits(1):
        return 0
    low, high = 1, cap
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def fit_one(
    shape: AttentionShape,
    page: Paging,
    max_model_len: int,
    max_num_seqs: int,
    in_flight: int,
    keep: Kept,
    flags: tuple[str, ...],
    model: str,
) -> VllmFit:
    window = shape.sliding_window if "sliding_attention" in page.groups else None
    per_request = blocks_per_request(page, window, max_model_len, in_flight)
    seqs = page.usable_blocks // per_request
    length = largest_len(page, window, max_num_seqs, in_flight, shape.max_position_embeddings or MAX_LEN)
    if keep == "max-model-len" and seqs == 0:
        keep = "max-num-seqs"
    suggested_len, suggested_seqs = (
        (max_model_len, min(seqs, max_num_seqs)) if keep == "max-model-len" else (length, max_num_seqs)
    )
    command = ""
    if suggested_len and suggested_seqs:
        command = vllm_command(model, suggested_len, suggested_seqs, page, flags)
    return VllmFit(
        paging=page,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        blocks_per_request=per_request,
        kv_cache_size_tokens=kv_cache_size_tokens(page, per_request, max_model_len),
        max_concurrency=page.num_blocks / per_request,
        starts=per_request <= page.usable_blocks,
        no_preemption=max_num_seqs * per_request <= page.usable_blocks,
        seqs_at_len=seqs,
        len_at_seqs=length,
        kept=keep,
        suggested_len=suggested_len,
        suggested_seqs=suggested_seqs,
        command=command,
    )


def vllm_command(model: str, max_model_len: int, max_num_seqs: int, page: Paging, flags: tuple[str, ...]) -> str:
    """The command line that serves ``model`` so; environment assignments (VLLM_CPU_KVCACHE_SPACE) first."""
    env = [f for f in flags if not f.startswith("-")]
    args = [f for f in flags if f.startswith("-")]
    parts = [
        *env,
        "vllm serve",
        shlex.quote(model),
        f"--max-model-len {max_model_len}",
        f"--max-num-seqs {max_num_seqs}",
        *args,
    ]
    if page.kv_cache_dtype != "auto":
        parts.append(f"--kv-cache-dtype {page.kv_cache_dtype}")
    return " ".join(parts)


def vllm_size(n: int) -> str:
    """Bytes as vLLM's ``human_readable_int`` reads them (an upper-case suffix is binary)."""
    for suffix, unit in (("T", 1024 * GiB), ("G", GiB), ("M", 1024**2), ("K", 1024)):
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def given_space(kv_cache_memory_bytes: int | None, cpu_kvcache_space_gib: int | None) -> KvSpace | None:
    """The space set outright: VLLM_CPU_KVCACHE_SPACE wins on the CPU backend (the platform sets
    kv_cache_memory_bytes from it after the flags are read), else --kv-cache-memory-bytes."""
    if cpu_kvcache_space_gib is not None:
        text = f"VLLM_CPU_KVCACHE_SPACE={cpu_kvcache_space_gib} ({fmt_bytes(cpu_kvcache_space_gib * GiB)})"
        flags = (f"VLLM_CPU_KVCACHE_SPACE={cpu_kvcache_space_gib}",)
        return KvSpace(cpu_kvcache_space_gib * GiB, "cpu-kvcache-space", text, False, flags)
    if kv_cache_memory_bytes is not None:
        text = f"--kv-cache-memory-bytes {vllm_size(kv_cache_memory_bytes)} ({fmt_bytes(kv_cache_memory_bytes)})"
        flags = (f"--kv-cache-memory-bytes {vllm_size(kv_cache_memory_bytes)}",)
        return KvSpace(kv_cache_memory_bytes, "kv-cache-memory-bytes", text, False, flags)
    return None


def utilization_space(
    utilization: float, device_bytes: int, device_text: str, weights_bytes: int | None, activation_bytes: int
) -> KvSpace:
    """``utilization × device - weights - activation``: vLLM's own sum, with an estimated activation."""
    if weights_bytes is None:
        raise BadInput(
            "the weights' size is unknown (only a local folder's safetensors files say it): "
            "pass --kv-cache-memory-bytes SIZE (or --cpu-kv-space GIB for the CPU backend)"
        )
    requested = math.ceil(device_bytes * utilization)
    space = requested - weights_bytes - activation_bytes
    text = (
        f"{utilization:g} × {fmt_bytes(device_bytes)} ({device_text}) - {fmt_bytes(weights_bytes)} weights "
        f"- {fmt_bytes(activation_bytes)} activation = {fmt_bytes(max(space, 0))}"
    )
    if space <= 0:
        raise BadInput(
            f"no room for a KV cache: {text.rsplit(' = ', 1)[0]} is not above zero: "
            "raise --gpu-memory-utilization, or give --kv-cache-memory-bytes"
        )
    flags = (f"--gpu-memory-utilization {utilization:g}",)
    return KvSpace(space, "gpu-memory-utilization", text, True, flags)


def overridden(space: KvSpace, blocks: int) -> KvSpace:
    """``--num-gpu-blocks-override``: the block count, whatever the space holds."""
    flag = f"--num-gpu-blocks-override {blocks}"
    return KvSpace(
        space.bytes,
        "num-gpu-blocks-override",
        f"{flag} (the space: {space.text})",
        space.estimated,
        (*space.flags, flag),
        blocks,
    )


def plan(
    shape: AttentionShape,
    space: KvSpace,
    backend: Backend,
    *,
    kv_cache_dtypes: tuple[KvCacheDtype, ...] = ("auto", "fp8"),
    block_size: int | None = None,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    device_bytes: int | None = None,
    model: str = "MODEL",
    model_flags: tuple[str, ...] = (),
) -> VllmPlan:
    """The fit of each KV dtype for a target max_model_len and max_num_seqs (vLLM's defaults where
    None: the model's length, the backend's and device's batch). The suggestion keeps the
    max_model_len unless only max_num_seqs was given."""
    length = max_model_len or shape.max_position_embeddings or DEFAULT_MAX_LEN
    default_seqs, default_batched = batch_defaults(backend, device_bytes)
    seqs = max_num_seqs or default_seqs
    keep: Kept = "max-num-seqs" if max_num_seqs and not max_model_len else "max-model-len"
    size = block_size or DEFAULT_BLOCK_SIZE[backend]
    batches = 2 if backend == "gpu" else 1  # async scheduling: on by default on a GPU, off on the CPU backend
    in_flight = batches * (max_num_batched_tokens or min(default_batched, seqs * length))
    extra = (*model_flags, *((f"--block-size {block_size}",) if block_size else ()))
    fits = tuple(
        fit_one(shape, paging(shape, space, dtype, size), length, seqs, in_flight, keep, (*space.flags, *extra), model)
        for dtype in kv_cache_dtypes
    )
    return VllmPlan(
        backend=backend,
        space=space,
        max_model_len=length,
        max_model_len_text=_length_text(max_model_len, shape),
        max_num_seqs=seqs,
        max_num_seqs_text="given" if max_num_seqs else f"vLLM's default for this {backend.upper()}",
        in_flight_tokens=in_flight,
        fits=fits,
        notes=_notes(shape, space, backend, size, in_flight),
    )


def batch_defaults(backend: Backend, device_bytes: int | None) -> tuple[int, int]:
    """vLLM's API-server defaults, max_num_seqs and max_num_batched_tokens (``get_batch_defaults``):
    larger on GPUs of 70 GiB and more (an A100 of 80 GB excepted, which this cannot tell)."""
    if backend == "cpu":
        return 128, 2048
    if device_bytes and device_bytes >= 160 * GiB:
        return 1024, 16384
    if device_bytes and device_bytes >= 70 * GiB:
        return 1024, 8192
    return 256, 2048


def _length_text(given: int | None, shape: AttentionShape) -> str:
    if given:
        return "given"
    if shape.max_position_embeddings:
        return "the model's, vLLM's default"
    return f"vLLM's default ({DEFAULT_MAX_LEN:,}) for a config that names no length"


def _notes(shape: AttentionShape, space: KvSpace, backend: Backend, block_size: int, in_flight: int) -> tuple[str, ...]:
    notes = [
        "preemption-free means max-num-seqs requests of max-model-len tokens all hold their blocks at once; "
        "one block is vLLM's null block and never holds tokens"
    ]
    if space.estimated:
        notes.append(
            "the KV space is an estimate: the activation peak, non-torch memory and CUDA graphs are what vLLM "
            "measures at start-up (its log says 'Available KV cache memory'); pass --kv-cache-memory-bytes for an "
            "exact answer"
        )
    if backend == "gpu" and block_size == DEFAULT_BLOCK_SIZE["gpu"]:
        notes.append("block size 16 is vLLM's default; an attention backend may prefer another: pass --block-size")
    if shape.sliding_window and "sliding_attention" in shape.layers:
        notes.append(
            f"sliding-window layers hold at most their window ({shape.sliding_window:,}) plus {in_flight:,} "
            "in-flight tokens plus one block (vLLM's hybrid KV cache manager; "
            "--disable-hybrid-kv-cache-manager makes them keep every token)"
        )
    return tuple(notes)
