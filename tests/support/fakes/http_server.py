"""A thin loopback HTTP server for tests: serves recorded bodies on 127.0.0.1, port 0, in a thread.

    with FakeHttpServer({"/metrics": Route.file("llama_metrics_idle.txt")}) as server:
        read_llama_server(server.url)

A path given a list of routes answers them in turn, then repeats the last one (two scrapes of a
counter that moved, say). Unknown paths answer 404 like a plain web server.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data" / "endpoints"
_TYPES = {
    ".json": "application/json; charset=utf-8",
    ".txt": "text/plain; version=0.0.4",
    ".html": "text/html; charset=utf-8",
}


@dataclass(frozen=True)
class Route:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain"
    delay_s: float = 0.0  # answer late (a hung server)
    drop: bool = False  # close the connection without answering
    stall_body_s: float = 0.0  # send the status line and headers, then wait before the body
    trickle_s: float = 0.0  # send the body a byte at a time, this long apart (a slow proxy)
    trickle_head_s: float = 0.0  # the same for the status line and headers

    @classmethod
    def file(cls, name: str, status: int = 200, delay_s: float = 0.0) -> Route:
        path = DATA / name
        return cls(status, path.read_bytes(), _TYPES.get(path.suffix, "application/octet-stream"), delay_s)

    @classmethod
    def text(cls, body: str, status: int = 200, content_type: str = "text/plain") -> Route:
        return cls(status, body.encode(), content_type)


Routes = Route | Sequence[Route]


class FakeHttpServer:
    def __init__(self, routes: dict[str, Routes] | None = None) -> None:
        self._routes: dict[str, list[Route]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.hits: list[str] = []
        for path, route in (routes or {}).items():
            self.route(path, route)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-http", daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def route(self, path: str, route: Routes) -> None:
        with self._lock:
            self._routes[path] = [route] if isinstance(route, Route) else list(route)

    def start(self) -> FakeHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeHttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_route(self, path: str) -> Route | None:
        with self._lock:
            self.hits.append(path)
            queue = self._routes.get(path)
            if not queue:
                return None
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                route = server.next_route(self.path.split("?")[0])
                if route is None:
                    route = Route.text("Not Found", 404)
                if route.delay_s and server._stopping.wait(route.delay_s):
                    return
                if route.drop:
                    self.close_connection = True
                    return
                self.send_response(route.status)
                self.send_header("Content-Type", route.content_type)
                self.send_header("Content-Length", str(len(route.body)))
                if route.trickle_head_s:
                    head, self._headers_buffer = b"".join(self._headers_buffer) + b"\r\n", []
                    if not self._trickle(head, route.trickle_head_s):
                        return
                else:
                    self.end_headers()
                if route.stall_body_s:
                    self.wfile.flush()
                    if server._stopping.wait(route.stall_body_s):
                        return
                if route.trickle_s:
                    self._trickle(route.body, route.trickle_s)
                    return
                self.wfile.write(route.body)

            def _trickle(self, data: bytes, every_s: float) -> bool:
                """Write ``data`` a byte at a time; False when the server is stopping."""
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    if server._stopping.wait(every_s):
                        return False
                return True

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port() -> int:
    return closed_port()
