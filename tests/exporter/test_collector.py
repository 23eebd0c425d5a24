"""The collector against a session fed real records: every number is the store's, in base units,
with the labels a dashboard groups by."""

from __future__ import annotations

import dataclasses

import pytest

from cliff_tui.analysis.server_rates import ServerRateMeter
from cliff_tui.events import ATTACH_RUN_ID, DecodeWindow, Sample, ServerReading
from cliff_tui.exporter.collector import SIGN_LEVELS, verdict_level
from cliff_tui.exporter.plans import read_plans
from cliff_tui.exporter.server import Exporter
from cliff_tui.probes.nvidia import CLOCK_EVENT_REASONS
from cliff_tui.probes.sampler import Sampler
from cliff_tui.recording import demo
from cliff_tui.records import CgroupReading, CpuQuota, RamReading, ServedModel, SlotReading, SwapReading
from cliff_tui.session import Session
from cliff_tui.units import GiB
from exporting.scrape import labelsets, scrape_registry, value
from paths import DATA

UUID = "GPU-6f1c2a8e-3b9d-4c1e-9a57-0d2e8b4f7c31"


def exporter_for(events, **kwargs) -> Exporter:
    session = Session(queued=False)
    session.feed_all(events)
    return Exporter(session, **kwargs)


def with_uuid(events):
    return [
        dataclasses.replace(e, gpus=tuple(dataclasses.replace(g, uuid=UUID) for g in e.gpus))
        if isinstance(e, Sample)
        else e
        for e in events
    ]


@pytest.fixture(scope="module")
def cliff():
    """The GPU-cliff demo run (synthetic NVML-shaped readings; the real analysis reads them)."""
    events = with_uuid(demo.gpu_cliff_run())
    exporter = exporter_for(events)
    names, series = scrape_registry(exporter.registry)
    return exporter.session.store, names, series


def test_every_tier_with_its_capacity(cliff):
    store, _, series = cliff
    s = store.machine.latest
    g = s.gpus[0]
    vram = {"tier": "vram", "gpu": "0", "uuid": UUID}
    assert value(series, "cliff_memory_used_bytes", **vram) == g.vram_used_bytes
    assert value(series, "cliff_memory_capacity_bytes", **vram) == 12 * GiB
    assert value(series, "cliff_memory_used_bytes", tier="shared", gpu="0") == g.shared_used_bytes
    assert value(series, "cliff_memory_capacity_bytes", tier="shared", gpu="0") == 16 * GiB
    assert value(series, "cliff_memory_used_bytes", tier="ram") == s.ram.used_bytes
    assert value(series, "cliff_memory_capacity_bytes", tier="ram") == 32 * GiB
    assert value(series, "cliff_memory_capacity_bytes", tier="swap") == 8 * GiB
    assert value(series, "cliff_sample_timestamp_seconds") == s.t
    assert value(series, "cliff_ram_cgroup_limit_bytes") is None


def test_the_spill_signs_and_verdict_are_the_screens(cliff):
    store, _, series = cliff
    above = value(series, "cliff_shared_vram_above_baseline_bytes", gpu="0", uuid=UUID)
    assert above == store.machine.shared_above_baseline()[0] and above > 1 * GiB
    for number, name in ((1, "spill"), (2, "ram"), (3, "speed")):
        state = store.signs.current[number]
        assert value(series, "cliff_sign_level", sign=str(number), name=name) == SIGN_LEVELS[state.level]
    assert store.signs.current[1].level == "red"
    assert value(series, "cliff_sign_level", sign="1") == 3
    assert value(series, "cliff_verdict_level") == 3 == verdict_level(store)


def test_decode_speed_with_its_window(cliff):
    store, _, series = cliff
    w = store.last_window
    assert value(series, "cliff_decode_tokens_per_second", source="run") == pytest.approx(w.tok_s)
    assert value(series, "cliff_decode_window_tokens") == w.n_tokens
    assert value(series, "cliff_decode_window_seconds") == pytest.approx(w.n_tokens / w.tok_s)
    assert value(series, "cliff_decode_depth_tokens") == w.depth
    assert value(series, "cliff_decode_window_timestamp_seconds") == w.t


