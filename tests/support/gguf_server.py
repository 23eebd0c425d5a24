"""A real HTTP server for GGUF files on loopback, for the remote header reader's tests.

aiohttp (installed through textual-serve) in a thread of its own, on two ports: the "Hub" and its
"CDN" (two origins, as huggingface.co and its CDN are). Range, ETag and If-None-Match/If-Range
replies are aiohttp's own ``FileResponse``.

- ``/files/NAME``: a file, with Range;
- ``/{owner}/{repo}/resolve/main/{path}``: the Hub's resolve URL, a 302 to the CDN port (401 for
  a gated repo without the right bearer token);
- ``/api/models/{owner}/{repo}/tree/main``: the Hub's file list;
- ``/no-range/NAME``: the file whole, whatever the Range (a server that ignores it);
- ``/endless``: a GGUF header that never ends, served whole (no Range);
- ``/drip/NAME``: a reply a byte every ``DRIP_S`` seconds;
- ``/loop``: a redirect to itself; ``/status/CODE``: that status;
- ``/changing/NAME``: the file with Range at the first request; after, a new file, whole (replaced).

Every request is logged (path, Range, Authorization, status, the body's length).
"""

from __future__ import annotations

import asyncio
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

DRIP_S = 0.2


@dataclass(frozen=True)
class Hit:
    port: int
    path: str
    range: str | None
    authorization: str | None
    conditional: str | None
    status: int
    length: int | None


class GgufServer:
    def __init__(
        self,
        files: dict[str, Path],
        repos: dict[str, dict[str, Path]] | None = None,
        gated: dict[str, str] | None = None,
    ) -> None:
        """``files``: served by name; ``repos``: "owner/repo" → {path in the repo: file};
        ``gated``: "owner/repo" → the token it wants."""
        self.files = files
        self.repos = repos or {}
        self.gated = gated or {}
        self.hits: list[Hit] = []
        self._changing: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gguf-server", daemon=True)
        self.port = self.cdn_port = 0

    # --- life -------------------------------------------------------------------------------

    def __enter__(self) -> GgufServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the GGUF server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self.cdn_port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application()
        app.on_response_prepare.append(self._log)
        app.router.add_get("/files/{name}", self._file)
        app.router.add_get("/no-range/{name}", self._no_range)
        app.router.add_get("/endless", self._endless)
        app.router.add_get("/drip/{name}", self._drip)
        app.router.add_get("/loop", self._loop_redirect)
        app.router.add_get("/status/{code}", self._status)
        app.router.add_get("/changing/{name}", self._changing_file)
        app.router.add_get("/api/models/{owner}/{repo}/tree/main", self._tree)
        app.router.add_get("/cdn/{owner}/{repo}/{path:.+}", self._cdn)
        app.router.add_get("/{owner}/{repo}/resolve/main/{path:.+}", self._resolve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        hub, cdn = web.TCPSite(self._runner, "127.0.0.1", 0), web.TCPSite(self._runner, "127.0.0.1", 0)
        await hub.start()
        await cdn.start()
        self.port = hub._server.sockets[0].getsockname()[1]
        self.cdn_port = cdn._server.sockets[0].getsockname()[1]

    async def _log(self, request: web.Request, response: web.StreamResponse) -> None:
        """Called as each reply's head is sent: its status and length are final."""
        headers = request.headers
        conditional = headers.get("If-None-Match") or headers.get("If-Modified-Since") or headers.get("If-Range")
        length = response.headers.get("Content-Length")
        self.hits.append(
            Hit(
                request.url.port or 0,
                request.path,
                headers.get("Range"),
                headers.get("Authorization"),
                conditional,
                response.status,
                int(length) if length else None,
            )
        )

    # --- routes -----------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        if name not in self.files:
            raise web.HTTPNotFound()
        return self.files[name]

    async def _file(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(self._path(request.match_info["name"]))

    async def _no_range(self, request: web.Request) -> web.StreamResponse:
        path = self._path(request.match_info["name"])
        response = web.StreamResponse(headers={"Content-Length": str(path.stat().st_size)})
        await response.prepare(request)
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                try:
                    await response.write(chunk)
                except (ConnectionError, RuntimeError):  # the reader had what it needed and left
                    break
        return response

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        """``GGUF`` v3, no tensors, one key holding an array of 2^40 empty strings: a header with no end."""
        head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"x" + struct.pack("<IIQ", 9, 8, 2**40)
        response = web.StreamResponse(headers={"Content-Length": str(2**44)})
        await response.prepare(request)
        await response.write(head)
        zeros = bytes(1 << 20)
        try:
            while True:
                await response.write(zeros)
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def _drip(self, request: web.Request) -> web.StreamResponse:
        data = self._path(request.match_info["name"]).read_bytes()[:4096]
        response = web.StreamResponse(
            status=206,
            headers={"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}", "Content-Length": str(len(data))},
        )
        await response.prepare(request)
        try:
            for i in range(len(data)):
                await response.write(data[i : i + 1])
                await asyncio.sleep(DRIP_S)
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def _loop_redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/loop")

    async def _status(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=int(request.match_info["code"]), text="no")

    async def _changing_file(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name in self._changing:  # replaced since: If-Range does not match, the whole new file comes
            return web.Response(body=b"a new file", headers={"ETag": '"replaced"'})
        self._changing.add(name)
        return web.FileResponse(self._path(name))

    def _repo(self, request: web.Request) -> tuple[str, dict[str, Path]]:
        repo = f"{request.match_info['owner']}/{request.match_info['repo']}"
        if repo not in self.repos:
            raise web.HTTPNotFound()
        wanted = self.gated.get(repo)
        if wanted is not None and request.headers.get("Authorization") != f"Bearer {wanted}":
            raise web.HTTPUnauthorized()
        return repo, self.repos[repo]

    async def _tree(self, request: web.Request) -> web.StreamResponse:
        _, files = self._repo(request)
        listing = [{"type": "directory", "path": "docs"}]
        listing += [{"type": "file", "path": p, "size": f.stat().st_size} for p, f in files.items()]
        return web.json_response(listing)

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        repo, files = self._repo(request)
        path = request.match_info["path"]
        if path not in files:
            raise web.HTTPNotFound()
        raise web.HTTPFound(f"{self.cdn_url}/cdn/{repo}/{path}?signature=secret-in-the-query")

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        repo = f"{request.match_info['owner']}/{request.match_info['repo']}"
        files = self.repos.get(repo, {})
        path = request.match_info["path"]
        if path not in files:
            raise web.HTTPNotFound()
        return web.FileResponse(files[path])
