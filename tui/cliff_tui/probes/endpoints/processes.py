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

from cliff_tui.probes.endpoints.server_flags import Flag, llama_server_settings, read_flag
from cliff_tui.records import ServerSetting

LLAMA_SERVER_KIND = "llama-server"
OLLAMA_RUNNER = "ollama runner"
OLLAMA_SERVE = "ollama"
LLAMA_CPP_PYTHON = "llama-cpp-python"
LM_STUDIO = "lm-studio"
DEFAULT_PORTS = {LLAMA_SERVER_KIND: 8080, OLLAMA_SERVE: 11434, LLAMA_CPP_PYTHON: 8000, LM_STUDIO: 1234}
# kinds whose HTTP API is llama-server's (/metrics, /slots, /props)
SPEAKS_LLAMA_SERVER = (LLAMA_SERVER_KIND, OLLAMA_RUNNER)
PY_FLAGS = (
    Flag("model", ("--model",), "MODEL", "none"),
    Flag("host", ("--host",), "HOST", "localhost"),
    Flag("port", ("--port",), "PORT", "8000"),
    Flag("ctx_size", ("--n_ctx",), "N_CTX", "2048"),
    Flag("n_gpu_layers", ("--n_gpu_layers",), "N_GPU_LAYERS", "0"),
    Flag("flash_attn", ("--flash_attn",), "FLASH_ATTN", "false"),
    Flag("cache_type_k", ("--type_k",), "TYPE_K", "f16"),
    Flag("cache_type_v", ("--type_v",), "TYPE_V", "f16"),
)
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
    """The kind of server a command line starts, or None."""
    if not argv:
        return None
    exe = os.path.basename(argv[0]).lower()
    base = os.path.basename(name).lower()
    if exe.startswith("llama-server") or base.startswith("llama-server"):
        return OLLAMA_RUNNER if parent.lower().startswith("ollama") else LLAMA_SERVER_KIND
    if exe.startswith("ollama") and len(argv) > 1:
        return {"runner": OLLAMA_RUNNER, "serve": OLLAMA_SERVE}.get(argv[1])
    if exe.startswith("python") and _runs_module(argv, "llama_cpp.server"):
        return LLAMA_CPP_PYTHON
    joined = " ".join(argv).lower()
    if "lm studio" in joined or "lm-studio" in joined or exe in ("lms", "lm-studio"):
        return LM_STUDIO
    return None


def _runs_module(argv: Sequence[str], module: str) -> bool:
    return any(a == "-m" and i + 1 < len(argv) and argv[i + 1] == module for i, a in enumerate(argv))


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
        kind = classify(name, argv, parent)
        if kind is not None:
            found.append(_describe(proc, kind, argv))
    return found


def _describe(proc: psutil.Process, kind: str, argv: tuple[str, ...]) -> ServerProcess:
    unreadable: list[str] = []
    env = _environ(proc, unreadable)
    ports = _listening(proc, unreadable)
    if kind == LLAMA_SERVER_KIND or (kind == OLLAMA_RUNNER and is_llama_server_argv(argv)):
        settings = llama_server_settings(argv, env)
    elif kind == OLLAMA_RUNNER:
        settings = _ollama_runner_settings(argv)
    elif kind == LLAMA_CPP_PYTHON:
        settings = tuple(read_flag(argv, env, f) for f in PY_FLAGS)
    else:
        settings = ()
    guessed = not ports and (bool(unreadable) or _port_given(settings))
    if guessed:
        ports = _port_from_settings(settings)
    return ServerProcess(kind, proc.pid, argv, ports, settings, tuple(unreadable), guessed)


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


def is_llama_server_argv(argv: Sequence[str]) -> bool:
    return os.path.basename(argv[0]).lower().startswith("llama-server")


def _ollama_runner_settings(argv: Sequence[str]) -> tuple[ServerSetting, ...]:
    flags = (
        Flag("model", ("--model",), "", "none"),
        Flag("ctx_size", ("--ctx-size",), "", "unknown"),
        Flag("parallel", ("--parallel",), "", "1"),
        Flag("n_gpu_layers", ("--n-gpu-layers",), "", "unknown"),
        Flag("port", ("--port",), "", "unknown"),
    )
    return tuple(read_flag(argv, {}, f) for f in flags)


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
