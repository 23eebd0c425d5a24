"""A triangulation's plan: its wall time on this machine, and the depths that fit a budget.

The cost model is the calibration's (:class:`~cliff_tui.engine.worker.PrefillProfile`), summed
over the points as the job reaches them: chained (each point prefills from the one before it) or
from zero, and filled (states written and loaded, only the last calls prefilled).
"""

from __future__ import annotations

from collections.abc import Sequence

from cliff_tui.analysis.thresholds import STEADY_WINDOWS
from cliff_tui.engine.fill import keeps_deepest, learn_count
from cliff_tui.engine.runner import (
    RunOptions,
    filled_load,
    filled_tail,
    probe_depths,
    window_length,
    window_ring,
)
from cliff_tui.engine.worker import PrefillProfile
from cliff_tui.units import MiB, fmt_duration

DEFAULT_DEPTHS = (16_000, 32_000, 65_000)
MIN_DEEPEST = 1024
DEPTH_STEP = 256
# a filled state written to disk, and llama.cpp loading one (from the page cache), on a 2-vCPU VM;
# the estimate they feed is checked in bench/RESULTS.md, section 'Triangulation time against its estimate'
STATE_WRITE_BYTES_PER_S = 250 * MiB
STATE_LOAD_BYTES_PER_S = 2048 * MiB
POINT_OPTIONS = RunOptions(stop_when_steady=True)


def decode_tokens(n_gen: int, options: RunOptions, token_s: float) -> int:
    """The tokens a point is expected to decode at depth where each takes ``token_s``: it stops
    once steady, most often a window after its first chance (the first window pays for warm-up)."""
    if not options.stop_when_steady:
        return n_gen
    return min(n_gen, (STEADY_WINDOWS + 1) * window_length(options.window_tokens, token_s, options))


def estimate_seconds(
    profile: PrefillProfile,
    depths: Sequence[int],
    n_gen: int,
    chain: bool,
    options: RunOptions = POINT_OPTIONS,
    reached: int = 0,
) -> float:
    """Wall time of a triangulation from the measured cost model (both designs, for the README);
    ``reached``: the depth a chained triangulation has already prefilled to."""
    total = 0.0
    for depth in sorted(depths):
        start = reached if chain else 0
        total += _point_overhead(profile, depth, n_gen, options)
        total += profile.prefill_seconds(start, depth)
        total += _probe_seconds(profile, depth, start, options)
        reached = depth
    return total


def estimate_filled_seconds(
    profile: PrefillProfile,
    depths: Sequence[int],
    n_gen: int,
    bytes_per_cell: float,
    ubatch: int,
    options: RunOptions = POINT_OPTIONS,
    reached: int = 0,
    n_swa: int = 0,
    ram_room_bytes: int | None = None,
    model_bytes: int = 0,
) -> float:
    """Wall time of a filled triangulation: per point, the way to each probe depth above the
    last point's and to the depth itself as a filled run takes it (states written, loaded and
    checked with a decode; the rest prefilled), the probes, and the decode at depth.
    ``ram_room_bytes``: the RAM free before the point loads its model (``model_bytes``, charged
    to a memory cgroup) and creates its context; what they leave decides whether it writes its
    deepest state once (engine.fill.keeps_deepest) or a state per depth, as the run decides it
    on the room it reads then (compute buffers aside)."""
    ring, learned = window_ring(n_swa, ubatch), learn_count(n_swa)
    total = 0.0
    for depth in sorted(depths):
        tail = filled_tail(depth, options.probes, ubatch, n_swa)
        deepest = depth - tail
        room = None if ram_room_bytes is None else ram_room_bytes - model_bytes - int(depth * bytes_per_cell)
        kept = deepest > learned and keeps_deepest(n_swa, int(deepest * bytes_per_cell), room)
        if kept:
            total += deepest * bytes_per_cell / STATE_WRITE_BYTES_PER_S
        at = 0
        legs = [(d, ring) for d in probe_depths(depth, options.probes, reached)]
        for d, leg_tail in [*legs, (depth, tail)]:
            loaded = filled_load(at, d, leg_tail, learned)
            if loaded:
                total += _fill_seconds(profile, loaded, deepest if kept else None, bytes_per_cell)
                at = loaded
            total += profile.prefill_seconds(at, d)
            at = d
        total += _point_overhead(profile, depth, n_gen, options)
        total += _probe_seconds(profile, depth, reached, options)
        reached = depth
    return total


