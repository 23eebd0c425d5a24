"""What each subcommand does (``cmd_*``, found by name in :data:`COMMANDS`), and the plumbing that
builds its job, sampler and session from the parsed flags. Each command imports what it needs inside
its function: no command loads what only another one needs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from cliff_tui.cli import (
    EXIT_BAD_INPUT,
    EXIT_DOES_NOT_FIT,
    EXIT_INTERRUPTED,
    EXIT_OOM_KILLED,
    EXIT_UNREACHABLE,
    EXIT_WORKER_DIED,
)
from cliff_tui.cli.checks import check_input, check_once, check_served, export_format, kv_types, need_terminal
from cliff_tui.cli.parser import server_urls
from cliff_tui.errors import BadInput
from cliff_tui.listen import EXPORTER_PORT, SERVE_PORT
from cliff_tui.text import inert


def cmd_watch(args: argparse.Namespace) -> int:
    """The memory tiers; next to a running llama.cpp server (found by its process), that server as
    ``attach`` shows it."""
    from cliff_tui.probes.sampler import Sampler

    check_once(args)
    check_input(args)
    found = None if args.no_servers else _servers_nearby(args.timeout)
    if found is not None and found.chosen is not None and not args.once and not args.headless:
        return _attach_tui(args, found)
    sampler = Sampler(pid=args.pid)
    if not args.once and not args.headless:
        return _tui(args, _session(args, sampler=sampler))
    from cliff_tui.headless import Headless

    if args.once:
        return _watch_once(args, sampler.sample(), found)
    session = _session(args, sampler=sampler, queued=False)
    headless = Headless(session)
    headless.watch(sys.stdout, args.json)
    if headless.output_error is not None:
        raise headless.output_error  # main() says it in one line
    return _exit_code(session)


def _servers_nearby(timeout: float):
    from cliff_tui.jobs.attach import DISCOVERY_TIMEOUT_S
    from cliff_tui.probes.endpoints.discovery import find_servers

    return find_servers(min(timeout, DISCOVERY_TIMEOUT_S))


def _attach_tui(args: argparse.Namespace, found) -> int:
    from cliff_tui.jobs.attach import AttachJob

    job = AttachJob([], args.interval, args.timeout, found=found)
    return _tui(args, _session(args, job, sampler=_sampler_for(job, pid=args.pid)), mode="attach")


def _watch_once(args: argparse.Namespace, sample, found) -> int:
    from cliff_tui.headless import watch_line
    from cliff_tui.jobs.attach_once import found_record
    from cliff_tui.probes.endpoints.discovery import describe_found
    from cliff_tui.report.samples import sample_record

    if args.json:
        record = sample_record(sample)
        if found is not None:
            record["servers"] = [found_record(s) for s in found.servers]
            record["attached"] = found.chosen.url if found.chosen is not None else None
            record["servers_text"] = describe_found(found)
        print(
            json.dumps(record, indent=2), flush=True
        )  # flushed first: where it cannot be written, that is the one line said
        return 0
    print(watch_line(sample), flush=True)
    if found is not None and found.servers:
        print(f"servers: {describe_found(found)}", flush=True)
    if sample.no_vram:
        print(f"cliff-tui: {sample.no_vram}", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from cliff_tui.report.runs import RUN_COLUMNS, run_record, run_rows
    from cliff_tui.report.tables import dumps, markdown_table

    job = _job_for(args)
    check_input(args, job)
    session = _session(args, job, queued=not args.headless)
    if not args.headless:
        return _tui(args, session)
    if _run_headless(session, ends_on_failure=True) == "cancelled":
        return EXIT_INTERRUPTED
    if not session.store.runs.results:
        return _killed_run(session, args.output)
    result = session.store.runs.results[-1]
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
    check_input(args, job)
    session = _session(args, job, queued=not args.headless)
    if not args.headless:
        return _tui(args, session)
    if _run_headless(session) == "cancelled":
        return EXIT_INTERRUPTED
    print(triangulation_output(session.store, args.output))
    return _exit_code(session)


def cmd_replay(args: argparse.Namespace) -> int:
    from cliff_tui.recording.reader import open_recording
    from cliff_tui.session import Session
    from cliff_tui.ui.app import CliffApp

    session = Session(
        recording=open_recording(args.file, lazy=True), speed=args.speed, recording_setup=_recording_setup(args)
    )
    need_terminal("replay")
    app = CliffApp("replay", session)
    app.run()
    return app.return_code or 0


def cmd_export(args: argparse.Namespace) -> int:
    from cliff_tui.recording.export import export

    output = export_format(args)
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
    from cliff_tui.jobs.attach_once import attach_once, list_servers

    if args.list:
        record, text = list_servers(args.timeout)
        print(json.dumps(record, indent=2) if args.json else text)
        return 0 if record["servers"] else EXIT_UNREACHABLE
    check_once(args)
    check_input(args)
    measured = _measured_capacity(args.from_file) if args.from_file else None
    job = AttachJob.from_urls(server_urls(args), args.interval, args.timeout, measured)
    sampler = _sampler_for(job, pid=args.pid)
    if args.once:
        record, ok = attach_once(job, sampler)
        print(json.dumps(record, indent=2))
        return 0 if ok else EXIT_UNREACHABLE
    return _tui(args, _session(args, job, sampler=sampler))


def cmd_fit(args: argparse.Namespace) -> int:
    from cliff_tui.advise import advise, measured_from_file
    from cliff_tui.cli.fit_devices import fit_devices, wants_devices
    from cliff_tui.cli.fit_vllm import fit_vllm, wants_vllm

    if wants_vllm(args):
        return fit_vllm(args)
    from cliff_tui.engine.default_model import default_model_path
    from cliff_tui.models.source import ModelReader
    from cliff_tui.report.fit import fit_record, format_fit_markdown

    with ModelReader(offline=args.offline, timeout=args.timeout) as reader:
        opened = reader.open(args.model or str(default_model_path()))
    if wants_devices(args):
        model = opened[0]
        return fit_devices(args, model.info, model.ref.location, model.ref.server_args)
    tier = _fit_tier(args)
    measured = measured_from_file(args.from_file) if args.from_file else []
    records, texts = [], []
    for model in opened:
        table = advise(
            model.info,
            tier,
            target=args.ctx_size or model.ref.num_ctx,
            reserve=args.reserve,
            n_seq=args.parallel,
            measured=measured,
            model_args=model.ref.server_args,
        )
        records.append(fit_record(table) | {"source": model.record()})
        texts.append(format_fit_markdown(table) + _read_line(model))
    if args.json:
        print(json.dumps(records[0] if len(records) == 1 else records, indent=2))
    else:
        print("\n".join(texts))
    return 0


def _read_line(model) -> str:
    """What reading a remote header took, under its table."""
    cost = model.cost
    if cost is None:
        return ""
    took = f"{cost.bytes_read:,} bytes in {cost.requests} request{'s' if cost.requests != 1 else ''}"
    return f"\nHeader: {model.ref.spec}: {took} (cache: {cost.cache})\n"


def _fit_tier(args: argparse.Namespace):
    from cliff_tui.advise import Tier, cliff_tier

    if args.capacity is not None:
        return Tier("the given capacity", args.capacity, gpu=False)
    if args.vram is not None:
        return Tier("a GPU's VRAM (what if: --vram)", args.vram, gpu=True)
    from cliff_tui.probes.sampler import Sampler

    return cliff_tier(Sampler().sample())


def cmd_models(args: argparse.Namespace) -> int:
    from cliff_tui.inventory import list_models, listing_markdown, listing_record

    listing = list_models(
        args.folder or [],
        args.names,
        _fit_tier(args),
        target=args.require or args.target,
        reserve=args.reserve,
        n_seq=args.parallel,
        sort=args.sort,
    )
    print(json.dumps(listing_record(listing), indent=2) if args.json else listing_markdown(listing), end="")
    return EXIT_DOES_NOT_FIT if args.require is not None and not listing.all_fit else 0


def cmd_exporter(args: argparse.Namespace) -> int:
    from cliff_tui.exporter.plans import read_plans
    from cliff_tui.exporter.server import Exporter
    from cliff_tui.jobs.attach import AttachJob
    from cliff_tui.listen import parse_bind
    from cliff_tui.probes.sampler import Sampler
    from cliff_tui.session import Session

    bind = parse_bind(args.bind, EXPORTER_PORT)
    check_input(args)
    plans = read_plans(args.from_file) if args.from_file else []
    job = None
    if any(server_urls(args).values()):
        job = AttachJob.from_urls(server_urls(args), args.interval, args.timeout)
    session = Session(sampler=Sampler(pid=args.pid), job=job, interval=args.interval, queued=False)
    return Exporter(session, plans).run(bind)


def cmd_serve(args: argparse.Namespace) -> int:
    from cliff_tui.listen import parse_bind
    from cliff_tui.serve import serve

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    served = check_served(command or ["watch"])
    check_input(served, _job_for(served))
    return serve(parse_bind(args.bind, SERVE_PORT), command or ["watch"], args.public_url)


ONLY_WATCH = frozenset({"watch", "attach", "exporter"})  # no model runs in these processes

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "watch": cmd_watch,
    "run": cmd_run,
    "triangulate": cmd_triangulate,
    "replay": cmd_replay,
    "export": cmd_export,
    "attach": cmd_attach,
    "fit": cmd_fit,
    "models": cmd_models,
    "exporter": cmd_exporter,
    "serve": cmd_serve,
}


# --- plumbing ---------------------------------------------------------------------------------


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
            kv_types=kv_types(args),
            budget_s=args.budget,
            chain=not args.no_chain,
            fill=args.fill,
        )
    return None


def _run_settings(args: argparse.Namespace, depth: int):
    from cliff_tui.engine.default_model import default_model_path
    from cliff_tui.records import RunSettings

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
        need_terminal(args.command)  # before --record creates its file
    session = Session(
        sampler=sampler or _sampler_for(job),
        job=job,
        interval=args.interval,
        recording_setup=_recording_setup(args),
        queued=queued,
    )
    if getattr(args, "record", None):
        session.start_recording(args.record, force=args.force)
    return session


def _recording_setup(args: argparse.Namespace):
    """How the session's recordings are made, whether by ``--record`` or by ``r`` on the screen."""
    from cliff_tui.recording.writer import RecordingSetup

    return RecordingSetup(
        command=sys.argv[1:], record_text=getattr(args, "record_text", False), redact=getattr(args, "redact", False)
    )


