"""Where a front end that serves over HTTP listens (``exporter``, ``serve``): ``--bind HOST:PORT``,
whether that is this machine only, and the one-line errors for an address that cannot be had.

The exporter's default port, 10450, lies outside 9100–9999: Prometheus's list of default exporter
ports (its wiki's "Default port allocations") filled that range in 2023, so every number in it is
some exporter's. 10450 and 10451 (``serve``) are clear of the ports a GPU box running llama.cpp
tends to have open: nvitop-exporter and textual-serve 8000, llama-server 8080, Ollama 11434,
dcgm-exporter 9400, node_exporter 9100, windows_exporter 9182, Prometheus 9090–9093, Grafana 3000,
the kubelet and kube-proxy 10249–10259, Zabbix 10050–10051.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass

from cliff_tui.errors import BadInput

DEFAULT_HOST = "127.0.0.1"
EXPORTER_PORT = 10450
SERVE_PORT = 10451


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_bind(text: str, default_port: int = EXPORTER_PORT) -> Bind:
    """``HOST:PORT``, ``[V6]:PORT``, ``HOST``, ``PORT``, or ``:PORT`` (every interface, as
    Prometheus reads ``--web.listen-address``). Port 0: any free port."""
    value = text.strip()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise BadInput(f"--bind {text}: write an IPv6 address as [ADDRESS]:PORT")
        port = rest[1:] or str(default_port)
    elif _is_port(value):
        host, port = DEFAULT_HOST, value
    elif value.count(":") == 1:
        host, port = value.split(":")
        host = host or "0.0.0.0"
    elif ":" in value:
        raise BadInput(f"--bind {text}: write an IPv6 address as [ADDRESS]:PORT")
    else:
        host, port = value, str(default_port)
    if not host or not _is_port(port) or not _is_host_name(host):
        raise BadInput(f"--bind {text}: expected HOST:PORT with a port from 0 to 65535 (e.g. 127.0.0.1:{default_port})")
    return Bind(host, int(port))


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) <= 65535


def _is_host_name(host: str) -> bool:
    """An address, or a name the resolver can be asked about (IDNA refuses empty and overlong labels)."""
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True


def is_loopback(host: str) -> bool:
    address = _ip(host)
    return host == "localhost" or (address is not None and address.is_loopback)


def _is_link_local(host: str) -> bool:
    address = _ip(host)
    return address is not None and address.is_link_local


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:  # a name
        return None


def wide_bind_warning(bind: Bind, what: str) -> str:
    return (
        f"cliff-tui: warning: {what} listens on {bind}, beyond this machine: whoever reaches that port "
        "reads it (bind 127.0.0.1 and reach it through a tunnel such as ssh -L, or firewall the port)"
    )


def listen_error(bind: Bind, exc: OSError) -> BadInput:
    if exc.errno == errno.EADDRINUSE:
        return BadInput(
            f"cannot listen on {bind}: the port is in use (ss -ltnp names the process): "
            "choose another with --bind HOST:PORT"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return BadInput(f"cannot listen on {bind}: {bind.host} is not an address of this machine")
    if exc.errno == errno.EACCES:
        return BadInput(f"cannot listen on {bind}: permission denied (ports below 1024 need root)")
    if isinstance(exc, socket.gaierror):
        return BadInput(f"cannot listen on {bind}: unknown host {bind.host!r}")
    if exc.errno == errno.EINVAL and _is_link_local(bind.host):  # with its %interface or without
        return BadInput(
            f"cannot listen on {bind}, a link-local address: use another of this machine's "
            f"addresses, or [::]:{bind.port} for all of them"
        )
    return BadInput(f"cannot listen on {bind}: {exc.strerror or exc}")
