"""An attached vLLM through the exporter: its paged KV cache, its preemptions and its queue, read by
the real vLLM reader from the replies a real vLLM gave (tests/data/endpoints/vllm), then scraped
through prometheus_client's parser, by a real Prometheus, and from a real exporter process."""

from __future__ import annotations

import dataclasses
import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cliff_tui.events import ServerReading, ServersFound
from cliff_tui.exporter.collector import GAUGE_LEVELS
from cliff_tui.exporter.server import Exporter
from cliff_tui.listen import Bind
from cliff_tui.probes.endpoints.http import Reply
from cliff_tui.probes.endpoints.vllm import read_vllm
from cliff_tui.records import FoundServer, SlotReading
from cliff_tui.session import Session
from exporting.prometheus import binary, scraping
from exporting.running import exporter
from exporting.scrape import labelsets, scrape_registry, scrape_url, value
from fakes.http_server import FakeHttpServer, Route
from paths import DATA

VLLM_DATA = DATA / "endpoints" / "vllm"
URL = "http://127.0.0.1:8000"
FOUND = FoundServer("vllm", URL, "named by URL; process 4242 listens on port 8000 (vllm serve smollm2)", 4242)
KV_FAMILIES = (
    "cliff_server_kv_cache_usage_ratio",
    "cliff_server_kv_cache_tokens",
    "cliff_server_preemptions_total",
    "cliff_server_preemptions_last_minute",
    "cliff_server_requests_waiting",
    "cliff_server_kv_cache_max_concurrency",
)


def replaying(metrics: str, url: str = URL):
    """A getter answering as the recorded vLLM did: ``metrics`` on /metrics, models.json on /v1/models."""
    body = (VLLM_DATA / metrics).read_text()

    def get(asked: str, timeout: float) -> Reply:
        if asked.endswith("/metrics"):
            return Reply(asked, 200, body)
        if asked.endswith("/v1/models"):
            return Reply(asked, 200, (VLLM_DATA / "models.json").read_text())
        return Reply(asked, 404, "")

    return get


def recorded(metrics: str, t: float, url: str = URL) -> ServerReading:
    """The reading the attach job makes of that reply, stamped ``t``."""
    reading = read_vllm(url, get=replaying(metrics, url))
    assert reading.status == "ok" and reading.kv_blocks is not None, reading
    return dataclasses.replace(reading, t=t)


def under_load(start: float = 1000.0) -> list:
    """Attached to the recorded vLLM: idle, 30 s into the load (2 preempted), after it (17 in all)."""
    return [
        ServersFound(start, (FOUND,), URL),
        recorded("metrics_idle.txt", start + 1),
        recorded("metrics_pressure.txt", start + 31),
        recorded("metrics_done.txt", start + 50),
    ]


def exporter_for(events) -> Exporter:
    session = Session(queued=False)
    session.feed_all(events)
    return Exporter(session)


def scraped(events):
    exporter = exporter_for(events)
    return exporter.session.store, *scrape_registry(exporter.registry)


def test_a_full_kv_cache_with_requests_waiting_for_blocks():
    store, _, series = scraped(under_load()[:3])
    assert value(series, "cliff_up", server=URL, kind="vllm") == 1
    assert value(series, "cliff_server_kv_cache_usage_ratio", server=URL) == 1.0
    assert value(series, "cliff_server_kv_cache_tokens", server=URL, state="used") == 1280
    assert value(series, "cliff_server_kv_cache_tokens", server=URL, state="capacity") == 1280
    assert value(series, "cliff_server_preemptions_total", server=URL) == 2
    assert value(series, "cliff_server_preemptions_last_minute", server=URL) == 2
    assert value(series, "cliff_server_requests_waiting", server=URL, reason="capacity") == 5
    assert value(series, "cliff_server_requests_waiting", server=URL, reason="any") == 5
    assert value(series, "cliff_server_requests_processing", server=URL) == 2
    # vLLM's log: "Maximum concurrency for 1,024 tokens per request: 1.25x"
    assert value(series, "cliff_server_kv_cache_max_concurrency", server=URL) == 1.25
    # the cliff gauge is the KV blocks': full, and red while vLLM preempts
    gauge = store.gauge()
    assert gauge is not None and gauge.source == "kv blocks" and gauge.level == "red"
    assert value(series, "cliff_context_cells", state="used") == 1280 == gauge.tokens
    assert value(series, "cliff_context_cells", state="max") == 1280 == gauge.max_context
    assert value(series, "cliff_gauge_level", source="kv blocks") == GAUGE_LEVELS["red"] == 2
    assert labelsets(series, "cliff_gauge_level") == [{"source": "kv blocks"}]


