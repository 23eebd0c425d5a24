"""Rates of an attached server, from the deltas of its cumulative counters.

llama-server's ``/metrics`` has ``llamacpp:tokens_predicted_total`` and
``llamacpp:tokens_predicted_seconds_total`` (time spent generating): their deltas between two
scrapes give the decode speed of whatever ran in between; the prompt pair gives prefill speed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliff_tui.events import SessionReading


@dataclass(frozen=True)
class SessionRates:
    decode_tok_s: float | None
    prompt_tok_s: float | None
    decode_reason: str | None
    prompt_reason: str | None


class SessionRateMeter:
    def __init__(self) -> None:
        self._prev: SessionReading | None = None
        self.decode_tok_s: float | None = None
        self.prompt_tok_s: float | None = None

    def update(self, reading: SessionReading) -> SessionRates:
        prev, self._prev = self._prev, reading
        if reading.status != "ok":
            return self.rates(reading)
        if prev is not None and prev.status == "ok":
            decode = _delta_rate(prev.tokens_predicted_total, reading.tokens_predicted_total,
                                 prev.tokens_predicted_seconds_total, reading.tokens_predicted_seconds_total)
            prompt = _delta_rate(prev.prompt_tokens_total, reading.prompt_tokens_total,
                                 prev.prompt_seconds_total, reading.prompt_seconds_total)
            self.decode_tok_s = decode if decode is not None else self.decode_tok_s
            self.prompt_tok_s = prompt if prompt is not None else self.prompt_tok_s
        return self.rates(reading)

    def rates(self, reading: SessionReading) -> SessionRates:
        if reading.status != "ok":
            why = reading.message or reading.status
            return SessionRates(self.decode_tok_s, self.prompt_tok_s, why, why)
        if reading.source == "ollama":
            why = "Ollama's /api/ps reports no token counters"
            return SessionRates(None, None, why, why)
        wait = "no request has run since attaching: send one to measure"
        return SessionRates(self.decode_tok_s, self.prompt_tok_s,
                            None if self.decode_tok_s is not None else wait,
                            None if self.prompt_tok_s is not None else wait)


def _delta_rate(n0: float | None, n1: float | None, s0: float | None, s1: float | None) -> float | None:
    if None in (n0, n1, s0, s1):
        return None
    dn, ds = n1 - n0, s1 - s0
    if dn <= 0 or ds <= 0:
        return None
    return dn / ds
