"""The projection pane's memory-against-context chart, drawn from triangulations of real-shaped runs."""

from __future__ import annotations

import itertools
import re

import pytest
from rich.console import Console

from cliff_tui.analysis.triangulation import Triangulation, triangulate
from cliff_tui.events import TriangulationPlanned
from cliff_tui.records import GpuDelta, RunResult, RunSettings, SpeedVerdict
from cliff_tui.ui.projection import byte_axis, chart, nice_ticks, token_axis
from cliff_tui.units import fmt_tokens, parse_tokens

KiB, MiB, GiB = 1024, 1024**2, 1024**3
GPU_KV_PER_TOKEN = 56 * KiB  # Qwen2.5 7B, f16 cache: 28 layers × 4 KV heads × 128 × (K + V) × 2 bytes
GPU_FIXED = 4460 * MiB + 1580 * MiB + 310 * MiB  # weights + compute buffers + the driver's context
CPU_PER_TOKEN = 27 * KiB


def _gpu_run(n_ctx: int, cache: str = "f16") -> RunResult:
    """A run with its KV cache in VRAM on a 12 GiB card: the card's peak grows with n_ctx."""
    kv = n_ctx * GPU_KV_PER_TOKEN * (34 if cache == "q8_0" else 64) // 64  # q8_0: 34 bytes per 32 values
    settings = RunSettings("/models/qwen2.5-7b-q4_k_m.gguf", n_ctx - 256, 64, cache_type_k=cache, cache_type_v=cache)
    return RunResult(
        f"r{n_ctx}{cache}",
        settings,
        "Qwen2.5 7B",
        n_ctx,
        n_ctx - 256,
        64,
        "CUDA0",
        {"CUDA0": kv},
        {"CUDA0": 4460 * MiB},
        {"CUDA0": 1580 * MiB, "CUDA_Host": 64 * MiB},
        42.0,
        30.0,
        2100.0,
        n_ctx - 256,
        (),
        SpeedVerdict("ok", "", 41.0, 30.5, 3.0),
        9 * GiB,
        9 * GiB,
        0,
        0,
        700 * MiB,
        700 * MiB,
        700 * MiB,
        4 * MiB,
        (GpuDelta(0, "NVIDIA GeForce RTX 4070", 310 * MiB, GPU_FIXED + kv, 120 * MiB, 120 * MiB),),
        None,
        60.0,
    )


def _cpu_run(n_ctx: int) -> RunResult:
    """A small model with its KV cache in RAM: the worker's resident memory grows with n_ctx."""
    rss = 160 * MiB + n_ctx * CPU_PER_TOKEN
    return RunResult(
        f"r{n_ctx}",
        RunSettings("/models/smollm2-135m-q4_1.gguf", n_ctx - 256, 64),
        "SmolLM2 135M",
        n_ctx,
        n_ctx - 256,
        64,
        "CPU",
        {"CPU": n_ctx * 22 * KiB},
        {"CPU_Mapped": 90 * MiB},
        {"CPU": 40 * MiB},
        65.0,
        30.0,
        200.0,
        n_ctx - 256,
        (),
        SpeedVerdict("ok", "", 64.0, 30.0, 1.0),
        400 * MiB,
        400 * MiB,
        0,
        0,
        rss - 8 * MiB,
        rss - 4 * MiB,
        rss,
        64 * KiB,
        (),
        "no GPU found",
        30.0,
    )


def _gpu_tri(*n_ctxs: int, cache: str = "f16") -> Triangulation:
    plan = TriangulationPlanned(0.0, n_ctxs, (cache,), 32_768, 512 * MiB, 30 * GiB, (12 * GiB,))
    return triangulate([_gpu_run(n, cache) for n in n_ctxs], (), plan)


def _cpu_tri(*n_ctxs: int, target: int = 8192) -> Triangulation:
    plan = TriangulationPlanned(0.0, n_ctxs, ("f16",), target, None, ram_available_bytes=24 * GiB)
    return triangulate([_cpu_run(n) for n in n_ctxs], (), plan)


def _lines(text) -> list[str]:
    console = Console(width=200, color_system=None, record=True)
    console.print(text)
    return console.export_text().splitlines()


def _columns(lines: list[str], marker: str = "●") -> list[int]:
    """The columns of the plotted markers (a legend's sample is two in a row)."""
    lone = re.compile(f"(?<!{marker}){marker}(?!{marker})")
    return sorted({m.start() for line in lines for m in lone.finditer(line)})


def _x_labels(lines: list[str]) -> list[str]:
    axis = next(i for i, line in enumerate(lines) if line.lstrip().startswith("└"))
    return lines[axis + 1].split()


def _y_labels(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines if (m := re.match(r"^\s*(.+?)┤", line))]


@pytest.mark.parametrize(
    "lo, hi, count, expected",
    [
        (0, 9011, 5, [0, 2000, 4000, 6000, 8000, 10_000]),
        (0, 30_000, 4, [0, 10_000, 20_000, 30_000]),
        (147, 404, 5, [100, 150, 200, 250, 300, 350, 400, 450]),
        (147, 404, 3, [100, 200, 300, 400, 500]),
        (4.3, 11.7, 4, [4, 6, 8, 10, 12]),
        (0.8, 1.3, 5, [0.8, 0.9, 1.0, 1.1, 1.2, 1.3]),
        (0, 193, 5, [0, 50, 100, 150, 200]),
    ],
)
def test_nice_ticks_step_by_one_two_or_five_and_cover_the_range(lo, hi, count, expected):
    assert nice_ticks(lo, hi, count) == expected


