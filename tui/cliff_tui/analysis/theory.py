"""The KV cache llama.cpp allocates, from the GGUF header and the run's settings.

It follows the vendored llama.cpp (llama-cpp-python 0.3.36): ``llama_context`` pads ``n_ctx``
to 256 and, without a unified cache, gives each of the ``n_seq`` streams ``pad(n_ctx / n_seq,
256)`` cells; full-attention layers keep that many cells per stream; sliding-window layers keep
``pad(min(n_ctx_seq, n_swa × (n_seq if unified else 1) + n_ubatch), 256)`` unless ``swa_full``;
MLA layers (DeepSeek-2/3) store one compressed K row (kv_lora_rank + rope dims) and no V;
recurrent layers (Mamba, RWKV and the recurrent half of hybrids) keep a state per sequence,
whatever the context; without flash attention V is stored transposed, each layer as wide as
the widest. Each tensor is padded to the buffer's alignment (32 B on the CPU, 128 B on CUDA,
where a quantised tensor also gets room for a 512-value row).

:func:`kv_breakdown` returns the exact bytes at one context, named by part; the textbook
``2 × n_layer × n_head_kv × head_dim × bytes`` stays as :func:`textbook_bytes_per_token`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cliff_tui.analysis.ggml_types import CACHE_TYPE_BYTES, CACHE_TYPES, QUANTISED, TYPE_BLOCKS
from cliff_tui.records import FlashAttn, ModelInfo, RunSettings
from cliff_tui.units import fmt_bytes

N_CTX_PAD = 256  # llama_context pads n_ctx (and n_ctx per sequence) to a multiple of 256
SWA_PAD = 256  # the sliding-window cache is padded to 256 cells as well
STATE_TYPE = "f32"  # recurrent states are always f32


LayerKind = Literal["global", "swa", "recurrent"]


def pad_n_ctx(n: int, n_seq: int = 1, kv_unified: bool = False) -> int:
    """The n_ctx llama_context makes of ``n``: padded to 256 and, without a unified cache, each of the
    ``n_seq`` streams padded to 256 again."""
    n_ctx = _pad(n, N_CTX_PAD)
    if kv_unified or n_seq == 1:
        return n_ctx
    return _pad(n_ctx // n_seq, N_CTX_PAD) * n_seq


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def row_bytes(cache_type: str, n_values: int) -> int:
    """``ggml_row_size``: bytes of ``n_values`` values of ``cache_type``."""
    blck, size = TYPE_BLOCKS[cache_type]
    if n_values % blck:
        raise ValueError(f"{n_values} values do not fill {cache_type} blocks of {blck}")
    return n_values // blck * size


# --- settings and backends ------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """What a ggml buffer type adds to each tensor."""

    name: str
    alignment: int
    quant_row_pad: int = 0  # CUDA: quantised tensors get room for a row padded to 512 values


CPU = Backend("CPU", 32)
CUDA = Backend("CUDA", 128, 512)


@dataclass(frozen=True)
class KvSettings:
    """The knobs that size the cache, named as llama.cpp's context parameters."""

    n_ctx: int = 0  # -c; 0: the trained context
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: FlashAttn = "auto"
    swa_full: bool = False
    n_seq: int = 1  # n_seq_max (llama-server: -np)
    kv_unified: bool = False
    n_batch: int = 2048
    n_ubatch: int = 512
    n_rs_seq: int = 0

    @classmethod
    def from_run(cls, settings: RunSettings, n_ctx: int | None = None) -> KvSettings:
        return cls(
            n_ctx=n_ctx or settings.n_ctx or 0,
            type_k=settings.cache_type_k,
            type_v=settings.cache_type_v,
            flash_attn=settings.flash_attn,
            swa_full=settings.swa_full,
            n_batch=settings.batch_size,
            n_ubatch=settings.ubatch_size,
        )


# --- what the header says about each layer --------------------------------------------------


