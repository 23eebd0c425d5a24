"""What the store was fed, kept so that a recording started mid-session replays to the same state.

Each kind of event is kept as long as the state built from it lasts: the samples and server
readings the history shows (a ring as long as the history's), the attached servers' decode
windows the speed sign judges, their memory readings, the log, notices and generated text the
screens keep; the latest of what the servers found and a measured capacity (each replaces the one
before); every event of a run, and the plan and the target, whole. Alerts are not kept: a replay
raises them again from the same events. The periodic kinds, thousands of events each, are kept
packed (:mod:`cliff_tui.store.packed`): their memory is taken when the first arrives, not as the
window fills.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from cliff_tui.events import (
    ATTACH_RUN_ID,
    Alert,
    DecodeWindow,
    Event,
    GeneratedText,
    LogLine,
    MeasuredCapacity,
    Notice,
    Sample,
    ServerMemory,
    ServerReading,
    ServersFound,
)
from cliff_tui.store.messages import LOG_LINES_KEPT, NOTICES_KEPT
from cliff_tui.store.packed import PackedRing
from cliff_tui.store.runs import TEXT_KEPT
from cliff_tui.store.servers import POINTS_KEPT


class Journal:
    def __init__(self, periodic_kept: int) -> None:
        """``periodic_kept``: samples, and readings of the servers and their memory, kept (the
        history's length)."""
        self._kept_for = {
            "sample": periodic_kept,
            "server": periodic_kept,
            "attach_window": POINTS_KEPT,
            "server_memory": periodic_kept,  # as long as the history of the server's RSS they draw
            "found": 1,
            "measured": 1,
            "log": LOG_LINES_KEPT,
            "notice": NOTICES_KEPT,
            "text": TEXT_KEPT,
        }
        self._kept: dict[str, deque[tuple[int, Event]]] = {}
        self._packed: dict[str, PackedRing] = {}

    def keep(self, seq: int, event: Event) -> None:
        kind = _kind(event)
        if kind is None:
            return
        if kind in PACKED:
            packed = self._packed.get(kind)
            if packed is None:
                packed = self._packed[kind] = PackedRing(self._kept_for[kind])
            packed.append(seq, event)
            return
        kept = self._kept.get(kind)
        if kept is None:
            kept = self._kept[kind] = deque(maxlen=self._kept_for.get(kind))
        kept.append((seq, event))

    def events(self) -> Iterator[Event]:
        """Every kept event, in the order it was fed (the packed ones built again)."""
        windows: list[Iterable[tuple[int, Event]]] = [*self._kept.values(), *self._packed.values()]
        for _, event in heapq.merge(*windows, key=lambda kept: kept[0]):
            yield event

    def held(self) -> Iterator[Event]:
        """The events kept as objects (not the packed ones), in no particular order."""
        for kept in self._kept.values():
            for _, event in kept:
                yield event


# Each kind of event kept in its own bounded window; an attach's decode windows apart from a run's.
_KIND_OF: dict[type, str] = {
    Sample: "sample",
    ServerReading: "server",
    ServerMemory: "server_memory",
    ServersFound: "found",
    MeasuredCapacity: "measured",
    LogLine: "log",
    Notice: "notice",
    GeneratedText: "text",
}


PACKED = frozenset({"sample", "server", "server_memory", "attach_window"})  # periodic, thousands kept


def _kind(event: Event) -> str | None:
    if isinstance(event, Alert):
        return None
    if isinstance(event, DecodeWindow) and event.run_id == ATTACH_RUN_ID:
        return "attach_window"
    return _KIND_OF.get(type(event), "run")
