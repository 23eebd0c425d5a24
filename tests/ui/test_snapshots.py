"""SVG snapshots of the real app fed fixed data (no live timers, no sampler thread).

Update them with ``pytest tests/test_snapshots.py --snapshot-update`` after a deliberate change
to the screen, and look at the report before committing.
"""

from __future__ import annotations

from pathlib import Path

from cliff_tui.recording import demo
from cliff_tui.recording.reader import open_recording
from cliff_tui.session import Session
from cliff_tui.ui.app import CliffApp
from ui.test_app import replay_to_the_end, settled

DATA = Path(__file__).parents[1] / "data"
TRIANGULATION = DATA / "smollm2_triangulation.jsonl"


def test_watch_cpu_only_at_80x24(snap_compare):
    app = CliffApp("watch", Session(preload=demo.cpu_watch()))
    assert snap_compare(app, terminal_size=(80, 24), run_before=settled)


def test_gpu_cliff_run_at_120x40(snap_compare):
    app = CliffApp("run", Session(preload=demo.gpu_cliff_run()))
    assert snap_compare(app, terminal_size=(120, 40), run_before=settled)


def test_triangulation_pane_beside_the_tiers_at_200x50(snap_compare):
    app = CliffApp("replay", Session(recording=open_recording(TRIANGULATION)))
    assert snap_compare(app, terminal_size=(200, 50), run_before=replay_to_the_end)


def test_triangulation_pane_below_the_tiers_at_120x40(snap_compare):
    app = CliffApp("replay", Session(recording=open_recording(TRIANGULATION)))
    assert snap_compare(app, terminal_size=(120, 40), run_before=replay_to_the_end)


def test_replayed_frame_mid_run_at_100x30(snap_compare):
    app = CliffApp("replay", Session(recording=open_recording(TRIANGULATION)))

    async def paused_mid_way(pilot):
        await pilot.press("space", "home")
        for _ in range(3):
            await pilot.press("right")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(100, 30), run_before=paused_mid_way)
