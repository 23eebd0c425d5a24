"""The names -m takes: a Hub repo and its quant tag (picked as llama-server -hf picks it, llama.cpp
common/download.cpp find_best_model), and an Ollama model name."""

from __future__ import annotations

import pytest

from cliff_tui.errors import BadInput
from cliff_tui.models.hub import HubSpec, parse_hf, pick_file
from cliff_tui.models.ollama_store import parse_name

FILES = (
    "README.md",
    "mmproj-Qwen3-32B-Q4_K_M.gguf",
    "Qwen3-32B-IQ4_XS.gguf",
    "Qwen3-32B-Q4_K_M.gguf",
    "Qwen3-32B-Q8_0.gguf",
    "BF16/Qwen3-32B-BF16-00002-of-00002.gguf",
    "BF16/Qwen3-32B-BF16-00001-of-00002.gguf",
    "Qwen3-32B-Q4_K_M-imatrix.gguf",
)


@pytest.mark.parametrize(
    "spec, picked",
    [
        (HubSpec("o/r"), "Qwen3-32B-Q4_K_M.gguf"),  # no tag: Q4_K_M first, never the projector
        (HubSpec("o/r", tag="q8_0"), "Qwen3-32B-Q8_0.gguf"),  # case does not matter
        (HubSpec("o/r", tag="BF16"), "BF16/Qwen3-32B-BF16-00001-of-00002.gguf"),  # a split's first part
        (HubSpec("o/r", tag="IQ4_XS"), "Qwen3-32B-IQ4_XS.gguf"),
    ],
)
def test_a_quant_tag_picks_the_file_llama_server_picks(spec, picked):
    assert pick_file(FILES, spec) == picked


def test_without_q4_k_m_or_q8_0_the_first_model_file_is_taken():
    assert pick_file(("mmproj-x-f16.gguf", "x-Q5_K_M.gguf", "x-Q3_K_M.gguf"), HubSpec("o/r")) == "x-Q5_K_M.gguf"


def test_a_tag_no_file_has_is_one_line_listing_what_there_is():
    with pytest.raises(BadInput, match=r"hf:o/r has no Q2_K file \(its GGUF models: Qwen3-32B-IQ4_XS.gguf"):
        pick_file(FILES, HubSpec("o/r", tag="Q2_K"))


def test_a_tag_is_text_not_a_pattern():
    with pytest.raises(BadInput):
        pick_file(("x-Q4_K_M.gguf",), HubSpec("o/r", tag="Q4.K.M"))


@pytest.mark.parametrize(
    "text, spec",
    [
        ("bartowski/Qwen3-32B-GGUF", HubSpec("bartowski/Qwen3-32B-GGUF")),
        ("bartowski/Qwen3-32B-GGUF:Q4_K_M", HubSpec("bartowski/Qwen3-32B-GGUF", tag="Q4_K_M")),
        ("org/repo/BF16/x-00001-of-00002.gguf", HubSpec("org/repo", file="BF16/x-00001-of-00002.gguf")),
    ],
)
def test_hub_specs_parse(text, spec):
    assert parse_hf(text) == spec


@pytest.mark.parametrize(
    "text", ["org", "org/repo/../../x.gguf", "-org/repo", "org/re po", "org/repo:Q4 K", "o/r/a\x1b.gguf"]
)
def test_a_hub_spec_that_is_no_repo_is_refused(text):
    with pytest.raises(BadInput):
        parse_hf(text)


@pytest.mark.parametrize(
    "text, parts",
    [
        ("llama3", ("registry.ollama.ai", "library", "llama3", "latest")),
        ("llama3:8b", ("registry.ollama.ai", "library", "llama3", "8b")),
        ("user/model:q4", ("registry.ollama.ai", "user", "model", "q4")),
        ("hf.co/org/repo:Q4_K_M", ("hf.co", "org", "repo", "Q4_K_M")),
    ],
)
def test_ollama_names_map_to_their_manifest_path(text, parts):
    assert parse_name(text) == parts


@pytest.mark.parametrize("text", ["../../etc/passwd", "a/b/c/d", "llama3:../x", "..", "a//b", ""])
def test_an_ollama_name_that_would_leave_the_manifests_is_refused(text):
    with pytest.raises(BadInput):
        parse_name(text)
