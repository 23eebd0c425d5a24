"""Opening a long recording: file size per hour, and the time to the first replayed frame.

Generates a 1-hour recording at 4 Hz with the real writer (``cliff_tui.recording.writer.Recorder``):
14,400 ``Sample`` events shaped like a real GPU box — --gpus GPUs (default 2) with every NVML
field filled (used/total/reserved VRAM, utilisation, temperature, SM and memory clocks, clock-event
reasons, PCIe RX/TX, per-process GPU memory; shared VRAM n/a with its reason, as on Linux), the
followed process's RSS — plus a 74-second run in the middle (the demo GPU-cliff run's events:
start, buffer log, progress, decode windows, result). Reports the file size per hour.

Then, each in a fresh interpreter (as ``cliff-tui replay FILE`` starts), alternating, --reps times:
  (a) the app: import, ``open_recording``, ``Player``, and ``CliffApp("replay", Session(recording=…))``
      under ``run_test()`` (Textual's headless driver, 120×40) until the dashboard shows the first
      sample: the time to the first frame (goal ≤ 1 s), measured by the parent from the start of the
      child process to the child's signal, with the child's own breakdown;
  (b) the floor: ``json.loads`` of every line and nothing else.
After (a)'s first frame, the `end` key is pressed and its cost reported (the store takes every
event up to the end), then `home` and (paused) `→`, whose cost is reported too (a forward seek
feeds only the events in between).
Medians of --reps (default 5). If the first frame is over 1 s, a cProfile of one more (a) run
shows where the time goes (--profile forces it).

Prints a markdown section for bench/RESULTS.md, with the exact command line.

    python bench/recording_open.py                 # the figures in bench/RESULTS.md
    python bench/recording_open.py --reps 1 --minutes 5   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import ROOT, OtherLoad, busy_label, command_line, machine_line

T_PROCESS = time.perf_counter()  # as early as this script can take it (child mode)
GiB, MiB = 1024**3, 1024**2
SIZE = (120, 40)
PYCACHE = ROOT / "bench" / "out" / "pycache"


# --- the recording ------------------------------------------------------------------------------


def make_recording(path: Path, minutes: float, hz: float, n_gpus: int, seed: int = 1) -> dict:
    from cliff_tui.events import Sample
    from cliff_tui.probes.shared_vram import NVIDIA_LINUX_REASON
    from cliff_tui.recording import demo
    from cliff_tui.recording.writer import Recorder
    from cliff_tui.records import GpuProcess, GpuReading, ProcessReading, RamReading, SwapReading

    rng = random.Random(seed)
    n = int(minutes * 60 * hz)
    t0 = 1_800_000_000.0 + 0.123456
    run_events = [e for e in demo.gpu_cliff_run() if not isinstance(e, Sample)]
    run_t0 = run_events[0].t
    run_at = t0 + n / hz / 2  # the run sits in the middle of the hour
    shift = run_at - run_t0
    run_end = run_at + (run_events[-1].t - run_t0)
    pending = sorted(run_events, key=lambda e: e.t)
    names = ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000"]
    totals = [24 * GiB, 48 * GiB]
    count = {"samples": 0, "run_events": 0}
    with Recorder.create(
        path, command=["watch", "-i", str(1 / hz), "--pid", "4242", "--record", str(path)], force=True
    ) as rec:
        for i in range(n):
            t = t0 + i / hz + rng.uniform(-0.004, 0.004)
            while pending and pending[0].t + shift <= t:
                e = pending.pop(0)
                rec.write(dataclasses.replace(e, t=e.t + shift))
                count["run_events"] += 1
            busy = run_at <= t <= run_end
            gpus = []
            for g in range(n_gpus):
                used = int(totals[g] * (0.55 if busy else 0.3) + rng.gauss(0, 40 * MiB))
                util = min(100.0, max(0.0, (96 if busy else 3) + rng.gauss(0, 2)))
                gpus.append(
                    GpuReading(
                        index=g,
                        name=names[g % 2],
                        vendor="nvidia",
                        vram_used_bytes=used,
                        vram_total_bytes=totals[g],
                        vram_reserved_bytes=int(310 * MiB + g * 128 * MiB),
                        shared_used_bytes=None,
                        shared_total_bytes=None,
                        util_pct=round(util, 1),
                        temperature_c=float(int(45 + util / 3 + rng.gauss(0, 1))),
                        sm_clock_mhz=int(2520 - rng.randrange(0, 60) if busy else 210),
                        mem_clock_mhz=10501 if busy else 405,
                        throttle_reasons=() if busy else ("gpu idle",),
                        pcie_rx_bytes_s=abs(rng.gauss(2.1e6 if busy else 1.1e4, 3e5 if busy else 2e3)),
                        pcie_tx_bytes_s=abs(rng.gauss(4.5e5 if busy else 6e3, 8e4 if busy else 1e3)),
                        processes=(
                            GpuProcess(pid=4242, used_bytes=used - 600 * MiB),
                            GpuProcess(pid=1873, used_bytes=412 * MiB),
                        ),
                        reasons={"shared_used_bytes": NVIDIA_LINUX_REASON},  # what the Linux probe records
                    )
                )
            ram_used = int(14 * GiB + (3 * GiB if busy else 0) + rng.gauss(0, 60 * MiB))
            rss = int(1.2 * GiB + (2 * GiB if busy else 0) + rng.gauss(0, 8 * MiB))
            rec.write(
                Sample(
                    t=t,
                    ram=RamReading(ram_used, 64 * GiB, 64 * GiB - ram_used - 3 * GiB),
                    swap=SwapReading(int(12 * MiB + rng.randrange(0, 4096) * 4096), 8 * GiB),
                    gpus=tuple(gpus),
                    gpus_reason=None,
                    process=ProcessReading(
                        pid=4242,
                        name="llama-server",
                        rss_bytes=rss,
                        children_rss_bytes=0,
                        n_children=0,
                        gpu_used_bytes=used - 600 * MiB,
                    ),
                )
            )
            count["samples"] += 1
        for e in pending:  # in case the run outlasts a short recording
            rec.write(dataclasses.replace(e, t=e.t + shift))
            count["run_events"] += 1
    count["seconds"] = n / hz
    return count


# --- children -----------------------------------------------------------------------------------


def child_app(path: str, ready_fd: int | None) -> dict:
    """(a): everything ``cliff-tui replay FILE`` does up to its first frame."""
    t = {"start": T_PROCESS}
    from cliff_tui.recording.player import Player  # noqa: F401 - imported as the app imports it
    from cliff_tui.recording.reader import open_recording
    from cliff_tui.session import Session
    from cliff_tui.ui.app import CliffApp

    t["imported"] = time.perf_counter()
    recording = open_recording(path, lazy=True)  # as `cliff-tui replay` opens it
    t["opened"] = time.perf_counter()
    app = CliffApp("replay", Session(recording=recording))  # builds the Player (filters the events)
    t["app_built"] = time.perf_counter()

    async def first_frame() -> None:
        async with app.run_test(size=SIZE) as pilot:
            t["mounted"] = time.perf_counter()
            while app.store.machine.latest is None:
                await pilot.pause(0.005)
            await pilot.pause()  # let the frame with the first sample be composed
            t["first_frame"] = time.perf_counter()
            if ready_fd is not None:
                os.write(ready_fd, b"ready\n")
            # after the first frame: the `end` key (seek to the end rebuilds the store from the start)
            t0 = time.perf_counter()
            await pilot.press("end")
            await pilot.pause()
            t["seek_end"] = time.perf_counter() - t0
            await pilot.press("home")  # backward: a rebuild, from lines already decoded
            if app.player.playing:
                await pilot.press("space")  # pause, so the clock moves nothing in between
            t0 = time.perf_counter()
            await pilot.press("right")  # forward 10 s: only the events in between
            await pilot.pause()
            t["seek_right"] = time.perf_counter() - t0
            app.exit()

    asyncio.run(first_frame())
    base = t["start"]
    return {
        "import_s": t["imported"] - base,
        "open_s": t["opened"] - t["imported"],
        "player_s": t["app_built"] - t["opened"],
        "mount_s": t["mounted"] - t["app_built"],
        "to_frame_s": t["first_frame"] - t["mounted"],
        "total_in_process_s": t["first_frame"] - base,
        "seek_end_s": t["seek_end"],
        "seek_right_s": t["seek_right"],
        "events": len(recording),
    }


def child_floor(path: str, ready_fd: int | None) -> dict:
    """(b): ``json.loads`` of every line, nothing else."""
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    values = [json.loads(line) for line in data.split(b"\n") if line.strip()]
    t1 = time.perf_counter()
    if ready_fd is not None:
        os.write(ready_fd, b"ready\n")
    return {"total_in_process_s": t1 - T_PROCESS, "loads_s": t1 - t0, "lines": len(values)}


def size_notes(path: Path) -> dict:
    """Where a sample line's bytes go, and what gzip would make of the file."""
    import zlib

    sample_line = None
    squeeze = zlib.compressobj(6)
    packed = 0
    with path.open("rb") as f:
        for raw in f:
            packed += len(squeeze.compress(raw))
            if sample_line is None and b'"type":"sample"' in raw:
                sample_line = raw
    packed += len(squeeze.flush())
    plain = json.loads(sample_line)

    def drop(value, keys=("reasons",), nulls=False):
        if isinstance(value, dict):
            return {
                k: drop(v, keys, nulls)
                for k, v in value.items()
                if k not in keys and not (nulls and (v is None or v == {} or v == []))
            }
        if isinstance(value, list):
            return [drop(v, keys, nulls) for v in value]
        return value

    def size(value) -> int:
        return len(json.dumps(value, separators=(",", ":"))) + 1

    return {
        "sample_line": len(sample_line),
        "without_reasons": size(drop(plain)),
        "without_reasons_nulls": size(drop(plain, nulls=True)),
        "gzip_bytes": packed,
    }


