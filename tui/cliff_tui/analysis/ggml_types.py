"""The GGML tensor types a KV cache can be stored in: values and bytes per block."""

from __future__ import annotations

# (values per block, bytes per block)
TYPE_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q5_1": (32, 24),
    "q5_0": (32, 22),
    "q4_1": (32, 20),
    "q4_0": (32, 18),
    "iq4_nl": (32, 18),
}
CACHE_TYPE_BYTES: dict[str, float] = {t: size / blck for t, (blck, size) in TYPE_BLOCKS.items()}
CACHE_TYPES = tuple(CACHE_TYPE_BYTES)
QUANTISED = frozenset(t for t, (blck, _) in TYPE_BLOCKS.items() if blck > 1)
