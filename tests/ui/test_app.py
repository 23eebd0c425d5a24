"""The real Textual app driven by Pilot: watch, run, triangulate, replay, keys and errors."""

from __future__ import annotations

import gc
import os
import re
import time

import pytest

from cliff_tui.events import DecodeWindow, Notice, Sample, TargetChosen
from cliff_tui.jobs.run import RunJob
from cliff_tui.probes.cgroup import read_cpu_quota
from cliff_tui.probes.sampler import Sampler
from cliff_tui.recording import demo
from cliff_tui.recording.reader import open_recording
from cliff_tui.recording.writer import Recorder, RecordingSetup
from cliff_tui.records import RamReading, RunSettings, SwapReading
from cliff_tui.session import Session
from cliff_tui.ui import app as app_module
from cliff_tui.ui.app import CliffApp
from cliff_tui.units import GiB
from screen import screen_text, wait_for


async def test_watch_shows_ram_says_why_no_vram_and_quits_fast():
    app = CliffApp("watch", Session(sampler=Sampler(), interval=0.2))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(app.store.history.get("ram.used")) >= 3)
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "System RAM" in text and "Swap" in text
        assert "No VRAM tier" in text and "RAM and swap are the memory tiers" in text
        assert "no token source" in text
        assert ("CPU quota" in text) == (read_cpu_quota() is not None)  # shown only where one applies
        t = time.monotonic()
        await pilot.press("q")
    assert time.monotonic() - t < 5  # not held by a sampler or a worker left running


async def test_watch_of_a_process_held_to_a_cpu_quota_shows_the_quota_running_out():
    """As root: a spinning child in a cgroup held to half a CPU; every period runs out."""
    import subprocess
    import sys

    from cgroup_fixtures import quota_cgroup

    spin = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
    with quota_cgroup(50_000) as made:
        child = made.popen([sys.executable, "-c", spin], stdout=subprocess.DEVNULL)
        app = CliffApp("watch", Session(sampler=Sampler(pid=child.pid), interval=0.2))
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(
                pilot,
                lambda: (use := app.store.machine.quota_use) is not None and use.throttled_share is not None,
                timeout=20,
            )
            await pilot.pause(0.3)
            text = screen_text(app)
    assert f"CPU quota  0.5 CPUs  · cgroup {made.path} (PID {child.pid}'s)" in text
    # named as spent; how often depends on the CPU the rest of the machine leaves the child
    assert re.search(r"throttled in \d+% of its periods over the last \d+ s: its processes spent the quota", text)


async def test_the_keys_line_names_the_keys_and_a_click_on_one_runs_it():
    app = CliffApp("watch", Session(sampler=Sampler(), interval=0.2))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.store.machine.latest is not None)
        await pilot.pause(0.2)
        keys = screen_text(app).splitlines()[-1]
        assert keys.split() == ["q", "Quit", "p", "Pause", "?", "Help", "l", "Log", "r", "Record"]
        await pilot.click(offset=(keys.index("Help"), 23))
        await pilot.pause(0.2)
        assert type(app.screen).__name__ == "HelpScreen"


async def test_a_settled_screen_collects_the_cycles_its_frames_leave(monkeypatch):
    """Once the first frame is up the screen freezes start-up's objects and collects on a steady
    pace; it thaws them when it closes."""
    monkeypatch.setattr(app_module, "COLLECT_EVERY_S", 0.4)
    full: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    assert gc.get_freeze_count() == 0
    app = CliffApp("watch", Session(sampler=Sampler(), interval=0.2))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: gc.get_freeze_count() > 0, timeout=10)
            gc.callbacks.append(count)
            await wait_for(pilot, lambda: len(full) >= 3, timeout=30)
    finally:
        if count in gc.callbacks:
            gc.callbacks.remove(count)
    assert len(full) >= 3 and sum(full) > 0
    assert gc.get_freeze_count() == 0  # thawed as it closed


async def test_pause_freezes_the_screen_and_help_and_log_open():
    app = CliffApp("watch", Session(sampler=Sampler(), interval=0.2))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.store.machine.latest is not None)
        await pilot.press("p")
        assert app.paused and "PAUSED" in screen_text(app)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        assert "The three signs" in screen_text(app)
        await pilot.press("escape")
        await pilot.press("l")
        await pilot.pause(0.2)
        assert "llama.cpp log" in screen_text(app)
        await pilot.press("escape")
        await pilot.press("p")
        assert not app.paused


