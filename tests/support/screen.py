"""What a person sees in the real Textual app under ``App.run_test()``, and waiting for it."""

from __future__ import annotations

import html
import re
import time

from cliff_tui.ui.app import CliffApp

_TEXT_RE = re.compile(r'<text [^>]*clip-path="url\(#terminal-\d+-line-(\d+)\)">([^<]*)</text>')


def screen_text(app: CliffApp) -> str:
    """What a person sees: the screenshot's text, line by line."""
    lines: dict[int, str] = {}
    for number, text in _TEXT_RE.findall(app.export_screenshot()):
        lines[int(number)] = lines.get(int(number), "") + html.unescape(text).replace("\xa0", " ")
    return "\n".join(lines[k] for k in sorted(lines))


async def wait_for(pilot, condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.1)
