"""vLLM's /metrics and /v1/models as a real vLLM (CPU build) answered them, read into the paged KV
cache's state; and the gauge that state gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from cliff_tui.analysis.gauge import kv_blocks_gauge
from cliff_tui.probes.endpoints.http import Reply
from cliff_tui.probes.endpoints.kinds import VLLM, recognise
from cliff_tui.probes.endpoints.vllm import read_vllm

DATA = Path(__file__).resolve().parents[1] / "data" / "endpoints" / "vllm"
URL = "http://127.0.0.1:8000"


def replaying(metrics: str, models: str | None = "models.json", status: int = 200):
    def get(url: str, timeout: float) -> Reply:
        if url.endswith("/metrics"):
            return Reply(url, status, metrics)
        if url.endswith("/v1/models") and models:
            return Reply(url, 200, (DATA / models).read_text())
        return Reply(url, 404, "")

    return get


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def test_a_loaded_vllm_reads_as_full_blocks_with_requests_waiting_for_capacity():
    r = read_vllm(URL, get=replaying(recorded("metrics_pressure.txt")))
    kv = r.kv_blocks
    assert r.status == "ok" and r.source == "vllm" and kv is not None
    assert (kv.usage, kv.capacity_tokens, kv.block_size, kv.blocks) == (1.0, 1280, 128, 10)
    assert kv.tokens_used == 1280 and kv.memory_bytes == 1 << 30 and kv.max_model_len == 1024
    assert (kv.running, kv.waiting, kv.waiting_for_capacity, kv.preemptions_total) == (2, 5, 5, 2.0)
    assert r.requests_processing == 2 and r.tokens_predicted_total and r.tokens_predicted_seconds_total


def test_an_idle_vllm_holds_no_tokens():
    kv = read_vllm(URL, get=replaying(recorded("metrics_idle.txt"))).kv_blocks
    assert kv is not None and kv.tokens_used == 0 and kv.preemptions_total == 0


def test_the_older_usage_name_is_read_too():
    text = recorded("metrics_pressure.txt").replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    kv = read_vllm(URL, get=replaying(text)).kv_blocks
    assert kv is not None and kv.usage == 1.0


def test_missing_series_say_what_is_missing_in_one_line():
    lines = recorded("metrics_pressure.txt").splitlines()
    no_usage = "\n".join(line for line in lines if "cache_usage_perc" not in line)
    r = read_vllm(URL, get=replaying(no_usage))
    assert r.status == "ok" and r.kv_blocks is None
    assert "absent from /metrics" in r.reasons["kv_cache_usage_perc"]
    no_info = "\n".join(line for line in lines if "cache_config_info" not in line)
    r = read_vllm(URL, get=replaying(no_info))
    assert r.kv_blocks is not None and r.kv_blocks.capacity_tokens is None
    assert "no KV cache size" in r.reasons["cache_config_info"]


def test_values_that_cannot_be_true_are_unreadable():
    text = recorded("metrics_pressure.txt").replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 1.0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 37.0',
    )
    r = read_vllm(URL, get=replaying(text))
    assert r.kv_blocks is None and r.reasons["kv_cache_usage_perc"] == "unreadable: the server said 37.0"


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, "llamacpp:prompt_tokens_total 3\n", "not-llama"),
        (404, "<html>nope</html>", "not-llama"),
        (None, "", "unreachable"),
    ],
)
def test_a_server_that_is_not_vllm_or_a_dead_one_says_so(status, body, expected):
    def get(url: str, timeout: float) -> Reply:
        return Reply(url, status, body, None if status else "connection refused")

    r = read_vllm(URL, get=get)
    assert r.status == expected and r.kv_blocks is None and "\n" not in r.message


def test_the_gauge_is_amber_near_full_and_red_while_vllm_preempts():
    kv = read_vllm(URL, get=replaying(recorded("metrics_pressure.txt"))).kv_blocks
    assert kv is not None
    quiet = kv_blocks_gauge(kv.__class__(**{**kv.__dict__, "usage": 0.92}), preempted=0)
    assert quiet is not None and quiet.level == "amber" and not quiet.failing
    preempting = kv_blocks_gauge(kv, preempted=3)
    assert preempting is not None and preempting.level == "red" and preempting.failing
    assert preempting.note == "5 waiting for blocks" and preempting.preempted == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["/opt/venv/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
        ["/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "8192"],
        ["VLLM::APIServer_0"],
    ],
)
def test_vllm_is_recognised_by_its_processes(argv):
    assert recognise(argv[0], argv) is VLLM


def test_vllm_serve_names_its_model_and_flags_with_where_each_was_read():
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len=8192", "--gpu-memory-utilization", "0.8"]
    settings = {s.name: s for s in VLLM.settings(argv, {"VLLM_CPU_KVCACHE_SPACE": "4"})}
    assert settings["model"].value == "Qwen/Qwen3-8B" and "vllm serve" in settings["model"].source
    assert settings["max_model_len"].value == "8192" and settings["gpu_memory_utilization"].value == "0.8"
    assert settings["cpu_kvcache_space"].source == "environment (VLLM_CPU_KVCACHE_SPACE)"
    assert settings["port"].value == "8000" and settings["port"].source.startswith("default")
