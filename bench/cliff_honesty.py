"""Is the cliff verdict honest? False alarms on quiet and loaded runs, the knee depth on a real
cliff, and what the depth probes cost.

    python bench/cliff_honesty.py [--quiet 5] [--hog 3] [--depth 4k] [--no-cgroup]

- quiet: `cliff-tui run --headless` on the default model with nothing else running;
- hog: the same beside a busy loop pinned to core 0;
- cgroup (as root): the same inside a memory cgroup below the KV cache with a swap file
  (tests/support/cgroup_cliff.py makes and removes them), where decode really falls off a cliff.

A false alarm is a red verdict or alert on a run with no memory sign, or an amber one that names no
measured cause; an amber that names the load the sampler measured (the hog's, or a busy machine's)
is the right answer, not one. The knee error compares the
depth the verdict names (from the worker's own page faults per decoded token) with the depth where
the cgroup's fault counter, sampled every 50 ms, first shows a decode window reading pages back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

from benchutil import machine_line

from cliff_tui.recording.export import replay_all
from cliff_tui.recording.reader import open_recording
from cliff_tui.units import MiB, parse_tokens


def run(depth: int, record: Path, popen=subprocess.Popen, extra: tuple[str, ...] = ()) -> dict:
    argv = [
        sys.executable,
        "-m",
        "cliff_tui",
        "run",
        "--headless",
        "--depth",
        str(depth),
        "--n-gen",
        "32",
        "-o",
        "json",
        "--record",
        str(record),
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tui"))
    proc = popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    out, err = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"run failed: {err[-1000:]}")
    return json.loads(out)


def live_alarms(record: Path) -> list[str]:
    return [f"{a.level}: {a.message}" for a in replay_all(open_recording(record)).alerts if a.level in ("amber", "red")]


def probe_cost(result: dict) -> float:
    """Seconds spent decoding probe tokens during the prefill, as a share of the run."""
    probes = [p for p in result["decode_points"] if p["phase"] == "probe"]
    return sum(p["ms_per_token"] * p["n_tokens"] for p in probes) / 1000 / result["elapsed_s"]


MEASURED_CAUSES = ("other processes used", "throttling")


def false_alarm(result: dict, alarms: list[str]) -> bool:
    """A cliff claimed with no memory sign (red), or an amber that names no measured cause, final or live."""

    def unexplained(level: str, text: str) -> bool:
        return level == "red" or (level == "amber" and not any(c in text for c in MEASURED_CAUSES))

    cliff = result["cliff"]
    return unexplained(cliff["level"], cliff["text"]) or any(unexplained(a.split(":", 1)[0], a) for a in alarms)


def kind(label: str, n: int, depth: int, tmp: Path, hog: bool = False) -> list[dict]:
    rows = []
    for i in range(n):
        hogger = (
            subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"])
            if hog
            else None
        )
        try:
            record = tmp / f"{label}-{i}.jsonl"
            result = run(depth, record)
        finally:
            if hogger is not None:
                hogger.kill()
                hogger.wait()
        alarms = live_alarms(record)
        rows.append(
            {
                "kind": label,
                "cliff": result["cliff"]["level"],
                "text": result["cliff"]["text"],
                "alarms": alarms,
                "false_alarm": false_alarm(result, alarms),
                "probe_cost": probe_cost(result),
                "depth_tok_s": result["depth_tok_s"],
            }
        )
        print(
            f"{label} {i + 1}/{n}: {rows[-1]['cliff']} — {rows[-1]['text'][:110]} · live alarms {len(alarms)} · "
            f"probes {100 * rows[-1]['probe_cost']:.1f} % of the run",
            flush=True,
        )
    return rows


def cgroup_cliff(tmp: Path) -> dict | None:
    from cgroup_cliff import Monitor, Unavailable, cache_outside, paging_onset, require_root, sandbox
    from cliff_tui.engine.default_model import default_model_path
    from cliff_tui.events import DecodeWindow

    limit, depth = 64 * MiB, 3072
    record = tmp / "cgroup.jsonl"
    try:
        require_root()
        cache_outside(default_model_path())
        with sandbox(limit, swap_bytes=1024 * MiB) as box, Monitor(box.cgroup, interval_s=0.05) as monitor:
            result = run(depth, record, popen=box.popen, extra=("-t", "1"))
    except Unavailable as exc:
        print(f"cgroup cliff skipped: {exc}")
        return None
    windows = [e for e in open_recording(record).events if isinstance(e, DecodeWindow)]
    onset = paging_onset(monitor.samples, windows)
    named = result["cliff"]["depth"]
    error = abs(named - onset) / onset if named is not None and onset else None
    print(
        f"cgroup cliff: {result['cliff']['level']} on {result['cliff']['tier']} at depth {named}; by the cgroup's "
        f"own fault counter decode began reading pages back at depth {onset} → error "
        f"{'–' if error is None else f'{100 * error:.0f} %'}"
    )
    return {
        "level": result["cliff"]["level"],
        "tier": result["cliff"]["tier"],
        "depth": named,
        "onset": onset,
        "error": error,
        "text": result["cliff"]["text"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", type=int, default=5)
    ap.add_argument("--hog", type=int, default=3)
    ap.add_argument("--depth", type=parse_tokens, default=4096)
    ap.add_argument("--no-cgroup", action="store_true")
    args = ap.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        rows = kind("quiet", args.quiet, args.depth, Path(tmp)) + kind("hog", args.hog, args.depth, Path(tmp), hog=True)
        cliff = None if args.no_cgroup else cgroup_cliff(Path(tmp))
    false = sum(r["false_alarm"] for r in rows)
    print(f"\nfalse alarms: {false} of {len(rows)} runs (goal 0), live and final")
    print(f"probe cost: median {100 * statistics.median(r['probe_cost'] for r in rows):.1f} % of a run (goal ≤ 5 %)")
    if cliff is not None:
        ok = cliff["level"] == "red" and cliff["error"] is not None and cliff["error"] <= 0.2
        error = "–" if cliff["error"] is None else f"{100 * cliff['error']:.0f} %"
        print(
            f"cliff: {cliff['level']} on {cliff['tier']}, knee error {error} (goal ≤ 20 %): "
            f"{'met' if ok else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