async def test_run_shows_tok_s_and_the_verdict(tiny_model):
    job = RunJob(RunSettings(str(tiny_model), 256, 16))
    app = CliffApp("run", Session(sampler=Sampler(pid=os.getpid()), job=job, interval=0.2))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.store.runs.results)
        await pilot.pause(0.5)
        text = screen_text(app)
        assert "Tokens/s" in text and "baseline" in text
        assert "done · n_ctx 512" in text
        assert app.store.runs.results[0].verdict.level in text
        await pilot.press("l")
        await pilot.pause(0.2)
        assert "KV buffer size" in screen_text(app)


@pytest.mark.model
async def test_q_during_the_prefill_exits_without_waiting_for_it(smollm2):
    job = RunJob(RunSettings(str(smollm2), 16_000, 32))
    app = CliffApp("run", Session(sampler=Sampler(pid=os.getpid()), job=job, interval=0.25))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(
            pilot,
            lambda: (
                app.store.runs.current is not None
                and app.store.runs.current.progress is not None
                and app.store.runs.current.progress.phase == "prefill"
            ),
        )
        t = time.monotonic()
        await pilot.press("q")
    elapsed = time.monotonic() - t
    workers = [w for w in app.workers if w.name == "job"]
    assert all(w.is_finished for w in workers) or not workers
    assert app.store.runs.current.progress.depth < 16_000 and not app.store.runs.results
    assert elapsed < 10  # the prefill left takes minutes here


async def test_a_bad_model_shows_an_error_panel_and_keeps_running(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a model")
    app = CliffApp("run", Session(sampler=Sampler(), job=RunJob(RunSettings(str(bad), 256, 16)), interval=0.2))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.store.runs.last_failure is not None)
        await wait_for(pilot, lambda: "is not a GGUF file" in screen_text(app), timeout=10)
        assert app.is_running


async def test_triangulate_fills_the_pane_as_runs_complete(tiny_model):
    from cliff_tui.jobs.triangulate import TriangulateJob

    base = RunSettings(str(tiny_model), 0, 8)
    job = TriangulateJob(base, depths=[128, 256, 512], target=2048, reserve=None, kv_types=[("f16", "f16")])
    app = CliffApp("triangulate", Session(sampler=Sampler(), job=job, interval=0.25))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(app.store.runs.results) >= 1, timeout=120)
        await pilot.pause(0.5)
        assert "peak" in screen_text(app) and "Δtrend" in screen_text(app)
        await wait_for(pilot, lambda: len(app.store.runs.results) == 3, timeout=180)
        await pilot.pause(0.5)
        text = screen_text(app)
        assert "largest context before" in text
        assert "linear" in text
        assert "context (tokens)" in text  # the chart's axis


@pytest.fixture
def demo_recording(tmp_path):
    path = tmp_path / "demo.jsonl"
    with Recorder.create(path, RecordingSetup(["test"])) as recorder:
        for event in demo.gpu_cliff_run():
            recorder.write(event)
    return open_recording(path)


async def test_target_key_changes_the_projection(demo_recording):
    app = CliffApp("replay", Session(recording=demo_recording, speed=16))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("t")
        await pilot.pause(0.2)
        for _ in range(10):
            await pilot.press("backspace")
        await pilot.press(*"48k", "enter")
        await pilot.pause(0.2)
        assert app.store.runs.target == 48_000


async def test_a_replay_names_the_keys_that_move_it_and_a_click_on_one_runs_it(demo_recording):
    app = CliffApp("replay", Session(recording=demo_recording, speed=1))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.2)
        keys = screen_text(app).splitlines()[-1]
        assert keys.split() == [
            "q",
            "Quit",
            "space",
            "Play/Pause",
            "s",
            "Speed",
            "←",
            "-10s",
            "→",
            "+10s",
            "?",
            "Help",
            "l",
            "Log",
            "r",
            "Record",
        ]
        await pilot.click(offset=(keys.index("Speed"), 35))
        assert app.session.player.speed == 4


