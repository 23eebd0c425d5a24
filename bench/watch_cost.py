"""What `cliff-tui watch` costs next to a chat session: CPU, terminal bytes, memory.

Runs `cliff-tui watch -i 0.25` (4 Hz) and btop (Debian's package, update_ms = 250 from a
temporary config) side by side, each in its own pseudo-terminal of 120×40, for --minutes.
Both ptys are drained continuously, as a terminal would. Reports, per tool: CPU seconds per
minute (user + system, children included), bytes written to the terminal per second, and for
cliff-tui the RSS after 1 minute and at the end, and each of its threads' CPU and wake-ups.

    python bench/watch_cost.py --minutes 10            # the figures in bench/RESULTS.md
    python bench/watch_cost.py --minutes 3 --churn 6   # RAM moving: every frame repaints
    python bench/watch_cost.py --minutes 2 --churn 6 --rounds 5   # the same, its median of five
    python bench/watch_cost.py --minutes 1 --no-btop   # a quick look
    python bench/watch_cost.py --first-frame 5         # seconds from start to the first frame
    python bench/watch_cost.py --textual-floor 4       # a bare Textual app changing 0, 1, 27 lines at 4 Hz
    python bench/watch_cost.py --private-ab 5 --minutes 2 --churn 2   # Textual's private paths, each A/B

On an idle machine the RAM sparkline settles (every cell the same bar) and cliff-tui repaints
almost nothing, while btop redraws its graphs every tick. ``--churn GIB`` runs a helper that
allocates and frees GIB of RAM every second, so both tools have something new to draw each frame.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass, field

import psutil
from benchutil import tree_cpu_seconds

COLS, ROWS = 120, 40


@dataclass
class Terminal:
    name: str
    proc: subprocess.Popen
    master: int
    bytes_read: int = 0
    rss_samples: dict[float, int] = field(default_factory=dict)

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    def threads(self) -> dict[int, tuple[float, int]]:
        """Each thread's CPU seconds and voluntary context switches (its wake-ups), by thread id."""
        out = {}
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{self.proc.pid}/task/{tid}/status") as f:
                    woken = int(f.read().split("\nvoluntary_ctxt_switches:")[1].split()[0])
            except (OSError, IndexError):
                continue
            out[int(tid)] = ((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), woken)
        return out


def spawn(name: str, argv: list[str], env: dict[str, str]) -> Terminal:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    return Terminal(name, proc, master)


def btop_env(base: dict[str, str]) -> dict[str, str]:
    home = tempfile.mkdtemp(prefix="bench-btop-")
    os.makedirs(os.path.join(home, ".config", "btop"))
    with open(os.path.join(home, ".config", "btop", "btop.conf"), "w") as f:
        f.write("update_ms = 250\n")
    return {**base, "HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config")}


def stop_all(terminals: list[Terminal], churn: subprocess.Popen | None) -> None:
    """The RAM churner and every terminal's program, whatever happened."""
    if churn is not None:
        churn.kill()
    for t in terminals:
        t.proc.terminate()
        try:
            t.proc.wait(5)
        except subprocess.TimeoutExpired:
            t.proc.kill()


def drain(terminals: list[Terminal], seconds: float) -> None:
    end = time.monotonic() + seconds
    fds = {t.master: t for t in terminals}
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select(list(fds), [], [], min(left, 0.1))
        for fd in ready:
            try:
                fds[fd].bytes_read += len(os.read(fd, 65536))
            except OSError:
                fds.pop(fd)


CHURN = """
import os, sys, time
size = int(float(sys.argv[1]) * 2**30)
parent = os.getppid()
while os.getppid() == parent:  # a bench killed without its cleanup must not leave this running
    block = b"\\x01" * size  # written, so resident
    time.sleep(1)
    del block
    time.sleep(1)
"""


def first_frame_s(argv: list[str], env: dict[str, str], marker: bytes, timeout_s: float = 10) -> float:
    """Seconds from starting ``argv`` in a fresh pty until its output shows ``marker`` (for
    cliff-tui, the first frame with a RAM reading on it)."""
    t0 = time.monotonic()
    term = spawn("first frame", argv, env)
    seen = b""
    try:
        while time.monotonic() - t0 < timeout_s:
            ready, _, _ = select.select([term.master], [], [], 0.05)
            if ready:
                seen = (seen + os.read(term.master, 65536))[-65536:]
                if marker in seen:
                    return time.monotonic() - t0
        raise SystemExit(f"no first frame within {timeout_s:.0f} s: {argv[0]}")
    finally:
        term.proc.kill()
        term.proc.wait()
        os.close(term.master)


