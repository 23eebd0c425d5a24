"""The triangulation maths on exact synthetic series."""

from __future__ import annotations

import pytest

from cliff_tui.analysis.triangulation import (
    Capacity,
    MemoryPoint,
    check_points,
    locate_wall,
    project,
    slope_of,
    triangulate,
)
from cliff_tui.events import RunFailed, TriangulationPlanned
from cliff_tui.records import GpuDelta, OomKill, RunResult, RunSettings, SpeedVerdict

MiB = 1024**2
KiB = 1024


def _point(n_ctx, touched, noise=0.0, beyond=0):
    return MemoryPoint(
        n_ctx=n_ctx,
        depth=n_ctx - 256,
        allocated_bytes=touched,
        touched_bytes=touched,
        noise_bytes=noise,
        beyond_bytes=beyond,
        beyond_tier="swap",
    )


def _result(n_ctx, rss, *, kv=None, gpu_peak=None, kv_device="CPU", cache="f16"):
    kv = kv if kv is not None else n_ctx * 22.5 * KiB
    gpus = ()
    if gpu_peak is not None:
        gpus = (GpuDelta(0, "GPU", 0, gpu_peak, 0, 0),)
    return RunResult(
        run_id=f"r{n_ctx}",
        settings=RunSettings("m.gguf", n_ctx - 256, 64, cache_type_k=cache, cache_type_v=cache),
        model_name="m",
        n_ctx=n_ctx,
        depth=n_ctx - 256,
        n_gen=64,
        kv_device=kv_device,
        kv_buffers={kv_device: int(kv)},
        model_buffers={"CPU_Mapped": 100 * MiB},
        compute_buffers={kv_device: 50 * MiB},
        baseline_tok_s=80.0,
        depth_tok_s=20.0,
        prefill_tok_s=100.0,
        prefilled_tokens=n_ctx - 256,
        decode_points=(),
        verdict=SpeedVerdict("ok", "", 75.0, 21.0, 5.0),
        ram_baseline_bytes=0,
        ram_peak_bytes=0,
        swap_baseline_bytes=0,
        swap_peak_bytes=0,
        rss_created_bytes=rss,
        rss_baseline_bytes=rss,
        rss_peak_bytes=rss,
        rss_noise_bytes=64 * KiB,
        gpus=gpus,
        gpus_reason=None,
        elapsed_s=1.0,
    )


def test_a_line_is_linear_with_the_right_slope():
    pts = [_point(n, 200 * MiB + n * 48 * KiB) for n in (16_128, 32_256, 65_024)]
    checks, first_off = check_points(pts)
    assert first_off is None and len(checks) == 1 and checks[0].on_line
    slope = slope_of([p.n_ctx for p in pts], [p.touched_bytes for p in pts])
    assert slope.bytes_per_token == pytest.approx(48 * KiB)
    assert slope.kib_per_token == pytest.approx(48)
    assert slope.mib_per_1k_tokens == pytest.approx(48 * 1000 / 1024)
    assert slope.intercept_bytes == pytest.approx(200 * MiB)


def test_a_tier_that_flattens_while_swap_grows_is_a_wall_at_the_right_place():
    knee = 40_000

    def mem(n):
        return 200 * MiB + min(n, knee) * 40 * KiB + max(0, n - knee) * 4 * KiB

    pts = [
        _point(n, mem(n), beyond=max(0, n - knee) * 36 * KiB)
        for n in (8_000, 16_000, 24_000, 32_000, 48_000, 56_000, 64_000)
    ]
    checks, first_off = check_points(pts)
    assert first_off == 4  # 48k is the first point off the line, with swap taking the growth
    assert locate_wall(pts, first_off) == pytest.approx(knee, rel=0.01)
    assert (
        checks[-1].describe().startswith("touched memory at n_ctx 48,000 was")
        and "below the line" in checks[-1].describe()
    )


def test_the_third_point_check_uses_the_noise():
    base = [_point(1000, 100 * MiB, noise=1 * MiB), _point(2000, 110 * MiB, noise=1 * MiB)]
    near = [*base, _point(3000, 120 * MiB + 2 * MiB, noise=1 * MiB)]  # 2 MiB off, noise 1 MiB → on the line
    above = [*base, _point(3000, 120 * MiB + 40 * MiB, noise=1 * MiB)]
    below_alone = [*base, _point(3000, 120 * MiB - 40 * MiB, noise=1 * MiB)]
    below_with_swap = [*base, _point(3000, 120 * MiB - 40 * MiB, noise=1 * MiB, beyond=100 * MiB)]
    assert check_points(near)[1] is None and check_points(near)[0][0].on_line
    assert check_points(above)[1] is None and not check_points(above)[0][0].on_line  # off the line, no wall
    assert check_points(below_alone)[1] is None  # less memory than predicted, nothing else grew: noise
    assert check_points(below_with_swap)[1] == 2


