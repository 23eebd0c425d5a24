"""The session's store as Prometheus metric families, read at scrape time.

Every number is the store's, as the dashboard and the run records have it (the CPU quota is
the samples' own): the collector reads ``session.store`` (held still by ``session.reading()``)
and formats nothing of its own. Names carry the ``cliff_`` prefix and base
units (bytes, seconds, ratios as 0–1), and no colons (Prometheus keeps those for recording rules).
Every family is yielded on every scrape, with no sample where the value is unknown here (no GPU,
no server), so a dashboard's queries name series that exist on every host.

Labels: ``tier`` (vram, shared, ram, swap), ``gpu`` (the index, "" for host tiers), ``uuid``
(NVML's GPU UUID where known, else ""), ``sign`` and ``name`` for the three signs, ``server``
(an attached server's base URL, credentials removed) and ``kind``, ``slot``; a paged KV cache's
(vLLM) ``state`` (used, capacity) and ``reason`` (capacity, any); a capacity plan's
``model`` (file name only) and ``kv_type``; ``cgroup``, the path of the cgroup whose CPU quota it
is (each cgroup's periods are a counter of their own).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from cliff_tui import __version__
from cliff_tui.analysis.signs import SIGN_BY_NUMBER
from cliff_tui.events import ATTACH_RUN_ID, Sample, ServerReading
from cliff_tui.exporter.plans import CapacityPlan
from cliff_tui.jobs.attach import healthy
from cliff_tui.probes.nvidia import CLOCK_EVENT_REASONS
from cliff_tui.records import GpuReading
from cliff_tui.session import Session
from cliff_tui.store import Store

# The store's sign words as a number a panel or an alert can compare: 0 fine … 3 cliff.
# "na" (the sign cannot be read here) is 0 too; cliff_sign_applicable tells it apart from "ok".
SIGN_LEVELS = {"na": 0, "ok": 0, "info": 1, "amber": 2, "red": 3}


def verdict_level(store: Store) -> int:
    """The one cliff verdict (the screen's and the run record's): ok 0, info 1, amber 2, red 3."""
    return SIGN_LEVELS.get(store.cliff_verdict().level, 0)


class CliffCollector(Collector):
    def __init__(self, session: Session, plans: Sequence[CapacityPlan] = ()) -> None:
        self.session = session
        self.plans = list(plans)

    def collect(self) -> Iterator[Metric]:
        with self.session.reading() as store:
            families = [
                *_memory(store.machine.latest),
                *_cpu_quota(store.machine.latest),
                *_spill(store),
                *_gpus(store.machine.latest),
                *_signs(store),
                *_decode(store),
                *_process(store.machine.latest),
                *_servers(store),
                *_kv_blocks(store),
                *_server_memory(store),
                *_context_pool(store),
            ]
        yield from families
        yield from _plans(self.plans)
        yield _info()


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _gpu_labels(g: GpuReading) -> list[str]:
    return [str(g.index), g.uuid or ""]


# --- memory tiers ---------------------------------------------------------------------------------


def _memory(s: Sample | None) -> list[Metric]:
    labels = ("tier", "gpu", "uuid")
    used = _gauge(
        "cliff_memory_used_bytes",
        "Memory in use on each tier (RAM: total minus available, or the cgroup's usage where a cgroup limit applies)",
        labels,
    )
    capacity = _gauge(
        "cliff_memory_capacity_bytes", "Size of each tier (RAM: the cgroup memory limit where one applies)", labels
    )
    cgroup = _gauge(
        "cliff_ram_cgroup_limit_bytes",
        "The memory limit of the followed process's cgroup "
        "(--pid; else the exporter's own), where one is below the host's RAM",
    )
    if s is not None:
        for g in s.gpus:
            _add(used, ["vram", *_gpu_labels(g)], g.vram_used_bytes)
            _add(capacity, ["vram", *_gpu_labels(g)], g.vram_total_bytes)
            _add(used, ["shared", *_gpu_labels(g)], g.shared_used_bytes)
            _add(capacity, ["shared", *_gpu_labels(g)], g.shared_total_bytes)
        _add(used, ["ram", "", ""], s.ram_used_bytes)
        _add(capacity, ["ram", "", ""], s.ram_capacity_bytes)
        _add(cgroup, [], s.cgroup.limit_bytes if s.cgroup is not None else None)
        _add(used, ["swap", "", ""], s.swap.used_bytes)
        _add(capacity, ["swap", "", ""], s.swap.total_bytes)
    stamp = _gauge("cliff_sample_timestamp_seconds", "Unix time of the newest sample")
    if s is not None:
        stamp.add_metric([], s.t)
    return [used, capacity, cgroup, stamp]


def _cpu_quota(s: Sample | None) -> list[Metric]:
    where = "of the followed process's cgroup (--pid; else the exporter's own)"
    labels = ["cgroup"]
    cpus = _gauge(
        "cliff_cpu_quota_cpus",
        f"The CPU quota {where} in CPUs (Docker --cpus, a Kubernetes CPU limit), where one is set",
        labels,
    )
    periods = CounterMetricFamily(
        "cliff_cpu_quota_periods", f"Enforcement periods {where} (cpu.stat nr_periods)", labels=labels
    )
    throttled = CounterMetricFamily(
        "cliff_cpu_quota_throttled_periods",
        f"Periods {where} that ran out of quota "
        "and were throttled (cpu.stat nr_throttled): a run stalls to each one's end",
        labels=labels,
    )
    quota = s.cpu_quota if s is not None else None
    if quota is not None:
        cpus.add_metric([quota.path], quota.cpus)
        _add(periods, [quota.path], quota.periods)
        _add(throttled, [quota.path], quota.throttled_periods)
    return [cpus, periods, throttled]


def _spill(p: Store) -> list[Metric]:
    shared = _gauge(
        "cliff_shared_vram_above_baseline_bytes",
        "Shared VRAM (GPU memory the driver moved into system RAM) above its baseline: sign 1's measure",
        ("gpu", "uuid"),
    )
    swap = _gauge(
        "cliff_swap_above_baseline_bytes", "Swap in use above its baseline: sign 1's measure on a machine with no GPU"
    )
    gpus = {g.index: g for g in p.machine.latest.gpus} if p.machine.latest is not None else {}
    for index, delta in p.machine.shared_above_baseline().items():
        shared.add_metric([str(index), gpus[index].uuid or ""], delta)
    _add(swap, [], p.machine.swap_above_baseline())
    return [shared, swap]


def _gpus(s: Sample | None) -> list[Metric]:
    labels = ("gpu", "uuid")
    rx = _gauge("cliff_pcie_rx_bytes_per_second", "PCIe receive throughput (NVML, a 20 ms window)", labels)
    tx = _gauge("cliff_pcie_tx_bytes_per_second", "PCIe transmit throughput (NVML, a 20 ms window)", labels)
    clock = _gauge(
        "cliff_gpu_clock_event",
        "1 while NVML reports this clock event reason (clocks held down: power cap, thermal, …)",
        (*labels, "reason"),
    )
    info = InfoMetricFamily("cliff_gpu", "Each GPU's name and vendor", labels=["gpu", "uuid"])
    for g in s.gpus if s is not None else ():
        _add(rx, _gpu_labels(g), g.pcie_rx_bytes_s)
        _add(tx, _gpu_labels(g), g.pcie_tx_bytes_s)
        if g.throttle_reasons is not None:
            for reason in CLOCK_EVENT_REASONS:
                clock.add_metric([*_gpu_labels(g), _slug(reason)], float(reason in g.throttle_reasons))
        info.add_metric(_gpu_labels(g), {"name": g.name, "vendor": g.vendor})
    return [rx, tx, clock, info]


# --- the signs and the speed ----------------------------------------------------------------------


def _signs(p: Store) -> list[Metric]:
    level = _gauge(
        "cliff_sign_level",
        "Each sign of the cliff: 0 fine (or not applicable), 1 information, 2 warning, 3 cliff",
        ("sign", "name"),
    )
    applicable = _gauge(
        "cliff_sign_applicable",
        "1 where the sign can be read on this host (0: no shared VRAM reported, no token source, …)",
        ("sign", "name"),
    )
    for number, state in sorted(p.signs.current.items()):
        sign = SIGN_BY_NUMBER.get(number)
        labels = [str(number), sign.label if sign is not None else str(number)]
        level.add_metric(labels, SIGN_LEVELS.get(state.level, 0))
        applicable.add_metric(labels, float(state.level != "na"))
    verdict = _gauge("cliff_verdict_level", "The cliff verdict, 0 fine … 3 cliff (today: the worst sign)")
    verdict.add_metric([], verdict_level(p))
    return [level, applicable, verdict]


def _decode(p: Store) -> list[Metric]:
    w = p.last_window
    source = [] if w is None else ["attach" if w.run_id == ATTACH_RUN_ID else "run"]
    rate = _gauge(
        "cliff_decode_tokens_per_second",
        "Decode speed of the newest window (a run here, or an attached server)",
        ("source",),
    )
    expected = _gauge(
        "cliff_decode_expected_tokens_per_second",
        "The decode speed the depth trend expects at the newest depth (sign 3 compares against it)",
    )
    tokens = _gauge("cliff_decode_window_tokens", "Tokens in the newest decode window")
    seconds = _gauge("cliff_decode_window_seconds", "Length of the newest decode window")
    depth = _gauge("cliff_decode_depth_tokens", "KV cells in use at the newest decode window")
    stamp = _gauge("cliff_decode_window_timestamp_seconds", "Unix time the newest decode window ended")
    if w is not None:
        _add(rate, source, p.live_tok_s())
        tokens.add_metric([], w.n_tokens)
        depth.add_metric([], w.depth)
        stamp.add_metric([], w.t)
        if w.tok_s > 0:
            seconds.add_metric([], w.n_tokens / w.tok_s)
    verdict = p.speed_verdict()
    _add(expected, [], verdict.expected_tok_s if verdict is not None else None)
    return [rate, expected, tokens, seconds, depth, stamp]


def _process(s: Sample | None) -> list[Metric]:
    rss = _gauge(
        "cliff_process_resident_bytes",
        "Resident memory of the followed process (--pid) and its children",
        ("pid", "process"),
    )
    proc = s.process if s is not None else None
    if proc is not None:
        _add(rss, [str(proc.pid), proc.name or ""], proc.total_rss_bytes)
    return [rss]


# --- attached servers -----------------------------------------------------------------------------


def _servers(p: Store) -> list[Metric]:
    up = _gauge(
        "cliff_up",
        "1 while the attached server answers as the server it should be, 0 when unreachable or not it",
        ("server", "kind"),
    )
    decode = _gauge(
        "cliff_server_decode_tokens_per_second",
        "The server's decode speed over the requests that finished between two readings (its /metrics counters)",
        ("server",),
    )
    prompt = _gauge(
        "cliff_server_prompt_tokens_per_second", "The server's prompt processing speed, from its counters", ("server",)
    )
    running = _gauge("cliff_server_requests_processing", "Requests the server is processing", ("server",))
    n_ctx = _gauge("cliff_server_slot_context_tokens", "Context size of each slot (n_ctx)", ("server", "slot"))
    used = _gauge("cliff_server_slot_used_tokens", "Tokens held in each slot's KV cache", ("server", "slot"))
    model = _gauge(
        "cliff_server_model_bytes", "Where the models an Ollama server has loaded live", ("server", "model", "tier")
    )
    for reading in p.servers.readings.values():
        server = _server_label(reading.url)
        up.add_metric([server, reading.source], float(healthy(reading)))
        rates = reading.rates
        if rates is not None and p.servers.reports(reading, "counters"):
            _add(decode, [server], rates.decode_tok_s)
            _add(prompt, [server], rates.prompt_tok_s)
        _add(running, [server], reading.requests_processing)
        _slots(reading, server, n_ctx, used)
        _models(reading, server, model)
    return [up, decode, prompt, running, n_ctx, used, model]


def _kv_blocks(p: Store) -> list[Metric]:
    """A paged KV cache (vLLM): its blocks in use, its size in tokens, and what its scheduler does
    when they run out (preempts running requests, to recompute them later; queues new ones)."""
    labels = ("server",)
    usage = _gauge(
        "cliff_server_kv_cache_usage_ratio", "Share of the server's KV cache blocks in use, 0–1 (vLLM)", labels
    )
    tokens = _gauge(
        "cliff_server_kv_cache_tokens",
        "Tokens the server's KV cache blocks hold (used) and can hold (capacity: blocks × block size) (vLLM)",
        (*labels, "state"),
    )
    preemptions = CounterMetricFamily(
        "cliff_server_preemptions",
        "Requests the server's scheduler preempted for lack of KV blocks, "
        "to recompute later (vLLM's own count: a restart resets it)",
        labels=list(labels),
    )
    last_minute = _gauge(
        "cliff_server_preemptions_last_minute",
        "Requests the server preempted over the last minute (the cliff gauge is red while this is above 0) (vLLM)",
        labels,
    )
    waiting = _gauge(
        "cliff_server_requests_waiting",
        "Requests queued by the server: all of them (any), or those waiting for free KV blocks (capacity) (vLLM)",
        (*labels, "reason"),
    )
    fit = _gauge(
        "cliff_server_kv_cache_max_concurrency",
        "Requests of max-model-len tokens the server's KV cache holds at once before it must preempt "
        "(kv_cache_size_tokens / max_model_len, as vLLM logs 'Maximum concurrency') (vLLM)",
        labels,
    )
    for reading in p.servers.readings.values():
        kv = reading.kv_blocks
        if kv is None:
            continue
        if kv.capacity_tokens and kv.max_model_len:
            fit.add_metric([_server_label(reading.url)], kv.capacity_tokens / kv.max_model_len)
        server = _server_label(reading.url)
        usage.add_metric([server], kv.usage)
        _add(tokens, [server, "used"], kv.tokens_used)
        _add(tokens, [server, "capacity"], kv.capacity_tokens)
        _add(preemptions, [server], kv.preemptions_total)
        if kv.preemptions_total is not None:
            last_minute.add_metric([server], p.servers.preempted(reading.url, reading.t))
        _add(waiting, [server, "capacity"], kv.waiting_for_capacity)
        _add(waiting, [server, "any"], kv.waiting)
    return [usage, tokens, preemptions, last_minute, waiting, fit]


def _slots(reading: ServerReading, server: str, n_ctx: GaugeMetricFamily, used: GaugeMetricFamily) -> None:
    for slot in reading.slots:
        _add(n_ctx, [server, str(slot.id)], slot.n_ctx)
        _add(used, [server, str(slot.id)], slot.tokens_used)


def _models(reading: ServerReading, server: str, family: GaugeMetricFamily) -> None:
    for m in reading.models:
        if m.size_bytes is None or m.size_vram_bytes is None:
            continue
        family.add_metric([server, m.name, "vram"], m.size_vram_bytes)
        family.add_metric([server, m.name, "ram"], max(m.size_bytes - m.size_vram_bytes, 0))


def _server_label(url: str) -> str:
    """The base URL without user:password@ (a label is read by everyone who can scrape)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


