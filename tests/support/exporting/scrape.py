"""Reading an exporter's answer back: through prometheus_client's own parser, as Prometheus would."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, frozenset], float]


def parse(text: str) -> tuple[set[str], Series]:
    """The family names served (with or without samples) and every sample by (name, labels)."""
    names, series = set(), {}
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        for s in family.samples:
            names.add(s.name)
            series[(s.name, frozenset(s.labels.items()))] = s.value
    return names, series


def scrape_registry(registry) -> tuple[set[str], Series]:
    return parse(generate_latest(registry).decode())


def scrape_url(url: str, timeout: float = 10) -> tuple[set[str], Series]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as reply:
        return parse(reply.read().decode())


def value(series: Series, metric: str, /, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels`` (None if there is none)."""
    found = [v for (n, ls), v in series.items() if n == metric and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{metric}{labels} matches {len(found)} samples"
    return found[0] if found else None


def labelsets(series: Series, metric: str) -> list[dict[str, str]]:
    return [dict(ls) for (n, ls), _ in series.items() if n == metric]
