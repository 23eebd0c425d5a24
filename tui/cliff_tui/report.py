"""Headless output: samples, run records and triangulations as json, jsonl, csv or md
(llama-bench's formats). Plain data in, text out; the screens never come through here.

Every format is safe to print to a terminal: strings are inert (:mod:`cliff_tui.text`), JSON
escapes what is not ASCII, a markdown cell escapes ``|``, and a CSV or markdown cell that a
spreadsheet would run as a formula (a leading ``=`` ``+`` ``-`` ``@`` that is not a plain figure
such as ``-3%``) starts with ``'``: a pasted markdown table lands in spreadsheets too."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from cliff_tui.analysis.buffers import gpu_index_of
from cliff_tui.analysis.fit import FitTable, fit_record, fit_table, format_fit_markdown, measured_lines
from cliff_tui.analysis.ggml_types import CACHE_TYPE_BYTES
from cliff_tui.analysis.theory import expected_ratio, known_differences, textbook_bytes_per_token
from cliff_tui.analysis.triangulation import PointCheck, Slope, Triangulation, memory_point
from cliff_tui.codec import to_plain
from cliff_tui.events import NO_GPU, CliffVerdict, ModelInfo, RunFailed, RunResult, Sample
from cliff_tui.pipeline import Pipeline
from cliff_tui.text import inert, inert_tree
from cliff_tui.units import KiB, fmt_bytes, fmt_pct, fmt_tok_s

# --- records ----------------------------------------------------------------------------------


def sample_record(sample: Sample) -> dict[str, Any]:
    record = to_plain(sample)
    record.pop("gpus_reason", None)
    if not sample.gpus:
        record["gpus_reason"] = sample.gpus_reason or NO_GPU
    if sample.process is None:
        record.pop("process")
    return record


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
    return {"run_id": f.run_id, "kind": f.kind, "message": f.message, "n_ctx": f.n_ctx, "depth": f.depth}


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


# --- formats ----------------------------------------------------------------------------------


def dumps(records: Iterable[dict[str, Any]], fmt: str, columns: Sequence[tuple[str, str]] | None = None) -> str:
    records = list(records)
    if fmt in ("json", "jsonl"):
        records = inert_tree(records)
    if fmt == "json":
        return json.dumps(records[0] if len(records) == 1 else records, indent=2, default=str)
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, default=str) for r in records)
    if fmt == "csv":
        return _csv(records)
    if fmt == "md":
        return markdown_table(records, columns or [(k, k) for k in records[0]] if records else [])
    raise ValueError(f"unknown format {fmt!r}")


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list):
            if all(isinstance(v, dict) for v in value):
                for i, item in enumerate(value):
                    out.update(flatten(item, f"{name}.{i}."))
            else:
                out[name] = " ".join(str(v) for v in value)
        else:
            out[name] = value
    return out


def _csv(records: list[dict[str, Any]]) -> str:
    return csv_table(
        [flatten({k: v for k, v in r.items() if k not in ("decode_points", "runs", "checks")}) for r in records]
    )


def csv_table(rows: Sequence[dict[str, Any]], first: Sequence[str] = ()) -> str:
    """Rows as CSV; the columns are ``first``, then every other key in the order first seen (rows
    may differ). No rows and no ``first``: nothing, not a header of no columns."""
    columns: list[str] = list(first)
    for row in rows:
        columns.extend(c for c in row if c not in columns)
    if not columns:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[csv_cell(c) for c in columns], lineterminator="\n")
    writer.writeheader()
    writer.writerows({csv_cell(k): csv_cell(v) for k, v in row.items()} for row in rows)
    return buf.getvalue().rstrip("\n")


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# A figure with its unit ("-3%", "-5.00 MiB", "+12") is data to a spreadsheet, never a formula it runs.
_FIGURE = re.compile(r"[-+]?\d[\d,]*(\.\d+)?( ?(%|B|KiB|MiB|GiB))?")


def csv_cell(value: Any) -> Any:
    """A string inert, and quoted with ``'`` where a spreadsheet would run it as a formula; numbers as they are."""
    if not isinstance(value, str):
        return value
    return _not_a_formula(inert(value))


def _not_a_formula(text: str) -> str:
    return "'" + text if text.startswith(_FORMULA_STARTS) and not _FIGURE.fullmatch(text) else text


def markdown_table(records: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    rule = "| " + " | ".join("---:" if _numeric(records, key) else "---" for key, _ in columns) + " |"
    body = ["| " + " | ".join(_cell(r.get(key)) for key, _ in columns) + " |" for r in records]
    return "\n".join([head, rule, *body])


def _numeric(records: Sequence[dict[str, Any]], key: str) -> bool:
    return all(isinstance(r.get(key), (int, float)) or r.get(key) is None for r in records)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.2f}"
    return _not_a_formula(inert(str(value))).replace("|", "\\|")


# --- human tables -----------------------------------------------------------------------------


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


def triangulation_output(pipeline: Pipeline, fmt: str) -> str:
    """A triangulation's runs, slopes and projection in a headless format."""
    tris = pipeline.triangulations()
    results, failures = pipeline.results, pipeline.failures
    table = fit_after(pipeline)
    if fmt == "md":
        plan = pipeline.plan
        head = f"depths: {', '.join(f'{d:,}' for d in plan.depths)}\n\n" if plan else ""
        tail = "\n\n" + format_fit_markdown(table) if table is not None else ""
        return head + triangulation_markdown(tris, results, failures) + tail
    if fmt == "csv":
        return dumps([run_record(r) for r in results], "csv")
    groups = pipeline.run_groups()
    records = [
        triangulation_record(tri, groups[key].results, groups[key].failures, groups[key].model)
        for key, tri in tris.items()
    ]
    if fmt == "jsonl":
        lines = [dumps([run_record(r)], "jsonl") for r in results]
        lines += [dumps([{"type": "triangulation", **rec}], "jsonl") for rec in records]
        return "\n".join(lines)
    top = dict(records[0]) if records else {"runs": [], "failures": [failure_record(f) for f in failures]}
    top["cliff"] = cliff_record(worst_cliff(results))
    if pipeline.plan is not None:
        top["plan"] = {"depths": list(pipeline.plan.depths), "note": pipeline.plan.note}
    if len(records) > 1:
        top["kv_compare"] = records
        top["kv_ratios"] = kv_ratios(tris)
    top["fit"] = fit_record(table) if table is not None else None
    return dumps([top], "json")


def fit_after(pipeline: Pipeline) -> FitTable | None:
    """What fits, after a triangulation: its measured lines on the tier it projected to."""
    tris = pipeline.triangulations()
    groups = pipeline.run_groups()
    key = next(iter(tris), None)
    model = groups[key].model if key is not None else None
    if model is None or not pipeline.results:
        return None
    projection = tris[key].projection
    if projection.capacity_bytes is None:
        return None
    gpu = gpu_index_of(pipeline.results[0].kv_device) is not None
    lines = measured_lines(tris, pipeline.results)
    try:
        return fit_table(
            model,
            projection.capacity_bytes,
            tier=projection.tier,
            gpu=gpu,
            reserve_bytes=projection.reserve_bytes or 0,
            target_ctx=pipeline.target or None,
            n_seq=1,
            measured=lines,
        )
    except ValueError:
        return None
