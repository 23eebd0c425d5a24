"""What fits (:mod:`cliff_tui.analysis.fit`'s table) as markdown and as a JSON record: ``cliff-tui fit``
and the end of a triangulation's output."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from cliff_tui.analysis.fit import FitOption, FitTable
from cliff_tui.units import fmt_bytes


def format_fit_markdown(table: FitTable) -> str:
    head = [
        f"## What fits: {table.model}",
        "",
        (
            f"- tier: {table.tier}, {fmt_bytes(table.capacity_bytes)} less {fmt_bytes(table.reserve_bytes)} reserve "
            f"= {fmt_bytes(table.usable_bytes)} usable"
        ),
        f"- target context: {table.target_ctx:,} tokens; {table.slots_text}",
        _base_line(table),
        "",
        (
            "| K/V cache | flash attn | SWA full | basis | KV per token | KV fixed | need at target | fits | "
            "largest context | llama-server |"
        ),
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    rows = [_row(o) for o in table.options]
    tail = ["", "Theory at the target (first valid option):", ""] + [f"- {line}" for line in table.breakdown]
    if table.notes:
        tail += ["", "Notes:", ""] + [f"- {n}" for n in table.notes]
    best = table.best
    if best and best.command:
        tail += ["", f"Suggested: `{best.command}`"]
    return "\n".join(head + rows + tail) + "\n"


def _base_line(table: FitTable) -> str:
    if table.base_bytes is not None:
        return (
            f"- weights, compute buffer and runtime: {fmt_bytes(table.base_bytes)} measured ({table.base_text}); "
            "the logits and the KV cache are added per row"
        )
    compute = fmt_bytes(table.compute_bytes) + " (measured)" if table.compute_bytes is not None else "not included"
    return f"- weights: {fmt_bytes(table.weights_bytes)} ({table.weights_text}); compute buffer: {compute}"


def _row(o: FitOption) -> str:
    cache = o.type_k if o.type_k == o.type_v else f"{o.type_k}/{o.type_v}"
    if o.n_gpu_layers is not None:
        cache += f", -ngl {o.n_gpu_layers}"
    mark = " ★" if o.best else ""
    if not o.valid:
        return (
            f"| {cache} | {'on' if o.flash_attn else 'off'} | {'yes' if o.swa_full else 'no'} | — | — | — | — "
            f"| invalid: {o.note} | — | — |"
        )
    fits = "yes" if o.fits else "no"
    if o.note:
        fits += f" ({o.note})"
    per_token = f"{fmt_bytes(o.bytes_per_token)}" if o.bytes_per_token is not None else "—"
    fixed = fmt_bytes(o.fixed_bytes) if o.fixed_bytes else "—" if o.fixed_bytes is None else "0"
    approx = "" if o.exact or o.basis == "measured" else " (approx.)"
    largest = f"{o.max_context:,}" + (" †" if o.past_trained else "") if o.max_context else "none"
    command = f"`{o.command}`" if o.command else "—"
    return (
        f"| {cache}{mark} | {'on' if o.flash_attn else 'off'} | {'yes' if o.swa_full else 'no'} | "
        f"{o.basis}{approx} | {per_token} | {fixed} | {fmt_bytes(o.need_bytes)} | {fits} | {largest} | {command} |"
    )


def fit_record(table: FitTable) -> dict[str, Any]:
    """The table as plain JSON-able values (the same fields, the usable bytes and the pick)."""
    record = dataclasses.asdict(table)
    record["usable_bytes"] = table.usable_bytes
    best = table.best
    record["best_command"] = best.command if best else None
    return _plain(record)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