GAUGE_LEVELS = {"ok": 0, "amber": 1, "red": 2}


def _server_memory(p: Store) -> list[Metric]:
    """The attached server's resident memory by part (a server on this machine, found by its process)."""
    parts = _gauge(
        "cliff_server_memory_bytes",
        "The attached server's resident memory by part: model (its mapped GGUF), other_file, kv_cache "
        "(from the header and flags), prompt_cache (saved prompts and checkpoints, read from its "
        "mappings) and other_anon (compute buffers, heap)",
        ("server", "part"),
    )
    rate = _gauge(
        "cliff_server_prompt_cache_growth_bytes_per_second",
        "How fast the attached server's anonymous memory grows (its prompt cache and checkpoints)",
        ("server",),
    )
    limit = _gauge(
        "cliff_server_prompt_cache_limit_bytes", "The server's --cache-ram limit (absent: none)", ("server",)
    )
    out = _gauge(
        "cliff_server_ram_exhausted_seconds",
        "Seconds until RAM (or the cgroup's limit) runs out at the prompt cache's current growth (absent: not growing)",
        ("server",),
    )
    vram = _gauge(
        "cliff_server_vram_bytes", "VRAM the attached server's process holds on each GPU (NVML)", ("server", "gpu")
    )
    split = p.server_memory()
    if split is not None and p.servers.memory:
        server = _server_label(p.servers.memory[-1].url)
        for part, value in (
            ("model", split.model),
            ("other_file", split.other_file),
            ("kv_cache", split.kv_cache),
            ("other_anon", split.beyond),
            ("prompt_cache", split.prompt_cache),
        ):
            _add(parts, [server, part], value)
        _add(rate, [server], split.growth_per_s)
        _add(limit, [server], split.cache_ram)
        _add(out, [server], split.seconds_to_out)
        for index, used in split.vram:
            vram.add_metric([server, str(index)], used)
    return [parts, rate, limit, out, vram]


