"""``cliff-tui attach``: watch a chat that is already running, without loading a model.

:class:`AttachJob` polls llama-server (``/metrics``, ``/slots``) and/or Ollama (``/api/ps``). It
publishes a :class:`ServerReading` per poll, and the server's decode rate as one stream of
``DecodeWindow`` events: the only source of its tok/s series and of sign 3. A server that does
not answer is retried with exponential backoff; nothing here raises on network trouble.

``--once`` (one reading per endpoint, as a record) is :mod:`cliff_tui.jobs.attach_once`; it reads
the endpoints and their live rate through :class:`Endpoint` and :class:`LiveDecodeMeter` here.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cliff_tui.analysis.server_rates import CounterMove, ServerRateMeter
from cliff_tui.errors import BadInput
from cliff_tui.events import ATTACH_RUN_ID, DecodeWindow, LogLine, MeasuredCapacity, Notice, ServerReading, ServersFound
from cliff_tui.jobs import OnWorker, Outcome, Publish
from cliff_tui.jobs.server_memory import MemoryProbe
from cliff_tui.probes.endpoints.discovery import (
    DEFAULT_URLS,
    Found,
    describe_discovery,
    describe_found,
    find_servers,
    is_found,
    resolve_url,
)
from cliff_tui.probes.endpoints.http import BadUrl, normalise_url
from cliff_tui.probes.endpoints.kinds import APIS, LLAMA_SERVER_API, kind_named
from cliff_tui.probes.endpoints.llama_server import LLAMA_SERVER, SlotsRead, dropped_requests, read_model_file
from cliff_tui.probes.endpoints.processes import engine_child
from cliff_tui.probes.endpoints.server_log import ServerLog
from cliff_tui.records import UNKNOWN_MODEL, FoundServer, NoticeLevel
from cliff_tui.text import inert

MAX_BACKOFF_S = 30.0
SEARCH_BACKOFF_S = 10.0  # a server started after cliff-tui is found within this
DISCOVERY_TIMEOUT_S = 1.0
TOLD_KEPT = 64  # distinct unbelievable values remembered (a hostile server could send endless ones)


@dataclass(frozen=True)
class Endpoint:
    source: str  # "llama-server" | "ollama"
    url: str

    def read(self, timeout: float) -> ServerReading:
        return self.probe(timeout)[0]

    def probe(self, timeout: float) -> tuple[ServerReading, SlotsRead]:
        """The reading and, where the API has slots, what /slots says about running requests."""
        found = APIS[self.source].probe(self.url, timeout)
        return found.reading, found.slots


@dataclass(frozen=True)
class LiveRate:
    """Tokens one slot decoded between two reads of /slots, while its request ran."""

    slot: int
    n_tokens: int
    seconds: float
    depth: int | None  # cells the slot held at the later read

    @property
    def tok_s(self) -> float:
        return self.n_tokens / self.seconds


class LiveDecodeMeter:
    """Decode tok/s while a request runs: llama-server's /metrics counters only move when a request
    finishes, but each slot's ``n_decoded`` in /slots grows with every token."""

    def __init__(self) -> None:
        self._prev: SlotsRead | None = None

    def update(self, read: SlotsRead) -> list[LiveRate]:
        prev, self._prev = self._prev, read
        if prev is None or prev.t is None or read.t is None or read.t <= prev.t:
            return []
        before = {p.id: p for p in prev.progress}
        depth = {s.id: s.tokens_used for s in read.slots}
        rates = []
        for now in read.progress:
            then = before.get(now.id)
            if then is None or not (then.processing and now.processing) or then.id_task != now.id_task:
                continue
            # n_decoded 0 at the earlier read: the gap includes prompt processing, not decode alone.
            if not then.n_decoded or now.n_decoded is None or now.n_decoded <= then.n_decoded:
                continue
            rates.append(LiveRate(now.id, now.n_decoded - then.n_decoded, read.t - prev.t, depth.get(now.id)))
        return rates


def healthy(reading: ServerReading) -> bool:
    """Worth polling at the normal pace: it answers as the server it should be."""
    return reading.status in ("ok", "no-metrics")


