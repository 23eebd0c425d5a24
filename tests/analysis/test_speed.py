"""Sign 3 on synthetic and recorded traces: a steady decline is not a cliff, a knee is."""

from __future__ import annotations

import json
from pathlib import Path

from cliff_tui.analysis.speed import classify_speed, fit_decline, find_knee, robust_line
from cliff_tui.events import DecodePoint

DATA = Path(__file__).parents[1] / "data"


def _points(ms_at, depths, phase="probe"):
    return [DecodePoint(d, ms_at(d), 8, phase) for d in depths]


def _verdict(ms_at, deepest=16_000, steps=8, throttle=()):
    depths = [16] + [deepest * k // steps for k in range(1, steps + 1)]
    points = _points(ms_at, depths)
    return classify_speed(1000 / ms_at(16), 1000 / ms_at(deepest), deepest, points, throttle)


def test_steady_cpu_decline_is_not_a_cliff():
    # The measured CPU shape: 85 tok/s at depth 16, 21 at 7.9k, 12.7 at 16k — no spill at all.
    v = _verdict(lambda d: 11.8 + 4.2e-3 * d)
    assert v.raw_drop_pct > 50
    assert v.level == "ok"
    assert abs(v.drop_vs_expected_pct) < 10


def test_knee_beyond_the_trend_is_red_and_located():
    v = _verdict(lambda d: 11.8 + 4.2e-3 * d + (0 if d < 12_000 else 150.0))
    assert v.level == "red"
    assert v.knee_depth == 12_000
    assert v.drop_vs_expected_pct >= 50


def test_modest_slowdown_with_thermal_reasons_is_amber_with_the_cause():
    v = _verdict(lambda d: (11.8 + 4.2e-3 * d) * (1.3 if d > 8_000 else 1.0), throttle={"thermal (hw)"})
    assert v.level == "amber"
    assert v.cause == "thermal throttling"


def test_modest_slowdown_without_nvml_cause_names_load_or_noise():
    v = _verdict(lambda d: (11.8 + 4.2e-3 * d) * (1.3 if d > 8_000 else 1.0))
    assert v.level == "amber"
    assert "background load" in v.cause and "no throttling reported" in v.cause


def test_one_slow_window_is_not_a_knee():
    points = _points(lambda d: 10 + 1e-3 * d, [16, 1000, 2000, 3000, 4000, 5000, 6000, 7000])
    points[-2] = DecodePoint(6000, 100.0, 8)
    fit = fit_decline(points)
    assert find_knee(points, fit) is None


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