def _context_pool(p: Store) -> list[Metric]:
    cells = _gauge(
        "cliff_context_cells",
        "The cliff gauge: context in use (used) against the most before what runs out first (max)",
        ("state",),
    )
    level = _gauge("cliff_gauge_level", "The cliff gauge's level: 0 ok, 1 amber, 2 red", ("source",))
    gauge = p.gauge()
    if gauge is not None:
        cells.add_metric(["used"], gauge.tokens)
        cells.add_metric(["max"], gauge.max_context)
        level.add_metric([gauge.source], GAUGE_LEVELS[gauge.level])
    return [cells, level]


# --- a capacity plan (--from) ---------------------------------------------------------------------


def _plans(plans: Sequence[CapacityPlan]) -> list[Metric]:
    kv = _gauge(
        "cliff_kv_bytes_per_token",
        "Memory per token of context, measured by a triangulation "
        "(allocated: llama.cpp's buffers; touched: resident pages) or from the model's shape "
        "(theory)",
        ("model", "kv_type", "basis"),
    )
    where = ("model", "kv_type", "tier", "gpu")
    target = _gauge("cliff_projection_target_tokens", "The context the projection is for", where)
    projected = _gauge("cliff_projection_bytes", "Memory the projection expects at the target context", where)
    capacity = _gauge(
        "cliff_projection_capacity_bytes", "Size of the tier the KV cache lives on, as the triangulation saw it", where
    )
    reserve = _gauge("cliff_projection_reserve_bytes", "Memory kept free on that tier", where)
    fits = _gauge("cliff_projection_fits", "1 if the target context fits the tier minus the reserve", where)
    largest = _gauge(
        "cliff_max_context_tokens",
        "The largest context before the cliff (tier minus reserve, "
        "a memory wall or a failed allocation, whichever is lowest)",
        where,
    )
    for plan in plans:
        for basis, value in (
            ("allocated", plan.allocated_bytes_per_token),
            ("touched", plan.touched_bytes_per_token),
            ("theory", plan.theory_bytes_per_token),
        ):
            _add(kv, [plan.model, plan.kv_type, basis], value)
        labels = [plan.model, plan.kv_type, plan.tier, plan.gpu]
        _add(target, labels, plan.target_tokens)
        _add(projected, labels, plan.projected_bytes)
        _add(capacity, labels, plan.capacity_bytes)
        _add(reserve, labels, plan.reserve_bytes)
        _add(fits, labels, None if plan.fits is None else float(plan.fits))
        _add(largest, labels, plan.max_context_tokens)
    return [kv, target, projected, capacity, reserve, fits, largest]


def _info() -> Metric:
    info = InfoMetricFamily("cliff_exporter", "The cliff-tui version serving these metrics")
    info.add_metric([], {"version": __version__})
    return info


# --- helpers --------------------------------------------------------------------------------------


def _add(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float | None) -> None:
    """A sample only where the value is known: an unknown reading is no sample, never a fake 0."""
    if value is not None:
        family.add_metric(labels, float(value))


def _slug(reason: str) -> str:
    """``thermal (sw)`` → ``thermal_sw``."""
    return "_".join("".join(c if c.isalnum() else " " for c in reason).split())
