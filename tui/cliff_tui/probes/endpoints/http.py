"""HTTP for the endpoint probes: one GET that never raises for network trouble, URL checks, and the
one-line descriptions of what went wrong."""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from cliff_tui.events import ServerKind, ServerStatus, SessionReading
from cliff_tui.probes.endpoints.prometheus import parse_prometheus
from cliff_tui.text import inert
from cliff_tui.units import MiB, fmt_bytes, is_number

MAX_BODY_BYTES = 16 * MiB  # /slots carries every slot's prompt text: large in a long chat
# what a user may paste after the base URL: the servers' own API paths (the longest first)
_API_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/chat/completions",
              "/completions", "/completion", "/embeddings", "/models", "/metrics", "/slots", "/props", "/health",
              "/tokenize", "/api/generate", "/api/chat", "/api/tags", "/api/ps", "/api/version")
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
        raise BadUrl(f"the URL for {authority.rsplit('@', 1)[1]!r} carries a user name or password, which "
                     "cliff-tui does not send (nor print): give http(s)://host[:port]")
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:  # an unclosed or invalid [IPv6] host
        raise BadUrl(f"{url!r} is not an http(s)://host[:port] URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in parts.netloc):
        raise BadUrl(f"{url!r} is not an http(s)://host[:port] URL")
    try:
        parts.port
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


class _Watchdog:
    """Shuts a request's sockets once its time is up. The socket's timeout holds for each read,
    so a server sending its headers or body a byte at a time would otherwise hold the probe for
    ever; a shut socket ends the read that waits on it."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> "_Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Shut the connection under a TLS socket too: ``SSLSocket.shutdown`` would also drop the
    TLS state that a read in another thread may be using."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


def _watched(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
    class Watched(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, watchdog: _Watchdog, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._watchdog = watchdog

        def connect(self) -> None:
            super().connect()
            self._watchdog.watch(self.sock)

    return Watched


_HTTP, _HTTPS = _watched(http.client.HTTPConnection), _watched(http.client.HTTPSConnection)


class _WatchedHTTP(urllib.request.HTTPHandler):
    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self._watchdog = watchdog

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_HTTP, req, watchdog=self._watchdog)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self._watchdog = watchdog

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_HTTPS, req, watchdog=self._watchdog, context=self._context)


def _opener(url: str, watchdog: _Watchdog) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_WatchedHTTP(watchdog), _WatchedHTTPS(watchdog)]
    if _is_loopback(url):  # an http_proxy in the environment must not swallow a local server's address
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


def fetch(url: str, timeout: float) -> Reply:
    """GET ``url``; never raises for network trouble or HTTP errors. Each read waits at most
    ``timeout``, and the whole reply must come within twice that."""
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, "Accept": "*/*"})
    with _Watchdog(2 * timeout) as watchdog:
        try:
            with _opener(url, watchdog).open(request, timeout=timeout) as response:
                reply = Reply(url, response.status, _text(_read_body(response)))
        except urllib.error.HTTPError as exc:
            reply = Reply(url, exc.code, _error_body(exc))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            reply = Reply(url, None, error=describe_network_error(url, exc, timeout))
    if watchdog.fired:  # a read the shut socket ended may look like a short reply
        return Reply(url, None, error=describe_network_error(url, SlowReply(), timeout))
    return reply


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
        return f"{where} sent more than {fmt_bytes(MAX_BODY_BYTES)}: not a reply cliff-tui reads (the wrong URL?)"
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


def server_reading(t: float, source: ServerKind, url: str, status: ServerStatus, message: str,
                   **fields: Any) -> SessionReading:
    """The reading, its words made inert: messages and reasons quote what the server sent."""
    if "reasons" in fields:
        fields["reasons"] = {k: inert(v) for k, v in fields["reasons"].items()}
    return SessionReading(t=t, source=source, url=inert(url), status=status, message=inert(message), **fields)


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