READING = b"iB / "  # "6.1 GiB / 23.5 GiB": a frame with the RAM tier read, not its title alone
ONE_WIDGET_APP = """
from textual.app import App
from textual.widgets import Static

class OneWidget(App):
    def compose(self):
        yield Static("RAM")

OneWidget().run()
"""


def first_frames(cliff: str, btop: str | None, env: dict[str, str], reps: int) -> None:
    """The first frame of each tool, alternated, ``reps`` times: medians. Beside them a Textual
    app of one widget: the floor of any Textual screen on this machine."""
    import statistics

    times: dict[str, list[float]] = {"cliff-tui watch": [], "btop": [], "a one-widget Textual app": []}
    for _ in range(reps):
        times["cliff-tui watch"].append(first_frame_s([cliff, "watch", "-i", "0.25"], env, READING))
        times["a one-widget Textual app"].append(first_frame_s([sys.executable, "-c", ONE_WIDGET_APP], env, b"RAM"))
        if btop is not None:
            times["btop"].append(first_frame_s([btop, "--utf-force"], btop_env(env), b"mem"))
    for name, values in times.items():
        if values:
            print(
                f"first frame, {name}: median {statistics.median(values):.2f} s "
                f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} starts)"
            )


FLOOR_APP = """
import sys
from rich.segment import Segment
from textual.app import App
from cliff_tui.ui.widgets import LineView

LINES = int(sys.argv[1])

class Floor(App):
    def compose(self):
        if LINES:
            yield LineView()

    def on_mount(self):
        self.frame = 0
        self.set_interval(0.25, self.tick)

    def tick(self):
        self.frame += 1
        if LINES:
            frame = self.frame
            parts = tuple(((n, frame), lambda width, n=n: [[Segment(f"RAM {n}.{frame} GiB")]]) for n in range(LINES))
            self.query_one(LineView).show_parts(parts)

Floor().run()
"""
FLOOR_LINES = (0, 1, 27)  # nothing; a headline; a graph's 26 rows and its headline


def textual_floor(env: dict[str, str], reps: int, seconds: float, warmup: float) -> None:
    """What Textual itself costs to change ``FLOOR_LINES`` lines of one of cliff-tui's line views
    every frame at 4 Hz in a 120×40 pty, the orders alternated, ``reps`` times: medians."""
    import statistics

    cpu: dict[int, list[float]] = {n: [] for n in FLOOR_LINES}
    kib: dict[int, list[float]] = {n: [] for n in FLOOR_LINES}
    for rep in range(reps):
        for lines in FLOOR_LINES if rep % 2 == 0 else FLOOR_LINES[::-1]:
            term = spawn(f"{lines} lines", [sys.executable, "-c", FLOOR_APP, str(lines)], env)
            try:
                drain([term], warmup)
                cpu0, bytes0, t0 = term.cpu_seconds(), term.bytes_read, time.monotonic()
                drain([term], seconds)
                elapsed = time.monotonic() - t0
                cpu[lines].append((term.cpu_seconds() - cpu0) / elapsed * 60)
                kib[lines].append((term.bytes_read - bytes0) / elapsed / 1024)
            finally:
                term.proc.kill()
                term.proc.wait()
                os.close(term.master)
    print(f"| lines changed every frame (4 Hz, {COLS}×{ROWS}) | CPU s per minute, median (min–max) | terminal KiB/s |")
    print("| ---: | ---: | ---: |")
    for lines in FLOOR_LINES:
        print(
            f"| {lines} | {statistics.median(cpu[lines]):.2f} ({min(cpu[lines]):.2f}–{max(cpu[lines]):.2f}) "
            f"| {statistics.median(kib[lines]):.1f} |"
        )


