"""Hostile text in every headless output: md, csv, json and jsonl tables, ``export`` of a recording,
the progress lines on stderr and ``watch --once``. Nothing a terminal would run gets out, the
tables' own syntax is escaped, JSON stays valid and carries the inert text."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import unicodedata
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from recording.test_recording import ALL_EVENTS, RESULT, SAMPLE

from cliff_tui.events import Alert, Notice, RunFailed
from cliff_tui.headless import Headless, watch_line
from cliff_tui.recording.export import export
from cliff_tui.recording.reader import open_recording
from cliff_tui.recording.writer import Recorder, RecordingSetup
from cliff_tui.records import CpuQuota
from cliff_tui.report.runs import RUN_COLUMNS, run_record, run_rows
from cliff_tui.report.tables import csv_cell, dumps, markdown_table
from cliff_tui.session import Session
from cliff_tui.text import inert
from hostile import EVIL, HOSTILE, hostile_text
from tiny_model import write_tiny_llama

DATA = Path(__file__).parent / "data"


def runnable(text: str) -> list[str]:
    """Characters a terminal acts on, or that hide or reorder text; a newline ends a line."""
    return sorted(
        {f"U+{ord(ch):04X}" for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") and ch != "\n"}
    )


def hostile_result(text: str):
    """A run whose model name, path, cache type and verdict hold ``text``."""
    settings_ = replace(RESULT.settings, model_path=f"/m/{text}.gguf", cache_type_k=text)
    return replace(
        RESULT, model_name=text, settings=settings_, verdict=replace(RESULT.verdict, text=text), kv_buffers={text: 5}
    )


@settings(max_examples=300, deadline=None)
@given(hostile_text())
def test_every_table_format_is_safe_and_keeps_its_syntax(text):
    result = hostile_result(text)
    shown = inert(text)
    md = markdown_table(run_rows([result]), RUN_COLUMNS)
    assert not runnable(md) and len(md.splitlines()) == 3  # a newline in a cell would break the row
    assert md.splitlines()[2].count("|") - md.splitlines()[2].count("\\|") == len(RUN_COLUMNS) + 1
    assert shown.replace("|", "\\|") in md
    for cell in md_cells(md.splitlines()[2]):
        assert not cell.startswith(FORMULA) or FIGURE.fullmatch(cell), cell
    for fmt in ("json", "jsonl"):
        out = dumps([run_record(result)], fmt)
        assert not runnable(out)
        record = json.loads(out)
        assert record["model"] == shown and record["verdict_text"] == shown and shown in record["kv_buffers"]
    out = dumps([run_record(result)], "csv")
    assert not runnable(out.replace("\n", ""))
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 1 and rows[0]["model"] == csv_cell(text)
    assert rows[0]["model"] in (shown, "'" + shown)


FORMULAS = (
    '=HYPERLINK("http://evil")',
    "+1+1",
    "-2+3",
    "@SUM(A1)",
    "\t=1",
    "\r=1",
    "-",
    "=1|2",
    "-cmd|' /C calc'!A0",
    "+5% ",
    "-3 MiB+1",
)
FORMULA = ("=", "+", "-", "@", "\t", "\r")
FIGURE = re.compile(r"[-+]?\d[\d,]*(\.\d+)?( ?(%|B|KiB|MiB|GiB))?")
FIGURES = ("-3%", "+12%", "-5.00 MiB", "-1,024", "-0.5", "-7 B")


def md_cells(row: str) -> list[str]:
    """A markdown table row's cells, unescaped, without the one space either side."""
    return [c[1:-1].replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def test_csv_cells_that_spreadsheets_run_are_quoted():
    for formula in FORMULAS:
        cell = csv_cell(formula)
        assert cell.startswith("'") or cell[0] not in "=+-@\t\r", cell
        assert not runnable(cell)
    assert csv_cell("-") == "'-" and csv_cell("plain") == "plain" and csv_cell(-5) == -5
    assert [csv_cell(f) for f in FIGURES] == list(FIGURES)  # a figure is data, shown as it is


def test_markdown_cells_that_spreadsheets_run_are_quoted_and_keep_the_table():
    rows = [{"a": f, "b": f"x{f}"} for f in FORMULAS]
    md = markdown_table(rows, [("a", "a"), ("b", "b")])
    assert not runnable(md)
    body = md.splitlines()[2:]
    assert len(body) == len(FORMULAS)
    for formula, line in zip(FORMULAS, body):
        a, b = md_cells(line)
        shown = inert(formula)  # a tab or CR is no longer one once shown
        assert a == ("'" + shown if shown.startswith(FORMULA) else shown), (formula, a)
        assert b == inert(f"x{formula}")  # not at the start: left as it is
    assert md_cells(body[FORMULAS.index("=1|2")].replace("'", "")) == ["=1|2", "x=1|2"]
    assert "\\|" in body[FORMULAS.index("=1|2")]
    figures = markdown_table([{"a": f} for f in (*FIGURES, -5, 3)], [("a", "a")])
    assert [md_cells(line)[0] for line in figures.splitlines()[2:]] == [*FIGURES, "-5", "3"]


def hostile_recording(path: Path, text: str) -> Path:
    """A recording (written by the recorder) whose strings hold ``text`` wherever a string goes."""
    events = [
        replace(SAMPLE, gpus_reason=text, process=replace(SAMPLE.process, name=text)),
        replace(ALL_EVENTS[1], gpus_reason=text),
        *[e for e in ALL_EVENTS[2:] if not isinstance(e, (Alert,))],
        RunFailed(5.0, "r3", "error", text),
        Notice(5.1, text, "warning"),
        Alert(5.2, 1, "red", text),
    ]
    with Recorder.create(path, RecordingSetup(["run", text], record_text=True), force=True) as recorder:
        for event in events:
            recorder.write(_with_text(event, text))
    return path


def _with_text(event, text: str):
    for name in ("message", "text", "model_name", "name", "model", "kv_type", "tier"):
        if hasattr(event, name) and isinstance(getattr(event, name), str):
            event = replace(event, **{name: text})
    if hasattr(event, "model") and not isinstance(event.model, str):
        event = replace(event, model=replace(event.model, name=text))
    if hasattr(event, "result"):
        event = replace(event, result=hostile_result(text))
    return event


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile_text())
def test_export_of_a_hostile_recording_is_safe_in_every_format(tmp_path, text):
    path = hostile_recording(tmp_path / "hostile.jsonl", text)
    shown = inert(text)
    for fmt, table in (
        ("md", "samples"),
        ("csv", "samples"),
        ("csv", "runs"),
        ("csv", "alerts"),
        ("json", ""),
        ("jsonl", ""),
    ):
        out = export(str(path), fmt, table or "samples")
        assert not runnable(out), (fmt, table)
    doc = json.loads(export(str(path), "json"))
    assert doc["runs"][0]["model"] == shown and doc["samples"][0]["process"]["name"] == shown
    assert doc["header"]["command"] == ["run", shown]
    copy = tmp_path / "copy.jsonl"
    copy.write_text(export(str(path), "jsonl") + "\n")
    assert open_recording(copy).events == open_recording(path).events  # inert already: a copy reads the same


