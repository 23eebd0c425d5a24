"""The watcher threads reniced while a model runs."""

from __future__ import annotations

import subprocess
import sys

RENICE_CHECK = """
import os, sys, threading
from cliff_tui import thread_priority as priority

def parked(release):
    ids, ready = [], threading.Event()
    def park():
        ids.append(threading.get_native_id()); ready.set(); release.wait(10)
    threading.Thread(target=park, daemon=True).start()
    ready.wait(5)
    return ids[0]

release = threading.Event()
nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
mine = nice(threading.get_native_id())  # what this process started with (pytest's own may be lowered)
watcher = parked(release)
assert priority.lower_other_threads(mine + 5) >= 1
assert nice(watcher) == mine + 5, nice(watcher)
assert nice(threading.get_native_id()) == mine
started_by_engine = parked(release)
assert nice(started_by_engine) == mine, "threads the engine starts keep its priority"
sys.platform = "darwin"
assert priority.lower_other_threads() == 0 and not priority.lower_thread_priority(started_by_engine)
release.set()
"""


def test_the_engine_thread_lowers_the_watchers_and_keeps_its_own_priority():
    # A fresh process: an in-process app test has lowered this one's threads already.
    proc = subprocess.run([sys.executable, "-c", RENICE_CHECK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


WATCHER_CHECK = """
import os, sys, threading
from cliff_tui import thread_priority as priority
from cliff_tui.cli import main

nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
mine = nice(threading.get_native_id())
sys.argv = ["cliff-tui", *sys.argv[1:]]
main()
assert nice(threading.get_native_id()) == max(mine, priority.WATCHER_NICE), nice(threading.get_native_id())
later = []
thread = threading.Thread(target=lambda: later.append(nice(threading.get_native_id())))
thread.start(); thread.join()
assert later == [max(mine, priority.WATCHER_NICE)], later
"""


def test_a_command_that_only_watches_lowers_its_whole_process():
    for argv in (["watch", "--once", "--no-servers"], ["attach", "--list"]):
        proc = subprocess.run([sys.executable, "-c", WATCHER_CHECK, *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (argv, proc.stderr)


def test_a_command_that_runs_a_model_keeps_the_engines_priority():
    check = WATCHER_CHECK.replace("max(mine, priority.WATCHER_NICE)", "mine")
    proc = subprocess.run(
        [sys.executable, "-c", check, "fit", "--model", "/nonexistent.gguf"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
