"""The fit advisor's table, on headers of tiny GGUFs and of the real SmolLM2."""

from __future__ import annotations

import pytest

from cliff_tui.analysis.fit import MeasuredLine, fit_table
from cliff_tui.analysis.theory import KvSettings, kv_breakdown
from cliff_tui.engine.gguf_meta import read_model_info
from llama_alloc import TinyLlama
from tiny_model import write_tiny

MiB = 2**20


@pytest.fixture(scope="module")
def smol(smollm2):
    return read_model_info(smollm2)


@pytest.fixture(scope="module")
def gemma_path(tmp_path_factory):
    return write_tiny("gemma3", tmp_path_factory.mktemp("gemma"))


def option(table, cache, fa=True, swa_full=False, ngl=None):
    return next(
        o for o in table.options if (o.type_k, o.flash_attn, o.swa_full, o.n_gpu_layers) == (cache, fa, swa_full, ngl)
    )


@pytest.mark.model
def test_smollm2_on_a_small_ram_tier_needs_a_quantised_cache(smol):
    table = fit_table(smol, 200 * MiB, tier="RAM available", reserve_bytes=16 * MiB)
    assert table.target_ctx == 8192 and table.n_seq == 4 and table.kv_unified
    f16, q8, q4 = (option(table, t) for t in ("f16", "q8_0", "q4_0"))
    assert (f16.fits, q8.fits, q4.fits) == (False, False, True)
    assert f16.max_context < q8.max_context < q4.max_context == 8192
    assert f16.basis == "theory" and f16.bytes_per_token == 30 * 3 * 64 * 2 * 2
    kv = kv_breakdown(smol, KvSettings(n_ctx=8192, n_seq=4, kv_unified=True, flash_attn="on")).total_bytes
    assert f16.need_bytes == smol.size_bytes + kv + table.output_bytes
    assert table.output_bytes == 49152 * 4 * 4  # f32 logits, one row per slot
    assert q4.best and table.best is q4
    assert q4.command == f"llama-server -m {smol.path} -c 8192 -ctk q4_0 -ctv q4_0 -fa on"
    assert f16.command.endswith(f"-c {f16.max_context} -ctk f16 -ctv f16 -fa on")


@pytest.mark.model
def test_the_largest_context_is_the_last_multiple_of_256_that_fits(smol):
    table = fit_table(smol, 160 * MiB, reserve_bytes=0)
    for o in (o for o in table.options if o.valid):

        def need(n, o=o):
            kv = kv_breakdown(
                smol,
                KvSettings(
                    n_ctx=n,
                    type_k=o.type_k,
                    type_v=o.type_v,
                    n_seq=4,
                    kv_unified=True,
                    flash_attn="on" if o.flash_attn else "off",
                ),
            )
            return table.weights_bytes + table.output_bytes + kv.total_bytes

        assert o.max_context % 256 == 0
        assert need(o.max_context) <= table.usable_bytes
        assert o.max_context == table.context_cap or table.usable_bytes < need(o.max_context + 256)
    assert any(o.valid and o.max_context < table.context_cap for o in table.options)


@pytest.mark.model
def test_quantised_v_without_flash_attention_is_marked_invalid(smol):
    table = fit_table(smol, 8 * 2**30)
    bad = option(table, "q8_0", fa=False)
    assert not bad.valid and "flash attention" in bad.note and bad.command is None
    assert option(table, "f16", fa=False).valid


def test_sliding_window_models_get_swa_full_options(gemma_path):
    info = read_model_info(gemma_path)
    table = fit_table(info, 8 * MiB, tier="GPU0 dedicated VRAM", gpu=True, reserve_bytes=1 * MiB)
    small, full = option(table, "f16"), option(table, "f16", swa_full=True)
    assert small.fits and not full.fits
    assert small.bytes_per_token == 256 and small.fixed_bytes == 7 * 1024 * 256
    assert full.command.endswith("--swa-full")
    assert table.breakdown[0].startswith("7 sliding-window layers: 1,024 cells fixed (window 128 × 4 sequences")


def test_the_need_is_what_llama_cpp_allocates_plus_weights(gemma_path):
    info = read_model_info(gemma_path)
    table = fit_table(info, 9 * MiB, reserve_bytes=0)
    model = TinyLlama(gemma_path)
    try:
        for o in (option(table, "q8_0"), option(table, "f16", swa_full=True)):
            s = KvSettings(
                n_ctx=o.max_context,
                type_k=o.type_k,
                type_v=o.type_v,
                flash_attn="on",
                swa_full=o.swa_full,
                n_seq=4,
                kv_unified=True,
            )
            real = model.allocation(s)
            at_max = fit_table(info, 9 * MiB, target_ctx=o.max_context)
            need = option(at_max, o.type_k, swa_full=o.swa_full).need_bytes
            assert need == info.size_bytes + table.output_bytes + real.context_bytes
    finally:
        model.free()


def test_recurrent_models_fit_any_context_their_state_fits(tmp_path):
    info = read_model_info(write_tiny("mamba", tmp_path))
    table = fit_table(info, 4 * MiB)
    f16 = option(table, "f16")
    assert f16.bytes_per_token == 0 and f16.fixed_bytes == 4 * 19456  # 4 slots' states
    assert f16.fits and f16.max_context == 4096


