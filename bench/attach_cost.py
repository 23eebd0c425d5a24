"""What `cliff-tui attach` costs the server it watches: llama-server's decode tok/s with an attach
on screen polling it at the default interval (0.5 s: /metrics, /slots, its log, its /proc memory,
and the machine's sample) against without, paired request by request in one run.

One llama-server (SmolLM2, -t every core, -c 1024, -np 1, --metrics), so that any CPU the attach
takes is CPU the server's threads wanted. ``python -m cliff_tui attach --llama-server URL`` runs as
the TUI a user sees, in a 120×40 pseudo-terminal whose output this script reads and throws away
as a terminal would; once it has drawn the server's pool and settled, each round runs --requests
pairs of completions of --tokens tokens: one with the attach stopped (SIGSTOP: it takes no CPU,
as if it were not there), one with it running (SIGCONT), the order alternating from pair to pair,
so that each attached request has a bare one beside it in time (this VM's speed drifts by 10–20 %
from minute to minute). Reports each round's ratio of the median decode rates (the server's own
``timings.predicted_per_second``) and the median over rounds; goal ≥ 0.99.

    python bench/attach_cost.py                       # the figures in bench/RESULTS.md
    python bench/attach_cost.py --rounds 2 --requests 2   # a check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import time
import urllib.request

from benchutil import ROOT, OtherLoad, PtyProgram, command_line, machine_line, tui_env

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

READ_MARKER = b"cells in use"  # the context-pool gauge: attach has read the server's /slots
SETTLE_S = 5.0  # after its first reading: the app's start-up is over, it polls at its interval


def decode_rate(url: str, tokens: int) -> float:
    body = {
        "prompt": "Write a long story about a river.",
        "n_predict": tokens,
        "temperature": 0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    request = urllib.request.Request(
        url + "/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=300) as reply:
        return float(json.loads(reply.read())["timings"]["predicted_per_second"])


def rates(url: str, requests: int, tokens: int) -> list[float]:
    return [decode_rate(url, tokens) for _ in range(requests)]


def measured_round(url: str, attach: PtyProgram, requests: int, tokens: int, first: str) -> dict[str, float]:
    """``requests`` pairs, the attach stopped for one request of each and running for the other."""
    got: dict[str, list[float]] = {"bare": [], "attach": []}
    for i in range(requests):
        order = (first, _other(first)) if i % 2 == 0 else (_other(first), first)
        for what in order:
            attach.proc.send_signal(signal.SIGCONT if what == "attach" else signal.SIGSTOP)
            got[what].append(decode_rate(url, tokens))
    attach.proc.send_signal(signal.SIGCONT)
    if attach.proc.poll() is not None:
        raise SystemExit(f"attach exited with {attach.proc.returncode} while measured: …{attach.screen_tail()}")
    return {what: statistics.median(rates) for what, rates in got.items()}


def _other(what: str) -> str:
    return "bare" if what == "attach" else "attach"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=4, help="pairs per round")
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    import tempfile
    from pathlib import Path

    from llama_server import started_llama_server

    print(command_line(__file__), machine_line(), sep="\n")
    threads = str(os.cpu_count() or 1)  # after the helper's -t 1: the later flag is the one llama-server keeps
    load = OtherLoad().start()
    ratios = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        started_llama_server(Path(tmp), "--metrics", "-np", "1", "-t", threads) as server,
    ):
        used = re.search(r"n_threads = (\d+)", server.log.read_text(errors="replace"))
        print(
            f"llama-server -c 1024 -np 1, -t {threads} asked, {used.group(1) if used else '?'} threads per its log; "
            "attach at its default interval in a 120×40 pty"
        )
        rates(server.url, 1, 16)  # warm up
        attach = PtyProgram([sys.executable, "-m", "cliff_tui", "attach", "--llama-server", server.url], tui_env())
        try:
            if not attach.wait_for(READ_MARKER, 30):
                raise SystemExit(f"attach showed no reading of the server in 30 s: …{attach.screen_tail()}")
            time.sleep(SETTLE_S)
            for round_ in range(args.rounds):
                first = "bare" if round_ % 2 == 0 else "attach"
                got = measured_round(server.url, attach, args.requests, args.tokens, first)
                ratio = got["attach"] / got["bare"]
                ratios.append(ratio)
                print(
                    f"round {round_ + 1}: bare {got['bare']:.1f} tok/s, attach {got['attach']:.1f} tok/s: {ratio:.3f}"
                )
        finally:
            attach.proc.send_signal(signal.SIGCONT)
            attach.stop()
    load.stop()
    print(
        f"median ratio (attach / bare): {statistics.median(ratios):.3f} over {len(ratios)} rounds "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); other load: {load.describe()}"
    )


if __name__ == "__main__":
    main()