@dataclass(frozen=True)
class SwaRule:
    """How llama.cpp's loader for one architecture marks sliding-window layers."""

    period: int | None  # default pattern period; None: the header must give a per-layer array
    dense_first: bool = False  # the full-attention layer opens each period instead of closing it
    default_window: int | None = None
    when: Literal["always", "window_key", "n_layer_64"] = "always"
    fixed_window: bool = False  # the loader overrides the header's window (llama4)


SWA_RULES: dict[str, SwaRule] = {
    "gemma2": SwaRule(2, default_window=4096),
    "gemma3": SwaRule(6, when="window_key"),
    "gemma3n": SwaRule(5),
    "gemma4": SwaRule(None),
    "cohere2": SwaRule(4),
    "cohere2moe": SwaRule(4, dense_first=True),
    "exaone4": SwaRule(4, default_window=4096, when="n_layer_64"),
    "exaone-moe": SwaRule(4, default_window=128),
    "gpt-oss": SwaRule(2),
    "olmo2": SwaRule(4, when="window_key"),
    "llama4": SwaRule(4, default_window=8192, fixed_window=True),
    "mellum": SwaRule(4, when="window_key"),
    "afmoe": SwaRule(4, when="window_key"),
    "smallthinker": SwaRule(4, dense_first=True, default_window=4096, when="window_key", fixed_window=True),
    "plamo3": SwaRule(8, when="window_key"),
    "muse-glimmer": SwaRule(4),
    "laguna": SwaRule(4, dense_first=True, when="window_key"),
    "granite_swa": SwaRule(None),
    "maple": SwaRule(None),
    "mimo2": SwaRule(None),
    "spark2_5": SwaRule(None),
    "step35": SwaRule(None),
}
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# Hybrids whose recurrent layers are the ones with no KV heads in the per-layer array.
HYBRID_BY_KV_HEADS = frozenset({"jamba", "granitehybrid", "plamo2", "lfm2", "lfm2moe"})
HYBRID_BY_INTERVAL = frozenset({"qwen3next", "qwen35", "qwen35moe"})
# Layouts this theory does not model: KV shared between layers, sparse-attention indexers,
# other linear-attention states, or no KV cache at all (encoders).
UNMODELLED = {
    "gemma3n": "layers past the first ones reuse earlier layers' KV",
    "gemma4": "layers past the first ones reuse earlier layers' KV",
    "gemma4-assistant": "its KV is shared with the target model",
    "deepseek32": "the sparse-attention indexer keeps its own per-token cache",
    "deepseek4": "the DeepSeek-V4 cache has compressed and indexer parts of its own",
    "glm-dsa": "the sparse-attention indexer keeps its own per-token cache",
    "glm5-next": "the sparse-attention indexer keeps its own per-token cache",
    "minimax-m3": "the sparse-attention indexer keeps its own per-token cache",
    "dots3note": "the sparse-attention indexer keeps its own per-token cache",
    "hy_v4": "the sparse-attention indexer keeps its own per-token cache",
    "qwen4exp": "the sparse-attention indexer keeps its own per-token cache",
    "kimi-linear": "its linear-attention state is sized differently",
    "kimi-k3": "its linear-attention state is sized differently",
    "bailingmoe3": "its linear-attention state is sized differently",
    "minimax-01": "its linear-attention state is sized differently",
    "nemotron_h_moe": "its layer filters differ by context type",
}
NO_CACHE_ARCHS = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "wavtokenizer-dec",
        "modern-bert",
        "gemma-embedding",
        "dream",
        "llada",
        "llada-moe",
        "rnd1",
    }
)


@dataclass(frozen=True)
class Layer:
    """One layer as llama.cpp's cache sees it."""

    index: int
    kind: LayerKind
    n_head_kv: int = 0
    head_dim_k: int = 0
    head_dim_v: int = 0  # 0 with MLA: V is not stored
    mla: bool = False
    state_r: int = 0  # recurrent: f32 values per sequence (conv / token shift)
    state_s: int = 0  # recurrent: f32 values per sequence (SSM / WKV)
    also_recurrent: bool = False  # Falcon-H1: attention and recurrent state in the same layer


