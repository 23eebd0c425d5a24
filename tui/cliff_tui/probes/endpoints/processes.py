"""llama.cpp-family servers found by their processes and listening sockets (psutil).

Recognised command lines: ``llama-server …`` (also the one ``ollama serve`` starts as its runner),
``ollama runner --model …`` (older Ollama), ``ollama serve``, ``python -m llama_cpp.server …``
(llama-cpp-python) and LM Studio's server. A process whose ``/proc`` cannot be read (another user,
another PID namespace) is not seen here: the default ports catch it, and the listing says why its
settings are missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from cliff_tui.probes.endpoints.kinds import Kind, recognise
from cliff_tui.records import ServerSetting

ATTRS = ["pid", "name", "cmdline", "ppid"]


@dataclass(frozen=True)
class ServerProcess:
    kind: str
    pid: int
    argv: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]  # (address, port) it listens on, as its sockets say
    settings: tuple[ServerSetting, ...]
    unreadable: tuple[str, ...]  # what of it could not be read, and why
    ports_from_flags: bool = False  # its sockets unreadable: the port its flags name

    @property
    def url(self) -> str | None:
        if not self.ports:
            return None
        address, port = self.ports[0]
        host = "127.0.0.1" if address in ("0.0.0.0", "::", "", "127.0.0.1") else address
        if host == "::1" or ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"


def classify(name: str, argv: Sequence[str], parent: str = "") -> str | None:
    """The name of the kind of server a command line starts, or None."""
    kind = recognise(name, argv, parent)
    return kind.name if kind is not None else None


def find_server_processes(processes: Iterable[psutil.Process] | None = None) -> list[ServerProcess]:
    """Every recognised server process this user can see, with its ports and settings."""
    names: dict[int, str] = {}
    matched: list[tuple[psutil.Process, str, tuple[str, ...]]] = []
    for proc in processes if processes is not None else psutil.process_iter(ATTRS):
        info = getattr(proc, "info", None) or {}
        argv = tuple(info.get("cmdline") or ())
        names[proc.pid] = os.path.basename(argv[0]) if argv else info.get("name") or ""
        if argv:
            matched.append((proc, info.get("name") or "", argv))
    found = []
    for proc, name, argv in matched:
        parent = names.get((getattr(proc, "info", None) or {}).get("ppid") or -1, "")
        kind = recognise(name, argv, parent)
        if kind is not None:
            found.append(_describe(proc, kind, argv))
    return found


def _describe(proc: psutil.Process, kind: Kind, argv: tuple[str, ...]) -> ServerProcess:
    unreadable: list[str] = []
    env = _environ(proc, unreadable)
    ports = _listening(proc, unreadable)
    settings = kind.settings(argv, env)
    guessed = not ports and (bool(unreadable) or _port_given(settings))
    if guessed:
        ports = _port_from_settings(settings)
    return ServerProcess(kind.name, proc.pid, argv, ports, settings, tuple(unreadable), guessed)


def _port_given(settings: tuple[ServerSetting, ...]) -> bool:
    """A runner that does not listen itself names the port its server listens on."""
    return any(s.name == "port" and s.source.startswith("command line") for s in settings)


def _port_from_settings(settings: tuple[ServerSetting, ...]) -> tuple[tuple[str, int], ...]:
    """Its sockets unreadable: the port its flags (or their default) name."""
    values = {s.name: s.value for s in settings}
    try:
        port = int(values.get("port", ""))
    except ValueError:
        return ()
    return ((values.get("host", "127.0.0.1"), port),)


def _environ(proc: psutil.Process, unreadable: list[str]) -> Mapping[str, str]:
    try:
        return proc.environ()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        unreadable.append(f"its environment (/proc/{proc.pid}/environ: permission denied, another user's process)")
    except psutil.NoSuchProcess:
        unreadable.append("its environment (the process ended)")
    return {}


def _listening(proc: psutil.Process, unreadable: list[str]) -> tuple[tuple[str, int], ...]:
    try:
        conns = proc.net_connections(kind="inet")
    except (psutil.AccessDenied, psutil.ZombieProcess):
        unreadable.append(f"its sockets (/proc/{proc.pid}/fd: permission denied, another user's process)")
        return ()
    except psutil.NoSuchProcess:
        unreadable.append("its sockets (the process ended)")
        return ()
    ports = sorted({(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN and c.laddr})
    return tuple(sorted(ports, key=lambda p: (p[0] not in ("127.0.0.1", "0.0.0.0"), p[1])))


def listening_ports() -> dict[int, int | None] | None:
    """Every listening TCP port on this machine → its PID where readable; None where the sockets
    cannot be listed at all."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    return {c.laddr.port: c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}


def engine_child(pid: int, title: str) -> int | None:
    """The child process whose name starts with ``title`` (vLLM's ``VLLM::EngineCore``, which
    holds the model and its KV cache), or None where there is none or it cannot be read."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            if child.name().lower().startswith(title.lower()):
                return child.pid
        except psutil.Error:
            continue
    return None
