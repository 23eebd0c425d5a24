"""HTTP for the endpoint probes: one GET that never raises for network trouble, URL checks, and the
one-line descriptions of what went wrong."""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from cliff_tui.events import ServerReading
from cliff_tui.probes.endpoints.deadline import WATCHDOG, Exchange
from cliff_tui.probes.endpoints.prometheus import parse_prometheus
from cliff_tui.records import ServerKind, ServerStatus
from cliff_tui.text import inert
from cliff_tui.units import MiB, fmt_bytes, is_number

MAX_BODY_BYTES = 16 * MiB  # /slots carries every slot's prompt text: large in a long chat
# what a user may paste after the base URL: the servers' own API paths (the longest first)
_API_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/chat/completions",
    "/completions",
    "/completion",
    "/embeddings",
    "/models",
    "/metrics",
    "/slots",
    "/props",
    "/health",
    "/tokenize",
    "/api/generate",
    "/api/chat",
    "/api/tags",
    "/api/ps",
    "/api/version",
)
_USER_AGENT = "cliff-tui"


class BadUrl(ValueError):
    """A URL that is not ``http(s)://host[:port]``."""


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
        except (ValueError, RecursionError):
            return None


def normalise_url(url: str) -> str:
    """``host:port``, ``http://host:port/``, ``…/metrics`` → ``http://host:port``."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    authority = re.split(r"[/?#]", text.split("://", 1)[1], maxsplit=1)[0]
    if "@" in authority:  # refused before any message could show the password
        raise BadUrl(
            f"the URL for {authority.rsplit('@', 1)[1]!r} carries a user name or password, which "
            "cliff-tui does not send (nor print): give http(s)://host[:port]"
        )
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:  # an unclosed or invalid [IPv6] host
        raise BadUrl(f"{url!r} is not an http(s)://host[:port] URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in parts.netloc):
        raise BadUrl(f"{url!r} is not an http(s)://host[:port] URL")
    try:
        _ = parts.port  # urllib checks the port only when it is read
    except ValueError:
        raise BadUrl(f"{url!r} has a bad port") from None
    path = parts.path.rstrip("/")
    path = next((path[: -len(api)] for api in _API_PATHS if path.endswith(api)), path).rstrip("/")
    path = path.removesuffix("/v1")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_exchange = threading.local()  # the exchange that fetch() is making on this thread


class _Watched:
    """A connection whose socket the watchdog can shut as soon as it exists (a proxy's CONNECT
    happens before connect() returns)."""

    _create_connection: Callable[..., socket.socket]  # set by HTTPConnection.__init__; typeshed omits it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._exchange: Exchange | None = getattr(_exchange, "current", None)
        if self._exchange is not None:
            self._create_connection = partial(_watched_socket, self._exchange, self._create_connection)


def _watched_socket(exchange: Exchange, make: Callable[..., socket.socket], *args: Any, **kwargs: Any) -> socket.socket:
    sock = make(*args, **kwargs)
    WATCHDOG.watch(exchange, sock)
    return sock


class _HTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        if self._exchange is not None:  # the TLS socket: wrapping detached the raw one
            WATCHDOG.watch(self._exchange, self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    _context: ssl.SSLContext | None  # set by HTTPSHandler.__init__; typeshed omits it

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_HTTPSConnection, req, context=self._context)


# An http_proxy in the environment must not swallow a local server's address; elsewhere the
# environment's proxies are read at each request, as urllib does.
_DIRECT = urllib.request.build_opener(_HTTPHandler, _HTTPSHandler, urllib.request.ProxyHandler({}))


def _opener(url: str) -> urllib.request.OpenerDirector:
    return _DIRECT if _is_loopback(url) else urllib.request.build_opener(_HTTPHandler, _HTTPSHandler)


def build_opener(url: str, *handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    """An opener for ``url`` whose sockets :func:`open_watched` can put under a deadline, with
    ``handlers`` added (a loopback URL goes direct, past any proxy in the environment)."""
    direct = (urllib.request.ProxyHandler({}),) if _is_loopback(url) else ()
    return urllib.request.build_opener(_HTTPHandler, _HTTPSHandler, *direct, *handlers)


def open_watched(
    opener: urllib.request.OpenerDirector, request: urllib.request.Request, timeout: float, exchange: Exchange
) -> Any:
    """``opener.open(request)`` with every socket it makes shut once ``exchange``'s deadline passes
    (so is a body read later from the reply); the caller ends the exchange with the watchdog."""
    _exchange.current = exchange
    try:
        return opener.open(request, timeout=timeout)
    finally:
        _exchange.current = None


def fetch(url: str, timeout: float) -> Reply:
    """GET ``url``; never raises for network trouble or HTTP errors. Each read waits at most
    ``timeout``, and the whole exchange must end within twice that."""
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, "Accept": "*/*"})
    _exchange.current = exchange = WATCHDOG.begin(2 * timeout)
    try:
        reply = _get(request, url, timeout)
    finally:
        _exchange.current = None
        WATCHDOG.end(exchange)
    if exchange.shut:  # a read the shut socket ended may look like a short reply
        return Reply(url, None, error=describe_network_error(url, SlowReply(), timeout))
    return reply


def _get(request: urllib.request.Request, url: str, timeout: float) -> Reply:
    try:
        with _opener(url).open(request, timeout=timeout) as response:
            return Reply(url, response.status, _text(_read_body(response)))
    except urllib.error.HTTPError as exc:
        return Reply(url, exc.code, _error_body(exc))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Reply(url, None, error=describe_network_error(url, exc, timeout))


class SlowReply(TimeoutError):
    """The reply kept coming, a little at a time, past its time."""


class TooLarge(ValueError):
    """More than ``MAX_BODY_BYTES`` of body."""


def _read_body(response: Any) -> bytes:
    """All of the body, refused past ``MAX_BODY_BYTES``: a part of it would parse as a
    reading with the rest missing."""
    chunks, size = [], 0
    while chunk := response.read1(min(1 << 16, MAX_BODY_BYTES + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise TooLarge("the reply is too large")
    return b"".join(chunks)


def _error_body(exc: urllib.error.HTTPError) -> str:
    """The words of an error reply, or '' when the server stalls, drops them or sends too many."""
    try:
        return _text(_read_body(exc)) if exc.fp is not None else ""
    except (OSError, http.client.HTTPException, TooLarge):
        return ""


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def describe_network_error(url: str, exc: BaseException, timeout: float) -> str:
    parts = urllib.parse.urlsplit(url)
    where = parts.netloc or url
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return f"nothing is listening on {where} (connection refused)"
    if isinstance(reason, SlowReply):
        return f"{where} sent its reply too slowly: not all of it within {2 * timeout:g} s (a slow proxy?)"
    if isinstance(reason, TooLarge):
        return f"{where} sent a reply over {fmt_bytes(MAX_BODY_BYTES)}, more than cliff-tui reads"
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


def server_reading(
    t: float, source: ServerKind, url: str, status: ServerStatus, message: str, **fields: Any
) -> ServerReading:
    """The reading, its words made inert: messages and reasons quote what the server sent."""
    if "reasons" in fields:
        fields["reasons"] = {k: inert(v) for k, v in fields["reasons"].items()}
    return ServerReading(t=t, source=source, url=inert(url), status=status, message=inert(message), **fields)


def describe_body(reply: Reply) -> str:
    """What a server that is not the one asked for answered, in a few words."""
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


def as_int(value: Any) -> int | None:
    """A count from a server's JSON; None for anything else (a string, NaN, a 400-digit number)."""
    return int(value) if is_number(value) else None
