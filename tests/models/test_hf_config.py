"""A Hugging Face ``config.json`` as vLLM reads its attention: from a folder (the weights' size from
its safetensors files), the file, an http(s) URL and ``hf:owner/name@rev`` served by a real HTTP
server on loopback; the layer kinds of sliding-window families; and one line for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cliff_tui.errors import BadInput
from cliff_tui.models.hf_config import MAX_CONFIG_BYTES, is_hf_spec, read_hf_config
from fakes.http_server import FakeHttpServer, Route, closed_port
from paths import DATA

SMOLLM2 = json.loads((DATA / "endpoints" / "vllm" / "smollm2_config.json").read_text())  # its config.json, as converted


def write(folder: Path, config: object, **files: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name, size in files.items():
        (folder / name.replace("__", ".")).write_bytes(b"\0" * size)
    return folder


def test_a_folder_gives_the_attention_and_the_weights_size(tmp_path):
    folder = write(tmp_path / "SmolLM2", SMOLLM2, model__safetensors=1000)
    config = read_hf_config(str(folder))
    assert (config.model_type, config.num_hidden_layers, config.num_key_value_heads, config.head_dim) == (
        "llama", 30, 3, 64,
    )  # fmt: skip
    assert config.dtype == "bfloat16" and config.sliding_window is None and config.mla is False
    assert config.layer_types == ("full_attention",) * 30
    assert config.max_position_embeddings == config.derived_max_len == 8192
    assert config.weights_bytes == 1000 and config.weights_text == "1 safetensors file"
    assert config.name == "SmolLM2" and config.source.endswith("config.json")
    assert read_hf_config(str(folder / "config.json")) == config


def test_the_weights_come_from_the_index_where_there_is_one(tmp_path):
    folder = write(tmp_path / "m", SMOLLM2, model_00001__safetensors=10, model_00002__safetensors=20)
    assert read_hf_config(str(folder)).weights_bytes == 30
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 25}}))
    config = read_hf_config(str(folder))
    assert config.weights_bytes == 25 and "total_size" in config.weights_text
    assert read_hf_config(str(write(tmp_path / "bare", SMOLLM2))).weights_bytes is None


def test_defaults_and_older_names():
    from cliff_tui.models.hf_config import parse_config

    config = {"model_type": "gpt_neox", "num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512}
    parsed = parse_config(json.dumps({**config, "torch_dtype": "float16"}).encode(), "c", "n", None, "")
    assert parsed.num_key_value_heads == 8 and parsed.head_dim == 64 and parsed.dtype == "float16"
    assert parsed.max_position_embeddings is None and parsed.derived_max_len is None


@pytest.mark.parametrize(
    ("rope", "length"),
    [
        ({"rope_type": "linear", "factor": 4.0}, 32768),
        ({"type": "dynamic", "factor": 2.0}, 16384),
        ({"rope_type": "llama3", "factor": 8.0}, 8192),  # already scaled in the config
        ({"rope_type": "yarn", "factor": 4.0}, 8192),
    ],
)
def test_the_derived_length_follows_vllms_rope_rule(rope, length):
    from cliff_tui.models.hf_config import parse_config

    config = parse_config(json.dumps({**SMOLLM2, "rope_scaling": rope}).encode(), "c", "n", None, "")
    assert config.derived_max_len == length and config.max_len_key == "max_position_embeddings"


def test_the_smallest_length_key_wins():
    from cliff_tui.models.hf_config import parse_config

    config = parse_config(json.dumps({**SMOLLM2, "seq_length": 4096}).encode(), "c", "n", None, "")
    assert (config.derived_max_len, config.max_len_key) == (4096, "seq_length")


def _kinds(extra: dict, layers: int = 12) -> tuple[str, ...]:
    from cliff_tui.models.hf_config import parse_config

    fields = {**SMOLLM2, "num_hidden_layers": layers, **extra}
    return parse_config(json.dumps(fields).encode(), "c", "n", None, "").layer_types


S, F = "sliding_attention", "full_attention"


def test_layer_kinds_of_the_sliding_window_families():
    assert _kinds({"model_type": "gemma3_text", "sliding_window": 512}) == (S, S, S, S, S, F) * 2  # default 6
    assert _kinds({"model_type": "gemma2", "sliding_window": 4096}, 4) == (S, F, S, F)
    assert _kinds({"sliding_window": 512, "sliding_window_pattern": 3}, 6) == (S, S, F, S, S, F)
    assert _kinds({"sliding_window": 512, "layer_types": [F, S, S, F]}, 4) == (F, S, S, F)
    assert _kinds({"model_type": "mistral", "sliding_window": 4096}, 3) == (S, S, S)
    assert _kinds({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}, 3) == (F, F, F)
    assert _kinds(
        {"model_type": "qwen2", "sliding_window": 8, "use_sliding_window": True, "max_window_layers": 2}, 3
    ) == (F, F, S)
    assert _kinds({"sliding_window": None, "model_type": "gemma3_text"}, 3) == (F, F, F)


def test_a_multimodal_config_is_read_through_its_text_config(tmp_path):
    gemma3 = {
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "hidden_size": 2560,
            "sliding_window": 1024,
            "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        },
    }
    config = read_hf_config(str(write(tmp_path / "gemma-3-4b", gemma3)))
    assert config.model_type == "gemma3_text" and config.dtype == "bfloat16" and config.num_key_value_heads == 4
    assert config.layer_types.count("full_attention") == 5 and config.sliding_window == 1024
    assert config.derived_max_len == 131072  # Gemma 3's length is already scaled


def test_mla_caches_one_latent_vector():
    from cliff_tui.models.hf_config import parse_config

    deepseek = {
        "model_type": "deepseek_v2",
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "hidden_size": 2048,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
    }
    config = parse_config(json.dumps(deepseek).encode(), "c", "n", None, "")
    assert config.mla and config.num_key_value_heads == 1 and config.head_dim == 576


def test_a_url_is_read_over_http(tmp_path):
    body = json.dumps(SMOLLM2).encode()
    with FakeHttpServer({"/acme/tiny/resolve/main/config.json": Route(body=body)}) as server:
        config = read_hf_config(server.url + "/acme/tiny/resolve/main/config.json", timeout=5)
    assert config.num_hidden_layers == 30 and config.name == "acme/tiny" and config.weights_bytes is None
    assert "only config.json" in config.weights_text and config.source.startswith("http://127.0.0.1:")


def test_hf_owner_name_at_a_revision_goes_to_the_hub_endpoint(monkeypatch):
    body = json.dumps(SMOLLM2).encode()
    with FakeHttpServer({"/acme/tiny/resolve/v1.0/config.json": Route(body=body)}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        config = read_hf_config("hf:acme/tiny@v1.0", timeout=5)
        assert config.name == "acme/tiny" and config.head_dim == 64
        with pytest.raises(BadInput, match="no such file"):
            read_hf_config("hf:acme/tiny", timeout=5)
    assert server.hits == ["/acme/tiny/resolve/v1.0/config.json", "/acme/tiny/resolve/main/config.json"]


def test_is_hf_spec(tmp_path):
    folder = write(tmp_path / "m", SMOLLM2)
    assert is_hf_spec(str(folder)) and is_hf_spec(str(folder / "config.json")) and is_hf_spec("hf:a/b@main")
    assert is_hf_spec("https://example.org/a/b/resolve/main/config.json")
    assert not is_hf_spec(None) and not is_hf_spec("hf:a/b:Q4_K_M") and not is_hf_spec(str(tmp_path / "x.gguf"))
    assert not is_hf_spec(str(tmp_path)) and not is_hf_spec("https://example.org/m.gguf")
    (folder / "model-Q4_K_M.gguf").write_bytes(b"GGUF")
    assert not is_hf_spec(str(folder))  # a folder of GGUFs is llama.cpp's, config.json or not


def _bad(tmp_path: Path, name: str, body: bytes | None) -> Path:
    path = tmp_path / name
    if body is not None:
        path.mkdir()
        (path / "config.json").write_bytes(body)
    return path


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (None, "model not found"),
        (b"{not json", "is not JSON"),
        (b"\xff\xfe\x00", "not text"),
        (b"[1, 2]", "not an object"),
        (json.dumps({"model_type": "bert_tokenizer"}).encode(), "has no num_hidden_layers"),
        (json.dumps({**SMOLLM2, "num_hidden_layers": -3}).encode(), "not a positive whole number"),
        (json.dumps({**SMOLLM2, "head_dim": None, "hidden_size": 100}).encode(), "not a multiple"),
        (json.dumps({**SMOLLM2, "layer_types": ["full_attention"]}).encode(), "one type for each"),
        (json.dumps({**SMOLLM2, "num_hidden_layers": 2, "layer_types": [F, "mamba"]}).encode(), "not modelled"),
    ],
)
def test_bad_local_input_is_one_line(tmp_path, body, words):
    with pytest.raises(BadInput, match=words) as caught:
        read_hf_config(str(_bad(tmp_path, "model", body)))
    assert "\n" not in str(caught.value) and "config.json" in str(caught.value)


def test_a_folder_without_a_config(tmp_path):
    with pytest.raises(BadInput, match=r"has no config\.json: give a model folder"):
        read_hf_config(str(tmp_path))


def test_bad_remote_input_is_one_line(tmp_path):
    big = b"{" + b" " * MAX_CONFIG_BYTES + b"}"
    with FakeHttpServer({"/big/config.json": Route(body=big), "/html/config.json": Route.text("<html>")}) as server:
        for url, words in (
            (server.url + "/big/config.json", "sent over 4.00 MiB"),
            (server.url + "/html/config.json", "is not JSON"),
            (server.url + "/none/config.json", "no such file"),
            (f"http://127.0.0.1:{closed_port()}/a/config.json", "127.0.0.1"),
        ):
            with pytest.raises(BadInput, match=words) as caught:
                read_hf_config(url, timeout=5)
            assert "\n" not in str(caught.value)
    with pytest.raises(BadInput, match="--offline"):
        read_hf_config("hf:acme/tiny", offline=True)
    with pytest.raises(BadInput, match="is not a Hub repo"):
        read_hf_config("hf:acme/tiny:Q4_K_M")


def test_a_gguf_or_a_large_file_is_refused_without_reading_it(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(BadInput, match="is a GGUF: vLLM serves a model folder"):
        read_hf_config(str(gguf))
    big = tmp_path / "weights.bin"
    with big.open("wb") as out:
        out.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(BadInput, match=r"not a config\.json"):
        read_hf_config(str(big))
