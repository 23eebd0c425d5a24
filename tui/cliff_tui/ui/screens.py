"""Modal screens: help, the raw llama.cpp log, and the projection target."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, RichLog, Static

from cliff_tui.analysis.signs import SIGNS
from cliff_tui.store import Store
from cliff_tui.text import LOG_LIMIT, inert
from cliff_tui.units import parse_tokens


def signs_help() -> str:
    return "\n".join(f"  {s.number} {s.name:<7} {s.what}" for s in SIGNS)


HELP = """\
[b]cliff-tui[/b] — where the KV cache outgrows fast memory and decode speed collapses.

[b]The three signs[/b]
{signs}
            a steady decline is attention reading more cells, a knee beyond the trend is the cliff

[b]Keys[/b]
{keys}

Marks: ✓ fine · i information · ▲ look (10–50 % off trend) · ✖ cliff · – not available
"""


def keys_help(bindings: Iterable[Binding]) -> str:
    """One line per key, from the app's own bindings."""
    lines = []
    for b in bindings:
        key = b.key_display or b.key
        lines.append(f"  {key:<6} {b.tooltip or b.description}")
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, mode: str, bindings: Iterable[Binding]) -> None:
        super().__init__()
        self.mode = mode
        self.bindings = list(bindings)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(HELP.format(signs=signs_help(), keys=keys_help(self.bindings)) + f"\nmode: {self.mode}")


class LogScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,l", "dismiss", "Close")]

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="log"):
            yield Label("llama.cpp log (raw), after cliff-tui's notices — esc to close")
            yield RichLog(id="log", max_lines=4000, wrap=False, markup=False)

    def on_mount(self) -> None:
        log = self.query_one(RichLog)
        for notice in self.store.messages.notices:
            log.write(Text(f"cliff-tui {notice.level}: {inert(notice.text)}", style="bold"))
        lines = list(self.store.messages.log)
        if not lines:
            log.write("(nothing from llama.cpp yet: it logs when a model loads — `cliff-tui run`)")
        for line in lines:
            log.write(Text(inert(line.text, limit=LOG_LIMIT)))


class TargetScreen(ModalScreen[int | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: int | None) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="small"):
            yield Label("Project to how many tokens of context? (e.g. 32k, 131072)")
            yield Input(value=str(self.current or ""), id="target")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(parse_tokens(event.value))
        except ValueError as exc:
            self.notify(str(exc), severity="error", markup=False)

    def action_cancel(self) -> None:
        self.dismiss(None)
