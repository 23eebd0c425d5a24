"""The Grafana dashboard's queries, and the series names they select."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "cliff-tui.json"
GRAFANA_VARIABLES = {"$instance": ".+", "$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NAME = re.compile(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "Inf",
    "NaN",
    "atan2",
}
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.*?)\s*(?:,\s*[a-zA-Z_]\w*\s*)?\)\s*$")


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for item in items:
        yield item
        yield from panels(item.get("panels", []))


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' targets and the query variables (label_values(X, label) → X)."""
    out = [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets", []) if t.get("expr")]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = _LABEL_VALUES.match(query)
        out.append(match.group(1) if match else query)
    return out


def series_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, label matchers, ranges and the
    label lists of by/without/on/ignoring/group_* left out)."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("{}", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub("", text)
    return {name for name in _NAME.findall(text) if name not in _KEYWORDS}


def substituted(expr: str) -> str:
    """The expression as Grafana sends it, with this test's values for its variables."""
    for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(variable, value)
    return expr
