"""A local server's memory explained: the model's mapped pages, the KV cache its flags size, and
what grows beyond them (llama-server's prompt cache in host RAM and its context checkpoints, capped
by ``--cache-ram`` and ``--ctx-checkpoints``), with that growth's rate and the time until RAM runs
out at it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cliff_tui.events import ServerMemory
from cliff_tui.records import GpuReading
from cliff_tui.units import MiB, fmt_bytes, fmt_duration


@dataclass(frozen=True)
class MemorySplit:
    rss: int
    model: int | None  # the model file's resident pages
    other_file: int  # libraries and other mapped files
    kv_cache: int | None
    beyond: int  # anonymous memory beyond the KV cache: compute buffers, heap, prompt cache
    growth: int  # anonymous memory gained since attach: the prompt cache and checkpoints
    growth_per_s: float | None
    saved_tokens: int | None  # the growth in tokens of saved prompt (KV bytes per cell)
    cache_ram: int | None
    seconds_to_out: float | None  # until RAM (or the cgroup's limit) runs out at this growth
    vram: tuple[tuple[int, int], ...] = ()  # (GPU index, bytes) the process holds there (NVML per process)

    def short_text(self) -> str:
        """The screen's one line: the parts that add up to RSS, then the growth against its cap."""
        kv = f" + KV {fmt_bytes(self.kv_cache)}" if self.kv_cache is not None else ""
        line = f"RSS {fmt_bytes(self.rss)} = model {fmt_bytes(self.model)} mapped{kv}"
        line += f" + other {fmt_bytes(self.beyond + self.other_file)} · prompt cache +{fmt_bytes(self.growth)}"
        if self.saved_tokens is not None:
            line += f" (~{self.saved_tokens:,} tok)"
        line += f" / --cache-ram {self.cache_ram // MiB} MiB" if self.cache_ram is not None else ", no --cache-ram cap"
        if self.seconds_to_out is not None:
            line += f", RAM out in ~{fmt_duration(self.seconds_to_out)}"
        return line + "".join(f" · GPU{i} {fmt_bytes(b)}" for i, b in self.vram)

    def text(self) -> str:
        parts = [f"RSS {fmt_bytes(self.rss)}"]
        if self.model is not None:
            parts.append(f"model (mapped file) {fmt_bytes(self.model)}")
        if self.kv_cache is not None:
            parts.append(f"KV cache {fmt_bytes(self.kv_cache)} (from the GGUF header and flags)")
        parts.append(f"other anonymous {fmt_bytes(self.beyond)}")
        grown = f"prompt cache + checkpoints grew {fmt_bytes(self.growth)} since attach"
        if self.saved_tokens is not None:
            grown += f" (~{self.saved_tokens:,} tokens of saved prompt)"
        if self.cache_ram is not None:
            grown += f", capped by --cache-ram {self.cache_ram // MiB} MiB"
        else:
            grown += ", no --cache-ram cap"
        if self.growth_per_s and self.growth_per_s > 0:
            grown += f"; +{fmt_bytes(self.growth_per_s)}/s"
            if self.seconds_to_out is not None:
                grown += f", RAM out in ~{fmt_duration(self.seconds_to_out)} at this rate (cap it: --cache-ram N)"
        parts.append(grown)
        parts.extend(f"GPU{i} VRAM {fmt_bytes(b)} (NVML, this process)" for i, b in self.vram)
        return " · ".join(parts)


def memory_split(
    readings: Sequence[ServerMemory],
    room_bytes: int | None = None,
    window_s: float = 120.0,
    gpus: Sequence[GpuReading] = (),
) -> MemorySplit | None:
    """The newest reading explained against the first (the growth) and the readings of the last
    ``window_s`` (its rate); ``room_bytes``: what RAM (or the cgroup) has left."""
    if not readings:
        return None
    first, last = readings[0], readings[-1]
    model = last.model_mapped_bytes
    kv = last.kv_cache_bytes
    growth = max(0, last.anon_bytes - first.anon_bytes)
    recent = [r for r in readings if last.t - r.t <= window_s]
    rate = None
    if len(recent) >= 2 and recent[-1].t > recent[0].t:
        rate = (recent[-1].anon_bytes - recent[0].anon_bytes) / (recent[-1].t - recent[0].t)
    tokens = int(growth / last.kv_bytes_per_cell) if last.kv_bytes_per_cell else None
    to_out = room_bytes / rate if rate and rate > 0 and room_bytes is not None and room_bytes > 0 else None
    if to_out is not None and last.cache_ram_bytes is not None:
        left = last.cache_ram_bytes - growth
        if left < (room_bytes or 0):
            to_out = None  # the cap stops the growth first
    return MemorySplit(
        rss=last.rss_bytes,
        model=model,
        other_file=max(0, last.file_bytes - (model or 0)),
        kv_cache=kv,
        beyond=max(0, last.anon_bytes - (kv or 0)),
        growth=growth,
        growth_per_s=rate,
        saved_tokens=tokens,
        cache_ram=last.cache_ram_bytes,
        seconds_to_out=to_out,
        vram=vram_of(last.pid, gpus),
    )


def vram_of(pid: int, gpus: Sequence[GpuReading]) -> tuple[tuple[int, int], ...]:
    """What each GPU's per-process list (NVML) says the process holds there."""
    return tuple(
        (g.index, p.used_bytes) for g in gpus for p in g.processes or () if p.pid == pid and p.used_bytes is not None
    )
