"""Real RPC devices on loopback: rpc-servers (each one device, named RPC0, RPC1… in --rpc order)
started on free ports, each reporting a chosen memory size if asked; llama-server loading a model
over them, its log read back per device; llama-fit-params' plan for the same flags.

rpc-server has no memory-size option: its CPU device reports the machine's RAM
(``sysconf(_SC_PHYS_PAGES)``). A small preloaded library answers that call with the size in
``CLIFF_FAKE_MEM_MIB`` instead, so each server reports the size a test gives it; the binary and
its allocations stay real. Every process is stopped by its PID at the end.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cliff_tui.analysis.devices import WeightTensor
from cliff_tui.engine.gguf_meta import read_local_header, tensor_sizes
from cliff_tui.errors import BadInput
from cliff_tui.probes.rpc import RpcInfo, rpc_hello
from cliff_tui.units import MiB
from fakes.http_server import free_port
from llama_server import find_llama_server, stop, wait_healthy
from needs import unavailable
from paths import ROOT

BUFFER_RE = re.compile(
    r"(?P<buft>[A-Za-z]\S*)\s+(?P<kind>model|KV|compute|output)\s+buffer size\s*=\s*(?P<mib>[0-9]+(?:\.[0-9]+)?)\s*MiB"
)
RPC_BUFT_RE = re.compile(r"^RPC(?P<local>\d+)\[(?P<endpoint>[^\]]+)\]$")
ASSIGNED_RE = re.compile(r"layer\s+(?P<il>\d+) assigned to device (?P<dev>\S+?),")
FAKE_MEM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
long sysconf(int name) {
    static long (*real)(int) = 0;
    if (!real) real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    const char *mib = getenv("CLIFF_FAKE_MEM_MIB");
    if (name == _SC_PHYS_PAGES && mib && *mib)
        return (long)(strtoll(mib, 0, 10) * 1048576LL / real(_SC_PAGE_SIZE));
    return real(name);
}
"""


def _find(env: str, names: Sequence[str], built: Path) -> str | None:
    candidates = [os.environ.get(env), *(shutil.which(n) for n in names), str(built)]
    return next((c for c in candidates if c and os.access(c, os.X_OK) and Path(c).is_file()), None)


def find_rpc_server() -> str | None:
    return _find("RPC_SERVER", ("rpc-server", "ggml-rpc-server"), ROOT / ".tools/rpc-server/bin/rpc-server")


def find_fit_params() -> str | None:
    return _find("LLAMA_FIT_PARAMS", ("llama-fit-params",), ROOT / ".tools/llama-fit-params/bin/llama-fit-params")


@functools.cache
def _takes_rpc(binary: str) -> bool:
    result = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    return "--rpc" in result.stdout + result.stderr


def rpc_binaries() -> tuple[str, str]:
    """rpc-server and a llama-server built with the RPC backend, or the test is unavailable."""
    build = "scripts/build_llama_tools.sh llama-server rpc-server llama-fit-params"
    rpc_server = find_rpc_server()
    if rpc_server is None:
        unavailable(f"no rpc-server binary: set RPC_SERVER, put one on PATH, or run {build}")
    server = find_llama_server()
    if server is None or not _takes_rpc(server):
        unavailable(f"no llama-server with the RPC backend (--rpc): run {build}")
    return rpc_server, server


def fit_params_binary() -> str:
    binary = find_fit_params()
    if binary is None:
        unavailable(
            "no llama-fit-params binary: set LLAMA_FIT_PARAMS or run scripts/build_llama_tools.sh llama-fit-params"
        )
    return binary


@functools.cache
def fake_memory_library(directory: str) -> Path:
    """The preloaded sysconf() that reports ``CLIFF_FAKE_MEM_MIB``, compiled once per directory."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        unavailable("no C compiler (cc) to build the memory-size shim for rpc-server")
    source = Path(directory) / "fake_mem.c"
    library = Path(directory) / "fake_mem.so"
    source.write_text(FAKE_MEM_C)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"], check=True)
    return library


# --- processes ---------------------------------------------------------------------------------


@dataclass
class RpcServer:
    endpoint: str
    proc: subprocess.Popen
    log: Path
    total_bytes: int


@contextlib.contextmanager
def started_rpc_servers(log_dir: Path, sizes_mib: Sequence[int | None]) -> Iterator[list[RpcServer]]:
    """One rpc-server per size (None: the machine's RAM), each answering an RPC hello."""
    rpc_server, _ = rpc_binaries()
    servers: list[RpcServer] = []
    try:
        for size in sizes_mib:
            servers.append(_start_rpc_server(rpc_server, log_dir, size))
        yield servers
    finally:
        for server in servers:
            stop(server.proc)


def _start_rpc_server(binary: str, log_dir: Path, size_mib: int | None) -> RpcServer:
    env = dict(os.environ)
    if size_mib is not None:
        env["LD_PRELOAD"] = str(fake_memory_library(str(log_dir)))
        env["CLIFF_FAKE_MEM_MIB"] = str(size_mib)
    for _ in range(5):  # a free port can be taken by another process before the server binds it
        port = free_port()
        log = log_dir / f"rpc-server-{port}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [binary, "-H", "127.0.0.1", "-p", str(port), "-t", "1"], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        info = _await_hello(f"127.0.0.1:{port}", proc)
        if info is not None:
            return RpcServer(info.endpoint, proc, log, info.memory[0][1])
        stop(proc)
    raise AssertionError(f"rpc-server did not start: {log.read_text(errors='replace')[-2000:]}")


def _await_hello(endpoint: str, proc: subprocess.Popen) -> RpcInfo | None:
    while proc.poll() is None:
        try:
            return rpc_hello(endpoint, timeout=30)
        except BadInput:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.1)
    return None