async def test_replay_keys_move_the_time_cursor(demo_recording):
    app = CliffApp("replay", Session(recording=demo_recording, speed=1))
    async with app.run_test(size=(120, 36)) as pilot:
        player = app.session.player
        await pilot.press("space")  # pause
        assert not player.playing
        await pilot.press("end")
        assert player.position == player.t_end
        assert app.store.runs.results and app.store.signs.current[3].level == "red"
        await pilot.press("home")
        assert player.position == player.t_start
        assert not app.store.runs.results
        await pilot.press("right")
        assert player.position == pytest.approx(player.t_start + 10)
        before = player.cursor
        await pilot.press("period")
        assert player.cursor > before
        await pilot.press("s")
        assert player.speed == 4
        await pilot.press("s", "s")
        assert player.speed == 1
        await pilot.press("space")
        assert player.playing
        await pilot.pause(0.5)
        assert "⏸" not in screen_text(app).splitlines()[0]


async def test_a_frame_is_written_by_the_call_that_drew_it(demo_recording, monkeypatch):
    app = CliffApp("replay", Session(recording=demo_recording, speed=1))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")  # pause
        await pilot.pause(0.2)
        frames: list = []
        display = app._display
        monkeypatch.setattr(app, "_display", lambda screen, update: (frames.append(update), display(screen, update)))
        app.action_step()
        assert len(frames) == 1


async def test_replay_restarted_from_the_end_shows_each_sample_once(demo_recording):
    """``end`` then ``space`` plays again from the start: into a new store, which the app draws."""
    app = CliffApp("replay", Session(recording=demo_recording, speed=16))
    samples = sum(isinstance(e, Sample) for e in demo_recording.events)
    async with app.run_test(size=(120, 36)) as pilot:
        player = app.session.player
        await pilot.press("end")
        await pilot.press("space")
        assert player.playing and player.position < player.t_end  # from the start again (a loaded machine ticks late)
        await wait_for(pilot, lambda: not player.playing and player.position == player.t_end, 30)
        await pilot.pause(0.3)
        ram = app.store.history.get("ram.used")
        times = [t for t, _ in ram.points()]
        assert len(times) == samples and times == sorted(set(times))
        assert len(app.store.history.get("tok_s")) == sum(isinstance(e, DecodeWindow) for e in demo_recording.events)


async def test_notices_are_drawn_under_the_signs():
    session = Session(
        preload=[
            Notice(1.0, "flash attention turned on: a quantised V cache (-ctv q8_0) needs it"),
            Notice(2.0, "GPL-3: 8,312 tokens, repeated ×1.44 to reach 12,000"),
        ]
    )
    app = CliffApp("run", session)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.3)
        lines = [line for line in screen_text(app).splitlines() if line.strip()]
        signs = next(i for i, line in enumerate(lines) if "1 spill" in line)
        assert "GPL-3: 8,312 tokens, repeated ×1.44 to reach 12,000" in lines[signs + 1]
        await pilot.press("l")
        await pilot.pause(0.2)
        assert "flash attention turned on" in screen_text(app)


async def test_r_records_to_a_timestamped_file_that_replays(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = CliffApp("watch", Session(sampler=Sampler(), interval=0.2))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.store.machine.latest is not None)
        await pilot.press("r")
        assert app.session.recorder is not None and "REC" in screen_text(app)
        seen = len(app.store.history.get("ram.used"))
        await wait_for(pilot, lambda: len(app.store.history.get("ram.used")) >= seen + 4)
        await pilot.press("r")
        assert app.session.recorder is None
    files = list(tmp_path.glob("cliff-*.jsonl"))
    assert len(files) == 1
    recording = open_recording(files[0])
    assert sum(1 for e in recording.events if type(e).__name__ == "Sample") >= 4


async def test_a_killed_watch_recording_replays(tmp_path):
    import signal
    import subprocess
    import sys

    path = tmp_path / "s.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cliff_tui", "watch", "--headless", "-i", "0.25", "--record", str(path)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60  # a loaded machine starts the interpreter slowly
    while time.monotonic() < deadline and (not path.exists() or path.read_bytes().count(b'"type":"sample"') < 6):
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    app = CliffApp("replay", Session(recording=open_recording(path), speed=16))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(
            pilot,
            lambda: not app.session.player.playing and app.session.player.position == app.session.player.t_end,
            10,
        )
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "System RAM" in text and "replay s.jsonl" in text
        assert len(app.store.history.get("ram.used")) >= 5


