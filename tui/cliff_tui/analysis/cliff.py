"""One cliff verdict from the three signs, the same live and at the end of a run.

:class:`RunWatch` follows one run's samples: the memory signs with the depth each first fired at
(swap or shared VRAM above its baseline, the model's RAM rising while its KV cache sits on a GPU,
a tier full) and what took CPU from it meanwhile (other processes, its cgroup's CPU quota running
out). :func:`cliff_verdict` weighs them
with sign 3: red needs a memory sign, and names its tier, amount and depth; decode falling
beyond its trend without one is amber only with a measured cause, else information.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.cpu_quota import periods_between, ran_out_often, throttled_share
from cliff_tui.events import DecodeWindow, Sample
from cliff_tui.records import CliffEvidence, CliffVerdict, CpuQuota, OomKill, SpeedVerdict
from cliff_tui.units import fmt_bytes


@dataclass
class _Crossing:
    t: float
    depth: int | None
    amount: int


class RunWatch:
    """The memory signs of one run and the load beside it; feed it every sample the run sees."""

    def __init__(self, kv_on_gpu: bool | None = None) -> None:
        self.kv_on_gpu = kv_on_gpu
        self._first: Sample | None = None
        self._process_swap0: int | None = None
        self._process_rss0: int | None = None
        self._shared0: dict[int, int] = {}
        self._swap: _Crossing | None = None
        self._swap_elsewhere: _Crossing | None = None
        self._parked: _Crossing | None = None  # the model's pages in swap, not read back (yet)
        self._faults: tuple[float, int] | None = None
        self._window_reads_back: bool | None = None  # the newest decode window's, where it counted its faults
        self._paging_depth: int | None = None  # the first depth whose decode read pages back, token after token
        self._paging_run: list[int] = []  # the depths of the latest windows that all read pages back
        self._shared: dict[int, _Crossing] = {}
        self._ram: _Crossing | None = None
        self._full: tuple[str, _Crossing] | None = None
        self._last: Sample | None = None
        self._other_cpu_s = 0.0
        self._wall_s = 0.0
        self._periods = 0
        self._throttled_periods = 0
        self._quota: CpuQuota | None = None

    def observe(self, sample: Sample, depth: int | None = None, generating: bool = True) -> None:
        if self._first is None:
            self._start(sample)
            return
        self._swap_sign(sample, depth, self._reading_back(sample) if generating else False)
        self._shared_sign(sample, depth)
        if generating:
            self._ram_sign(sample, depth)
            self._full_sign(sample, depth)
        self._load(sample)
        self._throttling(sample)
        self._last = sample

    def decoded(self, window: DecodeWindow) -> None:
        """A decode window of this run: where it counted the pages read back meanwhile, they say
        exactly when decoding began to page (faults per second also count the prefill's writes
        into a cache paged out as it was created). Two windows running, as one slow window never
        flips the state; and the run that lasts: the first windows after the context is created
        also read its first pages back, and then stop."""
        if window.major_faults is None or window.n_tokens <= 0:
            return
        reads_back = window.major_faults / window.n_tokens >= th.SWAP_IN_FAULTS_PER_TOKEN
        self._paging_run = [*self._paging_run, window.depth] if reads_back else []
        self._window_reads_back = len(self._paging_run) >= th.CONFIRMING_WINDOWS
        if not reads_back:
            # decode stopped reading pages back: what it read before was the cache paged out as it
            # was created coming back, not the depth where the cache stopped fitting
            self._paging_depth = None
        elif self._window_reads_back and self._paging_depth is None:
            self._paging_depth = self._paging_run[0]

    def _start(self, sample: Sample) -> None:
        self._first = self._last = sample
        proc = sample.process
        self._process_swap0 = proc.swap_bytes if proc else None
        self._process_rss0 = proc.total_rss_bytes if proc else None
        self._shared0 = {g.index: g.shared_used_bytes for g in sample.gpus if g.shared_used_bytes is not None}

    # --- the memory signs -----------------------------------------------------------------

    def _reading_back(self, s: Sample) -> bool | None:
        """Whether the model reads pages back from swap now (None: its faults are not known)."""
        if self._window_reads_back is not None:
            return self._window_reads_back
        faults = s.process.major_faults if s.process is not None else None
        if faults is None:
            return None
        prev, self._faults = self._faults, (s.t, faults)
        if prev is None or s.t <= prev[0]:
            return False
        return (faults - prev[1]) / (s.t - prev[0]) >= th.SWAP_IN_FAULTS_PER_S

    def _swap_sign(self, s: Sample, depth: int | None, reading_back: bool | None) -> None:
        assert self._first is not None  # set by the first sample, before any sign is read
        system = s.swap.used_bytes - self._first.swap.used_bytes
        mine = None
        if self._process_swap0 is not None and s.process is not None and s.process.swap_bytes is not None:
            mine = s.process.swap_bytes - self._process_swap0
        if mine is not None and mine > th.SWAP_SPILL_BYTES and reading_back is False:
            self._parked = self._parked or _Crossing(s.t, depth, mine)
            self._parked.amount = max(self._parked.amount, mine)
        elif mine is not None and mine > th.SWAP_SPILL_BYTES:
            self._swap = self._swap or _Crossing(s.t, depth, mine)
            self._swap.amount = max(self._swap.amount, mine)
        elif mine is None and system > th.SWAP_SPILL_BYTES:  # whose pages is unknown: count them
            self._swap = self._swap or _Crossing(s.t, depth, system)
            self._swap.amount = max(self._swap.amount, system)
        elif system > th.SWAP_SPILL_BYTES:
            self._swap_elsewhere = self._swap_elsewhere or _Crossing(s.t, depth, system)
            self._swap_elsewhere.amount = max(self._swap_elsewhere.amount, system)

    def _shared_sign(self, s: Sample, depth: int | None) -> None:
        for g in s.gpus:
            if g.shared_used_bytes is None:
                continue
            base = self._shared0.setdefault(g.index, g.shared_used_bytes)
            delta = g.shared_used_bytes - base
            if delta > th.SHARED_SPILL_BYTES:
                crossing = self._shared.setdefault(g.index, _Crossing(s.t, depth, delta))
                crossing.amount = max(crossing.amount, delta)

    def _ram_sign(self, s: Sample, depth: int | None) -> None:
        """The model's own memory growing in RAM while its KV cache is on a GPU: the driver keeps
        host memory for what no longer fits. Growth elsewhere on the machine is not its cliff."""
        if not self.kv_on_gpu or self._process_rss0 is None or s.process is None:
            return
        rss = s.process.total_rss_bytes
        if rss is not None and rss - self._process_rss0 > th.RAM_RISE_MIN_BYTES:
            self._ram = self._ram or _Crossing(s.t, depth, rss - self._process_rss0)
            self._ram.amount = max(self._ram.amount, rss - self._process_rss0)

    def _full_sign(self, s: Sample, depth: int | None) -> None:
        if self._full is not None:
            return
        for g in s.gpus:
            if g.vram_used_bytes and g.vram_total_bytes and g.vram_used_bytes >= th.TIER_FULL * g.vram_total_bytes:
                self._full = (f"GPU{g.index} dedicated VRAM", _Crossing(s.t, depth, g.vram_used_bytes))
                return
        # A cgroup at its limit is no sign by itself (its usage counts page cache the kernel can
        # drop): what it cannot hold goes to swap, which the swap sign sees, or gets it killed.
        if not self.kv_on_gpu and s.ram.total_bytes and s.ram.available_bytes < (1 - th.TIER_FULL) * s.ram.total_bytes:
            self._full = ("RAM", _Crossing(s.t, depth, s.ram.used_bytes))

    # --- the load beside it ---------------------------------------------------------------

    def _load(self, s: Sample) -> None:
        prev = self._last
        if prev is None or prev.cpu_busy_s is None or s.cpu_busy_s is None or s.t <= prev.t:
            return
        mine = _cpu_delta(prev, s)
        if mine is None:
            return
        self._other_cpu_s += max(0.0, s.cpu_busy_s - prev.cpu_busy_s - mine)
        self._wall_s += s.t - prev.t

    def _throttling(self, s: Sample) -> None:
        """The followed process's cgroup running out of CPU quota (without one, the quota read is
        cliff-tui's own, which is not what slows the model)."""
        prev = self._last
        if prev is None or prev.process is None or s.process is None or prev.process.pid != s.process.pid:
            return
        counted = periods_between(prev.cpu_quota, s.cpu_quota)
        if counted is None:
            return
        self._periods += counted[0]
        self._throttled_periods += counted[1]
        self._quota = s.cpu_quota

    @property
    def load_cores(self) -> float | None:
        """Cores other processes kept busy on average since the run began (None: not measured)."""
        return self._other_cpu_s / self._wall_s if self._wall_s > 0 else None

    @property
    def throttled_share(self) -> float | None:
        """The share of its cgroup's CPU periods since the run began that ran out of quota (None:
        no quota, or too few periods yet)."""
        return throttled_share(self._periods, self._throttled_periods)

    @property
    def cpu_cause(self) -> str | None:
        """What took CPU from the run, where it was enough to slow a decode: its cgroup's quota
        running out, else other processes."""
        share, quota = self.throttled_share, self._quota
        if quota is not None and quota.cpus > 0 and ran_out_often(share):
            return (
                f"its cgroup's CPU quota ({quota.words}, {quota.path}) ran out in {share:.0%} of the "
                "periods while it decoded"
            )
        load = self.load_cores
        if load is not None and load >= th.LOAD_CORES:
            return f"other processes used {load:.1f} CPU cores while it decoded"
        return None

    @property
    def process_swap_at_start(self) -> int | None:
        """The followed process's pages in swap at the run's baseline (None: not known)."""
        return self._process_swap0

    def _whose_swap(self) -> str:
        """Whose pages grew in swap: other processes', and what the model's process holds there
        (never "none of it" about a process with pages in swap)."""
        now = self._last.process.swap_bytes if self._last is not None and self._last.process else None
        if not now:
            return "none of it this model's memory"
        return "mostly other processes' pages; this model's process" + _held_words(self._process_swap0, now)

    # --- the evidence ---------------------------------------------------------------------

    def evidence(self) -> list[CliffEvidence]:
        out = []
        if self._swap is not None:
            swap = (
                self._swap
                if self._paging_depth is None
                else _Crossing(self._swap.t, self._paging_depth, self._swap.amount)
            )
            out.append(_red(1, "swap", swap, "of the model's memory in swap, read back as it generates"))
        elif self._parked is not None:
            c = self._parked
            out.append(
                CliffEvidence(
                    1,
                    "info",
                    f"{fmt_bytes(c.amount)} of the model's memory in swap, not read back",
                    c.t,
                    c.depth,
                    "swap",
                    c.amount,
                )
            )
        for index, crossing in sorted(self._shared.items()):
            out.append(_red(1, f"GPU{index} shared VRAM", crossing, "of GPU memory moved into system RAM"))
        if self._ram is not None:
            out.append(_red(2, "RAM", self._ram, "of the model's memory grew in RAM with its KV cache on the GPU"))
        if self._full is not None:
            tier, crossing = self._full
            out.append(
                CliffEvidence(
                    1,
                    "red",
                    f"{tier} full ({fmt_bytes(crossing.amount)} in use)",
                    crossing.t,
                    crossing.depth,
                    tier,
                    crossing.amount,
                )
            )
        if self._swap_elsewhere is not None and self._swap is None and self._parked is None:
            c = self._swap_elsewhere
            out.append(
                CliffEvidence(
                    1,
                    "info",
                    f"swap grew {fmt_bytes(c.amount)}, {self._whose_swap()}",
                    c.t,
                    c.depth,
                    "swap",
                    c.amount,
                )
            )
        return out


