"""A local server's memory explained: the model's mapped pages, the KV cache its flags size, and
what grows beyond them (llama-server's prompt cache in host RAM and its context checkpoints, capped
by ``--cache-ram`` and ``--ctx-checkpoints``), with that growth's rate and the time until RAM runs
out at it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cliff_tui.events import ServerMemory
from cliff_tui.records import DeviceLoad, GpuReading
from cliff_tui.units import MiB, fmt_bytes, fmt_duration

NOT_LLAMA_CPP = "not a llama.cpp server"  # the basis of a split without a prompt cache to read


@dataclass(frozen=True)
class MemorySplit:
    rss: int
    model: int | None  # the model file's resident pages
    other_file: int  # libraries and other mapped files
    kv_cache: int | None
    beyond: int  # anonymous memory beyond the KV cache and the prompt cache: compute buffers, heap
    prompt_cache: int | None  # saved prompts + checkpoints now; None: unreadable (``cache_basis`` says why)
    cache_basis: str
    growth_per_s: float | None  # anonymous memory's rate over the window
    saved_tokens: int | None  # the prompt cache in tokens of saved prompt (KV bytes per cell)
    cache_ram: int | None
    seconds_to_out: float | None  # until RAM (or the cgroup's limit) runs out at this growth
    vram: tuple[tuple[int, int], ...] = ()  # (GPU index, bytes) the process holds there (NVML per process)
    devices: tuple[DeviceLoad, ...] = ()  # what each RPC device of its split holds (theory, from its flags)
    devices_note: str = ""

    def cache_words(self) -> str:
        if self.prompt_cache is None:
            return "prompt cache n/a"
        words = f"prompt cache {fmt_bytes(self.prompt_cache)}"
        return words + (f" (~{self.saved_tokens:,} tok)" if self.saved_tokens is not None else "")

    @property
    def llama_cpp(self) -> bool:
        return self.cache_basis != NOT_LLAMA_CPP

    def short_text(self) -> str:
        """The screen's one line: the parts that add up to RSS, then the prompt cache against its cap."""
        if not self.llama_cpp:
            line = f"engine RSS {fmt_bytes(self.rss)} = anonymous {fmt_bytes(self.beyond)}"
            line += f" + files {fmt_bytes(self.other_file + (self.model or 0))}"
            return line + "".join(f" · GPU{i} {fmt_bytes(b)}" for i, b in self.vram)
        kv = f" + KV {fmt_bytes(self.kv_cache)}" if self.kv_cache is not None else ""
        line = f"RSS {fmt_bytes(self.rss)} = model {fmt_bytes(self.model)} mapped{kv}"
        line += f" + other {fmt_bytes(self.beyond + self.other_file)} · {self.cache_words()}"
        line += f" / --cache-ram {self.cache_ram // MiB} MiB" if self.cache_ram is not None else ", no --cache-ram cap"
        if self.seconds_to_out is not None:
            line += f", RAM out in ~{fmt_duration(self.seconds_to_out)}"
        line += "".join(f" · GPU{i} {fmt_bytes(b)}" for i, b in self.vram)
        return line + "".join(f" · {d.name} {fmt_bytes(d.weights_bytes + d.kv_bytes)}" for d in self.devices)

    def device_lines(self) -> list[str]:
        """Each device of the split: where it is, its layers, its weights and KV cache."""
        lines = [
            f"{d.name}{f' ({d.endpoint})' if d.endpoint else ''}: {d.layers}, weights {fmt_bytes(d.weights_bytes)}"
            f" + KV {fmt_bytes(d.kv_bytes)} = {fmt_bytes(d.weights_bytes + d.kv_bytes)} (theory, from the flags)"
            for d in self.devices
        ]
        if self.devices:
            lines.append("headroom: not visible from here (an rpc-server answers one client: the server using it)")
        return lines + ([self.devices_note] if self.devices_note else [])

    def text(self) -> str:
        if not self.llama_cpp:
            return self.short_text() + " (the engine process; its KV cache is reserved at start, it does not grow)"
        parts = [f"RSS {fmt_bytes(self.rss)}"]
        if self.model is not None:
            parts.append(f"model (mapped file) {fmt_bytes(self.model)}")
        if self.kv_cache is not None:
            parts.append(f"KV cache {fmt_bytes(self.kv_cache)} (from the GGUF header and flags)")
        parts.append(f"other anonymous {fmt_bytes(self.beyond)}")
        if self.prompt_cache is None:
            cache = f"prompt cache + checkpoints unreadable: {self.cache_basis}"
        else:
            cache = f"prompt cache + checkpoints {fmt_bytes(self.prompt_cache)}"
            if self.saved_tokens is not None:
                cache += f" (~{self.saved_tokens:,} tokens of saved prompt)"
        cache += (
            f", capped by --cache-ram {self.cache_ram // MiB} MiB"
            if self.cache_ram is not None
            else ", no --cache-ram cap"
        )
        if self.prompt_cache is not None:
            cache += f" (read from {self.cache_basis})"
        if self.growth_per_s and self.growth_per_s > 0:
            cache += f"; anonymous memory +{fmt_bytes(self.growth_per_s)}/s"
            if self.seconds_to_out is not None:
                cache += f", RAM out in ~{fmt_duration(self.seconds_to_out)} at this rate (cap it: --cache-ram N)"
        parts.append(cache)
        parts.extend(f"GPU{i} VRAM {fmt_bytes(b)} (NVML, this process)" for i, b in self.vram)
        return " · ".join(parts + self.device_lines())


