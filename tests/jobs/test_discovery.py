"""Servers found by their processes: the settings read from a command line and environment, the kinds
of command line recognised, and real llama-servers on random loopback ports found without a URL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from cliff_tui.jobs.attach import AttachJob
from cliff_tui.jobs.attach_once import attach_once, list_servers
from cliff_tui.probes.endpoints import kinds
from cliff_tui.probes.endpoints.discovery import find_servers
from cliff_tui.probes.endpoints.processes import classify
from cliff_tui.probes.endpoints.server_flags import llama_server_settings
from cliff_tui.probes.sampler import Sampler
from fakes.http_server import Route
from fakes.servers import plain
from llama_server import started_llama_server, stop
from needs import unavailable
from paths import ROOT

LLAMA_CPP_PYTHON, LLAMA_SERVER_KIND, LM_STUDIO = (
    kinds.LLAMA_CPP_PYTHON.name,
    kinds.LLAMA_SERVER.name,
    kinds.LM_STUDIO.name,
)
OLLAMA_RUNNER, OLLAMA_SERVE = kinds.OLLAMA_RUNNER.name, kinds.OLLAMA_SERVE.name

PROPS = json.loads((ROOT / "tests" / "data" / "endpoints" / "llama_props_unified.json").read_text())


def settings_of(argv: list[str], env: dict | None = None, props: object = None) -> dict[str, tuple[str, str]]:
    return {s.name: (s.value, s.source) for s in llama_server_settings(argv, env or {}, props)}


def test_flags_win_over_the_environment_and_say_where_they_came_from():
    got = settings_of(
        ["llama-server", "-m", "m.gguf", "-c", "16384", "--cache-ram=512", "-fa", "on"],
        {"LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_N_GPU_LAYERS": "99", "LLAMA_ARG_CACHE_TYPE_K": "q8_0"},
    )
    assert got["ctx_size"] == ("16384", "command line (-c)")
    assert got["cache_ram"] == ("512", "command line (--cache-ram)")
    assert got["n_gpu_layers"] == ("99", "environment (LLAMA_ARG_N_GPU_LAYERS)")
    assert got["cache_type_k"] == ("q8_0", "environment (LLAMA_ARG_CACHE_TYPE_K)")
    assert got["cache_type_v"] == ("f16", "default (not given)")
    assert got["ctx_checkpoints"] == ("32", "default (not given)")
    assert got["flash_attn"] == ("on", "command line (-fa)")


def test_the_split_over_devices_is_read_with_where_it_came_from():
    got = settings_of(
        ["llama-server", "--rpc", "10.0.0.2:50052,10.0.0.3:50052", "-ts", "3,1", "-sm=layer"],
        {"LLAMA_ARG_DEVICE": "RPC1,RPC0", "LLAMA_ARG_MAIN_GPU": "1"},
    )
    assert got["rpc"] == ("10.0.0.2:50052,10.0.0.3:50052", "command line (--rpc)")
    assert got["tensor_split"] == ("3,1", "command line (-ts)")
    assert got["split_mode"] == ("layer", "command line (-sm)")
    assert got["device"] == ("RPC1,RPC0", "environment (LLAMA_ARG_DEVICE)")
    assert got["main_gpu"] == ("1", "environment (LLAMA_ARG_MAIN_GPU)")
    assert settings_of(["llama-server"])["tensor_split"] == ("by free memory", "default (not given)")


def test_the_unified_cache_is_a_fact_read_from_the_flags():
    auto = settings_of(["llama-server", "-c", "16384"], props=PROPS)
    assert auto["kv_unified"] == ("true", "default (-np is auto)") and auto["slots"][0] == "4"
    assert auto["pool_ctx"] == ("16384", "command line (-c)")
    split = settings_of(["llama-server", "-c", "1024", "-np", "4"])
    assert split["kv_unified"] == ("false", "default (-np 4 without --kv-unified)")
    assert split["slots"] == ("4", "command line (-np)")
    forced = settings_of(["llama-server", "-np", "4", "-kvu"])
    assert forced["kv_unified"] == ("true", "command line (-kvu)")
    by_env = settings_of(["llama-server", "-np", "2"], {"LLAMA_ARG_KV_UNIFIED": "1"})
    assert by_env["kv_unified"] == ("true", "environment (LLAMA_ARG_KV_UNIFIED)")
    off = settings_of(["llama-server", "--kv-unified", "--no-kv-unified"])
    assert off["kv_unified"][0] == "false"  # the last spelling wins
    with_props = settings_of(["llama-server", "-np", "4"], props=PROPS)
    assert with_props["slot_ctx"] == ("1024", "/props (default_generation_settings.n_ctx)")
    assert with_props["pool_ctx"] == ("4096", "/props (n_ctx 1024 × 4 slots)")


@pytest.mark.parametrize(
    ("argv", "parent", "kind"),
    [
        (["/usr/local/bin/llama-server", "-m", "x.gguf"], "bash", LLAMA_SERVER_KIND),
        (["/usr/lib/ollama/llama-server", "--model", "x", "--port", "41234"], "ollama", OLLAMA_RUNNER),
        (
            ["/usr/local/bin/ollama", "runner", "--model", "/root/.ollama/blobs/sha256-1", "--port", "1"],
            "",
            OLLAMA_RUNNER,
        ),
        (["/usr/local/bin/ollama", "serve"], "systemd", OLLAMA_SERVE),
        (["/usr/bin/python3", "-m", "llama_cpp.server", "--model", "x.gguf"], "", LLAMA_CPP_PYTHON),
        (["/opt/LM Studio/lm-studio", "--run-as-service"], "", LM_STUDIO),
        (["/home/u/.lmstudio/bin/lms", "server", "start"], "", LM_STUDIO),
        (["/usr/bin/python3", "-m", "http.server"], "", None),
        (["/usr/local/bin/ollama", "list"], "", None),
        ([], "", None),
    ],
)
def test_command_lines_are_recognised(argv, parent, kind):
    assert classify(os.path.basename(argv[0]) if argv else "", argv, parent) == kind


def test_a_port_that_answers_something_else_is_one_line(server):
    other = server(plain, {"/metrics": Route.file("other_metrics.txt"), "/props": Route.text("<html>", 404)})
    found = find_servers(1.0, ports=(other.port,))
    mine = [s for s in found.servers if s.url == other.url]
    assert len(mine) == 1 and mine[0].status == "not-llama" and "is not llama-server" in mine[0].message
    assert found.chosen is None or found.chosen.url != other.url


def test_a_process_named_llama_server_that_does_not_listen_is_listed(tmp_path):
    fake = tmp_path / "llama-server"
    fake.symlink_to(shutil.which("sleep"))
    proc = subprocess.Popen([str(fake), "60"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            mine = [s for s in find_servers(0.5, ports=()).servers if s.pid == proc.pid]
            if mine:
                break
            time.sleep(0.1)
        assert mine and mine[0].url == "" and mine[0].status == "unreachable"
        assert "listens on no TCP port" in mine[0].message
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("servers")
    with (
        started_llama_server(log_dir, "-np", "4", "--cache-ram", "256", "--metrics") as one,
        started_llama_server(log_dir, "--kv-unified", "-np", "2", env={"LLAMA_ARG_CTX_CHECKPOINTS": "3"}) as two,
    ):
        yield one, two


@pytest.mark.model
@pytest.mark.slow
def test_attach_without_a_url_finds_the_servers_by_their_processes(two_servers):
    one, two = two_servers
    found = {s.pid: s for s in find_servers(1.0).servers}
    first, second = found[one.proc.pid], found[two.proc.pid]
    assert first.url == one.url and f"listening on 127.0.0.1:{one.port}" in first.how
    flags = {s.name: (s.value, s.source) for s in first.settings}
    assert flags["port"] == (str(one.port), "command line (--port)")
    assert flags["cache_ram"] == ("256", "command line (--cache-ram)")
    assert flags["kv_unified"] == ("false", "default (-np 4 without --kv-unified)")
    assert flags["slots"] == ("4", "/props (total_slots)")
    assert flags["slot_ctx"] == ("256", "/props (default_generation_settings.n_ctx)")
    flags2 = {s.name: (s.value, s.source) for s in second.settings}
    assert flags2["kv_unified"] == ("true", "command line (--kv-unified)")
    assert flags2["ctx_checkpoints"] == ("3", "environment (LLAMA_ARG_CTX_CHECKPOINTS)")
    assert first.status == "ok" and second.status == "no-metrics"

    record, text = list_servers(1.0)
    urls = [s["url"] for s in record["servers"]]
    assert one.url in urls and two.url in urls
    assert f"127.0.0.1:{one.port}" in text and "cache_ram 256 MiB (command line (--cache-ram))" in text

    once, _ = attach_once(
        AttachJob.from_urls({"llama-server": None, "ollama": None}, 0.2, 2.0), Sampler(), sleep=lambda s: None
    )
    json.dumps(once)
    listed = {s["pid"]: s for s in once["servers"]}
    assert listed[one.proc.pid]["settings"]["cache_ram"] == {"value": "256", "source": "command line (--cache-ram)"}
    assert once["attached"] is not None and once["discovery"].startswith("attached to")


@pytest.mark.model
@pytest.mark.slow
def test_an_unprivileged_probe_finds_the_server_and_says_what_it_could_not_read(two_servers, tmp_path):
    one, _ = two_servers
    if os.geteuid() != 0:
        unavailable("needs root to run the probe as another user")
    [(url, how, unreadable, status)] = as_nobody(
        lambda: [
            (x.url, x.how, x.unreadable, x.status) for x in find_servers(1.0, ports=()).servers if x.pid == one.proc.pid
        ]
    )
    assert url == one.url and status == "ok" and "port from its flags" in how
    assert "permission denied" in unreadable and "environment" in unreadable


def as_nobody(probe):
    """``probe()`` in a forked child that dropped to user nobody (65534); its JSON answer."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, json.dumps(probe()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and answer
    return json.loads(answer)
