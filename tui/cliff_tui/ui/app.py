"""The Textual app: one dashboard for watch, run, triangulate, attach and replay.

Producers (sampler thread, job worker, replay player) publish events on the bus; the bus appends
each one to the app's inbox (a deque: thread-safe, never blocks the producer). On the UI thread a
timer moves the inbox into the shared :class:`Pipeline` and redraws what changed: one wake-up per
frame, however many events arrived.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Iterable

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from cliff_tui.bus import EventBus
from cliff_tui.engine.errors import CliffError
from cliff_tui.engine.priority import lower_other_threads
from cliff_tui.events import Alert, RunFailed
from cliff_tui.jobs import Job
from cliff_tui.pipeline import Pipeline
from cliff_tui.ui import projection as projection_view
from cliff_tui.ui import render
from cliff_tui.ui.widgets import LineView, PanelView

# The probes (psutil, NVML) and the modal screens are imported where they are first used: a replay
# needs neither, and starts that much sooner.
if TYPE_CHECKING:
    from cliff_tui.probes.sampler import Sampler, SamplerThread

NO_VRAM = "novram"  # the key of the dashboard's one wrapped text line, not a tier
WIDE = 150  # columns from which the projection pane sits beside the dashboard


class CliffApp(App):
    CSS_PATH = "cliff.tcss"
    TITLE = "cliff-tui"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("p", "pause", "Pause"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("l", "log", "Log"),
        Binding("r", "record", "Record"),
        Binding("v", "view", "Projection", show=False),
        Binding("t", "target", "Target", show=False),
        Binding("space", "play", "Play", show=False),
        Binding("s", "speed", "Speed", show=False),
        Binding("right", "seek(10)", "+10s", show=False),
        Binding("left", "seek(-10)", "-10s", show=False),
        Binding("period", "step", "Step", show=False),
        Binding("home", "seek_to(0)", "Start", show=False),
        Binding("end", "seek_to(1)", "End", show=False),
    ]

    def __init__(self, mode: str = "watch", *, sampler: Sampler | None = None, job: Job | None = None,
                 interval: float = 0.5, recorder: Any = None, record_text: bool = False, recording: Any = None,
                 speed: int = 1, preload: Iterable[Any] = ()) -> None:
        super().__init__()
        self.mode = mode
        self.sampler = sampler
        self.job = job
        self.interval = interval
        self.recorder = recorder
        self.record_text = record_text
        self.pipeline = Pipeline()
        self.bus = EventBus()
        self._inbox: deque[Any] = deque()
        self.cancel = threading.Event()
        self.paused = False
        self.narrow_view = "dash"
        self._preload = list(preload)
        self._sampler_thread: SamplerThread | None = None
        self._drawn: object = None
        self._panel_ids: list[str] = []
        self._rebuilding = False
        self.player = None
        if recording is not None:
            from cliff_tui.recording.player import Player

            self.player = Player(recording, speed=speed)
            self.pipeline = self.player.pipeline
        self.bus.subscribe(self._from_producers)
        self._stop_recording = self.bus.subscribe(recorder.write) if recorder is not None else (lambda: None)

    # --- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield PanelView(id="title")
        yield LineView(id="signs")
        with Horizontal(id="body"):
            yield VerticalScroll(id="dash")
            yield VerticalScroll(PanelView(id="projection-view"), id="projection")
        yield LineView(id="progress")
        yield PanelView(id="error")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#projection").display = self.mode in ("triangulate", "replay")
        for event in self._preload:
            self._feed(event)
        if self.sampler is not None:
            from cliff_tui.probes.sampler import SamplerThread

            self._sampler_thread = SamplerThread(self.sampler, self.bus.publish, self.interval).start()
        if self.job is not None:
            if hasattr(self.job, "on_worker") and self.sampler is not None:
                self.job.on_worker = self.sampler.set_pid
            self._run_job()
        if self.player is not None:
            for event in self.player.start(time.monotonic()):
                self._feed(event)
        self.set_interval(min(self.interval, 0.25), self._tick)
        self._layout_for(self.size.width)
        await self._rebuild_panels(self._wanted_panel_ids())  # the first frame without a round trip

    def on_resize(self, event: Any) -> None:
        self._layout_for(event.size.width)

    def _layout_for(self, width: int) -> None:
        projection = self.query_one("#projection")
        dash = self.query_one("#dash")
        if not self._has_projection():
            _set_display(projection, False)
            _set_display(dash, True)
            return
        wide = width >= WIDE
        _set_display(dash, wide or self.narrow_view == "dash")
        _set_display(projection, wide or self.narrow_view == "projection")
        projection.set_class(not wide, "full")

    def _has_projection(self) -> bool:
        return self.mode == "triangulate" or bool(self.pipeline.plan or len(self.pipeline.results) > 1)

    # --- events ---------------------------------------------------------------------------

    def _from_producers(self, event: Any) -> None:
        """Runs on the producer's thread: hand over, never block it."""
        self._inbox.append(event)

    def _feed(self, event: Any) -> None:
        for alert in self.pipeline.feed(event):
            if self.recorder is not None:
                self.recorder.write(alert)
            self._notify_alert(alert)

    def _notify_alert(self, alert: Alert) -> None:
        if self.player is None or self.player.playing:
            severity = "error" if alert.level == "red" else "warning"
            self.notify(alert.message, title=f"sign {alert.sign}", severity=severity, timeout=6)

    @work(thread=True, exit_on_error=False, name="job")
    def _run_job(self) -> None:
        lower_other_threads()  # the screen and the sampler yield to the engine this thread starts
        try:
            self.job.run(self.bus.publish, self.cancel)
        except CliffError as exc:
            if not self.cancel.is_set() and not getattr(exc, "published", False):
                self.bus.publish(RunFailed(time.time(), "job", exc.kind, str(exc)))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A bug in a job must not vanish silently: show it, keep the dashboard running."""
        if event.worker.name == "job" and event.state == WorkerState.ERROR:
            error = event.worker.error
            self.bus.publish(RunFailed(time.time(), "job", "error",
                                       f"internal error: {type(error).__name__}: {error} (please report it)"))

    def _tick(self) -> None:
        """Take in what the producers published, draw what changed since the last tick (a burst
        of events is one frame); in a replay, also move the replay clock."""
        if not self.is_running:  # shutting down: the widgets may be gone already
            return
        while self._inbox:
            self._feed(self._inbox.popleft())
        if self.player is not None:
            for event in self.player.advance(time.monotonic()):
                self._feed(event)
        if not self.paused:
            self._draw()

    # --- drawing --------------------------------------------------------------------------

    def _draw(self) -> None:
        p = self.pipeline
        player = self.player
        version = (p.version, self.size.width, self.size.height, self.paused, self.recorder is not None,
                   player and (player.cursor, player.playing, player.speed, round(player.position, 1)))
        if version == self._drawn:
            return
        self._drawn = version
        title = self._title()
        self.query_one("#title", PanelView).show(title, lambda: title, 1)
        _show_line(self.query_one("#signs", LineView), render.signs_line(p.signs))
        self._draw_panels()
        _show_line(self.query_one("#progress", LineView), self._progress_line())
        self._draw_error()
        if self._has_projection():
            self._layout_for(self.size.width)
            self._draw_projection()

    def _wanted_panels(self) -> list[tuple[str, Any]]:
        hint = "" if self.mode in ("run", "triangulate", "attach", "replay") else render.NO_SOURCE
        panels = render.panels(self.pipeline, hint or "waiting for tokens…")
        line = render.no_vram_line(self.pipeline.latest)
        return ([(NO_VRAM, line)] if line else []) + [(panel.key, panel) for panel in panels]

    def _wanted_panel_ids(self) -> list[str]:
        return [f"panel-{key}" for key, _ in self._wanted_panels()]

    def _draw_panels(self) -> None:
        wanted = self._wanted_panels()
        ids = [f"panel-{key}" for key, _ in wanted]
        if ids != self._panel_ids:
            if not self._rebuilding:
                self._rebuilding = True
                self.run_worker(self._rebuild_panels(ids), group="panels")
            return
        dash = self.query_one("#dash")
        for view, (_, item) in zip(dash.children, wanted):
            if isinstance(item, str):
                view.show(item, lambda: Text(item, style="yellow"))
            else:
                view.show(item.content_key, item.segment_lines)

    async def _rebuild_panels(self, ids: list[str]) -> None:
        """The set of tiers changed (a GPU appeared, a --pid process…): remount, then draw."""
        dash = self.query_one("#dash")
        await dash.remove_children()
        await dash.mount_all([(PanelView if panel_id == f"panel-{NO_VRAM}" else LineView)(id=panel_id, classes="panel")
                              for panel_id in ids])
        self._panel_ids = ids
        self._rebuilding = False
        self._drawn = None
        self._draw()

    def _draw_projection(self) -> None:
        view = self.query_one("#projection-view", PanelView)
        width = max(40, self.query_one("#projection").size.width - 2)
        key = (len(self.pipeline.results), len(self.pipeline.failures), self.pipeline.target, width,
               self.pipeline.plan)
        view.show(key, lambda: projection_view.pane(self.pipeline, width, chart_height=14, color=not self.no_color))

    def _draw_error(self) -> None:
        error = self.query_one("#error", PanelView)
        failure = self.pipeline.last_failure
        shown = failure is not None and not (failure.kind == "does_not_fit" and self.mode == "triangulate")
        _set_display(error, shown)
        if shown:
            error.show(failure, lambda: Text(f"✖ {failure.message}", style="bold red"))

    def _title(self) -> str:
        parts = ["cliff-tui", self.mode]
        if self.job is not None:
            parts.append(self.job.title)
        model = self.pipeline.model
        if model is not None:
            parts.append(f"{model.name} ({model.file_type or '?'})")
        if self.player is not None:
            parts.append(self.player.describe())
        if self.recorder is not None:
            parts.append(f"● REC {self.recorder.path}")
        if self.paused:
            parts.append("PAUSED")
        return " · ".join(parts)

    def _progress_line(self) -> render.Parts:
        if self.player is not None:
            return [(self.player.cursor_line(), None)]
        if self.mode == "attach" and self.pipeline.sessions:
            return render.session_line(self.pipeline)
        return render.progress_line(self.pipeline)

    # --- actions --------------------------------------------------------------------------

    async def action_quit(self) -> None:
        self.cancel.set()
        self.exit()

    def action_pause(self) -> None:
        if self.player is not None:
            self.action_play()
            return
        self.paused = not self.paused
        self._draw()

    def action_help(self) -> None:
        from cliff_tui.ui.screens import HelpScreen

        self.push_screen(HelpScreen(self.mode))

    def action_log(self) -> None:
        from cliff_tui.ui.screens import LogScreen

        self.push_screen(LogScreen(self.pipeline))

    def action_view(self) -> None:
        self.narrow_view = "projection" if self.narrow_view == "dash" else "dash"
        self._layout_for(self.size.width)

    def action_target(self) -> None:
        from cliff_tui.ui.screens import TargetScreen

        def apply(value: int | None) -> None:
            if value:
                self.pipeline.set_target(value)
                self._draw()

        self.push_screen(TargetScreen(self.pipeline.target), apply)

    def action_record(self) -> None:
        from cliff_tui.recording.writer import Recorder, timestamped_name

        if self.recorder is not None:
            self._stop_recording()
            self.recorder.close()
            self.notify(f"recording saved: {self.recorder.path}")
            self.recorder = None
            self._draw()
            return
        try:
            self.recorder = Recorder.create(timestamped_name(), command=[self.mode], record_text=self.record_text)
        except CliffError as exc:
            self.notify(str(exc), severity="error")
            return
        self.recorder.write_snapshot(self.pipeline)
        self._stop_recording = self.bus.subscribe(self.recorder.write)
        self.notify(f"recording to {self.recorder.path}")
        self._draw()

    def action_play(self) -> None:
        if self.player is not None:
            self.player.toggle(time.monotonic())
            self._draw()

    def action_speed(self) -> None:
        if self.player is not None:
            self.player.cycle_speed(time.monotonic())
            self._draw()

    def action_seek(self, seconds: float) -> None:
        if self.player is not None:
            self.player.seek_by(seconds, time.monotonic())
            self.pipeline = self.player.pipeline
            self._draw()

    def action_seek_to(self, fraction: float) -> None:
        if self.player is not None:
            self.player.seek_fraction(fraction, time.monotonic())
            self.pipeline = self.player.pipeline
            self._draw()

    def action_step(self) -> None:
        if self.player is not None:
            for event in self.player.step():
                self._feed(event)
            self._draw()

    def on_unmount(self) -> None:
        self.cancel.set()
        if self._sampler_thread is not None:
            self._sampler_thread.stop()
        if self.recorder is not None:
            self.recorder.close()


def _show_line(view: LineView, parts: render.Parts) -> None:
    view.show(tuple(parts), lambda width: [render.fit_line(parts, width)])


def _set_display(widget: Any, shown: bool) -> None:
    """Setting ``display`` asks for a new layout of the whole screen, even to the same value."""
    if widget.display != shown:
        widget.display = shown
