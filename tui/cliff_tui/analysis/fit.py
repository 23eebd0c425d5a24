"""What fits: for a model, a target context and a memory tier, each KV setting's bytes, whether
the target fits with the reserve, the largest context that does, and the llama-server flags.

Bytes per token come from the first basis that exists for an option: a measured line passed in
(a triangulation of that cache type); the theory plus what a measured line touched per token
beyond its own theory (the compute graph's tensors that grow with the cells in use — the
attention mask and its copies — whatever the cache type); or the theory alone
(:mod:`cliff_tui.analysis.theory`, llama.cpp's own allocation). With a measured line, every row
stands on its non-KV base (the line's intercept less its fixed KV part and its one sequence's
logits: weights, compute buffer and the runtime, as measured). Without one, the weights are the
file size in RAM, or the GGUF's offloaded tensors on a GPU, unless a measured model buffer is
passed; the compute buffer is counted only when a measured one is passed (it depends on the
backend, ubatch and graph, and the theory does not derive it). Header only: no llama_cpp, no
Textual.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cliff_tui.analysis.ggml_types import QUANTISED
from cliff_tui.analysis.theory import (
    CPU,
    CUDA,
    N_CTX_PAD,
    Backend,
    InvalidSettings,
    KvBreakdown,
    KvSettings,
    Layout,
    kv_breakdown,
    kv_bytes_by_layer,
    kv_layout,
    pad_n_ctx,
)
from cliff_tui.analysis.trained_context import is_past_trained, past_trained_note, past_trained_words
from cliff_tui.analysis.triangulation import Triangulation
from cliff_tui.records import ModelInfo, RunResult
from cliff_tui.units import fmt_bytes

Basis = Literal["measured", "theory + measured", "theory"]
DEFAULT_TYPES = ("f16", "q8_0", "q4_0")
SERVER_AUTO_SLOTS = 4  # llama-server without -np: 4 slots sharing one unified cache
LOGITS_BYTES = 4  # f32 logits per vocabulary entry and output row
MEASURED_N_SEQ = 1  # a triangulation's runs hold one sequence, in a cache of their own


@dataclass(frozen=True)
class MeasuredLine:
    """A triangulated line on the tier: bytes = intercept + slope × n_ctx (weights and compute
    buffers included, as a triangulation's points are)."""

    bytes_per_token: float
    intercept_bytes: float
    type_k: str
    type_v: str
    flash_attn: bool | None = None  # the runs' settings; None: any
    swa_full: bool | None = None
    source: str = "triangulation"


@dataclass(frozen=True)
class FitOption:
    type_k: str
    type_v: str
    flash_attn: bool
    swa_full: bool
    n_gpu_layers: int | None  # None: every layer (llama-server's default)
    valid: bool
    basis: Basis | None
    basis_text: str
    bytes_per_token: float | None  # KV bytes per token of n_ctx on the tier
    fixed_bytes: int | None  # KV bytes that do not grow with n_ctx (sliding windows, recurrent state)
    need_bytes: int | None  # everything on the tier at the target context
    fits: bool | None
    max_context: int | None  # the largest n_ctx (multiple of 256, up to the cap) that fits
    command: str | None
    exact: bool  # the theory models every part of this architecture
    best: bool = False
    note: str = ""
    past_trained: bool = False  # the largest context is past the model's trained context


@dataclass(frozen=True)
class FitTable:
    model: str
    path: str
    architecture: str | None
    tier: str
    capacity_bytes: int
    reserve_bytes: int
    target_ctx: int
    context_cap: int
    n_seq: int
    kv_unified: bool
    slots_text: str
    weights_bytes: int
    weights_text: str
    compute_bytes: int | None
    output_bytes: int
    options: tuple[FitOption, ...]
    breakdown: tuple[str, ...]  # the theory's parts for the first valid option, at the target
    notes: tuple[str, ...] = field(default_factory=tuple)
    base_bytes: int | None = None  # the measured non-KV base the rows stand on, when a line was passed
    base_text: str = ""
    beyond_kv_bytes_per_token: float | None = None  # what the line touched per token beyond its theory
    n_ctx_train: int | None = None

    @property
    def usable_bytes(self) -> int:
        return max(0, self.capacity_bytes - self.reserve_bytes)

    @property
    def best(self) -> FitOption | None:
        return next((o for o in self.options if o.best), None)


@dataclass(frozen=True)
class _Context:
    """What every option shares."""

    model: ModelInfo
    gpu: bool
    backend: Backend
    usable: int
    target: int
    cap: int
    n_seq: int
    unified: bool
    explicit_slots: bool
    n_batch: int
    n_ubatch: int
    weights: int
    compute: int
    output: int
    base: float | None = None  # the first measured line's non-KV base: theory rows stand on it
    beyond_kv: float | None = None  # its bytes per token beyond its own theory: theory rows add it
    anchor_source: str = ""
    anchor_flash_attn: bool = False
    model_args: tuple[str, ...] = ()  # how llama-server is told the model (default: -m PATH)


def fit_table(
    model: ModelInfo,
    capacity_bytes: int,
    *,
    tier: str = "RAM",
    gpu: bool = False,
    reserve_bytes: int = 0,
    target_ctx: int | None = None,
    n_seq: int | None = None,
    kv_unified: bool | None = None,
    n_batch: int = 2048,
    n_ubatch: int = 512,
    cache_types: Sequence[str] = DEFAULT_TYPES,
    weights_bytes: int | None = None,
    compute_bytes: int | None = None,
    measured: Sequence[MeasuredLine] = (),
    flash_attn: Sequence[bool] = (True, False),
    model_args: Sequence[str] = (),
) -> FitTable:
    """The table for ``model`` on a tier of ``capacity_bytes`` (VRAM total with ``gpu``, else
    RAM available or the cgroup limit), keeping ``reserve_bytes`` free.

    ``n_seq``/``kv_unified`` None: llama-server's default (4 slots, one unified cache).
    ``weights_bytes``: a measured model buffer on the tier. ``compute_bytes``: a measured compute
    buffer (else not included). ``measured``: triangulated lines, used for the options they match;
    the first one's non-KV base and per-token growth beyond its theory carry the other rows.
    ``flash_attn``: the settings to give rows. ``model_args``: how the command names the model
    (``-hf REPO:QUANT``, ``-mu URL``; default ``-m PATH``)."""
    layout = kv_layout(model)
    if layout is None:
        raise ValueError(
            f"the header describes no language model's layers ({model.architecture or 'no architecture'}"
            "): a multimodal projector or a LoRA adapter? pass -m the model itself"
        )
    target = target_ctx or model.n_ctx_train
    if not target or target <= 0:
        raise ValueError("no target context: pass one (the header has no trained context)")
    explicit = n_seq is not None
    slots = n_seq or SERVER_AUTO_SLOTS
    unified = kv_unified if kv_unified is not None else not explicit
    weights, weights_text = _weights(model, gpu, weights_bytes)
    output = 0 if gpu else (model.n_vocab or 0) * LOGITS_BYTES * slots
    ctx = _Context(
        model,
        gpu,
        CUDA if gpu else CPU,
        capacity_bytes - reserve_bytes,
        target,
        max(target, model.n_ctx_train or 0),
        slots,
        unified,
        explicit,
        n_batch,
        n_ubatch,
        weights,
        compute_bytes or 0,
        output,
        model_args=tuple(model_args),
    )
    anchor = measured[0] if measured else None
    if anchor is not None:
        ctx = dataclasses.replace(
            ctx,
            base=_measured_base(ctx, anchor),
            beyond_kv=_beyond_kv(ctx, anchor),
            anchor_source=anchor.source,
            anchor_flash_attn=anchor.flash_attn is not False,
        )
    has_swa = any(layer.kind == "swa" for layer in layout.layers)
    options = [
        _option(ctx, t, t, fa, swa_full, measured)
        for t in cache_types
        for fa in flash_attn
        for swa_full in ((False, True) if has_swa else (False,))
    ]
    if gpu and not any(o.fits for o in options):
        partial = (
            _partial_offload(ctx, o.type_k, o.type_v, o.flash_attn, o.swa_full)
            for o in options
            if o.valid and o.flash_attn and not o.swa_full
        )
        options += [o for o in partial if o]
    options = _mark_best(options)
    options = [dataclasses.replace(o, past_trained=is_past_trained(model, o.max_context)) for o in options]
    first = next((o for o in options if o.valid), None)
    breakdown = _breakdown_lines(ctx, first) if first else ()
    slots_text = (
        f"{slots} slot{'s' if slots != 1 else ''}"
        + (", unified cache" if unified else "")
        + ("" if explicit else " (llama-server's default without -np)")
    )
    base_text = f"{anchor.source}: its intercept less its fixed KV and one sequence's logits" if anchor else ""
    return FitTable(
        model.name,
        model.path,
        model.architecture,
        tier,
        capacity_bytes,
        reserve_bytes,
        target,
        ctx.cap,
        slots,
        unified,
        slots_text,
        weights,
        weights_text,
        compute_bytes,
        output,
        tuple(options),
        breakdown,
        _notes(ctx, layout, compute_bytes) + _trained_notes(model, target, options),
        None if ctx.base is None else round(ctx.base),
        base_text,
        ctx.beyond_kv,
        model.n_ctx_train,
    )


def _trained_notes(model: ModelInfo, target: int, options: Sequence[FitOption]) -> tuple[str, ...]:
    if any(o.past_trained for o in options):
        return (f"† marks a largest context {past_trained_words(model)}",)
    note = past_trained_note(model, target, f"the target {target:,}")
    return (note,) if note else ()


def _measured_base(ctx: _Context, line: MeasuredLine) -> float:
    """What a measured line holds besides the KV cache: its intercept less the KV bytes that do not
    grow with n_ctx at its own settings (one sequence) and that sequence's logits (in RAM)."""
    output = 0 if ctx.gpu else (ctx.model.n_vocab or 0) * LOGITS_BYTES * MEASURED_N_SEQ
    return (
        line.intercept_bytes
        - _fixed_kv(
            ctx,
            line.type_k,
            line.type_v,
            line.flash_attn is not False,
            bool(line.swa_full),
            ctx.cap,
            MEASURED_N_SEQ,
            False,
        )
        - output
    )


def _beyond_kv(ctx: _Context, line: MeasuredLine) -> float:
    """What a measured line grew per token beyond its own KV theory (one sequence)."""
    settings = KvSettings(
        n_ctx=ctx.cap,
        type_k=line.type_k,
        type_v=line.type_v,
        flash_attn="off" if line.flash_attn is False else "on",
        swa_full=bool(line.swa_full),
        n_seq=MEASURED_N_SEQ,
        n_batch=ctx.n_batch,
        n_ubatch=ctx.n_ubatch,
    )
    try:
        b = kv_breakdown(ctx.model, settings, ctx.backend)
    except InvalidSettings:
        return 0.0
    return line.bytes_per_token - (b.bytes_per_token if b else 0.0)


def _fixed_kv(ctx: _Context, k: str, v: str, fa: bool, swa_full: bool, n: int, n_seq: int, unified: bool) -> int:
    """The KV parts that do not grow with n_ctx (sliding windows, recurrent state) at context ``n``."""
    settings = KvSettings(
        n_ctx=n,
        type_k=k,
        type_v=v,
        flash_attn="on" if fa else "off",
        swa_full=swa_full,
        n_seq=n_seq,
        kv_unified=unified,
        n_batch=ctx.n_batch,
        n_ubatch=ctx.n_ubatch,
    )
    try:
        b = kv_breakdown(ctx.model, settings, ctx.backend)
    except InvalidSettings:
        return 0
    return sum(p.bytes for p in b.parts if p.kind == "fixed") if b else 0


def _weights(model: ModelInfo, gpu: bool, measured: int | None) -> tuple[int, str]:
    if measured is not None:
        return measured, "measured model buffer"
    if gpu and model.block_weight_bytes and model.output_weight_bytes is not None:
        return (
            sum(model.block_weight_bytes) + model.output_weight_bytes,
            "the GGUF tensors a full offload puts on the GPU; the token embeddings stay in RAM",
        )
    return model.size_bytes, "file size"


def _settings(ctx: _Context, k: str, v: str, fa: bool, swa_full: bool, n_ctx: int) -> KvSettings:
    return KvSettings(
        n_ctx=n_ctx,
        type_k=k,
        type_v=v,
        flash_attn="on" if fa else "off",
        swa_full=swa_full,
        n_seq=ctx.n_seq,
        kv_unified=ctx.unified,
        n_batch=ctx.n_batch,
        n_ubatch=ctx.n_ubatch,
    )


def _option(ctx: _Context, k: str, v: str, fa: bool, swa_full: bool, measured: Sequence[MeasuredLine]) -> FitOption:
    invalid = _invalid(ctx, k, v, fa, swa_full)
    if invalid:
        return FitOption(
            k, v, fa, swa_full, None, False, None, "", None, None, None, None, None, None, False, note=invalid
        )
    line = next(
        (
            m
            for m in measured
            if (m.type_k, m.type_v) == (k, v) and m.flash_attn in (None, fa) and m.swa_full in (None, swa_full)
        ),
        None,
    )
    at_target = kv_breakdown(ctx.model, _settings(ctx, k, v, fa, swa_full, ctx.target), ctx.backend)
    assert at_target is not None
    if line:
        base = _measured_base(ctx, line)

        def need(n: int) -> int:
            fixed_kv = _fixed_kv(ctx, k, v, fa, swa_full, n, ctx.n_seq, ctx.unified)
            return round(base + ctx.output + fixed_kv + line.bytes_per_token * pad_n_ctx(n, ctx.n_seq, ctx.unified))

        basis: Basis = "measured"
        text, per_token = f"measured ({line.source})", line.bytes_per_token
        fixed = None
    else:

        def need(n: int) -> int:
            return _theory_need(ctx, k, v, fa, swa_full, n)

        beyond = ctx.beyond_kv or 0.0
        per_token = max(0.0, at_target.bytes_per_token + beyond)
        fixed = at_target.fixed_bytes
        basis = "theory + measured" if ctx.beyond_kv is not None else "theory"
        text = (
            f"theory + {fmt_bytes(beyond)}/token beyond the KV, measured ({ctx.anchor_source})"
            if ctx.beyond_kv is not None
            else "theory (llama.cpp's allocation)"
        )
    need_target = need(ctx.target)
    largest = _largest(ctx, need)
    fits = need_target <= ctx.usable
    n_cmd = ctx.target if fits else largest
    return FitOption(
        k,
        v,
        fa,
        swa_full,
        None,
        True,
        basis,
        text,
        per_token,
        fixed,
        need_target,
        fits,
        largest,
        _command(ctx, k, v, fa, swa_full, n_cmd, None),
        at_target.exact,
    )


def _invalid(ctx: _Context, k: str, v: str, fa: bool, swa_full: bool) -> str | None:
    if v in QUANTISED and not fa:
        return f"a {v} V cache needs flash attention: llama.cpp refuses it with -fa off"
    try:
        kv_breakdown(ctx.model, _settings(ctx, k, v, fa, swa_full, N_CTX_PAD), ctx.backend)
    except InvalidSettings as exc:
        return str(exc)
    return None


def _theory_need(ctx: _Context, k: str, v: str, fa: bool, swa_full: bool, n: int) -> int:
    b = kv_breakdown(ctx.model, _settings(ctx, k, v, fa, swa_full, n), ctx.backend)
    assert b is not None
    base = ctx.base if ctx.base is not None else ctx.weights + ctx.compute
    beyond = (ctx.beyond_kv or 0.0) * pad_n_ctx(n, ctx.n_seq, ctx.unified)
    return max(0, round(base + beyond)) + ctx.output + b.total_bytes


def _largest(ctx: _Context, need: Callable[[int], int]) -> int:
    """The largest multiple of 256 up to the cap whose need fits (0 if none); needs only grow."""
    top = ctx.cap // N_CTX_PAD
    if need(top * N_CTX_PAD) <= ctx.usable:
        return top * N_CTX_PAD
    lo, hi = 0, top  # need(lo·256) fits (or lo = 0), need(hi·256) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid * N_CTX_PAD) <= ctx.usable:
            lo = mid
        else:
            hi = mid
    return lo * N_CTX_PAD


def _partial_offload(ctx: _Context, k: str, v: str, fa: bool, swa_full: bool) -> FitOption | None:
    """The most layers (-ngl) whose weights and cache fit at the target; the rest run from RAM."""
    model = ctx.model
    blocks = model.block_weight_bytes
    n_all = model.n_layer or 0
    per_layer = kv_bytes_by_layer(model, _settings(ctx, k, v, fa, swa_full, ctx.target), ctx.backend)
    if not blocks or per_layer is None or not n_all:
        return None
    output = model.output_weight_bytes or 0

    def need(ngl: int) -> int:
        start = n_all + 1 - ngl
        weights = output + sum(blocks[il] for il in range(max(start, 0), min(n_all, len(blocks))))
        return weights + ctx.compute + sum(b for il, b in per_layer.items() if il >= start)

    best = next((ngl for ngl in range(n_all, 0, -1) if need(ngl) <= ctx.usable), None)
    if best is None:
        return None
    on_gpu = best - 1
    note = f"{on_gpu} of {n_all} layers and the output layer on the GPU, the rest in RAM (slower; RAM not checked)"
    return FitOption(
        k,
        v,
        fa,
        swa_full,
        best,
        True,
        "theory",
        "theory (llama.cpp's allocation)",
        None,
        None,
        need(best),
        True,
        ctx.target,
        _command(ctx, k, v, fa, swa_full, ctx.target, best),
        _exact(model),
        note=note,
    )


def _command(ctx: _Context, k: str, v: str, fa: bool, swa_full: bool, n_ctx: int | None, ngl: int | None) -> str | None:
    if not n_ctx:
        return None
    model = ctx.model_args or ("-m", ctx.model.path)
    parts = [
        "llama-server",
        *(shlex.quote(arg) for arg in model),
        "-c",
        str(n_ctx),
        "-ctk",
        k,
        "-ctv",
        v,
        "-fa",
        "on" if fa else "off",
    ]
    if swa_full:
        parts.append("--swa-full")
    if ngl is not None:
        parts += ["-ngl", str(ngl)]
    if ctx.explicit_slots:
        parts += ["-np", str(ctx.n_seq)] + (["-kvu"] if ctx.unified else [])
    return " ".join(parts)


def _mark_best(options: list[FitOption]) -> list[FitOption]:
    """The first option that fits the target whole (options come best-quality first), else the
    one that reaches the longest context."""
    valid = [o for o in options if o.valid and o.n_gpu_layers is None]
    pick = next((o for o in valid if o.fits), None)
    if pick is None:
        pick = next((o for o in options if o.valid and o.fits), None)
    if pick is None and valid:
        pick = max(valid, key=lambda o: o.max_context or 0)
    return [dataclasses.replace(o, best=True) if o is pick else o for o in options]


def _breakdown_lines(ctx: _Context, option: FitOption) -> tuple[str, ...]:
    settings = _settings(ctx, option.type_k, option.type_v, option.flash_attn, option.swa_full, ctx.target)
    b: KvBreakdown | None = kv_breakdown(ctx.model, settings, ctx.backend)
    return tuple(b.lines()) + b.notes if b else ()


def _exact(model: ModelInfo) -> bool:
    layout = kv_layout(model)
    return layout is not None and layout.exact


def _notes(ctx: _Context, layout: Layout | None, compute: int | None) -> tuple[str, ...]:
    notes = []
    if ctx.base is not None:
        notes.append(
            "every row stands on the measured non-KV base (weights, compute buffer, runtime); the rows "
            "without a measured line of their own add the theory's KV and what the measured line grew "
            "per token beyond its theory"
        )
        if ctx.anchor_flash_attn:
            notes.append(
                "the rows with flash attention off grow faster than that: without it the attention "
                "scores (cells × ubatch × heads) are computed in full; a line measured with it off says how much"
            )
    elif compute is None:
        notes.append(
            "compute buffer not included (it depends on the backend, ubatch and graph): "
            "pass a measured one or keep it in the reserve"
        )
    if layout and not layout.exact:
        notes.extend(f"theory is approximate here: {n}" for n in layout.notes)
    if ctx.cap > ctx.target:
        notes.append(f"largest context capped at the trained context ({ctx.cap:,})")
    elif ctx.cap == ctx.target:
        notes.append(f"largest context capped at the target ({ctx.cap:,})")
    if not ctx.gpu and ctx.output:
        notes.append(f"output (logits) buffer {fmt_bytes(ctx.output)} in RAM included")
    return tuple(notes)


def flash_attn_in_effect(setting: str) -> bool:
    """The flash attention a run's setting gives, as the theory counts it ("auto" is on)."""
    return setting != "off"


def measured_lines(tris: Mapping[str, Triangulation], results: Sequence[RunResult]) -> list[MeasuredLine]:
    """Each triangulated cache type's touched line (its allocated line where nothing was touched)."""
    lines = []
    for tri in tris.values():
        slope = tri.touched if tri.touched.bytes_per_token is not None else tri.allocated
        runs = [r for r in results if r.settings.cache_label == tri.cache_types]
        if slope.bytes_per_token is None or slope.intercept_bytes is None or not runs:
            continue
        s = runs[0].settings
        lines.append(
            MeasuredLine(
                slope.bytes_per_token,
                slope.intercept_bytes,
                s.cache_type_k,
                s.cache_type_v,
                flash_attn_in_effect(s.flash_attn),
                s.swa_full,
                f"triangulation at {', '.join(f'{r.n_ctx:,}' for r in runs)}",
            )
        )
    return lines
