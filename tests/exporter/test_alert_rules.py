"""The Prometheus alert rules in deploy/ hold up under ``promtool test rules`` (Debian's prometheus
package ships promtool), and every metric they name is one the exporter exports."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

from cliff_tui.events import ServerMemory, ServerReading, ServersFound
from cliff_tui.exporter.server import Exporter
from cliff_tui.probes.endpoints.http import Reply
from cliff_tui.probes.endpoints.vllm import read_vllm
from cliff_tui.records import FoundServer, ServerSetting, SlotReading
from cliff_tui.session import Session
from exporting.scrape import scrape_registry, value
from needs import unavailable
from paths import DATA, ROOT

DEPLOY = ROOT / "deploy"


def exporter_for(events) -> Exporter:
    session = Session(queued=False)
    session.feed_all(events)
    return Exporter(session)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        unavailable("no promtool: apt-get install prometheus")
    return found


def test_the_alert_rules_pass_their_unit_tests():
    tool = promtool()
    check = subprocess.run([tool, "check", "rules", "alerts.yml"], cwd=DEPLOY, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([tool, "test", "rules", "alerts_test.yml"], cwd=DEPLOY, capture_output=True, text=True)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


def test_prometheus_loads_the_rules_with_its_config():
    tool = promtool()
    check = subprocess.run([tool, "check", "config", "prometheus.yml"], cwd=DEPLOY, capture_output=True, text=True)
    assert check.returncode == 0 and "6 rules found" in check.stdout, check.stdout + check.stderr


URL = "http://127.0.0.1:9931"
FOUND = FoundServer(
    "llama-server",
    URL,
    "process 42 (llama-server -c 2048 -np 4 -kvu) listening on 127.0.0.1:9931",
    42,
    settings=(
        ServerSetting("kv_unified", "true", "command line (-kvu)"),
        ServerSetting("pool_ctx", "2048", "command line (-c)"),
        ServerSetting("slots", "4", "/props (total_slots)"),
    ),
)


def attached_events():
    slots = tuple(SlotReading(i, 2048, 480, True) for i in range(4))
    return [
        ServersFound(1.0, (FOUND,), URL),
        ServerReading(1.5, "llama-server", URL, "ok", slots=slots),
        ServerMemory(2.0, URL, 42, 180 << 20, 70 << 20, 110 << 20, 0, 92 << 20, 45 << 20, 23040.0, 256 << 20),
        ServerReading(3.5, "llama-server", URL, "ok", slots=slots, context_failures=0),
        ServerMemory(
            4.0, URL, 42, 190 << 20, 80 << 20, 110 << 20, 0, 92 << 20, 45 << 20, 23040.0, 256 << 20, 24 << 20, "smaps"
        ),
    ]


def test_the_exporter_exports_the_server_s_memory_split_and_its_pool():
    exporter = exporter_for(attached_events())
    _, series = scrape_registry(exporter.registry)
    assert value(series, "cliff_server_memory_bytes", server=URL, part="kv_cache") == 45 << 20
    assert value(series, "cliff_server_memory_bytes", server=URL, part="model") == 92 << 20
    assert value(series, "cliff_server_memory_bytes", server=URL, part="prompt_cache") == 24 << 20
    assert value(series, "cliff_server_memory_bytes", server=URL, part="other_anon") == 11 << 20
    assert value(series, "cliff_server_prompt_cache_growth_bytes_per_second", server=URL) == 5 << 20
    assert value(series, "cliff_server_prompt_cache_limit_bytes", server=URL) == 256 << 20
    assert value(series, "cliff_context_cells", state="used") == 1920
    assert value(series, "cliff_context_cells", state="max") == 2048
    assert value(series, "cliff_gauge_level", source="context pool") == 1  # amber: 94 %


VLLM_URL = "http://127.0.0.1:8000"


def vllm_reading(t: float) -> ServerReading:
    """A real vLLM's /metrics under load (tests/data/endpoints/vllm), read by the real reader."""
    recorded = DATA / "endpoints" / "vllm"

    def get(url: str, timeout: float) -> Reply:
        if url.endswith("/metrics"):
            return Reply(url, 200, (recorded / "metrics_pressure.txt").read_text())
        return Reply(url, 200, (recorded / "models.json").read_text())

    return dataclasses.replace(read_vllm(VLLM_URL, get=get), t=t)


def test_every_metric_a_rule_names_is_exported():
    exprs = " ".join(re.findall(r"^\s*expr: (.*)$", (DEPLOY / "alerts.yml").read_text(), re.M))
    named = set(re.findall(r"\b(cliff_[a-z_]+)\b", exprs))
    assert {"cliff_server_preemptions_total", "cliff_server_kv_cache_usage_ratio"} <= named
    exporter = exporter_for([*attached_events(), vllm_reading(5.0)])
    names, _ = scrape_registry(exporter.registry)  # a counter's _total name only where it has a sample
    assert named and named <= set(names), named - set(names)
