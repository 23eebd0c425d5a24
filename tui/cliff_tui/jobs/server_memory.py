"""A found server's memory readings: its process's split, and the KV cache its model's GGUF header
and its flags size (the theory ``fit`` uses)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from cliff_tui.analysis.server_memory import NOT_LLAMA_CPP
from cliff_tui.analysis.theory import KvSettings, kv_total_bytes
from cliff_tui.errors import CliffError
from cliff_tui.events import ServerMemory
from cliff_tui.jobs.server_split import server_split
from cliff_tui.probes.endpoints.prompt_cache import PromptCacheRead, read_prompt_cache
from cliff_tui.probes.endpoints.server_memory import ProcessMemory, read_process_memory
from cliff_tui.records import FoundServer
from cliff_tui.units import MiB

REREAD_AFTER = MiB  # the prompt cache is read again once anonymous memory moved this much


class MemoryProbe:
    """``pid``: the process that holds the KV cache where it is not the one serving HTTP (vLLM's
    engine core); ``llama_cpp``: a llama.cpp server, whose GGUF, KV cache and prompt cache are read."""

    def __init__(self, server: FoundServer, pid: int | None = None, llama_cpp: bool = True) -> None:
        assert server.pid is not None
        self.pid = pid or server.pid
        self.url = server.url
        self.llama_cpp = llama_cpp
        values = {s.name: s.value for s in server.settings}
        model = values.get("model") if values.get("model", "none") != "none" else None
        self.model_path = model if llama_cpp else None
        settings = kv_settings(values)
        self.kv_bytes, self.per_cell = kv_of(self.model_path, settings)
        self.split = server_split(self.model_path, values, settings)
        if self.split.host_kv_bytes is not None:
            self.kv_bytes = self.split.host_kv_bytes  # the rest sits on the rpc-servers
        self.cache_ram = _cache_ram(values.get("cache_ram"))
        self.problem = ""
        self._cache: PromptCacheRead | None = None
        self._cache_anon = 0
        self._last: ProcessMemory | None = None

    def read(self) -> ServerMemory | None:
        memory = read_process_memory(self.pid, self.model_path, self._last)
        if isinstance(memory, str):
            self.problem = memory
            self._last = None
            return None
        self._last = memory
        return ServerMemory(
            time.time(),
            self.url,
            self.pid,
            memory.rss,
            memory.anon,
            memory.file,
            memory.shmem,
            memory.model_mapped,
            self.kv_bytes,
            self.per_cell,
            self.cache_ram,
            *self._prompt_cache(memory.anon),
            self.split.devices,
            self.split.note,
        )

    def _prompt_cache(self, anon: int) -> tuple[int | None, str]:
        """Saved prompts + checkpoints and the basis (or why unreadable); the mappings are walked
        again only once anonymous memory has moved, as saving or dropping a prompt moves it."""
        if not self.llama_cpp:
            return None, NOT_LLAMA_CPP
        if self._cache is None or abs(anon - self._cache_anon) >= REREAD_AFTER:
            self._cache = read_prompt_cache(self.pid, self.kv_bytes, self.per_cell)
            self._cache_anon = anon
        return self._cache.bytes, self._cache.problem or self._cache.basis


def kv_settings(values: Mapping[str, str]) -> KvSettings:
    """The cache the server's flags ask for: its pool, KV types, slots."""
    fa = values.get("flash_attn", "auto")
    return KvSettings(
        n_ctx=_int(values.get("pool_ctx")) or 0,
        type_k=values.get("cache_type_k", "f16"),
        type_v=values.get("cache_type_v", "f16"),
        flash_attn="on" if fa == "on" else "off" if fa == "off" else "auto",
        swa_full=values.get("swa_full") == "true",
        n_seq=_int(values.get("slots")) or 1,
        kv_unified=values.get("kv_unified") == "true",
    )


def kv_of(model_path: str | None, settings: KvSettings) -> tuple[int | None, float | None]:
    """The KV cache's bytes and bytes per cell, or (None, None) where the header is unreadable."""
    if model_path is None:
        return None, None
    from cliff_tui.engine.gguf_meta import read_model_info

    try:
        info = read_model_info(model_path)
        total = kv_total_bytes(info, settings)
    except (OSError, ValueError, CliffError):
        return None, None
    if total is None:
        return None, None
    cells = settings.n_ctx or info.n_ctx_train or 0
    return total, (total / cells if cells else None)


def _cache_ram(value: str | None) -> int | None:
    mib = _int(value)
    if mib is None or mib < 0:
        return None
    return mib * MiB


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
