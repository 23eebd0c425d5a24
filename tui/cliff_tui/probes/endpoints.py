"""Read a running llama-server or Ollama over HTTP: one :class:`SessionReading` per call.

llama-server (``tools/server`` in llama.cpp):
- ``GET /metrics`` is Prometheus text, only with ``--metrics``; without it the answer is HTTP 501
  ``{"error": {"code": 501, "message": "This server does not support metrics endpoint. …",
  "type": "not_supported_error"}}``. Counters: ``llamacpp:tokens_predicted_total``,
  ``llamacpp:tokens_predicted_seconds_total``, ``llamacpp:prompt_tokens_total``,
  ``llamacpp:prompt_seconds_total``; gauge ``llamacpp:requests_processing``. Older servers also had
  ``llamacpp:kv_cache_tokens`` (removed upstream).
- ``GET /slots`` (on by default, off with ``--no-slots``): a list of slots with ``id``, ``n_ctx`` and
  ``is_processing`` (older: ``state``, 0 = idle). Tokens held in the slot's cache: ``n_prompt_tokens``
  in current servers (prompt plus the tokens generated so far), ``n_past`` in some older ones.
- ``GET /props``: ``default_generation_settings.n_ctx`` and ``total_slots``; used when /slots is off.

Ollama: ``GET /api/ps`` lists loaded models with ``size``, ``size_vram`` (size_vram < size: part of
the model sits in system RAM) and, in recent versions, ``context_length``.

Network trouble never raises: it becomes a reading with a status and a one-line message.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import math
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from cliff_tui.events import ServedModel, SessionReading, SlotReading

LLAMA_SERVER = "llama-server"
OLLAMA = "ollama"
DEFAULT_URLS = {LLAMA_SERVER: "http://127.0.0.1:8080", OLLAMA: "http://127.0.0.1:11434"}
MAX_BODY_BYTES = 16 * 1024 * 1024  # /slots carries every slot's prompt text: large in a long chat
_KNOWN_SUFFIXES = ("/metrics", "/slots", "/props", "/health", "/api/ps", "/v1")
_USER_AGENT = "cliff-tui"
METRICS_HINT = "restart it with --metrics to get tok/s"
MAX_SLOTS = 512  # more than any real --parallel; guards against a nonsense total_slots


class BadUrl(ValueError):
    """A URL that is not ``http(s)://host[:port]``."""


# --- HTTP ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One HTTP exchange: ``status`` is None when no answer came (``error`` says why)."""

    url: str
    status: int | None
    body: str = ""
    error: str | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def normalise_url(url: str) -> str:
    """``host:port``, ``http://host:port/``, ``…/metrics`` → ``http://host:port``."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadUrl(f"{url!r} is not an http(s)://host[:port] URL")
    try:
        parts.port
    except ValueError:
        raise BadUrl(f"{url!r} has a bad port") from None
    path = parts.path.rstrip("/")
    for suffix in _KNOWN_SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url: str, timeout: float) -> Reply:
    """GET ``url``; never raises for network trouble or HTTP errors."""
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, "Accept": "*/*"})
    # An http_proxy in the environment must not swallow a local server's address.
    opener = _DIRECT if _is_loopback(url) else urllib.request.build_opener()
    try:
        with opener.open(request, timeout=timeout) as response:
            return Reply(url, response.status, _text(response.read(MAX_BODY_BYTES)))
    except urllib.error.HTTPError as exc:
        body = _text(exc.read(MAX_BODY_BYTES)) if exc.fp is not None else ""
        return Reply(url, exc.code, body)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Reply(url, None, error=describe_network_error(url, exc, timeout))


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def describe_network_error(url: str, exc: BaseException, timeout: float) -> str:
    parts = urllib.parse.urlsplit(url)
    where = parts.netloc or url
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return f"nothing is listening on {where} (connection refused)"
    if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason):
        return f"no answer from {where} within {timeout:g} s (timeout)"
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve host {parts.hostname!r} (DNS: {reason.strerror or reason})"
    if isinstance(reason, http.client.RemoteDisconnected):
        return f"{where} closed the connection without answering (is it an HTTP server?)"
    if isinstance(reason, ConnectionResetError):
        return f"{where} reset the connection"
    text = str(reason).strip() or type(reason).__name__
    return f"cannot reach {where}: {text.splitlines()[0]}"


Getter = Callable[[str, float], Reply]  # fetch(), or a stand-in in tests


# --- Prometheus text ------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Unlabelled samples by name (labelled ones keep their ``{…}`` in the key)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, raw = match.groups()
        try:
            values[name + (labels or "")] = float(raw)
        except ValueError:
            continue
    return values


# --- llama-server ---------------------------------------------------------------------------------


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
    reading: SessionReading
    slots: SlotsRead = SlotsRead()


def read_llama_server(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> SessionReading:
    return probe_llama_server(url, timeout, get=get).reading


def probe_llama_server(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> LlamaServerRead:
    """The reading, plus the per-slot progress that the reading's records have no room for."""
    base = normalise_url(url)
    t = time.time()
    reply = get(base + "/metrics", timeout)
    if reply.status is None:
        return LlamaServerRead(_reading(t, LLAMA_SERVER, base, "unreachable", reply.error or "no answer"))
    if reply.status == 200:
        return _from_metrics(t, base, reply, timeout, get)
    return _metrics_refused(t, base, reply, timeout, get)