def test_a_two_percent_miss_of_touched_memory_is_linear_and_says_which_figure_missed():
    """A quiet CPU run: 534.3 MB touched at the third point against 545.7 predicted, no swap."""
    results = [_result(n, rss, kv=n * 22.5 * KiB) for n, rss in ((3584, 330.0e6), (7168, 432.0e6), (14592, 534.3e6))]
    tri = triangulate(results)
    assert tri.wall_near is None
    assert tri.verdict.startswith("linear (touched memory at n_ctx 14,592 was")
    assert "below the line" in tri.verdict and "no other tier grew: noise, not a wall" in tri.verdict


def test_projection_formula_and_max_context():
    slope = slope_of([1000, 2000], [100 * MiB + 1000 * 64 * KiB, 100 * MiB + 2000 * 64 * KiB])
    cap = Capacity("GPU0 dedicated VRAM", 1000 * MiB, 100 * MiB)
    p = project(slope, cap, 8192, wall=None, does_not_fit_at=None)
    assert p.projected_bytes == pytest.approx(100 * MiB + 8192 * 64 * KiB)
    assert p.formula == "100 MiB + 8,192 tok × 64.00 KiB/tok ÷ 1024 = 612 MiB"
    # (1000 - 100 - 100) MiB / 64 KiB per token = 12800 tokens, padded down to 256
    assert p.max_context == 12_800
    assert p.fits is True


def test_a_failed_allocation_bounds_the_cliff():
    results = [_result(n, 200 * MiB + n * 30 * KiB) for n in (2304, 4352)]
    failures = [RunFailed(0.0, "r8448", "does_not_fit", "no room", n_ctx=8448, depth=8192)]
    plan = TriangulationPlanned(0.0, (2048, 4096, 8192), ("f16",), 32_000, 256 * MiB, ram_available_bytes=20_000 * MiB)
    tri = triangulate(results, failures, plan, theory_bytes_per_token=23040)
    assert tri.does_not_fit_at == 8448
    assert tri.projection.max_context == 8192  # below the failure, though RAM would allow far more
    assert tri.projection.limited_by == "failed allocation"
    assert "does not fit at 8,448" in tri.verdict


def test_an_oom_killed_point_bounds_the_cliff_in_a_cgroup_with_a_containers_reserve():
    results = [_result(n, 200 * MiB + n * 30 * KiB) for n in (2304, 4352)]
    oom = OomKill(42, True, True, None, "/box", 2048 * MiB, "/box", 1900 * MiB, 5000)
    failures = [RunFailed(0.0, "r8448", "does_not_fit", "OOM-killed", n_ctx=8448, depth=5000, oom=oom)]
    tier = "RAM (cgroup limit 2.00 GiB)"
    plan = TriangulationPlanned(0.0, (2048, 4096, 8192), ("f16",), 32_000, None, 2000 * MiB, ram_tier=tier)
    tri = triangulate(results, failures, plan, theory_bytes_per_token=23040)
    assert tri.projection.max_context == 8192  # the limit would allow more: the kill bounds it
    assert tri.projection.limited_by == "OOM kill"
    assert tri.projection.tier == tier
    assert tri.projection.reserve_bytes == 200 * MiB  # a tenth of the limit, not the machine's 256 MiB floor


def test_cpu_tier_uses_rss_and_available_ram():
    results = [_result(n, 150 * MiB + n * 26 * KiB) for n in (768, 1280, 2304)]
    plan = TriangulationPlanned(0.0, (512, 1024, 2048), ("f16",), 8192, None, ram_available_bytes=4096 * MiB)
    tri = triangulate(results, (), plan, theory_bytes_per_token=23040)
    assert tri.verdict == "linear"
    assert tri.touched.kib_per_token == pytest.approx(26)
    assert tri.allocated.kib_per_token == pytest.approx(22.5)
    assert tri.projection.tier.startswith("RAM")
    reserve = tri.projection.reserve_bytes
    assert reserve == 256 * MiB  # 5 % of 4 GiB is less than the 256 MiB floor
    expected = int((4096 * MiB - reserve - 150 * MiB) / (26 * KiB)) // 256 * 256
    assert tri.projection.max_context == expected


def test_gpu_tier_uses_dedicated_vram_peak():
    results = [_result(n, 1, kv_device="CUDA0", gpu_peak=4000 * MiB + n * 100 * KiB) for n in (4352, 8448, 16640)]
    plan = TriangulationPlanned(0.0, (4096, 8192, 16384), ("f16",), 40_000, 512 * MiB, vram_total_bytes=(8192 * MiB,))
    tri = triangulate(results, (), plan)
    assert tri.projection.tier == "GPU0 dedicated VRAM"
    assert tri.touched.kib_per_token == pytest.approx(100)
    assert tri.projection.fits is False  # 4000 MiB + 40,000 × 100 KiB = 7906 MiB > 8192 − 512 MiB
    assert tri.projection.max_context == int((8192 - 512 - 4000) * 1024 / 100) // 256 * 256