def test_pcie_and_one_clock_event_gauge_per_reason(cliff):
    store, _, series = cliff
    g = store.machine.latest.gpus[0]
    assert value(series, "cliff_pcie_rx_bytes_per_second", gpu="0") == pytest.approx(g.pcie_rx_bytes_s)
    assert value(series, "cliff_pcie_tx_bytes_per_second", gpu="0") == pytest.approx(g.pcie_tx_bytes_s)
    reasons = {ls["reason"] for ls in labelsets(series, "cliff_gpu_clock_event")}
    assert reasons == {
        "idle",
        "app_clocks",
        "power_cap",
        "hw_slowdown",
        "sync_boost",
        "thermal_sw",
        "thermal_hw",
        "power_brake",
        "display_clocks",
    } and len(reasons) == len(CLOCK_EVENT_REASONS)
    assert value(series, "cliff_gpu_info", gpu="0", uuid=UUID, vendor="nvidia") == 1


def test_a_clock_event_in_force_reads_1():
    sample = next(e for e in demo.gpu_cliff_run() if isinstance(e, Sample))
    held = dataclasses.replace(sample.gpus[0], throttle_reasons=("power cap", "thermal (hw)"))
    events = [dataclasses.replace(sample, gpus=(held,))]
    _, series = scrape_registry(exporter_for(events).registry)
    assert value(series, "cliff_gpu_clock_event", reason="power_cap") == 1
    assert value(series, "cliff_gpu_clock_event", reason="thermal_hw") == 1
    assert value(series, "cliff_gpu_clock_event", reason="idle") == 0


def test_names_are_prefixed_colon_free_and_in_base_units(cliff):
    _, names, _ = cliff
    assert names and all(n.startswith("cliff_") and ":" not in n for n in names)
    for name in names:
        assert not any(unit in name for unit in ("_mib", "_gib", "_kib", "_ms", "_percent", "_mb")), name


def test_no_gpu_means_no_gpu_samples_but_every_family_is_served():
    cpu = exporter_for(demo.cpu_watch(40))
    names, series = scrape_registry(cpu.registry)
    gpu_names, _ = scrape_registry(exporter_for(demo.gpu_cliff_run()).registry)
    assert names == gpu_names  # the same families on every host
    assert labelsets(series, "cliff_memory_used_bytes") == [
        {"tier": "ram", "gpu": "", "uuid": ""},
        {"tier": "swap", "gpu": "", "uuid": ""},
    ]
    assert "cliff_pcie_rx_bytes_per_second" in names and not labelsets(series, "cliff_pcie_rx_bytes_per_second")
    # no vLLM attached: its KV cache families are served, with no sample
    for family in ("cliff_server_kv_cache_usage_ratio", "cliff_server_preemptions", "cliff_server_requests_waiting"):
        assert family in names and not labelsets(series, family)
    # no swap on this demo box: sign 1 cannot be read, and says so
    assert value(series, "cliff_sign_applicable", sign="1") == 0
    assert value(series, "cliff_sign_level", sign="1") == 0
    assert value(series, "cliff_decode_tokens_per_second") is None