def memory_split(
    readings: Sequence[ServerMemory],
    room_bytes: int | None = None,
    window_s: float = 120.0,
    gpus: Sequence[GpuReading] = (),
) -> MemorySplit | None:
    """The newest reading explained (its prompt cache as the reading measured it), with the rate of
    anonymous memory over the readings of the last ``window_s``; ``room_bytes``: what RAM (or the
    cgroup) has left."""
    if not readings:
        return None
    last = readings[-1]
    kv, cache = last.kv_cache_bytes, last.prompt_cache_bytes
    rate = _anon_rate([r for r in readings if last.t - r.t <= window_s])
    tokens = int(cache / last.kv_bytes_per_cell) if cache is not None and last.kv_bytes_per_cell else None
    to_out = room_bytes / rate if rate and rate > 0 and room_bytes is not None and room_bytes > 0 else None
    if last.prompt_cache_basis == NOT_LLAMA_CPP:
        to_out = None  # no prompt cache grows in it
    capped = last.cache_ram_bytes is not None and cache is not None
    if to_out is not None and capped and (last.cache_ram_bytes or 0) - (cache or 0) < (room_bytes or 0):
        to_out = None  # the cap stops the growth first
    return MemorySplit(
        rss=last.rss_bytes,
        model=last.model_mapped_bytes,
        other_file=max(0, last.file_bytes - (last.model_mapped_bytes or 0)),
        kv_cache=kv,
        beyond=max(0, last.anon_bytes - (kv or 0) - (cache or 0)),
        prompt_cache=cache,
        cache_basis=last.prompt_cache_basis,
        growth_per_s=rate,
        saved_tokens=tokens,
        cache_ram=last.cache_ram_bytes,
        seconds_to_out=to_out,
        vram=vram_of(last.pid, gpus),
        devices=last.devices,
        devices_note=last.devices_note,
    )


def _anon_rate(recent: Sequence[ServerMemory]) -> float | None:
    if len(recent) >= 2 and recent[-1].t > recent[0].t:
        return (recent[-1].anon_bytes - recent[0].anon_bytes) / (recent[-1].t - recent[0].t)
    return None


def vram_of(pid: int, gpus: Sequence[GpuReading]) -> tuple[tuple[int, int], ...]:
    """What each GPU's per-process list (NVML) says the process holds there."""
    return tuple(
        (g.index, p.used_bytes) for g in gpus for p in g.processes or () if p.pid == pid and p.used_bytes is not None
    )
