"""``cliff-tui fit``: what fits on this machine's cliff tier, from the GGUF header alone or with
what a triangulation measured (its JSON output or its recording).

No model is loaded: the header, one sample of the tiers, and the theory of llama.cpp's allocation
(:mod:`cliff_tui.analysis.theory`) scaled or replaced by measured lines where they exist.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cliff_tui.analysis import thresholds as th
from cliff_tui.analysis.fit import (
    FitTable,
    MeasuredLine,
    fit_table,
    flash_attn_in_effect,
    measured_lines,
)
from cliff_tui.errors import BadInput, read_text
from cliff_tui.events import Sample
from cliff_tui.records import CGROUP_TIER, ModelInfo
from cliff_tui.units import fmt_bytes, is_number


@dataclass(frozen=True)
class Tier:
    name: str
    capacity_bytes: int
    gpu: bool


def cliff_tier(sample: Sample) -> Tier:
    """GPU0's dedicated VRAM where there is a GPU, else the RAM that is available."""
    for g in sample.gpus:
        if g.vram_total_bytes:
            return Tier(f"GPU{g.index} dedicated VRAM", g.vram_total_bytes, True)
    if sample.cgroup is not None:
        return Tier(sample.cgroup.tier, sample.ram_room_bytes, False)
    return Tier("RAM available", sample.ram.available_bytes, False)


def measured_from_file(path: str) -> list[MeasuredLine]:
    """The lines a triangulation measured: from its recording, or from its ``-o json`` output."""
    text = read_text(path, "triangulation file")
    if text.lstrip().startswith('{"type":"header"') or text.lstrip().startswith('{"type": "header"'):
        from cliff_tui.recording.export import replay_all
        from cliff_tui.recording.reader import open_recording

        store = replay_all(open_recording(path))
        return measured_lines(store.runs.triangulations(), store.runs.results)
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        raise BadInput(
            f"{path} is neither a cliff-tui recording nor a triangulation's JSON output "
            "(cliff-tui triangulate --headless -o json)"
        ) from None
    return _lines_from_record(record, path)


def _lines_from_record(record: Any, path: str) -> list[MeasuredLine]:
    not_ours = (
        f"{path} is not a triangulation's JSON output (no slopes and runs in it): "
        "pass what `cliff-tui triangulate --headless -o json` printed"
    )
    records = record.get("kv_compare") or [record] if isinstance(record, dict) else []
    if not isinstance(records, list):
        raise BadInput(not_ours)
    lines = []
    for rec in records:
        try:
            slope, intercept = rec["slope_bytes_per_token"], rec["intercept_bytes"]
            run = rec["runs"][0]
            per_token = slope["touched"] if slope["touched"] is not None else slope["allocated"]
            base = intercept["touched"] if slope["touched"] is not None else intercept["allocated"]
            if not (is_number(per_token) and is_number(base)):
                raise BadInput(
                    f"{path}: a slope or an intercept is not a finite number: {per_token!r:.40}, {base!r:.40}"
                )
            lines.append(
                MeasuredLine(
                    float(per_token),
                    float(base),
                    run["cache_type_k"],
                    run["cache_type_v"],
                    flash_attn_in_effect(run["flash_attn"]),
                    bool(run.get("swa_full", False)),
                    f"{Path(path).name}",
                )
            )
        except (KeyError, IndexError, TypeError, ValueError):
            raise BadInput(not_ours) from None
    if not lines:
        raise BadInput(f"{path} holds no triangulated line: run `cliff-tui triangulate` first")
    return lines


def advise(
    model: ModelInfo,
    tier: Tier,
    *,
    target: int | None,
    reserve: int | None,
    n_seq: int | None,
    measured: list[MeasuredLine] | None = None,
    model_args: Sequence[str] = (),
    flash_attn: Sequence[bool] = (True, False),
) -> FitTable:
    given = reserve is not None
    if reserve is None:
        reserve = th.default_reserve(tier.capacity_bytes, tier.name.startswith(CGROUP_TIER))
    if reserve >= tier.capacity_bytes:
        fix = "pass a smaller --reserve" if given else "pass --reserve with less (0 keeps nothing free)"
        raise BadInput(
            f"the {'' if given else 'default '}reserve ({fmt_bytes(reserve)}) leaves nothing of the "
            f"{fmt_bytes(tier.capacity_bytes)} of {tier.name}: {fix}"
        )
    try:
        return fit_table(
            model,
            tier.capacity_bytes,
            tier=tier.name,
            gpu=tier.gpu,
            reserve_bytes=reserve,
            target_ctx=target,
            n_seq=n_seq,
            measured=measured or [],
            model_args=model_args,
            flash_attn=flash_attn,
        )
    except ValueError as exc:
        raise BadInput(f"{model.path}: {exc}") from None
