"""A missing requirement skips a test with its reason, and fails it under CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).parent / "support"
TEST = """
from needs import unavailable
from cgroup_fixtures import cannot_host
from cgroup_cliff import PlatformLacks, Unavailable

def test_needs_prometheus():
    unavailable("no prometheus binary")

def test_a_kernel_without_zram():
    cannot_host(PlatformLacks("no zram"))

def test_not_root():
    cannot_host(Unavailable("needs root"))
"""


def outcomes(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "test_x.py").write_text(TEST)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), str(SUPPORT.parents[1] / "tui")])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    return done.stdout


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_each_is_a_skip_with_its_reason(tmp_path, ci):
    out = outcomes(tmp_path, ci)
    assert "3 skipped" in out, out
    assert "no prometheus binary" in out and "no zram" in out and "needs root" in out


def test_under_ci_a_missing_requirement_fails_and_a_missing_kernel_feature_skips(tmp_path):
    out = outcomes(tmp_path, "true")
    assert "2 failed, 1 skipped" in out, out
    assert "FAILED test_x.py::test_needs_prometheus - Failed: no prometheus binary (CI=true" in out
    assert "FAILED test_x.py::test_not_root - Failed: needs root (CI=true" in out
