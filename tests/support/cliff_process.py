"""``cliff-tui`` run as a user runs it: a fresh process on this checkout's sources."""

from __future__ import annotations

import os
import subprocess
import sys

from paths import ROOT


def cliff(*argv: str) -> str:
    """Its standard output; a non-zero exit fails the test with its standard error."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tui")}
    done = subprocess.run(
        [sys.executable, "-m", "cliff_tui", *argv], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
