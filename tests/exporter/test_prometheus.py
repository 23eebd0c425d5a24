"""The exporter scraped by a real Prometheus, asked through its HTTP API; and against a real
llama-server when the binary exists."""

from __future__ import annotations

import threading
import urllib.parse

import pytest

from exporting.dashboard import load, queries, substituted
from exporting.prometheus import binary, scraping
from exporting.running import exporter
from llama_server import post_json
from paths import DATA


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    binary()
    args = ("--bind", "127.0.0.1:0", "-i", "0.25", "--from", str(DATA / "smollm2_triangulation.jsonl"))
    with (
        exporter(*args) as (url, _, _),
        scraping(urllib.parse.urlsplit(url).netloc, tmp_path_factory.mktemp("prometheus")) as prom,
    ):
        yield prom


def test_prometheus_scrapes_the_ram_tier_and_the_signs(prometheus):
    ram = prometheus.wait_for('cliff_memory_used_bytes{tier="ram"}')
    assert len(ram) == 1 and float(ram[0]["value"][1]) > 0
    assert ram[0]["metric"]["job"] == "cliff-tui" and ram[0]["metric"]["instance"]
    capacity = prometheus.wait_for('cliff_memory_capacity_bytes{tier="ram"}')
    assert float(capacity[0]["value"][1]) >= float(ram[0]["value"][1])
    signs = {s["metric"]["sign"]: s for s in prometheus.wait_for("cliff_sign_level")}
    assert {sign: s["metric"]["name"] for sign, s in signs.items()} == {"1": "spill", "2": "ram", "3": "speed"}
    # watching, with no token source: speed is not applicable (0); RAM is at most information
    # (another process's growth), never a warning with no generation running
    assert float(signs["3"]["value"][1]) == 0
    assert float(signs["2"]["value"][1]) in (0, 1)
    applicable = {s["metric"]["sign"]: float(s["value"][1]) for s in prometheus.wait_for("cliff_sign_applicable")}
    assert applicable["3"] == 0
    up = prometheus.wait_for('up{job="cliff-tui"}')
    assert float(up[0]["value"][1]) == 1


def test_the_capacity_plan_reaches_prometheus(prometheus):
    largest = prometheus.wait_for('cliff_max_context_tokens{model="SmolLM2-135M-Instruct.Q4_1.gguf"}')
    assert float(largest[0]["value"][1]) > 8192 and largest[0]["metric"]["kv_type"] == "f16"


def test_prometheus_accepts_every_dashboard_query(prometheus):
    prometheus.wait_for("cliff_verdict_level")
    for expr in queries(load()):
        status, body = prometheus.query(substituted(expr))
        assert status == 200 and body.get("status") == "success", f"{expr!r}: {body.get('error')}"
    ram = prometheus.query(substituted('cliff_memory_used_bytes{tier="ram",instance=~"$instance"}'))[1]
    assert ram["data"]["result"], "the dashboard's instance filter selects nothing"


@pytest.mark.model
def test_a_real_llama_servers_tok_s_reaches_prometheus(real_llama_server, tmp_path):
    url = real_llama_server
    exporting = exporter("--bind", "127.0.0.1:0", "-i", "0.25", "--llama-server", url)
    with exporting as (exporter_url, _, _), scraping(urllib.parse.urlsplit(exporter_url).netloc, tmp_path) as prom:
        up = prom.wait_for(f'cliff_up{{server="{url}"}}')
        assert float(up[0]["value"][1]) == 1
        slots = prom.wait_for(f'cliff_server_slot_context_tokens{{server="{url}"}}')
        assert float(slots[0]["value"][1]) == 2048
        request = threading.Thread(
            target=post_json,
            args=(url + "/completion", {"prompt": "Once upon a time", "n_predict": 48, "temperature": 0}),
            daemon=True,
        )
        request.start()
        request.join(120)
        rate = prom.wait_for(f'cliff_server_decode_tokens_per_second{{server="{url}"}}')
        assert float(rate[0]["value"][1]) > 0
        live = prom.wait_for('cliff_decode_tokens_per_second{source="attach"}')
        print(
            f"\nreal llama-server through Prometheus: server {float(rate[0]['value'][1]):.1f} tok/s, "
            f"live {float(live[0]['value'][1]):.1f} tok/s"
        )
        used = prom.wait_for(f'cliff_server_slot_used_tokens{{server="{url}"}}')
        assert float(used[0]["value"][1]) > 0
