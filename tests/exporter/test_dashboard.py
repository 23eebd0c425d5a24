"""deploy/grafana/cliff-tui.json names only series the exporter serves (taken from a real scrape)."""

from __future__ import annotations

import pytest

from exporting.dashboard import load, panels, queries, series_names
from exporting.running import exporter
from exporting.scrape import scrape_url
from paths import DATA


@pytest.fixture(scope="module")
def served() -> set[str]:
    with exporter("--bind", "127.0.0.1:0", "--from", str(DATA / "smollm2_triangulation.jsonl")) as (url, _, _):
        names, _ = scrape_url(url + "/metrics")
    return names


@pytest.mark.parametrize(
    "expr, names",
    [
        ('max by (instance) (cliff_verdict_level{instance=~"$instance"})', {"cliff_verdict_level"}),
        ('a{tier="ram"} / on(instance, gpu) group_left(uuid) b_total', {"a", "b_total"}),
        ("sum by (reason) (rate(c[$__rate_interval])) > bool 0.5 offset 5m", {"c"}),
        ('histogram_quantile(0.99, sum by (le) (rate(d_bucket{x="sum(y)"}[5m]))) * 1e3', {"d_bucket"}),
    ],
)
def test_the_name_reader(expr, names):
    assert series_names(expr) == names


def test_the_dashboard_plots_what_it_promises():
    dashboard = load()
    kinds = {p["type"] for p in panels(dashboard["panels"])}
    assert {"timeseries", "gauge", "state-timeline", "row"} <= kinds
    everything = " ".join(queries(dashboard))
    for name in (
        "cliff_memory_used_bytes",
        "cliff_memory_capacity_bytes",
        "cliff_sign_level",
        "cliff_verdict_level",
        "cliff_decode_tokens_per_second",
    ):
        assert name in everything
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert "instance" in variables and any(p.get("repeat") == "instance" for p in dashboard["panels"])
    assert all('instance=~"$instance"' in q for q in queries(dashboard)[:-1])


def test_every_query_names_a_series_the_exporter_serves(served):
    checked = 0
    for expr in queries(load()):
        names = series_names(expr)
        assert names, f"no series in {expr!r}"
        assert names <= served, f"{expr!r} names {sorted(names - served)}, which the exporter does not serve"
        checked += 1
    assert checked >= 15


def test_the_check_would_catch_a_misnamed_series(served):
    assert not series_names('cliff_memory_use_bytes{tier="ram"}') <= served
