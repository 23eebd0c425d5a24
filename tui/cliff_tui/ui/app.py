"""The Textual app: one dashboard for watch, run, triangulate, attach and replay.

The app draws a :class:`Session`. Producers (the sampler, job worker, replay player) publish on
the session's bus, which only appends to an inbox (thread-safe, never blocks the producer); on the
UI thread a timer takes a sample where one is due and no GPU is read (elsewhere the sampler has a
thread), drains the inbox into the session's store, redraws what changed and writes it to the
terminal: one wake-up per frame, however many events arrived.

Text from outside (a model's name, a recording, a server, a process name) is drawn as plain text,
never as markup: ``Text`` and segments for the widgets, ``markup=False`` for the notifications.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from rich.text import Text
from textual import constants, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.scalar import Unit
from textual.driver import Driver
from textual.notifications import SeverityLevel
from textual.worker import Worker, WorkerState

from cliff_tui.errors import CliffError
from cliff_tui.events import Alert
from cliff_tui.heap import collect_cycles, freeze_start_up, return_freed_memory, thaw
from cliff_tui.session import Session
from cliff_tui.store import Store
from cliff_tui.text import inert
from cliff_tui.ui import render
from cliff_tui.ui.widgets import Body, DashboardScreen, DashPane, KeysLine, LineView, Pane, PanelView, Part, one_paint

# The modal screens and the projection pane (with the report behind it) are imported where they
# are first used: the first frame of `watch` comes that much sooner.

WIDE = 150  # columns from which the projection pane sits beside the tiers
STACKED = (100, 30)  # from this size it sits below them; on a smaller screen `v` switches to it
CHART_ROWS = (6, 8, 24)  # the projection chart's height: its least, where it starts, its most
REPLAY_KEYS = ("play", "speed", "seek(-10)", "seek(10)")  # in a replay's keys line; `p` is `space` there
COLLECT_EVERY_S = 10.0  # once the first frame is up: a full collection of what the frames left
FRAME_GAP_MAX_S = 1.0  # at a longer interval, what changes between samples (notices, a job) is drawn within this


class CliffApp(App):
    CSS_PATH = "cliff.tcss"
    TITLE = "cliff-tui"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "Quit", tooltip="quit"),
        Binding("p", "pause", "Pause", tooltip="pause the screen (replay: play/pause)"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="this help"),
        Binding("l", "log", "Log", tooltip="cliff-tui's notices and llama.cpp's raw log"),
        Binding("r", "record", "Record", tooltip="start/stop recording to a timestamped file"),
        Binding("v", "view", "Projection", tooltip="dashboard ⇄ projection (screens below 100×30)"),
        Binding("t", "target", "Target", show=False, tooltip="projection target"),
        Binding("space", "play", "Play/Pause", show=False, tooltip="replay: play/pause"),
        Binding("s", "speed", "Speed", show=False, tooltip="replay: speed ×1/×4/×16"),
        Binding("left", "seek(-10)", "-10s", show=False, key_display="←", tooltip="replay: seek 10 s back"),
        Binding("right", "seek(10)", "+10s", show=False, key_display="→", tooltip="replay: seek 10 s forward"),
        Binding("period", "step", "Step", show=False, key_display=".", tooltip="replay: step to the next sample"),
        Binding("home", "seek_to(0)", "Start", show=False, tooltip="replay: to the start"),
        Binding("end", "seek_to(1)", "End", show=False, tooltip="replay: to the end"),
    ]

    def __init__(self, mode: str = "watch", session: Session | None = None) -> None:
        super().__init__()
        self.mode = mode
        self.session = session or Session()
        self._frozen: Store | None = None  # what a paused screen shows
        self.narrow_view = "dash"
        self._drawn: object = None
        self._drawn_at = -math.inf  # monotonic time of the latest frame a tick drew
        self._switching = False  # the projection has content but is out of view: `v` shows it
        self.session.alert_listeners.append(self._notify_alert)

    def get_default_screen(self) -> DashboardScreen:
        return DashboardScreen(id="_default")

    def get_driver_class(self) -> type[Driver]:
        """On Linux and macOS a driver whose input thread sleeps until a key comes, unless
        ``TEXTUAL_DRIVER`` names another (textual-serve's browser tabs)."""
        if constants.DRIVER is None and sys.platform != "win32":
            from cliff_tui.ui.terminal import terminal_driver

            return terminal_driver()
        return super().get_driver_class()

    @cached_property
    def views(self) -> DashboardViews:
        return DashboardViews.of(self)

    @property
    def _tick_s(self) -> float:
        return min(self.session.interval, 0.25)

    @property
    def paused(self) -> bool:
        return self._frozen is not None

    @property
    def store(self) -> Store:
        """What the screen shows: a copy frozen when the screen was paused, else the session's,
        read anew each time (a backward seek in a replay replaces it)."""
        return self._frozen if self._frozen is not None else self.session.store

    # --- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield PanelView(id="title")
        yield LineView(id="header")  # the cliff gauge, the signs, the newest notice
        with Body(id="body"):
            yield DashPane(LineView(id="tiers"), id="dash")
            yield Pane(PanelView(id="projection-view"), id="projection")
        yield LineView(id="progress")
        yield PanelView(id="error")
        yield KeysLine(id="keys")

    async def on_mount(self) -> None:
        self.views.projection.display = self.mode in ("triangulate", "replay")
        self.session.start(time.monotonic())
        if self.session.job is not None:
            self._run_job()
        self.set_interval(self._tick_s, self._tick)
        self._layout_for(self.size)
        self._draw_keys()
        self.session.drain()  # a sample taken while the app loaded is in the first frame
        self._draw()
        self.set_timer(1.0, self._settle)

    def _settle(self) -> None:
        """Once the first frame is up: start-up's objects out of the collector's way, its freed
        pages back to the system, and the collector on a steady pace (:func:`collect_cycles`)."""
        freeze_start_up()
        # on a thread: in a process with a big heap behind it the walk takes long, and the screen
        # must not wait for it
        self.run_worker(return_freed_memory, thread=True, exit_on_error=False)
        self.set_interval(COLLECT_EVERY_S, collect_cycles)

    def on_resize(self, event: Any) -> None:
        self._layout_for(event.size)

    def on_pane_resized(self) -> None:
        if self.is_running and not self.paused:  # a paused screen keeps what it showed
            self._draw()

    def _layout_for(self, size: Any) -> None:
        """The projection beside the tiers on a wide screen, below them from 100×30, else one
        of the two at a time (`v`)."""
        projection, dash, body = self.views.projection, self.views.dash, self.views.body
        has = self._has_projection()
        stacked = has and size.width < WIDE and size.width >= STACKED[0] and size.height >= STACKED[1]
        in_view = has and (size.width >= WIDE or stacked)
        body.set_class(stacked, "stacked")
        _set_display(dash, not has or in_view or self.narrow_view == "dash")
        _set_display(projection, in_view or (has and self.narrow_view == "projection"))
        projection.set_class(has and not in_view, "full")
        if (has and not in_view) != self._switching:
            self._switching = has and not in_view
            self._draw_keys()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "view":
            return self._switching  # in the footer only where the projection is out of view
        return True

    def _has_projection(self) -> bool:
        return self.mode == "triangulate" or bool(self.store.runs.plan or len(self.store.runs.results) > 1)

    # --- events ---------------------------------------------------------------------------

    def _notify_alert(self, alert: Alert) -> None:
        player = self.session.player
        if player is None or player.playing:
            severity: SeverityLevel = "error" if alert.level == "red" else "warning"
            self.notify(alert.message, title=f"sign {alert.sign}", severity=severity, timeout=6, markup=False)

    @work(thread=True, exit_on_error=False, name="job")
    def _run_job(self) -> None:
        try:
            self.session.run_job()
        except CliffError:
            pass  # published as a RunFailed: the error panel shows it

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A bug in a job must not vanish silently: show it, keep the dashboard running."""
        error = event.worker.error
        if event.worker.name == "job" and event.state == WorkerState.ERROR and error is not None:
            self.session.report_crash(error)

    def _tick(self) -> None:
        """Take in what the producers published, draw what changed since the last tick (a burst
        of events is one frame); in a replay, also move the replay clock."""
        if not self.is_running:  # shutting down: the widgets may be gone already
            return
        now = time.monotonic()
        self.session.sample_if_due(now, early_s=self._tick_s / 2)
        self.session.drain()
        self.session.replay_tick(now)
        if not self.paused and self._frame_due(now) and self._draw():
            self._drawn_at = now

    def _frame_due(self, now: float) -> bool:
        """At most one frame a sampling interval (at a longer one, a second), the first tick after
        the previous one's: what arrives between (a server's reading, the machine's sample, out of
        phase) shares a frame. A replay draws every tick, as its clock moves; keys and resizes
        draw at once."""
        if self.session.player is not None:
            return True
        return now - self._drawn_at >= min(self.session.interval, FRAME_GAP_MAX_S) - self._tick_s / 2

    # --- drawing --------------------------------------------------------------------------

    def _draw(self) -> bool:
        """Whether anything changed and was drawn."""
        with one_paint(self.screen):  # on the terminal as the frame ends, not 1/60 s later
            return self._draw_views()

    def _draw_views(self) -> bool:
        p = self.store
        player = self.session.player
        views = self.views
        version = (
            id(p),
            p.version,
            self.size,
            views.dash.size,
            views.projection.size,
            self.paused,
            self.narrow_view,
            self.session.recorder is not None,
            player and (player.cursor, player.playing, player.speed, round(player.position, 1)),
        )
        if version == self._drawn:
            return False
        self._drawn = version
        title = self._title()
        views.title.show(title, lambda: Text(inert(title)), 1)
        # the signs always (their line stays put), the gauge and the newest notice where there are any
        gauge, signs, notice = render.gauge_line(p), render.signs_line(p.signs.current), render.notice_line(p)
        header = ([gauge] if gauge else []) + [signs] + ([notice] if notice else [])
        views.header.show_parts(tuple(_line_part(line) for line in header))
        views.tiers.show_parts(self._tier_parts())
        views.progress.show_parts(tuple(_line_part(line) for line in self._progress_lines()))
        self._draw_error()
        if self._has_projection():
            self._layout_for(self.size)
            self._draw_projection()
        return True

    def _tier_parts(self) -> tuple[Part, ...]:
        """Every tier in one view, after the reason there is no VRAM tier where there is none:
        the graphs take the rows that are left."""
        hint = "" if self.mode in ("run", "triangulate", "attach", "replay") else render.NO_SOURCE
        per_column = max(1, round(1.0 / self.session.interval))  # a graph column a second
        panels = render.panels(self.store, hint or "waiting for tokens…", per_column)
        latest = self.store.machine.latest
        reason = latest.no_vram if latest is not None else None
        width = self.views.tiers.size.width or self.size.width
        parts: tuple[Part, ...] = ()
        if reason:
            parts = (((reason,), lambda w: render.wrapped(reason, render.AMBER, w)),)
        rows = self._graph_rows(panels, len(render.wrapped(reason, render.AMBER, width)) if reason else 0)
        return parts + tuple(part for panel in render.with_rows(panels, rows) for part in panel.parts)

    def _graph_rows(self, panels: list[render.Panel], taken: int) -> int:
        """The tiers' graphs grow with the rows the dashboard has; below the projection the
        tiers keep one row each and give it the rest."""
        dash = self.views.dash
        if self.views.body.has_class("stacked"):
            rows = 1
            height = taken + sum(panel.n_lines for panel in render.with_rows(panels, rows))
            if dash.styles.height is None or dash.styles.height.value != height:
                dash.styles.height = height
            return rows
        if dash.styles.height is not None and dash.styles.height.unit != Unit.FRACTION:  # set while stacked
            dash.styles.height = "1fr"
        height = dash.size.height or self.size.height - 6
        return render.graph_rows(height - taken, panels)

    def _own_bindings(self) -> list[Binding]:
        """The app's keys (each a ``Binding``: Textual's type allows tuples too)."""
        return [binding for binding in self.BINDINGS if isinstance(binding, Binding)]

    def _draw_keys(self) -> None:
        """The keys a footer shows: those bound with ``show``, where their action is available;
        in a replay, the keys that move it instead of `p`."""
        shown = [
            binding
            for binding in self._own_bindings()
            if self._key_shown(binding) and self.check_action(binding.action, ()) is not False
        ]
        if self.session.player is not None:
            shown.sort(key=lambda binding: binding.action not in ("quit", *REPLAY_KEYS))
        keys = [(binding.key_display or binding.key, binding.description, binding.action) for binding in shown]
        self.views.keys.show_keys(keys)

    def _key_shown(self, binding: Binding) -> bool:
        if self.session.player is None:
            return binding.show
        return binding.action in REPLAY_KEYS or (binding.show and binding.action != "pause")

    def _draw_projection(self) -> None:
        pane = self.views.projection
        width = max(40, pane.size.width - 2)
        key = (
            len(self.store.runs.results),
            len(self.store.runs.failures),
            self.store.runs.target,
            width,
            self.store.runs.plan,
            pane.size.height,
        )
        self.views.projection_view.show(key, lambda: self._projection(width, pane.size))

    def _projection(self, width: int, room: Any) -> Any:
        """The pane, its chart as tall as the rows its other lines leave (shorter, down to its least,
        where they leave fewer): a pane that overflows by a row gets a scrollbar, which narrows it,
        which can keep it overflowing."""
        from cliff_tui.ui import projection as projection_view

        lowest, start, highest = CHART_ROWS
        first = projection_view.pane(self.store, width, chart_height=start, color=not self.no_color)
        if not projection_view.has_chart(self.store):
            return first
        options = self.console.options.update(width=max(1, room.width), height=None)
        spare = room.height - len(self.console.render_lines(first, options, pad=False))
        rows = max(lowest, min(highest, start + spare))
        if rows == start:
            return first
        return projection_view.pane(self.store, width, chart_height=rows, color=not self.no_color)

    def _draw_error(self) -> None:
        error = self.views.error
        failure = self.store.runs.last_failure
        shown = failure is not None and not (failure.kind == "does_not_fit" and self.mode == "triangulate")
        _set_display(error, shown)
        if shown and failure is not None:
            error.show(failure, lambda: Text(f"✖ {inert(failure.message, multiline=True)}", style="bold red"))

    def _title(self) -> str:
        parts = ["cliff-tui", self.mode]
        session = self.session
        if session.job is not None:
            parts.append(session.job.title)
        model = self.store.runs.model
        if model is not None:
            parts.append(f"{model.name} ({model.file_type or '?'})")
        if session.player is not None:
            parts.append(session.player.describe())
        if session.recorder is not None:
            parts.append(f"● REC {session.recorder.path}")
        if self.paused:
            parts.append("PAUSED")
        return " · ".join(parts)

    def _progress_lines(self) -> list[render.Parts]:
        """The run's progress, or the attached server's line and what it is (live or replayed)."""
        lines: list[render.Parts] = []
        if self.session.player is not None:
            lines.append([(self.session.player.cursor_line(), None)])
        if self.store.servers.readings:
            lines.append(render.server_line(self.store))
        elif self.session.player is None:
            lines.append(render.progress_line(self.store))
        return lines + render.attached_lines(self.store)

    # --- actions --------------------------------------------------------------------------

    async def action_quit(self) -> None:
        self.session.cancel.set()
        self.exit()

    def action_pause(self) -> None:
        if self.session.player is not None:
            self.action_play()
            return
        self._frozen = None if self.paused else self.session.store.frozen()
        self._draw()

    def action_help(self) -> None:
        from cliff_tui.ui.screens import HelpScreen

        self.push_screen(HelpScreen(self.mode, self._own_bindings()))

    def action_log(self) -> None:
        from cliff_tui.ui.screens import LogScreen

        self.push_screen(LogScreen(self.store))

    def action_view(self) -> None:
        self.narrow_view = "projection" if self.narrow_view == "dash" else "dash"
        self._layout_for(self.size)

    def action_target(self) -> None:
        from cliff_tui.ui.screens import TargetScreen

        def apply(value: int | None) -> None:
            if value:
                chosen = self.session.choose_target(value)
                if self._frozen is not None:  # a paused screen shows the target it was just given
                    self._frozen.feed(chosen)
                self._draw()

        self.push_screen(TargetScreen(self.store.runs.target), apply)

    def action_record(self) -> None:
        stopped = self.session.stop_recording()
        if stopped is not None:
            self.notify(f"recording saved: {stopped.path}", markup=False)
            self._draw()
            return
        try:
            recorder = self.session.start_recording()
        except CliffError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        self.notify(f"recording to {recorder.path}", markup=False)
        self._draw()

    def action_play(self) -> None:
        self.session.toggle_play(time.monotonic())
        self._draw()

    def action_speed(self) -> None:
        if self.session.player is not None:
            self.session.player.cycle_speed(time.monotonic())
            self._draw()

    def action_seek(self, seconds: float) -> None:
        self.session.seek_by(seconds, time.monotonic())
        self._draw()

    def action_seek_to(self, fraction: float) -> None:
        self.session.seek_fraction(fraction, time.monotonic())
        self._draw()

    def action_step(self) -> None:
        self.session.replay_step()
        self._draw()

    def on_unmount(self) -> None:
        self.session.alert_listeners.remove(self._notify_alert)
        self.session.stop()
        thaw()


@dataclass(frozen=True)
class DashboardViews:
    """The dashboard's widgets, looked up once: the app draws into them four times a second."""

    title: PanelView
    header: LineView
    body: Body
    dash: DashPane
    tiers: LineView
    projection: Pane
    projection_view: PanelView
    progress: LineView
    error: PanelView
    keys: KeysLine

    @classmethod
    def of(cls, app: App) -> DashboardViews:
        one = app.query_one
        return cls(
            one("#title", PanelView),
            one("#header", LineView),
            one("#body", Body),
            one("#dash", DashPane),
            one("#tiers", LineView),
            one("#projection", Pane),
            one("#projection-view", PanelView),
            one("#progress", LineView),
            one("#error", PanelView),
            one("#keys", KeysLine),
        )


def _line_part(parts: render.Parts) -> Part:
    """One line of styled text as a part of a line view, keyed on what it says."""
    return tuple(parts), lambda width: [render.fit_line(parts, width)]


def _set_display(widget: Any, shown: bool) -> None:
    """Setting ``display`` asks for a new layout of the whole screen, even to the same value."""
    if widget.display != shown:
        widget.display = shown
