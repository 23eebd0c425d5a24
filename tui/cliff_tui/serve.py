"""``cliff-tui serve``: the dashboard in a web browser, through textual-serve.

textual-serve answers the page and, for every browser tab that connects, starts the command line
given (``cliff-tui watch`` by default) under Textual's web driver and relays its screen over a
websocket: each tab is a session of its own, the same app as in a terminal.
"""

from __future__ import annotations

import shlex
import socket
import sys
from collections.abc import Sequence

from cliff_tui.errors import BadInput
from cliff_tui.listen import Bind, listen_error, wide_bind_warning
from cliff_tui.probes.endpoints.http import BadUrl, normalise_url

NOT_SERVED = {
    "serve": "serve cannot serve itself",
    "exporter": "the exporter has no screen: run it directly",
    "export": "export prints tables: run it directly",
    "fit": "fit prints a table: run it directly",
}


def served_command(command: Sequence[str]) -> str:
    """The shell line textual-serve starts for each tab (it runs it through a shell)."""
    if not command:
        command = ["watch"]
    if command[0] in NOT_SERVED:
        raise BadInput(f"cliff-tui serve -- {command[0]}: {NOT_SERVED[command[0]]}")
    return shlex.join([sys.executable, "-m", "cliff_tui", *command])


def public_url(bind: Bind, given: str | None = None) -> str:
    """Where a browser finds the page, which links its scripts and websocket from it: ``given``
    (``--public-url``) checked and without a trailing slash, else the bound address, or this
    machine's name for a wildcard bind (0.0.0.0 would not do)."""
    if given:
        try:
            return normalise_url(given)
        except BadUrl as exc:
            raise BadInput(
                f"--public-url: {exc}: pass the address browsers use (e.g. http://gpu-box:{bind.port})"
            ) from None
    host = bind.host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{bind.port}"


def serve(bind: Bind, command: Sequence[str], url: str | None = None) -> int:
    """Serve until SIGINT/SIGTERM (textual-serve's own handlers)."""
    from textual_serve.server import Server

    if bind.port == 0:
        raise BadInput("--bind: serve needs a fixed port (browsers are sent to it)")
    line = served_command(command)
    url = public_url(bind, url)
    _check_free(bind)
    if not bind.loopback:
        print(wide_bind_warning(bind, "serve"), file=sys.stderr, flush=True)
    title = "cliff-tui " + " ".join(command or ["watch"])
    server = Server(line, host=bind.host, port=bind.port, title=title, public_url=url)
    try:
        server.serve()
    except OSError as exc:
        raise listen_error(bind, exc) from None
    finally:
        end_sessions()
    return 0


def end_sessions(grace_s: float = 3.0) -> None:
    """Stop the apps textual-serve started for the browser tabs: they outlive the server otherwise."""
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass


def _check_free(bind: Bind) -> None:
    """Fail with one line before textual-serve prints its banner and a traceback."""
    try:
        family = socket.getaddrinfo(bind.host, bind.port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((bind.host, bind.port))
    except OSError as exc:
        raise listen_error(bind, exc) from None