def test_a_degenerate_range_still_gets_ticks():
    assert nice_ticks(5, 5, 4) == [5, 6, 7, 8, 9, 10]
    assert len(nice_ticks(0, 0, 3)) >= 2


def test_axes_label_round_values_with_units():
    assert token_axis(25_000, 4).labels == ("0", "5k", "10k", "15k", "20k", "25k")
    assert token_axis(26_000, 3).labels == ("0", "10k", "20k", "30k")
    assert token_axis(950_000, 4).labels == ("0", "200k", "400k", "600k", "800k", "1M")
    assert byte_axis(159 * MiB, 392 * MiB, 5).labels == (
        "150 MiB",
        "200 MiB",
        "250 MiB",
        "300 MiB",
        "350 MiB",
        "400 MiB",
    )
    assert byte_axis(159 * MiB, 392 * MiB, 3).labels == ("200 MiB", "300 MiB", "400 MiB")
    assert byte_axis(6.3 * GiB, 11.6 * GiB, 5).labels == ("6 GiB", "7 GiB", "8 GiB", "9 GiB", "10 GiB", "11 GiB")
    assert byte_axis(6.3 * GiB, 11.6 * GiB, 3).labels == ("6 GiB", "8 GiB", "10 GiB")
    assert byte_axis(0.8 * GiB, 1.3 * GiB, 5).labels[:2] == ("0.8 GiB", "0.9 GiB")


def test_token_counts_are_compact():
    assert [fmt_tokens(n) for n in (0, 512, 8000, 10_500, 41_472, 852_992, 999_900, 1_500_000)] == [
        "0",
        "512",
        "8k",
        "10.5k",
        "41.5k",
        "853k",
        "1M",
        "1.5M",
    ]


def test_one_point_is_a_chart_of_that_point_alone():
    tri = _cpu_tri(1280)
    assert tri.touched.bytes_per_token is None
    lines = _lines(chart({"f16": tri}, 120, 14, color=False))
    assert len(_columns(lines)) == 1
    assert "measured" in "\n".join(lines) and "fit" not in "\n".join(lines)
    assert all(label.endswith("MiB") for label in _y_labels(lines))


def test_ticks_are_round_and_carry_units():
    lines = _lines(chart({"f16": _cpu_tri(1280, 2304, 4352)}, 120, 14, color=False))
    xs, ys = _x_labels(lines), _y_labels(lines)
    assert xs[0] == "0" and all(re.fullmatch(r"\d+(\.\d)?k", x) for x in xs[1:]), xs
    tokens = [0] + [parse_tokens(x) for x in xs[1:]]
    steps = {b - a for a, b in itertools.pairwise(tokens)}
    assert len(steps) == 1 and steps.pop() in (1000, 2000, 5000)
    assert len(ys) >= 2 and all(re.fullmatch(r"\d+ MiB", y) for y in ys), ys


def test_a_cliff_far_past_the_points_is_named_and_the_points_stay_spread():
    tri = _cpu_tri(1280, 2304, 4352)
    cliff = tri.projection.max_context
    assert cliff is not None and cliff > 100 * 4352
    text = "\n".join(lines := _lines(chart({"f16": tri}, 120, 14, color=False)))
    assert f"→ cliff at {cliff:,} tokens (off the chart, {cliff / 4352:.0f}× the deepest point)" in text
    assert "↑ capacity 22.8 GiB (off the chart)" in text
    columns = _columns(lines)
    assert len(columns) == 3 and columns[-1] - columns[0] >= 30  # of a ~110-column plot
    assert "cliff ≈" not in text


def test_a_target_far_past_the_points_does_not_squash_them():
    lines = _lines(chart({"f16": _cpu_tri(1280, 2304, 4352, target=1_000_000)}, 120, 14, color=False))
    columns = _columns(lines)
    assert len(columns) == 3 and columns[-1] - columns[0] >= 10
    assert "1M" not in _x_labels(lines)


def test_a_cliff_in_range_is_marked_where_the_line_meets_the_capacity():
    tri = _gpu_tri(8192, 16_384, 24_576)
    cliff = tri.projection.max_context
    assert tri.projection.limited_by == "GPU0 dedicated VRAM minus reserve" and 24_576 < cliff < 8 * 24_576
    lines = _lines(chart({"f16": tri}, 120, 14, color=False))
    text = "\n".join(lines)
    assert f"cliff ≈ {fmt_tokens(cliff)}" in text and "off the chart" not in text
    assert "capacity" in text and "fit" in text  # the legend
    assert len(_columns(lines, "◆")) == 1
    top = next(line for line in lines if line.lstrip().startswith("┌"))
    assert "┬" in top.strip()[1:-1]  # the vertical marker meets the frame
    assert any(label.endswith("GiB") for label in _y_labels(lines))


def test_several_cache_types_share_one_chart_with_one_legend_line_each():
    tris = {"f16": _gpu_tri(8192, 16_384, 24_576), "q8_0": _gpu_tri(8192, 16_384, cache="q8_0")}
    text = "\n".join(_lines(chart(tris, 120, 16, color=False)))
    assert "f16" in text and "q8_0" in text and "f16 cliff ≈" in text
    assert "measured" not in text
