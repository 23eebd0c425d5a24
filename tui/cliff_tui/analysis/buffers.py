"""llama.cpp's buffer log, summed: bytes per kind and device, and the device that holds the KV cache."""

from __future__ import annotations

from typing import Iterable

from cliff_tui.events import BufferSize

REPORTED_KINDS = ("model", "kv", "compute")


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
