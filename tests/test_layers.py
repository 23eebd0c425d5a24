"""The layer rules (import-linter contracts in pyproject.toml) hold, and the core imports without
Textual: every module outside ``cliff_tui.ui``, and ``export`` without llama.cpp either.

Each import check runs in a fresh interpreter, because this test process may already have imported
Textual.
The module list is found on disk (not with ``pkgutil.walk_packages``, which imports every package to
find its children and would import ``cliff_tui.ui`` on the way).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cliff_tui

PACKAGE_DIR = Path(cliff_tui.__file__).parent
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

REQUIRED = {
    "cliff_tui.events",
    "cliff_tui.codec",
    "cliff_tui.bus",
    "cliff_tui.history",
    "cliff_tui.store",
    "cliff_tui.report",
    "cliff_tui.report.samples",
    "cliff_tui.report.runs",
    "cliff_tui.report.triangulation",
    "cliff_tui.report.fit",
    "cliff_tui.report.tables",
    "cliff_tui.headless",
    "cliff_tui.cli",
    "cliff_tui.cli.parser",
    "cliff_tui.cli.checks",
    "cliff_tui.cli.commands",
    "cliff_tui.units",
    "cliff_tui.session",
    "cliff_tui.errors",
    "cliff_tui.thread_priority",
    "cliff_tui.jobs.attach",
    "cliff_tui.jobs.attach_once",
    "cliff_tui.jobs.triangulation_plan",
    "cliff_tui.jobs.run",
    "cliff_tui.recording.export",
    "cliff_tui.analysis.signs",
    "cliff_tui.analysis.triangulation",
    "cliff_tui.analysis.theory",
    "cliff_tui.analysis.thresholds",
    "cliff_tui.probes.system",
    "cliff_tui.probes.nvidia",
    "cliff_tui.probes.amd",
    "cliff_tui.probes.shared_vram",
    "cliff_tui.probes.sampler",
    "cliff_tui.recording.writer",
    "cliff_tui.recording.reader",
    "cliff_tui.engine.gguf_meta",
    "cliff_tui.exporter.collector",
    "cliff_tui.exporter.plans",
    "cliff_tui.exporter.server",
    "cliff_tui.serve",
    "cliff_tui.listen",
    "cliff_tui.text",
    "cliff_tui.recording.redact",
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
                  "llama_cpp": sorted(m for m in sys.modules if m == "llama_cpp" or m.startswith("llama_cpp.")),
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
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, json.dumps(modules)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_module_list_is_complete():
    modules = set(core_modules())
    assert modules >= REQUIRED, sorted(REQUIRED - modules)
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


def test_export_imports_neither_llama_cpp_nor_textual():
    result = run_check(["cliff_tui.recording.export"])
    assert result["failed"] == {}, "\n".join(result["failed"].values())
    assert result["llama_cpp"] == [] and result["textual"] == []


def test_the_engine_does_load_llama_cpp():
    # the converse: the check above can see llama_cpp when it is there
    assert "llama_cpp" in run_check(["cliff_tui.engine.llama"])["llama_cpp"]


_WATCH_START = r"""
import asyncio, json, sys
from cliff_tui.cli.parser import build_parser
build_parser().parse_args(["watch"])
from cliff_tui.probes.sampler import Sampler
from cliff_tui.session import Session
from cliff_tui.ui.app import CliffApp

async def main():
    app = CliffApp("watch", Session(sampler=Sampler(), interval=0.25))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.5)  # frames drawn with samples on them
        before = sorted(sys.modules)
        app.store.runs.triangulations()
        return {"before": before, "after": sorted(sys.modules)}

print(json.dumps(asyncio.run(main())))
"""
RUN_ONLY = (
    "cliff_tui.analysis.triangulation",
    "cliff_tui.analysis.theory",
    "cliff_tui.analysis.gauge",
    "cliff_tui.analysis.server_rates",
)


def test_a_watch_starts_without_what_only_a_run_or_a_server_needs():
    """A watch's first frame waits for every import before it: the triangulation, the KV theory,
    the gauge and a server's rates load where a run or an attached server first needs them."""
    proc = subprocess.run([sys.executable, "-c", _WATCH_START], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = json.loads(proc.stdout.splitlines()[-1])
    assert [m for m in RUN_ONLY if m in modules["before"]] == []
    assert "cliff_tui.analysis.triangulation" in modules["after"]  # the check sees it once it is needed


def lint_imports(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports not installed: pip install -e '.[test]'")
    return subprocess.run([exe, "--no-cache", *args], capture_output=True, text=True, timeout=120, cwd=PYPROJECT.parent)


def test_the_layer_contracts_hold():
    proc = lint_imports(str(PYPROJECT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_a_broken_layer_rule_is_caught(tmp_path):
    """The contracts can fail: the same rules, one of them turned upside down."""
    text = PYPROJECT.read_text().replace(
        'forbidden_modules = ["textual", "rich"]', 'forbidden_modules = ["textual", "rich", "json"]'
    )
    broken = tmp_path / "pyproject.toml"
    broken.write_text(text)
    proc = lint_imports(str(broken))
    assert proc.returncode != 0 and "BROKEN" in proc.stdout
