"""vLLM's paged KV cache from a config: bytes per token, blocks and the tokens vLLM reports (the
recorded CPU vLLM's figures), the largest max-model-len and max-num-seqs before preemption is
possible, fp8, a sliding-window model's groups, and the KV space from each of its sources."""

from __future__ import annotations

import json
import math
import re

import pytest

from cliff_tui.analysis.vllm_fit import (
    AttentionShape,
    blocks_per_request,
    given_space,
    kv_groups,
    overridden,
    paging,
    plan,
    utilization_space,
    vllm_size,
)
from cliff_tui.errors import BadInput
from cliff_tui.models.hf_config import parse_config
from paths import DATA

GiB = 1024**3
F, S = "full_attention", "sliding_attention"
SMOLLM2 = json.loads((DATA / "endpoints" / "vllm" / "smollm2_config.json").read_text())  # its config.json, as converted
# Gemma 3 270M's attention (18 layers, a full one after each five sliding ones, window 512) with its
# 256-wide heads
GEMMA3 = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "hidden_size": 640,
    "sliding_window": 512,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}


def shape(config: dict) -> AttentionShape:
    return parse_config(json.dumps(config).encode(), "config.json", "m", None, "").shape()


def cpu_plan(space_gib: int, **kw) -> object:
    return plan(shape(SMOLLM2), given_space(None, space_gib), "cpu", **kw)


def test_smollm2_holds_23040_bytes_per_token():
    page = paging(shape(SMOLLM2), given_space(None, 1), "auto", 128)
    assert page.bytes_per_token == 23_040 == 30 * 3 * 64 * 2 * 2
    assert page.page_bytes == 23_040 // 30 * 128 and page.block_bytes == 23_040 * 128


@pytest.mark.parametrize(("space_gib", "blocks"), [(1, 364), (2, 728)])
def test_the_cpu_kv_space_gives_vllms_blocks_and_tokens(space_gib, blocks):
    fit = cpu_plan(space_gib, max_model_len=1024, max_num_seqs=8).fits[0]
    assert fit.paging.num_blocks == blocks and fit.paging.block_size == 128
    assert fit.kv_cache_size_tokens == blocks * 128  # 46,592 and 93,184
    assert fit.max_concurrency == blocks / 8


def test_the_recorded_vllm_says_the_same():
    """startup_kv_space2.txt: 93,184 tokens, 91.00x for 1,024-token requests; metrics_idle.txt (the
    override of 10 blocks over 1 GiB): 1,280 tokens, 1.25x."""
    logged = re.search(
        r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
        (DATA / "endpoints" / "vllm" / "startup_kv_space2.txt").read_text(),
    )
    assert logged
    fit = cpu_plan(2, max_model_len=1024).fits[0]
    assert f"{fit.kv_cache_size_tokens:,}" == logged[1] and f"{fit.max_concurrency:.2f}" == logged[3]
    metrics = (DATA / "endpoints" / "vllm" / "metrics_idle.txt").read_text()
    labels = dict(re.findall(r'(\w+)="([^"]*)"', re.search(r"^vllm:cache_config_info\{(.*)\}", metrics, re.M)[1]))
    space = overridden(given_space(int(labels["kv_cache_memory_bytes"]), None), int(labels["num_gpu_blocks"]))
    fit = plan(shape(SMOLLM2), space, "cpu", max_model_len=1024, max_num_seqs=8).fits[0]
    assert str(fit.kv_cache_size_tokens) == labels["kv_cache_size_tokens"] == "1280"
    assert str(fit.max_concurrency) == labels["kv_cache_max_concurrency"] == "1.25"
    assert fit.starts and fit.seqs_at_len == 1 and not fit.no_preemption  # 9 usable blocks, 8 per request


def test_kv_cache_memory_bytes_is_the_same_space():
    direct = plan(shape(SMOLLM2), given_space(GiB, None), "cpu").fits[0]
    assert direct.paging.num_blocks == 364 and direct.command.endswith("--kv-cache-memory-bytes 1G")
    assert given_space(GiB, 2).bytes == 2 * GiB  # VLLM_CPU_KVCACHE_SPACE wins on the CPU backend


def test_fp8_halves_the_bytes_per_token():
    auto, fp8 = cpu_plan(1, max_model_len=1024).fits
    assert fp8.paging.bytes_per_token * 2 == auto.paging.bytes_per_token == 23_040
    assert fp8.paging.num_blocks == 728 and "--kv-cache-dtype fp8" in fp8.command


def test_the_largest_length_and_count_before_preemption():
    fit = cpu_plan(1, max_model_len=8192, max_num_seqs=128).fits[0]
    usable = 363  # 364 less the null block
    assert fit.blocks_per_request == 64 and fit.seqs_at_len == usable // 64 == 5
    assert fit.len_at_seqs == usable // 128 * 128 == 256 and not fit.no_preemption
    assert fit.command == "VLLM_CPU_KVCACHE_SPACE=1 vllm serve MODEL --max-model-len 8192 --max-num-seqs 5"
    assert fit.kv_cache_size_tokens == 46_592

    kept = cpu_plan(1, max_num_seqs=4).fits[0]  # only the count given: keep it, shorten the requests
    assert kept.kept == "max-num-seqs" and kept.len_at_seqs == 8192 and kept.no_preemption
    assert kept.command.endswith("--max-model-len 8192 --max-num-seqs 4")
    many = cpu_plan(1, max_num_seqs=100).fits[0]
    assert many.len_at_seqs == 3 * 128 and "--max-model-len 384 --max-num-seqs 100" in many.command