def byte_compile_cliff_tui() -> None:
    """Write cliff-tui's bytecode, as ``pip install`` does and as a first run does on a user's
    machine. Where ``PYTHONDONTWRITEBYTECODE`` is set (some sandboxes and containers), every
    start would otherwise compile each module from source again, and the first frame would
    time that compilation."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("cliff_tui")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("cliff_tui is not importable here: run the bench with cliff-tui's venv")
    compileall.compile_dir(spec.submodule_search_locations[0], quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=5, help="seconds ignored at start")
    parser.add_argument("--no-btop", action="store_true")
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure N times with fresh processes and give the median ratio"
    )
    parser.add_argument(
        "--first-frame",
        type=int,
        default=0,
        metavar="N",
        help="only time the first frame of N fresh starts of each tool",
    )
    parser.add_argument(
        "--churn",
        type=float,
        default=0,
        metavar="GIB",
        help="allocate and free GIB of RAM every second while measuring",
    )
    parser.add_argument(
        "--private-ab",
        type=int,
        default=0,
        metavar="N",
        help="only cliff-tui with and without each of Textual's private paths side by side, N rounds",
    )
    parser.add_argument(
        "--textual-floor",
        type=int,
        default=0,
        metavar="N",
        help="only a bare Textual app changing 0, 1 and 27 lines every frame, N alternations of --minutes each",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor", "LANG": "C.UTF-8"}
    byte_compile_cliff_tui()
    if args.textual_floor:
        textual_floor(env, args.textual_floor, args.minutes * 60, args.warmup)
        return 0
    if args.private_ab:
        private_ab(env, args)
        return 0
    if args.first_frame:
        cliff = shutil.which("cliff-tui") or sys.exit("cliff-tui is not on PATH: activate its venv")
        first_frames(cliff, None if args.no_btop else shutil.which("btop"), env, args.first_frame)
        return 0
    cliff = shutil.which("cliff-tui") or sys.exit("cliff-tui is not on PATH: activate its venv")
    btop = None if args.no_btop else shutil.which("btop") or sys.exit("btop is not installed: apt-get install btop")
    ratios = []
    for round_number in range(1, args.rounds + 1):
        if args.rounds > 1:
            print(f"\n## round {round_number} of {args.rounds}\n")
        ratio = measure(cliff, btop, env, args)
        if ratio is not None:
            ratios.append(ratio)
    if len(ratios) > 1:
        print(
            f"\nCPU ratio cliff-tui / btop by round: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f}"
        )
    return 0


def measure(cliff: str, btop: str | None, env: dict[str, str], args: argparse.Namespace) -> float | None:
    """One side-by-side run with fresh processes, the churn helper's too: under churn cliff-tui's
    CPU moves from one set of processes to the next (see bench/RESULTS.md, 'Watch CPU against
    btop')."""
    churn = subprocess.Popen([sys.executable, "-c", CHURN, str(args.churn)]) if args.churn else None
    terminals = [spawn("cliff-tui watch -i 0.25", [cliff, "watch", "-i", "0.25"], env)]
    if btop is not None:
        terminals.append(spawn("btop (update_ms 250)", [btop, "--utf-force"], btop_env(env)))
    try:
        drain(terminals, args.warmup)
        start = {t.name: (t.cpu_seconds(), t.bytes_read, time.monotonic()) for t in terminals}
        threads = terminals[0].threads()
        total = args.minutes * 60
        drain(terminals, min(60, total))
        terminals[0].rss_samples[min(1.0, args.minutes)] = terminals[0].rss()
        if total > 60:
            drain(terminals, total - 60)
        terminals[0].rss_samples[args.minutes] = terminals[0].rss()
        ratio = report(terminals, start)
        report_threads(threads, terminals[0].threads(), time.monotonic() - start[terminals[0].name][2])
        return ratio
    finally:
        stop_all(terminals, churn)


def report(terminals: list[Terminal], start: dict) -> float | None:
    """The table of CPU and bytes; cliff-tui's CPU over btop's, where both ran."""
    rows = []
    for t in terminals:
        cpu0, bytes0, t0 = start[t.name]
        elapsed = time.monotonic() - t0
        rows.append((t.name, (t.cpu_seconds() - cpu0) / elapsed * 60, (t.bytes_read - bytes0) / elapsed / 1024))
    print(f"| tool | CPU s per minute | terminal KiB/s at {COLS}×{ROWS} |")
    print("| --- | ---: | ---: |")
    for name, cpu, kib in rows:
        print(f"| {name} | {cpu:.2f} | {kib:.1f} |")
    ratio = rows[0][1] / rows[1][1] if len(rows) == 2 else None
    if ratio is not None:
        print(f"\nCPU ratio cliff-tui / btop: {ratio:.2f}")
    rss = terminals[0].rss_samples
    minutes = sorted(rss)
    print(
        f"cliff-tui RSS after {minutes[0]:g} min: {rss[minutes[0]] / 2**20:.1f} MiB; "
        f"after {minutes[-1]:g} min: {rss[minutes[-1]] / 2**20:.1f} MiB "
        f"({(rss[minutes[-1]] - rss[minutes[0]]) / 2**20:+.1f} MiB)"
    )
    return ratio


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES_SCRIPT = os.path.join(ROOT, "tests", "support", "textual_names.py")
# Each copy runs with the names given removed (tests/support/textual_names.py): cliff-tui's
# door then takes Textual's stock path for what they served.
VARIANTS = {
    "every private path": (),
    "stock paint (Widget.refresh)": ("Widget._set_dirty",),
    "stock driver (Textual's input thread)": ("textual._xterm_parser.XTermParser",),
}
# Each private path against the copy that differs from it in that path alone.
PAIRS = {
    "the paint at the end of a tick": ("every private path", "stock paint (Widget.refresh)"),
    "the input thread that sleeps": ("every private path", "stock driver (Textual's input thread)"),
}


def private_ab(env: dict[str, str], args: argparse.Namespace) -> None:
    """Copies of `watch -i 0.25` side by side, one per variant, the start order rotated each
    round; per path, the CPU of the copy with it over the copy without it, by round."""
    env = {**env, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "tui"), os.path.join(ROOT, "tests", "support")])}
    names = list(VARIANTS)
    ratios: dict[str, list[float]] = {path: [] for path in PAIRS}
    for round_number in range(args.private_ab):
        order = names[round_number % len(names) :] + names[: round_number % len(names)]
        cpu = ab_round(order, env, args)
        print(f"\n## round {round_number + 1} of {args.private_ab}\n")
        print("| copy | CPU s per minute |\n| --- | ---: |")
        for name in names:
            print(f"| {name} | {cpu[name]:.3f} |")
        for path, (with_it, without_it) in PAIRS.items():
            ratios[path].append(cpu[with_it] / cpu[without_it])
    print("\n| private path | CPU with / without, by round | median | range |\n| --- | --- | ---: | --- |")
    for path, values in ratios.items():
        print(
            f"| {path} | {', '.join(f'{v:.3f}' for v in values)} | **{statistics.median(values):.3f}** "
            f"| {min(values):.3f}–{max(values):.3f} |"
        )


