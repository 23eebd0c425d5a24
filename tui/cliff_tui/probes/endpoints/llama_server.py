"""llama-server (``tools/server`` in llama.cpp): ``/metrics``, ``/slots`` and ``/props``.

- ``GET /metrics`` is Prometheus text, only with ``--metrics``; without it the answer is HTTP 501
  ``{"error": {"code": 501, "message": "This server does not support metrics endpoint. …",
  "type": "not_supported_error"}}``. Counters: ``llamacpp:tokens_predicted_total``,
  ``llamacpp:tokens_predicted_seconds_total``, ``llamacpp:prompt_tokens_total``,
  ``llamacpp:prompt_seconds_total``; gauge ``llamacpp:requests_processing``. Older servers also had
  ``llamacpp:kv_cache_tokens`` (removed upstream).
- ``GET /slots`` (on by default, off with ``--no-slots``): a list of slots with ``id``, ``n_ctx`` and
  ``is_processing`` (older: ``state``, 0 = idle). Tokens held in the slot's cache: ``n_prompt_tokens``
  in current servers (prompt plus the tokens generated so far), ``n_past`` in some older ones.
- ``GET /props``: ``default_generation_settings.n_ctx`` and ``total_slots``, used when /slots is off;
  ``model_path``, the GGUF it serves (``"none"`` from a server that routes to several).

Network trouble never raises: it becomes a reading with a status and a one-line message.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from cliff_tui.events import ServerReading
from cliff_tui.probes.endpoints.http import (
    Getter,
    Reply,
    as_int,
    describe_body,
    fetch,
    normalise_url,
    server_reading,
)
from cliff_tui.probes.endpoints.ollama import is_ollama
from cliff_tui.probes.endpoints.prometheus import parse_prometheus
from cliff_tui.records import SlotReading
from cliff_tui.text import file_name

LLAMA_SERVER: Final = "llama-server"
DEFAULT_URL = "http://127.0.0.1:8080"
METRICS_HINT = "restart it with --metrics to get tok/s"
MAX_SLOTS = 512  # more than any real --parallel; guards against a nonsense total_slots


@dataclass(frozen=True)
class SlotProgress:
    """The request a slot runs, as /slots tells it: the /metrics counters only move when a request
    finishes (llama-server flushes a slot's stats on reset), so a live decode rate comes from here."""

    id: int
    id_task: int | None
    n_decoded: int | None
    processing: bool | None


@dataclass(frozen=True)
class SlotsRead:
    slots: tuple[SlotReading, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)
    progress: tuple[SlotProgress, ...] = ()
    t: float | None = None  # when /slots answered


@dataclass(frozen=True)
class LlamaServerRead:
    reading: ServerReading
    slots: SlotsRead = SlotsRead()


def dropped_requests(before: SlotsRead, now: SlotsRead) -> int:
    """Requests that were running at ``before`` and ended with their slot's cells cleared at
    ``now``: what llama-server does to every running request when a decode finds no free cells
    ("Context size has been exceeded"); a request that finishes keeps its tokens in the slot."""
    running = {p.id: p.id_task for p in before.progress if p.processing and p.id_task is not None}
    tokens = {s.id: s.tokens_used for s in now.slots}
    return sum(
        1
        for p in now.progress
        if p.processing is False and p.id in running and running[p.id] == p.id_task and tokens.get(p.id) == 0
    )


def read_llama_server(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> ServerReading:
    return probe_llama_server(url, timeout, get=get).reading


def probe_llama_server(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> LlamaServerRead:
    """The reading, plus the per-slot progress that the reading's records have no room for."""
    base = normalise_url(url)
    t = time.time()
    reply = get(base + "/metrics", timeout)
    if reply.status is None:
        return LlamaServerRead(server_reading(t, LLAMA_SERVER, base, "unreachable", reply.error or "no answer"))
    if reply.status == 200:
        return _from_metrics(t, base, reply, timeout, get)
    return _metrics_refused(t, base, reply, timeout, get)


def _from_metrics(t: float, base: str, reply: Reply, timeout: float, get: Getter) -> LlamaServerRead:
    values = parse_prometheus(reply.body)
    if not any(name.startswith("llamacpp:") for name in values):
        return LlamaServerRead(
            server_reading(t, LLAMA_SERVER, base, "not-llama", _not_llama_message(base, reply, timeout, get))
        )
    read = _fill_tokens_from_metrics(read_slots(base, timeout, get=get), values)
    reading = server_reading(
        t,
        LLAMA_SERVER,
        base,
        "ok",
        "",
        tokens_predicted_total=values.get("llamacpp:tokens_predicted_total"),
        tokens_predicted_seconds_total=values.get("llamacpp:tokens_predicted_seconds_total"),
        prompt_tokens_total=values.get("llamacpp:prompt_tokens_total"),
        prompt_seconds_total=values.get("llamacpp:prompt_seconds_total"),
        requests_processing=as_int(values.get("llamacpp:requests_processing")),
        slots=read.slots,
        reasons=read.reasons,
    )
    return LlamaServerRead(reading, read)


def _metrics_refused(t: float, base: str, reply: Reply, timeout: float, get: Getter) -> LlamaServerRead:
    error = llama_error(reply)
    if error is not None and reply.status == 501 and "metrics" in error.lower():
        return _no_metrics(
            t,
            base,
            f"llama-server runs without --metrics: {METRICS_HINT} (slots are still read)",
            read_slots(base, timeout, get=get),
        )
    if error is not None:
        return LlamaServerRead(
            server_reading(t, LLAMA_SERVER, base, "error", _llama_error_message(reply.status, error))
        )
    props = get(base + "/props", timeout)
    if _looks_like_props(props.json() if props.status == 200 else None):
        return _no_metrics(
            t,
            base,
            f"llama-server answered /metrics with HTTP {reply.status}: {METRICS_HINT}",
            read_slots(base, timeout, get=get),
        )
    return LlamaServerRead(
        server_reading(t, LLAMA_SERVER, base, "not-llama", _not_llama_message(base, reply, timeout, get))
    )


def read_model_file(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> str | None:
    """The file name of the GGUF the server loaded (``model_path`` in /props), as the server wrote
    it (compare it, then make it :func:`inert` to show it); None where it does not name one."""
    reply = get(normalise_url(url) + "/props", timeout)
    body = reply.json() if reply.status == 200 else None
    path = body.get("model_path") if isinstance(body, dict) else None
    name = file_name(path) if isinstance(path, str) else ""
    return None if name.strip() in ("", ".", "..") or name.lower() == "none" else name


def _no_metrics(t: float, base: str, message: str, read: SlotsRead) -> LlamaServerRead:
    reading = server_reading(t, LLAMA_SERVER, base, "no-metrics", message, slots=read.slots, reasons=read.reasons)
    return LlamaServerRead(reading, read)


def llama_error(reply: Reply) -> str | None:
    """The message of llama-server's (OpenAI-shaped) error body, or None for any other body."""
    body = reply.json()
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return None


def _llama_error_message(status: int | None, error: str) -> str:
    if status in (401, 403):
        return (
            f"llama-server refused the request (HTTP {status}: {error}): it runs with --api-key, "
            "which cliff-tui does not send; run it without one on loopback"
        )
    if status == 503:
        return f"llama-server is not ready (HTTP 503: {error})"
    return f"llama-server answered /metrics with HTTP {status}: {error}"


def _looks_like_props(body: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(body, dict) and ("default_generation_settings" in body or "total_slots" in body)


def _not_llama_message(base: str, reply: Reply, timeout: float, get: Getter) -> str:
    what = describe_body(reply)
    hint = "check the URL and port"
    if is_ollama(base, timeout, get):
        hint = f"this is Ollama: use --ollama {base}"
    return f"{base} is not llama-server (/metrics gave HTTP {reply.status}, {what}): {hint}"


def read_slots(base: str, timeout: float, *, get: Getter = fetch) -> SlotsRead:
    reply = get(base + "/slots", timeout)
    t = time.time()
    if reply.status == 200:
        body = reply.json()
        try:
            slots, reasons = believable_slots(parse_slots(body))
            return SlotsRead(slots, reasons, parse_progress(body), t)
        except ValueError as exc:
            return SlotsRead(reasons={"slots": f"/slots: {exc}"})
    return _slots_from_props(base, timeout, get, _slots_refused(reply))


def _slots_refused(reply: Reply) -> str:
    if reply.status is None:
        return f"/slots: {reply.error}"
    error = llama_error(reply)
    if reply.status == 501:
        return "/slots is off (llama-server --no-slots): tokens in use unknown"
    return f"/slots answered HTTP {reply.status}" + (f": {error}" if error else "")


def _slots_from_props(base: str, timeout: float, get: Getter, why: str) -> SlotsRead:
    props = get(base + "/props", timeout)
    body = props.json() if props.status == 200 else None
    if not _looks_like_props(body):
        return SlotsRead(reasons={"slots": why})
    settings = body.get("default_generation_settings")
    n_ctx = as_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    total = min(max(as_int(body.get("total_slots")) or 1, 1), MAX_SLOTS)
    slots, reasons = believable_slots(
        tuple(SlotReading(id=i, n_ctx=n_ctx, tokens_used=None, processing=None) for i in range(total))
    )
    return SlotsRead(slots, {"slots": f"{why}; n_ctx from /props", **reasons})


MAX_CONTEXT = 2**31  # llama.cpp counts cells in an int32


def believable_slots(slots: tuple[SlotReading, ...]) -> tuple[tuple[SlotReading, ...], dict[str, str]]:
    """Values that cannot be true made unknown, never shown as true: a context of 0 cells or fewer,
    or beyond what llama.cpp can count; tokens below 0 or beyond the slot's context. Each such
    value is named, with what the server said, in the reasons."""
    out, reasons = [], {}
    for slot in slots:
        n_ctx, used = slot.n_ctx, slot.tokens_used
        if n_ctx is not None and not 0 < n_ctx <= MAX_CONTEXT:
            reasons[f"slot {slot.id} n_ctx"] = f"unreadable: the server said n_ctx {n_ctx}"
            n_ctx = None
        if used is not None and (used < 0 or (n_ctx is not None and used > n_ctx) or used > MAX_CONTEXT):
            reasons[f"slot {slot.id} tokens"] = (
                f"unreadable: the server said {used} tokens in use of n_ctx {slot.n_ctx}"
            )
            used = None
        out.append(dataclasses.replace(slot, n_ctx=n_ctx, tokens_used=used))
    return tuple(out), reasons


def parse_slots(body: Any) -> tuple[SlotReading, ...]:
    if not isinstance(body, list):
        raise ValueError("not a list of slots (is this llama-server?)")
    return tuple(_slot(i, item) for i, item in enumerate(body) if isinstance(item, dict))


def _slot(index: int, item: dict[str, Any]) -> SlotReading:
    return SlotReading(
        id=_slot_id(index, item),
        n_ctx=as_int(item.get("n_ctx")),
        tokens_used=_slot_tokens(item),
        processing=_processing(item),
    )


def _slot_id(index: int, item: dict[str, Any]) -> int:
    found = as_int(item.get("id"))
    return index if found is None else found


def _processing(item: dict[str, Any]) -> bool | None:
    processing = item.get("is_processing")
    if isinstance(processing, bool):
        return processing
    state = as_int(item.get("state"))  # older servers: 0 is idle
    return None if state is None else state != 0


def _slot_tokens(item: dict[str, Any]) -> int | None:
    """Cells the slot holds in the KV cache: ``n_past`` (older) or ``n_prompt_tokens`` (current,
    which counts the generated tokens too: llama-server appends each sampled token to it)."""
    for key in ("n_past", "n_prompt_tokens"):
        value = as_int(item.get(key))
        if value is not None:
            return value
    return None


def parse_progress(body: Any) -> tuple[SlotProgress, ...]:
    if not isinstance(body, list):
        return ()
    return tuple(
        SlotProgress(
            _slot_id(i, item), as_int(item.get("id_task", item.get("task_id"))), _n_decoded(item), _processing(item)
        )
        for i, item in enumerate(body)
        if isinstance(item, dict)
    )


def _n_decoded(item: dict[str, Any]) -> int | None:
    """``next_token`` is an object in older servers, a one-item list in current ones."""
    nxt = item.get("next_token")
    if isinstance(nxt, list) and nxt:
        nxt = nxt[0]
    return as_int(nxt.get("n_decoded")) if isinstance(nxt, dict) else None


def _fill_tokens_from_metrics(read: SlotsRead, values: dict[str, float]) -> SlotsRead:
    """Older servers: one slot without a token count, but the global ``kv_cache_tokens`` gauge."""
    cached = as_int(values.get("llamacpp:kv_cache_tokens"))
    if len(read.slots) != 1 or read.slots[0].tokens_used is not None or cached is None:
        return read
    only = read.slots[0]
    reasons = {**read.reasons, "tokens_used": "from llamacpp:kv_cache_tokens (this /slots has no token count)"}
    slots = (SlotReading(only.id, only.n_ctx, cached, only.processing),)
    return dataclasses.replace(read, slots=slots, reasons=reasons)