@pytest.mark.model
def test_a_measured_line_replaces_the_theory_of_its_own_settings(smol):
    line = MeasuredLine(
        bytes_per_token=30_000,
        intercept_bytes=120 * MiB,
        type_k="q8_0",
        type_v="q8_0",
        flash_attn=True,
        source="allocated",
    )
    table = fit_table(smol, 400 * MiB, measured=[line])
    q8, f16 = option(table, "q8_0"), option(table, "f16")
    logits_row = 49152 * 4
    # the line held one sequence's logits; llama-server's 4 default slots hold 3 more
    assert q8.basis == "measured" and q8.need_bytes == round(120 * MiB + 3 * logits_row + 30_000 * 8192)
    assert q8.max_context == 8192
    q8_theory = 30 * 3 * 64 * 2 * 34 / 32
    assert f16.basis == "theory + measured" and f16.bytes_per_token == 30 * 3 * 64 * 2 * 2 + 30_000 - q8_theory
    assert "beyond the KV, measured (allocated)" in f16.basis_text


@pytest.mark.model
def test_theory_rows_stand_on_the_measured_base_and_growth_beyond_the_kv(smol):
    f16_theory = 30 * 3 * 64 * 2 * 2
    line = MeasuredLine(
        bytes_per_token=f16_theory + 4000, intercept_bytes=150 * MiB, type_k="f16", type_v="f16", flash_attn=True
    )
    table = fit_table(smol, 2**30, n_seq=1, measured=[line], target_ctx=4096)
    base = 150 * MiB - 49152 * 4  # the intercept less its one sequence's logits (SmolLM2 has no fixed KV)
    assert table.base_bytes == base and table.beyond_kv_bytes_per_token == 4000
    f16, q8 = option(table, "f16"), option(table, "q8_0")
    assert f16.need_bytes == round(150 * MiB + (f16_theory + 4000) * 4096)
    q8_kv = kv_breakdown(smol, KvSettings(n_ctx=4096, type_k="q8_0", type_v="q8_0", flash_attn="on")).total_bytes
    assert q8.need_bytes == base + table.output_bytes + q8_kv + 4000 * 4096


def test_a_sliding_window_line_gives_its_base_without_the_window_cache(gemma_path):
    info = read_model_info(gemma_path)
    settings = KvSettings(n_ctx=4096, flash_attn="on", n_seq=1)
    window = kv_breakdown(info, settings).fixed_bytes
    assert window > 0
    line = MeasuredLine(
        bytes_per_token=300,
        intercept_bytes=40 * MiB + window,
        type_k="f16",
        type_v="f16",
        flash_attn=True,
        swa_full=False,
    )
    table = fit_table(info, 2**30, n_seq=1, measured=[line], target_ctx=4096)
    base = 40 * MiB - info.n_vocab * 4
    assert table.base_bytes == base
    full = option(table, "f16", swa_full=True)  # the same cache type, every layer at full size: theory
    full_kv = kv_breakdown(info, KvSettings(n_ctx=4096, flash_attn="on", swa_full=True)).total_bytes
    beyond = 300 - kv_breakdown(info, settings).bytes_per_token  # the line's growth beyond its global layers
    assert table.beyond_kv_bytes_per_token == beyond
    assert (
        full.basis == "theory + measured"
        and full.need_bytes == round(base + beyond * 4096) + table.output_bytes + full_kv
    )
    assert option(table, "f16").need_bytes == round(40 * MiB + window + 300 * 4096)


@pytest.mark.model
def test_a_gpu_too_small_for_the_whole_model_gets_partial_offload_rows(smol):
    table = fit_table(smol, 90 * MiB, tier="GPU0 dedicated VRAM", gpu=True, target_ctx=4096)
    assert not any(o.fits for o in table.options if o.n_gpu_layers is None)
    partial = [o for o in table.options if o.n_gpu_layers is not None]
    assert partial and all(o.fits and o.need_bytes <= table.usable_bytes for o in partial)
    assert all(f"-ngl {o.n_gpu_layers}" in o.command for o in partial)
    q4 = next(o for o in partial if o.type_k == "q4_0")
    assert q4.n_gpu_layers > next(o for o in partial if o.type_k == "f16").n_gpu_layers


@pytest.mark.model
def test_explicit_slots_appear_in_the_command(smol):
    table = fit_table(smol, 2**30, n_seq=1)
    assert option(table, "f16").command.endswith("-fa on -np 1")
    assert "-np 2 -kvu" in option(fit_table(smol, 2**30, n_seq=2, kv_unified=True), "f16").command


def test_the_advisor_needs_neither_llama_cpp_nor_textual():
    import subprocess
    import sys

    code = (
        "import sys, cliff_tui.analysis.fit; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('llama_cpp', 'textual')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.model
def test_a_reserve_above_the_capacity_leaves_nothing_usable_not_a_negative_size(smol):
    table = fit_table(smol, 2**30, reserve_bytes=3 * 2**30, target_ctx=4096)
    assert table.usable_bytes == 0
    assert not any(o.fits for o in table.options)
