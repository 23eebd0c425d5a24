"""Rates of an attached server, from the deltas of its cumulative counters.

llama-server's ``/metrics`` has ``llamacpp:tokens_predicted_total`` and
``llamacpp:tokens_predicted_seconds_total`` (time spent generating): their deltas between two
scrapes give the decode speed of whatever ran in between; the prompt pair gives prefill speed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliff_tui.events import SessionReading


@dataclass(frozen=True)
class CounterMove:
    """Tokens the server counted between two readings, and the seconds it spent on them."""

    n_tokens: int
    seconds: float

    @property
    def tok_s(self) -> float:
        return self.n_tokens / self.seconds


@dataclass(frozen=True)
class SessionRates:
    decode_tok_s: float | None
    prompt_tok_s: float | None
    decode_reason: str | None
    prompt_reason: str | None
    decode_moved: CounterMove | None = None  # the decode counters moved in this very update


class SessionRateMeter:
    def __init__(self) -> None:
        self._prev: SessionReading | None = None
        self.decode_tok_s: float | None = None
        self.prompt_tok_s: float | None = None

    def update(self, reading: SessionReading) -> SessionRates:
        """The rates after ``reading``; a rate changes only when its counters moved (llama-server
        counts a request's tokens when it ends), so between requests the last one is repeated."""
        prev, self._prev = self._prev, reading
        if reading.status != "ok" or prev is None or prev.status != "ok":
            return self.rates(reading)
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
            self.decode_tok_s = decode.tok_s
        if prompt is not None:
            self.prompt_tok_s = prompt.tok_s
        return self.rates(reading, decode)

    def rates(self, reading: SessionReading, decode_moved: CounterMove | None = None) -> SessionRates:
        if reading.status != "ok":
            why = reading.message or reading.status
            return SessionRates(self.decode_tok_s, self.prompt_tok_s, why, why)
        if reading.source == "ollama":
            why = "Ollama's /api/ps reports no token counters"
            return SessionRates(None, None, why, why)
        wait = "no request has run since attaching: send one to measure"
        return SessionRates(
            self.decode_tok_s,
            self.prompt_tok_s,
            None if self.decode_tok_s is not None else wait,
            None if self.prompt_tok_s is not None else wait,
            decode_moved,
        )


def _move(n0: float | None, n1: float | None, s0: float | None, s1: float | None) -> CounterMove | None:
    if n0 is None or n1 is None or s0 is None or s1 is None:
        return None
    dn, ds = n1 - n0, s1 - s0
    if dn <= 0 or ds <= 0:
        return None
    return CounterMove(round(dn), ds)
