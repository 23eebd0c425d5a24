"""The textbook KV cache size, shown beside the measurement and never instead of it.

``2 × n_layer × n_head_kv × head_dim × bytes/value`` per token (K and V may differ in head size
and type). It knows nothing of compute buffers that grow with n_ctx, sliding-window layers
(Gemma), MLA (DeepSeek) or recurrent layers; :func:`known_differences` names those.
"""

from __future__ import annotations

from cliff_tui.events import ModelInfo

# Bytes per stored value. q8_0 keeps 32 values in 34 bytes; q4_0 in 18 (GGML block layouts).
CACHE_TYPE_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}
CACHE_TYPES = tuple(CACHE_TYPE_BYTES)

N_CTX_PAD = 256  # llama.cpp pads n_ctx to a multiple of 256 when it creates the KV cache


def pad_n_ctx(n: int) -> int:
    return -(-n // N_CTX_PAD) * N_CTX_PAD


def kv_bytes_per_token(model: ModelInfo, type_k: str = "f16", type_v: str = "f16") -> float | None:
    if None in (model.n_layer, model.n_head_kv, model.head_dim_k, model.head_dim_v):
        return None
    per_layer = model.n_head_kv * (model.head_dim_k * CACHE_TYPE_BYTES[type_k]
                                   + model.head_dim_v * CACHE_TYPE_BYTES[type_v])
    return model.n_layer * per_layer


def expected_ratio(type_k: str, type_v: str, ref_k: str = "f16", ref_v: str = "f16") -> float:
    """Cache size of one type pair against another (q8_0/f16 ≈ 0.53)."""
    num = CACHE_TYPE_BYTES[type_k] + CACHE_TYPE_BYTES[type_v]
    den = CACHE_TYPE_BYTES[ref_k] + CACHE_TYPE_BYTES[ref_v]
    return num / den


def known_differences(model: ModelInfo, flash_attn_on: bool | None, swa_full: bool = False) -> list[str]:
    notes = []
    arch = (model.architecture or "").lower()
    if model.sliding_window and not swa_full:
        notes.append(f"sliding-window layers keep only {model.sliding_window} tokens: "
                     "the textbook figure overstates their share")
    if arch.startswith("deepseek") or "mla" in arch:
        notes.append("MLA compresses K/V: the textbook figure does not apply")
    if arch in {"mamba", "mamba2", "rwkv6", "rwkv7", "jamba", "granitehybrid"}:
        notes.append("recurrent layers keep a fixed state, not a per-token cache")
    if flash_attn_on is False:
        notes.append("without flash attention the attention compute buffer grows with n_ctx "
                     "and its pages are touched only at depth")
    notes.append(f"n_ctx is padded to a multiple of {N_CTX_PAD}")
    return notes