def test_after_the_load_the_counter_keeps_its_total_and_the_last_minute_counts_the_rise():
    store, _, series = scraped(under_load())
    assert value(series, "cliff_server_kv_cache_usage_ratio", server=URL) == 0
    assert value(series, "cliff_server_kv_cache_tokens", server=URL, state="used") == 0
    assert value(series, "cliff_server_preemptions_total", server=URL) == 17
    assert value(series, "cliff_server_preemptions_last_minute", server=URL) == 17 == store.gauge().preempted
    assert value(series, "cliff_server_requests_waiting", server=URL, reason="capacity") == 0
    assert value(series, "cliff_gauge_level", source="kv blocks") == 2  # empty now, but preempted within the minute


def test_a_minute_later_the_preemptions_are_behind_it_and_the_gauge_is_ok():
    events = under_load()
    quiet = recorded("metrics_done.txt", events[-1].t + 90)
    store, _, series = scraped([*events, quiet])
    assert value(series, "cliff_server_preemptions_total", server=URL) == 17
    assert value(series, "cliff_server_preemptions_last_minute", server=URL) == 0
    assert value(series, "cliff_gauge_level", source="kv blocks") == 0 and store.gauge().level == "ok"


def test_an_idle_vllm_exports_zeros_not_absences():
    _, _, series = scraped(under_load()[:2])
    assert value(series, "cliff_server_kv_cache_usage_ratio", server=URL) == 0
    assert value(series, "cliff_server_kv_cache_tokens", server=URL, state="capacity") == 1280
    assert value(series, "cliff_server_preemptions_total", server=URL) == 0
    assert value(series, "cliff_server_preemptions_last_minute", server=URL) == 0  # one reading: no rise seen
    assert value(series, "cliff_server_requests_waiting", server=URL, reason="any") == 0
    assert value(series, "cliff_gauge_level", source="kv blocks") == 0


def test_what_the_server_does_not_say_is_no_sample():
    lines = (VLLM_DATA / "metrics_pressure.txt").read_text().splitlines()
    kept = "\n".join(
        line
        for line in lines
        if not any(n in line for n in ("cache_config_info", "num_preemptions", "waiting_by_reason"))
    )

    def get(asked: str, timeout: float) -> Reply:
        return Reply(asked, 200, kept) if asked.endswith("/metrics") else Reply(asked, 404, "")

    reading = read_vllm(URL, get=get)
    assert reading.kv_blocks is not None and reading.kv_blocks.capacity_tokens is None
    names, series = scrape_registry(exporter_for([ServersFound(1.0, (FOUND,), URL), reading]).registry)
    assert value(series, "cliff_server_kv_cache_usage_ratio", server=URL) == 1.0
    assert labelsets(series, "cliff_server_kv_cache_tokens") == []
    assert value(series, "cliff_server_preemptions_total") is None
    assert value(series, "cliff_server_preemptions_last_minute") is None
    assert labelsets(series, "cliff_server_requests_waiting") == [{"server": URL, "reason": "any"}]
    # no size in tokens: no gauge of blocks (a share alone is no context count)
    assert labelsets(series, "cliff_context_cells") == [] and labelsets(series, "cliff_gauge_level") == []
    assert {"cliff_server_kv_cache_tokens", "cliff_server_preemptions", "cliff_server_requests_waiting"} <= names


def test_llama_servers_and_unreachable_vllms_have_no_kv_block_samples():
    events = [
        ServerReading(1.0, "llama-server", "http://127.0.0.1:8080", "ok", slots=(SlotReading(0, 4096, 100, True),)),
        ServerReading(2.0, "vllm", "http://127.0.0.1:8001", "unreachable", "connection refused"),
    ]
    names, series = scrape_registry(exporter_for(events).registry)
    assert value(series, "cliff_up", server="http://127.0.0.1:8001", kind="vllm") == 0
    for family in KV_FAMILIES:
        assert labelsets(series, family) == [], family
    # every family is served on every scrape, samples or not
    assert {"cliff_server_kv_cache_usage_ratio", "cliff_server_preemptions_last_minute"} <= names


