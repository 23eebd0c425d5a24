"""A split model (gguf-split's NAME-00001-of-0000N.gguf) is read part by part: its size and tensors
are every part's; a part given alone, a renamed first part or a missing part is one line."""

from __future__ import annotations

import dataclasses
import re

import pytest

from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.errors import BadInput
from tiny_model import write_tiny_llama


@pytest.fixture
def split(tmp_path):
    first = write_tiny_llama(tmp_path / "m.gguf", n_layer=4, split_max_tensors=10)
    return sorted(tmp_path.glob("m-*-of-*.gguf")), first


def test_a_split_model_is_every_parts_size_and_tensors(split, tmp_path):
    parts, first = split
    whole = read_model_info(write_tiny_llama(tmp_path / "whole.gguf", n_layer=4))
    info = read_model_info(first)
    assert len(parts) == 4 and info.size_bytes == sum(p.stat().st_size for p in parts)
    same = {"path", "size_bytes"}
    assert {f.name: getattr(info, f.name) for f in dataclasses.fields(info) if f.name not in same} == {
        f.name: getattr(whole, f.name) for f in dataclasses.fields(whole) if f.name not in same
    }


def test_a_later_part_given_alone_names_the_first(split):
    parts, _ = split
    with pytest.raises(BadInput, match=r"is part 2 of a 4-part model: pass its first part \(…-00001-of-00004.gguf\)"):
        read_model_info(parts[1])


def test_a_renamed_first_part_says_where_the_others_should_be(split):
    _, first = split
    renamed = first.rename(first.with_name("renamed.gguf"))
    with pytest.raises(BadInput, match=r"keep llama\.cpp's names"):
        read_model_info(renamed)


def test_a_missing_part_is_named(split):
    parts, first = split
    parts[2].unlink()
    with pytest.raises(BadInput, match=re.escape(f"model file not found: {parts[2]}")):
        read_model_info(first)


def test_a_part_of_another_release_is_refused(split, tmp_path):
    parts, first = split
    (tmp_path / "other").mkdir()
    write_tiny_llama(tmp_path / "other" / "m.gguf", n_layer=8, split_max_tensors=10)
    other_parts = sorted((tmp_path / "other").glob("m-*-of-*.gguf"))
    assert len(other_parts) != len(parts)
    parts[1].write_bytes(other_parts[1].read_bytes())
    with pytest.raises(BadInput, match="is not part 2 of 4"):
        read_model_info(first)
