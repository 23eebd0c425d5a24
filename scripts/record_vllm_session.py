"""Record tests/data/attach_vllm.jsonl: ``cliff-tui attach --vllm URL`` on a 120×40
pseudo-terminal, next to a real vLLM (the CPU build, SmolLM2, 10 KV blocks of 128 tokens: 1,280
tokens) while eight requests at a time each ask for 500 tokens (``ignore_eos``), so that the cache
fills and vLLM preempts. The recording stops while the load still runs, once vLLM has preempted for
a while, so that its end shows the gauge red with the preemptions of the last minute. It is
redacted; scripts/make_screenshots.py replays it.

    PYTHONPATH=tui:tests/support python scripts/record_vllm_session.py [--load-s 50]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from pty_cliff import cliff_on_a_pty

from vllm_server import SERVED_NAME, started_vllm

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "attach_vllm.jsonl"
PROMPT = " ".join((ROOT / "README.md").read_text().split()[:90])  # about 120 tokens: one block each
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def attach_on_a_pty(url: str, record: Path) -> tuple[int, int]:
    """``cliff-tui attach --vllm URL --record`` on a 120×40 pseudo-terminal: its PID and the terminal's fd."""
    return cliff_on_a_pty(["attach", "--vllm", url, "--record", str(record), "--force", "--redact"])


class Load:
    """``requests`` threads, each sending one ``max_tokens`` completion after another until stopped."""

    def __init__(self, url: str, requests: int, max_tokens: int) -> None:
        self.url, self.max_tokens = url, max_tokens
        self.codes: list[int | str] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(requests)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            body = {"model": SERVED_NAME, "prompt": PROMPT, "max_tokens": self.max_tokens, "ignore_eos": True}
            request = urllib.request.Request(
                self.url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            try:
                with OPENER.open(request, timeout=600) as reply:
                    reply.read()
                    self.codes.append(reply.status)
            except urllib.error.HTTPError as exc:
                self.codes.append(exc.code)
            except OSError as exc:  # the server stopped under a request at the end
                if not self.stopping.is_set():
                    self.codes.append(type(exc).__name__)
                return


def preemptions(url: str) -> float:
    """vLLM's own count of preempted requests since it started."""
    with OPENER.open(url + "/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(v) for v in re.findall(r"^vllm:num_preemptions_total\{[^}]*\} (\S+)$", text, re.M))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load-s", type=float, default=50, help="seconds of load before it may stop (default 50)")
    parser.add_argument("--most-s", type=float, default=150, help="seconds of load at most (default 150)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, started_vllm(Path(tmp), blocks=10) as server:
        pid, fd = attach_on_a_pty(server.url, OUT)
        load = Load(server.url, requests=8, max_tokens=500)
        try:
            time.sleep(6)  # found, its flags read, a baseline of its memory: the idle cache on screen
            load.start()
            started, last_rise, count = time.monotonic(), None, 0.0
            while (elapsed := time.monotonic() - started) < args.most_s:
                time.sleep(1)
                now = preemptions(server.url)
                if now > count:
                    count, last_rise = now, time.monotonic()
                    print(f"{elapsed:5.0f} s: {now:.0f} preempted since start", flush=True)
                # stop once the load has run long enough, within 20 s of a preemption: red at the end
                if elapsed >= args.load_s and last_rise is not None and time.monotonic() - last_rise < 20:
                    break
            time.sleep(2)  # that preemption read and drawn
            os.write(fd, b"q")
            _, status = os.waitpid(pid, 0)
            print(f"attach ended: {status}; {count:.0f} preempted; answers {sorted(set(map(str, load.codes)))}")
            print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size:,} bytes)")
        finally:
            load.stopping.set()
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            os.close(fd)


if __name__ == "__main__":
    main()
