"""The ``memory_sandbox`` fixture: swap and a memory cgroup as root (tests/cgroup_cliff.py), skipped
with the reason where the machine cannot host them, undone at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from cgroup_cliff import MiB, Sandbox, SwapKind, Unavailable, sandbox

MakeSandbox = Callable[..., Sandbox]


@pytest.fixture
def memory_sandbox() -> Iterator[MakeSandbox]:
    """``memory_sandbox(limit_bytes, swap_bytes=1 GiB, swap_kind="file", swappiness=None)`` → Sandbox."""
    with ExitStack() as stack:
        def make(limit_bytes: int, swap_bytes: int = 1024 * MiB, swap_kind: SwapKind = "file",
                 swappiness: int | None = None) -> Sandbox:
            try:
                return stack.enter_context(sandbox(limit_bytes, swap_bytes, swap_kind, swappiness))
            except Unavailable as exc:
                pytest.skip(str(exc))

        yield make
