"""Hostile text on the screen: a recording, a GGUF name and a process name holding terminal control
sequences, bidi characters and Rich markup are drawn as visible text; the bytes the app writes to
the terminal hold none of their sequences, and no markup tag is interpreted."""

from __future__ import annotations

import asyncio
import re
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from textual.drivers import headless_driver

from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.events import Notice, RunFailed, RunStarted, Sample, ServerReading
from cliff_tui.recording.reader import open_recording
from cliff_tui.records import CpuQuota, ProcessReading, RamReading, RunSettings, SwapReading
from cliff_tui.session import Session
from cliff_tui.text import inert
from cliff_tui.ui.app import CliffApp
from hostile import EVIL, hostile_text
from screen import screen_text
from tiny_model import write_tiny_llama
from ui.test_app import replay_to_the_end
from ui.test_terminal import Terminal

HOSTILE_RECORDING = Path(__file__).parents[1] / "data" / "hostile.jsonl"
SHOWN = inert(EVIL)  # what the screen must show of it: every sequence visible, the markup literal
# What Textual itself writes: CSI sequences (cursor, modes, colours) and its pointer-shape OSC 22.
_TEXTUAL_OWN = re.compile(r"\x1b\[[0-9;?<=>]*[ -/]*[@-~]|\x1b\]22;[a-z-]*\x07")
_OSC = re.compile(r"\x1b\](?!22;)|\x9d")


class CapturingDriver(headless_driver.HeadlessDriver):
    """Textual's test driver, but it says it is not headless, so the app draws through ``write``: the
    bytes a terminal would get, kept in ``written``."""

    written: list[str] = []

    @property
    def is_headless(self) -> bool:
        return False

    def write(self, data: str) -> None:
        CapturingDriver.written.append(data)


@pytest.fixture
def terminal(monkeypatch):
    """The app's output stream: what ``App.run_test`` would have written to a terminal."""
    CapturingDriver.written = []
    monkeypatch.setattr(headless_driver, "HeadlessDriver", CapturingDriver)
    return CapturingDriver.written


def stray_controls(stream: str) -> list[str]:
    """What is left of the stream once Textual's own sequences are taken out: nothing but text."""
    rest = _TEXTUAL_OWN.sub("", stream)
    return sorted(
        {
            f"U+{ord(ch):04X}"
            for ch in rest
            if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") and ch not in "\n\r"
        }
    )


def test_the_hostile_recording_replays_with_every_panel_line_intact(snap_compare):
    app = CliffApp("replay", Session(recording=open_recording(HOSTILE_RECORDING)))
    assert snap_compare(app, terminal_size=(160, 40), run_before=replay_to_the_end)


async def test_the_hostile_recording_shows_its_sequences_and_writes_none(terminal):
    app = CliffApp("replay", Session(recording=open_recording(HOSTILE_RECORDING)))
    async with app.run_test(size=(160, 40)) as pilot:
        await replay_to_the_end(pilot)
        text = screen_text(app)
        lines = text.splitlines()
    stream = "".join(terminal)
    assert "TITLE-OWNED" in stream  # the stream was captured: the name was drawn through it
    assert not _OSC.search(stream) and "\x1b[2J" not in stream and "\x1b[31m" not in stream
    assert stray_controls(stream) == []
    assert lines[0].startswith(f"cliff-tui · replay · {SHOWN} (Q4_0)")  # the title, markup literal
    for shown in (f"No VRAM tier: no GPU found {SHOWN}", f"PID 4242 {SHOWN}", f"▲ notice {SHOWN}"):
        assert any(shown in line for line in lines), shown
    assert "System RAM" in text and "Swap" in text and "Tokens/s" in text


async def test_the_log_screen_and_the_error_panel_show_hostile_text_as_text(terminal):
    events = [*_hostile_session(EVIL, "m"), RunFailed(10.0, "r1", "error", f"failed: {EVIL}")]
    app = CliffApp("run", Session(preload=events))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause(0.3)
        assert f"✖ failed: {SHOWN}" in screen_text(app)
        await pilot.press("l")
        await pilot.pause(0.3)
        assert f"cliff-tui warning: notice {SHOWN}" in screen_text(app)
    stream = "".join(terminal)
    assert not _OSC.search(stream) and stray_controls(stream) == []


