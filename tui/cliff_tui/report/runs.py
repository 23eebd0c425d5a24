"""A run as a record (every field) and as a table row (units attached), and the worst cliff of several."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cliff_tui.analysis.triangulation import memory_point
from cliff_tui.codec import to_plain
from cliff_tui.events import RunFailed, RunStarted
from cliff_tui.records import CliffVerdict, RunResult
from cliff_tui.units import fmt_bytes, fmt_pct, fmt_tok_s


def run_record(r: RunResult) -> dict[str, Any]:
    s, v = r.settings, r.verdict
    point = memory_point(r)
    return {
        "run_id": r.run_id,
        "model": r.model_name,
        "model_path": s.model_path,
        "depth": r.depth,
        "n_gen": r.n_gen,
        "n_ctx": r.n_ctx,
        "n_gpu_layers": s.n_gpu_layers,
        "cache_type_k": s.cache_type_k,
        "cache_type_v": s.cache_type_v,
        "flash_attn": s.flash_attn,
        "swa_full": s.swa_full,
        "threads": s.threads,
        "batch_size": s.batch_size,
        "ubatch_size": s.ubatch_size,
        "baseline_tok_s": r.baseline_tok_s,
        "depth_tok_s": r.depth_tok_s,
        "drop_pct": r.drop_pct,
        "expected_tok_s": v.expected_tok_s,
        "drop_vs_expected_pct": v.drop_vs_expected_pct,
        "cliff": cliff_record(r.cliff),
        "verdict": v.level,
        "verdict_text": v.text,
        "knee_depth": v.knee_depth,
        "cause": v.cause,
        "prefill_tok_s": r.prefill_tok_s,
        "prefilled_tokens": r.prefilled_tokens,
        "started_from_depth": r.started_from_depth,
        "fill": r.fill,
        "ram_baseline_bytes": r.ram_baseline_bytes,
        "ram_peak_bytes": r.ram_peak_bytes,
        "ram_delta_bytes": r.ram_delta_bytes,
        "model_ram_delta_bytes": model_ram_delta(r),
        "swap_delta_bytes": r.swap_delta_bytes,
        "rss_created_bytes": r.rss_created_bytes,
        "rss_baseline_bytes": r.rss_baseline_bytes,
        "rss_peak_bytes": r.rss_peak_bytes,
        "rss_noise_bytes": r.rss_noise_bytes,
        "kv_device": r.kv_device,
        "kv_buffers": r.kv_buffers,
        "model_buffers": r.model_buffers,
        "compute_buffers": r.compute_buffers,
        "allocated_bytes": point.allocated_bytes,
        "touched_bytes": point.touched_bytes,
        "gpus": [
            {**to_plain(g), "delta_bytes": g.delta_bytes, "shared_delta_bytes": g.shared_delta_bytes} for g in r.gpus
        ],
        **({"gpus_reason": r.gpus_reason} if not r.gpus else {}),
        "decode_points": to_plain(r.decode_points),
        "elapsed_s": r.elapsed_s,
    }


def cliff_record(cliff: CliffVerdict | None) -> dict[str, Any] | None:
    return None if cliff is None else to_plain(cliff)


def worst_cliff(results: Sequence[RunResult]) -> CliffVerdict | None:
    """The most severe verdict of several runs (the first of equals)."""
    verdicts = [r.cliff for r in results if r.cliff is not None]
    return max(verdicts, key=lambda c: CLIFF_RANK[c.level], default=None)


CLIFF_RANK = {"ok": 0, "info": 1, "amber": 2, "red": 3}


def model_ram_delta(r: RunResult) -> int | None:
    """The model's own RAM growth (its RSS peak − baseline): the system's moves with everything else."""
    if r.rss_peak_bytes is None or r.rss_baseline_bytes is None:
        return None
    return r.rss_peak_bytes - r.rss_baseline_bytes


def failure_record(f: RunFailed) -> dict[str, Any]:
    return {
        "run_id": f.run_id,
        "kind": f.kind,
        "message": f.message,
        "n_ctx": f.n_ctx,
        "depth": f.depth,
        "oom": to_plain(f.oom) if f.oom is not None else None,
    }


def killed_record(started: RunStarted, failed: RunFailed, cliff: CliffVerdict) -> dict[str, Any]:
    """A run whose process was killed before it finished: what it reached, and the verdict."""
    s = started.settings
    return {
        "run_id": started.run_id,
        "model": started.model.name,
        "model_path": s.model_path,
        "depth": failed.depth,
        "depth_target": s.depth,
        "n_gen": s.n_gen,
        "n_ctx": started.n_ctx,
        "cache_type_k": s.cache_type_k,
        "cache_type_v": s.cache_type_v,
        "cliff": cliff_record(cliff),
        "killed": failure_record(failed),
    }


def run_rows(results: Sequence[RunResult]) -> list[dict[str, str]]:
    """The run table as people read it (units attached); used by md output and the screens."""
    rows = []
    for r in results:
        point = memory_point(r)
        rows.append(
            {
                "model": r.model_name,
                "kv": r.settings.cache_label,
                "n_ctx": f"{r.n_ctx:,}",
                "depth": f"{r.depth:,}" + (" filled" if r.fill == "synthetic" else ""),
                "mem_base": fmt_bytes(
                    r.rss_baseline_bytes
                    if point.touched_bytes == r.rss_peak_bytes
                    else next((g.baseline_bytes for g in r.gpus), None)
                ),
                "mem_peak": fmt_bytes(point.touched_bytes),
                "shared": _shared(r),
                "ram_delta": fmt_bytes(model_ram_delta(r)),
                "tok_s": f"{fmt_tok_s(r.baseline_tok_s)}→{fmt_tok_s(r.depth_tok_s)}",
                "drop": fmt_pct(r.drop_pct),
                "vs_trend": fmt_pct(r.verdict.drop_vs_expected_pct),
                "verdict": r.cliff.level if r.cliff is not None else r.verdict.level,
            }
        )
    return rows


RUN_COLUMNS = [
    ("model", "model"),
    ("kv", "kv"),
    ("n_ctx", "n_ctx"),
    ("depth", "depth"),
    ("mem_base", "mem base"),
    ("mem_peak", "mem peak"),
    ("shared", "shared Δ"),
    ("ram_delta", "RSS Δ"),
    ("tok_s", "tok/s base→depth"),
    ("drop", "drop"),
    ("vs_trend", "vs trend"),
    ("verdict", "verdict"),
]


def _shared(r: RunResult) -> str:
    deltas = [g.shared_delta_bytes for g in r.gpus if g.shared_delta_bytes is not None]
    return fmt_bytes(max(deltas)) if deltas else "n/a"
