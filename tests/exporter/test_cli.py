"""``cliff-tui exporter`` as a user runs it: a real process, real sockets, bad input."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from cliff_tui.listen import EXPORTER_PORT, parse_bind
from exporting.running import clean_env, exporter, stop
from exporting.scrape import scrape_url, value
from fakes.http_server import closed_port


def run_exporter(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cliff_tui", "exporter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
    )


def test_it_serves_this_machine_and_stops_cleanly_on_sigterm():
    with exporter("--bind", "127.0.0.1:0", "-i", "0.25") as (url, proc, lines):
        assert url.startswith("http://127.0.0.1:") and not any("warning" in line for line in lines)
        deadline = time.monotonic() + 20
        while True:
            _names, series = scrape_url(url + "/metrics")
            if value(series, "cliff_memory_used_bytes", tier="ram") is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert value(series, "cliff_memory_used_bytes", tier="ram") > 0
        assert value(series, "cliff_memory_capacity_bytes", tier="ram") > 0
        assert value(series, "cliff_sign_level", sign="2") is not None
        assert value(series, "cliff_exporter_process_cpu_seconds_total") > 0
        assert stop(proc) == 0


def test_an_unreachable_server_reads_up_0_and_the_exporter_keeps_serving():
    dead = f"http://127.0.0.1:{closed_port()}"
    with exporter("--bind", "127.0.0.1:0", "--llama-server", dead, "--timeout", "0.5") as (url, proc, _):
        deadline = time.monotonic() + 20
        up = None
        while up is None and time.monotonic() < deadline:
            _, series = scrape_url(url + "/metrics")
            up = value(series, "cliff_up", server=dead)
            time.sleep(0.2)
        assert up == 0
        time.sleep(2.5)  # past the first retries: still alive, still answering
        assert proc.poll() is None
        _, series = scrape_url(url + "/metrics")
        assert value(series, "cliff_up", server=dead) == 0
        assert value(series, "cliff_memory_used_bytes", tier="ram") > 0


def test_a_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_exporter("--bind", f"127.0.0.1:{port}")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "port is in use" in proc.stderr and "Traceback" not in proc.stderr


def test_a_corrupt_from_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "tri.json"
    bad.write_text('{"projection": {"target": 8192}, "slope_bytes_per_token": {"allocated": "lots"}}')
    cut = tmp_path / "cut.json"
    cut.write_bytes(b'{"cache_types": "f16", "proj')
    huge = tmp_path / "huge.json"
    huge.write_text('{"projection": {"target": 8192}, "slope_bytes_per_token": {"allocated": 1' + "0" * 400 + "}}")
    for path in (bad, cut, huge, tmp_path / "missing.json"):
        proc = run_exporter("--bind", "127.0.0.1:0", "--from", str(path))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "serving" not in proc.stderr  # refused before it listened


def test_a_bad_bind_is_one_line_and_exit_2():
    for bind in ("127.0.0.1:99999", "nowhere:x", "[::1", "127.0.0.1:²", "a..b:10450", "x" * 64 + ".lan:10450"):
        proc = run_exporter("--bind", bind)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--bind" in proc.stderr, proc.stderr


@pytest.mark.parametrize("bind", ["[fe80::1]:0", "[fe80::1%lo]:0"])
def test_a_link_local_bind_says_what_to_use_instead(bind):
    proc = run_exporter("--bind", bind)
    assert (proc.returncode, proc.stderr) == (
        2,
        f"cliff-tui: cannot listen on {bind}, a link-local address: use "
        "another of this machine's addresses, or [::]:0 for all of them\n",
    )


def test_a_wider_bind_prints_one_warning_line():
    with exporter("--bind", "0.0.0.0:0") as (url, _, lines):
        assert len(lines) == 2 and "warning" in lines[0] and "0.0.0.0" in lines[0]
        port = url.rsplit(":", 1)[1]
        _, series = scrape_url(f"http://127.0.0.1:{port}/metrics")
        assert value(series, "cliff_verdict_level") is not None


@pytest.mark.parametrize(
    "text, host, port, loopback",
    [
        ("127.0.0.1:9464", "127.0.0.1", 9464, True),
        ("[::1]:9464", "::1", 9464, True),
        ("localhost", "localhost", EXPORTER_PORT, True),
        ("9464", "127.0.0.1", 9464, True),
        (":9464", "0.0.0.0", 9464, False),
        ("10.0.0.5:0", "10.0.0.5", 0, False),
        ("gpu-box-1:10450", "gpu-box-1", 10450, False),
    ],
)
def test_bind_addresses(text, host, port, loopback):
    bind = parse_bind(text)
    assert (bind.host, bind.port, bind.loopback) == (host, port, loopback)


def test_the_followed_process_is_exported():
    import os

    from cliff_tui.exporter.server import Exporter
    from cliff_tui.probes.sampler import Sampler
    from cliff_tui.session import Session
    from exporting.scrape import scrape_registry

    session = Session(queued=False)
    session.feed(Sampler(pid=os.getpid()).sample())
    _, series = scrape_registry(Exporter(session).registry)
    assert value(series, "cliff_process_resident_bytes", pid=str(os.getpid())) > 10 * 2**20
