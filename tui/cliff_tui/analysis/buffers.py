"""llama.cpp's buffer log, summed: bytes per kind and device, and the device that holds the KV cache."""

from __future__ import annotations

import re
from collections.abc import Iterable

from cliff_tui.records import BufferSize

REPORTED_KINDS = ("model", "kv", "compute")

_GPU_DEVICE_RE = re.compile(r"^(CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN)(\d+)$")


def gpu_index_of(device: str | None) -> int | None:
    """``CUDA0`` → 0; host devices (CPU, CPU_Mapped, CUDA_Host, Metal's unified memory) → None."""
    match = _GPU_DEVICE_RE.match(device or "")
    return int(match.group(2)) if match else None


def by_kind(buffers: Iterable[BufferSize]) -> dict[str, dict[str, int]]:
    """``{"model": {"CPU": …}, "kv": {"CUDA0": …}, "compute": {…}}``: bytes summed per device."""
    out: dict[str, dict[str, int]] = {kind: {} for kind in REPORTED_KINDS}
    for b in buffers:
        if b.kind in out:
            out[b.kind][b.device] = out[b.kind].get(b.device, 0) + b.bytes
    return out


def kv_device(buffers: Iterable[BufferSize]) -> str | None:
    """The device with the most KV cache bytes (a split cache is named by its larger part)."""
    kv = by_kind(buffers)["kv"]
    return max(kv, key=kv.__getitem__) if kv else None
