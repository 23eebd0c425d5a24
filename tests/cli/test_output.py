"""Where the output goes: a reader that stops early, a full disk, a closed stderr, no terminal at
all. One line and an exit code each, never a traceback or a process left waiting; a real
subprocess each time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cliff_tui.units import fmt_bytes

CLIFF = [sys.executable, "-m", "cliff_tui"]
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a user's shell has it
RECORDING = str(Path(__file__).parents[1] / "data" / "smollm2_triangulation.jsonl")
FULL = "cliff-tui: cannot write the output: No space left on device: free space or write it elsewhere"


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*CLIFF, *args], capture_output=True, text=True, timeout=60, env=BUFFERED, **kwargs)


def test_a_headless_watch_stops_when_its_reader_has_what_it_wanted():
    proc = subprocess.Popen(
        [*CLIFF, "watch", "--headless", "-i", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=BUFFERED,
    )
    try:
        assert proc.stdout.readline().strip()  # `| head -1`
        proc.stdout.close()
        assert proc.wait(timeout=20) == 0
        assert proc.stderr.read() == ""
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "args",
    [
        ["watch", "--headless", "-i", "0.1"],
        ["watch", "--headless", "--json"],
        pytest.param(["fit", "--capacity", "8GiB"], marks=pytest.mark.model),  # the default model's table
        ["watch", "--once"],
    ],
)
def test_a_full_disk_under_the_output_is_one_line(args):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*CLIFF, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=30, env=BUFFERED)
    assert (proc.returncode, proc.stderr.strip()) == (2, FULL)


def test_with_stderr_closed_nothing_meant_for_it_lands_in_the_output():
    proc = run("fit", "-m", "/nonexistent.gguf", preexec_fn=lambda: os.close(2))
    assert (proc.returncode, proc.stdout) == (2, "")


@pytest.mark.parametrize(
    "args, instead",
    [
        (["watch"], "--headless for lines of text"),
        (["attach", "--pid", "1"], "--once for one reading"),
        (["replay", RECORDING], "cliff-tui export FILE for its tables"),
    ],
)
def test_the_dashboard_without_a_terminal_says_what_to_use_instead(args, instead):
    proc = run(*args, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == f"cliff-tui: the dashboard needs a terminal (stdin and stderr): use {instead}, or ssh -t"
    )
    assert proc.stdout == ""


def test_no_terminal_is_said_before_a_recording_is_created(tmp_path):
    target = tmp_path / "r.jsonl"
    proc = run("watch", "--record", str(target), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "the dashboard needs a terminal" in proc.stderr
    assert not target.exists()


@pytest.mark.parametrize(
    "args, deepest",
    [
        (["--depths", "256,512"], "512"),
        (["--fill", "synthetic"], "65,000"),  # the default depths, planned
    ],
)
def test_a_triangulation_whose_depths_do_not_fit_the_given_context_says_so(args, deepest, tiny_model):
    proc = run("triangulate", "-m", str(tiny_model), "--headless", *args, "-n", "8", "-c", "300")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"cliff-tui: -c 300 is smaller than the depth {deepest} + "
        f"--n-gen 8 = {int(deepest.replace(',', '')) + 8:,}: raise -c, "
        "or leave it out to size each context"
    )


def test_a_triangulation_refuses_a_reserve_no_tier_here_holds_before_it_loads_the_model(tiny_model):
    reserve = 4 * psutil.virtual_memory().total  # above any GPU's VRAM on machines this runs on
    proc = run(
        "triangulate", "-m", str(tiny_model), "--headless", "--depths", "256", "-n", "8", "--reserve", str(reserve)
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1  # no progress line: nothing loaded
    assert proc.stderr.startswith(
        f"cliff-tui: --reserve {fmt_bytes(reserve)} is more than any memory tier here holds (the largest: "
    )
    assert proc.stderr.endswith("): pass a smaller --reserve\n")


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["run", "-c", "32", "--depth", "64"],
            "-c 32 is smaller than the depth 64 + --n-gen 128 = 192: raise -c, or leave it out to size each context",
        ),
        (
            ["triangulate", "--depths", "256", "-ctv", "q8_0", "-fa", "off"],
            "a quantised V cache (-ctv q8_0) needs flash attention: use -fa on (or leave -fa auto)",
        ),
    ],
)
def test_settings_a_run_refuses_are_said_before_the_screen_opens(args, line, tiny_model):
    command, *rest = args
    proc = run(
        command, "-m", str(tiny_model), *rest, stdin=subprocess.DEVNULL
    )  # a screen first would ask for a terminal
    assert proc.returncode == 2
    assert proc.stderr == f"cliff-tui: {line}\n"


def test_a_triangulation_refuses_a_pipe_as_its_prompt_file(tmp_path, tiny_model):
    fifo = tmp_path / "doc"
    os.mkfifo(fifo)
    proc = run(
        "triangulate", "-m", str(tiny_model), "--headless", "--depths", "256", "-n", "8", "--prompt-file", str(fifo)
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"cliff-tui: {fifo} is a pipe: triangulate reads the prompt file once per depth, so pass a regular file"
    )


def test_a_run_whose_context_does_not_fit_says_so_once(tiny_model):
    done = run("run", "--headless", "-m", str(tiny_model), "-c", "2000000000", "--depth", "64", "-n", "8")
    said = [line for line in done.stderr.splitlines() if "does not fit" in line]
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert said[0].startswith("cliff-tui: a context of 2,000,000,000 tokens does not fit: ")
