"""Every probe together: one :class:`Sample` per tick, taken on a thread of its own."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable

from cliff_tui.events import Sample
from cliff_tui.probes.amd import AmdSysfsProbe
from cliff_tui.probes.cgroup import CgroupLimits
from cliff_tui.probes.nvidia import NvidiaProbe
from cliff_tui.probes.shared_vram import SharedVramBackend, Unavailable, choose_backends, fill_shared
from cliff_tui.probes.system import ProcessProbe, read_cpu_busy_s, read_memory
from cliff_tui.records import NO_GPU, GpuReading, ProcessReading

CPU_ONLY_TIERS = "RAM and swap are the memory tiers"


class Sampler:
    def __init__(
        self,
        pid: int | None = None,
        *,
        nvidia: NvidiaProbe | None = None,
        amd: AmdSysfsProbe | None = None,
        shared: list[SharedVramBackend] | None = None,
        platform: str = sys.platform,
    ) -> None:
        self.nvidia = nvidia or NvidiaProbe()
        self.amd = amd if amd is not None else (AmdSysfsProbe() if platform.startswith("linux") else None)
        amd_cards = self.amd.cards if self.amd else []
        self.shared = shared if shared is not None else choose_backends(platform, amd_cards)
        self._process: ProcessProbe | None = None
        self._lock = threading.Lock()
        self._cgroup = CgroupLimits()
        self.set_pid(pid)

    def set_pid(self, pid: int | None) -> None:
        """Follow another process (a triangulation's worker, say); ``None`` stops following."""
        with self._lock:
            self._process = ProcessProbe(pid) if pid is not None else None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def reads_gpus(self) -> bool:
        """Whether a sample asks a GPU (NVML, amdgpu's files, a platform's counters), which can
        wait (NVML's PCIe counters take 20 ms a call); without one, a sample is a few /proc and
        cgroup files."""
        return (
            self.nvidia.may_have_gpus()
            or bool(self.amd and self.amd.cards)
            or any(not isinstance(backend, Unavailable) for backend in self.shared)
        )

    def sample(self, fresh: bool = False) -> Sample:
        """``fresh``: the cgroup read now, not up to CGROUP_EVERY_S old (for a decision on memory
        just allocated)."""
        t = time.time()
        nvidia_gpus, nvidia_reason = self.nvidia.read()
        # One index per card across vendors (history keys and labels never collide); a llama.cpp
        # device (ROCm0, CUDA0) is matched within its vendor: analysis.buffers.gpu_reading_of.
        amd_gpus = self.amd.read(first_index=len(nvidia_gpus)) if self.amd else []
        gpus = fill_shared([*nvidia_gpus, *amd_gpus], self.shared)
        gpus_reason = None
        if not gpus:
            gpus_reason = self._no_gpu_reason(nvidia_reason)
        with self._lock:
            probe = self._process
        process = probe.read() if probe else None
        if process is not None and probe is not None and gpus:
            process = _with_gpu_memory(process, gpus, probe.children_pids())
        ram, swap = read_memory()
        cgroup, cpu_quota = self._cgroup.read(probe.pid if probe else None, ram.total_bytes, fresh)
        return Sample(
            t=t,
            ram=ram,
            swap=swap,
            gpus=tuple(gpus),
            gpus_reason=gpus_reason,
            process=process,
            cpu_busy_s=read_cpu_busy_s(),
            cgroup=cgroup,
            cpu_quota=cpu_quota,
        )

    def _no_gpu_reason(self, nvidia_reason: str | None) -> str:
        parts = [f"NVIDIA: {nvidia_reason}" if nvidia_reason else "NVIDIA: none found"]
        if self.amd is not None:
            parts.append("AMD: no amdgpu card in /sys/class/drm")
        return f"{NO_GPU} (" + "; ".join(parts) + ") — " + CPU_ONLY_TIERS

    def close(self) -> None:
        self.nvidia.close()


def _with_gpu_memory(process: ProcessReading, gpus: list[GpuReading], children: list[int]) -> ProcessReading:
    pids = {process.pid, *children}
    total, seen = 0, False
    for gpu in gpus:
        for proc in gpu.processes or ():
            if proc.pid in pids and proc.used_bytes is not None:
                total += proc.used_bytes
                seen = True
    if seen:
        return dataclasses.replace(process, gpu_used_bytes=total)
    reason = "NVML lists no GPU memory for this process"
    return dataclasses.replace(process, reasons={**process.reasons, "gpu_used_bytes": reason})


class SamplerThread:
    """Calls ``sampler.sample()`` every ``interval`` seconds and hands each sample to ``publish``."""

    in_loop = False

    def __init__(self, sampler: Sampler, publish: Callable[[Sample], None], interval: float) -> None:
        self.sampler = sampler
        self.publish = publish
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cliff-sampler", daemon=True)

    def start(self) -> SamplerThread:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def take_if_due(self, now: float, early_s: float = 0.0) -> None:
        """Its thread takes them."""

    def _loop(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            self.publish(self.sampler.sample())
            next_tick += self.interval
            delay = next_tick - time.monotonic()
            if delay < 0:  # a slow probe (PCIe windows on many GPUs): skip ahead, don't burst
                next_tick = time.monotonic()
                delay = 0
            self._stop.wait(delay)


class SamplesInLoop:
    """``sampler.sample()`` every ``interval`` seconds, taken by the loop that asks
    (:meth:`take_if_due`, from a screen's tick): for a sampler that reads no GPU, whose sample
    never waits. A thread on a clock of its own wakes once more a sample and hands the GIL over
    twice (measured side by side: bench/RESULTS.md, section 'Watch CPU against btop')."""

    in_loop = True

    def __init__(self, sampler: Sampler, publish: Callable[[Sample], None], interval: float) -> None:
        self.sampler = sampler
        self.publish = publish
        self.interval = interval
        self._due = 0.0

    def start(self) -> SamplesInLoop:
        self.take_if_due(time.monotonic())  # the first sample waits for the first frame
        return self

    def stop(self, timeout: float = 2.0) -> None:
        pass

    def take_if_due(self, now: float, early_s: float = 0.0) -> None:
        """``early_s``: how early a sample may come (half the caller's period, so that a tick a
        hair before the sample is due does not skip it)."""
        if now < self._due - early_s:
            return
        self.publish(self.sampler.sample())
        due = self._due + self.interval
        self._due = due if due > now else now + self.interval  # late: on from now, not a burst