def _reading(t: float, source: str, url: str, status: str, message: str, **fields: Any) -> SessionReading:
    return SessionReading(t=t, source=source, url=url, status=status, message=message, **fields)


def _from_metrics(t: float, base: str, reply: Reply, timeout: float, get: Getter) -> LlamaServerRead:
    values = parse_prometheus(reply.body)
    if not any(name.startswith("llamacpp:") for name in values):
        return LlamaServerRead(_reading(t, LLAMA_SERVER, base, "not-llama",
                                        _not_llama_message(base, reply, timeout, get)))
    read = _fill_tokens_from_metrics(read_slots(base, timeout, get=get), values)
    reading = _reading(
        t, LLAMA_SERVER, base, "ok", "",
        tokens_predicted_total=values.get("llamacpp:tokens_predicted_total"),
        tokens_predicted_seconds_total=values.get("llamacpp:tokens_predicted_seconds_total"),
        prompt_tokens_total=values.get("llamacpp:prompt_tokens_total"),
        prompt_seconds_total=values.get("llamacpp:prompt_seconds_total"),
        requests_processing=_int(values.get("llamacpp:requests_processing")),
        slots=read.slots, reasons=read.reasons,
    )
    return LlamaServerRead(reading, read)


def _metrics_refused(t: float, base: str, reply: Reply, timeout: float, get: Getter) -> LlamaServerRead:
    error = llama_error(reply)
    if error is not None and reply.status == 501 and "metrics" in error.lower():
        return _no_metrics(t, base, f"llama-server runs without --metrics: {METRICS_HINT} (slots are still read)",
                           read_slots(base, timeout, get=get))
    if error is not None:
        return LlamaServerRead(_reading(t, LLAMA_SERVER, base, "error", _llama_error_message(reply.status, error)))
    props = get(base + "/props", timeout)
    if _looks_like_props(props.json() if props.status == 200 else None):
        return _no_metrics(t, base, f"llama-server answered /metrics with HTTP {reply.status}: {METRICS_HINT}",
                           read_slots(base, timeout, get=get))
    return LlamaServerRead(_reading(t, LLAMA_SERVER, base, "not-llama",
                                    _not_llama_message(base, reply, timeout, get)))


def _no_metrics(t: float, base: str, message: str, read: SlotsRead) -> LlamaServerRead:
    reading = _reading(t, LLAMA_SERVER, base, "no-metrics", message, slots=read.slots, reasons=read.reasons)
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
        return f"llama-server refused the request (HTTP {status}: {error}): it runs with --api-key, " \
               "which cliff-tui does not send; run it without one on loopback"
    if status == 503:
        return f"llama-server is not ready (HTTP 503: {error})"
    return f"llama-server answered /metrics with HTTP {status}: {error}"