def ab_round(order: list[str], env: dict[str, str], args: argparse.Namespace) -> dict[str, float]:
    churn = subprocess.Popen([sys.executable, "-c", CHURN, str(args.churn)]) if args.churn else None
    terminals = []
    try:
        for name in order:
            without = [arg for removed in VARIANTS[name] for arg in ("--without", removed)]
            argv = [sys.executable, NAMES_SCRIPT, *without, "--", "watch", "-i", "0.25"]
            terminals.append(spawn(name, argv, env))
        drain(terminals, args.warmup)
        start = {t.name: (t.cpu_seconds(), time.monotonic()) for t in terminals}
        drain(terminals, args.minutes * 60)
        return {
            t.name: (t.cpu_seconds() - start[t.name][0]) / (time.monotonic() - start[t.name][1]) * 60 for t in terminals
        }
    finally:
        stop_all(terminals, churn)


# cliff-tui's threads in the order they start: the sampler (where it reads a GPU; else the
# screen samples in its tick) starts before the app loads, Textual's driver starts its output
# writer before its input reader
def thread_names() -> tuple[str, ...]:
    from cliff_tui.probes.sampler import Sampler

    sampler = Sampler()
    own = ("sampler",) if sampler.reads_gpus() else ()
    sampler.close()
    return (
        "main (Textual's loop, the frames, the samples where no GPU is read)",
        *own,
        "Textual's output writer",
        "Textual's input reader",
    )


def report_threads(before: dict[int, tuple[float, int]], after: dict[int, tuple[float, int]], elapsed: float) -> None:
    names = thread_names()
    print("\n| cliff-tui thread | CPU s per minute | wake-ups per second |")
    print("| --- | ---: | ---: |")
    for i, tid in enumerate(sorted(set(before) & set(after))):
        (cpu0, woken0), (cpu1, woken1) = before[tid], after[tid]
        name = names[i] if i < len(names) else f"thread {tid}"
        print(f"| {name} | {(cpu1 - cpu0) / elapsed * 60:.2f} | {(woken1 - woken0) / elapsed:.1f} |")


if __name__ == "__main__":
    raise SystemExit(main())
