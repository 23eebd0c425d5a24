"""``cliff-tui attach``: watch a chat that is already running, without loading a model.

:class:`AttachJob` polls llama-server (``/metrics``, ``/slots``) and/or Ollama (``/api/ps``) and
publishes a :class:`SessionReading` per poll; the pipeline turns their counters into tok/s and the
signs. A server that does not answer is retried with exponential backoff; nothing here raises on
network trouble. :func:`attach_once` is ``--once --json``: one sample and one reading per endpoint.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from cliff_tui.analysis.session import SessionRateMeter
from cliff_tui.codec import to_plain
from cliff_tui.engine.errors import BadInput
from cliff_tui.events import Notice, SessionReading
from cliff_tui.jobs import Publish
from cliff_tui.probes.endpoints import (
    DEFAULT_URLS, LLAMA_SERVER, OLLAMA, READERS, BadUrl, describe_discovery, discover, is_found, normalise_url,
)
from cliff_tui.report import sample_record

MAX_BACKOFF_S = 30.0
DISCOVERY_TIMEOUT_S = 1.0
RECORD_KEYS = {LLAMA_SERVER: "llama_server", OLLAMA: "ollama"}
NOTHING_GENERATED = "no tokens generated since llama-server started: send a chat request, then attach again"


@dataclass(frozen=True)
class Endpoint:
    source: str  # "llama-server" | "ollama"
    url: str

    def read(self, timeout: float) -> SessionReading:
        return READERS[self.source](self.url, timeout)


def healthy(reading: SessionReading) -> bool:
    """Worth polling at the normal pace: it answers as the server it should be."""
    return reading.status in ("ok", "no-metrics")


class Poller:
    """One endpoint's schedule: every ``interval`` while it answers, backing off while it does not.

    A *quiet* poller (looking on a default port) publishes nothing until its server first answers.
    """

    def __init__(self, endpoint: Endpoint, interval: float, *, quiet: bool = False,
                 ceiling: float = MAX_BACKOFF_S) -> None:
        self.endpoint = endpoint
        self.interval = interval
        self.ceiling = ceiling
        self.found = not quiet
        self.failures = 0
        self.due = 0.0
        self.last: SessionReading | None = None

    def backoff(self) -> float:
        return min(self.ceiling, max(self.interval, 1.0) * 2 ** (self.failures - 1))

    def poll(self, timeout: float) -> SessionReading | None:
        reading = self.endpoint.read(timeout)
        if healthy(reading):
            self.failures, delay = 0, self.interval
        else:
            self.failures += 1
            delay = self.backoff()
            reading = dataclasses.replace(reading, message=f"{reading.message}; retrying in {delay:.0f} s")
        self.due = time.monotonic() + delay
        self.last = reading
        newly_found = not self.found and is_found(reading)
        self.found = self.found or newly_found
        return reading if self.found else None


class AttachJob:
    follows_own_process = False

    def __init__(self, endpoints: Sequence[Endpoint], interval: float = 0.5, timeout: float = 2.0, *,
                 discover_defaults: bool = False) -> None:
        self.endpoints = list(endpoints)
        self.interval = interval
        self.timeout = timeout
        self.discover_defaults = discover_defaults or not self.endpoints
        self.title = _title(self.endpoints) if not self.discover_defaults else _searching_title()

    @classmethod
    def from_args(cls, llama_server_url: str | None, ollama_url: str | None, interval: float = 0.5,
                  timeout: float = 2.0) -> "AttachJob":
        """Both URLs None: look on the default loopback ports when the job starts."""
        endpoints = [Endpoint(source, _checked_url(flag, url)) for source, flag, url in (
            (LLAMA_SERVER, "--llama-server", llama_server_url), (OLLAMA, "--ollama", ollama_url)) if url]
        return cls(endpoints, interval, timeout)

    # --- the live job -----------------------------------------------------------------------

    def pollers(self) -> list[Poller]:
        if self.discover_defaults:
            return [Poller(Endpoint(s, u), self.interval, quiet=True) for s, u in DEFAULT_URLS.items()]
        return [Poller(e, self.interval) for e in self.endpoints]

    def run(self, publish: Publish, cancel: threading.Event) -> None:
        pollers = self.pollers()
        announced = not self.discover_defaults
        while not cancel.is_set():
            polled = self._poll_due(pollers, publish, cancel, announce_found=announced)
            if polled and not announced:
                announced = self._announce_search(pollers, publish)
            if polled and self.discover_defaults:
                self._publish_not_found(pollers, publish)
            cancel.wait(max(0.0, min(p.due for p in pollers) - time.monotonic()))

    def _poll_due(self, pollers: list[Poller], publish: Publish, cancel: threading.Event, *,
                  announce_found: bool) -> bool:
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
        return polled

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
        publish(SessionReading(t=time.time(), source=LLAMA_SERVER, url=DEFAULT_URLS[LLAMA_SERVER],
                               status="unreachable", message=message))


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


def attach_once(job: AttachJob, sampler: Any, *, sleep: Callable[[float], None] = time.sleep
                ) -> tuple[dict[str, Any], bool]:
    """One sample and one reading per endpoint (two for llama-server, ``interval`` apart, for tok/s).

    ``ok`` is False when no endpoint answered as it should (the CLI exits 3); following a PID with
    nothing else asked for is fine on its own.
    """
    first, note = _first_readings(job)
    sample = sampler.sample()
    second = _second_readings(job, first, sleep)
    record = sample_record(sample)
    if note:
        record["discovery"] = note
    for source, reading in first.items():
        record[RECORD_KEYS[source]] = endpoint_record(reading, second.get(source))
    ok, reason = _verdict(job, first, second, sample)
    record["ok"] = ok
    if reason:
        record["reason"] = reason
    return record, ok


def _first_readings(job: AttachJob) -> tuple[dict[str, SessionReading], str | None]:
    if not job.discover_defaults:
        return {e.source: e.read(job.timeout) for e in job.endpoints}, None
    found = discover(timeout=min(job.timeout, DISCOVERY_TIMEOUT_S))
    return dict(found.readings), found.message


def _second_readings(job: AttachJob, first: dict[str, SessionReading],
                     sleep: Callable[[float], None]) -> dict[str, SessionReading]:
    again = [r for r in first.values() if r.source == LLAMA_SERVER and r.status == "ok"]
    if not again:
        return {}
    sleep(job.interval)
    return {r.source: READERS[r.source](r.url, job.timeout) for r in again}


def _verdict(job: AttachJob, first: dict[str, SessionReading], second: dict[str, SessionReading],
             sample: Any) -> tuple[bool, str | None]:
    latest = {**first, **second}
    if any(r.status == "ok" for r in latest.values()):
        return True, None
    process = sample.process
    following = process is not None and process.rss_bytes is not None
    if job.discover_defaults and following:
        return True, None
    problems = "; ".join(f"{r.source} {r.url}: {r.status} — {r.message}" for r in latest.values())
    return False, f"no server could be read ({problems})" if problems else "no server to read"


def endpoint_record(reading: SessionReading, later: SessionReading | None = None) -> dict[str, Any]:
    """A reading as ``--once --json`` reports it, with decode/prompt tok/s or the reason there are none."""
    latest = later or reading
    record: dict[str, Any] = {
        "source": latest.source, "url": latest.url, "status": latest.status, "message": latest.message,
        "reason": None if latest.status == "ok" else latest.message or latest.status,
    }
    record.update(_rates(reading, later))
    if latest.source == LLAMA_SERVER:
        record.update(_llama_fields(latest))
    else:
        record["models"] = [_model_record(m) for m in latest.models]
    record["reasons"] = dict(latest.reasons)
    return record


def _rates(reading: SessionReading, later: SessionReading | None) -> dict[str, Any]:
    meter = SessionRateMeter()
    rates = meter.update(reading)
    if later is not None:
        rates = meter.update(later)
    latest = later or reading
    decode = _rate_or_average(rates.decode_tok_s, rates.decode_reason, latest,
                              latest.tokens_predicted_total, latest.tokens_predicted_seconds_total)
    prompt = _rate_or_average(rates.prompt_tok_s, rates.prompt_reason, latest,
                              latest.prompt_tokens_total, latest.prompt_seconds_total)
    gap = later.t - reading.t if later is not None else None
    return {
        "decode_tok_s": decode[0], "decode_basis": decode[1], "decode_reason": decode[2],
        "prompt_tok_s": prompt[0], "prompt_basis": prompt[1], "prompt_reason": prompt[2],
        "readings_gap_s": round(gap, 3) if gap is not None else None,
    }


def _rate_or_average(rate: float | None, reason: str | None, latest: SessionReading, tokens: float | None,
                     seconds: float | None) -> tuple[float | None, str | None, str | None]:
    """(tok/s, basis, reason): the rate between the two readings, else the server's lifetime average."""
    if latest.status != "ok" or latest.source != LLAMA_SERVER:
        return None, None, reason
    if rate is not None:
        return rate, "between the two readings", None
    if tokens is None or seconds is None:
        return None, None, "llama-server's /metrics has no such counter (an older or newer server?)"
    if tokens > 0 and seconds > 0:
        return tokens / seconds, "average since llama-server started (no request ran between the readings)", None
    return None, None, NOTHING_GENERATED


def _llama_fields(r: SessionReading) -> dict[str, Any]:
    return {
        "requests_processing": r.requests_processing,
        "tokens_predicted_total": r.tokens_predicted_total,
        "tokens_predicted_seconds_total": r.tokens_predicted_seconds_total,
        "prompt_tokens_total": r.prompt_tokens_total,
        "prompt_seconds_total": r.prompt_seconds_total,
        "slots": [_slot_record(s) for s in r.slots],
    }


def _slot_record(slot: Any) -> dict[str, Any]:
    record = to_plain(slot)
    used, n_ctx = slot.tokens_used, slot.n_ctx
    record["context_used_pct"] = round(100.0 * used / n_ctx, 2) if used is not None and n_ctx else None
    return record


def _model_record(model: Any) -> dict[str, Any]:
    record = to_plain(model)
    size, vram = model.size_bytes, model.size_vram_bytes
    record["in_ram_bytes"] = size - vram if size is not None and vram is not None else None
    return record
