"""The settings of a run, checked before anything loads (cache types, flash attention, the
context against the depth), and the threads it may take: by default, and at most."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

import psutil

from cliff_tui.analysis.ggml_types import CACHE_TYPE_BYTES, QUANTISED
from cliff_tui.errors import BadInput
from cliff_tui.probes.cgroup import read_cpu_quota
from cliff_tui.records import CpuQuota, RunSettings


def resolve_settings(settings: RunSettings) -> tuple[RunSettings, list[str]]:
    """Check the knobs; returns the settings to use and what was changed, in words."""
    notes: list[str] = []
    for flag, value in (("-ctk", settings.cache_type_k), ("-ctv", settings.cache_type_v)):
        if value not in CACHE_TYPE_BYTES:
            raise BadInput(f"{flag} {value}: unknown cache type (use one of {', '.join(CACHE_TYPE_BYTES)})")
    if settings.depth < 1 or settings.n_gen < 2:
        raise BadInput("--depth must be ≥ 1 and --n-gen ≥ 2")
    if settings.cache_type_v in QUANTISED:
        if settings.flash_attn == "off":
            raise BadInput(
                f"a quantised V cache (-ctv {settings.cache_type_v}) needs flash attention: "
                "use -fa on (or leave -fa auto)"
            )
        if settings.flash_attn == "auto":
            settings = dataclasses.replace(settings, flash_attn="on")
            notes.append(f"flash attention turned on: a quantised V cache (-ctv {settings.cache_type_v}) needs it")
    if not settings.threads:
        threads, held = default_threads()
        settings = dataclasses.replace(settings, threads=threads)
        notes += [held] if held else []
    need = settings.depth + settings.n_gen
    if settings.n_ctx is not None and settings.n_ctx < need:
        raise BadInput(
            f"-c {settings.n_ctx:,} is smaller than the depth {settings.depth:,} + --n-gen "
            f"{settings.n_gen:,} = {need:,}: raise -c, or leave it out to size each context"
        )
    return settings, notes


@dataclass(frozen=True)
class CpuShare:
    """What this process may run on: the logical CPUs of its affinity (a container's or taskset's
    share) and the CPU time its cgroup's quota allows (Docker ``--cpus``, a Kubernetes limit)."""

    affinity: int
    quota: CpuQuota | None

    @property
    def usable(self) -> int:
        """Threads that can all run at once: a quota of 1.5 CPUs lets two."""
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.ceil(self.quota.cpus)))

    @property
    def whole(self) -> int:
        """Threads that run without being throttled: a quota of 1.5 CPUs keeps one busy."""
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.floor(self.quota.cpus)))

    def default_threads(self, physical_cores: int | None) -> tuple[int, str | None]:
        """The physical cores it may keep busy: llama.cpp's own default (4) oversubscribes small
        machines, which halves decode speed and doubles its noise, and a thread past a CPU quota
        is throttled. With them, why fewer where the quota is what holds them back."""
        cores = min(self.affinity, physical_cores or self.affinity)
        threads = max(1, min(self.whole, cores))
        if self.quota is None or threads >= cores:
            return threads, None
        return threads, (
            f"{threads:,} thread{'s' if threads > 1 else ''}, not {cores:,}: cgroup {self.quota.path} "
            f"allows {self.quota.words} of time (pass -t to choose)"
        )

    def too_many(self, threads: int) -> str | None:
        """Why ``threads`` of llama.cpp's would slow every token here; None where they would not."""
        if threads <= self.usable:
            return None
        at_most = f"use at most {self.usable:,}"
        if self.usable < self.affinity and self.quota is not None:
            return (
                f"{threads:,} threads where cgroup {self.quota.path} allows {self.quota.words} of time would be "
                f"throttled and slow every token: {at_most}"
            )
        cpus = f"{self.affinity:,} CPU{'s' if self.affinity > 1 else ''}"
        return (
            f"{threads:,} threads on {cpus} (what this process may use) would wait for each other "
            f"and slow every token: {at_most}"
        )


def cpu_share() -> CpuShare:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = os.cpu_count() or 1
    return CpuShare(affinity, read_cpu_quota())


def usable_cpus() -> int:
    """Threads this process can run at once (:attr:`CpuShare.usable`)."""
    return cpu_share().usable


def default_threads() -> tuple[int, str | None]:
    """:meth:`CpuShare.default_threads` for this process on this machine's physical cores."""
    return cpu_share().default_threads(psutil.cpu_count(logical=False))
