"""Looking for llama.cpp-family servers: by their processes and sockets (:func:`find_servers`),
and llama-server and Ollama on their default loopback ports (:func:`discover`)."""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from dataclasses import dataclass

import psutil

from cliff_tui.events import ServerReading
from cliff_tui.probes.endpoints.http import fetch, normalise_url
from cliff_tui.probes.endpoints.kinds import (
    APIS,
    LLAMA_SERVER_API,
    OLLAMA_SERVE,
    Api,
    Kind,
    fallback_ports,
    is_llama_server_argv,
    kind_for_api,
    kind_named,
    kind_on_port,
)
from cliff_tui.probes.endpoints.processes import ServerProcess, find_server_processes, listening_ports
from cliff_tui.probes.endpoints.server_flags import FLAGS, llama_server_settings
from cliff_tui.records import FoundServer, ServerSetting
from cliff_tui.text import inert

DEFAULT_URLS = {name: api.default_url for name, api in APIS.items()}


@dataclass(frozen=True)
class Discovery:
    found: dict[str, str]  # source → base URL
    readings: dict[str, ServerReading]  # source → the reading that decided
    message: str


def is_found(reading: ServerReading) -> bool:
    """The server is there (even if it needs a flag); only silence or another program is not."""
    return reading.status not in ("unreachable", "not-llama")


def discover(timeout: float = 1.0, urls: dict[str, str] | None = None) -> Discovery:
    """Look for llama-server on 8080 and Ollama on 11434 (loopback) and say what was found."""
    urls = urls or DEFAULT_URLS
    readings = {source: APIS[source].probe(url, timeout).reading for source, url in urls.items()}
    found = {source: r.url for source, r in readings.items() if is_found(r)}
    return Discovery(found, readings, describe_discovery(readings))


def describe_discovery(readings: dict[str, ServerReading]) -> str:
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


# --- servers found by their processes ---------------------------------------------------------

FALLBACK_PORTS = fallback_ports()  # llama-server's old and new defaults, Ollama, LM Studio
HIDDEN = (
    "its process could not be read (another user's, or in another PID namespace): command line, "
    "environment and memory unknown"
)


@dataclass(frozen=True)
class Found:
    """Every server found, the busiest first (the one attach follows); ``others`` may be empty."""

    servers: list[FoundServer]

    @property
    def chosen(self) -> FoundServer | None:
        readable = [s for s in self.servers if attachable(s) and is_answering(s)]
        return readable[0] if readable else None


def attachable(s: FoundServer) -> bool:
    kind = kind_named(s.kind)
    return kind is not None and kind.attachable


def is_answering(s: FoundServer) -> bool:
    return s.status in ("ok", "no-metrics", "error")


def find_servers(timeout: float = 1.0, *, ports: tuple[int, ...] = FALLBACK_PORTS) -> Found:
    """Servers by their processes, then anything answering on the default ports that no process of
    ours explained; each read once, ordered busiest first."""
    found = _one_per_url([_read_process(p, timeout) for p in find_server_processes()])
    covered = {urllib.parse.urlsplit(s.url).port for s in found if s.url}
    owners = listening_ports()
    for port in ports:
        if port in covered:
            continue
        server = _read_port(port, owners, timeout)
        if server is not None:
            found.append(server)
    found.sort(key=_busyness, reverse=True)
    return Found(found)


def _one_per_url(found: list[FoundServer]) -> list[FoundServer]:
    """A runner and the server it started may name one URL: the one that listens is kept."""
    by_url: dict[str, FoundServer] = {}
    out = []
    for s in found:
        if not s.url:
            out.append(s)
        elif s.url not in by_url or "port from its flags" in by_url[s.url].how:
            by_url[s.url] = s
    return out + list(by_url.values())


def _busyness(s: FoundServer) -> tuple[bool, bool, int, int]:
    return (attachable(s) and is_answering(s), s.status == "ok", s.processing, s.tokens_held)


