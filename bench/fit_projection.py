"""What `cliff-tui fit` prints for a KV type it has no measured line for, against a real run of
that type at a deeper depth.

Per model:

1. `cliff-tui triangulate --depths D1,D2 -fa on` (f16, a real prefill): its ``-o json`` output;
2. one real run of another KV type (q8_0, flash attention on) at ``--deep``, in a fresh process:
   its n_ctx and its touched memory (RSS peak);
3. `cliff-tui fit --from` that JSON ``-c <the deep run's n_ctx> -np 1 --json``: the q8_0 row's
   ``need_bytes`` (the measured f16 line's non-KV base + the theory's q8_0 KV + what the f16 line
   grew per token beyond its own theory) — the number `fit` prints — against the deep run's
   touched bytes; beside it, what scaling the theory by the f16 line's touched/allocated ratio
   instead would have said;
4. the same with ``--capacity <the deep run's touched bytes> --reserve 0``: the largest context
   `fit` gives that row, against the deep run's n_ctx.

Goal: need within 3 % of the measured point. Models: SmolLM2-135M (the default), a tiny
random-weight Gemma 3 (sliding-window layers), and Gemma 3 270M with ``--gemma3 PATH``.

    python bench/fit_projection.py [--depths 1k,2k] [--deep 4k] [--kv q8_0] [--gemma3 PATH] [--keep DIR] [--only WORD]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchutil import ROOT, OtherLoad, command_line, machine_line

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

from cliff_tui.analysis.theory import KvSettings, kv_breakdown
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.units import fmt_bytes, parse_tokens


@dataclass(frozen=True)
class Outcome:
    model: str
    n_ctx: int
    need: int
    measured: int
    largest: int | None
    basis: str
    base: int | None
    seconds: float
    touched_kib: float  # the f16 line's slopes, KiB per token
    allocated_kib: float
    beyond: float | None  # what fit adds per token beyond the theory's KV
    ratio_need: int  # the same row with the theory scaled by touched/allocated instead

    @property
    def ratio_miss_pct(self) -> float:
        return (self.ratio_need - self.measured) / self.measured * 100

    @property
    def miss_pct(self) -> float:
        return (self.need - self.measured) / self.measured * 100


def cliff(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", *args], check=False, capture_output=True, text=True, timeout=900, cwd=ROOT
    )
    if proc.returncode != 0:
        raise SystemExit(f"cliff-tui {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def fit_row(model: Path, tri: Path, n_ctx: int, kv: str, *extra: str) -> dict:
    record = cliff("fit", "-m", str(model), "--from", str(tri), "-c", str(n_ctx), "-np", "1", "--json", *extra)
    row = next(
        o
        for o in record["options"]
        if o["type_k"] == kv and o["flash_attn"] and not o["swa_full"] and o["n_gpu_layers"] is None
    )
    return {
        **row,
        "base_bytes": record["base_bytes"],
        "beyond": record["beyond_kv_bytes_per_token"],
        "output_bytes": record["output_bytes"],
    }


def measure(name: str, model: Path, depths: str, deep: int, kv: str, folder: Path) -> Outcome:
    t0 = time.monotonic()
    tri = folder / f"{model.stem}-tri.json"
    line = cliff(
        "triangulate", "-m", str(model), "--headless", "--depths", depths, "-fa", "on", "--fill", "real", "-o", "json"
    )
    tri.write_text(json.dumps(line))
    run = cliff(
        "run",
        "-m",
        str(model),
        "--headless",
        "--depth",
        str(deep),
        "-ctk",
        kv,
        "-ctv",
        kv,
        "-fa",
        "on",
        "--fill",
        "real",
        "-o",
        "json",
    )
    (folder / f"{model.stem}-{kv}-{deep}.json").write_text(json.dumps(run))
    n_ctx, touched = run["n_ctx"], run["touched_bytes"]
    row = fit_row(model, tri, n_ctx, kv, "--capacity", "64GiB", "--reserve", "0")
    tight = fit_row(model, tri, n_ctx, kv, "--capacity", str(touched), "--reserve", "0")
    slope = line["slope_bytes_per_token"]
    return Outcome(
        name,
        n_ctx,
        row["need_bytes"],
        touched,
        tight["max_context"],
        row["basis"],
        row["base_bytes"],
        time.monotonic() - t0,
        slope["touched"] / 1024,
        slope["allocated"] / 1024,
        row["beyond"],
        _ratio_need(model, row, kv, n_ctx, slope["touched"] / slope["allocated"]),
    )


def _ratio_need(model: Path, row: dict, kv: str, n_ctx: int, ratio: float) -> int:
    """The row's need had the theory's growing KV been scaled by the touched/allocated ratio."""
    b = kv_breakdown(read_model_info(model), KvSettings(n_ctx=n_ctx, type_k=kv, type_v=kv, flash_attn="on"))
    growing = sum(p.bytes for p in b.parts if p.kind == "per_token")
    return round(row["base_bytes"] + row["output_bytes"] + b.total_bytes - growing + growing * ratio)


def models(gemma3: str | None, folder: Path) -> list[tuple[str, Path]]:
    from cliff_tui.engine.default_model import default_model_path
    from tiny_model import write_tiny_gemma3

    out = [
        ("SmolLM2-135M Q4_1", default_model_path()),
        ("tiny gemma3 (random weights)", write_tiny_gemma3(folder / "tiny-gemma3.gguf")),
    ]
    if gemma3:
        out.append(("Gemma 3 270M Q4_K_M", Path(gemma3)))
    else:
        print("no --gemma3: Gemma 3 270M skipped", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="1k,2k")
    ap.add_argument("--deep", type=parse_tokens, default=4096)
    ap.add_argument("--kv", default="q8_0")
    ap.add_argument("--gemma3", help="path to gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--keep", metavar="DIR", help="keep the triangulations' and runs' JSON here")
    ap.add_argument("--only", metavar="WORD", help="only the models whose name holds WORD (e.g. tiny)")
    args = ap.parse_args()
    load, t0 = OtherLoad(), time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        outcomes = [
            measure(name, path, args.depths, args.deep, args.kv, folder)
            for name, path in models(args.gemma3, Path(tmp))
            if not args.only or args.only in name
        ]
    other = load.stop()
    print(f"`{command_line(__file__)}` — {machine_line()}; {other.describe()}; {time.monotonic() - t0:.0f} s in all\n")
    print(
        f"| model | f16 line: touched / allocated, KiB/token | {args.kv} row's basis | non-KV base | beyond the KV "
        "| n_ctx of the deep run | `fit` need | measured touched | miss | theory × ratio instead | largest context "
        "`fit` gives for that much | took |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for o in outcomes:
        largest = f"{o.largest:,}" if o.largest is not None else "—"
        beyond = f"{o.beyond:,.0f} B/token" if o.beyond is not None else "—"
        print(
            f"| {o.model} | {o.touched_kib:.2f} / {o.allocated_kib:.2f} | {o.basis} | "
            f"{fmt_bytes(o.base) if o.base is not None else '—'} | {beyond} | {o.n_ctx:,} | "
            f"{fmt_bytes(o.need)} ({o.need:,} B) | {fmt_bytes(o.measured)} ({o.measured:,} B) | {o.miss_pct:+.2f} % "
            f"| {o.ratio_miss_pct:+.2f} % | {largest} | {o.seconds:.0f} s |"
        )
    worst = max(abs(o.miss_pct) for o in outcomes)
    print(f"\nworst miss {worst:.2f} % (goal ≤ 3 %: {'met' if worst <= 3 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
