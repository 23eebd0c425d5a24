"""A downloaded GGUF's words and llama.cpp's log lines come out inert and bounded."""

from __future__ import annotations

import math
import struct
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings

from cliff_tui.engine.gguf_meta import model_info_from_metadata, read_model_info
from cliff_tui.engine.llama_log import LEVEL_INFO, MAX_PARTIAL, LlamaLog, parse_buffer_line
from cliff_tui.errors import BadInput
from cliff_tui.text import LINE_LIMIT, LOG_LIMIT, inert
from hostile import EVIL, HOSTILE, hostile_text
from tiny_model import write_tiny_llama

SMALL = {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_head_kv": 1, "n_ff": 32}


def runnable(text: str) -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def test_the_measured_name_is_shown_with_its_escapes_visible(tmp_path):
    name = "[blink]GGUF-MARKUP[/blink]\x1b]0;GGUF-TITLE\x07"
    info = read_model_info(write_tiny_llama(tmp_path / "m.gguf", name=name, **SMALL))
    assert info.name == "[blink]GGUF-MARKUP[/blink]␛]0;GGUF-TITLE␇"


def test_a_megabyte_name_is_cut_with_a_note(tmp_path):
    info = read_model_info(write_tiny_llama(tmp_path / "m.gguf", name="n" * 1_048_576, **SMALL))
    assert len(info.name) == LINE_LIMIT and info.name.endswith("… [cut from 1,048,576 chars]")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile_text())
def test_every_string_of_the_header_comes_out_inert(tmp_path, text):
    meta = {"general.architecture": f"llama{text}", "general.name": text or "x", "general.file_type": text}
    info = model_info_from_metadata("/m.gguf", 1, meta)
    for value in (info.name, info.architecture, info.file_type):
        assert not runnable(value)
    assert info.name == inert(text or "x")


def test_bytes_that_are_not_utf8_are_replaced_not_passed_on(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", name="AAAA-name", **SMALL)
    data = path.read_bytes().replace(b"AAAA-name", b"\xff\xc2\x9b2J-nam")  # same length: not UTF-8, a C1 CSI
    path.write_bytes(data)
    name = read_model_info(path).name
    assert name == "\ufffd<U+009B>2J-nam"


def test_a_string_longer_than_the_file_is_a_truncated_gguf_not_a_memory_error(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", name="AAAA-name", **SMALL)
    data = path.read_bytes()
    at = data.index(b"AAAA-name") - 8  # the name's 64-bit length
    path.write_bytes(data[:at] + (2**62).to_bytes(8, "little") + data[at + 8 :])
    with pytest.raises(BadInput, match="truncated"):
        read_model_info(path)


def test_log_lines_are_inert_and_bounded():
    log = LlamaLog()
    seen = []
    log.listen(seen.append)
    for text in HOSTILE:
        log.feed(LEVEL_INFO, f"llama_model_loader: general.name str = {text}\n")
    log.feed(LEVEL_INFO, "x" * (MAX_PARTIAL + 10))  # a line that never ends
    log.feed(LEVEL_INFO, "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB\n")
    assert all(not runnable(line.text) and len(line.text) <= LOG_LIMIT for line in seen)
    assert any(inert(EVIL) in line.text for line in seen)
    assert len(seen[-2].text) == LOG_LIMIT and "cut from" in seen[-2].text
    assert parse_buffer_line(seen[-1].text) is not None  # the buffer sizes still parse


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _raw_gguf(path, kv: list[tuple[str, int, bytes]], tensors: list[str]):
    """A GGUF v3 header written byte by byte, for values no writer would produce."""
    kv = [("general.architecture", 8, _string("llama")), *kv]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, vtype, payload in kv:
        out += _string(key) + struct.pack("<I", vtype) + payload
    for i, name in enumerate(tensors):  # one dimension of 8 f32 values each
        out += _string(name) + struct.pack("<IQIQ", 1, 8, 0, 32 * i)
    out += b"\0" * (-len(out) % 32) + b"\0" * (32 * len(tensors))
    path.write_bytes(out)
    return path


BLOCKS = [f"blk.{i}.attn_q.weight" for i in range(2)]
NESTED = (struct.pack("<IQ", 9, 1) * 5000) + struct.pack("<IQ", 4, 0)


@pytest.mark.parametrize(
    "kv, tensors, outcome",
    [
        ([("general.alignment", 8, _string("x"))], BLOCKS, "read"),
        ([("general.alignment", 6, struct.pack("<f", math.inf))], BLOCKS, "read"),
        ([("general.alignment", 4, struct.pack("<I", 3))], BLOCKS, "impossible GGUF alignment 3"),
        ([("llama.block_count", 6, struct.pack("<f", math.inf))], BLOCKS, "read"),
        ([("llama.attention.head_count_kv", 9, struct.pack("<IQff", 6, 2, math.nan, 1.0))], BLOCKS, "read"),
        ([("llama.block_count", 4, struct.pack("<I", 4_000_000_000))], BLOCKS, "claims 4,000,000,000 layers"),
        (
            [("llama.block_count", 4, struct.pack("<I", 126)), ("split.tensors.count", 4, struct.pack("<I", 1138))],
            BLOCKS,
            "read",
        ),  # the first file of a split model holds a few of its tensors
        ([], ["blk.99999999999.attn_q.weight"], "read"),
        ([("x", 9, NESTED)], BLOCKS, "nested too deep"),
        ([("x", 9, struct.pack("<IQQ", 8, 1, 2**64 - 1))], BLOCKS, "truncated GGUF"),
    ],
)
def test_a_header_with_impossible_values_reads_or_is_one_clear_error(tmp_path, kv, tensors, outcome):
    path = _raw_gguf(tmp_path / "odd.gguf", kv, tensors)
    if outcome == "read":
        info = read_model_info(path)
        assert info.architecture == "llama" and info.n_head_kv_layers is None
        assert info.block_weight_bytes == ((32, 32) if tensors == BLOCKS else None)
    else:
        with pytest.raises(BadInput, match=outcome):
            read_model_info(path)
