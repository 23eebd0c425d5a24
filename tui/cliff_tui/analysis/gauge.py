"""The cliff gauge: the context in use now against the largest context before the cliff.

The largest context comes from a triangulation's projection where one was measured (the cliff
tier's capacity minus the reserve, over the measured bytes per token), else from the run in
progress: its KV cache's bytes per cell and the room its cliff tier has left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.buffers import gpu_reading_of
from cliff_tui.events import Sample
from cliff_tui.records import KvBlocks

GaugeSource = Literal["measured", "this run", "context pool", "kv blocks"]
GaugeLevel = Literal["ok", "amber", "red"]


@dataclass(frozen=True)
class CliffGauge:
    tokens: int  # cells in use now (a run's depth, a server slot's tokens)
    max_context: int  # the largest context before the cliff
    tier: str
    source: GaugeSource
    failing: bool = False  # requests fail (a context pool) or are preempted (KV blocks) for lack of room now
    seconds_to_full: float | None = None  # at the current growth (a context pool only)
    note: str = ""  # what the count leaves out
    preempted: int | None = None  # requests preempted over the last minute (KV blocks only)

    @property
    def fraction(self) -> float:
        return self.tokens / self.max_context if self.max_context > 0 else 1.0

    @property
    def level(self) -> GaugeLevel:
        """Red past the cliff line (into the reserve) or while requests fail (a paged cache: while it
        preempts), amber as it nears it."""
        if self.failing:
            return "red"
        if self.fraction >= 1.0 and self.source != "kv blocks":  # vLLM runs its blocks full by design
            return "red"
        return "amber" if self.fraction >= th.GAUGE_AMBER else "ok"


@dataclass(frozen=True)
class CliffRoom:
    tier: str
    capacity_bytes: int
    free_bytes: int


def cliff_room(sample: Sample, kv_device: str | None) -> CliffRoom | None:
    """The tier the KV cache sits on and what it has left: a GPU's dedicated VRAM, else RAM (the
    cgroup's limit where one applies)."""
    g = gpu_reading_of(kv_device, sample.gpus)
    if g is not None and g.vram_total_bytes and g.vram_used_bytes is not None:
        return CliffRoom(f"GPU{g.index} dedicated VRAM", g.vram_total_bytes, g.vram_total_bytes - g.vram_used_bytes)
    tier = sample.cgroup.tier if sample.cgroup is not None else "RAM"
    return CliffRoom(tier, sample.ram_capacity_bytes, sample.ram_room_bytes)


def run_gauge(tokens: int, n_ctx: int, kv_bytes: int, room: CliffRoom) -> CliffGauge | None:
    """A run's context against the largest it could have allocated on its tier now: its own
    cells plus as many more as the room left above the reserve holds."""
    if n_ctx <= 0 or kv_bytes <= 0:
        return None
    per_cell = kv_bytes / n_ctx
    more = (room.free_bytes - th.default_reserve(room.capacity_bytes)) / per_cell
    return CliffGauge(tokens, max(0, int(n_ctx + more)), room.tier, "this run")


def pool_gauge(
    held: list[int | None],
    unified: bool,
    pool_ctx: int,
    slot_ctx: int | None,
    *,
    failing: bool = False,
    growth_per_s: float | None = None,
) -> CliffGauge | None:
    """An attached server's context pool, what runs out first without a triangulation: unified,
    the cells all slots hold against the one pool; split, the fullest slot against its share.
    ``failing``: requests fail for lack of cells now (red whatever the count says)."""
    counts = [h for h in held if h is not None]
    if pool_ctx <= 0 or not held:
        return None
    unknown = len(held) - len(counts)
    note = f"{unknown} idle slot{'s' if unknown > 1 else ''} not counted (/slots does not say)" if unknown else ""
    if unified:
        tokens, most = sum(counts), pool_ctx
        tier = f"the unified KV pool of {len(held)} slots"
    else:
        most = slot_ctx or pool_ctx // max(len(held), 1)
        tokens = max(counts, default=0)
        tier = f"the fullest slot's split KV share ({most:,} of {pool_ctx:,})"
    to_full = (most - tokens) / growth_per_s if growth_per_s and growth_per_s > 0 and tokens < most else None
    return CliffGauge(tokens, most, tier, "context pool", failing, to_full, note)


def kv_blocks_gauge(kv: KvBlocks, preempted: int, growth_per_s: float | None = None) -> CliffGauge | None:
    """A paged KV cache (vLLM): the tokens its blocks hold against all of them; red while the
    scheduler preempts requests for lack of blocks (``preempted``: over the last minute)."""
    used, most = kv.tokens_used, kv.capacity_tokens
    if used is None or not most:
        return None
    tier = f"{kv.blocks:,} blocks × {kv.block_size}" if kv.blocks and kv.block_size else "the KV blocks"
    waiting = kv.waiting_for_capacity if kv.waiting_for_capacity is not None else kv.waiting
    note = f"{waiting} waiting for blocks" if waiting else ""
    to_full = (most - used) / growth_per_s if growth_per_s and growth_per_s > 0 and used < most else None
    return CliffGauge(used, most, tier, "kv blocks", preempted > 0, to_full, note, preempted)
