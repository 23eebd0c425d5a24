"""The code as the machines read it: ruff's lint and format check over the package, the tests, the
benchmarks and the scripts, and mypy over the package (strict where pyproject.toml says), each
failing with what the tool said."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["tui", "tests", "bench", "scripts"]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "argv",
    [("ruff", "check", *SOURCES), ("ruff", "format", "--check", *SOURCES)],
    ids=["ruff check", "ruff format --check"],
)
def test_ruff_is_clean(argv):
    done = _run(*argv)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean():
    done = _run("mypy")  # the packages and the flags come from pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr
