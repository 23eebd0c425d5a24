"""A triangulation: its record (slopes, checks, projection), its markdown, the KV types side by
side, and what fits after it, in every headless format."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cliff_tui.analysis.buffers import gpu_index_of
from cliff_tui.analysis.fit import FitTable, fit_table, measured_lines
from cliff_tui.analysis.ggml_types import CACHE_TYPE_BYTES
from cliff_tui.analysis.theory import expected_ratio, known_differences, textbook_bytes_per_token
from cliff_tui.analysis.triangulation import PointCheck, Slope, Triangulation
from cliff_tui.events import RunFailed
from cliff_tui.records import ModelInfo, RunResult
from cliff_tui.report.fit import fit_record, format_fit_markdown
from cliff_tui.report.runs import RUN_COLUMNS, cliff_record, failure_record, run_record, run_rows, worst_cliff
from cliff_tui.report.tables import dumps, markdown_table
from cliff_tui.store import Store
from cliff_tui.text import inert
from cliff_tui.units import KiB, fmt_bytes


def triangulation_record(
    tri: Triangulation, results: Sequence[RunResult], failures: Sequence[RunFailed], model: ModelInfo | None = None
) -> dict[str, Any]:
    p = tri.projection
    flash_on = _flash_on(results)
    return {
        "cache_types": tri.cache_types,
        "runs": [run_record(r) for r in results],
        "failures": [failure_record(f) for f in failures],
        "slope_bytes_per_token": {"allocated": tri.allocated.bytes_per_token, "touched": tri.touched.bytes_per_token},
        "slope_kib_per_token": {"allocated": tri.allocated.kib_per_token, "touched": tri.touched.kib_per_token},
        "slope_mib_per_1k_tokens": {
            "allocated": tri.allocated.mib_per_1k_tokens,
            "touched": tri.touched.mib_per_1k_tokens,
        },
        "allocated_per_device_bytes_per_token": tri.allocated_per_device,
        "intercept_bytes": {"allocated": tri.allocated.intercept_bytes, "touched": tri.touched.intercept_bytes},
        "theory_bytes_per_token": tri.theory_bytes_per_token,
        "textbook_bytes_per_token": _textbook(model, results),
        "theory_notes": known_differences(model, flash_on, bool(results and results[0].settings.swa_full))
        if model
        else [],
        "checks": [check_record(c) for c in (*tri.checks, *tri.allocated_checks)],
        "cliff": cliff_record(worst_cliff(results)),
        "verdict": tri.verdict,
        "wall_near": tri.wall_near,
        "does_not_fit_at": tri.does_not_fit_at,
        "projection": {
            "tier": p.tier,
            "target": p.target,
            "projected_bytes": p.projected_bytes,
            "capacity_bytes": p.capacity_bytes,
            "reserve_bytes": p.reserve_bytes,
            "fits": p.fits,
            "max_context": p.max_context,
            "limited_by": p.limited_by,
            "formula": p.formula,
        },
    }


def _textbook(model: ModelInfo | None, results: Sequence[RunResult]) -> float | None:
    """2 × layers × KV heads × head size × bytes: beside the theory, never instead of it."""
    if model is None or not results:
        return None
    s = results[0].settings
    if s.cache_type_k not in CACHE_TYPE_BYTES or s.cache_type_v not in CACHE_TYPE_BYTES:
        return None  # a recording from elsewhere, with a type this version does not know
    return textbook_bytes_per_token(model, s.cache_type_k, s.cache_type_v)


def check_record(c: PointCheck) -> dict[str, Any]:
    return {
        "figure": c.figure,
        "n_ctx": c.n_ctx,
        "predicted_bytes": c.predicted_bytes,
        "actual_bytes": c.actual_bytes,
        "miss_bytes": c.miss_bytes,
        "tolerance_bytes": c.tolerance_bytes,
        "error_pct": c.error_pct,
        "direction": "below" if c.miss_bytes < 0 else "above",
        "on_line": c.on_line,
        "beyond_tier": c.beyond_tier or None,
        "beyond_bytes": c.beyond_bytes,
        "wall": c.wall,
    }


def _flash_on(results: Sequence[RunResult]) -> bool | None:
    if not results:
        return None
    fa = results[0].settings.flash_attn
    return {"on": True, "off": False}.get(fa)


def kv_ratios(tris: dict[str, Triangulation]) -> list[dict[str, Any]]:
    """Each cache type's touched slope against the first type's, beside the textbook ratio."""
    items = list(tris.items())
    if len(items) < 2:
        return []
    ref_key, ref = items[0]
    out = []
    for key, tri in items[1:]:
        measured = None
        if ref.touched.bytes_per_token and tri.touched.bytes_per_token is not None:
            measured = tri.touched.bytes_per_token / ref.touched.bytes_per_token
        allocated = None
        if ref.allocated.bytes_per_token and tri.allocated.bytes_per_token is not None:
            allocated = tri.allocated.bytes_per_token / ref.allocated.bytes_per_token
        tk, _, tv = key.partition("/")
        rk, _, rv = ref_key.partition("/")
        out.append(
            {
                "types": f"{key} vs {ref_key}",
                "measured_touched": measured,
                "measured_allocated": allocated,
                "expected": expected_ratio(tk, tv or tk, rk, rv or rk),
            }
        )
    return out


def triangulation_markdown(
    tris: dict[str, Triangulation], results: Sequence[RunResult], failures: Sequence[RunFailed]
) -> str:
    lines = [markdown_table(run_rows(results), RUN_COLUMNS), ""]
    cliff = worst_cliff(results)
    if cliff is not None:
        lines += [f"**cliff: {cliff.level}** — {cliff.text}", ""]
    for f in failures:
        lines.append(f"- n_ctx {f.n_ctx or '?'}: {f.kind.replace('_', ' ')} — {inert(f.message)}")
    for key, tri in tris.items():
        lines += [f"**{key}** — {tri.verdict}", ""]
        lines.append(f"- slope touched: {fmt_slope(tri.touched)}; allocated: {fmt_slope(tri.allocated)}")
        if tri.theory_bytes_per_token:
            lines.append(f"- KV theory (as llama.cpp allocates it): {tri.theory_bytes_per_token / KiB:.2f} KiB/token")
        p = tri.projection
        lines.append(f"- projection at {p.target:,} tokens: {p.formula}")
        fits = {True: "fits", False: "does NOT fit", None: "capacity unknown"}[p.fits]
        lines.append(f"- {p.tier}: {fmt_bytes(p.capacity_bytes)} − reserve {fmt_bytes(p.reserve_bytes)} → {fits}")
        lines.append(
            f"- largest context before the cliff: "
            f"{'–' if p.max_context is None else f'{p.max_context:,}'} tokens — {p.limited_by}"
        )
        if p.trained_note:
            lines.append(f"- {p.trained_note}")
        lines.append("")
    for ratio in kv_ratios(tris):
        measured = ratio["measured_touched"]
        lines.append(
            f"- {ratio['types']}: measured {measured:.2f}"
            if measured is not None
            else f"- {ratio['types']}: measured –"
        )
        lines[-1] += f", expected {ratio['expected']:.2f}"
    return "\n".join(lines).rstrip()


def fmt_slope(slope: Slope, short: bool = False) -> str:
    """``22.50 KiB/token (22.0 MiB per 1k tokens)``; ``short``: ``22.5 KiB/tok (22.0 MiB/1k)``."""
    if slope.bytes_per_token is None:
        return "–"
    if short:
        return f"{slope.kib_per_token:.1f} KiB/tok ({slope.mib_per_1k_tokens:.1f} MiB/1k)"
    return f"{slope.kib_per_token:.2f} KiB/token ({slope.mib_per_1k_tokens:.1f} MiB per 1k tokens)"


def triangulation_output(store: Store, fmt: str) -> str:
    """A triangulation's runs, slopes and projection in a headless format."""
    tris = store.runs.triangulations()
    results, failures = store.runs.results, store.runs.failures
    table = fit_after(store)
    if fmt == "md":
        plan = store.runs.plan
        head = f"depths: {', '.join(f'{d:,}' for d in plan.depths)}\n\n" if plan else ""
        tail = "\n\n" + format_fit_markdown(table) if table is not None else ""
        return head + triangulation_markdown(tris, results, failures) + tail
    if fmt == "csv":
        return dumps([run_record(r) for r in results], "csv")
    groups = store.runs.groups()
    records = [
        triangulation_record(tri, groups[key].results, groups[key].failures, groups[key].model)
        for key, tri in tris.items()
    ]
    if fmt == "jsonl":
        lines = [dumps([run_record(r)], "jsonl") for r in results]
        lines += [dumps([{"type": "triangulation", **rec}], "jsonl") for rec in records]
        return "\n".join(lines)
    top: dict[str, Any] = (
        dict(records[0]) if records else {"runs": [], "failures": [failure_record(f) for f in failures]}
    )
    top["cliff"] = cliff_record(worst_cliff(results))
    if store.runs.plan is not None:
        top["plan"] = {"depths": list(store.runs.plan.depths), "note": store.runs.plan.note}
    if len(records) > 1:
        top["kv_compare"] = records
        top["kv_ratios"] = kv_ratios(tris)
    top["fit"] = fit_record(table) if table is not None else None
    return dumps([top], "json")


def fit_after(store: Store) -> FitTable | None:
    """What fits, after a triangulation: its measured lines on the tier it projected to."""
    tris = store.runs.triangulations()
    groups = store.runs.groups()
    key = next(iter(tris), None)
    model = groups[key].model if key is not None else None
    if key is None or model is None or not store.runs.results:
        return None
    projection = tris[key].projection
    if projection.capacity_bytes is None:
        return None
    gpu = gpu_index_of(store.runs.results[0].kv_device) is not None
    lines = measured_lines(tris, store.runs.results)
    try:
        return fit_table(
            model,
            projection.capacity_bytes,
            tier=projection.tier,
            gpu=gpu,
            reserve_bytes=projection.reserve_bytes or 0,
            target_ctx=store.runs.target or None,
            n_seq=1,
            measured=lines,
        )
    except ValueError:
        return None
