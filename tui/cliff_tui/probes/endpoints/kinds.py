"""Every kind of server cliff-tui knows, in one table.

A :class:`Api` is how a server is read (its HTTP endpoints, the flag that names its URL, what its
answers can report). A :class:`Kind` is a program that serves one: how its process is recognised,
which ports it listens on by default, how its settings are read from its command line and
environment, and the API it speaks (``None``: it is listed, not read). Adding a server kind is one
reader and one entry in :data:`KINDS`; discovery, attach, the command line and the screens read
this table instead of naming kinds themselves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cliff_tui.probes.endpoints import llama_server, ollama, vllm
from cliff_tui.probes.endpoints.llama_server import LlamaServerRead, probe_llama_server
from cliff_tui.probes.endpoints.ollama import read_ollama
from cliff_tui.probes.endpoints.server_flags import Flag, llama_server_settings, read_flag
from cliff_tui.records import ServerKind, ServerSetting

Report = Literal["counters", "slots", "pool", "kv_blocks", "models", "memory", "prompt_cache", "log"]
Settings = Callable[[Sequence[str], Mapping[str, str]], tuple[ServerSetting, ...]]


@dataclass(frozen=True)
class Api:
    name: ServerKind  # what its readings are named by (``ServerReading.source``)
    flag: str  # the command-line flag that names its URL
    default_url: str
    probe: Callable[[str, float], LlamaServerRead]
    reports: frozenset[Report]
    help: str

    def has(self, report: Report) -> bool:
        return report in self.reports


def _probe_ollama(url: str, timeout: float) -> LlamaServerRead:
    return LlamaServerRead(read_ollama(url, timeout))


LLAMA_SERVER_API = Api(
    llama_server.LLAMA_SERVER,
    "--llama-server",
    llama_server.DEFAULT_URL,
    probe_llama_server,
    frozenset({"counters", "slots", "pool", "memory", "prompt_cache", "log"}),
    "llama-server base URL (run it with --metrics)",
)
VLLM_API = Api(
    vllm.VLLM,
    "--vllm",
    vllm.DEFAULT_URL,
    vllm.probe_vllm,
    frozenset({"counters", "kv_blocks", "memory"}),
    "vLLM base URL (its OpenAI API server)",
)
OLLAMA_API = Api(
    ollama.OLLAMA,
    "--ollama",
    ollama.DEFAULT_URL,
    _probe_ollama,
    frozenset({"models"}),
    "Ollama base URL",
)
APIS: dict[str, Api] = {api.name: api for api in (LLAMA_SERVER_API, OLLAMA_API, VLLM_API)}


def api_of_reading(source: str) -> Api | None:
    return APIS.get(source)


def reports(source: str, report: Report) -> bool:
    """Whether readings named ``source`` can carry ``report`` (Ollama has no token counters)."""
    api = APIS.get(source)
    return api is not None and api.has(report)


@dataclass(frozen=True)
class ProcessShape:
    exe: str  # the command line's program, lower case, without its folder
    name: str  # the process's own name, lower case
    argv: tuple[str, ...]
    parent: str  # the parent's program, lower case

    @classmethod
    def of(cls, name: str, argv: Sequence[str], parent: str = "") -> ProcessShape:
        exe = os.path.basename(argv[0]).lower() if argv else ""
        return cls(exe, os.path.basename(name).lower(), tuple(argv), parent.lower())


@dataclass(frozen=True)
class Kind:
    name: str
    api: Api | None  # None: found and listed (its models), not read
    ports: tuple[int, ...]  # its default ports, tried where no process of a known kind explains them
    recognise: Callable[[ProcessShape], bool]
    settings: Settings
    list_path: str = "/v1/models"  # what a listed kind answers with
    engine_title: str = ""  # the child process that holds the model and its KV cache, where not itself

    @property
    def attachable(self) -> bool:
        return self.api is not None

    @property
    def reads_process(self) -> bool:
        """Its memory and log are read from its process where it runs on this machine."""
        return self.api is not None and self.api.has("memory")


def _is_llama_server(p: ProcessShape) -> bool:
    return p.exe.startswith("llama-server") or p.name.startswith("llama-server")


def _runs_module(argv: Sequence[str], module: str) -> bool:
    return any(a == "-m" and i + 1 < len(argv) and argv[i + 1] == module for i, a in enumerate(argv))


def is_llama_server_argv(argv: Sequence[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]).lower().startswith("llama-server")


def _no_settings(argv: Sequence[str], env: Mapping[str, str]) -> tuple[ServerSetting, ...]:
    return ()


def _ollama_runner_settings(argv: Sequence[str], env: Mapping[str, str]) -> tuple[ServerSetting, ...]:
    """Newer Ollama starts llama-server itself; older ones ran ``ollama runner`` with its own flags."""
    if is_llama_server_argv(argv):
        return llama_server_settings(argv, env)
    flags = (
        Flag("model", ("--model",), "", "none"),
        Flag("ctx_size", ("--ctx-size",), "", "unknown"),
        Flag("parallel", ("--parallel",), "", "1"),
        Flag("n_gpu_layers", ("--n-gpu-layers",), "", "unknown"),
        Flag("port", ("--port",), "", "unknown"),
    )
    return tuple(read_flag(argv, {}, f) for f in flags)


PY_FLAGS = (
    Flag("model", ("--model",), "MODEL", "none"),
    Flag("host", ("--host",), "HOST", "localhost"),
    Flag("port", ("--port",), "PORT", "8000"),
    Flag("ctx_size", ("--n_ctx",), "N_CTX", "2048"),
    Flag("n_gpu_layers", ("--n_gpu_layers",), "N_GPU_LAYERS", "0"),
    Flag("flash_attn", ("--flash_attn",), "FLASH_ATTN", "false"),
    Flag("cache_type_k", ("--type_k",), "TYPE_K", "f16"),
    Flag("cache_type_v", ("--type_v",), "TYPE_V", "f16"),
)


def _py_settings(argv: Sequence[str], env: Mapping[str, str]) -> tuple[ServerSetting, ...]:
    return tuple(read_flag(argv, env, f) for f in PY_FLAGS)


VLLM_FLAGS = (
    Flag("model", ("--model",), "", "none"),
    Flag("host", ("--host",), "", "0.0.0.0"),
    Flag("port", ("--port",), "", "8000"),
    Flag("max_model_len", ("--max-model-len",), "", "the model's own (config.json)"),
    Flag("max_num_seqs", ("--max-num-seqs",), "", "vLLM's default for this device"),
    Flag("gpu_memory_utilization", ("--gpu-memory-utilization",), "", "0.92"),
    Flag("kv_cache_memory_bytes", ("--kv-cache-memory-bytes",), "", "none"),
    Flag("num_gpu_blocks_override", ("--num-gpu-blocks-override",), "", "none"),
    Flag("block_size", ("--block-size",), "", "vLLM's default for this device"),
    Flag("kv_cache_dtype", ("--kv-cache-dtype",), "", "auto"),
    Flag("tensor_parallel_size", ("-tp", "--tensor-parallel-size"), "", "1"),
    Flag("cpu_kvcache_space", (), "VLLM_CPU_KVCACHE_SPACE", "none"),
)
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


def _vllm_settings(argv: Sequence[str], env: Mapping[str, str]) -> tuple[ServerSetting, ...]:
    """``vllm serve MODEL`` names the model as its first word; the module takes ``--model``."""
    read = [read_flag(argv, env, f) for f in VLLM_FLAGS]
    if tuple(argv[1:2]) == ("serve",) and len(argv) > 2 and not argv[2].startswith("-"):
        read[0] = ServerSetting("model", argv[2], "command line (vllm serve MODEL)")
    return tuple(read)


def _is_vllm(p: ProcessShape) -> bool:
    return (
        (p.exe.startswith("python") and _runs_module(p.argv, VLLM_MODULE))
        or (p.exe == "vllm" and p.argv[1:2] == ("serve",))
        or p.exe.startswith("vllm::apiserver")
        or p.name.startswith("vllm::apiserver")
    )


def _is_lm_studio(p: ProcessShape) -> bool:
    joined = " ".join(p.argv).lower()
    return "lm studio" in joined or "lm-studio" in joined or p.exe in ("lms", "lm-studio")


OLLAMA_RUNNER = Kind(
    "ollama runner",
    LLAMA_SERVER_API,
    (),
    lambda p: (
        (_is_llama_server(p) and p.parent.startswith("ollama"))
        or (p.exe.startswith("ollama") and p.argv[1:2] == ("runner",))
    ),
    _ollama_runner_settings,
)
LLAMA_SERVER = Kind("llama-server", LLAMA_SERVER_API, (8080, 9931), _is_llama_server, llama_server_settings)
OLLAMA_SERVE = Kind(
    "ollama", OLLAMA_API, (11434,), lambda p: p.exe.startswith("ollama") and p.argv[1:2] == ("serve",), _no_settings
)
LLAMA_CPP_PYTHON = Kind(
    "llama-cpp-python",
    None,
    (),
    lambda p: p.exe.startswith("python") and _runs_module(p.argv, "llama_cpp.server"),
    _py_settings,
)
LM_STUDIO = Kind("lm-studio", None, (1234,), _is_lm_studio, _no_settings, list_path="/api/v0/models")
VLLM = Kind("vllm", VLLM_API, (8000,), _is_vllm, _vllm_settings, engine_title="VLLM::EngineCor")

# In the order a process is matched: Ollama's runner is a llama-server whose parent is Ollama.
KINDS: tuple[Kind, ...] = (OLLAMA_RUNNER, LLAMA_SERVER, OLLAMA_SERVE, LLAMA_CPP_PYTHON, LM_STUDIO, VLLM)
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}


def kind_named(name: str) -> Kind | None:
    return BY_NAME.get(name)


def recognise(name: str, argv: Sequence[str], parent: str = "") -> Kind | None:
    """The kind of server a command line starts, or None."""
    if not argv:
        return None
    shape = ProcessShape.of(name, argv, parent)
    return next((k for k in KINDS if k.recognise(shape)), None)


def kind_on_port(port: int) -> Kind:
    """Who answers on a default port, before anything is asked (llama-server where none claims it:
    llama-cpp-python's server and vLLM share 8000, and only vLLM is read on it)."""
    return next((k for k in KINDS if port in k.ports), LLAMA_SERVER)


def fallback_ports() -> tuple[int, ...]:
    return tuple(port for k in KINDS for port in k.ports)


def kind_for_api(api: Api) -> Kind:
    """The kind a server named by its API's URL is taken for until its process says otherwise."""
    return next(k for k in KINDS if k.api is api and k.ports)
