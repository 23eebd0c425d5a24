"""Where decode falls off a cliff when a memory cgroup's limit is below the KV cache (as root).

For each limit (MiB) this makes swap (a swap file, or zram with ``--swap zram``) and a memory cgroup
``cliff-test-…`` (tests/support/cgroup_cliff.py: v2 memory.max where the v2 memory controller is on, v1
memory.limit_in_bytes otherwise), runs in it, watches it every 0.2 s, and undoes everything:

  1. the probe curve: a bare llama-cpp-python loop (llama.cpp's C API, not cliff_tui's engine) that
     prefills the default model to ``--depth`` in ubatch-sized calls and, every ``--probe-every``
     tokens, decodes ``--probe-tokens`` greedy tokens, timing each and counting the process's major
     page faults (pages read back from swap) — then removes them from the cache;
  2. ``cliff-tui run --headless --depth D --n-gen N -o json --record F``: the real engine.

Both also run without a cgroup (the peer, same settings, side by side in each repetition).
Per limit it prints: the knee (the first probe depth from which decode is ≥ 2× slower than the
peer's at the same depth, i.e. ≥ 50 % fewer tok/s, for this probe and the next), the run's
decode at depth against its own depth trend (the line through its probes at ≤ D/2, as the
engine fits it) and against the peer, swap (the cgroup's, VmSwap, the system's), anon vs file
charged, major faults per decoded token, and where usage reached the limit.

    sudo python bench/cgroup_cliff.py --threads 1                      # the figures in bench/RESULTS.md
    sudo python bench/cgroup_cliff.py --limits 80 --reps 1 --no-run    # one probe curve, ~1 min
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# tests/ first: its cgroup_cliff (the sandbox) and not this script, which has the same name
sys.path[:0] = [str(ROOT / "tests" / "support"), str(ROOT / "tui"), str(ROOT / "bench")]

MiB = 1024 * 1024
FAULT_KNEE = 256  # major faults a decoded token (1 MiB read back) from which a probe counts as paging


# --- the probe-curve child (runs inside the cgroup) -----------------------------------------------


def _status_kib(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def probe_child(args: argparse.Namespace) -> int:
    import llama_cpp as L

    from cliff_tui.engine.tokens import BUILTIN_TEXT

    def emit(**record: object) -> None:
        record.update(
            t=time.time(),
            rss_anon_kib=_status_kib("RssAnon"),
            rss_file_kib=_status_kib("RssFile"),
            vm_swap_kib=_status_kib("VmSwap"),
        )
        print(json.dumps(record), flush=True)

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    if args.no_mmap:
        if hasattr(mp, "load_mode"):
            mp.load_mode = L.LLAMA_LOAD_MODE_NONE
        else:
            mp.use_mmap = False
    model = L.llama_model_load_from_file(args.model.encode(), mp)
    if not model:
        print(f"could not load {args.model}", file=sys.stderr)
        return 1
    emit(event="loaded")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    cp = L.llama_context_default_params()
    cp.n_ctx = -(-(args.depth + args.probe_tokens + 1) // 256) * 256
    cp.n_batch = cp.n_ubatch = args.ubatch
    cp.n_threads = cp.n_threads_batch = args.threads
    ctx = L.llama_init_from_model(model, cp)
    memory = L.llama_get_memory(ctx)
    emit(event="context", n_ctx=cp.n_ctx)

    def tokenize(text: str, add_bos: bool) -> list[int]:
        data = text.encode()
        buf = (L.llama_token * (len(data) + 16))()
        n = L.llama_tokenize(vocab, data, len(data), buf, len(buf), add_bos, False)
        return list(buf[:n])

    body = tokenize(BUILTIN_TEXT, False)
    ids = tokenize(BUILTIN_TEXT, True)
    while len(ids) < args.depth:
        ids.extend(body)
    ids = ids[: args.depth]

    def decode(tokens: list[int]) -> None:
        array = (L.llama_token * len(tokens))(*tokens)
        if L.llama_decode(ctx, L.llama_batch_get_one(array, len(tokens))) != 0:
            raise RuntimeError("llama_decode failed")
        L.llama_synchronize(ctx)

    def greedy() -> int:
        return _argmax(L.llama_get_logits_ith(ctx, -1), n_vocab)

    reached = 0
    while reached < args.depth:
        stop = min(args.depth, reached + args.ubatch, (reached // args.probe_every + 1) * args.probe_every)
        t = time.perf_counter()
        decode(ids[reached:stop])
        prefill_s = time.perf_counter() - t
        reached = stop
        if reached % args.probe_every == 0 or reached == args.depth:
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
            durations = []
            token = greedy()
            for _ in range(args.probe_tokens):
                t = time.perf_counter()
                decode([token])
                token = greedy()
                durations.append(time.perf_counter() - t)
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults0
            L.llama_memory_seq_rm(memory, 0, reached, -1)
            steady = sorted(durations[1:])
            emit(
                event="probe",
                depth=reached,
                ms=steady[len(steady) // 2] * 1000,
                majflt_per_token=faults / args.probe_tokens,
                last_prefill_ms=prefill_s * 1000,
            )
    L.llama_free(ctx)
    L.llama_model_free(model)
    return 0


def _argmax(logits, n: int) -> int:
    import numpy as np

    return int(np.argmax(np.ctypeslib.as_array(logits, shape=(n,))))


# --- the parent -----------------------------------------------------------------------------------


@dataclass
class Measured:
    label: str
    wall_s: float
    rc: int
    records: list[dict] = field(default_factory=list)  # probe child: its JSON lines
    result: dict | None = None  # cliff-tui run: its JSON
    progress: list[tuple[float, str, int]] = field(default_factory=list)  # (t, phase, depth) from the recording
    samples: list = field(default_factory=list)  # CgroupSample
    limit_bytes: int | None = None


def child_argv(args: argparse.Namespace) -> list[str]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--model",
        args.model,
        "--depth",
        str(args.depth),
        "--probe-every",
        str(args.probe_every),
        "--probe-tokens",
        str(args.probe_tokens),
        "--ubatch",
        str(args.ubatch),
        "--threads",
        str(args.threads),
    ]
    return argv + (["--no-mmap"] if args.no_mmap else [])


def run_argv(args: argparse.Namespace, record: Path) -> list[str]:
    python = os.environ.get("CLIFF_PYTHON", sys.executable)
    return [
        python,
        "-m",
        "cliff_tui",
        "run",
        "--headless",
        "--depth",
        str(args.depth),
        "--n-gen",
        str(args.n_gen),
        "-t",
        str(args.threads),
        "-o",
        "json",
        "--record",
        str(record),
        "--force",
    ]


def measure(
    argv: list[str], label: str, limit_mib: int | None, args: argparse.Namespace, record: Path | None = None
) -> Measured:
    import cgroup_cliff as cc

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tui"), os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.monotonic()
        if limit_mib is None:
            rc = subprocess.run(argv, check=False, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=ROOT).returncode
            samples, limit = [], None
        else:
            with (
                cc.sandbox(limit_mib * MiB, args.swap_mib * MiB, args.swap) as box,
                cc.Monitor(box.cgroup, interval_s=0.2) as monitor,
            ):
                proc = box.popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
                rc = proc.wait()
            samples, limit = monitor.samples, box.cgroup.limit_bytes
        wall = time.monotonic() - t0
        out.seek(0)
        text = out.read()
    m = Measured(label, wall, rc, samples=samples, limit_bytes=limit)
    if record is None:
        m.records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    else:
        m.result = json.loads(text) if rc == 0 and text.strip() else None
        m.progress = read_progress(record)
    return m


def read_progress(record: Path) -> list[tuple[float, str, int]]:
    out = []
    for line in record.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "progress":
            out.append((event["t"], event["phase"], event["depth"]))
    return out


# --- analysis -------------------------------------------------------------------------------------


def probes_of(m: Measured) -> dict[int, dict]:
    return {r["depth"]: r for r in m.records if r.get("event") == "probe"}


def knee(curve: dict[int, dict], peer: dict[int, dict], factor: float = 2.0) -> int | None:
    """The first probe depth from which decode is ≥ ``factor``× slower than the peer's, here and at the next probe."""
    depths = sorted(d for d in curve if d in peer)
    slow = [curve[d]["ms"] >= factor * peer[d]["ms"] for d in depths]
    for i, depth in enumerate(depths):
        if slow[i] and (i + 1 == len(depths) or slow[i + 1]):
            return depth
    return None


