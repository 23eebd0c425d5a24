"""Render screenshots/*.svg from deterministic data: the demo sessions and a recorded real
triangulation of SmolLM2 on this project's CPU machine. Run: python scripts/make_screenshots.py"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cliff_tui.recording import demo
from cliff_tui.recording.reader import open_recording
from cliff_tui.session import Session
from cliff_tui.ui.app import CliffApp

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
TRIANGULATION = ROOT / "tests" / "data" / "smollm2_triangulation.jsonl"


async def shoot(app: CliffApp, name: str, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    async with app.run_test(size=size) as pilot:
        if keys:
            await pilot.press(*keys)
        await pilot.pause(0.5)
        app.save_screenshot(str(OUT / name))
    print(f"wrote screenshots/{name}")


async def main() -> None:
    OUT.mkdir(exist_ok=True)
    await shoot(CliffApp("watch", Session(preload=demo.cpu_watch())), "watch-cpu-only.svg", (80, 24))
    await shoot(CliffApp("run", Session(preload=demo.gpu_cliff_run())), "run-gpu-cliff-demo.svg", (120, 40))
    await shoot(CliffApp("replay", Session(recording=open_recording(TRIANGULATION))), "triangulate-smollm2.svg",
                (170, 50), keys=("space", "end"))


if __name__ == "__main__":
    asyncio.run(main())