@dataclass(frozen=True)
class Logged:
    """What llama-server's log says it allocated, by device name (RPC0…, and ``host``)."""

    model: dict[str, float] = field(default_factory=dict)  # MiB as printed (2 decimals)
    kv: dict[str, list[float]] = field(default_factory=dict)  # one line per cache (non-SWA, then SWA)
    compute: dict[str, float] = field(default_factory=dict)
    layers: dict[str, tuple[int, ...]] = field(default_factory=dict)  # from "layer N assigned to device"
    text: str = ""


def parse_log(text: str, endpoints: Sequence[str]) -> Logged:
    """Buffer lines summed per device; an RPC buffer is named ``RPC<local index>[endpoint]``."""
    names = {ep: f"RPC{i}" for i, ep in enumerate(endpoints)}
    out = Logged(text=text)
    sums = {"model": out.model, "compute": out.compute}
    for match in BUFFER_RE.finditer(text):
        rpc = RPC_BUFT_RE.match(match["buft"])
        device = names[rpc["endpoint"]] if rpc else "host"
        if match["kind"] == "KV":
            out.kv.setdefault(device, []).append(float(match["mib"]))
        elif match["kind"] in sums:
            table = sums[match["kind"]]
            table[device] = round(table.get(device, 0.0) + float(match["mib"]), 2)
    layers: dict[str, list[int]] = {}
    for match in ASSIGNED_RE.finditer(text):
        layers.setdefault(match["dev"], []).append(int(match["il"]))
    out.layers.update({dev: tuple(sorted(set(ils))) for dev, ils in layers.items()})
    return out


def split_server_argv(model: Path, endpoints: Sequence[str], flags: Sequence[str], port: int) -> list[str]:
    _, server = rpc_binaries()
    argv = [server, "-m", str(model), "--rpc", ",".join(endpoints), "--host", "127.0.0.1", "--port", str(port)]
    own_fit = [] if {"-fit", "--fit"} & set(flags) else ["--fit", "off"]  # its dry runs log buffers too
    return [*argv, "-t", "1", "--no-warmup", "-lv", "5", *own_fit, *flags]


@contextlib.contextmanager
def started_split_server(
    log_dir: Path, model: Path, endpoints: Sequence[str], flags: Sequence[str]
) -> Iterator[tuple[subprocess.Popen, Path]]:
    """llama-server over ``endpoints`` with ``flags``, healthy; stopped by its PID at the end."""
    port = free_port()
    log = log_dir / f"llama-server-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(split_server_argv(model, endpoints, flags, port), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield proc, log
    finally:
        stop(proc)


def split_run(log_dir: Path, model: Path, endpoints: Sequence[str], flags: Sequence[str]) -> Logged:
    """llama-server over ``endpoints`` with ``flags``, started until healthy, stopped, its log read."""
    with started_split_server(log_dir, model, endpoints, flags) as (_, log):
        pass
    return parse_log(log.read_text(errors="replace"), endpoints)


def fit_params(model: Path, endpoints: Sequence[str], flags: Sequence[str]) -> subprocess.CompletedProcess[str]:
    argv = [fit_params_binary(), "-m", str(model), "--rpc", ",".join(endpoints), "-t", "1", *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def fit_print(model: Path, endpoints: Sequence[str], flags: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """``llama-fit-params --fit-print on``: (model, context, compute) MiB, floored, per device."""
    result = fit_params(model, endpoints, [*flags, "--fit-print", "on"])
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            rows["host" if parts[0] == "Host" else parts[0]] = (int(parts[1]), int(parts[2]), int(parts[3]))
    return rows


def fitted_args(model: Path, endpoints: Sequence[str], flags: Sequence[str]) -> list[str]:
    """The arguments llama-fit-params prints (``-c N -ngl N [-ts a,b]``)."""
    result = fit_params(model, endpoints, flags)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()


# --- the weights, as the tests read them ---------------------------------------------------------


def weight_tensors(path: Path) -> list[WeightTensor]:
    """Each tensor's exact bytes and shape, read with the gguf library."""
    from gguf import GGUFReader
    from gguf.constants import GGML_QUANT_SIZES

    reader = GGUFReader(str(path))
    out = []
    for t in reader.tensors:
        shape = [int(d) for d in t.shape]
        block = GGML_QUANT_SIZES[t.tensor_type][0]
        n_rows = max(1, int(t.n_elements) // max(1, shape[0]))
        out.append(WeightTensor(t.name, int(t.n_bytes), shape[0], n_rows, block > 1, int(t.data_offset)))
    return out


def gap_weight_tensors(path: Path) -> list[WeightTensor]:
    """Each tensor's bytes as cliff-tui's header reader sees them: the gap to the next offset."""
    header = read_local_header(path)
    sizes = tensor_sizes(list(header.tensors), header.size - header.data_start)
    offsets = dict(header.tensors)
    return [WeightTensor(name, size, offset=header.data_start + offsets[name]) for name, size in sizes.items()]


def mib(n_bytes: int) -> float:
    """Bytes as llama.cpp prints a buffer: MiB to 2 decimals."""
    return round(n_bytes / MiB, 2)