def _held_words(before: int | None, now: int) -> str:
    earlier = f" ({fmt_bytes(before)} of it put there before the run's baseline, as it loaded)" if before else ""
    return f" holds {fmt_bytes(now)} in swap{earlier}, not read back as it generates"


def _red(sign: int, tier: str, c: _Crossing, what: str) -> CliffEvidence:
    where = "" if c.depth is None else " as the context was created" if c.depth == 0 else f" near depth {c.depth:,}"
    return CliffEvidence(sign, "red", f"{fmt_bytes(c.amount)} {what}{where}", c.t, c.depth, tier, c.amount)


def _cpu_delta(prev: Sample, s: Sample) -> float | None:
    a, b = prev.process, s.process
    if a is None or b is None or a.pid != b.pid or a.cpu_s is None or b.cpu_s is None:
        return None
    return max(0.0, b.cpu_s - a.cpu_s)


def memory_sign(evidence: list[CliffEvidence]) -> CliffEvidence | None:
    """The first red memory sign, by the time it fired."""
    red = [e for e in evidence if e.level == "red"]
    return min(red, key=lambda e: e.t if e.t is not None else float("inf")) if red else None


def cliff_verdict(evidence: list[CliffEvidence], speed: SpeedVerdict | None) -> CliffVerdict:
    """The one answer: red with a memory sign, amber with a measured non-memory cause, info for
    what was seen that is not this model's cliff, ok for nothing."""
    items = list(evidence)
    if speed is not None and speed.level in ("info", "amber", "red"):
        items.append(
            CliffEvidence(
                3,
                "red" if speed.level == "red" else speed.level,
                speed.text,
                depth=speed.knee_depth,
                pct=speed.drop_vs_expected_pct,
            )
        )
    first = memory_sign(evidence)
    if first is not None:
        text = f"cliff on {first.tier}: {first.text}"
        depth = first.depth
        if speed is not None and speed.level == "red":
            knee = speed.knee_depth
            if knee is not None:
                text += f"; decode fell {speed.drop_vs_expected_pct:.0f}% below its depth trend from depth {knee:,}"
            else:
                text += "; decode slowed faster than linear in depth with it"
            # a cache paged out as it was created bites where the cells in use no longer fit
            depth = knee if knee is not None and not depth else depth
        return CliffVerdict("red", text, first.tier, depth, tuple(items))
    if speed is not None and speed.level == "amber":
        return CliffVerdict("amber", speed.text, None, speed.knee_depth, tuple(items))
    info = [e for e in items if e.level == "info"]
    if info:
        return CliffVerdict("info", "no cliff: " + "; ".join(e.text for e in info), None, None, tuple(items))
    return CliffVerdict("ok", "no cliff: no memory sign, decode on its depth trend", None, None, tuple(items))


def killed_verdict(oom: OomKill, evidence: list[CliffEvidence]) -> CliffVerdict:
    """A run whose process was killed: red on its RAM tier where the OOM killer is confirmed to
    have done it (the cliff with no swap behind the limit), else what is known, as information."""
    if not oom.confirmed:
        known = CliffEvidence(1, "info", oom.words, None, oom.depth, None, oom.last_rss_bytes)
        return CliffVerdict("info", f"no verdict: {oom.words}", None, oom.depth, (*evidence, known))
    sign = CliffEvidence(1, "red", oom.words, None, oom.depth, oom.tier, oom.last_rss_bytes)
    return CliffVerdict("red", f"cliff on {oom.tier}: {oom.words}", oom.tier, oom.depth, (*evidence, sign))