async def test_no_color_keeps_every_state_readable(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = CliffApp("run", Session(preload=demo.gpu_cliff_run()))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        assert app.no_color
        text = screen_text(app)
        assert "✖ 1 spill" in text and "✖ 3 speed" in text  # marks, not only colours
        assert "GPU0 VRAM" in text


TRIANGULATION = os.path.join(os.path.dirname(__file__), "..", "data", "smollm2_triangulation.jsonl")


async def settled(pilot, step_s: float = 0.3, tries: int = 20) -> None:
    """Wait until two frames a few ticks apart are the same picture: on a loaded machine the
    layout can still be moving when the app first goes idle."""
    before = pilot.app.export_screenshot()
    for _ in range(tries):
        await pilot.pause(step_s)
        now = pilot.app.export_screenshot()
        if now == before:
            return
        before = now
    raise AssertionError(f"the screen was still changing after {tries * step_s:.0f} s")


async def replay_to_the_end(pilot, settle_s: float = 0.3) -> None:
    """Play a replay, jump to its end (it pauses there), and let the screen settle."""
    await pilot.press("space", "end")
    await pilot.pause(settle_s)


async def _replayed_to_the_end(size: tuple[int, int]) -> tuple[CliffApp, str, str]:
    app = CliffApp("replay", Session(recording=open_recording(TRIANGULATION)))
    async with app.run_test(size=size) as pilot:
        await replay_to_the_end(pilot, 0.4)
        text = screen_text(app)
        return app, text, text.splitlines()[-1]


async def test_the_projection_is_in_view_at_120x40_without_a_key():
    _app, text, footer = await _replayed_to_the_end((120, 40))
    assert "largest context before the cliff" in text and "System RAM" in text  # pane and tiers at once
    assert "context (tokens)" in text  # the chart
    assert " cliff ▕" in text and "tokens before the cliff" in text  # the gauge in the header
    assert "Projection" not in footer


async def test_below_100x30_the_projection_is_one_key_away_and_the_footer_says_which():
    _app, text, footer = await _replayed_to_the_end((90, 26))
    assert "largest context before the cliff" not in text and "System RAM" in text
    assert "v Projection" in footer


@pytest.mark.parametrize("size", [(120, 40), (200, 50)])
async def test_a_jump_that_changes_the_layout_is_drawn_for_it_without_waiting_for_a_frame(monkeypatch, size):
    """The panes a jump shows or resizes are drawn for their new size at once, not a frame later
    (on a loaded machine the next frame can come after a screenshot)."""
    expected = (await _replayed_to_the_end(size))[1]
    monkeypatch.setattr(CliffApp, "_tick", lambda self: None)  # no frame comes
    app = CliffApp("replay", Session(recording=open_recording(TRIANGULATION)))
    async with app.run_test(size=size) as pilot:
        await pilot.press("space", "end")
        await pilot.pause()
        assert screen_text(app) == expected


@pytest.mark.parametrize("size, filled", [((120, 40), True), ((140, 45), True), ((200, 50), False)])
async def test_the_projection_chart_grows_to_fill_the_pane_and_never_past_it(size, filled):
    """Filled where the chart can grow that far (200×50 has rows to spare past its tallest)."""
    app = CliffApp("replay", Session(recording=open_recording(TRIANGULATION)))
    async with app.run_test(size=size) as pilot:
        await replay_to_the_end(pilot)
        pane, view = app.query_one("#projection"), app.query_one("#projection-view")
        assert not pane.show_vertical_scrollbar
        assert (view.size.height == pane.size.height) is filled


async def test_the_tier_graphs_grow_with_the_rows_the_screen_has():
    heights = {}
    for size in ((80, 24), (100, 30), (120, 40)):
        app = CliffApp("watch", Session(preload=demo.cpu_watch()))
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.3)
            lines = screen_text(app).splitlines()
        graph = [line for line in lines if any(ch in line for ch in "▁▂▃▄▅▆▇█")]
        assert any("zoom" in line for line in graph) and any("cliff ╌" in line for line in graph), size
        heights[size] = len(graph)
    assert heights[(80, 24)] < heights[(100, 30)] < heights[(120, 40)]


