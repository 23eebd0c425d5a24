"""``cliff-tui fit --vllm``: for a Hugging Face model folder (or its config.json, ``hf:owner/name``,
a URL), the KV cache vLLM builds and what it holds before it preempts, with the flags that reach it.

The flags join the ``fit`` subparser (:func:`add_vllm_fit_flags`); ``-c`` stands for
``--max-model-len`` and ``-np`` for ``--max-num-seqs`` where those are not given. The analysis is
:mod:`cliff_tui.analysis.vllm_fit`; this module reads the config, picks the backend and the KV
space from the flags and the machine, and prints the table or its JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cliff_tui.analysis.vllm_fit import Backend, KvSpace, VllmFit, VllmPlan
    from cliff_tui.models.hf_config import HfConfig

MODEL_HINT = (
    "a model folder with a config.json, its config.json, hf:owner/name[@rev] or an http(s) URL to a config.json"
)


def add_vllm_fit_flags(parser: argparse.ArgumentParser) -> None:
    """vLLM's own flag names, on ``cliff-tui fit``."""
    from cliff_tui.analysis.vllm_fit import KV_CACHE_DTYPES
    from cliff_tui.cli.parser import _positive_int, _size, _tokens

    g = parser.add_argument_group("vLLM (with --vllm, or when -m names a model folder with a config.json)")
    g.add_argument(
        "--vllm",
        action="store_true",
        help=f"answer for vLLM: -m is {MODEL_HINT}; the largest --max-model-len and --max-num-seqs before "
        "vLLM preempts, and its flags",
    )
    g.add_argument(
        "--kv-cache-memory-bytes",
        type=_size,
        metavar="SIZE",
        help="vLLM's KV cache space, as its flag of that name (e.g. 4GiB; cliff-tui reads k, m, g as binary)",
    )
    g.add_argument(
        "--gpu-memory-utilization",
        type=_fraction,
        metavar="F",
        help="the share of the device vLLM may use, 0 to 1 (default 0.92): the KV space is F × "
        "device memory - weights - --activation-memory",
    )
    g.add_argument(
        "--kv-cache-dtype",
        choices=KV_CACHE_DTYPES,
        metavar="TYPE",
        help="auto (the model's dtype), fp8, fp8_e4m3, fp8_e5m2, bfloat16 or float16 (default: auto and fp8)",
    )
    g.add_argument(
        "--block-size", type=_positive_int, metavar="N", help="tokens per KV block (vLLM's default: 16, CPU 128)"
    )
    g.add_argument(
        "--max-num-seqs",
        type=_positive_int,
        metavar="N",
        help="requests running at once (default: -np, else vLLM's: 256, CPU 128)",
    )
    g.add_argument(
        "--max-model-len", type=_tokens, metavar="N", help="tokens per request (default: -c, else the model's)"
    )
    g.add_argument(
        "--cpu-kv-space",
        type=_positive_int,
        metavar="GIB",
        help="the CPU backend's KV space in whole GiB, as VLLM_CPU_KVCACHE_SPACE (it wins over "
        "--kv-cache-memory-bytes there)",
    )
    g.add_argument(
        "--num-gpu-blocks-override", type=_positive_int, metavar="N", help="this many KV blocks, whatever the space"
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=_positive_int,
        metavar="N",
        help="tokens per scheduler step (vLLM's default 2048 below 70 GiB of GPU memory): a "
        "sliding-window layer holds its window plus these",
    )
    g.add_argument(
        "--activation-memory",
        type=_size,
        metavar="SIZE",
        help="with --gpu-memory-utilization: what vLLM's profile takes besides the weights (activation "
        "peak, non-torch memory, CUDA graphs; default 2GiB, an estimate)",
    )


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a fraction above 0, at most 1 (vLLM's range), not {text!r}")
    return value


def wants_vllm(args: argparse.Namespace) -> bool:
    """``fit`` answers for vLLM: ``--vllm``, or ``-m`` names an HF config rather than a GGUF."""
    from cliff_tui.models.hf_config import is_hf_spec

    return bool(getattr(args, "vllm", False)) or is_hf_spec(getattr(args, "model", None))


def fit_vllm(args: argparse.Namespace) -> int:
    """Print the table (or ``--json``) for ``args``' model and settings."""
    from cliff_tui.analysis.vllm_fit import plan
    from cliff_tui.errors import BadInput
    from cliff_tui.models.hf_config import read_hf_config

    if not args.model:
        raise BadInput(f"--vllm needs -m: {MODEL_HINT}")
    config = read_hf_config(args.model, timeout=args.timeout, offline=args.offline)
    max_model_len = args.max_model_len or args.ctx_size
    _check_length(config, max_model_len)
    backend, device, space = _backend_and_space(args, config)
    served, flags = serve_name(args.model, config)
    result = plan(
        config.shape(),
        space,
        backend,
        kv_cache_dtypes=(args.kv_cache_dtype,) if args.kv_cache_dtype else ("auto", "fp8"),
        block_size=args.block_size,
        max_model_len=max_model_len,
        max_num_seqs=args.max_num_seqs or args.parallel,
        max_num_batched_tokens=args.max_num_batched_tokens,
        device_bytes=device if backend == "gpu" else None,
        model=served,
        model_flags=flags,
    )
    notes = _ignored(args) + _backend_notes(args, backend)
    if args.json:
        print(json.dumps(vllm_fit_record(config, result, notes), indent=2))
    else:
        print(format_vllm_fit_markdown(config, result, notes), end="")
    return 0


def serve_name(spec: str, config: HfConfig) -> tuple[str, tuple[str, ...]]:
    """What ``vllm serve`` is given for ``spec``: the folder, or the Hub repo (and its --revision)."""
    from pathlib import Path

    if spec.startswith("hf:"):
        repo, _, rev = spec[3:].partition("@")
        return repo, (f"--revision {rev}",) if rev else ()
    if spec.startswith(("http://", "https://")):
        return (config.name if "/" in config.name else "MODEL"), ()
    path = Path(spec)
    return str(path.parent if path.name == "config.json" else path), ()


def _check_length(config: HfConfig, given: int | None) -> None:
    from cliff_tui.errors import BadInput

    if given and config.derived_max_len and given > config.derived_max_len:
        raise BadInput(
            f"--max-model-len {given:,} is past the model's {config.derived_max_len:,} ({config.max_len_key}): "
            "vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; give at most that"
        )


def _backend_and_space(args: argparse.Namespace, config: HfConfig) -> tuple[Backend, int, KvSpace]:
    from cliff_tui.analysis.vllm_fit import (
        DEFAULT_ACTIVATION_BYTES,
        DEFAULT_GPU_MEMORY_UTILIZATION,
        given_space,
        overridden,
        utilization_space,
    )

    backend, device, device_text = _device(args)
    space = given_space(args.kv_cache_memory_bytes, args.cpu_kv_space if backend == "cpu" else None)
    if space is None:
        space = utilization_space(
            args.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
            device,
            device_text,
            config.weights_bytes,
            DEFAULT_ACTIVATION_BYTES if args.activation_memory is None else args.activation_memory,
        )
    if args.num_gpu_blocks_override is not None:
        space = overridden(space, args.num_gpu_blocks_override)
    return backend, device, space


def _device(args: argparse.Namespace) -> tuple[Backend, int, str]:
    """The backend vLLM runs on and that device's memory: --cpu-kv-space means the CPU backend,
    --vram a GPU of that size; else this machine's GPU0, or its RAM (--capacity: that size)."""
    if args.cpu_kv_space is not None:
        return "cpu", args.capacity or 0, "RAM"
    if args.vram is not None:
        return "gpu", args.vram, "a GPU's memory, --vram"
    from cliff_tui.probes.sampler import Sampler

    sample = Sampler().sample()
    gpu = next((g for g in sample.gpus if g.vram_total_bytes), None)
    if gpu is not None and gpu.vram_total_bytes:
        return "gpu", args.capacity or gpu.vram_total_bytes, f"GPU{gpu.index}"
    return "cpu", args.capacity or sample.ram_capacity_bytes, "this machine's RAM, the CPU backend"


def _ignored(args: argparse.Namespace) -> tuple[str, ...]:
    given = [flag for flag, value in (("--reserve", args.reserve), ("--from", args.from_file)) if value]
    return (f"{' and '.join(given)}: llama.cpp's, ignored for vLLM",) if given else ()


def _backend_notes(args: argparse.Namespace, backend: Backend) -> tuple[str, ...]:
    notes = []
    if backend == "cpu" and args.kv_cache_dtype in ("bfloat16", "float16"):
        notes.append(f"the CPU backend takes --kv-cache-dtype auto or fp8*, not {args.kv_cache_dtype}")
    return tuple(notes)


# --- output ---------------------------------------------------------------------------------------


def format_vllm_fit_markdown(config: HfConfig, result: VllmPlan, notes: tuple[str, ...] = ()) -> str:
    from cliff_tui.units import fmt_bytes

    first = result.fits[0].paging
    head = [
        f"## What fits in vLLM: {config.name}",
        "",
        f"- model: {_model_line(config)}",
        f"- weights: {fmt_bytes(config.weights_bytes)} ({config.weights_text})",
        f"- KV cache space: {fmt_bytes(result.space.bytes)}, {result.space.text}; {result.backend.upper()} backend, "
        f"blocks of {first.block_size} tokens"
        + (f", {len(first.groups)} KV cache groups of {first.group_size} layers" if len(first.groups) > 1 else ""),
        f"- target: --max-model-len {result.max_model_len:,} ({result.max_model_len_text}), "
        f"--max-num-seqs {result.max_num_seqs:,} ({result.max_num_seqs_text})",
        "",
        f"| KV dtype | KV per token | block | blocks | KV cache size (vLLM's) | requests of {result.max_model_len:,} "
        f"at once | max-model-len for {result.max_num_seqs:,} | no preemption | vLLM |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    rows = [_row(f, config) for f in result.fits]
    tail = ["", "Notes:", ""] + [f"- {n}" for n in (*result.notes, *notes)]
    best = result.fits[0]
    if best.command:
        tail += ["", f"Suggested: `{best.command}`"]
    tail += ["", f"Config: {config.source}"]
    return "\n".join(head + rows + tail) + "\n"


def _model_line(config: HfConfig) -> str:
    from collections import Counter

    kinds = Counter(config.layer_types)
    if config.sliding_window and kinds["sliding_attention"]:
        layers = (
            f"{config.num_hidden_layers} layers ({kinds['sliding_attention']} sliding-window of "
            f"{config.sliding_window:,}, {kinds['full_attention']} full)"
        )
    else:
        layers = f"{config.num_hidden_layers} layers (full attention)"
    heads = (
        "MLA latent"
        if config.mla
        else f"{config.num_key_value_heads} KV head{'s' if config.num_key_value_heads != 1 else ''}"
    )
    return f"{config.model_type}, {layers}, {heads} × {config.head_dim} head dim, {config.dtype or 'dtype unnamed'}"


def _row(f: VllmFit, config: HfConfig) -> str:
    from cliff_tui.units import fmt_bytes

    p = f.paging
    dtype = f"auto ({config.dtype or 'float32'})" if p.kv_cache_dtype == "auto" else p.kv_cache_dtype
    if not f.starts:
        verdict = "no: vLLM refuses to start (one request does not fit)"
    else:
        verdict = "yes" if f.no_preemption else "no"
    command = f"`{f.command}`" if f.command else "—"
    length = f"{f.len_at_seqs:,}" if f.len_at_seqs else "none"
    return (
        f"| {dtype} | {fmt_bytes(p.bytes_per_token)} | {fmt_bytes(p.block_bytes)} | {p.num_blocks:,} | "
        f"{f.kv_cache_size_tokens:,} tokens | {f.seqs_at_len:,} | {length} | {verdict} | {command} |"
    )


def vllm_fit_record(config: HfConfig, result: VllmPlan, notes: tuple[str, ...] = ()) -> dict[str, Any]:
    """The plan as plain JSON-able values: the config read, the space, each KV dtype's fit."""
    record: dict[str, Any] = {"engine": "vllm", "model": dataclasses.asdict(config), **dataclasses.asdict(result)}
    record["notes"] = [*result.notes, *notes]
    for fit, out in zip(result.fits, record["fits"]):
        out["paging"]["usable_blocks"] = fit.paging.usable_blocks
    record["best_command"] = result.fits[0].command or None
    return record
