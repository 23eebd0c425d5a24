"""``cliff-tui fit --vllm`` against a real vLLM (the CPU build, no block override): serving SmolLM2 at
VLLM_CPU_KVCACHE_SPACE 1 and 2 GiB, and a tiny Gemma 3 with sliding-window layers, the KV cache vLLM
logs at start-up ("CPU KV cache size: N tokens", its maximum concurrency) and exports
(``vllm:cache_config_info``'s ``kv_cache_size_tokens`` and ``num_gpu_blocks``) is what fit says, to
the token."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

from paths import ROOT
from vllm_server import started_vllm, vllm_paths

pytestmark = [pytest.mark.model, pytest.mark.slow]

MAX_MODEL_LEN = 1024  # started_vllm's
MAX_SEQS = 8
_LOGGED = re.compile(
    r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"
)
_LABEL = re.compile(r"^vllm:cache_config_info\{(.*)\}", re.MULTILINE)


@pytest.mark.parametrize("space_gib", [1, 2])
def test_fit_says_the_kv_cache_vllm_builds(tmp_path, space_gib):
    _, model = vllm_paths()
    env = {"VLLM_CPU_KVCACHE_SPACE": str(space_gib)}
    with started_vllm(tmp_path, blocks=None, max_model_len=MAX_MODEL_LEN, max_seqs=MAX_SEQS, env=env) as server:
        tokens, concurrency, labels = _served_kv(server, MAX_MODEL_LEN)

    record = _fit("-m", str(model), "--vllm", "--cpu-kv-space", str(space_gib), "--json")
    auto = record["fits"][0]
    assert auto["paging"]["kv_cache_dtype"] == "auto" and auto["paging"]["block_size"] == int(labels["block_size"])
    assert auto["paging"]["num_blocks"] == int(labels["num_gpu_blocks"]) == space_gib * 364
    assert auto["kv_cache_size_tokens"] == tokens == space_gib * 46_592

    same = _fit(
        "-m", str(model), "--vllm", "--cpu-kv-space", str(space_gib),
        "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_SEQS), "--json",
    )["fits"][0]  # fmt: skip
    assert same["kv_cache_size_tokens"] == tokens and f"{same['max_concurrency']:.2f}" == concurrency
    assert same["no_preemption"] and same["seqs_at_len"] == (space_gib * 364 - 1) // 8


def test_fit_says_the_kv_cache_of_a_sliding_window_model(tmp_path, monkeypatch):
    """A tiny random Gemma 3 (10 sliding-window layers of 256 tokens, 2 full): 6 KV cache groups of
    2 layers, the sliding ones holding their window, as vLLM lays them out."""
    python, smollm2 = vllm_paths()
    folder = tmp_path / "tiny-gemma3"
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([python, "-c", TINY_GEMMA3, str(folder), str(smollm2)], check=True, timeout=300, env=offline)
    monkeypatch.setenv("VLLM_MODEL", str(folder))
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    with started_vllm(tmp_path, blocks=None, max_model_len=4096, max_seqs=MAX_SEQS, env=env) as server:
        tokens, concurrency, labels = _served_kv(server, 4096)

    record = _fit("-m", str(folder), "--cpu-kv-space", "1", "--max-model-len", "4096", "--max-num-seqs", "8", "--json")
    auto = record["fits"][0]
    assert auto["paging"]["groups"] == ["sliding_attention"] * 5 + ["full_attention"]
    assert auto["paging"]["num_blocks"] == int(labels["num_gpu_blocks"])
    assert auto["kv_cache_size_tokens"] == tokens and f"{auto['max_concurrency']:.2f}" == concurrency
    assert tokens > auto["paging"]["num_blocks"] * 128 // 6  # more than if every layer kept every token


TINY_GEMMA3 = """
import shutil, sys
from pathlib import Path
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig
out, tokenizer = Path(sys.argv[1]), Path(sys.argv[2])
config = Gemma3TextConfig(
    vocab_size=49152, hidden_size=128, intermediate_size=256, num_hidden_layers=12, num_attention_heads=2,
    num_key_value_heads=1, head_dim=64, sliding_window=256, max_position_embeddings=4096,
    bos_token_id=1, eos_token_id=2, pad_token_id=2,
)
torch.manual_seed(0)
Gemma3ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(tokenizer / name, out / name)
"""


def _served_kv(server, max_model_len: int) -> tuple[int, str, dict[str, str]]:
    """What the running vLLM says of its KV cache: the tokens and concurrency it logged at start-up
    (checked against /metrics), and cache_config_info's labels."""
    metrics = _get(server.url + "/metrics")
    log = server.log.read_text(errors="replace")
    logged = _LOGGED.search(log)
    assert logged, log[-2000:]
    tokens, length = int(logged[1].replace(",", "")), int(logged[2].replace(",", ""))
    labels = dict(re.findall(r'(\w+)="([^"]*)"', _LABEL.search(metrics)[1]))
    assert length == max_model_len and labels["kv_cache_size_tokens"] == str(tokens)
    return tokens, logged[3], labels


def _fit(*argv: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tui")}
    done = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", *argv], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _get(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as reply:
        return reply.read().decode()