# --- the user's own choices: a target, a pause, a recording ---------------------------------------


def _ram_at(t: float, used_gib: float) -> Sample:
    used = int(used_gib * GiB)
    return Sample(t, RamReading(used, 24 * GiB, 24 * GiB - used), SwapReading(0, 0))


async def test_a_paused_screen_stays_frozen_when_r_and_t_redraw_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = Session(preload=[_ram_at(1.0, 6.0)], recording_setup=RecordingSetup(["watch"]))
    app = CliffApp("watch", session)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: "6.00 GiB / 24.0 GiB" in screen_text(app))
        await pilot.press("p")
        session.bus.publish(_ram_at(2.0, 13.0))
        await wait_for(pilot, lambda: session.store.machine.latest.t == 2.0)
        await pilot.press("r")  # recording starts and the title says so: a redraw
        await wait_for(pilot, lambda: "REC" in screen_text(app))
        await pilot.press("t", *"48k", "enter")  # the projection's target: another
        await wait_for(pilot, lambda: session.store.runs.target == 48_000)
        text = screen_text(app)
        assert "PAUSED" in text and "6.00 GiB / 24.0 GiB" in text and "13.0 GiB" not in text
        assert app.store.runs.target == 48_000  # the paused screen shows the target it was given
        await pilot.press("p")
        await wait_for(pilot, lambda: "13.0 GiB / 24.0 GiB" in screen_text(app))
        await pilot.press("r")
    (path,) = tmp_path.glob("cliff-*.jsonl")
    samples = [e for e in open_recording(path).events if isinstance(e, Sample)]
    assert [s.t for s in samples] == [1.0, 2.0]  # the recording holds the live state, not the frozen one


async def test_a_target_chosen_live_is_recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = CliffApp("watch", Session(preload=[_ram_at(1.0, 6.0)], recording_setup=RecordingSetup(["watch"])))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r", "t", *"48k", "enter")
        await wait_for(pilot, lambda: app.store.runs.target == 48_000)
        await pilot.press("r")
    (path,) = tmp_path.glob("cliff-*.jsonl")
    assert [e.target for e in open_recording(path).events if isinstance(e, TargetChosen)] == [48_000]


async def test_a_target_chosen_in_a_replay_outlives_a_backward_seek(demo_recording):
    app = CliffApp("replay", Session(recording=demo_recording, speed=16))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("end", "t", *["backspace"] * 10, *"48k", "enter")
        await wait_for(pilot, lambda: app.store.runs.target == 48_000)
        before = app.store
        await pilot.press("home", "end")  # back to the start: a new store, fed the recording again
        assert app.store is not before and app.store.runs.target == 48_000


async def test_r_writes_the_header_that_record_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup = RecordingSetup(["watch", "--record", "given.jsonl", "--record-text"], record_text=True)
    session = Session(preload=[_ram_at(1.0, 6.0)], recording_setup=setup)
    session.start_recording("given.jsonl")  # as --record does
    app = CliffApp("watch", session)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r")  # stops --record's recording
        await wait_for(pilot, lambda: session.recorder is None)
        await pilot.press("r")  # and starts one of its own
        await wait_for(pilot, lambda: session.recorder is not None)
    headers = [open_recording(path).header for path in (tmp_path / "given.jsonl", *tmp_path.glob("cliff-*.jsonl"))]
    assert len(headers) == 2
    given, pressed = ({k: h[k] for k in ("command", "record_text", "format", "schema")} for h in headers)
    assert pressed == given and given["command"] == setup.command


async def test_at_a_long_interval_what_arrives_between_samples_is_still_drawn():
    app = CliffApp("watch", Session(sampler=Sampler(), interval=3600))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: len(app.store.history.get("ram.used")) >= 1)
        for port in (8080, 8081):  # the first drawn by a tick, the second within a second of it
            line = f"a server was found on port {port}"
            app.session.bus.publish(Notice(time.time(), line))
            await wait_for(pilot, lambda line=line: line in screen_text(app), timeout=10)
