"""What a test needs from the machine (root, Prometheus, Chromium, Tesseract, llama-server, SmolLM2).

Where it is missing the test is skipped with the reason, except under CI (``CI=true``, as GitHub
Actions and .ci/run set it): there the machine was set up to have it, so its absence fails the test
with the same reason instead of hiding it in the skip count. What a platform legitimately lacks (zram,
a cgroup version its kernel does not run, a GPU) stays a skip: use ``pytest.skip`` for those.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip for ``reason``; under CI, fail for it."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a requirement of the test suite, not a skip)", pytrace=False)
    pytest.skip(reason)


def need(present: object, reason: str) -> None:
    """:func:`unavailable` unless ``present`` is truthy."""
    if not present:
        unavailable(reason)
