"""Baseline and peak of every memory tier during one run, from samples taken on a thread."""

from __future__ import annotations

import statistics
import threading

from cliff_tui.analysis.cliff import RunWatch
from cliff_tui.events import Sample
from cliff_tui.records import GpuDelta


class MemoryTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.baseline: Sample | None = None
        self._ram_peak = 0
        self._swap_peak = 0
        self._rss_peak: int | None = None
        self._vram_peak: dict[int, int] = {}
        self._shared_peak: dict[int, int] = {}
        self._process_gpu_peak: int | None = None
        self._steady: list[int] | None = None
        self.throttle_seen: set[str] = set()
        self.kv_on_gpu: bool | None = None
        self.depth: int | None = None  # the run's depth now, for the depth each memory sign fired at
        self.watch = RunWatch()

    def mark_baseline(self, sample: Sample) -> None:
        with self._lock:
            self.baseline = sample
            self._ram_peak = sample.ram.used_bytes
            self._swap_peak = sample.swap.used_bytes
            self._rss_peak = sample.process.total_rss_bytes if sample.process else None
            self._vram_peak = {g.index: g.vram_used_bytes for g in sample.gpus if g.vram_used_bytes is not None}
            self._shared_peak = {g.index: g.shared_used_bytes for g in sample.gpus if g.shared_used_bytes is not None}
            self._process_gpu_peak = sample.process.gpu_used_bytes if sample.process else None

    def start_watch(self, before_load: Sample) -> None:
        """The memory signs count from before the model loads: creating a context can page its
        cache out at once (llama.cpp zeroes the whole KV cache), and that is this run's doing."""
        with self._lock:
            self.watch = RunWatch(self.kv_on_gpu)
            self.watch.observe(before_load, 0)

    def forget_host_peaks(self, sample: Sample) -> None:
        """Host memory peaks start again from ``sample``: what a filled cache's writing and loading
        held for a moment (its chunks, llama.cpp's read buffer) is not the context's memory. GPU
        peaks are kept: the KV buffers there were allocated whole when the context was created."""
        with self._lock:
            self._ram_peak = sample.ram.used_bytes
            self._swap_peak = sample.swap.used_bytes
            self._rss_peak = sample.process.total_rss_bytes if sample.process else self._rss_peak

    def mark_steady(self) -> None:
        """From now on memory should be flat: keep RSS readings to measure their noise."""
        with self._lock:
            self._steady = []

    def observe(self, sample: Sample) -> None:
        with self._lock:
            # loading reads the weights from disk (major faults too): only once the run decodes at
            # depth do faults mean the model reads its memory back from swap
            self.watch.observe(sample, self.depth, generating=self.baseline is not None)
            if self.baseline is None:
                return
            self._ram_peak = max(self._ram_peak, sample.ram.used_bytes)
            self._swap_peak = max(self._swap_peak, sample.swap.used_bytes)
            rss = sample.process.total_rss_bytes if sample.process else None
            if rss is not None:
                self._rss_peak = rss if self._rss_peak is None else max(self._rss_peak, rss)
                if self._steady is not None:
                    self._steady.append(rss)
            gpu_proc = sample.process.gpu_used_bytes if sample.process else None
            if gpu_proc is not None:
                self._process_gpu_peak = max(self._process_gpu_peak or 0, gpu_proc)
            for g in sample.gpus:
                _raise(self._vram_peak, g.index, g.vram_used_bytes)
                _raise(self._shared_peak, g.index, g.shared_used_bytes)
                if self._steady is not None and g.throttle_reasons:
                    self.throttle_seen.update(g.throttle_reasons)

    @property
    def ram_peak(self) -> int:
        return self._ram_peak

    @property
    def swap_peak(self) -> int:
        return self._swap_peak

    @property
    def rss_peak(self) -> int | None:
        return self._rss_peak

    def rss_noise(self) -> float | None:
        with self._lock:
            steady = list(self._steady or ())
        return statistics.pstdev(steady) if len(steady) >= 2 else None

    def gpu_deltas(self) -> tuple[GpuDelta, ...]:
        base = self.baseline
        if base is None:
            return ()
        out = []
        for g in base.gpus:
            reasons = {k: v for k, v in g.reasons.items() if k in ("vram_used_bytes", "shared_used_bytes")}
            out.append(
                GpuDelta(
                    index=g.index,
                    name=g.name,
                    baseline_bytes=g.vram_used_bytes,
                    peak_bytes=self._vram_peak.get(g.index),
                    shared_baseline_bytes=g.shared_used_bytes,
                    shared_peak_bytes=self._shared_peak.get(g.index),
                    process_peak_bytes=self._process_gpu_peak if g.index == 0 else None,
                    reasons=reasons,
                )
            )
        return tuple(out)


def _raise(peaks: dict[int, int], index: int, value: int | None) -> None:
    if value is not None:
        peaks[index] = max(peaks.get(index, value), value)