class Poller:
    """One endpoint's schedule: every ``interval`` while it answers, backing off while it does not.

    A *quiet* poller (looking on a default port) publishes nothing until its server first answers.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        interval: float,
        *,
        quiet: bool = False,
        ceiling: float = MAX_BACKOFF_S,
        log: ServerLog | None = None,
        memory: MemoryProbe | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.log = log
        self.memory = memory
        self.interval = interval
        self.ceiling = ceiling
        self.found = not quiet
        self.failures = 0
        self.due = 0.0
        self.delay = 0.0  # until the poll after the latest one
        self.last: ServerReading | None = None
        self.live: list[LiveRate] = []
        self.model_checked = False  # the served model held against a measured one since the server came back
        self._meter = LiveDecodeMeter()
        self._counters = ServerRateMeter()
        self._moved: CounterMove | None = None  # the decode counters' move at the latest poll
        self._live_since_move = False
        self._told: set[str] = set()  # the values that cannot be true, logged once each
        self._slots: SlotsRead | None = None  # the previous read of /slots, with its requests
        self.dropped = 0  # running requests dropped with their cells cleared since attach

    def backoff(self) -> float:
        return min(self.ceiling, max(self.interval, 1.0) * 2 ** (self.failures - 1))

    def poll(self, timeout: float) -> ServerReading | None:
        reading, slots = self.endpoint.probe(timeout)
        self.live = self._meter.update(slots)
        if self._slots is not None:
            self.dropped += dropped_requests(self._slots, slots)
        self._slots = slots if slots.progress else None
        if healthy(reading):
            self.failures, delay = 0, self.interval
        else:
            self.failures += 1
            delay = self.backoff()
            reading = dataclasses.replace(reading, message=f"{reading.message}; retrying in {delay:.0f} s")
        rates, self._moved = self._counters.update(reading)
        reading = dataclasses.replace(reading, rates=rates)
        reading = self._with_failures(reading)
        self.delay = delay
        self.due = time.monotonic() + delay
        self.last = reading
        self.found = self.found or is_found(reading)
        return reading if self.found else None

    def _with_failures(self, reading: ServerReading) -> ServerReading:
        """Requests failed for lack of cells since attach started: its log names them where it is
        a readable file; /slots shows each as a running request dropped with its cells cleared."""
        logged = self.log.read() if self.log is not None else None
        in_log = logged.failures if logged is not None else None
        if in_log is None and not self.dropped and not reading.slots:
            return dataclasses.replace(reading, log=logged.note if logged is not None else "")
        failures = max(in_log or 0, self.dropped)
        note = logged.note if logged is not None else "no log to read"
        if in_log is None:
            note += f"; /slots: {self.dropped} running request(s) dropped with their cells cleared since attach"
        return dataclasses.replace(reading, context_failures=failures, log=note)

    def unbelievable(self, reading: ServerReading) -> list[str]:
        """Each value the server gave that cannot be true, the first time it gives it."""
        lines = [
            f"{reading.source} {reading.url}: {key} {why}"
            for key, why in reading.reasons.items()
            if why.startswith("unreadable")
        ]
        new = [line for line in lines if line not in self._told][: max(0, TOLD_KEPT - len(self._told))]
        self._told.update(new)  # once full, nothing more is logged: not a line on every poll
        return new

    def windows(self, reading: ServerReading) -> list[DecodeWindow]:
        """This poll's decode rate: /slots' progress while a request runs; otherwise the counters'
        move when a request ended that no two reads of /slots caught (never both for one request)."""
        out = [live_window(reading.t, rate) for rate in self.live]
        self._live_since_move = self._live_since_move or bool(out)
        moved = self._moved
        if moved is not None:
            if not self._live_since_move:
                out.append(counter_window(reading, moved))
            self._live_since_move = False
        return out


class AttachJob:
    follows_own_process = False

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        interval: float = 0.5,
        timeout: float = 2.0,
        measured: MeasuredCapacity | None = None,
        found: Found | None = None,
    ) -> None:
        """No endpoints: find the servers on this machine when the job starts (``found``: already
        looked). ``measured``: the capacity a triangulation measured for the served model, which its
        slots are held against."""
        self.measured = measured
        self.endpoints = list(endpoints)
        self.interval = interval
        self.timeout = timeout
        self.found = found
        self.discover_defaults = not self.endpoints
        self.title = _title(self.endpoints) if not self.discover_defaults else _searching_title()

    @classmethod
    def from_urls(
        cls,
        urls: Mapping[str, str | None],
        interval: float = 0.5,
        timeout: float = 2.0,
        measured: MeasuredCapacity | None = None,
    ) -> AttachJob:
        """``urls``: an API's name → the URL given for it (None: not given). None given: find the
        servers when the job starts."""
        endpoints = [Endpoint(name, _checked_url(APIS[name].flag, url)) for name, url in urls.items() if url]
        return cls(endpoints, interval, timeout, measured)

    # --- what it follows --------------------------------------------------------------------

    def targets(self, publish: Publish) -> list[FoundServer]:
        """The servers to read, each as discovery describes it (its process, flags and how it was
        found), announced: the busiest found on this machine, or each URL given, resolved to the
        process that listens there (or why none can be seen)."""
        t = time.time()
        if self.discover_defaults:
            found = self.found or find_servers(min(self.timeout, DISCOVERY_TIMEOUT_S))
            chosen = found.chosen
            if found.servers:
                publish(ServersFound(t, tuple(found.servers), chosen.url if chosen else ""))
                publish(Notice(t, describe_found(found), level="info" if chosen else "warning"))
            if chosen is None:
                return []
            self.title = f"{chosen.kind} {chosen.url}"
            return [chosen]
        timeout = min(self.timeout, DISCOVERY_TIMEOUT_S)
        servers = [resolve_url(APIS[e.source], e.url, timeout) for e in self.endpoints]
        publish(ServersFound(t, tuple(servers), servers[0].url))
        for s in servers:
            publish(Notice(t, f"attached to {s.kind} at {s.url}: {s.how}"))
        return servers

    def pollers(self, targets: Sequence[FoundServer]) -> list[Poller]:
        """A poller per target; none found: quiet pollers on the default ports. A server whose
        process is on this machine also gets its log and memory read."""
        if targets:
            return [self._poller(s) for s in targets]
        return [
            Poller(Endpoint(name, url), self.interval, quiet=True, ceiling=SEARCH_BACKOFF_S)
            for name, url in DEFAULT_URLS.items()
        ]

    def _poller(self, server: FoundServer) -> Poller:
        endpoint = endpoint_of(server)
        kind = kind_named(server.kind)
        if server.pid is None or kind is None or kind.api is None or not kind.reads_process:
            return Poller(endpoint, self.interval)
        if not kind.api.has("log"):
            engine = engine_child(server.pid, kind.engine_title) if kind.engine_title else None
            return Poller(endpoint, self.interval, memory=MemoryProbe(server, engine, llama_cpp=False))
        return Poller(endpoint, self.interval, log=ServerLog(server.pid), memory=MemoryProbe(server))

    def check(self) -> None:
        """Nothing to refuse: the endpoints were parsed when the job was made."""

    def run(self, publish: Publish, cancel: threading.Event, on_worker: OnWorker) -> Outcome:
        if self.measured is not None:
            publish(dataclasses.replace(self.measured, t=time.time()))
        targets = self.targets(publish)
        pollers = self.pollers(targets)
        searching = not targets
        announced = not searching
        while not cancel.is_set():
            polled = self._poll_due(pollers, publish, cancel, announce_found=announced)
            if polled and not announced:
                announced = self.announce_search(pollers, publish)
            if polled and searching:
                self._publish_not_found(pollers, publish)
            cancel.wait(max(0.0, min(p.due for p in pollers) - time.monotonic()))
        return "cancelled"

    def poll_all(self, pollers: Sequence[Poller], publish: Publish) -> None:
        """Every poller once, now (``attach --once``)."""
        for poller in pollers:
            poller.due = 0.0
        self._poll_due(list(pollers), publish, threading.Event(), announce_found=True)

    def _poll_due(
        self, pollers: list[Poller], publish: Publish, cancel: threading.Event, *, announce_found: bool
    ) -> bool:
        polled = False
        for poller in pollers:
            if cancel.is_set():
                break
            if poller.due > time.monotonic():
                continue
            was_found = poller.found
            reading = poller.poll(self.timeout)
            polled = True
            if reading is None:
                continue
            if announce_found and not was_found:
                publish(Notice(reading.t, f"found {reading.source} at {reading.url}"))
            publish(reading)
            for line in poller.unbelievable(reading):
                publish(LogLine(reading.t, logging.WARNING, line))
            memory = poller.memory.read() if poller.memory is not None else None
            if memory is not None:
                publish(memory)
            for window in poller.windows(reading):
                publish(window)
            if self.measured is not None and poller.endpoint.source == LLAMA_SERVER:
                self._check_served_model(poller, reading, self.measured, publish)
        return polled

    def _check_served_model(
        self, poller: Poller, reading: ServerReading, measured: MeasuredCapacity, publish: Publish
    ) -> None:
        """Once each time the server comes back (it may have restarted with another model): the
        name of the GGUF it serves against the one the triangulation measured. A /props that does
        not answer then is not asked again until the next time."""
        if not healthy(reading):
            poller.model_checked = False
            return
        if poller.model_checked or measured.model == UNKNOWN_MODEL:
            return
        poller.model_checked = True
        served = read_model_file(poller.endpoint.url, min(self.timeout, DISCOVERY_TIMEOUT_S))
        if served is not None and served.casefold() != measured.model.casefold():
            publish(
                Notice(
                    reading.t,
                    f"llama-server serves {inert(served)}, the triangulation measured "
                    f"{inert(measured.model)}: unless they are the same model and quantisation, "
                    "the gauge holds its slots against another model's largest context "
                    "(triangulate the served file to hold them against its own)",
                    level="warning",
                )
            )

    def announce_search(self, pollers: list[Poller], publish: Publish) -> bool:
        """After the first look at every default port: say what was found (True once said)."""
        readings = {p.endpoint.source: p.last for p in pollers if p.last is not None}
        if len(readings) < len(pollers):
            return False
        level: NoticeLevel = "info" if any(p.found for p in pollers) else "warning"
        publish(Notice(time.time(), describe_discovery(_without_retry(readings)), level=level))
        return True

    def _publish_not_found(self, pollers: list[Poller], publish: Publish) -> None:
        """Nothing found yet: one reading that says so, so the panel is not blank."""
        readings = {p.endpoint.source: p.last for p in pollers if p.last is not None}
        if any(p.found for p in pollers) or len(readings) < len(pollers):
            return
        wait = min(p.due for p in pollers) - time.monotonic()
        message = f"{describe_discovery(_without_retry(readings))}; looking again in {max(wait, 0):.0f} s"
        publish(
            ServerReading(
                t=time.time(),
                source=LLAMA_SERVER,
                url=DEFAULT_URLS[LLAMA_SERVER],
                status="unreachable",
                message=message,
            )
        )


def endpoint_of(server: FoundServer) -> Endpoint:
    kind = kind_named(server.kind)
    api = kind.api if kind is not None and kind.api is not None else LLAMA_SERVER_API
    return Endpoint(api.name, server.url)


def live_window(t: float, rate: LiveRate) -> DecodeWindow:
    return DecodeWindow(
        t=t,
        run_id=ATTACH_RUN_ID,
        phase="depth",
        depth=rate.depth or 0,
        n_tokens=rate.n_tokens,
        tok_s=rate.tok_s,
        spread_tok_s=0.0,
    )


def counter_window(reading: ServerReading, moved: CounterMove) -> DecodeWindow:
    """A finished request's rate from /metrics; its depth is the most cells a slot holds now."""
    depth = max((s.tokens_used or 0 for s in reading.slots), default=0)
    return DecodeWindow(
        t=reading.t,
        run_id=ATTACH_RUN_ID,
        phase="depth",
        depth=depth,
        n_tokens=moved.n_tokens,
        tok_s=moved.tok_s,
        spread_tok_s=0.0,
    )


def _checked_url(flag: str, url: str) -> str:
    try:
        return normalise_url(url)
    except BadUrl as exc:
        raise BadInput(f"{flag}: {exc}") from None


def _title(endpoints: Sequence[Endpoint]) -> str:
    return " + ".join(f"{e.source} {e.url}" for e in endpoints)


def _searching_title() -> str:
    ports = " / ".join(f"{name} :{urllib.parse.urlsplit(api.default_url).port}" for name, api in APIS.items())
    return f"looking for {ports}"


def _without_retry(readings: dict[str, ServerReading]) -> dict[str, ServerReading]:
    return {s: dataclasses.replace(r, message=r.message.split("; retrying in ")[0]) for s, r in readings.items()}
