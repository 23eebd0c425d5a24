"""A GGUF's header over HTTP: Range requests from the file's start, each asking for as much again as
is held, until the tensor infos end; the weights are never asked for.

Bounded as the endpoint probes are (:mod:`cliff_tui.probes.endpoints.http`): every socket of a
command's reads is shut at one deadline; a server that ignores Range is read as a stream only up to
``HEADER_LIMIT``; redirects are followed at most ``MAX_REDIRECTS`` times; the Hub's token goes to
the Hub's origin only, never to the CDN it redirects to; a file replaced between two reads is
refused (``If-Range``), never mixed.
"""

from __future__ import annotations

import http.client
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from cliff_tui.errors import BadInput
from cliff_tui.probes.endpoints.deadline import WATCHDOG, Exchange
from cliff_tui.probes.endpoints.http import build_opener, describe_network_error, open_watched
from cliff_tui.text import inert
from cliff_tui.units import KiB, MiB, fmt_bytes

HEADER_LIMIT = 64 * MiB  # past any real header (a 262k-token vocabulary is 6.2 MiB)
MAX_REDIRECTS = 5  # the Hub redirects once, to its CDN
FIRST_READ = 2 * MiB  # a model's first request: most headers end within it or the next two
PART_FIRST_READ = 256 * KiB  # a split model's later parts hold their tensor infos only
MAX_JSON_BYTES = 16 * MiB
DEFAULT_TIMEOUT = 60.0
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_VALIDATOR = re.compile(r"^[\x21-\x7e][\x20-\x7e]{0,255}$")  # what may be sent back in a header
_USER_AGENT = "cliff-tui"


@dataclass
class Traffic:
    """What a command's remote reads cost: HTTP requests made and body bytes received."""

    requests: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Validators:
    """What says a remote file is the one read before (its ETag, else its Last-Modified)."""

    etag: str | None = None
    last_modified: str | None = None

    def conditional(self) -> dict[str, str]:
        """The headers that ask for the file only where it changed."""
        if self.etag:
            return {"If-None-Match": self.etag}
        if self.last_modified:
            return {"If-Modified-Since": self.last_modified}
        return {}

    def if_range(self) -> dict[str, str]:
        value = self.etag if self.etag and not self.etag.startswith("W/") else self.last_modified
        return {"If-Range": value} if value else {}


class NotModified(Exception):
    """The file is the one its validators describe (HTTP 304)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx comes back as an HTTPError: :meth:`Http.open` follows it, counting and checking."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def shown_url(url: str) -> str:
    """A URL as messages show it: no query (a CDN's signed URL carries its signature there), inert."""
    parts = urllib.parse.urlsplit(url)
    return inert(urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), limit=300)


def origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class Http:
    """One command's HTTP: a deadline for all of its reads, the traffic they cost, and a bearer
    token sent to one origin only (the Hub's, where ``HF_TOKEN`` is set)."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, token: str | None = None, token_origin: str | None = None):
        self.timeout = timeout
        self.traffic = Traffic()
        self._token = token
        self._token_origin = token_origin
        self._exchange: Exchange | None = None
        self._deadline = 0.0

    def __enter__(self) -> Http:
        self._deadline = time.monotonic() + self.timeout
        self._exchange = WATCHDOG.begin(self.timeout)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._exchange is not None:
            WATCHDOG.end(self._exchange)
            self._exchange = None

    def sends_token_to(self, url: str) -> bool:
        return bool(self._token) and origin(url) == self._token_origin

    def open(self, url: str, headers: dict[str, str]) -> tuple[Any, str]:
        """The reply to a GET of ``url`` and the URL that gave it, after redirects; raises
        :class:`NotModified` for a 304 and :class:`BadInput` (one line) for the rest."""
        first = url
        for _ in range(MAX_REDIRECTS + 1):
            try:
                return self._get(url, headers), url
            except urllib.error.HTTPError as exc:
                code, location = exc.code, exc.headers.get("Location")
                exc.close()
                if code == 304:
                    raise NotModified() from None
                if code not in _REDIRECTS:
                    raise BadInput(self.refused(url, code)) from None
                url = self._redirect(url, location)
        raise BadInput(
            f"{shown_url(first)} redirected more than {MAX_REDIRECTS} times (a loop?): "
            "give the file's final URL, or download it and pass its path"
        )

    def _get(self, url: str, headers: dict[str, str]) -> Any:
        assert self._exchange is not None, "Http is used inside `with`"
        remaining = self._deadline - time.monotonic()
        if remaining <= 0 or self._exchange.shut:
            raise BadInput(self.too_slow(url))
        request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, "Accept": "*/*", **headers})
        if self.sends_token_to(url):
            request.add_unredirected_header("Authorization", f"Bearer {self._token}")
        self.traffic.requests += 1
        try:
            return open_watched(build_opener(url, _NoRedirect()), request, min(self.timeout, remaining), self._exchange)
        except urllib.error.HTTPError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BadInput(self.network_error(url, exc)) from None

    def _redirect(self, url: str, location: str | None) -> str:
        if not location:
            raise BadInput(f"{shown_url(url)} answered a redirect without saying where to: a broken server?")
        target = urllib.parse.urljoin(url, location.strip())
        if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
            raise BadInput(f"{shown_url(url)} redirected to {shown_url(target)}, which is not http(s): refused")
        return target

    def read(self, response: Any, n: int, url: str) -> bytes:
        """Up to ``n`` bytes of a reply's body (fewer where it ends), counted; a body that stalls
        meets the deadline."""
        chunks, got = [], 0
        try:
            while got < n:
                chunk = response.read1(min(n - got, 1 << 16))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BadInput(self.network_error(url, exc)) from None
        finally:
            self.traffic.bytes += got
        if self._exchange is not None and self._exchange.shut:
            raise BadInput(self.too_slow(url))
        return b"".join(chunks)

    def get_json(self, url: str) -> Any:
        """A small JSON document (a repository's file list)."""
        import json

        response, final = self.open(url, {"Accept": "application/json"})
        with response:
            body = self.read(response, MAX_JSON_BYTES + 1, final)
        if len(body) > MAX_JSON_BYTES:
            raise BadInput(f"{shown_url(url)} sent over {fmt_bytes(MAX_JSON_BYTES)} of JSON: not a file list")
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            raise BadInput(f"{shown_url(url)} did not answer JSON: is HF_ENDPOINT a Hugging Face Hub?") from None

    def too_slow(self, url: str) -> str:
        return (
            f"{shown_url(url)}: the header did not arrive within {self.timeout:g} s "
            "(a slow server or proxy): try again, or raise --timeout"
        )

    def network_error(self, url: str, exc: BaseException) -> str:
        if self._exchange is not None and self._exchange.shut:
            return self.too_slow(url)
        return f"{shown_url(url)}: {inert(describe_network_error(url, exc, self.timeout))}"

    def refused(self, url: str, code: int) -> str:
        where = shown_url(url)
        hub = self._token_origin is not None and origin(url) == self._token_origin
        if code in (401, 403) and hub:
            if self._token:
                return f"{where}: refused ({code}) with HF_TOKEN: the token has no access (accept the repo's terms?)"
            return f"{where}: refused ({code}): a gated or private repo: set HF_TOKEN to a token with access"
        if code in (401, 403):
            return (
                f"{where}: refused ({code}): cliff-tui sends no credentials there; download the file and pass its path"
            )
        if code == 404:
            return f"{where}: no such file (404): check the URL, or the repo and file name"
        if code == 416:
            return f"{where}: the server has no bytes of it (416): an empty file?"
        return f"{where}: the server answered HTTP {code}"


class RemoteFile:
    """One remote GGUF as a :class:`~cliff_tui.engine.gguf_meta.ByteSource`. The first reply says
    the file's size; later reads go where the redirects led, each a Range request tied to the first
    reply's validator. A server that ignores Range sends the whole file: it is read as a stream, as
    far as the header goes."""

    def __init__(self, http: Http, url: str, first_read: int, cached: Validators | None = None) -> None:
        self.http = http
        self.label = shown_url(url)
        self.limit: int | None = HEADER_LIMIT
        headers = {"Range": f"bytes=0-{first_read - 1}", **(cached.conditional() if cached else {})}
        response, self.url = http.open(url, headers)  # NotModified passes up
        self.validators = Validators(_validator(response, "ETag"), _validator(response, "Last-Modified"))
        self._stream: Any = None
        self._held = 0  # bytes handed out so far (the stream's position)
        if response.status == 206:
            with response:
                start, self.size = self._content_range(response)
                if start != 0:
                    raise BadInput(f"{self.label}: the server sent bytes from {start:,}, not from the start")
                self._first: bytes | None = http.read(response, first_read, self.url)
        elif response.status == 200:
            self._stream, self._first = response, None
            self.size = self._content_length(response)
        else:
            response.close()
            raise BadInput(http.refused(self.url, response.status))

    def _content_range(self, response: Any) -> tuple[int, int]:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range") or "")
        if match is None or match[3] == "*":
            raise BadInput(f"{self.label}: the server's partial reply does not say the file's size (Content-Range)")
        return int(match[1]), _bounded(int(match[3]))

    def _content_length(self, response: Any) -> int:
        try:
            return _bounded(int(response.headers.get("Content-Length") or ""))
        except ValueError:
            self.close()
            raise BadInput(
                f"{self.label}: the server ignores Range and does not say the file's size: "
                "download the file and pass its path"
            ) from None

    def read_at(self, offset: int, at_least: int) -> bytes:
        if self._first is not None and offset == 0:
            data, self._first = self._first, None
            self._held = len(data)
            return data
        if self._stream is not None:
            return self._read_stream(offset, at_least)
        return self._read_range(offset, at_least)

    def _read_stream(self, offset: int, at_least: int) -> bytes:
        assert offset == self._held, "a stream is read in order"
        want = min(max(at_least, offset, 1 * MiB), (self.limit or self.size) - offset)
        data = self.http.read(self._stream, want, self.url)
        self._held += len(data)
        return data

    def _read_range(self, offset: int, at_least: int) -> bytes:
        end = min(offset + max(at_least, offset), self.size, self.limit or self.size)
        headers = {"Range": f"bytes={offset}-{end - 1}", **self.validators.if_range()}
        try:
            response, _ = self.http.open(self.url, headers)
        except NotModified:
            raise BadInput(f"{self.label}: the server answered a range request with 304: a broken server?") from None
        with response:
            if response.status != 206:
                raise BadInput(
                    f"{self.label} changed while its header was read (the server sent the whole file "
                    "instead of a part): try again"
                )
            start, size = self._content_range(response)
            if start != offset or size != self.size:
                raise BadInput(f"{self.label} changed while its header was read: try again")
            data = self.http.read(response, end - offset, self.url)
        self._held = offset + len(data)
        return data

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _validator(response: Any, name: str) -> str | None:
    value = response.headers.get(name)
    return value if isinstance(value, str) and _VALIDATOR.match(value) else None


def _bounded(size: int) -> int:
    if not 0 <= size < 2**63:
        raise BadInput(f"a server claims a file of {size:,} bytes: refused")
    return size


def hub_token() -> str | None:
    return os.environ.get("HF_TOKEN") or None