def test_a_length_not_a_multiple_of_the_block_is_reported_as_vllm_does():
    fit = cpu_plan(1, max_model_len=1000).fits[0]
    assert fit.blocks_per_request == 8 and fit.kv_cache_size_tokens == int(364 / 8 * 1000) == 45_500


def test_a_request_that_does_not_fit_once_means_vllm_refuses_to_start():
    fit = plan(shape(SMOLLM2), overridden(given_space(GiB, None), 64), "cpu", max_model_len=8192).fits[0]
    assert fit.blocks_per_request == 64 and not fit.starts and fit.seqs_at_len == 0
    assert fit.kept == "max-num-seqs" and fit.len_at_seqs == 0 and fit.command == ""
    one = plan(shape(SMOLLM2), overridden(given_space(GiB, None), 65), "cpu", max_model_len=8192).fits[0]
    assert one.starts and one.seqs_at_len == 1


def test_a_sliding_window_model_holds_its_window_on_sliding_layers():
    gemma = shape(GEMMA3)
    assert gemma.layers == (S, S, S, S, S, F) * 3 and gemma.sliding_window == 512
    assert kv_groups(gemma.layers) == (3, (S, S, S, S, S, F))  # 6 groups of 3 layers
    page = paging(gemma, given_space(None, 1), "auto", 128)
    per_layer = 2 * 1 * 256 * 2
    assert page.bytes_per_token == 18 * per_layer and page.block_bytes == 3 * per_layer * 128
    assert page.num_blocks == GiB // (3 * per_layer * 128) == 2730
    # a full group takes every token's block; a sliding one its window + the in-flight tokens + one block
    sliding = math.ceil((512 - 1 + 2048) / 128) + 1
    assert blocks_per_request(page, 512, 32768, 2048) == 256 + 5 * sliding == 361
    fit = plan(gemma, given_space(None, 1), "cpu", max_model_len=32768, max_num_seqs=2).fits[0]
    assert fit.blocks_per_request == 361 and fit.kv_cache_size_tokens == int(2730 / 361 * 32768)
    assert fit.seqs_at_len == 2729 // 361 == 7 and fit.no_preemption
    every_token = paging(shape({**GEMMA3, "sliding_window": None}), given_space(None, 1), "auto", 128)
    assert every_token.groups == (F,) and every_token.num_blocks == GiB // (18 * per_layer * 128)
    assert fit.kv_cache_size_tokens > every_token.num_blocks * 128 * 3  # the window saves most of the cache


def test_a_short_request_holds_no_more_than_its_length_on_sliding_layers():
    page = paging(shape(GEMMA3), given_space(None, 1), "auto", 128)
    assert blocks_per_request(page, 512, 256, 2048) == 2 + 5 * (2 + 1)


def test_hybrid_groups_follow_vllms_ratio_rule():
    assert kv_groups((F,) * 12) == (12, (F,))
    assert kv_groups((S,) * 4) == (4, (S,))
    assert kv_groups((S, F) * 6) == (6, (S, F))
    assert kv_groups((S,) * 13 + (F,) * 12) == (13, (S, F))  # 13 < 12 × 1.5: the larger count, padded
    assert kv_groups((S,) * 20 + (F,) * 10) == (10, (S, S, F))


def test_a_gpu_space_from_the_utilization_is_an_estimate():
    space = utilization_space(0.9, 80 * GiB, "GPU0", 16 * GiB, 2 * GiB)
    assert space.bytes == math.ceil(80 * GiB * 0.9) - 18 * GiB and space.estimated
    result = plan(shape(SMOLLM2), space, "gpu", device_bytes=80 * GiB)
    fit = result.fits[0]
    assert fit.paging.block_size == 16 and result.max_num_seqs == 1024  # vLLM's defaults for an 80 GiB GPU
    assert "--gpu-memory-utilization 0.9" in fit.command and any("estimate" in n for n in result.notes)
    assert plan(shape(SMOLLM2), space, "gpu", device_bytes=24 * GiB).max_num_seqs == 256


def test_a_space_that_cannot_be_known_is_one_line():
    with pytest.raises(BadInput, match="weights' size is unknown") as caught:
        utilization_space(0.92, 8 * GiB, "GPU0", None, 2 * GiB)
    assert "\n" not in str(caught.value)
    with pytest.raises(BadInput, match="no room for a KV cache"):
        utilization_space(0.5, 8 * GiB, "GPU0", 6 * GiB, 2 * GiB)


def test_sizes_in_vllms_spelling():
    assert [vllm_size(n) for n in (GiB, 3 * 1024**2, 1536, 1000)] == ["1G", "3M", "1536", "1000"]
    assert vllm_size(2 * 1024**4) == "2T" and vllm_size(512) == "512"


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"model_type": "x"}, "has no num_hidden_layers"),
        ({**SMOLLM2, "num_key_value_heads": "three"}, "not a positive whole number"),
        ({**SMOLLM2, "layer_types": ["full_attention"] * 3}, "one type for each of its 30 layers"),
        (
            {**SMOLLM2, "num_hidden_layers": 2, "layer_types": [F, "linear_attention"]},
            "linear_attention is not modelled",
        ),
    ],
)
def test_bad_configs_are_one_line(config, words):
    with pytest.raises(BadInput, match=words) as caught:
        shape(config)
    assert "\n" not in str(caught.value)