@dataclass(frozen=True)
class Layout:
    architecture: str
    layers: tuple[Layer, ...]
    n_swa: int
    v_width_max: int  # the widest layer's V row (n_head_kv × head_dim_v), for the transposed V
    exact: bool
    notes: tuple[str, ...]


def kv_layout(model: ModelInfo) -> Layout | None:
    """The layers that hold a cache, from the header; None where the header lacks the basics."""
    arch = (model.architecture or "").lower()
    n_all = model.n_layer
    if not n_all:
        return None
    if arch in NO_CACHE_ARCHS:
        return Layout(arch, (), 0, 0, True, ("this architecture keeps no KV cache",))
    n_trunk = n_all - (model.n_layer_nextn or 0)
    notes = [UNMODELLED[arch]] if arch in UNMODELLED else []
    if arch in ("lfm2", "lfm2moe") and model.sliding_window:
        notes.append("its sliding-window attention layers are not modelled")
    kv_heads = _kv_heads(model, n_all)
    swa, n_swa = _swa_layers(model, arch, n_trunk, n_all)
    recurrent = _recurrent_layers(model, arch, kv_heads, n_trunk)
    if kv_heads is None and arch not in RECURRENT_ARCHS:
        return None
    state_r, state_s = _state_sizes(model, arch)
    layers, v_max = [], 0
    for il in range(n_all):
        heads = kv_heads[il] if kv_heads else 0
        dk, dv = _head_dims(model, swa[il])
        v_max = max(v_max, heads * dv)
        if il >= n_trunk:
            continue  # next-token-prediction layers: only a draft context caches them
        attends = (arch == "falcon-h1") or not recurrent[il]
        if arch == "nemotron_h" and model.n_ff_layers and model.n_ff_layers[il] != 0:
            continue
        if attends and heads:
            mla = bool(model.head_dim_k_mla and model.head_dim_v_mla)
            layers.append(
                Layer(
                    il,
                    "swa" if swa[il] else "global",
                    heads,
                    dk,
                    0 if mla else dv,
                    mla,
                    also_recurrent=arch == "falcon-h1",
                )
            )
        elif recurrent[il]:
            layers.append(Layer(il, "recurrent", state_r=state_r, state_s=state_s))
    if arch == "falcon-h1":
        layers += [Layer(il, "recurrent", state_r=state_r, state_s=state_s) for il in range(n_trunk)]
    if model.head_dim_k is None and not recurrent[0]:
        notes.append("the header has no head size")
    return Layout(arch, tuple(layers), n_swa, v_max, not notes, tuple(notes))


def _kv_heads(model: ModelInfo, n_all: int) -> list[int] | None:
    if model.n_head_kv_layers and len(model.n_head_kv_layers) >= n_all:
        return list(model.n_head_kv_layers[:n_all])
    if model.n_head_kv is None:
        return None
    return [model.n_head_kv] * n_all


def _head_dims(model: ModelInfo, is_swa: bool) -> tuple[int, int]:
    dk, dv = model.head_dim_k or 0, model.head_dim_v or 0
    if is_swa:
        dk, dv = model.head_dim_k_swa or dk, model.head_dim_v_swa or dv
    return dk, dv


def _swa_layers(model: ModelInfo, arch: str, n_trunk: int, n_all: int) -> tuple[list[bool], int]:
    rule = SWA_RULES.get(arch)
    none = [False] * n_all
    if rule is None:
        return none, 0
    window = model.sliding_window
    if rule.when == "window_key" and not window:
        return none, 0
    if rule.when == "n_layer_64" and n_trunk != 64:
        return none, 0
    if arch == "llama4" and window == 0:
        return none, 0
    if rule.fixed_window or not window:
        window = rule.default_window
    if not window:
        return none, 0
    if model.swa_layers:
        flags = list(model.swa_layers[:n_all]) + [False] * max(0, n_all - len(model.swa_layers))
        return flags, window
    if rule.period is None:
        return none, 0
    period = model.swa_period if model.swa_period is not None else rule.period
    flags = [_is_swa(il, period, rule.dense_first) for il in range(n_trunk)] + [False] * (n_all - n_trunk)
    return flags, window