def _killed_run(session, output: str) -> int:
    """A run whose process was killed: its record and verdict, then exit 4 (OOM kill confirmed)
    or 5 (died otherwise)."""
    from cliff_tui.report.runs import killed_record
    from cliff_tui.report.tables import dumps

    view = session.store.runs.current
    if view is None or view.failure is None or view.failure.oom is None:
        return EXIT_INTERRUPTED if view is None or view.failure is None else EXIT_WORKER_DIED
    cliff = view.cliff(session.store.signs.throttle)
    if output == "md":
        print(f"depth reached: {view.failure.depth:,} of {view.started.settings.depth:,}")
        print(f"\ncliff: {cliff.level} — {cliff.text}")
    else:
        print(dumps([killed_record(view.started, view.failure, cliff)], output))
    sys.stdout.flush()
    return EXIT_OOM_KILLED if view.failure.oom.confirmed else EXIT_WORKER_DIED


def _exit_code(session) -> int:
    """0, or 2 where ``--record`` could not be written to the end (it said so when it stopped)."""
    return EXIT_BAD_INPUT if session.recording_failure else 0


def _run_headless(session, ends_on_failure: bool = False) -> str:
    from cliff_tui.headless import Headless

    return Headless(session, ends_on_failure=ends_on_failure).run_job()


def _tui(args: argparse.Namespace, session, mode: str | None = None) -> int:
    session.start_sampling(in_loop=True)  # the first sample is waiting when the screen's code has loaded
    from cliff_tui.ui.app import CliffApp

    app = CliffApp(mode or args.command, session)
    app.run()
    return app.return_code or 0
