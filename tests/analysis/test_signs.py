"""Signs 1 and 2 and their baselines, on samples shaped like the probes' readings."""

from __future__ import annotations

import dataclasses

import pytest

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.cliff import RunWatch, cliff_verdict
from cliff_tui.analysis.signs import RamTrend, SpillBaselines, ram_trend, sign1, sign2, sign3
from cliff_tui.events import Sample
from cliff_tui.records import GpuReading, ProcessReading, RamReading, SpeedVerdict, SwapReading
from cliff_tui.units import GiB, MiB


def sample(
    t: float = 0.0,
    *,
    swap_used: int = 0,
    swap_total: int = GiB,
    shared: dict[int, int | None] | None = None,
    reasons: dict[str, str] | None = None,
) -> Sample:
    gpus = tuple(
        GpuReading(
            index=i,
            name=f"GPU {i}",
            vendor="nvidia",
            vram_used_bytes=GiB,
            vram_total_bytes=8 * GiB,
            shared_used_bytes=used,
            reasons=dict(reasons or {}),
        )
        for i, used in (shared or {}).items()
    )
    return Sample(t, RamReading(4 * GiB, 16 * GiB, 12 * GiB), SwapReading(swap_used, swap_total), gpus)


def baselines(first: Sample) -> SpillBaselines:
    base = SpillBaselines()
    base.update(first)
    return base


# --- sign 1 -----------------------------------------------------------------------------------------


def test_shared_vram_above_its_baseline_is_red_and_names_the_gpu():
    base = baselines(sample(shared={0: 200 * MiB}))
    state = sign1(sample(shared={0: 200 * MiB + th.SHARED_SPILL_BYTES + MiB}), base)
    assert state.level == "red" and state.headline == "shared +65.0 MiB" and "GPU0" in state.detail


def test_shared_vram_within_the_spill_threshold_is_fine():
    base = baselines(sample(shared={0: 200 * MiB}))
    assert sign1(sample(shared={0: 200 * MiB + th.SHARED_SPILL_BYTES}), base).level == "ok"


def test_the_worst_of_two_gpus_decides():
    base = baselines(sample(shared={0: 0, 1: 0}))
    state = sign1(sample(shared={0: 10 * MiB, 1: 300 * MiB}), base)
    assert state.level == "red" and "GPU1" in state.detail


def test_shared_vram_a_platform_cannot_report_is_na_with_its_reason():
    why = "not available: NVIDIA's Linux driver has no shared-memory fallback"
    s = sample(shared={0: None}, reasons={"shared_used_bytes": why})
    state = sign1(s, baselines(s))
    assert (state.level, state.detail) == ("na", why)


def with_process(s: Sample, swap: int, faults: int) -> Sample:
    proc = ProcessReading(4242, "worker", 80 * MiB, 0, swap_bytes=swap, major_faults=faults)
    return dataclasses.replace(s, process=proc)


def test_cpu_only_swap_growth_is_information_until_the_models_pages_are_read_back():
    """The live sign's rule is the verdict's (RunWatch): the model's process holds pages in swap
    from before the baseline (put there as it loaded), others' pages grow; nothing is read back."""
    watch, grown = RunWatch(), 100 * MiB + th.SWAP_SPILL_BYTES + 1
    first = with_process(sample(0.0, swap_used=100 * MiB), swap=50 * MiB, faults=0)
    base = baselines(first)
    watch.observe(first, 0)
    later = with_process(sample(5.0, swap_used=grown), swap=50 * MiB, faults=10)
    watch.observe(later, 1024)
    state = sign1(later, base, watch)
    assert state.level == "info"
    assert "PID 4242 holds 50.0 MiB in swap" in state.detail and "before the run's baseline" in state.detail
    assert "not read back" in state.detail
    verdict = cliff_verdict(watch.evidence(), None)
    assert verdict.level == "info"
    assert "none of it this model's memory" not in verdict.text and "holds 50.0 MiB in swap" in verdict.text
    assert sign1(sample(swap_used=100 * MiB + th.SWAP_SPILL_BYTES), base, watch).level == "ok"


