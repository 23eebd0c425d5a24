"""``cliff-tui models``: every GGUF on this machine in one table, each with what fits on this
machine's cliff tier.

The stores are scanned (:mod:`cliff_tui.models.stores`), each model's header read (from the
header cache where the file is unchanged), and each given the fit table's answer
(:func:`cliff_tui.advise.advise`, flash attention on): its KV bytes per token, the largest context
before the cliff with the KV type that reaches it, and whether the target fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cliff_tui.advise import Tier, advise
from cliff_tui.analysis.fit import FitOption, FitTable
from cliff_tui.analysis.trained_context import past_trained_note
from cliff_tui.errors import BadInput
from cliff_tui.models.header_cache import HeaderCache, read_local_cached
from cliff_tui.models.stores import STORE_NAMES, FoundModel, Skipped, StoreKind, default_stores, scan
from cliff_tui.records import ModelInfo
from cliff_tui.report.tables import markdown_table
from cliff_tui.text import inert
from cliff_tui.units import fmt_bytes

SortKey = Literal["name", "size", "context", "store"]
COLUMNS = (
    ("model", "model"),
    ("where", "where"),
    ("quant", "quant"),
    ("size", "size"),
    ("trained", "trained ctx"),
    ("kv_f16", "KV/token f16"),
    ("kv_q8_0", "KV/token q8_0"),
    ("largest", "largest context"),
    ("flags", "with"),
    ("target", "target"),
    ("fits", "fits"),
)


@dataclass(frozen=True)
class ModelRow:
    name: str
    store: StoreKind
    path: str
    parts: int
    projector: str | None
    also: tuple[str, ...]
    model_name: str  # the header's general.name
    quant: str | None
    size_bytes: int
    n_ctx_train: int | None
    num_ctx: int | None  # the context the store runs it with (Ollama)
    kv_f16_bytes_per_token: float | None
    kv_q8_0_bytes_per_token: float | None
    largest_context: int | None  # the largest before the cliff, any KV type (flash attention on)
    largest_flags: str | None  # the KV flags that reach it (the best quality among equals)
    past_trained: bool  # the largest context is past the trained context
    trained_note: str | None  # the words that say so
    target: int | None
    fits: bool | None
    fit_flags: str | None  # the best quality that fits the target
    command: str | None
    problem: str | None = None  # why there are no figures


@dataclass(frozen=True)
class Listing:
    tier: Tier
    reserve_bytes: int | None
    rows: tuple[ModelRow, ...]
    skipped: tuple[Skipped, ...]

    @property
    def all_fit(self) -> bool:
        return bool(self.rows) and all(r.fits for r in self.rows)


def list_models(
    folders: Sequence[str],
    names: Sequence[str],
    tier: Tier,
    *,
    target: int | None = None,
    reserve: int | None = None,
    n_seq: int | None = None,
    sort: SortKey = "name",
    cache: HeaderCache | None = None,
) -> Listing:
    """The models of this machine's stores and ``folders``, those named like one of ``names`` (all
    where none is given), each with what fits on ``tier``."""
    found, skipped = scan(default_stores(list(folders)))
    cache = cache or HeaderCache()
    rows: list[ModelRow] = []
    reserve_used = None
    for model in found:
        try:
            info = read_local_cached(model.path, model.parts, cache)
        except BadInput as exc:
            skipped.append(Skipped(model.name, model.store, str(exc)))
            continue
        if names and not _named(model, info, names):
            continue
        row, table = model_row(model, info, tier, target=target, reserve=reserve, n_seq=n_seq)
        reserve_used = table.reserve_bytes if table else reserve_used
        rows.append(row)
    if names and not rows:
        shown = ", ".join(inert(n) for n in names)
        raise BadInput(
            f"no model on this machine is named like {shown} ({len(found)} found): "
            "`cliff-tui models` lists them all; --folder DIR adds a folder"
        )
    return Listing(tier, reserve_used, tuple(sorted(rows, key=_sort_key(sort))), tuple(skipped))


def _named(model: FoundModel, info: ModelInfo, names: Sequence[str]) -> bool:
    words = [model.name, model.path, info.name, *model.also]
    return any(n.lower() in w.lower() for n in names for w in words)


def model_row(
    model: FoundModel, info: ModelInfo, tier: Tier, *, target: int | None, reserve: int | None, n_seq: int | None
) -> tuple[ModelRow, FitTable | None]:
    base = ModelRow(
        model.name,
        model.store,
        model.path,
        len(model.parts),
        model.projector,
        model.also,
        info.name,
        info.file_type,
        info.size_bytes,
        info.n_ctx_train,
        model.num_ctx,
        None,
        None,
        None,
        None,
        False,
        None,
        target or model.num_ctx or info.n_ctx_train,
        None,
        None,
        None,
    )
    try:
        table = advise(
            info,
            tier,
            target=target or model.num_ctx,
            reserve=reserve,
            n_seq=n_seq,
            flash_attn=(True,),
            model_args=("-m", model.path),
        )
    except BadInput as exc:
        return dataclasses.replace(base, problem=str(exc)), None
    whole = [o for o in table.options if o.valid and o.n_gpu_layers is None]
    top = max(whole, key=lambda o: o.max_context or 0, default=None)  # the first of equals: the best quality
    best = table.best
    return (
        dataclasses.replace(
            base,
            kv_f16_bytes_per_token=_per_token(whole, "f16"),
            kv_q8_0_bytes_per_token=_per_token(whole, "q8_0"),
            largest_context=top.max_context if top else None,
            largest_flags=_flags(top) if top and top.max_context else None,
            past_trained=bool(top and top.past_trained),
            trained_note=past_trained_note(info, top.max_context, f"{top.max_context:,}") if top else None,
            target=table.target_ctx,
            fits=bool(best and best.fits),
            fit_flags=_flags(best) if best and best.fits else None,
            command=best.command if best else None,
        ),
        table,
    )


def _per_token(options: Sequence[FitOption], cache_type: str) -> float | None:
    option = next((o for o in options if o.type_k == cache_type and not o.swa_full), None)
    return option.bytes_per_token if option else None


def _flags(option: FitOption) -> str:
    flags = f"-ctk {option.type_k} -ctv {option.type_v} -fa {'on' if option.flash_attn else 'off'}"
    if option.swa_full:
        flags += " --swa-full"
    if option.n_gpu_layers is not None:
        flags += f" -ngl {option.n_gpu_layers}"
    return flags


def _sort_key(sort: SortKey):
    if sort == "size":
        return lambda r: (-r.size_bytes, r.name.lower())
    if sort == "context":
        return lambda r: (-(r.largest_context or -1), r.name.lower())
    if sort == "store":
        return lambda r: (list(STORE_NAMES).index(r.store), r.name.lower())
    return lambda r: r.name.lower()


# --- output -----------------------------------------------------------------------------------


def listing_markdown(listing: Listing) -> str:
    tier = listing.tier
    reserve = fmt_bytes(listing.reserve_bytes) if listing.reserve_bytes is not None else "the default"
    head = [
        f"## Models on this machine: {len(listing.rows)}",
        "",
        f"- cliff tier: {tier.name}, {fmt_bytes(tier.capacity_bytes)}, keeping {reserve} free",
        "- largest context: before the cliff tier fills, any KV type, flash attention on; "
        "`with`: the KV flags that reach it; `fits`: the best KV type that holds the target",
        "",
    ]
    table = markdown_table([_cells(r) for r in listing.rows], COLUMNS) if listing.rows else "(no GGUF model found)"
    notes = _notes(listing)
    return "\n".join([*head, table, *(["", *notes] if notes else [])]) + "\n"


def _cells(r: ModelRow) -> dict[str, Any]:
    name = r.name + (f" ({r.parts} parts)" if r.parts > 1 else "") + (" + projector" if r.projector else "")
    if r.problem:
        return {"model": name, "where": STORE_NAMES[r.store], "quant": r.quant, "size": fmt_bytes(r.size_bytes)}
    largest = f"{r.largest_context:,}" + (" †" if r.past_trained else "") if r.largest_context else "none"
    return {
        "model": name,
        "where": STORE_NAMES[r.store],
        "quant": r.quant,
        "size": fmt_bytes(r.size_bytes),
        "trained": f"{r.n_ctx_train:,}" if r.n_ctx_train else None,
        "kv_f16": _per_token_text(r.kv_f16_bytes_per_token),
        "kv_q8_0": _per_token_text(r.kv_q8_0_bytes_per_token),
        "largest": largest,
        "flags": f"`{r.largest_flags}`" if r.largest_flags else None,
        "target": f"{r.target:,}" + (" (num_ctx)" if r.num_ctx and r.target == r.num_ctx else "") if r.target else None,
        "fits": f"yes, `{r.fit_flags}`" if r.fits else "no",
    }


def _per_token_text(value: float | None) -> str | None:
    return None if value is None else f"{fmt_bytes(value)}"


def _notes(listing: Listing) -> list[str]:
    notes = []
    for r in listing.rows:
        if r.past_trained:
            notes.append(f"- † {inert(r.name)}: {r.trained_note}")
        if r.problem:
            notes.append(f"- {inert(r.name)}: {inert(r.problem)}")
        for other in r.also:
            notes.append(f"- {inert(r.name)} is also {inert(other)} (the same file)")
    notes += [f"- skipped {inert(s.name)} ({STORE_NAMES[s.store]}): {inert(s.reason)}" for s in listing.skipped]
    return (["Notes:", "", *notes]) if notes else []


def listing_record(listing: Listing) -> dict[str, Any]:
    return {
        "tier": listing.tier.name,
        "capacity_bytes": listing.tier.capacity_bytes,
        "reserve_bytes": listing.reserve_bytes,
        "all_fit": listing.all_fit,
        "models": [dataclasses.asdict(r) | {"where": STORE_NAMES[r.store]} for r in listing.rows],
        "skipped": [dataclasses.asdict(s) for s in listing.skipped],
    }
