"""vLLM's OpenAI API server: ``/metrics`` (the ``vllm:`` series) and ``/v1/models``.

vLLM never spills a KV cache: it pre-allocates a fixed number of blocks and, when they run out,
preempts running requests (recomputed later) and queues new ones. Its cliff is read from
``kv_cache_usage_perc`` (a 0–1 fraction of the blocks) against ``cache_config_info``'s size in
tokens, the preemption counter, and the requests waiting "for capacity". Decode speed comes from
the inter-token latency histogram (its count over its sum: tokens a running request made per
second, the first token left out). Older servers named the usage ``gpu_cache_usage_perc`` and the
latency ``time_per_output_token_seconds``.
"""

from __future__ import annotations

import time
from typing import Any, Final

from cliff_tui.events import ServerReading
from cliff_tui.probes.endpoints.http import Getter, as_int, describe_body, fetch, normalise_url, server_reading
from cliff_tui.probes.endpoints.llama_server import LlamaServerRead
from cliff_tui.probes.endpoints.prometheus import info_labels, parse_prometheus
from cliff_tui.records import KvBlocks

VLLM: Final = "vllm"
DEFAULT_URL = "http://127.0.0.1:8000"
USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
LATENCY = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
# finished requests' prefill: the tokens computed (prefix-cache hits left out) and the seconds it took
PREFILL_TOKENS = "vllm:request_prefill_kv_computed_tokens_sum"
PREFILL_SECONDS = "vllm:request_prefill_time_seconds_sum"
CACHE_INFO = "vllm:cache_config_info"
MAX_TOKENS = 2**40  # a KV cache larger than this many tokens is not believable


def probe_vllm(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> LlamaServerRead:
    return LlamaServerRead(read_vllm(url, timeout, get=get))


def read_vllm(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> ServerReading:
    base = normalise_url(url)
    t = time.time()
    reply = get(base + "/metrics", timeout)
    if reply.status is None:
        return server_reading(t, VLLM, base, "unreachable", reply.error or "no answer")
    values = _summed(parse_prometheus(reply.body)) if reply.status == 200 else {}
    if not any(name.startswith("vllm:") for name in values):
        what = f"HTTP {reply.status}, {describe_body(reply)}"
        return server_reading(t, VLLM, base, "not-llama", f"{base} is not vLLM (/metrics gave {what}): check the URL")
    reasons: dict[str, str] = {}
    kv = kv_blocks(values, info_labels(reply.body, CACHE_INFO) or {}, _max_model_len(base, timeout, get), reasons)
    count, seconds = _latency(values)
    return server_reading(
        t,
        VLLM,
        base,
        "ok",
        "",
        tokens_predicted_total=count,
        tokens_predicted_seconds_total=seconds,
        prompt_tokens_total=values.get(PREFILL_TOKENS),
        prompt_seconds_total=values.get(PREFILL_SECONDS),
        requests_processing=as_int(values.get("vllm:num_requests_running")),
        kv_blocks=kv,
        reasons=reasons,
    )


def kv_blocks(
    values: dict[str, float], info: dict[str, str], max_model_len: int | None, reasons: dict[str, str]
) -> KvBlocks | None:
    """The paged cache's state; None (and a reason) where the server reports no usage."""
    usage = next((values[n] for n in USAGE if n in values), None)
    if usage is None:
        reasons["kv_cache_usage_perc"] = "absent from /metrics (a vLLM too old or too new for this reader)"
        return None
    if not 0.0 <= usage <= 1.0:
        reasons["kv_cache_usage_perc"] = f"unreadable: the server said {usage}"
        return None
    block_size, blocks = _label_int(info, "block_size"), _label_int(info, "num_gpu_blocks")
    tokens = _label_int(info, "kv_cache_size_tokens")
    if tokens is None and block_size and blocks:
        tokens = block_size * blocks
    if tokens is not None and not 0 < tokens <= MAX_TOKENS:
        reasons["kv_cache_size_tokens"] = f"unreadable: the server said {tokens}"
        tokens = None
    if tokens is None:
        reasons["cache_config_info"] = "no KV cache size in /metrics (cache_config_info): usage shown as a share"
    return KvBlocks(
        usage=usage,
        capacity_tokens=tokens,
        block_size=block_size,
        blocks=blocks,
        memory_bytes=_label_int(info, "kv_cache_memory_bytes"),
        preemptions_total=values.get("vllm:num_preemptions_total"),
        running=as_int(values.get("vllm:num_requests_running")),
        waiting=as_int(values.get("vllm:num_requests_waiting")),
        waiting_for_capacity=as_int(values.get('vllm:num_requests_waiting_by_reason{reason="capacity"}')),
        max_model_len=max_model_len,
        prefix_hits_total=values.get("vllm:prefix_cache_hits_total"),
        prefix_queries_total=values.get("vllm:prefix_cache_queries_total"),
    )


def _summed(values: dict[str, float]) -> dict[str, float]:
    """Samples by name with the labels that tell engines and models apart summed away (the usage
    share averaged); the labels
    that say what a sample is (a reason) kept: ``m{reason="capacity"}``."""
    out: dict[str, float] = {}
    seen: dict[str, int] = {}
    for key, value in values.items():
        name, _, labels = key.partition("{")
        kept = [p for p in labels.rstrip("}").split(",") if p.startswith("reason=")] if labels else []
        short = name + ("{" + ",".join(kept) + "}" if kept else "")
        out[short] = out.get(short, 0.0) + value
        seen[short] = seen.get(short, 0) + 1
    for name in USAGE:
        if seen.get(name, 0) > 1:
            out[name] /= seen[name]  # a share of each engine's blocks: their mean
    return out


def _latency(values: dict[str, float]) -> tuple[float | None, float | None]:
    for name in LATENCY:
        if name + "_count" in values and name + "_sum" in values:
            return values[name + "_count"], values[name + "_sum"]
    return None, None


def _max_model_len(base: str, timeout: float, get: Getter) -> int | None:
    reply = get(base + "/v1/models", timeout)
    body: Any = reply.json() if reply.status == 200 else None
    data = body.get("data") if isinstance(body, dict) else None
    lengths = [as_int(m.get("max_model_len")) for m in data or () if isinstance(m, dict)]
    return max((n for n in lengths if n and n > 0), default=None)


def _label_int(info: dict[str, str], name: str) -> int | None:
    try:
        return int(float(info[name]))
    except (KeyError, ValueError, OverflowError):
        return None
