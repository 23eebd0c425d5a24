"""The machine's state: the newest sample, each tier's history, sign 1's baselines, the CPU quota."""

from __future__ import annotations

from cliff_tui.analysis.cpu_quota import QuotaMeter, QuotaUse
from cliff_tui.analysis.signs import SpillBaselines
from cliff_tui.events import Sample
from cliff_tui.history import History


class MachineState:
    def __init__(self, history: History) -> None:
        self.history = history
        self.latest: Sample | None = None
        self.baselines = SpillBaselines()
        self._quota = QuotaMeter()

    def observe(self, s: Sample) -> None:
        self.latest = s
        self._quota.observe(s.t, s.cpu_quota)
        h = self.history
        h.add("ram.used", s.t, s.ram.used_bytes)
        h.add("swap.used", s.t, s.swap.used_bytes)
        if s.cgroup is not None:
            h.add("ram.cgroup", s.t, s.cgroup.usage_bytes)
        for g in s.gpus:
            h.add(f"gpu{g.index}.vram", s.t, g.vram_used_bytes)
            h.add(f"gpu{g.index}.shared", s.t, g.shared_used_bytes)
            h.add(f"gpu{g.index}.pcie_rx", s.t, g.pcie_rx_bytes_s)
        if s.process is not None:
            h.add("process.rss", s.t, s.process.total_rss_bytes)
        self.baselines.update(s)

    @property
    def quota_use(self) -> QuotaUse | None:
        """The latest sample's cgroup CPU quota and how often it ran out lately (None: no quota)."""
        return self._quota.use

    def shared_above_baseline(self) -> dict[int, int]:
        """Sign 1's measure: each GPU's shared VRAM now, minus its baseline."""
        return self.baselines.shared_deltas(self.latest) if self.latest is not None else {}

    def swap_above_baseline(self) -> int | None:
        """Sign 1's measure on a machine with no GPU."""
        return self.baselines.swap_delta(self.latest) if self.latest is not None else None
