"""``--from FILE``: the measured capacity plan of a triangulation, for a fleet's dashboards.

FILE is what ``cliff-tui triangulate`` wrote: its JSON output (``-o json``, one record or several
with ``kv_compare``), its JSON lines (``-o jsonl``), or a recording of it (``--record``), which is
replayed through a store to the same records. Only numbers and two words leave the file: the
model's file name (never its directory) and the KV cache type.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cliff_tui.errors import BadInput, read_bytes
from cliff_tui.recording.reader import parse_recording
from cliff_tui.recording.schema import FORMAT
from cliff_tui.records import UNKNOWN_MODEL
from cliff_tui.report.triangulation import triangulation_record
from cliff_tui.store import Store
from cliff_tui.text import file_name
from cliff_tui.units import is_number

_GPU_TIER = re.compile(r"GPU(\d+)")


@dataclass(frozen=True)
class CapacityPlan:
    """One KV cache type's measurements and projection."""

    model: str  # the GGUF's file name
    kv_type: str  # "f16", "q8_0", "q8_0/f16"
    allocated_bytes_per_token: float | None
    touched_bytes_per_token: float | None
    theory_bytes_per_token: float | None
    tier: str  # "ram" | "vram"
    gpu: str  # the GPU's index on a VRAM tier, else ""
    target_tokens: int | None
    projected_bytes: float | None
    capacity_bytes: float | None
    reserve_bytes: float | None
    max_context_tokens: int | None
    fits: bool | None


def read_plans(path: str | Path) -> list[CapacityPlan]:
    """Every plan in FILE; :class:`BadInput` (one line) for a file that holds none."""
    p = Path(path)
    records = _records(read_bytes(p, "triangulation file"), p.name)
    if not records:
        raise BadInput(
            f"{p.name} holds no triangulation: run `cliff-tui triangulate --headless -o json` "
            "(or --record FILE) and pass what it wrote"
        )
    return [_plan(record, p.name) for record in records]


def _records(data: bytes, name: str) -> list[dict[str, Any]]:
    text = data.decode("utf-8", errors="replace")
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return list(whole["kv_compare"]) if isinstance(whole.get("kv_compare"), list) else [whole]
    if whole is not None:
        raise BadInput(f"{name} is JSON but not a triangulation's output (expected an object)")
    first = text.split("\n", 1)[0]
    if f'"{FORMAT}"' in first:
        return _from_recording(data, name)
    return _from_json_lines(text, name)


def _from_recording(data: bytes, name: str) -> list[dict[str, Any]]:
    recording = parse_recording(data, name)
    store = Store()
    for event in recording.events:
        store.feed(event, signs=False)
    groups = store.runs.groups()
    return [
        triangulation_record(tri, groups[key].results, groups[key].failures, groups[key].model)
        for key, tri in store.runs.triangulations().items()
        if groups[key].results
    ]


def _from_json_lines(text: str, name: str) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise BadInput(
                f"{name} line {number} is not JSON: not a triangulation's JSON, JSON lines or recording"
            ) from None
        if isinstance(record, dict) and record.get("type") == "triangulation":
            records.append(record)
    return records


def _plan(record: Any, name: str) -> CapacityPlan:
    if not isinstance(record, dict):
        raise BadInput(f"{name}: a triangulation record must be a JSON object")
    projection = _section(record, "projection", name)
    slopes = _section(record, "slope_bytes_per_token", name)
    tier_text = str(projection.get("tier") or "")
    gpu = _GPU_TIER.search(tier_text)
    return CapacityPlan(
        model=_model_file(record),
        kv_type=str(record.get("cache_types") or "?"),
        allocated_bytes_per_token=_number(slopes.get("allocated"), "slope_bytes_per_token.allocated", name),
        touched_bytes_per_token=_number(slopes.get("touched"), "slope_bytes_per_token.touched", name),
        theory_bytes_per_token=_number(record.get("theory_bytes_per_token"), "theory_bytes_per_token", name),
        tier="vram" if gpu else "ram",
        gpu=gpu.group(1) if gpu else "",
        target_tokens=_integer(projection.get("target"), "projection.target", name),
        projected_bytes=_number(projection.get("projected_bytes"), "projection.projected_bytes", name),
        capacity_bytes=_number(projection.get("capacity_bytes"), "projection.capacity_bytes", name),
        reserve_bytes=_number(projection.get("reserve_bytes"), "projection.reserve_bytes", name),
        max_context_tokens=_integer(projection.get("max_context"), "projection.max_context", name),
        fits=projection.get("fits") if isinstance(projection.get("fits"), bool) else None,
    )


def _section(record: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    value = record.get(key)
    if not isinstance(value, dict):
        raise BadInput(f"{name}: no {key!r} object: not a triangulation's output (cliff-tui triangulate -o json)")
    return value


def _model_file(record: dict[str, Any]) -> str:
    """The GGUF's file name from the first run; never the directory it lives in."""
    runs = record.get("runs")
    run = runs[0] if isinstance(runs, list) and runs and isinstance(runs[0], dict) else {}
    for key in ("model_path", "model"):
        value = run.get(key)
        if isinstance(value, str) and value.strip():
            return file_name(value)
    return UNKNOWN_MODEL


def _number(value: Any, field: str, name: str) -> float | None:
    if value is None:
        return None
    if not is_number(value):
        raise BadInput(f"{name}: {field} must be a finite number below 2^63, not {value!r:.40}")
    return float(value)


def _integer(value: Any, field: str, name: str) -> int | None:
    number = _number(value, field, name)
    return None if number is None else int(number)
