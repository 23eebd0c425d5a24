"""Serving the metrics: the registry, the HTTP server and the session's lifetime."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TextIO
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from cliff_tui.errors import CliffError
from cliff_tui.exporter.collector import CliffCollector
from cliff_tui.exporter.plans import CapacityPlan
from cliff_tui.listen import Bind, listen_error, wide_bind_warning
from cliff_tui.session import Session, stop_on_signals


class Exporter:
    """A registry of its own (no default process/platform collectors) with the session's collector
    and the exporter's own CPU and memory (``cliff_exporter_process_*``)."""

    def __init__(self, session: Session, plans: Sequence[CapacityPlan] = ()) -> None:
        self.session = session
        self.registry = CollectorRegistry()
        self.registry.register(CliffCollector(session, plans))
        ProcessCollector(namespace="cliff_exporter", registry=self.registry)
        self._httpd: WSGIServer | None = None

    def listen(self, bind: Bind) -> Bind:
        """Start answering scrapes; returns where (port 0 becomes the port the system chose)."""
        try:
            self._httpd, _ = start_http_server(bind.port, addr=bind.host, registry=self.registry)
        except OSError as exc:
            raise listen_error(bind, exc) from None
        return Bind(bind.host, self._httpd.server_address[1])

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def run(self, bind: Bind, stderr: TextIO = sys.stderr) -> int:
        """Listen, sample (and run the attach job) until SIGINT/SIGTERM."""
        bound = self.listen(bind)
        try:
            if not bound.loopback:
                print(wide_bind_warning(bound, "the exporter"), file=stderr, flush=True)
            print(f"cliff-tui exporter: serving http://{bound}/metrics", file=stderr, flush=True)
            with stop_on_signals(self.session.cancel), self.session:
                if self.session.job is not None:
                    threading.Thread(target=self._run_job, args=(stderr,), name="cliff-job", daemon=True).start()
                while not self.session.cancel.wait(0.5):
                    pass
        finally:
            self.close()
        return 0

    def _run_job(self, stderr: TextIO) -> None:
        try:
            self.session.run_job()
        except CliffError as exc:
            print(f"cliff-tui exporter: {exc}", file=stderr, flush=True)
        except Exception as exc:
            self.session.report_crash(exc)
            print(f"cliff-tui exporter: internal error in the job: {type(exc).__name__}: {exc}", file=stderr)
