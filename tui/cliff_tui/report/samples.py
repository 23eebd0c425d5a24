"""A sample as a record: ``watch --once --json``, ``attach --once`` and ``export``."""

from __future__ import annotations

from typing import Any

from cliff_tui.codec import to_plain
from cliff_tui.events import Sample
from cliff_tui.records import NO_GPU


def sample_record(sample: Sample) -> dict[str, Any]:
    record = to_plain(sample)
    record.pop("gpus_reason", None)
    if not sample.gpus:
        record["gpus_reason"] = sample.gpus_reason or NO_GPU
    if sample.process is None:
        record.pop("process")
    return record