def test_the_samples_cgroup_limit_is_the_ram_capacity():
    sample = next(e for e in demo.cpu_watch(5) if isinstance(e, Sample))
    limited = dataclasses.replace(sample, cgroup=CgroupReading("/jobs/llm", 4 * GiB, 3 * GiB))
    _, series = scrape_registry(exporter_for([limited]).registry)
    assert value(series, "cliff_memory_capacity_bytes", tier="ram") == 4 * GiB == limited.ram_capacity_bytes
    assert value(series, "cliff_memory_used_bytes", tier="ram") == 3 * GiB
    assert value(series, "cliff_ram_cgroup_limit_bytes") == 4 * GiB
    unread = dataclasses.replace(sample, cgroup=CgroupReading("/jobs/llm", 4 * GiB, None))
    _, series = scrape_registry(exporter_for([unread]).registry)
    assert value(series, "cliff_memory_capacity_bytes", tier="ram") == 4 * GiB
    assert value(series, "cliff_memory_used_bytes", tier="ram") is None  # unknown: no sample, not the host's
    _, series = scrape_registry(exporter_for([sample]).registry)  # no cgroup: the host's RAM
    assert value(series, "cliff_memory_capacity_bytes", tier="ram") == sample.ram.total_bytes
    assert value(series, "cliff_memory_used_bytes", tier="ram") == sample.ram.used_bytes
    assert value(series, "cliff_ram_cgroup_limit_bytes") is None


def test_the_samples_cpu_quota_and_its_throttled_periods():
    sample = next(e for e in demo.cpu_watch(5) if isinstance(e, Sample))
    _, series = scrape_registry(exporter_for([sample]).registry)
    assert value(series, "cliff_cpu_quota_cpus") is None and value(series, "cliff_cpu_quota_periods_total") is None
    held = dataclasses.replace(sample, cpu_quota=CpuQuota("/kubepods/pod1", 1.5, 1200, 300))
    _names, series = scrape_registry(exporter_for([held]).registry)
    assert value(series, "cliff_cpu_quota_cpus", cgroup="/kubepods/pod1") == 1.5
    assert value(series, "cliff_cpu_quota_periods_total", cgroup="/kubepods/pod1") == 1200
    assert value(series, "cliff_cpu_quota_throttled_periods_total", cgroup="/kubepods/pod1") == 300
    unread = dataclasses.replace(sample, cpu_quota=CpuQuota("/kubepods/pod1", 1.5))
    _, series = scrape_registry(exporter_for([unread]).registry)
    assert value(series, "cliff_cpu_quota_cpus") == 1.5 and value(series, "cliff_cpu_quota_periods_total") is None


def test_attached_servers_with_their_slots_and_rates():
    url = "http://user:secret@127.0.0.1:8080"
    meter = ServerRateMeter()  # the attach job's poller stamps each reading with its server's rates

    def reading(t, tokens, seconds, used):
        made = ServerReading(
            t,
            "llama-server",
            url,
            "ok",
            tokens_predicted_total=tokens,
            tokens_predicted_seconds_total=seconds,
            prompt_tokens_total=tokens * 4,
            prompt_seconds_total=seconds,
            requests_processing=1,
            slots=(SlotReading(0, 4096, used, True), SlotReading(1, 4096, 0, False)),
        )
        return dataclasses.replace(made, rates=meter.update(made)[0])

    ollama = ServerReading(2.0, "ollama", "http://127.0.0.1:11434", "unreachable", "connection refused")
    ollama_models = ServerReading(
        3.0, "ollama", "http://127.0.0.2:11434", "ok", models=(ServedModel("qwen2.5:7b", 5 * GiB, 3 * GiB, 8192),)
    )
    events = [
        reading(1.0, 100, 2.0, 500),
        ollama,
        ollama_models,
        reading(2.0, 160, 3.0, 560),
        DecodeWindow(2.0, ATTACH_RUN_ID, "depth", 560, 60, 60.0, 0.0),
    ]
    _, series = scrape_registry(exporter_for(events).registry)
    server = "http://127.0.0.1:8080"
    assert not any("secret" in v for (_, ls) in series for _, v in ls)
    assert value(series, "cliff_up", server=server, kind="llama-server") == 1
    assert value(series, "cliff_up", server="http://127.0.0.1:11434", kind="ollama") == 0
    assert value(series, "cliff_server_decode_tokens_per_second", server=server) == pytest.approx(60.0)
    assert value(series, "cliff_server_prompt_tokens_per_second", server=server) == pytest.approx(240.0)
    assert value(series, "cliff_server_requests_processing", server=server) == 1
    assert value(series, "cliff_server_slot_context_tokens", server=server, slot="0") == 4096
    assert value(series, "cliff_server_slot_used_tokens", server=server, slot="0") == 560
    assert value(series, "cliff_server_slot_used_tokens", server=server, slot="1") == 0
    assert value(series, "cliff_decode_tokens_per_second", source="attach") == 60
    assert value(series, "cliff_server_model_bytes", model="qwen2.5:7b", tier="vram") == 3 * GiB
    assert value(series, "cliff_server_model_bytes", model="qwen2.5:7b", tier="ram") == 2 * GiB


