"""Ollama: ``GET /api/ps`` lists loaded models with ``size``, ``size_vram`` (size_vram < size: part
of the model sits in system RAM) and, in recent versions, ``context_length``. Ollama has no
``/metrics``: no token counters."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Final

from cliff_tui.events import ServerReading
from cliff_tui.probes.endpoints.http import Getter, as_int, describe_body, fetch, normalise_url, server_reading
from cliff_tui.records import ServedModel
from cliff_tui.text import inert

OLLAMA: Final = "ollama"
MAX_CONTEXT = 2**31  # llama.cpp counts cells in an int32
DEFAULT_URL = "http://127.0.0.1:11434"


def read_ollama(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> ServerReading:
    base = normalise_url(url)
    t = time.time()
    reply = get(base + "/api/ps", timeout)
    if reply.status is None:
        return server_reading(t, OLLAMA, base, "unreachable", reply.error or "no answer")
    body = reply.json()
    if reply.status == 200 and isinstance(body, dict) and isinstance(body.get("models"), list):
        return _from_ps(t, base, body["models"])
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        message = f"Ollama answered /api/ps with HTTP {reply.status}: {body['error']}"
        return server_reading(t, OLLAMA, base, "error", message)
    return server_reading(
        t,
        OLLAMA,
        base,
        "not-llama",
        f"{base} is not Ollama (/api/ps gave HTTP {reply.status}, {describe_body(reply)}): check the URL and port",
    )


def _from_ps(t: float, base: str, items: list[Any]) -> ServerReading:
    models = tuple(_served_model(m) for m in items if isinstance(m, dict))
    reasons: dict[str, str] = {}
    for i, m in enumerate(models):
        if m.context_length is not None and not 0 < m.context_length <= MAX_CONTEXT:
            reasons[f"model {m.name} context_length"] = f"unreadable: the server said {m.context_length}"
            models = (*models[:i], dataclasses.replace(m, context_length=None), *models[i + 1 :])
    if any(m.context_length is None for m in models):
        reasons["context_length"] = "this Ollama does not report context_length in /api/ps (older version)"
    message = "" if models else "no model loaded (Ollama unloads a model after its keep_alive)"
    return server_reading(t, OLLAMA, base, "ok", message, models=models, reasons=reasons)


def _served_model(item: dict[str, Any]) -> ServedModel:
    name = item.get("name") or item.get("model") or "?"
    return ServedModel(
        name=inert(str(name)),
        size_bytes=as_int(item.get("size")),
        size_vram_bytes=as_int(item.get("size_vram")),
        context_length=as_int(item.get("context_length")),
    )


def is_ollama(base: str, timeout: float, get: Getter = fetch) -> bool:
    """Whether ``base`` answers as Ollama does (``/api/version``), to name a server that is not the one asked for."""
    reply = get(base + "/api/version", timeout)
    body = reply.json() if reply.status == 200 else None
    return isinstance(body, dict) and isinstance(body.get("version"), str) and len(body) <= 3
