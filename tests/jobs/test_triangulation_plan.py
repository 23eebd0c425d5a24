"""A triangulation's plan on cost models shaped like real machines: the depths that fit a budget and
the time each design takes."""

from __future__ import annotations

import pytest

from cliff_tui.engine.worker import PrefillProfile
from cliff_tui.jobs.triangulation_plan import DEFAULT_DEPTHS, estimate_filled_seconds, estimate_seconds, plan_depths


def test_default_depths_shrink_to_the_budget_and_say_so():
    cpu = PrefillProfile(p=1 / 150, q=1.9e-6, a=0.0118, b=4.2e-6, load_s=0.5)  # this machine's shape
    assert estimate_seconds(cpu, DEFAULT_DEPTHS, 64, chain=True) > 3600
    depths, note, reduced = plan_depths(cpu, 300, 64)
    assert reduced and len(depths) == 3 and depths[0] * 4 == pytest.approx(depths[2], rel=0.1)
    assert estimate_seconds(cpu, depths, 64, chain=True) <= 300
    assert "16k/32k/65k would take about" in note and "--depths always wins" in note
    assert estimate_seconds(cpu, depths, 64, chain=False) > estimate_seconds(cpu, depths, 64, chain=True)
    gpu = PrefillProfile(p=1 / 8000, q=1e-9, a=0.01, b=1e-7, load_s=3)
    assert plan_depths(gpu, 300, 64)[:1] == ([16_000, 32_000, 65_000],)


def test_a_filled_triangulation_is_estimated_by_its_last_calls_not_the_whole_prefill():
    cpu = PrefillProfile(p=1 / 150, q=1.9e-6, a=0.0118, b=4.2e-6, load_s=0.5)
    per_cell = 23_040  # SmolLM2's f16 KV
    filled = estimate_filled_seconds(cpu, DEFAULT_DEPTHS, 64, per_cell, 512)
    real = estimate_seconds(cpu, DEFAULT_DEPTHS, 64, chain=True)
    assert 60 < filled < real / 10
    tail_65k = cpu.prefill_seconds(65_000 - 512, 65_000)
    assert filled > tail_65k + cpu.decode_seconds(65_000, 24)
    # each point probes only deeper than the one before: starting at 32k leaves the 65k point alone
    assert estimate_filled_seconds(cpu, [65_000], 64, per_cell, 512, reached=32_000) < estimate_filled_seconds(
        cpu, [65_000], 64, per_cell, 512
    )
    # a sliding-window model prefills its window's ring (window + ubatch) at depth and before each probe
    swa = estimate_filled_seconds(cpu, DEFAULT_DEPTHS, 64, per_cell, 512, n_swa=512)
    ring_at_depth = sum(cpu.prefill_seconds(d - 1024, d - 512) for d in DEFAULT_DEPTHS)
    assert swa > filled + ring_at_depth + cpu.prefill_seconds(56_875 - 1024, 56_875)
    # with RAM to spare a point writes its deepest state once, not one per probe
    roomy, short = 64 << 30, 2 << 30
    kept = estimate_filled_seconds(cpu, [65_000], 64, per_cell, 512, ram_room_bytes=roomy)
    per_depth = estimate_filled_seconds(cpu, [65_000], 64, per_cell, 512, ram_room_bytes=short)
    deepest_mib = (65_000 - 512) * per_cell / 2**20
    assert per_depth == estimate_filled_seconds(cpu, [65_000], 64, per_cell, 512)
    assert per_depth - kept > 2 * deepest_mib / 250  # seven more states, of 8k…57k cells, written
    assert estimate_filled_seconds(cpu, DEFAULT_DEPTHS, 64, per_cell, 512, n_swa=512, ram_room_bytes=roomy) == swa
