"""A session with no screen: progress and alerts on stderr, samples or results on stdout.

Used by ``--headless`` and scripts; the same session (bus, store, sampler, job, recorder) as the
TUI, fed directly on the producers' threads.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from cliff_tui.events import Alert, Notice, RunFailed, RunProgress, Sample
from cliff_tui.jobs import Outcome
from cliff_tui.report.samples import sample_record
from cliff_tui.session import Session, stop_on_signals
from cliff_tui.text import inert
from cliff_tui.units import fmt_bytes, fmt_duration


class Headless:
    def __init__(self, session: Session, *, stderr: TextIO | None = None, ends_on_failure: bool = False) -> None:
        """``ends_on_failure``: a context that does not fit ends the job, and the program's error
        line says it (``run``); else it is a point that failed and the job goes on (``triangulate``)."""
        self.session = session
        self.ends_on_failure = ends_on_failure
        self.stderr = stderr or sys.stderr
        self._last_prefill_print = 0.0
        self.output_error: OSError | None = None  # standard output closed or full: the watch stopped

    def run_job(self, progress: bool = True) -> Outcome:
        """Run the session's job to the end with sampling on; progress lines go to stderr."""
        if progress:
            self.session.bus.subscribe(self._print_progress)
            self.session.alert_listeners.append(self._print_progress)
        with stop_on_signals(self.session.cancel), self.session:
            return self.session.run_job()

    def _print_progress(self, event: object) -> None:
        if isinstance(event, RunProgress) and event.phase in ("load", "baseline", "decode", "done"):
            if event.phase != "decode" or event.depth == event.depth_target:
                self._say(f"[{event.phase}] depth {event.depth:,}/{event.depth_target:,}")
        elif isinstance(event, RunProgress) and event.phase == "prefill":
            now = time.monotonic()
            if now - self._last_prefill_print > 10:
                self._last_prefill_print = now
                rate = f"{event.prefill_tok_s:.0f} tok/s" if event.prefill_tok_s else ""
                self._say(
                    f"[prefill] depth {event.depth:,}/{event.depth_target:,} {rate} ETA {fmt_duration(event.eta_s)}"
                )
        elif isinstance(event, (Notice, Alert)):
            self._say(f"[{getattr(event, 'level', 'info')}] {_text(event)}")
        elif isinstance(event, RunFailed) and event.kind == "does_not_fit" and not self._said_at_exit(event):
            self._say(f"[does not fit] {inert(event.message)}")
        elif isinstance(event, RunFailed) and event.oom is not None:
            self._say(f"[killed] {inert(event.message)}")

    def _said_at_exit(self, event: RunFailed) -> bool:
        return self.ends_on_failure and event.oom is None

    def _say(self, line: str) -> None:
        """A progress line; where standard error is full, the run goes on without them."""
        try:
            print(line, file=self.stderr, flush=True)
        except OSError:
            pass

    def watch(self, out: TextIO, as_json: bool) -> None:
        """Print a line per sample until SIGINT/SIGTERM (cron, nohup, systemd)."""

        def show(event: object) -> None:
            if isinstance(event, Sample):
                try:
                    print(json.dumps(sample_record(event)) if as_json else watch_line(event), file=out, flush=True)
                except OSError as exc:  # `| head -1` has what it wanted, or the disk is full: stop
                    self.output_error = exc
                    self.session.cancel.set()
            elif isinstance(event, Notice) and event.level == "warning":
                self._say(f"cliff-tui: {_text(event)}")

        self.session.bus.subscribe(show)
        with stop_on_signals(self.session.cancel), self.session:  # recording is what it is for: stop with it
            while not self.session.cancel.wait(0.2) and self.session.recording_failure is None:
                pass


def _text(event: object) -> str:
    return inert(str(getattr(event, "text", None) or getattr(event, "message", "")))


def watch_line(s: Sample) -> str:
    """One sample in a line, its RAM tier as the dashboard's: a cgroup's limit where one applies."""
    ram = f"RAM {fmt_bytes(s.ram_used_bytes)}/{fmt_bytes(s.ram_capacity_bytes)}"
    if s.cgroup is not None:
        ram += f" (cgroup limit; host {fmt_bytes(s.ram.used_bytes)}/{fmt_bytes(s.ram.total_bytes)})"
    parts = [
        time.strftime("%H:%M:%S", time.localtime(s.t)),
        ram,
        f"swap {fmt_bytes(s.swap.used_bytes)}/{fmt_bytes(s.swap.total_bytes)}",
    ]
    for g in s.gpus:
        parts.append(
            f"GPU{g.index} {fmt_bytes(g.vram_used_bytes)}/{fmt_bytes(g.vram_total_bytes)} "
            f"shared {fmt_bytes(g.shared_used_bytes)}"
        )
    if s.process is not None:
        rss, why = s.process.total_rss_bytes, s.process.reasons.get("rss_bytes")
        parts.append(f"PID {s.process.pid} RSS {fmt_bytes(rss)}" + (f" ({inert(why)})" if rss is None and why else ""))
    if s.cpu_quota is not None:
        parts.append(f"CPU quota {s.cpu_quota.words} (cgroup {inert(s.cpu_quota.path)})")
    return "  ".join(parts)
