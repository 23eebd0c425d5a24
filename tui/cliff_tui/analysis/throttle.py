"""Which clock-event reasons slow decode by themselves.

The names are the ones :mod:`cliff_tui.probes.nvidia` gives NVML's ``nvmlClocksEventReason*`` bits;
this module decides what each means for a slowdown.
"""

from __future__ import annotations

from collections.abc import Iterable

THERMAL_REASONS = frozenset({"thermal (sw)", "thermal (hw)", "hw slowdown"})
POWER_REASONS = frozenset({"power cap", "power brake"})


def throttle_cause(reasons: Iterable[str]) -> str | None:
    """``thermal throttling``, ``power throttling``, or None when no reason slows the clocks."""
    seen = set(reasons)
    if seen & THERMAL_REASONS:
        return "thermal throttling"
    if seen & POWER_REASONS:
        return "power throttling"
    return None
