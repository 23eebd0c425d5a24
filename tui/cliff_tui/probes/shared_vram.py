"""Shared VRAM: GPU memory the driver moved into a pool the host OS manages (sign 1).

One interface, one backend per platform. Where a platform cannot report it, the reading stays
``None`` with the reason; it is never shown as 0.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from cliff_tui.probes.amd import read_sysfs_int
from cliff_tui.records import GpuProcess, GpuReading

NVIDIA_LINUX_REASON = (
    "not available: NVIDIA's Linux driver has no shared-memory fallback (a full VRAM fails the "
    "allocation instead; CUDA unified memory is not reported by NVML)"
)
APPLE_REASON = "not available: Apple silicon has one unified memory; watch system RAM instead"


class SharedVramBackend(Protocol):
    def fill(self, gpus: Sequence[GpuReading]) -> list[GpuReading]:
        """The same readings with ``shared_*`` set, or a reason where they cannot be."""


def _with_reason(gpu: GpuReading, reason: str) -> GpuReading:
    if gpu.shared_used_bytes is not None or "shared_used_bytes" in gpu.reasons:
        return gpu
    return dataclasses.replace(gpu, reasons={**gpu.reasons, "shared_used_bytes": reason})


class Unavailable:
    """A platform that cannot report shared VRAM: says why, for every GPU."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def fill(self, gpus: Sequence[GpuReading]) -> list[GpuReading]:
        return [_with_reason(g, self.reason) for g in gpus]


class AmdGtt:
    """amdgpu's GTT pool (system memory the GPU maps): ``mem_info_gtt_used`` / ``_total``."""

    def __init__(self, cards: Sequence[Path]) -> None:
        self.cards = list(cards)

    def fill(self, gpus: Sequence[GpuReading]) -> list[GpuReading]:
        out, amd_seen = [], 0
        for gpu in gpus:
            if gpu.vendor != "amd" or amd_seen >= len(self.cards):
                out.append(gpu)
                continue
            device = self.cards[amd_seen]
            amd_seen += 1
            used = read_sysfs_int(device / "mem_info_gtt_used")
            total = read_sysfs_int(device / "mem_info_gtt_total")
            if used is None:
                out.append(_with_reason(gpu, f"not readable: {device / 'mem_info_gtt_used'}"))
            else:
                out.append(dataclasses.replace(gpu, shared_used_bytes=used, shared_total_bytes=total))
        return out


# --- Windows (WDDM) ---------------------------------------------------------------------------

ADAPTER_SHARED = r"\GPU Adapter Memory(*)\Shared Usage"
ADAPTER_DEDICATED = r"\GPU Adapter Memory(*)\Dedicated Usage"
PROCESS_SHARED = r"\GPU Process Memory(*)\Shared Usage"

_LUID_RE = re.compile(r"luid_(0x[0-9a-fA-F]+_0x[0-9a-fA-F]+)")
_PID_RE = re.compile(r"pid_(\d+)_")

CounterReader = Callable[[str], list[tuple[str, float]]]


def per_adapter(items: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Counter instances (``luid_0x…_0x…_phys_0``) summed per adapter LUID."""
    out: dict[str, float] = {}
    for name, value in items:
        match = _LUID_RE.search(name)
        if match:
            out[match.group(1)] = out.get(match.group(1), 0.0) + value
    return out


def per_process(items: Sequence[tuple[str, float]]) -> dict[str, dict[int, float]]:
    """``pid_1234_luid_…`` instances summed per adapter LUID, then per PID."""
    out: dict[str, dict[int, float]] = {}
    for name, value in items:
        pid, luid = _PID_RE.match(name), _LUID_RE.search(name)
        if pid and luid:
            by_pid = out.setdefault(luid.group(1), {})
            by_pid[int(pid.group(1))] = by_pid.get(int(pid.group(1)), 0.0) + value
    return out


def with_shared(processes: Sequence[GpuProcess] | None, shared: dict[int, float]) -> tuple[GpuProcess, ...] | None:
    """The GPU's processes, each with its shared usage; a process only WDDM knows is added."""
    if not shared:
        return None if processes is None else tuple(processes)
    by_pid = {p.pid: p for p in processes or ()}
    for pid, value in shared.items():
        by_pid[pid] = dataclasses.replace(by_pid.get(pid, GpuProcess(pid, None)), shared_bytes=int(value))
    return tuple(by_pid.values())


class WindowsCounters:
    """WDDM performance counters. NVML does not say which LUID a GPU is, so each GPU is matched
    to the adapter whose *dedicated* usage counter is closest to what NVML reports."""

    def __init__(self, read_counter: CounterReader | None = None) -> None:
        self._read = read_counter or _pdh_reader()

    def fill(self, gpus: Sequence[GpuReading]) -> list[GpuReading]:
        try:
            shared = per_adapter(self._read(ADAPTER_SHARED))
            dedicated = per_adapter(self._read(ADAPTER_DEDICATED))
            processes = per_process(self._read(PROCESS_SHARED))
        except OSError as exc:
            return Unavailable(f"not available: Windows GPU counters unreadable ({exc})").fill(gpus)
        out, free = [], set(shared)
        for gpu in gpus:
            luid = _closest_adapter(gpu.vram_used_bytes, dedicated, free)
            if luid is None:
                out.append(_with_reason(gpu, "not available: no WDDM adapter matches this GPU"))
                continue
            free.discard(luid)
            out.append(
                dataclasses.replace(
                    gpu,
                    shared_used_bytes=int(shared[luid]),
                    processes=with_shared(gpu.processes, processes.get(luid, {})),
                )
            )
        return out


def _closest_adapter(used: int | None, dedicated: dict[str, float], free: set[str]) -> str | None:
    candidates = [luid for luid in free if luid in dedicated]
    if not candidates:
        return None
    if used is None:
        return sorted(candidates)[0] if len(candidates) == 1 else None
    return min(candidates, key=lambda luid: abs(dedicated[luid] - used))


def _pdh_reader() -> CounterReader:  # pragma: no cover - needs Windows
    from cliff_tui.probes.windows_pdh import PdhCounters

    return PdhCounters().read


# --- choice -----------------------------------------------------------------------------------


def choose_backends(platform: str = sys.platform, amd_cards: Sequence[Path] = ()) -> list[SharedVramBackend]:
    """Backends to apply in order; the last one gives every GPU still unexplained a reason."""
    if platform == "win32":
        try:
            return [WindowsCounters()]
        except OSError as exc:  # pragma: no cover - needs Windows
            return [Unavailable(f"not available: Windows GPU counters unreadable ({exc})")]
    if platform == "darwin":
        return [Unavailable(APPLE_REASON)]
    backends: list[SharedVramBackend] = []
    if amd_cards:
        backends.append(AmdGtt(amd_cards))
    backends.append(Unavailable(NVIDIA_LINUX_REASON))
    return backends


def fill_shared(gpus: Sequence[GpuReading], backends: Sequence[SharedVramBackend]) -> list[GpuReading]:
    out = list(gpus)
    for backend in backends:
        out = backend.fill(out)
    return out
