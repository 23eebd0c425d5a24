"""What a run is asked to do, and how a fill is chosen: light enough for the monitor's process to
import without llama.cpp (the run itself happens in a worker, :mod:`cliff_tui.engine.worker`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cliff_tui.records import DecodePoint, FillMode

FillChoice = Literal["auto", "real", "synthetic"]
AUTO_REAL_DEPTH = 8192  # `--fill auto`: a run this deep or shallower prefills for real
MIN_WINDOW_TOKENS = 3


def choose_fill(choice: FillChoice, depth: int) -> FillMode:
    if choice == "auto":
        return "synthetic" if depth > AUTO_REAL_DEPTH else "real"
    return choice


@dataclass
class RunOptions:
    run_id: str = ""
    probes: int = 7
    probe_tokens: int = 6
    baseline_tokens: int = 32
    window_tokens: int = 8
    # deep on a CPU a token can take seconds: a window (a probe too) then closes after this long
    # once it holds MIN_WINDOW_TOKENS, so the screen, sign 3 and the steady check keep moving
    window_seconds: float = 4.0
    state_in: str | None = None
    state_out: str | None = None
    # Decode points measured by earlier runs of the same model and settings (a chained
    # triangulation): speed at a depth does not depend on n_ctx, and they give the depth trend
    # the shallow points this run skipped by loading a saved state.
    prior_points: tuple[DecodePoint, ...] = ()
    # "synthetic": load KV cells to depth − one ubatch instead of prefilling them (see engine.fill),
    # then prefill that last ubatch for real; falls back to a real prefill where it cannot
    fill: FillMode = "real"
    fill_dir: str | None = None  # where the filled states are written (default: the temp folder)
    # stop the decode at depth once its windows are steady (analysis.speed.steady), n_gen at most
    stop_when_steady: bool = False
    sample_interval: float = 0.25
    progress_interval: float = 0.25