def test_each_vllm_has_its_own_series():
    other = "http://127.0.0.1:8001"
    events = [recorded("metrics_pressure.txt", 10.0), recorded("metrics_idle.txt", 11.0, other)]
    _, series = scrape_registry(exporter_for(events).registry)
    assert value(series, "cliff_server_kv_cache_usage_ratio", server=URL) == 1.0
    assert value(series, "cliff_server_kv_cache_usage_ratio", server=other) == 0.0
    assert value(series, "cliff_server_preemptions_total", server=URL) == 2
    assert value(series, "cliff_server_preemptions_total", server=other) == 0
    assert value(series, "cliff_server_requests_waiting", server=other, reason="capacity") == 0


# --- a real Prometheus ---------------------------------------------------------------------------


def number(result: list) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def test_a_real_prometheus_scrapes_the_vllm_series(tmp_path):
    binary()
    served = exporter_for(under_load(time.time() - 60))
    bound = served.listen(Bind("127.0.0.1", 0))
    try:
        with scraping(str(bound), tmp_path) as prom:
            usage = prom.wait_for(f'cliff_server_kv_cache_usage_ratio{{server="{URL}"}}')
            assert number(usage) == 0 and usage[0]["metric"]["job"] == "cliff-tui"
            assert number(prom.wait_for(f'cliff_server_kv_cache_tokens{{server="{URL}",state="capacity"}}')) == 1280
            assert number(prom.wait_for(f'cliff_server_preemptions_total{{server="{URL}"}}')) == 17
            assert number(prom.wait_for(f'cliff_server_preemptions_last_minute{{server="{URL}"}}')) == 17
            waiting = prom.wait_for(f'cliff_server_requests_waiting{{server="{URL}"}}')
            assert {w["metric"]["reason"]: float(w["value"][1]) for w in waiting} == {"capacity": 0, "any": 0}
            assert number(prom.wait_for('cliff_gauge_level{source="kv blocks"}')) == 2
            assert number(prom.wait_for('cliff_context_cells{state="max"}')) == 1280
            # the rules' own expressions evaluate on what was scraped
            for expr in ("increase(cliff_server_preemptions_total[2m])", "cliff_server_kv_cache_usage_ratio >= 0.9"):
                status, body = prom.query(expr)
                assert status == 200 and body["status"] == "success", (expr, body)
            metadata = prom.get("/api/v1/metadata")[1]["data"]
            types = {
                m["type"]
                for name in ("cliff_server_preemptions", "cliff_server_preemptions_total")
                for m in metadata.get(name, ())
            }
            assert types == {"counter"}, {k: v for k, v in metadata.items() if "preemptions" in k}
    finally:
        served.close()


# --- a real exporter process attached to a server answering as the recorded vLLM -----------------


def test_the_exporter_process_attached_with_vllm_exports_its_kv_cache():
    routes = {
        "/metrics": [Route.file(f"vllm/{name}") for name in ("metrics_idle.txt", "metrics_pressure.txt")],
        "/v1/models": Route.file("vllm/models.json"),
    }
    with FakeHttpServer(routes) as vllm:
        args = ("--bind", "127.0.0.1:0", "-i", "0.25", "--vllm", vllm.url, "--timeout", "2")
        with exporter(*args) as (url, _, _):
            deadline = time.monotonic() + 30
            while True:
                _, series = scrape_url(url + "/metrics")
                total = value(series, "cliff_server_preemptions_total", server=vllm.url)
                if total == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
    assert value(series, "cliff_up", server=vllm.url, kind="vllm") == 1
    assert total == 2
    assert value(series, "cliff_server_kv_cache_usage_ratio", server=vllm.url) == 1.0
    assert value(series, "cliff_server_kv_cache_tokens", server=vllm.url, state="used") == 1280
    assert value(series, "cliff_server_requests_waiting", server=vllm.url, reason="capacity") == 5
    assert value(series, "cliff_server_preemptions_last_minute", server=vllm.url) == 2
    assert value(series, "cliff_gauge_level", source="kv blocks") == 2


@pytest.mark.parametrize("family", KV_FAMILIES)
def test_each_family_says_what_it_measures(family):
    text = generate_latest(exporter_for(under_load()).registry).decode()
    found = {f.name: f for f in text_string_to_metric_families(text)}
    name = family.removesuffix("_total")
    assert name in found and found[name].documentation
    assert found[name].type == ("counter" if family.endswith("_total") else "gauge")
