"""What a command reads or asks for, checked before it draws anything: each mistake is one line and
exit 2, not a traceback or a blank screen. The flags that argparse cannot check alone (one flag
against another, a list of cache types, the command ``serve`` runs) are checked here too."""

from __future__ import annotations

import argparse
import os
import sys

from cliff_tui.cli.parser import build_parser, normalise_argv, server_urls
from cliff_tui.errors import BadInput


def check_input(args: argparse.Namespace, job=None) -> None:
    """What a command reads or asks for, checked before it draws anything: the model's header, the
    recording, a triangulation file, a server's URL, the process to follow, and what the job
    refuses (its settings, its prompt file, its reserve)."""
    from cliff_tui.errors import check_readable

    if getattr(args, "model", None):
        from cliff_tui.engine.gguf_meta import read_model_info
        from cliff_tui.models.source import check_local, is_local

        if args.command != "fit" or (is_local(args.model) and not os.path.isdir(args.model)):  # fit reads the rest
            check_local(args.model, args.command)
            read_model_info(os.path.abspath(args.model))
    if args.command == "replay":
        check_readable(args.file, "recording")
    if getattr(args, "from_file", None):
        check_readable(args.from_file, "triangulation file")
    if args.command == "attach":
        from cliff_tui.jobs.attach import AttachJob

        AttachJob.from_urls(server_urls(args))
    if getattr(args, "pid", None):
        from cliff_tui.probes.system import check_process

        check_process(args.pid)
    if job is not None:
        job.check()


def check_once(args: argparse.Namespace) -> None:
    """``--once`` prints one reading: there is no session to ``--record``."""
    if args.once and args.record:
        raise BadInput(
            f"--once prints one reading and records nothing: drop --record {args.record}, "
            "or record a session with --headless"
        )


def check_served(command: list[str]) -> argparse.Namespace:
    """The command each browser tab runs, parsed here: a mistake in it is one line now, not a blank
    tab later. Returns it parsed, for :func:`check_input` with its job."""
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
    return served


def kv_types(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (K, V) cache types a triangulation runs: ``--compare-kv``'s, each one llama.cpp knows,
    else ``-ctk``/``-ctv``."""
    from cliff_tui.analysis.ggml_types import CACHE_TYPES

    if not args.compare_kv:
        return [(args.cache_type_k, args.cache_type_v)]
    types = [t.strip() for t in args.compare_kv.split(",") if t.strip()]
    for t in types:
        if t not in CACHE_TYPES:
            raise BadInput(f"--compare-kv {t}: unknown cache type (use one of {', '.join(CACHE_TYPES)})")
    return [(t, t) for t in types]


def export_format(args: argparse.Namespace) -> str:
    """``export``'s format: ``-o``, else csv where ``--table`` alone is given, else md; ``--table``
    with another format is refused."""
    output = args.output or ("csv" if args.table else "md")
    if args.table and output != "csv":
        raise BadInput(
            f"--table picks one table for -o csv; -o {output} "
            f"{'is the recording itself' if output == 'jsonl' else 'holds every table'}: "
            f"drop --table, or use -o csv"
        )
    return output


WITHOUT_A_SCREEN = {"replay": "cliff-tui export FILE for its tables", "attach": "--once for one reading"}


def need_terminal(command: str) -> None:
    """The screen reads keys from stdin and draws on stderr (Textual's terminal driver); without
    both on a terminal (cron, ``> log``, ssh without -t) it would draw into nothing, for ever."""
    if os.environ.get("TEXTUAL_DRIVER"):  # serve's browser tabs, and any other driver Textual is given
        return
    if not (sys.stdin and sys.stdin.isatty() and sys.__stderr__ and sys.__stderr__.isatty()):
        instead = WITHOUT_A_SCREEN.get(command, "--headless for lines of text")
        raise BadInput(f"the dashboard needs a terminal (stdin and stderr): use {instead}, or ssh -t")
