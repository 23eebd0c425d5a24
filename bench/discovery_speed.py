"""How long `attach` takes to find llama.cpp servers among many processes: --processes idle
processes (sleep) next to one real llama-server, and find_servers() timed --runs times (processes,
their sockets, each found server's API read, the default ports). Peer in the same run: a bare
psutil.process_iter over the names and command lines (what any process scan pays).

    python bench/discovery_speed.py --processes 300 --runs 15    # the figures in bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from benchutil import ROOT, OtherLoad, command_line, machine_line

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=300)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    from cliff_tui.probes.endpoints.discovery import find_servers
    from llama_server import started_llama_server

    print(command_line("discovery_speed.py"), machine_line(), sep="\n")
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(args.processes)]
    load = OtherLoad().start()
    try:
        with tempfile.TemporaryDirectory() as tmp, started_llama_server(Path(tmp), "--metrics") as server:
            total = len(psutil.pids())
            found, bare = [], []
            for _ in range(args.runs):
                bare.append(timed(lambda: [p.info for p in psutil.process_iter(["name", "cmdline"])]))
                found.append(timed(lambda: find_servers(1.0)))
            servers = find_servers(1.0).servers
            assert any(s.pid == server.proc.pid for s in servers), "the benchmark's server was not found"
    finally:
        for p in sleepers:
            p.terminate()
        for p in sleepers:
            p.wait()
        load.stop()
    print(f"{total} processes on the machine, {len(servers)} server(s) found")
    print(f"find_servers: median {statistics.median(found):.3f} s (min {min(found):.3f}, max {max(found):.3f})")
    print(f"bare process_iter(name, cmdline): median {statistics.median(bare):.3f} s")
    print(f"ratio: {statistics.median(found) / statistics.median(bare):.2f}; other load: {load.describe()}")


if __name__ == "__main__":
    main()