def _is_swa(il: int, period: int, dense_first: bool) -> bool:
    """``llama_hparams::set_swa_pattern``."""
    if period == 0:
        return True
    return il % period != 0 if dense_first else il % period < period - 1


def _recurrent_layers(model: ModelInfo, arch: str, kv_heads: list[int] | None, n_trunk: int) -> list[bool]:
    n_all = model.n_layer or 0
    if arch in RECURRENT_ARCHS:
        return [il < n_trunk for il in range(n_all)]
    if arch in HYBRID_BY_KV_HEADS or arch == "nemotron_h":
        heads = kv_heads or []
        return [bool(heads) and heads[il] == 0 and il < n_trunk for il in range(n_all)]
    if arch in HYBRID_BY_INTERVAL and model.full_attention_interval:
        k = model.full_attention_interval
        return [il < n_trunk and (il + 1) % k != 0 for il in range(n_all)]
    if arch == "falcon-h1":
        return [il < n_trunk for il in range(n_all)]
    return [False] * n_all


def _state_sizes(model: ModelInfo, arch: str) -> tuple[int, int]:
    """``llama_hparams::n_embd_r`` and ``n_embd_s``: f32 values of state per sequence and layer."""
    n_embd = model.n_embd or 0
    if model.wkv_head_size:
        shift = model.token_shift_count if model.token_shift_count is not None else 2
        return shift * n_embd, n_embd * model.wkv_head_size
    d_state, d_inner = model.ssm_state_size or 0, model.ssm_inner_size or 0
    if model.shortconv_l_cache:
        return n_embd * (model.shortconv_l_cache - 1), d_state * d_inner
    d_conv, groups = model.ssm_conv_kernel or 0, model.ssm_group_count or 0
    conv = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * groups * d_state)
    return conv, d_state * d_inner


# --- sizes at one context -------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """The cell counts llama_context derives from the settings."""

    n_ctx: int  # after padding (what llama_n_ctx reports)
    n_ctx_seq: int
    n_seq: int
    n_stream: int
    n_ubatch: int
    swa_cells: int  # per stream
    state_rows: int


def geometry(model: ModelInfo, settings: KvSettings, n_swa: int) -> Geometry:
    requested = settings.n_ctx or model.n_ctx_train or 0
    if requested <= 0:
        raise ValueError("no context size: pass n_ctx (the header has no trained context)")
    n_seq = max(1, settings.n_seq)
    n_batch = min(requested, settings.n_batch)
    n_ubatch = min(n_batch, settings.n_ubatch or n_batch)
    n_ctx = pad_n_ctx(requested, n_seq, settings.kv_unified)
    n_stream = 1 if settings.kv_unified else n_seq
    n_ctx_seq = n_ctx // n_stream
    swa = (
        n_ctx_seq
        if settings.swa_full
        else _pad(min(n_ctx_seq, n_swa * (n_seq if settings.kv_unified else 1) + n_ubatch), SWA_PAD)
    )
    rows = n_seq * (1 + settings.n_rs_seq)
    return Geometry(n_ctx, n_ctx_seq, n_seq, n_stream, n_ubatch, swa, rows)


@dataclass(frozen=True)
class KvPart:
    """One named share of the cache: per-token (grows with n_ctx) or fixed."""

    name: str  # "global layers", "sliding-window layers", "MLA layers", "recurrent state"
    kind: Literal["per_token", "fixed"]
    layers: int
    cells: int  # cells held (all streams); for recurrent state, rows
    bytes: int  # allocated at this context, alignment included
    bytes_per_token: float  # 0 for fixed parts
    text: str


