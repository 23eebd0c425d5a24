"""Whatever values a recording can hold (every record type, any numbers the reader lets through),
fed to the store and drawn into the panels and status lines, raise nothing."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cliff_tui.codec import event_to_plain
from cliff_tui.events import EVENT_TYPES
from cliff_tui.recording.reader import parse_recording
from cliff_tui.store import Store
from cliff_tui.ui import render

HEADER = json.dumps({"type": "header", "format": "cliff-tui-recording", "schema": 1})
events = st.lists(st.one_of([st.from_type(cls) for cls in EVENT_TYPES.values()]), max_size=10)


def _as_recorded(generated: list) -> list:
    """What the reader gives back of these events written as a recording: lines it refuses are skipped."""
    lines = [HEADER] + [json.dumps(event_to_plain(e)) for e in generated]
    return parse_recording(("\n".join(lines) + "\n").encode()).events


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events)
def test_any_recorded_values_feed_and_draw(generated):
    store = Store()
    for event in _as_recorded(generated):
        store.feed(event)
        store.speed_verdict()
    for panel in render.panels(store):
        for scaled in panel.graphs or ():
            scaled.graph.segments(40, 4)
            scaled.label(0, 4)
    for line in (
        render.signs_line(store.signs.current),
        render.gauge_line(store),
        render.notice_line(store),
        render.progress_line(store),
        render.server_line(store),
    ):
        render.fit_line(line, 80)
