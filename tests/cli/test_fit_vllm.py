"""``cliff-tui fit --vllm``'s flags and output, in process: the table and its JSON for a model folder,
the KV space from each flag, the suggestion's vLLM flags, and bad input as one line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cliff_tui.cli.fit_vllm import add_vllm_fit_flags, fit_vllm, serve_name, wants_vllm
from cliff_tui.cli.parser import build_parser
from cliff_tui.errors import BadInput
from fakes.http_server import FakeHttpServer, Route
from paths import DATA

SMOLLM2 = json.loads((DATA / "endpoints" / "vllm" / "smollm2_config.json").read_text())  # its config.json, as converted
GiB = 1024**3


@pytest.fixture
def folder(tmp_path) -> Path:
    model = tmp_path / "SmolLM2-135M"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(SMOLLM2))
    with (model / "model.safetensors").open("wb") as out:
        out.truncate(269_060_552)
    return model


def fit_parser() -> argparse.ArgumentParser:
    """``fit``'s parser with the vLLM flags, whether the command line already has them or not."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    fit = sub.choices["fit"]
    if not any("--vllm" in a.option_strings for a in fit._actions):
        add_vllm_fit_flags(fit)
    return fit


def run(capsys, *argv: str) -> str:
    args = fit_parser().parse_args(list(argv))
    assert fit_vllm(args) == 0
    return capsys.readouterr().out


def test_the_table_for_a_model_folder(capsys, folder):
    out = run(capsys, "-m", str(folder), "--vllm", "--cpu-kv-space", "1")
    assert "## What fits in vLLM: SmolLM2-135M" in out and "CPU backend, blocks of 128 tokens" in out
    assert "| auto (bfloat16) | 22.5 KiB | 2.81 MiB | 364 | 46,592 tokens | 5 | 256 | no |" in out
    assert f"Suggested: `VLLM_CPU_KVCACHE_SPACE=1 vllm serve {folder} --max-model-len 8192 --max-num-seqs 5`" in out


def test_the_json_and_the_llama_flags_it_reuses(capsys, folder):
    record = json.loads(
        run(capsys, "-m", str(folder), "--vllm", "--cpu-kv-space", "2", "-c", "4096", "-np", "16", "--json")
    )
    auto, fp8 = record["fits"]
    assert record["engine"] == "vllm" and record["backend"] == "cpu" and record["space"]["bytes"] == 2 * GiB
    assert (record["max_model_len"], record["max_num_seqs"]) == (4096, 16)
    assert auto["paging"]["num_blocks"] == 728 and auto["paging"]["usable_blocks"] == 727
    assert auto["kv_cache_size_tokens"] == 93_184 and auto["no_preemption"] and auto["seqs_at_len"] == 727 // 32
    assert fp8["paging"]["bytes_per_token"] == 11_520 and record["best_command"] == auto["command"]
    assert record["model"]["weights_bytes"] == 269_060_552


def test_kv_cache_memory_bytes_and_a_block_override(capsys, folder):
    argv = ("-m", str(folder), "--vllm", "--kv-cache-memory-bytes", "1GiB", "--max-model-len", "1024")
    record = json.loads(run(capsys, *argv, "--num-gpu-blocks-override", "10", "--kv-cache-dtype", "auto", "--json"))
    (fit,) = record["fits"]
    assert fit["kv_cache_size_tokens"] == 1280 and fit["max_concurrency"] == 1.25
    assert fit["command"].endswith("--kv-cache-memory-bytes 1G --num-gpu-blocks-override 10")


def test_a_gpu_of_a_given_size(capsys, folder):
    argv = ("-m", str(folder), "--vllm", "--vram", "24GiB", "--gpu-memory-utilization", "0.5", "--json")
    record = json.loads(run(capsys, *argv, "--activation-memory", "1GiB", "--block-size", "32"))
    space = 12 * GiB - 269_060_552 - GiB
    assert record["backend"] == "gpu" and record["space"]["bytes"] == space and record["space"]["estimated"]
    auto = record["fits"][0]
    assert auto["paging"]["block_size"] == 32 and auto["paging"]["num_blocks"] == space // (23_040 * 32)
    assert record["max_num_seqs"] == 256 and "--gpu-memory-utilization 0.5 --block-size 32" in auto["command"]


def test_serve_name():
    from cliff_tui.models.hf_config import parse_config

    config = parse_config(json.dumps(SMOLLM2).encode(), "c", "acme/tiny", None, "")
    assert serve_name("hf:acme/tiny@v2", config) == ("acme/tiny", ("--revision v2",))
    assert serve_name("/m/config.json", config) == ("/m", ())
    assert serve_name("https://h/acme/tiny/resolve/main/config.json", config) == ("acme/tiny", ())


def test_hf_spec_over_http(capsys, monkeypatch):
    with FakeHttpServer({"/acme/tiny/resolve/main/config.json": Route(body=json.dumps(SMOLLM2).encode())}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        out = run(capsys, "-m", "hf:acme/tiny", "--vllm", "--kv-cache-memory-bytes", "1g")
    assert "vllm serve acme/tiny --max-model-len 8192 --max-num-seqs" in out and "only config.json" in out


def test_wants_vllm(folder):
    parse = fit_parser().parse_args
    assert wants_vllm(parse(["-m", str(folder)])) and wants_vllm(parse(["--vllm"]))
    assert not wants_vllm(parse(["-m", "model.gguf"])) and not wants_vllm(parse([]))


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--vllm", "--cpu-kv-space", "1"), "--vllm needs -m"),
        (("--max-model-len", "16384", "--cpu-kv-space", "1"), "past the model's 8,192"),
        (("--vram", "1GiB"), "no room for a KV cache"),
    ],
)
def test_bad_input_is_one_line(folder, argv, words):
    args = fit_parser().parse_args(list(argv) if argv[0] == "--vllm" else ["-m", str(folder), *argv])
    with pytest.raises(BadInput, match=words) as caught:
        fit_vllm(args)
    assert "\n" not in str(caught.value)


def test_the_weights_unknown_with_a_utilization(monkeypatch):
    with FakeHttpServer({"/a/b/resolve/main/config.json": Route(body=json.dumps(SMOLLM2).encode())}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        args = fit_parser().parse_args(["-m", "hf:a/b", "--vllm", "--vram", "24GiB"])
        with pytest.raises(BadInput, match="pass --kv-cache-memory-bytes"):
            fit_vllm(args)


@pytest.mark.parametrize(
    "argv", [("--gpu-memory-utilization", "1.5"), ("--kv-cache-dtype", "int4"), ("--cpu-kv-space", "0.5")]
)
def test_bad_flags_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        fit_parser().parse_args(["--vllm", *argv])
    assert exited.value.code == 2 and "error:" in capsys.readouterr().err