def _looks_like_props(body: Any) -> bool:
    return isinstance(body, dict) and ("default_generation_settings" in body or "total_slots" in body)


def _not_llama_message(base: str, reply: Reply, timeout: float, get: Getter) -> str:
    what = _describe_body(reply)
    hint = "check the URL and port"
    if _is_ollama(base, timeout, get):
        hint = f"this is Ollama: use --ollama {base}"
    return f"{base} is not llama-server (/metrics gave HTTP {reply.status}, {what}): {hint}"


def _describe_body(reply: Reply) -> str:
    body = reply.body.lstrip()
    if not body:
        return "an empty body"
    if body[:1] == "<":
        return "an HTML page"
    names = {name.split(":")[0] for name in parse_prometheus(body) if ":" in name}
    if names:
        return "Prometheus metrics named " + ", ".join(sorted(f"{n}:*" for n in names)[:3])
    if parse_prometheus(body):
        return "Prometheus metrics without llamacpp:*"
    first = body.splitlines()[0][:60]
    return f"{first!r}"


def _is_ollama(base: str, timeout: float, get: Getter) -> bool:
    reply = get(base + "/api/version", timeout)
    body = reply.json() if reply.status == 200 else None
    return isinstance(body, dict) and isinstance(body.get("version"), str) and len(body) <= 3


def read_slots(base: str, timeout: float, *, get: Getter = fetch) -> SlotsRead:
    reply = get(base + "/slots", timeout)
    t = time.time()
    if reply.status == 200:
        body = reply.json()
        try:
            return SlotsRead(parse_slots(body), {}, parse_progress(body), t)
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
    n_ctx = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    total = min(max(_int(body.get("total_slots")) or 1, 1), MAX_SLOTS)
    slots = tuple(SlotReading(id=i, n_ctx=n_ctx, tokens_used=None, processing=None) for i in range(total))
    return SlotsRead(slots, {"slots": f"{why}; n_ctx from /props"})


def parse_slots(body: Any) -> tuple[SlotReading, ...]:
    if not isinstance(body, list):
        raise ValueError("not a list of slots (is this llama-server?)")
    return tuple(_slot(i, item) for i, item in enumerate(body) if isinstance(item, dict))


def _slot(index: int, item: dict[str, Any]) -> SlotReading:
    return SlotReading(id=_slot_id(index, item), n_ctx=_int(item.get("n_ctx")), tokens_used=_slot_tokens(item),
                       processing=_processing(item))


def _slot_id(index: int, item: dict[str, Any]) -> int:
    found = _int(item.get("id"))
    return index if found is None else found


def _processing(item: dict[str, Any]) -> bool | None:
    processing = item.get("is_processing")
    if isinstance(processing, bool):
        return processing
    state = _int(item.get("state"))  # older servers: 0 is idle
    return None if state is None else state != 0


def _slot_tokens(item: dict[str, Any]) -> int | None:
    """Cells the slot holds in the KV cache: ``n_past`` (older) or ``n_prompt_tokens`` (current,
    which counts the generated tokens too: llama-server appends each sampled token to it)."""
    for key in ("n_past", "n_prompt_tokens"):
        value = _int(item.get(key))
        if value is not None:
            return value
    return None


def parse_progress(body: Any) -> tuple[SlotProgress, ...]:
    if not isinstance(body, list):
        return ()
    return tuple(SlotProgress(_slot_id(i, item), _int(item.get("id_task", item.get("task_id"))),
                              _n_decoded(item), _processing(item))
                 for i, item in enumerate(body) if isinstance(item, dict))


def _n_decoded(item: dict[str, Any]) -> int | None:
    """``next_token`` is an object in older servers, a one-item list in current ones."""
    nxt = item.get("next_token")
    if isinstance(nxt, list) and nxt:
        nxt = nxt[0]
    return _int(nxt.get("n_decoded")) if isinstance(nxt, dict) else None