@dataclass(frozen=True)
class KvBreakdown:
    model: str
    architecture: str
    settings: KvSettings
    n_ctx: int
    n_ctx_seq: int
    flash_attn: bool
    parts: tuple[KvPart, ...]
    total_bytes: int
    bytes_per_token: float  # what each further token of n_ctx costs
    fixed_bytes: int  # the rest of total_bytes at this n_ctx
    exact: bool  # False where the architecture has parts this theory does not model
    notes: tuple[str, ...] = field(default_factory=tuple)
    backend: str = "CPU"

    def lines(self) -> list[str]:
        return [p.text for p in self.parts] + [f"total at n_ctx {self.n_ctx:,}: {fmt_bytes(self.total_bytes)}"]


class InvalidSettings(ValueError):
    """A combination llama.cpp refuses (it fails to create the context)."""


def check_settings(model: ModelInfo, settings: KvSettings) -> bool:
    """The flash attention in effect; raises :class:`InvalidSettings` where llama.cpp refuses."""
    for t in (settings.type_k, settings.type_v):
        if t not in TYPE_BLOCKS:
            raise InvalidSettings(f"unknown cache type {t!r} (use one of {', '.join(CACHE_TYPES)})")
    fa = settings.flash_attn != "off"
    if settings.type_v in QUANTISED and not fa:
        raise InvalidSettings(
            f"a {settings.type_v} V cache needs flash attention (-fa on): llama.cpp refuses it with -fa off"
        )
    if model.head_dim_k_mla and model.head_dim_v_mla and settings.type_k != settings.type_v:
        raise InvalidSettings("MLA models need the same K and V cache type")
    layout = kv_layout(model)
    for layer in layout.layers if layout else ():
        for t, dim in ((settings.type_k, layer.head_dim_k), (settings.type_v, layer.head_dim_v)):
            if fa and layer.kind != "recurrent" and dim and dim % TYPE_BLOCKS[t][0]:
                raise InvalidSettings(f"{t} blocks of {TYPE_BLOCKS[t][0]} do not divide the head size {dim}")
    return fa


def _tensor_bytes(cache_type: str, width: int, rows: int, backend: Backend) -> int:
    if width == 0 or rows == 0:
        return 0
    size = row_bytes(cache_type, width) * rows
    if backend.quant_row_pad and cache_type in QUANTISED and width % backend.quant_row_pad:
        size += row_bytes(cache_type, backend.quant_row_pad - width % backend.quant_row_pad)
    return _pad(size, backend.alignment)


def layer_bytes(
    layer: Layer, layout: Layout, settings: KvSettings, geo: Geometry, flash_attn: bool, backend: Backend = CPU
) -> int:
    """Bytes one layer's cache tensors take at this geometry."""
    if layer.kind == "recurrent":
        rows = geo.state_rows
        return _tensor_bytes(STATE_TYPE, layer.state_r, rows, backend) + _tensor_bytes(
            STATE_TYPE, layer.state_s, rows, backend
        )
    cells = (geo.swa_cells if layer.kind == "swa" else geo.n_ctx_seq) * geo.n_stream
    v_width = 0 if layer.mla else (layout.v_width_max if not flash_attn else layer.n_head_kv * layer.head_dim_v)
    return _tensor_bytes(settings.type_k, layer.n_head_kv * layer.head_dim_k, cells, backend) + _tensor_bytes(
        settings.type_v, v_width, cells, backend
    )