def test_cpu_only_swap_sign_is_red_when_the_verdicts_rule_is():
    """The model's own pages in swap, read back page after page as it generates: red live, red at the end."""
    watch = RunWatch()
    first = with_process(sample(0.0, swap_used=100 * MiB), swap=0, faults=0)
    base = baselines(first)
    watch.observe(first, 0)
    watch.observe(with_process(sample(1.0, swap_used=100 * MiB), swap=0, faults=0), 1024)
    later = with_process(sample(2.0, swap_used=300 * MiB), swap=200 * MiB, faults=10_000)
    watch.observe(later, 2048)
    assert sign1(later, base, watch).level == "red"
    assert cliff_verdict(watch.evidence(), None).level == "red"


def test_cpu_only_without_swap_says_the_cliff_is_an_oom_kill():
    s = sample(swap_total=0)
    state = sign1(s, baselines(s))
    assert state.level == "na" and "out-of-memory" in state.detail


# --- the baselines ----------------------------------------------------------------------------------


def test_baselines_are_the_first_reading_and_retaken_when_a_run_starts():
    base = baselines(sample(swap_used=100 * MiB, shared={0: 50 * MiB}))
    base.update(sample(swap_used=900 * MiB, shared={0: 500 * MiB}))
    assert (base.swap, base.shared) == (100 * MiB, {0: 50 * MiB})
    base.retake()
    base.update(sample(swap_used=900 * MiB, shared={0: 500 * MiB}))
    assert (base.swap, base.shared) == (900 * MiB, {0: 500 * MiB})


def test_a_gpu_that_appears_later_gets_its_own_baseline():
    base = baselines(sample(shared={0: 0}))
    base.update(sample(shared={0: 0, 1: 700 * MiB}))
    assert base.shared == {0: 0, 1: 700 * MiB}
    assert sign1(sample(shared={0: 0, 1: 700 * MiB}), base).level == "ok"


# --- sign 2 -----------------------------------------------------------------------------------------


def rising() -> RamTrend:
    return RamTrend(slope_bytes_s=th.RAM_RISE_BYTES_PER_S * 2, rise_bytes=th.RAM_RISE_MIN_BYTES * 2, window_s=20)


def test_ram_trend_needs_three_points_and_measures_the_rise_from_the_low():
    assert ram_trend([(0.0, 1.0), (1.0, 2.0)]) is None
    trend = ram_trend([(0.0, 4 * GiB), (1.0, 3 * GiB), (2.0, 3.5 * GiB), (3.0, 4.5 * GiB)])
    assert trend.rise_bytes == int(1.5 * GiB) and trend.window_s == 3.0


@pytest.mark.parametrize(
    "generating, kv_on_gpu, level",
    [
        (False, True, "info"),  # RAM rose with nothing generating: not this model's overflow
        (True, False, "info"),  # the KV cache lives in RAM: growth is expected
        (True, None, "amber"),  # KV location unknown
        (True, True, "red"),  # generating with the KV on the GPU: overflow lands in system memory
    ],
)
def test_ram_rising_is_an_alarm_only_while_generating_with_the_kv_on_a_gpu(generating, kv_on_gpu, level):
    assert sign2(rising(), generating, kv_on_gpu).level == level


def test_steady_ram_is_fine_and_says_so_once():
    state = sign2(RamTrend(0.0, 0, 20.0), True, True)
    assert state.level == "ok" and state.headline == "RAM → steady"


# --- sign 3 -----------------------------------------------------------------------------------------


def test_sign3_without_a_token_source_is_na_and_without_a_verdict_measures_the_baseline():
    assert sign3(None).level == "na"
    assert sign3(None, 42.0).headline == "42.0 tok/s"
    verdict = SpeedVerdict("amber", "slower", 40.0, 20.0, 25.0)
    assert sign3(verdict).headline == "-25% vs trend"