def _hostile_session(text: str, model_name: str) -> list:
    from cliff_tui.records import ModelInfo

    model = ModelInfo("/m.gguf", model_name, 1, "llama", 2, 4, 2, 32, 32, 4096, None, "F32")
    sample = Sample(
        1.0,
        RamReading(2 << 30, 8 << 30, 6 << 30),
        SwapReading(0, 1 << 30),
        (),
        f"reason {text}",
        ProcessReading(7, f"proc {text}", 1 << 20, 0),
        cpu_quota=CpuQuota(f"/cg {text}", 0.5, 10, 1),
    )
    return [
        RunStarted(0.5, "r1", RunSettings("/m.gguf", 64, 4), model, 68),
        sample,
        Notice(1.1, f"notice {text}", "warning"),
        ServerReading(1.2, "ollama", "http://127.0.0.1:11434", "error", f"server {text}"),
    ]


_PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile_text(max_size=5, plain=_PLAIN))
@example("\n")  # a trailing control a renderer's strip() would eat instead of showing
def test_hostile_strings_as_a_gguf_name_and_session_fields_are_drawn_as_text(tmp_path, terminal, text):
    """A GGUF's general.name (written with the gguf package, read by cliff-tui's reader), a process
    name, a no-GPU reason, a cgroup's path, a notice and a server message: drawn literally, never run."""
    in_file = "".join(ch for ch in text if not "\ud800" <= ch <= "\udfff") or "x"  # a file holds UTF-8
    path = write_tiny_llama(
        tmp_path / "hostile.gguf", n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=32, name=in_file
    )
    name = read_model_info(path).name
    assert name == inert(in_file)
    terminal.clear()
    app = CliffApp("attach", Session(preload=_hostile_session(text, name)))

    async def draw() -> str:
        async with app.run_test(size=(220, 30)) as pilot:
            await pilot.pause(0.2)
            return screen_text(app)

    screen = asyncio.run(draw())
    stream = "".join(terminal)
    assert not _OSC.search(stream) and stray_controls(stream) == []
    shown = inert(text)
    title = screen.splitlines()[0]
    assert f"{name} (F32)" in title or (len(title) >= 200 and f"{name} (F32)".startswith(title.split(" · ", 2)[2][:-1]))
    for part in (
        f"No VRAM tier: reason {shown}",
        f"PID 7 proc {shown}",
        f"notice {shown}",
        f"cgroup /cg {shown} (PID 7's)",
    ):
        assert _drawn(part, screen), part


def _drawn(part: str, screen: str) -> bool:
    """``part`` on the screen whole or, where it is wider than its panel, its start cut with "…"."""
    if part in screen:
        return True
    for line in screen.splitlines():
        start = line.find(part[:20])
        cut = line[start:].split("…")[0] if start >= 0 and "…" in line[start:] else ""
        if len(cut) >= 40 and part.startswith(cut):
            return True
    return False


async def test_a_model_name_longer_than_the_title_line_is_cut_at_its_edge_not_wrapped_out_of_sight():
    app = CliffApp("attach", Session(preload=_hostile_session("x", "N" * 300)))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.2)
        title = screen_text(app).splitlines()[0]
    assert title == "cliff-tui · attach · " + "N" * 98 + "…"


# --- the real program in a real terminal ------------------------------------------------------


def _run_in_a_pty(argv: list[str], wait_for: bytes, limit: float = 120.0) -> bytes:
    """Run ``argv`` on a 120×40 pseudo-terminal; once ``wait_for`` was drawn, press q. All it wrote."""
    terminal = Terminal(argv)
    try:
        terminal.wait_for(wait_for, limit)
        terminal.read_for(1.0)  # a few more frames first
        terminal.press(b"q")
        terminal.exit_code(limit=10)
    finally:
        terminal.close()
    return bytes(terminal.out)


def test_cliff_tui_replay_in_a_terminal_sets_no_title_and_writes_no_clipboard():
    out = _run_in_a_pty([sys.executable, "-m", "cliff_tui", "replay", str(HOSTILE_RECORDING)], b"TITLE-OWNED")
    stream = out.decode("utf-8", errors="replace")
    assert not _OSC.search(stream), set(re.findall(r"\x1b\][^\x07\x1b]{0,30}", stream))
    assert "\x1b[2J" not in stream and stray_controls(stream) == []
    assert "␛]0;TITLE-OWNED␇" in stream
