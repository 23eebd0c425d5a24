"""Rates of an attached server, from the deltas of its cumulative counters.

llama-server's ``/metrics`` has ``llamacpp:tokens_predicted_total`` and
``llamacpp:tokens_predicted_seconds_total`` (time spent generating): their deltas between two
scrapes give the decode speed of whatever ran in between; the prompt pair gives prefill speed.
One :class:`ServerRateMeter` follows one server's stream of readings.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliff_tui.events import ServerReading
from cliff_tui.records import ServerRates

NO_REQUEST_YET = "no request has run since attaching: send one to measure"
NO_COUNTERS = "this server's API reports no token counters (Ollama's /api/ps has none)"


@dataclass(frozen=True)
class CounterMove:
    """Tokens the server counted between two readings, and the seconds it spent on them."""

    n_tokens: int
    seconds: float

    @property
    def tok_s(self) -> float:
        return self.n_tokens / self.seconds


class ServerRateMeter:
    """The rates after each reading of one server. A rate changes only when its counters moved
    (llama-server counts a request's tokens when it ends), so between requests the last one is
    repeated."""

    def __init__(self) -> None:
        self._prev: ServerReading | None = None
        self._decode_tok_s: float | None = None
        self._prompt_tok_s: float | None = None

    def update(self, reading: ServerReading) -> tuple[ServerRates, CounterMove | None]:
        """The rates after ``reading``, and the decode counters' move in this very update."""
        prev, self._prev = self._prev, reading
        if reading.status != "ok" or prev is None or prev.status != "ok":
            return self._rates(reading), None
        decode = _move(
            prev.tokens_predicted_total,
            reading.tokens_predicted_total,
            prev.tokens_predicted_seconds_total,
            reading.tokens_predicted_seconds_total,
        )
        prompt = _move(
            prev.prompt_tokens_total,
            reading.prompt_tokens_total,
            prev.prompt_seconds_total,
            reading.prompt_seconds_total,
        )
        if decode is not None:
            self._decode_tok_s = decode.tok_s
        if prompt is not None:
            self._prompt_tok_s = prompt.tok_s
        return self._rates(reading), decode

    def _rates(self, reading: ServerReading) -> ServerRates:
        if reading.status != "ok":
            why = reading.message or reading.status
            return ServerRates(self._decode_tok_s, self._prompt_tok_s, why, why)
        if reading.tokens_predicted_total is None and reading.prompt_tokens_total is None:
            return ServerRates(None, None, NO_COUNTERS, NO_COUNTERS)
        return ServerRates(
            self._decode_tok_s,
            self._prompt_tok_s,
            None if self._decode_tok_s is not None else NO_REQUEST_YET,
            None if self._prompt_tok_s is not None else NO_REQUEST_YET,
        )


def _move(n0: float | None, n1: float | None, s0: float | None, s1: float | None) -> CounterMove | None:
    if n0 is None or n1 is None or s0 is None or s1 is None:
        return None
    dn, ds = n1 - n0, s1 - s0
    if dn <= 0 or ds <= 0:
        return None
    return CounterMove(round(dn), ds)