def _read_process(p: ServerProcess, timeout: float) -> FoundServer:
    what, cmd = f"process {p.pid}", f"({_short_command(p.argv)})"
    if p.url is None:
        why = "; ".join(p.unreadable) or "it listens on no TCP port (still loading the model, or a UNIX socket)"
        return FoundServer(p.kind, "", f"{what} {cmd}, not listening", p.pid, "unreachable", why, p.settings)
    where = urllib.parse.urlsplit(p.url).netloc
    how = f"{what}, port from its flags: {where} {cmd}" if p.ports_from_flags else f"{what} listening on {where} {cmd}"
    server = FoundServer(p.kind, p.url, how, p.pid, settings=p.settings, unreadable="; ".join(p.unreadable))
    return _read_api(server, timeout, argv=p.argv)


def _read_port(port: int, owners: dict[int, int | None] | None, timeout: float) -> FoundServer | None:
    url = f"http://127.0.0.1:{port}"
    if owners is not None and port not in owners:
        return None  # nothing listens there: not worth an HTTP try
    kind = kind_on_port(port)
    server = FoundServer(kind.name, url, f"default port {port} answered", None, unreadable=HIDDEN)
    server = _read_api(server, timeout)
    if kind.api is LLAMA_SERVER_API and server.status == "not-llama" and "Ollama" in server.message:
        server = _read_api(dataclasses.replace(server, kind=OLLAMA_SERVE.name), timeout)
    return server if server.status != "unreachable" else None


def _read_api(server: FoundServer, timeout: float, argv: tuple[str, ...] = ()) -> FoundServer:
    kind = kind_named(server.kind)
    if kind is None:
        return server
    if kind.api is LLAMA_SERVER_API:
        return _read_llama(server, timeout, argv)
    if kind.api is not None:
        r = kind.api.probe(server.url, timeout).reading
        return dataclasses.replace(server, status=r.status, message=r.message)
    return _read_list(server, kind, timeout)


def _read_list(server: FoundServer, kind: Kind, timeout: float) -> FoundServer:
    """A kind cliff-tui lists but does not read: which models it has loaded."""
    path = kind.list_path
    reply = fetch(server.url + path, timeout)
    if reply.status is None:
        return dataclasses.replace(server, status="unreachable", message=reply.error or "no answer")
    body = reply.json()
    ok = reply.status == 200 and isinstance(body, dict) and isinstance(body.get("data"), list)
    models = ", ".join(_model_words(m) for m in body["data"] if isinstance(m, dict) and _loaded(m)) if ok else ""
    message = f"{path}: {models or 'no model loaded'}" if ok else f"{path} gave HTTP {reply.status}"
    return dataclasses.replace(server, status="listed" if ok else "not-llama", message=message)


def _loaded(model: dict) -> bool:
    """LM Studio lists every downloaded model with its state; an OpenAI-style list, only loaded ones."""
    return model.get("state", "loaded") == "loaded"


def _model_words(model: dict) -> str:
    context = model.get("loaded_context_length") or model.get("max_context_length")
    return inert(str(model.get("id"))) + (f" (context {context:,})" if isinstance(context, int) else "")


def _read_llama(server: FoundServer, timeout: float, argv: tuple[str, ...]) -> FoundServer:
    r = LLAMA_SERVER_API.probe(server.url, timeout).reading
    props_reply = fetch(server.url + "/props", timeout) if r.status in ("ok", "no-metrics") else None
    props = props_reply.json() if props_reply is not None and props_reply.status == 200 else None
    settings = server.settings
    if props is not None and (not argv or is_llama_server_argv(argv)):
        settings = _with_props(server.settings, argv, props)
    held = sum(s.tokens_used or 0 for s in r.slots)
    busy = r.requests_processing or sum(1 for s in r.slots if s.processing)
    return dataclasses.replace(
        server, status=r.status, message=r.message, settings=settings, tokens_held=held, processing=busy
    )


def _with_props(settings: tuple[ServerSetting, ...], argv: tuple[str, ...], props: object) -> tuple[ServerSetting, ...]:
    """Recomputed with /props; the environment already read stays as it was read."""
    env = {f.env: s.value for s in settings for f in FLAGS if f.name == s.name and s.source.startswith("environment")}
    fresh = llama_server_settings(argv, env, props)
    if argv:
        return fresh
    return tuple(s for s in fresh if s.source.startswith("/props"))


