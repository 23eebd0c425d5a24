"""The settings of a run, checked before anything loads (cache types, flash attention, the
context against the depth), and the threads it takes by default."""

from __future__ import annotations

import dataclasses
import os

import psutil

from cliff_tui.analysis.ggml_types import CACHE_TYPE_BYTES, QUANTISED
from cliff_tui.errors import BadInput
from cliff_tui.events import RunSettings


def resolve_settings(settings: RunSettings) -> tuple[RunSettings, list[str]]:
    """Check the knobs; returns the settings to use and what was changed, in words."""
    notes: list[str] = []
    for flag, value in (("-ctk", settings.cache_type_k), ("-ctv", settings.cache_type_v)):
        if value not in CACHE_TYPE_BYTES:
            raise BadInput(f"{flag} {value}: unknown cache type (use one of {', '.join(CACHE_TYPE_BYTES)})")
    if settings.depth < 1 or settings.n_gen < 2:
        raise BadInput("--depth must be ≥ 1 and --n-gen ≥ 2")
    if settings.cache_type_v in QUANTISED:
        if settings.flash_attn == "off":
            raise BadInput(f"a quantised V cache (-ctv {settings.cache_type_v}) needs flash attention: "
                           "use -fa on (or leave -fa auto)")
        if settings.flash_attn == "auto":
            settings = dataclasses.replace(settings, flash_attn="on")
            notes.append(f"flash attention turned on: a quantised V cache (-ctv {settings.cache_type_v}) needs it")
    if not settings.threads:
        settings = dataclasses.replace(settings, threads=default_threads())
    need = settings.depth + settings.n_gen
    if settings.n_ctx is not None and settings.n_ctx < need:
        raise BadInput(f"-c {settings.n_ctx:,} is smaller than the depth {settings.depth:,} + --n-gen "
                       f"{settings.n_gen:,} = {need:,}: raise -c, or leave it out to size each context")
    return settings, notes


def usable_cpus() -> int:
    """The logical CPUs this process may run on (its affinity: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Physical cores this process may use: llama.cpp's own default (4) oversubscribes small
    machines, which halves decode speed and doubles its noise."""
    allowed = usable_cpus()
    return max(1, min(allowed, psutil.cpu_count(logical=False) or allowed))