def fault_knee(curve: dict[int, dict], per_token: float = FAULT_KNEE) -> int | None:
    """The first probe depth from which every probe reads ≥ ``per_token`` pages back a token."""
    depths = sorted(curve)
    for i, depth in enumerate(depths):
        if all(curve[d]["majflt_per_token"] >= per_token for d in depths[i:]):
            return depth
    return None


def line_at(points: list[tuple[float, float]], x: float) -> float | None:
    from cliff_tui.analysis.speed import fit_line

    fit = fit_line([p[0] for p in points], [p[1] for p in points])
    return fit.intercept + fit.slope * x if fit else None


def run_figures(m: Measured) -> dict:
    """Decode at depth against the run's own trend (a line through its probes at ≤ D/2)."""
    r = m.result or {}
    points = r.get("decode_points") or []
    depth = r.get("depth")
    probes = [(p["depth"], p["ms_per_token"]) for p in points if p["phase"] == "probe" and p["depth"] <= depth / 2]
    at_depth = [p["ms_per_token"] for p in points if p["phase"] == "depth"]
    trend_ms = line_at(probes, depth) if depth else None
    measured_ms = statistics.median(at_depth) if at_depth else None
    return {
        "trend_ms": trend_ms,
        "measured_ms": measured_ms,
        "depth_tok_s": r.get("depth_tok_s"),
        "verdict": r.get("verdict"),
        "verdict_text": r.get("verdict_text"),
        "probes": [(p["depth"], round(p["ms_per_token"], 1)) for p in points if p["phase"] == "probe"],
        "kv_bytes": sum((r.get("kv_buffers") or {}).values()),
        "n_ctx": r.get("n_ctx"),
        "swap_delta_bytes": r.get("swap_delta_bytes"),
    }


