"""``cliff-tui attach``: watch a chat that is already running, without loading a model.

:class:`AttachJob` polls llama-server (``/metrics``, ``/slots``) and/or Ollama (``/api/ps``). It
publishes a :class:`SessionReading` per poll, and the server's decode rate as one stream of
``DecodeWindow`` events: the only source of its tok/s series and of sign 3. A server that does
not answer is retried with exponential backoff; nothing here raises on network trouble. :func:`attach_once` is ``--once --json``: one sample and one reading per endpoint.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cliff_tui.analysis.server_rates import CounterMove, SessionRateMeter
from cliff_tui.codec import to_plain
from cliff_tui.errors import BadInput
from cliff_tui.events import (
    ATTACH_RUN_ID,
    UNKNOWN_MODEL,
    DecodeWindow,
    MeasuredCapacity,
    Notice,
    SessionReading,
    SlotReading,
)
from cliff_tui.jobs import OnWorker, Outcome, Publish
from cliff_tui.probes.endpoints.discovery import DEFAULT_URLS, READERS, describe_discovery, discover, is_found
from cliff_tui.probes.endpoints.http import BadUrl, normalise_url
from cliff_tui.probes.endpoints.llama_server import LLAMA_SERVER, SlotsRead, probe_llama_server, read_model_file
from cliff_tui.probes.endpoints.ollama import OLLAMA
from cliff_tui.report import sample_record
from cliff_tui.text import inert

MAX_BACKOFF_S = 30.0
SEARCH_BACKOFF_S = 10.0  # a server started after cliff-tui is found within this
DISCOVERY_TIMEOUT_S = 1.0
RECORD_KEYS = {LLAMA_SERVER: "llama_server", OLLAMA: "ollama"}
NOTHING_GENERATED = "no tokens generated since llama-server started: send a chat request, then attach again"


@dataclass(frozen=True)
class Endpoint:
    source: str  # "llama-server" | "ollama"
    url: str

    def read(self, timeout: float) -> SessionReading:
        return READERS[self.source](self.url, timeout)

    def probe(self, timeout: float) -> tuple[SessionReading, SlotsRead]:
        """The reading and, for llama-server, what /slots says about running requests."""
        if self.source != LLAMA_SERVER:
            return self.read(timeout), SlotsRead()
        found = probe_llama_server(self.url, timeout)
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


def healthy(reading: SessionReading) -> bool:
    """Worth polling at the normal pace: it answers as the server it should be."""
    return reading.status in ("ok", "no-metrics")


class Poller:
    """One endpoint's schedule: every ``interval`` while it answers, backing off while it does not.

    A *quiet* poller (looking on a default port) publishes nothing until its server first answers.
    """

    def __init__(
        self, endpoint: Endpoint, interval: float, *, quiet: bool = False, ceiling: float = MAX_BACKOFF_S
    ) -> None:
        self.endpoint = endpoint
        self.interval = interval
        self.ceiling = ceiling
        self.found = not quiet
        self.failures = 0
        self.due = 0.0
        self.last: SessionReading | None = None
        self.live: list[LiveRate] = []
        self.model_checked = False  # the served model held against a measured one since the server came back
        self._meter = LiveDecodeMeter()
        self._counters = SessionRateMeter()
        self._live_since_move = False

    def backoff(self) -> float:
        return min(self.ceiling, max(self.interval, 1.0) * 2 ** (self.failures - 1))

    def poll(self, timeout: float) -> SessionReading | None:
        reading, slots = self.endpoint.probe(timeout)
        self.live = self._meter.update(slots)
        if healthy(reading):
            self.failures, delay = 0, self.interval
        else:
            self.failures += 1
            delay = self.backoff()
            reading = dataclasses.replace(reading, message=f"{reading.message}; retrying in {delay:.0f} s")
        self.due = time.monotonic() + delay
        self.last = reading
        self.found = self.found or is_found(reading)
        return reading if self.found else None

    def windows(self, reading: SessionReading) -> list[DecodeWindow]:
        """This poll's decode rate: /slots' progress while a request runs; otherwise the counters'
        move when a request ended that no two reads of /slots caught (never both for one request)."""
        out = [live_window(reading.t, rate) for rate in self.live]
        self._live_since_move = self._live_since_move or bool(out)
        moved = self._counters.update(reading).decode_moved
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
    ) -> None:
        """No endpoints: look for both servers on their default loopback ports. ``measured``: the
        capacity a triangulation measured for the served model, which its slots are held against."""
        self.measured = measured
        self.endpoints = list(endpoints)
        self.interval = interval
        self.timeout = timeout
        self.discover_defaults = not self.endpoints
        self.title = _title(self.endpoints) if not self.discover_defaults else _searching_title()

    @classmethod
    def from_args(
        cls,
        llama_server_url: str | None,
        ollama_url: str | None,
        interval: float = 0.5,
        timeout: float = 2.0,
        measured: MeasuredCapacity | None = None,
    ) -> AttachJob:
        """Both URLs None: look on the default loopback ports when the job starts."""
        endpoints = [
            Endpoint(source, _checked_url(flag, url))
            for source, flag, url in (
                (LLAMA_SERVER, "--llama-server", llama_server_url),
                (OLLAMA, "--ollama", ollama_url),
            )
            if url
        ]
        return cls(endpoints, interval, timeout, measured)

    # --- the live job -----------------------------------------------------------------------

    def pollers(self) -> list[Poller]:
        if self.discover_defaults:
            return [
                Poller(Endpoint(s, u), self.interval, quiet=True, ceiling=SEARCH_BACKOFF_S)
                for s, u in DEFAULT_URLS.items()
            ]
        return [Poller(e, self.interval) for e in self.endpoints]

    def check(self) -> None:
        """Nothing to refuse: the endpoints were parsed when the job was made."""

    def run(self, publish: Publish, cancel: threading.Event, on_worker: OnWorker) -> Outcome:
        if self.measured is not None:
            publish(dataclasses.replace(self.measured, t=time.time()))
        pollers = self.pollers()
        announced = not self.discover_defaults
        while not cancel.is_set():
            polled = self._poll_due(pollers, publish, cancel, announce_found=announced)
            if polled and not announced:
                announced = self._announce_search(pollers, publish)
            if polled and self.discover_defaults:
                self._publish_not_found(pollers, publish)
            cancel.wait(max(0.0, min(p.due for p in pollers) - time.monotonic()))
        return "cancelled"

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
            for window in poller.windows(reading):
                publish(window)
            if self.measured is not None and poller.endpoint.source == LLAMA_SERVER:
                self._check_served_model(poller, reading, self.measured, publish)
        return polled

    def _check_served_model(
        self, poller: Poller, reading: SessionReading, measured: MeasuredCapacity, publish: Publish
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

    def _announce_search(self, pollers: list[Poller], publish: Publish) -> bool:
        """After the first look at every default port: say what was found (True once said)."""
        readings = {p.endpoint.source: p.last for p in pollers if p.last is not None}
        if len(readings) < len(pollers):
            return False
        level = "info" if any(p.found for p in pollers) else "warning"
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
            SessionReading(
                t=time.time(),
                source=LLAMA_SERVER,
                url=DEFAULT_URLS[LLAMA_SERVER],
                status="unreachable",
                message=message,
            )
        )


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


def counter_window(reading: SessionReading, moved: CounterMove) -> DecodeWindow:
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
    ports = " / ".join(f"{s} :{urllib.parse.urlsplit(u).port}" for s, u in DEFAULT_URLS.items())
    return f"looking for {ports}"


def _without_retry(readings: dict[str, SessionReading]) -> dict[str, SessionReading]:
    return {s: dataclasses.replace(r, message=r.message.split("; retrying in ")[0]) for s, r in readings.items()}


# --- --once --json -------------------------------------------------------------------------------


Probe = tuple[SessionReading, SlotsRead]


def attach_once(
    job: AttachJob, sampler: Any, *, sleep: Callable[[float], None] = time.sleep
) -> tuple[dict[str, Any], bool]:
    """One sample and one reading per endpoint (two for llama-server, ``interval`` apart, for tok/s).

    ``ok`` is False when no endpoint answered as it should (the CLI exits 3); following a PID with
    nothing else asked for is fine on its own.
    """
    first, note = _first_probes(job)
    sample = sampler.sample()
    second = _second_probes(job, first, sleep)
    record = sample_record(sample)
    if note:
        record["discovery"] = note
    for source, (reading, slots) in first.items():
        later = second.get(source)
        live = _live_rate(slots, later[1]) if later else None
        record[RECORD_KEYS[source]] = endpoint_record(reading, later[0] if later else None, live)
    latest = {source: (second.get(source) or probe)[0] for source, probe in first.items()}
    ok, reason = _verdict(job, latest, sample)
    record["ok"] = ok
    if reason:
        record["reason"] = reason
    return record, ok


def _first_probes(job: AttachJob) -> tuple[dict[str, Probe], str | None]:
    if not job.discover_defaults:
        return {e.source: e.probe(job.timeout) for e in job.endpoints}, None
    found = discover(timeout=min(job.timeout, DISCOVERY_TIMEOUT_S))
    probes = {source: (reading, SlotsRead()) for source, reading in found.readings.items()}
    if found.readings[LLAMA_SERVER].status == "ok":  # again, with /slots' progress for a live rate
        probes[LLAMA_SERVER] = Endpoint(LLAMA_SERVER, found.found[LLAMA_SERVER]).probe(job.timeout)
    return probes, found.message


def _second_probes(job: AttachJob, first: dict[str, Probe], sleep: Callable[[float], None]) -> dict[str, Probe]:
    again = [r for r, _ in first.values() if r.source == LLAMA_SERVER and r.status == "ok"]
    if not again:
        return {}
    sleep(job.interval)
    return {r.source: Endpoint(r.source, r.url).probe(job.timeout) for r in again}


def _live_rate(before: SlotsRead, after: SlotsRead) -> LiveRate | None:
    meter = LiveDecodeMeter()
    meter.update(before)
    rates = meter.update(after)
    if not rates:
        return None
    total = sum(r.n_tokens for r in rates)  # every decoding slot: the server's throughput
    return LiveRate(rates[0].slot, total, max(r.seconds for r in rates), max(r.depth or 0 for r in rates))


def _verdict(job: AttachJob, latest: dict[str, SessionReading], sample: Any) -> tuple[bool, str | None]:
    if any(r.status == "ok" for r in latest.values()):
        return True, None
    process = sample.process
    following = process is not None and process.rss_bytes is not None
    if job.discover_defaults and following:
        return True, None
    problems = "; ".join(f"{r.source} {r.url}: {r.status} — {r.message}" for r in latest.values())
    return False, f"no server could be read ({problems})" if problems else "no server to read"


def endpoint_record(
    reading: SessionReading, later: SessionReading | None = None, live: LiveRate | None = None
) -> dict[str, Any]:
    """A reading as ``--once --json`` reports it, with decode/prompt tok/s or the reason there are none."""
    latest = later or reading
    record: dict[str, Any] = {
        "source": latest.source,
        "url": latest.url,
        "status": latest.status,
        "message": latest.message,
        "reason": None if latest.status == "ok" else latest.message or latest.status,
    }
    record.update(_rates(reading, later, live))
    if latest.source == LLAMA_SERVER:
        record.update(_llama_fields(latest))
    else:
        record["models"] = [_model_record(m) for m in latest.models]
    record["reasons"] = dict(latest.reasons)
    return record


def _rates(reading: SessionReading, later: SessionReading | None, live: LiveRate | None) -> dict[str, Any]:
    meter = SessionRateMeter()
    rates = meter.update(reading)
    if later is not None:
        rates = meter.update(later)
    latest = later or reading
    decode = _rate_or_average(
        rates.decode_tok_s,
        rates.decode_reason,
        latest,
        latest.tokens_predicted_total,
        latest.tokens_predicted_seconds_total,
        live,
    )
    prompt = _rate_or_average(
        rates.prompt_tok_s, rates.prompt_reason, latest, latest.prompt_tokens_total, latest.prompt_seconds_total
    )
    gap = later.t - reading.t if later is not None else None
    return {
        "decode_tok_s": decode[0],
        "decode_basis": decode[1],
        "decode_reason": decode[2],
        "prompt_tok_s": prompt[0],
        "prompt_basis": prompt[1],
        "prompt_reason": prompt[2],
        "readings_gap_s": round(gap, 3) if gap is not None else None,
    }


def _rate_or_average(
    rate: float | None,
    reason: str | None,
    latest: SessionReading,
    tokens: float | None,
    seconds: float | None,
    live: LiveRate | None = None,
) -> tuple[float | None, str | None, str | None]:
    """(tok/s, basis, reason): the server's counters between the two readings, else the running
    request's progress in /slots, else the server's lifetime average."""
    if latest.status != "ok" or latest.source != LLAMA_SERVER:
        return None, None, reason
    if rate is not None:
        return rate, "server counters between the two readings (a request finished in between)", None
    if live is not None:
        return live.tok_s, f"live: /slots n_decoded, {live.n_tokens} tokens in {live.seconds:.2f} s", None
    if tokens is None or seconds is None:
        return None, None, "llama-server's /metrics has no such counter (an older or newer server?)"
    if tokens > 0 and seconds > 0:
        return tokens / seconds, "average since llama-server started (no tokens counted between the readings)", None
    return None, None, NOTHING_GENERATED


def _llama_fields(r: SessionReading) -> dict[str, Any]:
    return {
        "requests_processing": r.requests_processing,
        "tokens_predicted_total": r.tokens_predicted_total,
        "tokens_predicted_seconds_total": r.tokens_predicted_seconds_total,
        "prompt_tokens_total": r.prompt_tokens_total,
        "prompt_seconds_total": r.prompt_seconds_total,
        "slots": [_slot_record(s) for s in r.slots],
        "context_in_effect": context_in_effect(r.slots),
    }


def context_in_effect(slots: Sequence[SlotReading]) -> dict[str, Any] | None:
    """The context a request really gets: each slot's own n_ctx. With a unified cache (llama-server's
    default without -np) every slot reports the whole pool; split (-np without --kv-unified), each
    reports its share, n_ctx / slots padded to 256. The server does not say which: the slots prove
    a split when together they hold more tokens than one slot's n_ctx."""
    sizes = [s.n_ctx for s in slots if s.n_ctx]
    if not sizes:
        return None
    per_slot, n = min(sizes), len(slots)
    held = sum(s.tokens_used or 0 for s in slots)
    split = n > 1 and held > per_slot
    if n == 1:
        unified, total = None, per_slot
        text = f"1 slot, up to {per_slot:,} tokens"
    elif split:
        unified, total = False, per_slot * n
        text = (
            f"n_ctx {per_slot:,} per slot, {n} slots share {total:,} (split: the slots hold {held:,} "
            f"tokens together, more than one slot's n_ctx)"
        )
    else:
        unified, total = None, None
        text = (
            f"{n} slots, each up to {per_slot:,} tokens: one pool of {per_slot:,} if the cache is unified "
            f"(llama-server's default without -np), {n} × {per_slot:,} = {per_slot * n:,} split if -np "
            "without --kv-unified (the server does not say which)"
        )
    return {
        "n_ctx_per_slot": per_slot,
        "slots": n,
        "n_ctx_total": total,
        "unified": unified,
        "tokens_held": held,
        "text": text,
    }


def _slot_record(slot: Any) -> dict[str, Any]:
    record = to_plain(slot)
    used, n_ctx = slot.tokens_used, slot.n_ctx
    record["context_used_pct"] = round(100.0 * used / n_ctx, 2) if used is not None and n_ctx else None
    return record


def _model_record(model: Any) -> dict[str, Any]:
    record = to_plain(model)
    size, vram = model.size_bytes, model.size_vram_bytes
    in_ram = size - vram if size is not None and vram is not None else None
    record["in_ram_bytes"] = in_ram
    record["in_ram_pct"] = round(100.0 * in_ram / size, 1) if in_ram is not None and size else None
    record["context_in_effect"] = model.context_length
    if record["in_ram_pct"]:
        record["text"] = f"{record['in_ram_pct']:.0f} % of the model in system RAM"
    return record
