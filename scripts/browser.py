"""Headless Chromium driven over the DevTools protocol: load a page, wait until it has drawn, save a
PNG. Used by scripts/make_screenshots.py and the ``serve`` test.

``--screenshot`` with ``--virtual-time-budget`` is not enough for ``cliff-tui serve``: virtual time
runs ahead of the real process that textual-serve starts for the tab, so the shot shows the intro
box. Here the page is polled in real time until a condition holds (textual-serve's page marks its
body ``-first-byte`` once the app's output arrives), then left to settle before the capture.
The flags keep Chromium off the network it would otherwise try on start (a closed network makes it
hang or fail), and each run gets a fresh profile.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
]
FIRST_BYTE = "document.body.classList.contains('-first-byte')"


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class DevTools:
    """Commands over one websocket (flattened sessions); events are read past and dropped."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"id": next(self.ids), "method": method, "params": params}
        if session:
            message["sessionId"] = session
        await self.ws.send_str(json.dumps(message))
        while True:
            reply = json.loads((await self.ws.receive()).data)
            if reply.get("id") == message["id"]:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})


async def screenshot(
    url: str,
    out: Path,
    *,
    size: tuple[int, int] = (1280, 800),
    ready: str = FIRST_BYTE,
    settle_s: float = 2.0,
    timeout_s: float = 90.0,
) -> Path:
    """Load ``url``, wait until the JavaScript ``ready`` is true, wait ``settle_s``, save a PNG."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="cliff-chromium-") as profile:
        proc = subprocess.Popen(
            [chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            endpoint = await _endpoint(Path(profile), proc, timeout_s)
            async with aiohttp.ClientSession() as http, http.ws_connect(endpoint, max_msg_size=0) as ws:
                png = await _shoot(DevTools(ws), url, size, ready, settle_s, timeout_s)
        finally:
            _end_group(proc)
    out.write_bytes(png)
    return out


def _end_group(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """End Chromium and every process it started (renderer, GPU, zygote): one left behind still
    writes into the profile while it is being removed."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc.poll()  # reaps the browser itself; its children are reaped by init
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    proc.wait()


async def _endpoint(profile: Path, proc: subprocess.Popen, timeout_s: float) -> str:
    """Chromium writes the port it chose, and the browser target's path, to DevToolsActivePort."""
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode}")
        lines = active.read_text().split() if active.exists() else []
        if len(lines) >= 2:
            return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        await asyncio.sleep(0.1)
    raise TimeoutError("chromium did not open its DevTools port")


async def _shoot(
    cdp: DevTools, url: str, size: tuple[int, int], ready: str, settle_s: float, timeout_s: float
) -> bytes:
    target = await cdp.call("Target.createTarget", url="about:blank")
    session = (await cdp.call("Target.attachToTarget", targetId=target["targetId"], flatten=True))["sessionId"]
    await cdp.call(
        "Emulation.setDeviceMetricsOverride", session, width=size[0], height=size[1], deviceScaleFactor=1, mobile=False
    )
    await cdp.call("Page.navigate", session, url=url)
    deadline = time.monotonic() + timeout_s
    while True:
        result = await cdp.call("Runtime.evaluate", session, expression=ready, returnByValue=True)
        if result.get("result", {}).get("value") is True:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}: {ready} never became true")
        await asyncio.sleep(0.25)
    await asyncio.sleep(settle_s)
    shot = await cdp.call("Page.captureScreenshot", session, format="png")
    return base64.b64decode(shot["data"])
