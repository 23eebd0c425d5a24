"""The KV theory against the cache real llama.cpp allocates, to the byte, on tiny GGUFs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cliff_tui.analysis.theory import (
    InvalidSettings,
    KvSettings,
    known_differences,
    kv_breakdown,
    kv_layout,
    pad_n_ctx,
    textbook_bytes_per_token,
)
from cliff_tui.engine.gguf_meta import read_model_info
from llama_alloc import TinyLlama
from tiny_model import write_tiny, write_tiny_llama

ARCHS = ("llama", "gemma3", "deepseek2", "mamba", "jamba")
TYPES = (("f16", "on"), ("f16", "off"), ("q8_0", "on"), ("q4_0", "on"))
SHAPES = [  # n_ctx, n_seq, kv_unified, swa_full
    (1300, 1, False, False),
    (1300, 1, False, True),
    (5000, 1, False, False),
    (1300, 4, False, False),
    (5000, 4, False, True),
    (5000, 4, True, False),
    (1300, 4, True, True),
]


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request, tmp_path_factory):
    path = write_tiny(request.param, tmp_path_factory.mktemp(request.param))
    model = TinyLlama(path)
    yield read_model_info(path), model
    model.free()


@pytest.mark.parametrize("cache,fa", TYPES)
def test_theory_equals_the_allocation_to_the_byte(tiny, cache, fa):
    info, model = tiny
    for n_ctx, n_seq, unified, swa_full in SHAPES:
        s = KvSettings(
            n_ctx=n_ctx, type_k=cache, type_v=cache, flash_attn=fa, swa_full=swa_full, n_seq=n_seq, kv_unified=unified
        )
        theory = kv_breakdown(info, s)
        real = model.allocation(s)
        assert real is not None, f"llama.cpp refused {s}"
        where = f"{info.architecture} {s}"
        assert (theory.n_ctx, theory.total_bytes) == (real.n_ctx, real.context_bytes), where
        assert abs(real.logged_kv_bytes - theory.total_bytes) <= 5243 * real.logged_buffers, where
        assert theory.exact


def test_quantised_v_without_flash_attention_is_refused_by_both(tiny):
    info, model = tiny
    s = KvSettings(n_ctx=1024, type_k="q8_0", type_v="q8_0", flash_attn="off")
    assert model.allocation(s) is None
    with pytest.raises(InvalidSettings, match="flash attention"):
        kv_breakdown(info, s)


def test_flash_attention_auto_allocates_as_on(tiny):
    info, model = tiny
    s = KvSettings(n_ctx=2048, type_k="q4_0", type_v="q4_0", flash_attn="auto", n_seq=2)
    assert model.allocation(s).context_bytes == kv_breakdown(info, s).total_bytes


def test_a_small_ubatch_shrinks_the_sliding_window_cache(tmp_path):
    path = write_tiny("gemma3", tmp_path)
    info, model = read_model_info(path), TinyLlama(path)
    try:
        for n_ubatch in (32, 200):
            s = KvSettings(n_ctx=4096, n_ubatch=n_ubatch, n_batch=256)
            assert model.allocation(s).context_bytes == kv_breakdown(info, s).total_bytes
    finally:
        model.free()


def test_layers_of_different_widths_pad_v_without_flash_attention(tmp_path):
    path = write_tiny_llama(tmp_path / "uneven.gguf", n_layer=3, n_head_kv=[2, 1, 4], arch="deci")
    info, model = read_model_info(path), TinyLlama(path)
    try:
        for fa in ("on", "off"):
            s = KvSettings(n_ctx=1024, flash_attn=fa)
            theory = kv_breakdown(info, s)
            assert model.allocation(s).context_bytes == theory.total_bytes
        off, on = (kv_breakdown(info, KvSettings(n_ctx=1024, flash_attn=fa)) for fa in ("off", "on"))
        assert off.total_bytes > on.total_bytes
        assert any("transposed" in note for note in off.notes)
    finally:
        model.free()


def test_padding_and_sequences_follow_llama_context():
    info = read_model_info_of("llama")
    one = kv_breakdown(info, KvSettings(n_ctx=1000))
    assert (one.n_ctx, one.n_ctx_seq) == (1024, 1024)
    split = kv_breakdown(info, KvSettings(n_ctx=1300, n_seq=4))
    assert (split.n_ctx, split.n_ctx_seq) == (2048, 512)  # pad(pad(1300) / 4) × 4
    unified = kv_breakdown(info, KvSettings(n_ctx=1300, n_seq=4, kv_unified=True))
    assert (unified.n_ctx, unified.n_ctx_seq) == (1536, 1536)
    assert pad_n_ctx(1) == 256
    assert (pad_n_ctx(1300, 4), pad_n_ctx(1300, 4, kv_unified=True)) == (2048, 1536)  # what fit sizes by


def read_model_info_of(arch: str, **kwargs):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        return read_model_info(write_tiny(arch, Path(folder), **kwargs))


def test_parts_are_named_with_their_arithmetic():
    gemma = kv_breakdown(read_model_info_of("gemma3"), KvSettings(n_ctx=8192))
    texts = gemma.lines()
    assert texts[0] == (
        "7 sliding-window layers: 768 cells fixed (window 128 + ubatch 512, padded to 256) × "
        "1 KV head × 64 × 2 (K,V) × 2 B = 1.31 MiB"
    )
    assert texts[1] == "1 global layer × 1 KV head × 64 × 2 (K,V) × 2 B = 256 B/token"
    assert gemma.bytes_per_token == 256 and gemma.fixed_bytes == 7 * 768 * 256
    mla = kv_breakdown(read_model_info_of("deepseek2"), KvSettings(n_ctx=4096, type_k="q8_0", type_v="q8_0"))
    assert mla.lines()[0] == "2 MLA layers × 1 latent row of 96 × 1.0625 B (q8_0) (K only, no V) = 204 B/token"
    mamba = kv_breakdown(read_model_info_of("mamba"), KvSettings(n_ctx=4096, n_seq=4))
    assert mamba.bytes_per_token == 0
    assert (
        mamba.lines()[0] == "2 recurrent layers: state of 384 + 2,048 values × 4 B (f32) × 4 sequences = 76.0 KiB fixed"
    )


def test_textbook_overstates_what_llama_cpp_keeps():
    gemma = read_model_info_of("gemma3")
    assert textbook_bytes_per_token(gemma) == 8 * 256
    assert kv_breakdown(gemma, KvSettings(n_ctx=8192)).bytes_per_token == 256
    notes = known_differences(gemma, flash_attn_on=True)
    assert any("sliding-window" in n for n in notes)
    assert not any("sliding-window" in n for n in known_differences(gemma, True, swa_full=True))


def test_swa_pattern_from_the_header_overrides_the_default():
    info = read_model_info_of("gemma3", swa_period=4)  # layers 3 and 7 global
    kinds = [layer.kind for layer in kv_layout(info).layers]
    assert kinds == ["swa", "swa", "swa", "global"] * 2


def test_architectures_it_does_not_model_say_so():
    info = replace(read_model_info_of("llama"), architecture="gemma3n", sliding_window=512)
    b = kv_breakdown(info, KvSettings(n_ctx=4096))
    assert not b.exact and b.notes