def kv_breakdown(model: ModelInfo, settings: KvSettings, backend: Backend = CPU) -> KvBreakdown | None:
    """The cache llama.cpp allocates for ``model`` with ``settings``; None without a usable header.

    Raises :class:`InvalidSettings` for a combination llama.cpp refuses."""
    layout = kv_layout(model)
    if layout is None:
        return None
    fa = check_settings(model, settings)
    geo = geometry(model, settings, layout.n_swa)
    groups: dict[tuple[object, ...], list[Layer]] = {}
    for layer in layout.layers:
        key = (layer.kind, layer.mla, layer.n_head_kv, layer.head_dim_k, layer.head_dim_v, layer.state_r, layer.state_s)
        groups.setdefault(key, []).append(layer)
    parts = [_part(group, layout, settings, geo, fa, backend) for group in groups.values()]
    total = sum(p.bytes for p in parts)
    per_token = sum(p.bytes_per_token for p in parts)
    notes = list(layout.notes)
    if not fa and any(
        layer.kind != "recurrent" and layer.n_head_kv * layer.head_dim_v != layout.v_width_max
        for layer in layout.layers
        if not layer.mla
    ):
        notes.append("flash attention off: V is stored transposed, every layer as wide as the widest")
    return KvBreakdown(
        model.name,
        layout.architecture,
        settings,
        geo.n_ctx,
        geo.n_ctx_seq,
        fa,
        tuple(parts),
        total,
        per_token,
        total - round(per_token * geo.n_ctx),
        layout.exact,
        tuple(notes),
        backend.name,
    )


def kv_total_bytes(model: ModelInfo, settings: KvSettings, backend: Backend = CPU) -> int | None:
    breakdown = kv_breakdown(model, settings, backend)
    return None if breakdown is None else breakdown.total_bytes


def kv_bytes_by_layer(model: ModelInfo, settings: KvSettings, backend: Backend = CPU) -> dict[int, int] | None:
    """Cache bytes per layer index (a layer's cache sits on that layer's device with -ngl)."""
    layout = kv_layout(model)
    if layout is None:
        return None
    fa = check_settings(model, settings)
    geo = geometry(model, settings, layout.n_swa)
    out: dict[int, int] = {}
    for layer in layout.layers:
        out[layer.index] = out.get(layer.index, 0) + layer_bytes(layer, layout, settings, geo, fa, backend)
    return out


def _part(
    group: list[Layer], layout: Layout, settings: KvSettings, geo: Geometry, fa: bool, backend: Backend
) -> KvPart:
    first, n = group[0], len(group)
    size = sum(layer_bytes(layer, layout, settings, geo, fa, backend) for layer in group)
    if first.kind == "recurrent":
        text = (
            f"{_layers(n, 'recurrent')}: state of {first.state_r:,} + {first.state_s:,} values × 4 B (f32) "
            f"× {geo.state_rows} sequence{'s' if geo.state_rows != 1 else ''} = {fmt_bytes(size)} fixed"
        )
        return KvPart("recurrent state", "fixed", n, geo.state_rows, size, 0.0, text)
    cells = (geo.swa_cells if first.kind == "swa" else geo.n_ctx_seq) * geo.n_stream
    row = _row_text(first, layout, settings, fa)
    if first.kind == "swa" and not (settings.swa_full or geo.swa_cells == geo.n_ctx_seq):
        why = _swa_why(layout.n_swa, geo, settings.kv_unified)
        text = f"{_layers(n, 'sliding-window')}: {cells:,} cells fixed ({why}) × {row} = {fmt_bytes(size)}"
        return KvPart("sliding-window layers", "fixed", n, cells, size, 0.0, text)
    name = "MLA layers" if first.mla else "sliding-window layers" if first.kind == "swa" else "global layers"
    label = _layers(n, "MLA" if first.mla else "sliding-window" if first.kind == "swa" else "global")
    if first.kind == "swa":
        label += " (full-size cache)" if settings.swa_full else " (window longer than the context)"
    text = f"{label} × {row} = {fmt_bytes(size / geo.n_ctx)}/token"
    return KvPart(name, "per_token", n, cells, size, size / geo.n_ctx, text)


def _layers(n: int, what: str) -> str:
    return f"{n} {what} layer{'s' if n != 1 else ''}"


