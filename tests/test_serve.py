"""``cliff-tui serve``: the dashboard in a real headless Chromium, read back from the screenshot's
pixels (Tesseract OCR: the terminal is drawn on a canvas, there is no text in the page to read)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from cliff_tui.probes.system import read_memory
from cliff_tui.units import fmt_bytes
from exporting.running import clean_env
from fakes.http_server import free_port
from needs import need
from paths import free_pid

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import browser  # noqa: E402 - scripts/browser.py

FREE_PID = free_pid()


def serve(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cliff_tui", "serve", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        start_new_session=True,
    )


def wait_page(url: str, proc: subprocess.Popen, limit: float = 60) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            with opener.open(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    pytest.fail("serve did not answer")


def stop(proc: subprocess.Popen) -> int:
    """SIGINT, as a user stops it; then whatever is left of its process group (the tabs' apps)."""
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return code


def ocr(png: Path) -> str:
    done = subprocess.run(["tesseract", str(png), "stdout"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_browser_shows_the_ram_tier(tmp_path):
    need(
        browser.find_chromium() is not None and shutil.which("tesseract") is not None,
        "needs chromium and tesseract-ocr (apt-get install chromium tesseract-ocr; .ci/run does)",
    )
    port = free_port()
    proc = serve("--bind", f"127.0.0.1:{port}", "--", "watch", "-i", "0.25")
    try:
        wait_page(f"http://127.0.0.1:{port}/", proc)
        shot = asyncio.run(
            browser.screenshot(f"http://127.0.0.1:{port}/?fontsize=18", tmp_path / "serve.png", settle_s=3.0)
        )
        apps = list(psutil.Process(proc.pid).children(recursive=True))
        text = ocr(shot)
    finally:
        assert stop(proc) == 0
    ram, _ = read_memory()
    print(f"\nOCR of the served dashboard:\n{text[:600]}")
    assert "System RAM" in text
    assert fmt_bytes(ram.total_bytes) in text  # this machine's RAM, drawn in the browser
    gone = psutil.wait_procs(apps, timeout=10)[1]
    assert not gone, f"the tab's app outlived serve: {gone}"


def test_a_port_in_use_is_one_line_and_exit_2():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "cliff_tui", "serve", "--bind", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
        )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "port is in use" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--", "serve"], "serve cannot serve itself"),
        (["--", "exporter"], "the exporter has no screen"),
        (["--", "fit"], "fit prints a table"),
        (["--", "watch", "--once"], "--once and --headless print instead of drawing a screen"),
        (["--", "run", "--headless"], "--once and --headless print instead of drawing a screen"),
        (["--", "watch", "--intervall", "1"], "unrecognized arguments: --intervall 1"),
        (["--", "replay", "/nonexistent.jsonl"], "recording not found: /nonexistent.jsonl"),
        (["--", "run", "-m", "/nonexistent.gguf"], "model file not found: /nonexistent.gguf"),
        (
            ["--", "attach", "--llama-server", "ftp://x"],
            "--llama-server: 'ftp://x' is not an http(s)://host[:port] URL",
        ),
        (["--", "watch", "--record", "r.jsonl"], "they cannot share one --record file: record from a terminal"),
        # these two read the default model's header first
        pytest.param(
            ["--", "run", "-c", "32", "--depth", "64"],
            "-c 32 is smaller than the depth 64 + --n-gen 128 = 192",
            marks=pytest.mark.model,
        ),
        pytest.param(
            ["--", "triangulate", "-ctv", "q4_0", "-fa", "off"],
            "a quantised V cache (-ctv q4_0) needs flash attention",
            marks=pytest.mark.model,
        ),
        (["--", "watch", "--pid", str(FREE_PID)], f"no process with PID {FREE_PID}"),
        (["--public-url", "http://[gpu-box"], "--public-url: 'http://[gpu-box' is not an http(s)://host[:port] URL"),
        (["--public-url", "ftp://gpu-box"], "--public-url: 'ftp://gpu-box' is not an http(s)://host[:port] URL"),
    ],
)
def test_what_cannot_be_served_is_refused_before_it_listens(args, words):
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "serve", "--bind", f"127.0.0.1:{free_port()}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert proc.returncode == 2 and words in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr, (
        proc.stderr
    )


def test_a_public_url_is_read_as_browsers_need_it():
    from cliff_tui.listen import Bind
    from cliff_tui.serve import public_url

    assert public_url(Bind("0.0.0.0", 10451), "gpu-box:10451/") == "http://gpu-box:10451"
    assert public_url(Bind("0.0.0.0", 10451), "https://lab.example/cliff/") == "https://lab.example/cliff"


def test_a_wider_bind_warns_once_and_names_this_machine_for_browsers():
    from cliff_tui.listen import Bind
    from cliff_tui.serve import public_url, served_command

    port = free_port()
    proc = serve("--bind", f"0.0.0.0:{port}", "--", "attach", "--llama-server", "http://127.0.0.1:1")
    try:
        wait_page(f"http://127.0.0.1:{port}/", proc)
    finally:
        stop(proc)
    err = proc.stderr.read()
    assert err.count("warning") == 1 and "0.0.0.0" in err
    assert "0.0.0.0" not in public_url(Bind("0.0.0.0", port))
    line = served_command(["attach", "--llama-server", "http://h:1/?a=b c"])
    assert line.endswith("attach --llama-server 'http://h:1/?a=b c'")
