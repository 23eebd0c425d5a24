"""What `cliff-tui attach` costs the server it watches: llama-server's decode tok/s with an attach
polling it at the default interval (0.5 s: /metrics, /slots, its log, its /proc memory, and the
machine's sample) against without, paired in one run.

One llama-server (SmolLM2, -t 1, -c 1024, --metrics) serves --rounds rounds; each round runs
--requests completions of --tokens tokens with no attach, then the same with an attach running in
a process of its own (the order alternates by round). Reports the per-round ratio of the median
decode rates (the server's own ``timings.predicted_per_second``) and their median.

    python bench/attach_cost.py --rounds 6      # the figures in bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request

from benchutil import ROOT, OtherLoad, command_line, machine_line

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

ATTACH = """
import sys, time
from cliff_tui.headless import Headless
from cliff_tui.jobs.attach import AttachJob
from cliff_tui.probes.sampler import Sampler
from cliff_tui.session import Session
job = AttachJob.from_args(sys.argv[1], None, 0.5, 2.0)
Headless(Session(sampler=Sampler(), job=job, interval=0.5)).run_job(progress=False)
"""


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


def with_attach(url: str, requests: int, tokens: int) -> list[float]:
    env = {"PYTHONPATH": f"{ROOT / 'tui'}"}
    proc = subprocess.Popen([sys.executable, "-c", ATTACH, url], env={**__import__("os").environ, **env})
    try:
        time.sleep(2.0)  # attach found its server and polls
        if proc.poll() is not None:
            raise SystemExit(f"the attach process exited with {proc.returncode}")
        return rates(url, requests, tokens)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    args = parser.parse_args()
    import tempfile
    from pathlib import Path

    from llama_server import started_llama_server

    print(command_line("attach_cost.py"), machine_line(), sep="\n")
    load = OtherLoad().start()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp, started_llama_server(Path(tmp), "--metrics", "-np", "1") as server:
        rates(server.url, 1, 16)  # warm up
        for round_ in range(args.rounds):
            order = ("bare", "attach") if round_ % 2 == 0 else ("attach", "bare")
            got = {}
            for what in order:
                run = with_attach if what == "attach" else rates
                got[what] = statistics.median(run(server.url, args.requests, args.tokens))
            ratio = got["attach"] / got["bare"]
            ratios.append(ratio)
            print(f"round {round_ + 1}: bare {got['bare']:.1f} tok/s, attach {got['attach']:.1f} tok/s: {ratio:.3f}")
    load.stop()
    print(
        f"median ratio (attach / bare): {statistics.median(ratios):.3f} over {len(ratios)} rounds "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); other load: {load.describe()}"
    )


if __name__ == "__main__":
    main()
