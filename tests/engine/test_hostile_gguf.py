"""A downloaded GGUF's words and llama.cpp's log lines come out inert and bounded."""

from __future__ import annotations

import unicodedata

from hypothesis import HealthCheck, given, settings

from cliff_tui.engine.gguf_meta import model_info_from_metadata, read_model_info
from cliff_tui.engine.llama_log import LEVEL_INFO, MAX_PARTIAL, LlamaLog, parse_buffer_line
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
    import pytest

    from cliff_tui.errors import BadInput

    path = write_tiny_llama(tmp_path / "m.gguf", name="AAAA-name", **SMALL)
    data = path.read_bytes()
    at = data.index(b"AAAA-name") - 8  # the name's 64-bit length
    path.write_bytes(data[:at] + (2**62).to_bytes(8, "little") + data[at + 8:])
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
