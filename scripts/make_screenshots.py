"""Render screenshots/*.svg from deterministic data: the demo sessions and a recorded real
triangulation of SmolLM2 on this project's CPU machine, a recorded attach to a real llama-server
whose context pool four chats fill, a recorded attach to a real vLLM preempting under eight long
requests; and screenshots/serve-browser.png, the
triangulation replayed through ``cliff-tui serve`` in headless Chromium (skipped where Chromium is
absent; a font with ⏸ in it, such as Debian's fonts-symbola, keeps that mark from being drawn as
a box). Run: python scripts/make_screenshots.py"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import browser

from cliff_tui.recording import demo
from cliff_tui.recording.reader import open_recording
from cliff_tui.session import Session
from cliff_tui.ui.app import CliffApp

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
TRIANGULATION = ROOT / "tests" / "data" / "smollm2_triangulation.jsonl"
ATTACH = ROOT / "tests" / "data" / "attach_chat.jsonl"  # scripts/record_attach_session.py
VLLM = ROOT / "tests" / "data" / "attach_vllm.jsonl"  # scripts/record_vllm_session.py


async def shoot(app: CliffApp, name: str, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    async with app.run_test(size=size) as pilot:
        if keys:
            await pilot.press(*keys)
        await pilot.pause(0.5)
        app.save_screenshot(str(OUT / name))
    print(f"wrote screenshots/{name}")


async def main() -> None:
    OUT.mkdir(exist_ok=True)
    await shoot(CliffApp("watch", Session(preload=demo.cpu_watch())), "watch-cpu-only.svg", (100, 30))
    await shoot(CliffApp("run", Session(preload=demo.gpu_cliff_run())), "run-gpu-cliff-demo.svg", (120, 40))
    await shoot(
        CliffApp("replay", Session(recording=open_recording(TRIANGULATION))),
        "triangulate-smollm2.svg",
        (120, 40),
        keys=("space", "end"),
    )
    await shoot(
        CliffApp("replay", Session(recording=open_recording(ATTACH))),
        "attach-chat-pool.svg",
        (120, 40),
        keys=("space", "end"),
    )
    # 10 s before its end: red, 4 preempted in the last minute (at the very end a preempted request
    # resumes, and its inter-token latency, the wait included, reads as 0.1 tok/s for one window)
    await shoot(
        CliffApp("replay", Session(recording=open_recording(VLLM))),
        "attach-vllm-preempting.svg",
        (120, 40),
        keys=("space", "end", "left"),
    )
    await shoot_browser("serve-browser.png")


async def shoot_browser(name: str) -> None:
    """The recorded triangulation replayed at 16× in a browser tab, once it has played to its end."""
    if browser.find_chromium() is None:
        print(f"skipped screenshots/{name}: no chromium (apt-get install chromium)")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "cliff_tui",
        "serve",
        "--bind",
        f"127.0.0.1:{port}",
        "--",
        "replay",
        "--speed",
        "16",
        str(TRIANGULATION.relative_to(ROOT)),
    ]
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_page(f"http://127.0.0.1:{port}/")
        await browser.screenshot(f"http://127.0.0.1:{port}/", OUT / name, size=(1360, 820), settle_s=8.0)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    print(f"wrote screenshots/{name}")


def _wait_page(url: str, limit: float = 60) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with opener.open(url, timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    raise TimeoutError(f"cliff-tui serve did not answer at {url}")


if __name__ == "__main__":
    asyncio.run(main())
