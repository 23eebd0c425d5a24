"""The periodic events a session keeps come back from their packed window as they went in, and the
window's memory is taken when it starts, not as it fills."""

from __future__ import annotations

import dataclasses
import gc
import math
import tracemalloc

from cliff_tui.events import DecodeWindow, Sample, ServerMemory, ServerReading
from cliff_tui.recording.reader import open_recording
from cliff_tui.records import DeviceLoad, KvBlocks, SlotReading
from cliff_tui.store.packed import EXACT_INT, PackedRing, join, split
from paths import DATA

CHAT = list(open_recording(DATA / "attach_chat.jsonl").events)
VLLM = list(open_recording(DATA / "attach_vllm.jsonl").events)
PERIODIC = (Sample, ServerReading, ServerMemory, DecodeWindow)


def test_every_periodic_event_of_real_sessions_comes_back_equal():
    events = [e for e in CHAT + VLLM if isinstance(e, PERIODIC)]
    assert {type(e) for e in events} == set(PERIODIC)
    ring = PackedRing(len(events))
    for seq, event in enumerate(events):
        ring.append(seq, event)
    back = list(ring)
    assert [seq for seq, _ in back] == list(range(len(events)))
    assert [e for _, e in back] == events
    assert [type(e) for _, e in back] == [type(e) for e in events]


def test_values_that_are_not_plain_numbers_keep_their_type_and_value():
    reading = ServerReading(
        1.5,
        "vllm",
        "http://127.0.0.1:8000",
        "ok",
        tokens_predicted_total=float("nan"),
        requests_processing=2**60,  # beyond a double's exact integers
        slots=(SlotReading(0, 4096, None, True), SlotReading(1, -1, 0, False)),
        reasons={"n_ctx": "unreadable: -1", "tokens": "absent"},
        kv_blocks=KvBlocks(1.0, 1280, 128, 10, None, 3.0, 2, 5, 5, 1024),
    )
    shape, numbers = split(reading)
    back = join(shape, iter(numbers))
    assert math.isnan(back.tokens_predicted_total)
    assert back == dataclasses.replace(reading, tokens_predicted_total=back.tokens_predicted_total)
    assert type(back.requests_processing) is int and back.requests_processing > EXACT_INT
    assert back.slots[0].processing is True and type(back.slots[1].tokens_used) is int


def test_the_window_keeps_the_newest_and_widens_for_a_longer_event():
    ring = PackedRing(3)
    narrow = ServerMemory(0.0, "u", 1, 10, 5, 5, 0)
    wide = dataclasses.replace(narrow, devices=(DeviceLoad("RPC0", "127.0.0.1:50052", "layers 0–15", 7, 9),))
    events = [dataclasses.replace(narrow, t=float(t)) for t in range(4)] + [dataclasses.replace(wide, t=4.0)]
    for seq, event in enumerate(events):
        ring.append(seq, event)
    assert [e for _, e in ring] == events[-3:]
    assert len(ring) == 3


def test_a_window_filling_up_takes_no_more_memory_than_its_first_event_did():
    samples = [e for e in CHAT if isinstance(e, Sample)]
    ring = PackedRing(3600)
    tracemalloc.start()
    try:
        ring.append(0, samples[0])
        first = _live_bytes()
        for seq in range(1, 3600):
            sample = samples[seq % len(samples)]
            ring.append(seq, dataclasses.replace(sample, t=sample.t + seq))
        full = _live_bytes()
    finally:
        tracemalloc.stop()
    assert full - first < 16 * 1024, f"grew {full - first} bytes while filling"


def _live_bytes() -> int:
    gc.collect()  # also empties CPython's free lists, which keep up to 2,000 spent tuples of a size
    return tracemalloc.get_traced_memory()[0]