def _row_text(layer: Layer, layout: Layout, settings: KvSettings, fa: bool) -> str:
    tk, tv = settings.type_k, settings.type_v
    if layer.mla:
        return f"1 latent row of {layer.head_dim_k} × {_b(tk)} (K only, no V)"
    heads = f"{layer.n_head_kv} KV head{'s' if layer.n_head_kv != 1 else ''}"
    v_width = layout.v_width_max if not fa else layer.n_head_kv * layer.head_dim_v
    if v_width == layer.n_head_kv * layer.head_dim_v and layer.head_dim_k == layer.head_dim_v and tk == tv:
        return f"{heads} × {layer.head_dim_k} × 2 (K,V) × {_b(tk)}"
    v_text = f"{layer.head_dim_v}" if v_width == layer.n_head_kv * layer.head_dim_v else f"V padded to {v_width}"
    return f"{heads} × ({layer.head_dim_k} K × {_b(tk)} + {v_text} V × {_b(tv)})"


def _b(cache_type: str) -> str:
    text = f"{CACHE_TYPE_BYTES[cache_type]:g} B"
    return text if cache_type in ("f16", "f32") else f"{text} ({cache_type})"


def _swa_why(n_swa: int, geo: Geometry, unified: bool) -> str:
    window = f"window {n_swa:,}" + (f" × {geo.n_seq} sequences" if unified and geo.n_seq > 1 else "")
    streams = f", per each of {geo.n_stream} sequences" if geo.n_stream > 1 else ""
    return f"{window} + ubatch {geo.n_ubatch}, padded to {SWA_PAD}{streams}"


# --- the textbook figure and the old helpers ------------------------------------------------


def textbook_bytes_per_token(model: ModelInfo, type_k: str = "f16", type_v: str = "f16") -> float | None:
    """``2 × n_layer × n_head_kv × head_dim × bytes``: every layer, every token, K and V."""
    n_layer, n_head_kv, dim_k, dim_v = model.n_layer, model.n_head_kv, model.head_dim_k, model.head_dim_v
    if n_layer is None or n_head_kv is None or dim_k is None or dim_v is None:
        return None
    return n_layer * n_head_kv * (dim_k * CACHE_TYPE_BYTES[type_k] + dim_v * CACHE_TYPE_BYTES[type_v])


kv_bytes_per_token = textbook_bytes_per_token  # the name its first callers use


def expected_ratio(type_k: str, type_v: str, ref_k: str = "f16", ref_v: str = "f16") -> float:
    """Cache size of one type pair against another (q8_0/f16 ≈ 0.53)."""
    num = CACHE_TYPE_BYTES[type_k] + CACHE_TYPE_BYTES[type_v]
    den = CACHE_TYPE_BYTES[ref_k] + CACHE_TYPE_BYTES[ref_v]
    return num / den


def known_differences(model: ModelInfo, flash_attn_on: bool | None, swa_full: bool = False) -> list[str]:
    """Where the textbook figure and llama.cpp's allocation part, in words."""
    notes = []
    layout = kv_layout(model)
    kinds = {layer.kind for layer in layout.layers} if layout else set()
    if layout is not None and "swa" in kinds and not swa_full:
        notes.append(
            f"sliding-window layers keep only {layout.n_swa:,} tokens (+ ubatch): "
            "the textbook figure overstates their share"
        )
    if layout and any(layer.mla for layer in layout.layers):
        notes.append("MLA stores one compressed K row per token and no V: the textbook figure does not apply")
    if "recurrent" in kinds:
        notes.append("recurrent layers keep a fixed state per sequence, not a per-token cache")
    if layout and not layout.exact:
        notes.extend(layout.notes)
    if flash_attn_on is False:
        notes.append(
            "without flash attention the attention compute buffer grows with n_ctx "
            "and its pages are touched only at depth"
        )
    notes.append(f"n_ctx is padded to a multiple of {N_CTX_PAD}")
    return notes
