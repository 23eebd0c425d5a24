"""Deterministic demo sessions for screenshots, snapshot tests and ``cliff-tui replay`` demos.

The numbers are synthetic but shaped like real readings (NVML fields, WDDM shared counters, a
llama.cpp buffer log); the sign detectors and the speed verdict are computed by the real
analysis code from them. Nothing here is used by a live session.
"""

from __future__ import annotations

import math
from typing import Any

from cliff_tui.analysis.cliff import RunWatch, cliff_verdict, memory_sign
from cliff_tui.analysis.speed import classify_speed
from cliff_tui.events import BuffersReported, DecodeWindow, RunFinished, RunProgress, RunStarted, Sample
from cliff_tui.probes.sampler import CPU_ONLY_TIERS
from cliff_tui.records import (
    BufferSize,
    DecodePoint,
    GpuDelta,
    GpuReading,
    ModelInfo,
    RamReading,
    RunResult,
    RunSettings,
    SwapReading,
)
from cliff_tui.units import GiB, MiB

T0 = 1_800_000_000.0
NO_GPU_REASON = (
    "no GPU found (NVIDIA: no NVIDIA driver (libnvidia-ml not found); AMD: no amdgpu card in "
    f"/sys/class/drm) — {CPU_ONLY_TIERS}"
)


def cpu_watch(n: int = 120, interval: float = 0.5) -> list[Sample]:
    """A CPU-only box with no swap: RAM breathing around 6 GiB of 24."""
    out = []
    for i in range(n):
        used = int(6 * GiB + 0.8 * GiB * math.sin(i / 9) + (i % 7) * 8 * MiB)
        out.append(
            Sample(
                T0 + i * interval,
                RamReading(used, 24 * GiB, 24 * GiB - used - GiB),
                SwapReading(0, 0),
                (),
                NO_GPU_REASON,
            )
        )
    return out


MODEL = ModelInfo(
    "/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf",
    "Qwen2.5 7B Instruct",
    4_683_073_952,
    "qwen2",
    28,
    28,
    4,
    128,
    128,
    32768,
    None,
    "Q4_K_M",
)
SETTINGS = RunSettings(MODEL.path, depth=24_000, n_gen=128, threads=8)


def _gpu(t: float, used: int, shared: int, util: float, rx: float, throttle: tuple[str, ...] = ()) -> GpuReading:
    return GpuReading(
        0,
        "NVIDIA GeForce RTX 4070 (demo)",
        "nvidia",
        used,
        12 * GiB,
        310 * MiB,
        shared,
        16 * GiB,
        util,
        64.0 + util / 10,
        2475,
        10501,
        throttle,
        rx,
        rx / 8,
        None,
        {},
    )


def _ms_per_token(depth: int) -> float:
    """24 tok/s trend with depth, then a knee near 19k tokens where the KV spills over PCIe."""
    ms = 23.0 + 0.9e-3 * depth
    return ms * (4.0 if depth > 19_000 else 1.0)


def gpu_cliff_run() -> list[Any]:
    """One run on a 12 GiB card, Windows-style shared memory: the three signs go red."""
    run_id = "demo"
    events: list[Any] = [
        RunStarted(T0, run_id, SETTINGS, MODEL, 24_320),
        BuffersReported(
            T0 + 2,
            run_id,
            (
                BufferSize("CUDA0", "model", 4_460 * MiB),
                BufferSize("CUDA0", "kv", 1_330 * MiB),
                BufferSize("CUDA0", "compute", 1_580 * MiB),
                BufferSize("CUDA_Host", "compute", 64 * MiB),
            ),
        ),
    ]
    points = [DecodePoint(16, _ms_per_token(16), 32, "baseline")]
    events.append(DecodeWindow(T0 + 3, run_id, "baseline", 16, 32, 1000 / _ms_per_token(16), 0.6))
    for k in range(1, 8):
        depth = 24_000 * k // 8
        points.append(DecodePoint(depth, _ms_per_token(depth), 8))
        events.append(RunProgress(T0 + 4 + k * 6, run_id, "prefill", depth, 24_000, 2400 - 60 * k, (8 - k) * 6))
        events.append(DecodeWindow(T0 + 4 + k * 6, run_id, "probe", depth, 8, 1000 / _ms_per_token(depth), 0.9))
    t = T0 + 52
    events.append(RunProgress(t, run_id, "decode", 24_000, 24_000, None, 20))
    for w in range(16):
        depth = 24_000 + w * 8
        points.append(DecodePoint(depth, _ms_per_token(depth), 8, "depth"))
        events.append(DecodeWindow(t + w * 1.3, run_id, "depth", depth, 8, 1000 / _ms_per_token(depth), 0.4))
    events += _cliff_samples()
    watch = _watched(events)
    spilled = memory_sign(watch.evidence())
    verdict = classify_speed(
        1000 / _ms_per_token(16),
        1000 / _ms_per_token(24_064),
        24_000,
        points,
        kv_on_gpu=True,
        memory_sign=spilled.text if spilled else None,
    )
    result = RunResult(
        run_id,
        SETTINGS,
        MODEL.name,
        24_320,
        24_000,
        128,
        "CUDA0",
        {"CUDA0": 1_330 * MiB},
        {"CUDA0": 4_460 * MiB},
        {"CUDA0": 1_580 * MiB, "CUDA_Host": 64 * MiB},
        1000 / _ms_per_token(16),
        1000 / _ms_per_token(24_064),
        2100.0,
        24_000,
        tuple(points),
        verdict,
        9 * GiB,
        int(10.4 * GiB),
        0,
        0,
        None,
        None,
        None,
        None,
        (GpuDelta(0, "NVIDIA GeForce RTX 4070 (demo)", int(7.2 * GiB), int(11.7 * GiB), 120 * MiB, int(1.6 * GiB)),),
        None,
        74.0,
        cliff=cliff_verdict(watch.evidence(), verdict),
    )
    events.append(RunFinished(T0 + 74, result))
    return sorted(events, key=lambda e: e.t)


def _watched(events: list[Any]) -> RunWatch:
    """The run's memory signs as the engine's watch finds them, each sample at the depth then."""
    watch, depth = RunWatch(kv_on_gpu=True), 0
    for event in sorted(events, key=lambda e: e.t):
        if isinstance(event, RunProgress):
            depth = event.depth
        elif isinstance(event, Sample):
            watch.observe(event, depth)
    return watch


def _cliff_samples() -> list[Sample]:
    out = []
    for i in range(150):
        t = T0 + i * 0.5
        fill = min(1.0, i / 100)
        used = int(7.2 * GiB + fill * 4.5 * GiB)
        spill = max(0.0, (i - 95) / 50)
        shared = int(120 * MiB + spill * 1.5 * GiB)
        ram = int(9 * GiB + spill * 1.4 * GiB)
        rx = 1.2 * GiB * spill
        out.append(
            Sample(
                t,
                RamReading(ram, 32 * GiB, 32 * GiB - ram - 2 * GiB),
                SwapReading(0, 8 * GiB),
                (_gpu(t, used, shared, 97.0 - 40 * spill, rx),),
                None,
            )
        )
    return out
