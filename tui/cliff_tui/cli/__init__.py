"""``cliff-tui`` — the command line. Bare ``cliff-tui`` is ``cliff-tui watch``.

Exit codes: 0 done, 1 a model does not fit (``models --require``), 2 bad input (one line on stderr,
no traceback), 3 an attached server could not be read (``attach --once``), 4 the model's process
was OOM-killed (``run``: confirmed by its memory cgroup or the kernel's log; the record, with the
cliff, printed first), 5 the model's process died otherwise (killed by a signal the OOM killer is
not confirmed to have sent, or crashed; the record printed first), 130 interrupted.

The flags are :mod:`.parser`'s (a new subcommand: its parser there and its name in SUBCOMMANDS);
what each command does is :mod:`.commands`' (its ``cmd_*`` and its entry in COMMANDS); what it reads
is checked by :mod:`.checks` before it draws anything.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence

from cliff_tui.cli.parser import build_parser, normalise_argv
from cliff_tui.errors import CliffError
from cliff_tui.text import inert

EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_OOM_KILLED = 4
EXIT_WORKER_DIED = 5
EXIT_INTERRUPTED = 130
OUTPUT_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def main(argv: Sequence[str] | None = None) -> int:
    from cliff_tui.cli.commands import COMMANDS, ONLY_WATCH  # here: they import the exit codes above

    if sys.stderr is None:  # started with 2>&-: print(file=None) would write to stdout
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - stands in for stderr until exit
    args = build_parser().parse_args(normalise_argv(sys.argv[1:] if argv is None else argv))
    if args.command in ONLY_WATCH:
        from cliff_tui.thread_priority import lower_this_process

        lower_this_process()  # what it watches (a server, a model) comes first on a busy machine
    try:
        code = COMMANDS[args.command](args)
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
