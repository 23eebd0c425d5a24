"""The core (events, bus, pipeline, maths, probes, recording, engine helpers) imports without Textual.

Each check runs in a fresh interpreter, because this test process may already have imported Textual.
The module list is found on disk (not with ``pkgutil.walk_packages``, which imports every package to
find its children and would import ``cliff_tui.ui`` on the way).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cliff_tui

PACKAGE_DIR = Path(cliff_tui.__file__).parent

# Named in issue 2 / the brief: these must exist and import without Textual.
REQUIRED = {
    "cliff_tui.events", "cliff_tui.codec", "cliff_tui.bus", "cliff_tui.history", "cliff_tui.pipeline",
    "cliff_tui.report", "cliff_tui.headless", "cliff_tui.cli", "cliff_tui.units",
    "cliff_tui.analysis.signs", "cliff_tui.analysis.triangulation", "cliff_tui.analysis.theory",
    "cliff_tui.analysis.thresholds",
    "cliff_tui.probes.system", "cliff_tui.probes.nvidia", "cliff_tui.probes.amd",
    "cliff_tui.probes.shared_vram", "cliff_tui.probes.sampler",
    "cliff_tui.recording.writer", "cliff_tui.recording.reader",
    "cliff_tui.engine.gguf_meta", "cliff_tui.engine.errors",
}

_CHECK = r"""
import importlib, json, sys, traceback
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps({"failed": failed,
                  "textual": sorted(m for m in sys.modules if m == "textual" or m.startswith("textual.")),
                  "ui": sorted(m for m in sys.modules if m.startswith("cliff_tui.ui"))}))
"""


def core_modules() -> list[str]:
    """Every module of ``cliff_tui`` outside ``cliff_tui.ui`` (``__main__`` would start the app)."""
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        if parts[0] == "ui" or parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(["cliff_tui", *parts]))
    return names


def run_check(modules: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHECK, json.dumps(modules)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_module_list_is_complete():
    modules = set(core_modules())
    assert REQUIRED <= modules, sorted(REQUIRED - modules)
    assert not any(m.startswith("cliff_tui.ui") for m in modules)


def test_core_and_probes_import_without_textual():
    result = run_check(core_modules())
    assert result["failed"] == {}, "\n".join(result["failed"].values())
    assert result["textual"] == [], f"imported Textual: {result['textual'][:5]}"
    assert result["ui"] == []


def test_the_ui_does_import_textual():
    # the converse: the check above can see Textual when it is there
    result = run_check(["cliff_tui.ui.app"])
    assert result["failed"] == {}, "\n".join(result["failed"].values())
    assert "textual" in result["textual"]
    assert "cliff_tui.ui.app" in result["ui"]