def test_progress_lines_on_stderr_and_watch_lines_are_safe():
    err = io.StringIO()
    printer = Headless(Session(queued=False), stderr=err)
    for text in HOSTILE:
        printer._print_progress(Notice(1.0, text, "warning"))
        printer._print_progress(Alert(1.0, 3, "red", text))
        printer._print_progress(RunFailed(1.0, "r", "does_not_fit", text))
    assert not runnable(err.getvalue()) and err.getvalue().count("\n") == 3 * len(HOSTILE)
    assert inert(EVIL) in err.getvalue()
    assert not runnable(watch_line(replace(SAMPLE, process=replace(SAMPLE.process, name=EVIL))))
    assert not runnable(watch_line(replace(SAMPLE, cpu_quota=CpuQuota(EVIL, 0.5, 10, 2))))


def test_headless_run_of_a_gguf_with_a_hostile_name(tmp_path):
    """The measured case: a GGUF whose general.name is markup plus an OSC 0 title, run for real."""
    name = "[blink]GGUF-MARKUP[/blink]\x1b]0;GGUF-TITLE\x07"
    model = write_tiny_llama(tmp_path / "hostile.gguf", name=name)
    record = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cliff_tui",
            "run",
            "-m",
            str(model),
            "--depth",
            "64",
            "--n-gen",
            "4",
            "--headless",
            "-o",
            "md",
            "--record",
            str(record),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout and not runnable(proc.stderr)
    assert "[blink]GGUF-MARKUP[/blink]␛]0;GGUF-TITLE␇" in proc.stdout
    for fmt in ("md", "csv", "json", "jsonl"):
        out = export(str(record), fmt, "runs")
        assert "\x1b" not in out and not runnable(out), fmt
        assert "GGUF-TITLE␇" in out or "GGUF-TITLE\\u2407" in out, fmt
    log = [e.text for e in open_recording(record).events if type(e).__name__ == "LogLine"]
    assert log and not any(runnable(line) for line in log)


def test_watch_once_is_safe():
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "watch", "--once"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and not runnable(proc.stdout)