def test_a_capacity_plan_from_a_recorded_triangulation():
    plans = read_plans(DATA / "smollm2_triangulation.jsonl")
    _, series = scrape_registry(exporter_for([], plans=plans).registry)
    where = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "kv_type": "f16"}
    assert value(series, "cliff_kv_bytes_per_token", basis="allocated", **where) == pytest.approx(23040, rel=1e-6)
    touched = value(series, "cliff_kv_bytes_per_token", basis="touched", **where)
    assert 20_000 < touched < 40_000
    assert value(series, "cliff_projection_target_tokens", tier="ram", **where) == 8192
    assert value(series, "cliff_projection_fits", **where) == 1
    largest = value(series, "cliff_max_context_tokens", tier="ram", gpu="", **where)
    assert largest == plans[0].max_context_tokens and largest > 8192
    # the model's directory never leaves the file
    assert all("/" not in v for (_, ls) in series for k, v in ls if k == "model")


def test_the_collector_holds_the_store_still_while_it_reads():
    session = Session(queued=False)
    exporter = Exporter(session)
    with session.reading():
        pass  # the lock is free again: a scrape does not dead-lock on a re-entry
    session.feed(Sample(1.0, RamReading(GiB, 2 * GiB, GiB), SwapReading(0, 0)))
    _, series = scrape_registry(exporter.registry)
    assert value(series, "cliff_memory_used_bytes", tier="ram") == GiB


def test_the_followed_processs_real_cgroup_is_the_ram_tier_not_the_exporters():
    """As root: a child in a 96 MiB memory cgroup; the exporter (outside it) exports that limit."""
    from cgroup_cliff import MiB
    from cgroup_fixtures import child_in_cgroup

    with child_in_cgroup(96 * MiB, 20 * MiB) as (made, child):
        session = Session(queued=False)
        session.feed(Sampler(pid=child.pid).sample())
        _, series = scrape_registry(Exporter(session).registry)
        screen = session.store.machine.latest
    assert not made.directory.exists()
    assert value(series, "cliff_ram_cgroup_limit_bytes") == 96 * MiB
    assert value(series, "cliff_memory_capacity_bytes", tier="ram") == 96 * MiB == screen.ram_capacity_bytes
    used = value(series, "cliff_memory_used_bytes", tier="ram")
    assert 20 * MiB <= used <= 96 * MiB and used == screen.cgroup.usage_bytes


def test_the_followed_processs_real_cpu_quota_is_exported():
    """As root: a spinning child in a cgroup held to half a CPU; its periods run out."""
    import subprocess
    import sys
    import time

    from cgroup_fixtures import quota_cgroup
    from cliff_tui.probes.cgroup import read_cpu_quota

    spin = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
    with quota_cgroup(50_000) as made:
        child = made.popen([sys.executable, "-c", spin], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20  # a loaded machine starts the interpreter slowly
        while (read_cpu_quota(child.pid).throttled_periods or 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        session = Session(queued=False)
        session.feed(Sampler(pid=child.pid).sample())
        _, series = scrape_registry(Exporter(session).registry)
    assert value(series, "cliff_cpu_quota_cpus", cgroup=made.path) == 0.5
    assert value(series, "cliff_cpu_quota_throttled_periods_total", cgroup=made.path) >= 2
    assert value(series, "cliff_cpu_quota_periods_total") >= value(series, "cliff_cpu_quota_throttled_periods_total")