def phase_at(progress: list[tuple[float, str, int]], t: float) -> tuple[str, int] | None:
    found = None
    for when, phase, depth in progress:
        if when > t:
            break
        found = (phase, depth)
    return found


def memory_figures(m: Measured) -> dict:
    s = m.samples
    if not s:
        return {}
    import cgroup_cliff as cc

    at_limit = cc.first_at_limit(s, m.limit_bytes)
    last = s[-1]
    fullest = max(s, key=lambda x: x.swap_bytes or 0)
    decode = [x for x in s if m.progress and (phase_at(m.progress, x.t) or ("",))[0] == "decode"]
    faults_decode = decode[-1].major_faults - decode[0].major_faults if len(decode) > 1 else None
    return {
        "swap_peak": max(x.swap_bytes or 0 for x in s),
        "vm_swap_peak": max(x.vm_swap_bytes for x in s),
        "system_swap_peak": max(x.system_swap_bytes for x in s) - s[0].system_swap_bytes,
        "anon_at_swap_peak": fullest.anon_bytes,
        "file_at_swap_peak": fullest.file_bytes,
        "usage_peak": max(x.usage_bytes for x in s),
        "at_limit_s": at_limit.t - s[0].t if at_limit else None,
        "at_limit_phase": phase_at(m.progress, at_limit.t) if at_limit and m.progress else None,
        "major_faults": last.major_faults - s[0].major_faults if last.major_faults is not None else None,
        "decode_faults": faults_decode,
        "swap_ins": last.swap_ins - s[0].swap_ins,
    }


def mib(n: float | None) -> str:
    return "—" if n is None else f"{n / MiB:.1f}"


