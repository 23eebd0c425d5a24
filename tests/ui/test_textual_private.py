"""Textual's private names behind one door: with any one of them gone (a Textual release that
renamed it), the dashboard still starts and draws, on Textual's stock path for what the name
served: in the app under Pilot, and as ``cliff-tui watch`` on a real pseudo-terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.drivers.linux_driver import LinuxDriver

from cliff_tui.probes.sampler import Sampler
from cliff_tui.session import Session
from cliff_tui.ui import textual_private
from cliff_tui.ui.app import CliffApp
from cliff_tui.ui.terminal import QuietLinuxDriver, terminal_driver
from screen import screen_text, wait_for
from textual_names import CLASS_NAMES, MODULE_NAMES, NAMES, without
from ui.test_terminal import Terminal

NAMES_SCRIPT = Path(__file__).parents[1] / "support" / "textual_names.py"
PAINT_NAMES = ("Widget._set_dirty", "Screen._on_timer_update", "Screen._dirty_widgets")


def test_this_textual_has_every_private_path():
    found = textual_private.probe_again()
    assert found.parsing is not None and found.paint
    assert terminal_driver() is QuietLinuxDriver


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_without_the_parser_the_stock_driver_is_used(name):
    with without(name) as found:
        assert found.parsing is None and found.paint
        assert terminal_driver() is LinuxDriver
    assert terminal_driver() is QuietLinuxDriver  # put back, found again


@pytest.mark.parametrize("name", PAINT_NAMES)
async def test_without_a_paint_name_the_dashboard_draws_through_refresh(name):
    assert set(PAINT_NAMES) <= set(CLASS_NAMES) | {"Screen._dirty_widgets"}
    with without(name) as found:
        assert not found.paint and found.parsing is not None
        app = CliffApp("watch", Session(sampler=Sampler(), interval=0.2))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: len(app.store.history.get("ram.used")) >= 3)
            await pilot.pause(0.3)
            assert "System RAM" in screen_text(app)
            await pilot.press("q")


@pytest.mark.parametrize("name", NAMES)
def test_watch_starts_draws_and_quits_on_a_terminal_without(name):
    terminal = Terminal([sys.executable, str(NAMES_SCRIPT), "--without", name, "--", "watch", "-i", "1"])
    try:
        terminal.wait_for(b"RAM")
        terminal.press(b"q")
        assert terminal.exit_code(limit=10) == 0
        assert b"Traceback" not in terminal.out
    finally:
        terminal.close()
