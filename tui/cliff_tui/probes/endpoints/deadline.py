"""A deadline for each HTTP exchange, kept by one thread for all of them.

A socket's timeout holds for each read, so a server (or a proxy) that sends its reply a byte at a
time would hold a probe for ever. Each exchange registers its sockets as they are made; once its
deadline passes they are shut, which ends the read that waits on them.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass(eq=False)
class Exchange:
    deadline: float
    sockets: list[socket.socket] = field(default_factory=list)
    expired: bool = False
    shut: bool = False  # the deadline passed with a connection open: what was read is cut short


class Watchdog:
    def __init__(self) -> None:
        self._live: set[Exchange] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def begin(self, seconds: float) -> Exchange:
        exchange = Exchange(time.monotonic() + seconds)
        with self._wake:
            if self._started():
                self._live.add(exchange)
                self._wake.notify()
        return exchange

    def end(self, exchange: Exchange) -> None:
        with self._wake:
            self._live.discard(exchange)

    def watch(self, exchange: Exchange, sock: socket.socket) -> None:
        with self._wake:
            exchange.sockets.append(sock)
            if exchange.expired:
                _shut(exchange, sock)

    def _started(self) -> bool:
        """The thread, started at the first exchange; where no thread can start (the interpreter
        is exiting), exchanges go unwatched."""
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
            try:
                thread.start()
            except RuntimeError:
                return False
            self._thread = thread
        return True

    def _run(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for exchange in [e for e in self._live if e.deadline <= now]:
                    self._live.discard(exchange)
                    exchange.expired = True
                    for sock in exchange.sockets:
                        _shut(exchange, sock)
                soonest = min((e.deadline for e in self._live), default=None)
                self._wake.wait(None if soonest is None else soonest - now)


def _shut(exchange: Exchange, sock: socket.socket) -> None:
    """Shut the connection under a TLS socket too: ``SSLSocket.shutdown`` would also drop the
    TLS state that a read in another thread may be using."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # closed already, or detached into a TLS socket (watched in its turn)
        return
    exchange.shut = True


WATCHDOG = Watchdog()
