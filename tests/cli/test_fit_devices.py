"""`cliff-tui fit` over several devices: the per-device table, its JSON, the suggested split, and one
line for each kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fakes.http_server import FakeHttpServer
from rpc import started_rpc_servers

MiB = 2**20


def fit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", *args], capture_output=True, text=True, timeout=120
    )


def one_line_error(proc: subprocess.CompletedProcess, words: str) -> None:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.model
def test_two_sized_devices_split_the_default_model_by_ts():
    record = json.loads(fit("--devices", "200MiB,200MiB", "-ts", "1,1", "-c", "1024", "--json").stdout)
    rpc0, rpc1 = record["devices"]
    assert [rpc0["name"], rpc1["name"]] == ["CUDA0", "CUDA1"]
    assert rpc0["layers"] == list(range(16)) and rpc1["layers"] == list(range(16, 30)) and rpc1["output_layer"]
    assert rpc0["kv_bytes"] == 16 * 1024 * 768 and rpc1["kv_bytes"] == 14 * 1024 * 768  # layers × cells × K+V
    assert record["fits"] and record["max_context"] == 8192  # the trained context caps it
    assert " -ts 1,1 -c 1024 " in record["command"]


@pytest.mark.model
def test_the_small_device_fills_first_and_the_split_that_reaches_furthest_is_suggested():
    proc = fit("--devices", "60MiB,400MiB", "-ts", "1,1", "-c", "8192")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # does not fit as asked
    assert "Does not fit: CUDA0 is" in proc.stdout and "reaches 2,048 tokens, where CUDA0 is full" in proc.stdout
    best = proc.stdout.split("The best split:")[1]
    assert "-ts " in best and "-c 8192" in best


@pytest.mark.model
@pytest.mark.slow
def test_rpc_servers_are_asked_their_memory_and_the_table_matches_llama_server_s_log(tmp_path):
    with started_rpc_servers(tmp_path, [250, 200]) as servers:
        endpoints = ",".join(s.endpoint for s in servers)
        record = json.loads(fit("--rpc", endpoints, "-ts", "1,1", "-c", "1024", "--json").stdout)
    rpc0, rpc1 = record["devices"]
    assert rpc0["endpoint"] == servers[0].endpoint and rpc0["free_bytes"] <= 250 * MiB
    # llama-server's own log for this split: RPC0 33.82 + 12.00 MiB, RPC1 58.28 + 10.50 MiB
    assert round(rpc0["weights_bytes"] / MiB, 2) == 33.82 and round(rpc0["kv_bytes"] / MiB, 2) == 12.00
    assert round(rpc1["weights_bytes"] / MiB, 2) == 58.28 and round(rpc1["kv_bytes"] / MiB, 2) == 10.50


@pytest.mark.model
def test_an_http_server_is_not_an_rpc_server():
    with FakeHttpServer({}) as http:
        proc = fit("--rpc", f"127.0.0.1:{http.port}", "-c", "1024")
    one_line_error(proc, "not an rpc-server")


@pytest.mark.model
@pytest.mark.parametrize(
    "args, words",
    [
        (["--devices", "100MiB,100MiB", "-ts", "1,1,1"], "-ts"),
        (["--devices", "100MiB,100MiB", "-dev", "CUDA5"], "CUDA5"),
        (["--devices", "100MiB,0"], "holds nothing"),
        (["--devices", "lots"], "--devices"),
        (["--devices", "100MiB", "-ts", "a,b"], "is not a number"),
        (["--devices", "100MiB", "-sm", "diagonal"], "-sm"),
        (["--devices", "100MiB", "--compute", "CUDA3=10MiB"], "CUDA3"),
        (["--rpc", "127.0.0.1:1", "--devices", "1GiB"], "not both"),
        (["-ts", "1,1"], "--devices SIZE,SIZE or --rpc"),
    ],
)
def test_bad_split_input_is_one_line(args, words):
    one_line_error(fit(*args, "-c", "1024"), words)
