"""What `cliff-tui exporter` costs at a 1 s scrape and 4 Hz sampling, next to nvitop-exporter.

Both exporters run side by side for --minutes, each scraped once a second by this script (the two
scrapes alternate which goes first). Reports, per exporter: CPU seconds per minute (user + system
of its process), scrape latency (request to last byte, p50 / p99 / max) and the size of an answer.

nvitop-exporter (PyPI) is installed into a virtualenv of its own, bench/out/nvitop-venv (made on
the first run; the project's venv is not touched). On a machine without an NVIDIA driver its CLI
stops at start ("FATAL ERROR: NVIDIA Management Library (NVML) not found", exit 1), so here it
runs as its CLI would with no GPU: its own ``PrometheusExporter`` with an empty device list (the
three NVML calls its info metric makes are answered "N/A"), its collect loop at --interval, and
the same prometheus_client WSGI server. That is its host-metrics part (CPU, RAM, swap, load,
network, disks), the part a GPU-less machine can compare; cliff-tui samples RAM, swap and the
signs. With a GPU both would also read NVML every tick.

    python bench/exporter_cost.py --minutes 3        # the figures in bench/RESULTS.md
    python bench/exporter_cost.py --minutes 1        # a quick look
"""

from __future__ import annotations

import argparse
import os
import re
import select
import statistics
import subprocess
import sys
import time
import urllib.request
import venv
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from benchutil import ROOT, OtherLoad, command_line, machine_line

NVITOP_VENV = ROOT / "bench" / "out" / "nvitop-venv"
NVITOP_RUNNER = r"""
import sys, threading, time
from nvitop import Device
from nvitop_exporter.exporter import PrometheusExporter
from prometheus_client import start_wsgi_server

try:
    Device.count()
except Exception:  # no NVML here: the info metric's three calls answer N/A, no GPU is read
    Device.count = staticmethod(lambda: 0)
    Device.driver_version = staticmethod(lambda: "N/A")
    Device.cuda_driver_version = staticmethod(lambda: "N/A")
exporter = PrometheusExporter([], hostname="bench", interval=float(sys.argv[1]))
httpd, _ = start_wsgi_server(0, addr="127.0.0.1")
print(f"serving http://127.0.0.1:{httpd.server_address[1]}/metrics", file=sys.stderr, flush=True)
exporter.collect()
"""
SERVING = re.compile(r"serving (http://\S+/metrics)")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Exporter:
    name: str
    proc: subprocess.Popen
    url: str = ""
    latencies: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    samples: int = 0
    failures: int = 0

    def cpu_seconds(self) -> float:
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def scrape(self) -> None:
        start = time.perf_counter()
        try:
            with OPENER.open(self.url, timeout=5) as reply:
                body = reply.read()
        except OSError:
            self.failures += 1
            return
        self.latencies.append(time.perf_counter() - start)
        self.sizes.append(len(body))
        self.samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def nvitop_python() -> Path:
    python = NVITOP_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing nvitop-exporter into {NVITOP_VENV.relative_to(ROOT)} …", file=sys.stderr)
        venv.create(NVITOP_VENV, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "nvitop-exporter"], check=True)
    return python


def start(name: str, argv: list[str], env: dict[str, str]) -> Exporter:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    exporter = Exporter(name, proc)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stderr], [], [], 0.2)[0]:
            match = SERVING.search(proc.stderr.readline())
            if match:
                exporter.url = match.group(1)
                return exporter
    proc.kill()
    sys.exit(f"{name} did not start: {proc.stderr.read()}")


def version(python: Path, package: str) -> str:
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "?"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--interval", type=float, default=0.25, help="sampling interval of both (default 0.25)")
    parser.add_argument("--scrape", type=float, default=1.0, help="seconds between scrapes (default 1)")
    parser.add_argument("--warmup", type=float, default=5, help="seconds ignored at start")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env["PYTHONPATH"] = str(ROOT / "tui")
    python = nvitop_python()
    exporters = [
        start(
            f"cliff-tui exporter -i {args.interval:g}",
            [sys.executable, "-m", "cliff_tui", "exporter", "--bind", "127.0.0.1:0", "-i", str(args.interval)],
            env,
        ),
        start(
            f"nvitop-exporter {version(python, 'nvitop-exporter')} host part, --interval {args.interval:g}",
            [str(python), "-c", NVITOP_RUNNER, str(args.interval)],
            env,
        ),
    ]
    load = OtherLoad()
    try:
        time.sleep(args.warmup)
        for e in exporters:
            e.scrape()  # the first answer builds its module caches; not counted
            e.latencies.clear()
        load.start()
        cpu0 = {e.name: e.cpu_seconds() for e in exporters}
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < args.minutes * 60:
            order = exporters if n % 2 == 0 else exporters[::-1]
            for e in order:
                e.scrape()
            n += 1
            time.sleep(max(0.0, t0 + n * args.scrape - time.monotonic()))
        elapsed = time.monotonic() - t0
        cpu = {e.name: (e.cpu_seconds() - cpu0[e.name]) / elapsed * 60 for e in exporters}
    finally:
        for e in exporters:
            e.proc.terminate()
            try:
                e.proc.wait(10)
            except subprocess.TimeoutExpired:
                e.proc.kill()
                e.proc.wait()
    load.stop()
    report(exporters, cpu, elapsed, load, args)
    return 0


def report(
    exporters: list[Exporter], cpu: dict[str, float], elapsed: float, load: OtherLoad, args: argparse.Namespace
) -> None:
    print(f"`{command_line(__file__)}`\n")
    print(f"{elapsed / 60:.1f} min, a scrape of each every {args.scrape:g} s; {machine_line()}; {load.describe()}.\n")
    print("| exporter | CPU s per minute | scrape p50 ms | p99 ms | max ms | samples | KiB per answer | failed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for e in exporters:
        lat = sorted(x * 1000 for x in e.latencies)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
        print(
            f"| {e.name} | {cpu[e.name]:.2f} | {statistics.median(lat):.1f} | {p99:.1f} | {max(lat):.1f} | "
            f"{e.samples} | {statistics.median(e.sizes) / 1024:.1f} | {e.failures} |"
        )
    first, second = (cpu[e.name] for e in exporters)
    print(f"\nCPU ratio cliff-tui / nvitop-exporter: {first / second:.2f} (goal ≤ 1.0)")


if __name__ == "__main__":
    raise SystemExit(main())
