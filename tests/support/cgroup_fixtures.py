"""The ``memory_sandbox`` fixture: swap and a memory cgroup as root (tests/support/cgroup_cliff.py), skipped
with the reason where the machine cannot host them (failed under CI, see needs.py), undone at teardown; ``child_in_cgroup``: a
child process holding memory inside a cgroup of its own; ``limited_cgroup``, ``no_swap_cgroup``,
``quota_cgroup``: an empty cgroup with a memory limit (with no swap), or held to a CPU quota."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import NoReturn

import pytest

from cgroup_cliff import (
    Cgroup,
    MiB,
    PlatformLacks,
    Sandbox,
    SwapKind,
    Unavailable,
    cgroup,
    cpu_cgroup,
    require_root,
    sandbox,
)
from needs import unavailable

MakeSandbox = Callable[..., Sandbox]


@pytest.fixture
def memory_sandbox() -> Iterator[MakeSandbox]:
    """``memory_sandbox(limit_bytes, swap_bytes=1 GiB, swap_kind="file", swappiness=None)`` → Sandbox."""
    with ExitStack() as stack:

        def make(
            limit_bytes: int, swap_bytes: int = 1024 * MiB, swap_kind: SwapKind = "file", swappiness: int | None = None
        ) -> Sandbox:
            try:
                return stack.enter_context(sandbox(limit_bytes, swap_bytes, swap_kind, swappiness))
            except Unavailable as exc:
                cannot_host(exc)

        yield make


def cannot_host(exc: Unavailable) -> NoReturn:
    """A skip where the kernel lacks the thing; else a requirement of the run (a failure under CI)."""
    if isinstance(exc, PlatformLacks):
        pytest.skip(str(exc))
    unavailable(str(exc))


@contextmanager
def child_in_cgroup(limit_bytes: int, hold_bytes: int) -> Iterator[tuple[Cgroup, subprocess.Popen]]:
    """As root: a cgroup limited to ``limit_bytes`` with a child in it holding ``hold_bytes``
    (skipped where no cgroup can be made); the child is gone and the cgroup removed on exit."""
    with limited_cgroup(limit_bytes) as made:
        code = f"x = bytearray({hold_bytes}); print('ready', flush=True); import time; time.sleep(30)"
        child = made.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        yield made, child


@contextmanager
def limited_cgroup(limit_bytes: int) -> Iterator[Cgroup]:
    """As root: an empty memory cgroup limited to ``limit_bytes`` (skipped where none can be made);
    its processes killed and the cgroup removed on exit."""
    with _hosted(lambda: cgroup(limit_bytes)) as made:
        yield made


@contextmanager
def no_swap_cgroup(limit_bytes: int) -> Iterator[Cgroup]:
    """As root: an empty memory cgroup limited to ``limit_bytes`` that may not swap (v1: memory+swap
    held to the same limit, swappiness 0), as a container with ``--memory`` and no swap: past the
    limit the kernel's OOM killer ends a process in it. Its processes killed and it removed on exit."""
    with _hosted(lambda: cgroup(limit_bytes, swap_limit_bytes=0, swappiness=0)) as made:
        yield made


@contextmanager
def quota_cgroup(quota_us: int, period_us: int = 100_000) -> Iterator[Cgroup]:
    """As root: a cgroup whose processes may use ``quota_us`` of CPU time each ``period_us``
    (skipped where none can be made); its processes killed and the cgroup removed on exit."""
    with _hosted(lambda: cpu_cgroup(quota_us, period_us)) as made:
        yield made


@contextmanager
def _hosted(make: Callable[[], AbstractContextManager[Cgroup]]) -> Iterator[Cgroup]:
    with ExitStack() as stack:
        try:
            require_root()
            made = stack.enter_context(make())
        except Unavailable as exc:
            cannot_host(exc)
        yield made
