"""llama.cpp's buffer log, summed: bytes per kind and device, and the device that holds the KV cache."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from cliff_tui.records import BufferSize, GpuReading, GpuVendor

REPORTED_KINDS = ("model", "kv", "compute")

_GPU_DEVICE_RE = re.compile(r"^(CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN)(\d+)$")

# Each backend numbers its own vendor's cards from 0: ``ROCm0`` is the first AMD card even where the
# sampler lists NVIDIA's first. Vulkan numbers every vendor's cards together (None); SYCL, MUSA and
# CANN cards have no probe here, so no reading is theirs.
_BACKEND_VENDOR: dict[str, GpuVendor | None] = {"CUDA": "nvidia", "ROCm": "amd", "HIP": "amd", "Vulkan": None}


def gpu_index_of(device: str | None) -> int | None:
    """The backend's own number: ``CUDA0`` → 0, ``ROCm1`` → 1; host devices (CPU, CPU_Mapped,
    CUDA_Host, Metal's unified memory) → None. Not a :class:`GpuReading` index: see
    :func:`gpu_reading_of`."""
    match = _GPU_DEVICE_RE.match(device or "")
    return int(match.group(2)) if match else None


def gpu_reading_of(device: str | None, gpus: Sequence[GpuReading]) -> GpuReading | None:
    """The reading of the card a llama.cpp device names: the backend's number counted among its
    vendor's cards, in the sampler's order."""
    match = _GPU_DEVICE_RE.match(device or "")
    if match is None or match.group(1) not in _BACKEND_VENDOR:
        return None
    vendor = _BACKEND_VENDOR[match.group(1)]
    cards = [g for g in sorted(gpus, key=lambda g: g.index) if vendor is None or g.vendor == vendor]
    number = int(match.group(2))
    return cards[number] if number < len(cards) else None


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
