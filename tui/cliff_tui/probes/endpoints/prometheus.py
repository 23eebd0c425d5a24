"""Prometheus text exposition, read as llama-server's ``/metrics`` serves it, through
``prometheus_client``'s parser.

Two behaviours of that parser shape this reader:

- it renames the samples of a family typed ``counter`` to OpenMetrics' ``_total`` form
  (llama-server's ``# TYPE llamacpp:n_tokens_max counter`` sample ``llamacpp:n_tokens_max`` comes
  back as ``llamacpp:n_tokens_max_total``). Callers look samples up by the name the server wrote,
  so comment lines (``# TYPE``, ``# HELP``) are left out before parsing: every sample is then
  untyped and keeps its name. Names with colons (``llamacpp:…``, recording-rule style) parse as
  they are;
- it raises ``ValueError`` at the first line it cannot read and stops there. A probe must never
  raise, and one bad line must not hide the good ones: on a failure the text is read again a line
  at a time and the unreadable lines are skipped.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families


def parse_prometheus(text: str) -> dict[str, float]:
    """Samples by name; a labelled one keeps its labels in the key (``m{position="0"}``)."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    try:
        return _values("\n".join(lines) + "\n")
    except Exception:
        values: dict[str, float] = {}
        for line in lines:
            try:
                values.update(_values(line + "\n"))
            except Exception:
                continue
        return values


def _values(text: str) -> dict[str, float]:
    """NaN and ±Inf are left out: every sample read here is a count, a total or a gauge."""
    return {
        _key(s.name, s.labels): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if math.isfinite(s.value)
    }


def _key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def info_labels(text: str, name: str) -> dict[str, str] | None:
    """The labels of an info-style sample (a constant 1 whose labels carry the values, as vLLM's
    ``vllm:cache_config_info``), or None where the text has none readable."""
    lines = [line for line in text.splitlines() if line.startswith(name + "{")]
    for line in lines:
        try:
            for family in text_string_to_metric_families(line + "\n"):
                for s in family.samples:
                    return dict(s.labels)
        except Exception:
            continue
    return None
