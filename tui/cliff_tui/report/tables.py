"""Records as json, jsonl, csv or a markdown table, every cell inert."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from cliff_tui.text import inert, inert_tree


def dumps(records: Iterable[dict[str, Any]], fmt: str, columns: Sequence[tuple[str, str]] | None = None) -> str:
    rows = list(records)
    if fmt in ("json", "jsonl"):
        rows = inert_tree(rows)
    if fmt == "json":
        return json.dumps(rows[0] if len(rows) == 1 else rows, indent=2, default=str)
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, default=str) for r in rows)
    if fmt == "csv":
        return _csv(rows)
    if fmt == "md":
        return markdown_table(rows, columns or [(k, k) for k in rows[0]] if rows else [])
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