def child_env() -> dict[str, str]:
    """A user's install has byte-compiled modules (pip compiles them); this machine sets
    PYTHONDONTWRITEBYTECODE, so the children keep their bytecode under bench/out/pycache instead
    (a warm-up run fills it) rather than compiling every module on every start."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def run_child(kind: str, path: Path, timeout: float) -> dict:
    """Start a fresh interpreter; wall time from spawn to its 'ready' signal, plus its own report."""
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, os.path.abspath(__file__), "--child", kind, "--ready-fd", str(write_fd), str(path)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(write_fd,), env=child_env())
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as ready:
        line = ready.readline()
    wall = time.perf_counter() - t0
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0 or not line:
        raise SystemExit(f"child {kind} failed (exit {proc.returncode}): {err.decode(errors='replace')[-3000:]}")
    report = json.loads(out.decode().strip().splitlines()[-1])
    report["wall_s"] = wall
    return report


def profile_app(path: Path, top: int) -> str:
    """cProfile of one (a) run in a fresh interpreter: the functions with the most cumulative time."""
    with tempfile.NamedTemporaryFile(suffix=".prof", delete=False) as f:
        prof = f.name
    subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", prof, os.path.abspath(__file__), "--child", "app", str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=child_env(),
    )
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    buf.write("\n--- by own time ---\n")
    stats.sort_stats("tottime").print_stats(top)
    os.unlink(prof)
    return buf.getvalue()


# --- main ---------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=60, help="length of the recording (default 60)")
    parser.add_argument("--hz", type=float, default=4, help="samples per second (default 4)")
    parser.add_argument("--gpus", type=int, default=2, choices=(1, 2), help="GPUs per sample (default 2)")
    parser.add_argument("--reps", type=int, default=5, help="fresh-process runs of (a) and (b) each (default 5)")
    parser.add_argument("--file", metavar="PATH", help="write the recording here and keep it (default: a temp file)")
    parser.add_argument("--profile", action="store_true", help="profile (a) even if it is within the goal")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--child", choices=("app", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        report = (child_app if args.child == "app" else child_floor)(args.path, args.ready_fd)
        print(json.dumps(report), flush=True)
        return 0

    command = command_line(__file__)
    print(f"command: {command}", flush=True)
    keep = args.file is not None
    path = Path(args.file) if keep else Path(tempfile.mkdtemp(prefix="bench-recording-")) / "hour.jsonl"
    t0 = time.perf_counter()
    count = make_recording(path, args.minutes, args.hz, args.gpus)
    gen_s = time.perf_counter() - t0
    size = path.stat().st_size
    lines = sum(1 for _ in path.open("rb"))
    per_hour = size / (count["seconds"] / 3600)
    print(
        f"wrote {path}: {count['samples']:,} samples + {count['run_events']} run events, {lines:,} lines, "
        f"{size / MiB:.1f} MiB in {gen_s:.1f} s",
        flush=True,
    )

    notes = size_notes(path)
    load = OtherLoad()
    app_runs, floor_runs = [], []
    try:
        run_child("app", path, args.timeout)  # warm-up, not counted: page cache and bytecode cache
        for rep in range(args.reps):
            a = run_child("app", path, args.timeout)
            app_runs.append(a)
            b = run_child("floor", path, args.timeout)
            floor_runs.append(b)
            print(
                f"rep {rep + 1}/{args.reps}: (a) first frame {a['wall_s']:.2f} s (import {a['import_s']:.2f}, open "
                f"{a['open_s']:.2f}, player {a['player_s']:.2f}, mount {a['mount_s']:.2f}, to frame "
                f"{a['to_frame_s']:.2f}); (b) json.loads floor {b['wall_s']:.2f} s (loads {b['loads_s']:.2f})",
                flush=True,
            )
        load.stop()
        for r in app_runs:
            r["interpreter_s"] = r["wall_s"] - r["total_in_process_s"]
        med = {
            k: statistics.median(r[k] for r in app_runs)
            for k in (
                "wall_s",
                "interpreter_s",
                "import_s",
                "open_s",
                "player_s",
                "mount_s",
                "to_frame_s",
                "seek_end_s",
                "seek_right_s",
            )
        }
        floor = statistics.median(r["wall_s"] for r in floor_runs)
        floor_loads = statistics.median(r["loads_s"] for r in floor_runs)
        profile = profile_app(path, args.profile_top) if args.profile or med["wall_s"] > 1.0 else None
    finally:
        if not keep:
            path.unlink(missing_ok=True)
            path.parent.rmdir()

    print()
    print(f"### Recording: size per hour, open and first replayed frame{busy_label(load)}")
    print()
    print(f"`{command}`")
    print()
    print(
        f"{args.minutes:g} min at {args.hz:g} Hz, {args.gpus} GPU(s) per sample with every NVML field: "
        f"{count['samples']:,} samples + {count['run_events']} run events. {machine_line()}; {load.describe()}."
    )
    print()
    print(
        f"- **file size: {per_hour / MiB:.1f} MiB per hour** ({size / max(lines, 1):.0f} bytes per line; a sample "
        f"line {notes['sample_line']} bytes, {notes['without_reasons']} without its `reasons` strings, "
        f"{notes['without_reasons_nulls']} also without null fields; gzip -6 would make the file "
        f"{notes['gzip_bytes'] / (count['seconds'] / 3600) / MiB:.1f} MiB per hour)"
    )
    goal = "met" if med["wall_s"] <= 1.0 else "NOT met"
    print(
        f"- **first frame of `cliff-tui replay`: {med['wall_s']:.2f} s** (median of {args.reps} fresh processes "
        f"after one warm-up, spawn to first sample on the dashboard; goal ≤ 1 s: {goal})"
    )
    print(
        f"- (b) floor, a fresh process doing only `json.loads` of every line: {floor:.2f} s "
        f"({floor_loads:.2f} s of it parsing); **(a) / (b) = {med['wall_s'] / floor:.1f}**"
    )
    print()
    print("| phase of (a), medians | seconds |")
    print("| --- | ---: |")
    for key, name in (
        ("interpreter_s", "interpreter start (spawn to this script's first line)"),
        ("import_s", "imports (cliff_tui, textual)"),
        ("open_s", "`open_recording` (read, json.loads, typed records)"),
        ("player_s", "`CliffApp(...)` with its `Player`"),
        ("mount_s", "Textual start-up to mounted (`run_test`)"),
        ("to_frame_s", "mounted → first sample drawn"),
    ):
        print(f"| {name} | {med[key]:.3f} |")
    print()
    print(
        f"After the first frame, the `end` key (seek to the end: the store takes every event, decoding each "
        f"line on the way) took {med['seek_end_s']:.2f} s (median); a backward seek (`←`, `home`) rebuilds the "
        f"store from the first event and costs up to that much; `→` (10 s forward, paused) "
        f"{med['seek_right_s'] * 1000:.0f} ms."
    )
    if profile:
        print()
        print("<details><summary>cProfile of one (a) run</summary>\n\n```")
        print(profile.rstrip())
        print("```\n</details>")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