def _short_command(argv: tuple[str, ...], limit: int = 60) -> str:
    text = " ".join(os.path.basename(a) if "/" in a else a for a in argv)
    return inert(text if len(text) <= limit else text[: limit - 1] + "…")


# --- a server named by its URL ----------------------------------------------------------------

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "::")
NOT_VISIBLE = "its memory is not visible from here"


def resolve_url(api: Api, url: str, timeout: float = 1.0) -> FoundServer:
    """A server named by URL, as discovery would have found it: the process that listens on that
    port where it is a server of a known kind on this machine; otherwise its API alone, and one
    line on why its process cannot be seen (another host, a proxy or tunnel, another namespace)."""
    parts = urllib.parse.urlsplit(url)
    host, port = (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)
    if not _is_this_machine(host):
        return _api_only(api, url, f"{host} is another host: reading only its API, {NOT_VISIBLE}", timeout)
    owners = listening_ports()
    if owners is None:
        return _api_only(
            api, url, f"this machine's sockets cannot be listed: reading only its API, {NOT_VISIBLE}", timeout
        )
    if port not in owners:
        why = f"nothing on this machine listens on port {port} in this network namespace"
        return _api_only(
            api, url, f"{why} (a container or another namespace?): reading only its API, {NOT_VISIBLE}", timeout
        )
    pid = owners[port]
    process = next((p for p in find_server_processes() if p.pid == pid), None) if pid is not None else None
    if process is not None:
        return dataclasses.replace(
            _read_process(process, timeout), url=normalise_url(url), how=_named_how(process, port)
        )
    return _api_only(api, url, f"{_listener(pid, port)}: reading only its API, {NOT_VISIBLE}", timeout)


def _named_how(process: ServerProcess, port: int) -> str:
    return f"named by URL; process {process.pid} listens on port {port} ({_short_command(process.argv)})"


def _listener(pid: int | None, port: int) -> str:
    if pid is None:
        return f"the process listening on port {port} cannot be read (another user's, or another PID namespace)"
    try:
        name = inert(psutil.Process(pid).name())
    except (psutil.Error, OSError):
        name = "?"
    return f"port {port} is served by {name} (PID {pid}), not by a llama.cpp server: a proxy, a tunnel or a published container port"


def _api_only(api: Api, url: str, how: str, timeout: float) -> FoundServer:
    """Read only through its API, which its poller reads from the start."""
    return FoundServer(kind_for_api(api).name, normalise_url(url), how, None, status="named")


def _is_this_machine(host: str) -> bool:
    if host in LOOPBACK_NAMES or host.startswith("127."):
        return True
    try:
        return any(a.address.split("%")[0].lower() == host for addrs in psutil.net_if_addrs().values() for a in addrs)
    except OSError:
        return False


def describe_found(found: Found) -> str:
    """One line: what attach follows and how it was found, and what else there is."""
    chosen = found.chosen
    if chosen is None:
        if not found.servers:
            return f"no llama.cpp server found (no such process; nothing on ports {_ports()})"
        return "found, but none to attach to: " + "; ".join(found_line(s) for s in found.servers)
    text = f"attached to {chosen.kind} at {chosen.url}: {chosen.how}"
    others = [s for s in found.servers if s is not chosen]
    if others:
        text += f"; {len(others)} other{'s' if len(others) > 1 else ''} (attach --list)"
    return text


def found_line(s: FoundServer) -> str:
    where = s.url or "no port"
    line = f"{s.kind} {where} — {s.how} [{s.status}]"
    if s.message:
        line += f": {s.message}"
    if s.unreadable:
        line += (
            f"; could not read {s.unreadable}" if not s.unreadable.startswith("its process") else f"; {s.unreadable}"
        )
    return line


def _ports() -> str:
    return ", ".join(str(p) for p in FALLBACK_PORTS)