def _fill_tokens_from_metrics(read: SlotsRead, values: dict[str, float]) -> SlotsRead:
    """Older servers: one slot without a token count, but the global ``kv_cache_tokens`` gauge."""
    cached = _int(values.get("llamacpp:kv_cache_tokens"))
    if len(read.slots) != 1 or read.slots[0].tokens_used is not None or cached is None:
        return read
    only = read.slots[0]
    reasons = {**read.reasons, "tokens_used": "from llamacpp:kv_cache_tokens (this /slots has no token count)"}
    slots = (SlotReading(only.id, only.n_ctx, cached, only.processing),)
    return dataclasses.replace(read, slots=slots, reasons=reasons)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


# --- Ollama ---------------------------------------------------------------------------------------


def read_ollama(url: str, timeout: float = 2.0, *, get: Getter = fetch) -> SessionReading:
    base = normalise_url(url)
    t = time.time()
    reply = get(base + "/api/ps", timeout)
    if reply.status is None:
        return _reading(t, OLLAMA, base, "unreachable", reply.error or "no answer")
    body = reply.json()
    if reply.status == 200 and isinstance(body, dict) and isinstance(body.get("models"), list):
        return _from_ps(t, base, body["models"])
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        message = f"Ollama answered /api/ps with HTTP {reply.status}: {body['error']}"
        return _reading(t, OLLAMA, base, "error", message)
    return _reading(t, OLLAMA, base, "not-llama",
                    f"{base} is not Ollama (/api/ps gave HTTP {reply.status}, {_describe_body(reply)}): "
                    "check the URL and port")


def _from_ps(t: float, base: str, items: list[Any]) -> SessionReading:
    models = tuple(_served_model(m) for m in items if isinstance(m, dict))
    reasons: dict[str, str] = {}
    if any(m.context_length is None for m in models):
        reasons["context_length"] = "this Ollama does not report context_length in /api/ps (older version)"
    message = "" if models else "no model loaded (Ollama unloads a model after its keep_alive)"
    return _reading(t, OLLAMA, base, "ok", message, models=models, reasons=reasons)


def _served_model(item: dict[str, Any]) -> ServedModel:
    name = item.get("name") or item.get("model") or "?"
    return ServedModel(name=str(name), size_bytes=_int(item.get("size")),
                       size_vram_bytes=_int(item.get("size_vram")), context_length=_int(item.get("context_length")))


# --- looking on the default ports -----------------------------------------------------------------

READERS: dict[str, Callable[..., SessionReading]] = {LLAMA_SERVER: read_llama_server, OLLAMA: read_ollama}


@dataclass(frozen=True)
class Discovery:
    found: dict[str, str]  # source → base URL
    readings: dict[str, SessionReading]  # source → the reading that decided
    message: str


def is_found(reading: SessionReading) -> bool:
    """The server is there (even if it needs a flag); only silence or another program is not."""
    return reading.status not in ("unreachable", "not-llama")


def discover(timeout: float = 1.0, urls: dict[str, str] | None = None) -> Discovery:
    """Look for llama-server on 8080 and Ollama on 11434 (loopback) and say what was found."""
    urls = urls or DEFAULT_URLS
    readings = {source: READERS[source](url, timeout) for source, url in urls.items()}
    found = {source: r.url for source, r in readings.items() if is_found(r)}
    return Discovery(found, readings, describe_discovery(readings))


def describe_discovery(readings: dict[str, SessionReading]) -> str:
    parts = []
    for source, r in readings.items():
        where = urllib.parse.urlsplit(r.url).netloc
        if is_found(r):
            parts.append(f"found {source} at {r.url}" + (f" ({r.status})" if r.status != "ok" else ""))
        else:
            parts.append(f"no {source} on {where} ({r.message})")
    text = "; ".join(parts)
    if not any(is_found(r) for r in readings.values()):
        text += "; pass --llama-server URL or --ollama URL"
    return text
