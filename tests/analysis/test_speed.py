"""Sign 3 on synthetic and recorded traces: a steady decline is not a cliff, a knee is."""

from __future__ import annotations

import json
from pathlib import Path

from cliff_tui.analysis.speed import classify_speed, robust_line, steady
from cliff_tui.records import DecodePoint

DATA = Path(__file__).parents[1] / "data"


def _points(ms_at, depths, phase="probe"):
    return [DecodePoint(d, ms_at(d), 8, phase) for d in depths]


def _run(ms_at, deepest=16_000, steps=8, windows=8):
    """A run's points: the baseline, probes at depth·k/steps, then windows of decode at depth."""
    probes = [16] + [deepest * k // steps for k in range(1, steps)]
    at_depth = [deepest + 8 * w for w in range(windows)]
    points = _points(ms_at, probes) + _points(ms_at, at_depth, "depth")
    depth_ms = sum(ms_at(d) for d in at_depth) / windows
    return 1000 / ms_at(16), 1000 / depth_ms, deepest, points


def _verdict(ms_at, deepest=16_000, throttle=(), **kwargs):
    baseline, depth_tok_s, depth, points = _run(ms_at, deepest)
    return classify_speed(baseline, depth_tok_s, depth, points, throttle, **kwargs)


def linear(d):
    return 11.8 + 4.2e-3 * d


def cliff_at_12k(d):
    return linear(d) + (0 if d < 12_000 else 150.0)


def test_steady_cpu_decline_is_not_a_cliff():
    v = _verdict(linear)
    assert v.raw_drop_pct > 50
    assert v.level == "ok"
    assert abs(v.drop_vs_expected_pct) < 10


def test_decode_that_bends_up_with_depth_is_information_not_an_alarm():
    """Time per token growing faster than linear (a CPU's caches): the probes just before the
    decode predict it; a line through the shallow half would have called it 35 % slow."""
    v = _verdict(lambda d: 11.8 + 1e-3 * d + 4e-7 * d * d, kv_on_gpu=False)
    assert v.level == "info" and "faster than linear" in v.text and "CPU cache level" in v.text
    assert abs(v.drop_vs_expected_pct) < 10
    assert "PCIe" not in v.text


def test_a_fall_beyond_the_trend_with_a_memory_sign_is_red_and_located():
    v = _verdict(cliff_at_12k, memory_sign="swap +109 MiB near depth 12,000", kv_on_gpu=False)
    assert v.level == "red" and v.drop_vs_expected_pct >= 50
    assert v.knee_depth == 12_000 and "after swap +109 MiB" in v.text
    assert "PCIe" not in v.text  # no GPU, no bus


def test_the_same_fall_without_a_memory_sign_is_never_red():
    v = _verdict(cliff_at_12k)
    assert v.level == "info" and "no memory sign, load or throttling seen" in v.text


def test_a_fall_with_a_cause_on_the_cpu_is_amber_and_names_it():
    v = _verdict(cliff_at_12k, cpu_cause="other processes used 0.9 CPU cores while it decoded")
    assert v.level == "amber" and v.cause == "other processes used 0.9 CPU cores while it decoded"
    assert v.text.endswith(": other processes used 0.9 CPU cores while it decoded (no memory sign)")


def test_modest_slowdown_with_thermal_reasons_is_amber_with_the_cause():
    v = _verdict(lambda d: linear(d) * (1.3 if d >= 16_000 else 1.0), throttle={"thermal (hw)"})
    assert v.level == "amber"
    assert v.cause == "thermal throttling"


def test_one_slow_window_is_not_enough():
    baseline, _, depth, points = _run(linear)
    points[-3] = DecodePoint(points[-3].depth, 500.0, 8, "depth")
    v = classify_speed(baseline, 1000 / linear(depth), depth, points)
    assert v.level == "ok"


def test_robust_fit_ignores_one_outlier():
    xs = [0, 1, 2, 3, 4]
    ys = [1, 2, 30, 4, 5]
    fit = robust_line(xs, ys)
    assert abs(fit.slope - 1) < 1e-9


def test_too_few_points_compares_against_baseline_only():
    v = classify_speed(80.0, 30.0, 4000, [DecodePoint(16, 12.5, 8)])
    assert v.expected_tok_s is None
    assert v.raw_drop_pct > 60
    assert "too few depths" in v.text


def test_recorded_smollm2_cpu_trace_is_an_expected_decline():
    """A real run (SmolLM2-135M, 2 CPU threads, depth 4096) recorded on the project's machine."""
    trace = json.loads((DATA / "smollm2_cpu_decode_trace.json").read_text())
    points = [DecodePoint(**p) for p in trace["decode_points"]]
    v = classify_speed(trace["baseline_tok_s"], trace["depth_tok_s"], trace["depth"], points)
    assert trace["drop_pct"] > 40  # the raw drop alone would look like a cliff
    assert v.level == "ok", v.text
    assert v.knee_depth is None


def test_decode_windows_are_steady_once_three_agree_and_none_paged():
    assert not steady([(10.0, 0.0), (10.1, 0.0)])
    assert steady([(7.0, 0.0), (10.0, 0.0), (10.3, 0.0), (9.8, None)])
    assert not steady([(10.0, 0.0), (10.0, 0.0), (8.0, 0.0)])
    assert not steady([(10.0, 0.0), (10.0, 200.0), (10.0, 0.0)])  # one window read its pages back