def _fill_seconds(profile: PrefillProfile, depth: int, kept: int | None, bytes_per_cell: float) -> float:
    """Reaching ``depth`` cells: loading the ``kept`` state (its writing counted once), or writing
    and loading a state of its own; then the decode that checks it."""
    io = (
        kept * bytes_per_cell / STATE_LOAD_BYTES_PER_S
        if kept
        else depth * bytes_per_cell * (1 / STATE_WRITE_BYTES_PER_S + 1 / STATE_LOAD_BYTES_PER_S)
    )
    return io + profile.decode_seconds(depth, 1)


def _probe_seconds(profile: PrefillProfile, depth: int, above: int, options: RunOptions) -> float:
    total = 0.0
    for d in probe_depths(depth, options.probes, above):
        token_s = profile.decode_seconds(d, 1)
        total += window_length(options.probe_tokens, token_s, options) * token_s
    return total


def _point_overhead(profile: PrefillProfile, depth: int, n_gen: int, options: RunOptions) -> float:
    """Load, baseline and the decode at depth: what every point costs however it reaches depth."""
    return (
        profile.load_s
        + profile.decode_seconds(0, options.baseline_tokens)
        + profile.decode_seconds(depth, decode_tokens(n_gen, options, profile.decode_seconds(depth, 1)))
    )


def fit_depths(
    profile: PrefillProfile, budget_s: float, n_gen: int, shape: Sequence[int] = DEFAULT_DEPTHS
) -> list[int]:
    """The default depths scaled down (same ratios) until the chained triangulation fits the budget."""
    ratios = [d / max(shape) for d in shape]
    lo, hi = MIN_DEEPEST, max(shape)
    while hi - lo > DEPTH_STEP:
        mid = (lo + hi) // 2
        if estimate_seconds(profile, _scaled(ratios, mid), n_gen, chain=True) <= budget_s:
            lo = mid
        else:
            hi = mid
    return _scaled(ratios, lo)


def _scaled(ratios: Sequence[float], deepest: int) -> list[int]:
    """The shape at ``deepest``, on a grid of DEPTH_STEP, every depth distinct (three points, so the
    third can check the line through the other two)."""
    deepest = max(MIN_DEEPEST, deepest // 1024 * 1024)
    out: list[int] = []
    for r in sorted(ratios):
        depth = max(DEPTH_STEP, int(deepest * r) // DEPTH_STEP * DEPTH_STEP)
        out.append(max(depth, out[-1] + DEPTH_STEP) if out else depth)
    return out


def plan_depths(profile: PrefillProfile, budget_s: float, n_gen: int) -> tuple[list[int], str, bool]:
    """16k/32k/65k if they fit the budget on this machine, else the same shape scaled
    down; the note says which, with the estimates. Returns (depths, note, reduced)."""
    default_time = estimate_seconds(profile, DEFAULT_DEPTHS, n_gen, chain=True)
    if default_time <= budget_s:
        return list(DEFAULT_DEPTHS), f"16k/32k/65k fit: about {fmt_duration(default_time)}", False
    depths = fit_depths(profile, budget_s, n_gen)
    chosen_time = estimate_seconds(profile, depths, n_gen, chain=True)
    note = (
        f"16k/32k/65k would take about {fmt_duration(default_time)} here (prefill "
        f"{profile.prefill_tok_s(0):.0f} tok/s at depth 0, {profile.prefill_tok_s(65_000):.0f} at 65k); "
        f"using {', '.join(f'{d:,}' for d in depths)} (about {fmt_duration(chosen_time)}) — "
        "--depths always wins"
    )
    return depths, note, True


def synthetic_note(profile: PrefillProfile, n_gen: int, filled_s: float) -> str:
    real = estimate_seconds(profile, DEFAULT_DEPTHS, n_gen, chain=True)
    return (
        f"16k/32k/65k would take about {fmt_duration(real)} to prefill here; the KV cache is filled "
        f"synthetically to each depth instead and only its last ubatch prefilled: about {fmt_duration(filled_s)} "
        "(--fill real to prefill and reduce the depths to the budget)"
    )
