"""Whether `cliff-tui attach` holds its memory and CPU over an hour next to a llama-server that is
chatting: attach's RSS and cumulative CPU, sampled every --every seconds for --minutes.

A real llama-server (SmolLM2, ``-c 3072 -np N --metrics -t 1``) on a free loopback port is kept
busy by --chats conversations from this process: each user turn is the next piece of the
project's README, each answer at most --max-tokens tokens, every request to 127.0.0.1 with a
timeout, and a conversation starts afresh before its slot's context could fill. Beside it,
``python -m cliff_tui attach --llama-server URL -i INTERVAL`` runs as the TUI a user sees, in a
120×40 pseudo-terminal whose output this script reads and throws away as a terminal would.
By default attach polls 10 times as often as at its own default (-i 0.05 against 0.5) so that an hour
shows what ten hours of readings would.

Reports, from minute --settle (5) on: attach's RSS at that minute and at the end, its max − min,
its least-squares slope in MiB per hour, that slope scaled to the default interval (× interval /
0.5, which assumes the growth comes per reading, not per hour), and attach's CPU seconds per
minute. The peer is attach itself at minute --settle: the goals are that the RSS stays within
2 MiB of flat from minute 5 to 60 and the slope, at the default interval, is at most 1 MiB/h.
Every sample goes to --out (CSV, or JSON where the name ends in .json). The server, the chats
and attach are stopped by their PIDs at the end, on Ctrl-C and on failure too.

    python bench/attach_soak.py                            # the figures in bench/RESULTS.md
    python bench/attach_soak.py --minutes 3 --every 5      # a check that it runs
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from benchutil import COLS, ROOT, ROWS, OtherLoad, PtyProgram, command_line, machine_line, tui_env

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

DEFAULT_INTERVAL = 0.5  # attach's own default, the one a user runs
CTX = 3072
READ_MARKER = b"cells in use"  # the context-pool gauge: attach has read the server's /slots
FLAT_MIB = 2.0
SLOPE_MIB_H = 1.0
MiB = 2**20


@dataclass
class Sample:
    t_s: float  # since attach started
    rss_mib: float
    cpu_s: float  # attach's user + system since it started
    turns: int  # chat turns answered so far
    restarts: int  # conversations started afresh so far
    errors: int  # chat requests that failed so far


class Chats:
    """--chats conversations at once against ``url`` (loopback only), each a user turn at a time
    from the README, bounded answers and timeouts; a conversation restarts before its prompt could
    outgrow ``budget`` tokens. Runs on threads until :meth:`stop` or ``deadline``."""

    def __init__(self, url: str, chats: int, budget: int, max_tokens: int, deadline: float) -> None:
        if urllib.parse.urlsplit(url).hostname != "127.0.0.1":
            raise SystemExit(f"the chats only talk to a loopback server, not {url}")
        from chat import document_turns

        self.url, self.budget, self.max_tokens, self.deadline = url, budget, max_tokens, deadline
        self.turns = document_turns(240)
        self.answered = self.restarts = self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(chats)]

    def start(self) -> Chats:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(130)  # a request in flight ends within its timeout

    def _loop(self, index: int) -> None:
        messages: list[dict] = []
        step = index * 7  # the conversations read different parts of the README
        while not self._stop.is_set() and time.monotonic() < self.deadline:
            messages.append({"role": "user", "content": self.turns[step % len(self.turns)]})
            step += 1
            used = self._ask(messages)
            if used is None:
                messages = []
                with self._lock:
                    self.errors += 1
                    self.restarts += 1
                self._stop.wait(1.0)
                continue
            with self._lock:
                self.answered += 1
            # the next turn adds about as many tokens as this one did: restart well before the slot fills
            if used + 2 * (self.max_tokens + 96) > self.budget:
                messages = []
                with self._lock:
                    self.restarts += 1

    def _ask(self, messages: list[dict]) -> int | None:
        """The answer appended to ``messages``; the tokens the conversation now holds, or None."""
        body = {"messages": messages, "max_tokens": self.max_tokens, "temperature": 0.7, "cache_prompt": True}
        request = urllib.request.Request(
            self.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=120) as reply:
                answer = json.loads(reply.read())
            content = answer["choices"][0]["message"]["content"]
            usage = answer["usage"]
            held = int(usage["prompt_tokens"]) + int(usage["completion_tokens"])
        except (OSError, ValueError, KeyError, IndexError, TypeError):  # HTTPError is an OSError
            return None
        messages.append({"role": "assistant", "content": content})
        return held


def slope_per_hour(samples: list[Sample]) -> float:
    """Least-squares slope of RSS (MiB) against time, in MiB per hour."""
    n = len(samples)
    mean_t = sum(s.t_s for s in samples) / n
    mean_r = sum(s.rss_mib for s in samples) / n
    var = sum((s.t_s - mean_t) ** 2 for s in samples)
    cov = sum((s.t_s - mean_t) * (s.rss_mib - mean_r) for s in samples)
    return cov / var * 3600 if var else 0.0


def write_samples(path: Path, samples: list[Sample], settings: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps({"settings": settings, "samples": [asdict(s) for s in samples]}, indent=1) + "\n")
        return
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(list(Sample.__dataclass_fields__))
        for s in samples:
            writer.writerow([round(s.t_s, 2), round(s.rss_mib, 3), round(s.cpu_s, 3), s.turns, s.restarts, s.errors])


def report(samples: list[Sample], settle_min: float, interval: float, minutes: float) -> None:
    after = [s for s in samples if s.t_s >= settle_min * 60]
    if len(after) < 2:
        print(f"fewer than two samples from minute {settle_min:g} on: nothing to report")
        return
    first, last = after[0], after[-1]
    rss = [s.rss_mib for s in after]
    spread = max(rss) - min(rss)
    slope = slope_per_hour(after)
    scaled = slope * interval / DEFAULT_INTERVAL
    cpu_all = last.cpu_s / (last.t_s / 60)
    cpu_after = (last.cpu_s - first.cpu_s) / ((last.t_s - first.t_s) / 60)
    span = f"from minute {first.t_s / 60:.1f} to {last.t_s / 60:.1f}"
    print(
        f"attach RSS at minute {first.t_s / 60:.1f}: {first.rss_mib:.1f} MiB; at the end ({last.t_s / 60:.1f}): {last.rss_mib:.1f} MiB"
    )
    print(f"attach RSS max − min {span}: {spread:.2f} MiB ({len(after)} samples)")
    print(f"attach RSS slope {span}: {slope:+.2f} MiB/h at -i {interval:g}")
    print(
        f"  scaled to the default interval ({DEFAULT_INTERVAL:g} s): {scaled:+.2f} MiB/h "
        f"(slope × {interval:g}/{DEFAULT_INTERVAL:g}: assumes the growth comes per reading, not per hour)"
    )
    print(f"attach CPU: {cpu_after:.2f} s/min {span}, {cpu_all:.2f} s/min over the whole run, at -i {interval:g}")
    short = " (a short run: the goals are for minute 5 to 60)" if minutes < 60 or settle_min < 5 else ""
    print(
        f"goal: RSS flat within {FLAT_MIB:g} MiB from minute 5 to 60: {spread:.2f} MiB "
        f"{'✓' if spread <= FLAT_MIB else '✗'}{short}"
    )
    print(
        f"goal: slope ≤ {SLOPE_MIB_H:g} MiB/h at the default interval: {scaled:+.2f} MiB/h "
        f"{'✓' if scaled <= SLOPE_MIB_H else '✗'}{short}"
    )


def soak(server, args: argparse.Namespace, samples: list[Sample]) -> float:
    """The chats and attach beside ``server`` for --minutes, a sample every --every seconds into
    ``samples``; both stopped by PID (the chats' threads told to end) whatever happens. Attach's
    terminal bytes per second, in KiB."""
    chats = Chats(server.url, args.chats, CTX // args.chats, args.max_tokens, time.monotonic() + args.minutes * 60 + 40)
    argv = [sys.executable, "-m", "cliff_tui", "attach", "--llama-server", server.url, "-i", str(args.interval)]
    attach: PtyProgram | None = None
    try:
        chats.start()
        attach = PtyProgram(argv, tui_env())
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        if not attach.wait_for(READ_MARKER, 30):
            raise SystemExit(f"attach showed no reading of the server in 30 s: …{attach.screen_tail()}")
        print(
            f"llama-server pid {server.proc.pid} at {server.url} (-c {CTX} -np {args.chats} -t 1), "
            f"attach pid {attach.proc.pid} at -i {args.interval:g} in a {COLS}×{ROWS} pty; "
            f"sampling every {args.every:g} s for {args.minutes:g} min",
            flush=True,
        )
        next_at = t0
        while True:
            now = time.monotonic()
            if now >= next_at:
                if attach.proc.poll() is not None:
                    raise SystemExit(f"attach exited with {attach.proc.returncode}: …{attach.screen_tail()}")
                if server.proc.poll() is not None:
                    raise SystemExit(f"llama-server exited with {server.proc.returncode}")
                samples.append(
                    Sample(
                        now - t0, attach.rss() / MiB, attach.cpu_seconds(), chats.answered, chats.restarts, chats.errors
                    )
                )
                if len(samples) % max(1, round(60 / args.every)) == 1:
                    s = samples[-1]
                    print(
                        f"  {s.t_s / 60:5.1f} min: RSS {s.rss_mib:.1f} MiB, CPU {s.cpu_s:.1f} s, "
                        f"{s.turns} chat turns, {s.restarts} restarts, {s.errors} errors",
                        flush=True,
                    )
                if now >= end:
                    return attach.bytes_read / 1024 / (now - t0)
                next_at += args.every
            time.sleep(max(0.0, min(next_at, end) - time.monotonic()))
    finally:
        if attach is not None:
            attach.stop()
        chats.stop()


def interrupt_on_signals() -> None:
    """SIGTERM unwinds like Ctrl-C, and Ctrl-C does even where the shell started this with SIGINT
    ignored (a background job), so that every ``finally`` stops what it started."""

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60, help="length of the run (default 60)")
    parser.add_argument("--interval", type=float, default=0.05, help="attach's -i (default 0.05)")
    parser.add_argument("--every", type=float, default=10, help="seconds between samples (default 10)")
    parser.add_argument(
        "--settle",
        type=float,
        default=5,
        help="minute from which RSS should be flat (default 5; a third of a short run)",
    )
    parser.add_argument("--chats", type=int, default=2, help="conversations at once, one slot each (default 2)")
    parser.add_argument("--max-tokens", type=int, default=48, help="longest answer (default 48)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "attach_soak.csv", help="the samples")
    args = parser.parse_args()
    if args.minutes <= 0 or args.every <= 0 or args.chats < 1:
        parser.error("--minutes, --every and --chats must be positive")
    settle = min(args.settle, args.minutes / 3)
    from llama_server import find_llama_server, started_llama_server

    if find_llama_server() is None:
        sys.exit("no llama-server: set LLAMA_SERVER, put one on PATH, or run scripts/build_llama_tools.sh llama-server")
    interrupt_on_signals()
    print(command_line(__file__), machine_line(), sep="\n")
    if settle < args.settle:
        print(f"(a run of {args.minutes:g} min: RSS is judged from minute {settle:g}, not {args.settle:g})")
    settings = {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "settle_used": settle}
    samples: list[Sample] = []
    load = OtherLoad().start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="attach-soak-") as tmp,
            started_llama_server(Path(tmp), "--metrics", "-np", str(args.chats), ctx=str(CTX)) as server,
        ):
            terminal_kib_s = soak(server, args, samples)
    finally:
        write_samples(args.out, samples, settings)
    load.stop()
    last = samples[-1]
    print(
        f"chats: {last.turns} turns answered, {last.restarts} conversations restarted, {last.errors} failed requests; "
        f"attach wrote {terminal_kib_s:.1f} KiB/s to its terminal"
    )
    report(samples, settle, args.interval, args.minutes)
    print(f"samples: {args.out}; {load.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