def report(args: argparse.Namespace, curves: dict, runs: dict) -> None:
    peers = curves.get(None, [])
    print(
        f"\n## probe curve: depth {args.depth}, a probe of {args.probe_tokens} tokens every {args.probe_every}, "
        f"ubatch {args.ubatch}, {args.threads} threads, {'no mmap' if args.no_mmap else 'mmap'}, swap {args.swap}"
    )
    for limit, ms in curves.items():
        if limit is None:
            continue
        for rep, m in enumerate(ms):
            peer = probes_of(peers[rep]) if rep < len(peers) else {}
            curve = probes_of(m)
            k, fk = knee(curve, peer), fault_knee(curve)
            ctx = next((r for r in m.records if r.get("event") == "context"), {})
            loaded = next((r for r in m.records if r.get("event") == "loaded"), {})
            print(
                f"\nlimit {limit} MiB rep {rep + 1}: knee {k} (≥ 2× the peer), paging from {fk} (≥ {FAULT_KNEE} "
                f"major faults a token), wall {m.wall_s:.0f} s, rc {m.rc}; "
                f"anon after load {loaded.get('rss_anon_kib', 0) / 1024:.1f} MiB, after context "
                f"{ctx.get('rss_anon_kib', 0) / 1024:.1f} (VmSwap {ctx.get('vm_swap_kib', 0) / 1024:.1f}), "
                f"mem {json.dumps({k2: (mib(v) if 'peak' in k2 else v) for k2, v in memory_figures(m).items()})}"
            )
            print("  depth  ms/tok  peer  ratio  majflt/tok  VmSwap MiB")
            for d in sorted(curve):
                p = peer.get(d, {}).get("ms")
                print(
                    f"  {d:5d} {curve[d]['ms']:7.1f} {p or 0:6.1f} {curve[d]['ms'] / p if p else 0:6.2f} "
                    f"{curve[d]['majflt_per_token']:10.1f} {curve[d]['vm_swap_kib'] / 1024:8.1f}"
                )
    if not runs:
        return
    print(f"\n## cliff-tui run --depth {args.depth} --n-gen {args.n_gen}")
    peer_runs = runs.get(None, [])
    for limit, ms in runs.items():
        for rep, m in enumerate(ms):
            f = run_figures(m)
            peer = run_figures(peer_runs[rep]) if rep < len(peer_runs) else {}
            trend, meas, pm = f["trend_ms"], f["measured_ms"], peer.get("measured_ms")
            below_trend = 1 - trend / meas if trend and meas else None
            below_peer = 1 - pm / meas if pm and meas else None
            print(
                f"\nlimit {limit} MiB rep {rep + 1}: wall {m.wall_s:.0f} s rc {m.rc}; decode at depth "
                f"{meas and 1000 / meas:.1f} tok/s ({meas and round(meas, 1)} ms) vs own trend "
                f"{trend and 1000 / trend:.1f} tok/s → {below_trend and below_trend * 100:.0f} % below; vs peer "
                f"{pm and 1000 / pm:.1f} tok/s → {below_peer and below_peer * 100:.0f} % below; verdict "
                f"{f['verdict']}: {f['verdict_text']}"
            )
            print(f"  probes {f['probes']}")
            print(
                f"  KV {mib(f['kv_bytes'])} MiB for n_ctx {f['n_ctx']}; run's swap_delta {mib(f['swap_delta_bytes'])}"
            )
            fig = memory_figures(m)
            if fig:
                print("  " + ", ".join(f"{k}={mib(v) if 'peak' in k else v}" for k, v in fig.items()))


def main() -> int:
    from cliff_tui.engine.settings import usable_cpus

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", default="64,80,96,112", help="cgroup memory limits, MiB, comma-separated")
    parser.add_argument("--depth", type=int, default=4096)
    parser.add_argument("--n-gen", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--probe-every", type=int, default=256)
    parser.add_argument("--probe-tokens", type=int, default=8)
    parser.add_argument("--ubatch", type=int, default=512)
    parser.add_argument("--threads", type=int, default=min(2, usable_cpus()))
    parser.add_argument("--swap", choices=("file", "zram"), default="file")
    parser.add_argument("--swap-mib", type=int, default=1024)
    parser.add_argument("--no-mmap", action="store_true", help="load the weights into anonymous memory")
    parser.add_argument("--no-run", action="store_true", help="only the probe curves, not cliff-tui run")
    parser.add_argument("--no-curve", action="store_true", help="only cliff-tui run")
    parser.add_argument("--json-out", type=Path, help="also write every measurement (samples included) here")
    parser.add_argument("--model", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model is None:
        from cliff_tui.engine.default_model import default_model_path

        args.model = str(default_model_path())
    if args.child:
        return probe_child(args)

    from benchutil import command_line, machine_line

    import cgroup_cliff as cc

    try:
        cc.require_root()
        cc.cgroup_version()
    except cc.Unavailable as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 2
    limits: list[int | None] = [None, *(int(x) for x in args.limits.split(","))]
    curves: dict = {limit: [] for limit in limits}
    runs: dict = {limit: [] for limit in limits}
    print(f"{command_line(__file__)}\n{machine_line()}")
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for limit in limits:
                if not args.no_curve:
                    m = measure(child_argv(args), "curve", limit, args)
                    curves[limit].append(m)
                    print(f"rep {rep + 1} limit {limit}: curve {m.wall_s:.0f} s", flush=True)
                if not args.no_run:
                    record = Path(tmp, f"run-{rep}-{limit}.jsonl")
                    m = measure(run_argv(args, record), "run", limit, args, record)
                    runs[limit].append(m)
                    print(f"rep {rep + 1} limit {limit}: run {m.wall_s:.0f} s", flush=True)
    report(args, curves if not args.no_curve else {}, runs if not args.no_run else {})
    if args.json_out:
        dump = {
            kind: {str(limit): [dataclasses.asdict(m) for m in ms] for limit, ms in found.items()}
            for kind, found in (("curves", curves), ("runs", runs))
        }
        args.json_out.write_text(json.dumps(dump))
    print(
        f"\nleft behind: swaps {cc.active_swaps()}, cgroups "
        f"{[p.name for p in Path(cc.find_mounts()[cc.cgroup_version()].mount_point).glob(cc.PREFIX + '*')]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
