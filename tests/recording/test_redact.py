"""Recordings to share: ``export --redact`` and ``record --redact`` leave no hostname, no user path,
no command-line path and no original PID, and the header says what was replaced."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from cliff_tui.codec import event_to_plain
from cliff_tui.errors import BadInput
from cliff_tui.events import LogLine, Notice, RunFailed, ServerReading
from cliff_tui.recording.export import export
from cliff_tui.recording.reader import open_recording
from cliff_tui.recording.redact import Redactor
from cliff_tui.records import GpuProcess
from recording.test_recording import ALL_EVENTS, GPU, SAMPLE, wait_for_samples

HOST = "secret-box.example.org"
PIDS = (987654, 987655)
SECRETS = ("secret-box", "/home/", "alice", "/srv/private", *map(str, PIDS))
MODEL_PATH = "/home/alice/models/qwen.gguf"


def _private_events() -> list:
    gpu = replace(GPU, processes=(GpuProcess(PIDS[0], 10), GpuProcess(PIDS[1], None)))
    sample = replace(SAMPLE, gpus=(gpu,), process=replace(SAMPLE.process, pid=PIDS[0], name="llama-server"))
    started = next(e for e in ALL_EVENTS if type(e).__name__ == "RunStarted")
    settings = replace(started.settings, model_path=MODEL_PATH, prompt_file="/srv/private/notes.txt")
    return [
        replace(started, settings=settings, model=replace(started.model, path=MODEL_PATH)),
        sample,
        LogLine(3.8, 2, f"llama_model_loader: loaded meta data from {MODEL_PATH}"),
        Notice(3.9, f"following PID {PIDS[1]} on secret-box", "info"),
        RunFailed(4.0, "r2", "error", "cannot read /srv/private/notes.txt (C:\\Users\\alice\\x)"),
        ServerReading(
            4.1,
            "llama-server",
            "http://secret-box.example.org:8080",
            "unreachable",
            f"process {PIDS[0]} has exited; /Users/alice/logs",
        ),
    ]


@pytest.fixture
def private_recording(tmp_path):
    header = {
        "type": "header",
        "format": "cliff-tui-recording",
        "schema": 1,
        "tool_version": "0.1.0",
        "created": 1.0,
        "record_text": False,
        "gpus": [],
        "driver": None,
        "command": [
            "run",
            "-m",
            MODEL_PATH,
            "--pid",
            str(PIDS[0]),
            "--prompt-file=/srv/private/notes.txt",
            "--record",
            "/home/alice/rec.jsonl",
        ],
        "machine": {"hostname": HOST, "platform": "linux", "os": "Linux-6.1", "cpu_count": 8, "python": "3.12"},
    }
    path = tmp_path / "private.jsonl"
    lines = [json.dumps(header)] + [json.dumps(event_to_plain(e)) for e in _private_events()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_redactor_rules():
    r = Redactor([HOST])
    assert r.path(MODEL_PATH) == "~/models/qwen.gguf" and r.path("/srv/private/m.gguf") == "…/m.gguf"
    assert r.path("C:\\Users\\alice\\m.gguf") == "~\\m.gguf" and r.path("models/m.gguf") == "models/m.gguf"
    assert r.text(f"pid {PIDS[1]}, PID {PIDS[0]}, process {PIDS[1]}") == "pid 1, PID 2, process 1"
    assert r.text("on SECRET-BOX and secret-box.example.org") == "on <host> and <host>"
    assert r.url("http://secret-box:8080") == "http://<host>:8080" and r.url("http://127.0.0.1:8080").endswith(":8080")
    assert r.url("http://[secret-box:8080") == "http://[<host>:8080"  # not a URL: redacted as text
    assert r.command(["--pid", str(PIDS[0]), "--record=/srv/private/r.jsonl"]) == ["--pid", "2", "--record=…/r.jsonl"]
    found = {"settings": [{"name": "model", "value": "/opt/store/llama.gguf", "source": "command line (-m)"}]}
    assert r.plain(found)["settings"][0]["value"] == "…/llama.gguf"  # a found server's flags are its command line


@pytest.mark.parametrize("fmt", ["md", "csv", "json", "jsonl"])
def test_export_redact_leaves_no_hostname_user_path_or_pid(private_recording, fmt):
    assert all(secret in private_recording.read_text() for secret in SECRETS)  # they were there
    out = export(str(private_recording), fmt, redact=True)
    for secret in SECRETS:
        assert secret not in out, (fmt, secret)
    if fmt == "md":
        assert "redacted: hostname, user paths, command-line paths, PIDs replaced" in out


def test_the_redacted_recording_replays_with_stable_placeholders(private_recording, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "export", str(private_recording), "--redact", "-o", "jsonl"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert not any(secret in proc.stdout for secret in SECRETS)
    shared = tmp_path / "shared.jsonl"
    shared.write_text(proc.stdout + "\n")
    recording = open_recording(shared)
    assert recording.header["redacted"] and recording.header["machine"]["hostname"] == "<host>"
    assert recording.header["command"][:5] == ["run", "-m", "~/models/qwen.gguf", "--pid", "1"]
    started, sample, log, notice, failed, session = recording.events
    assert sample.process.pid == 1 and [p.pid for p in sample.gpus[0].processes] == [1, 2]
    assert notice.text == "following PID 2 on <host>" and session.message.startswith("process 1 has exited; ~")
    assert started.settings.model_path == started.model.path == "~/models/qwen.gguf"
    assert started.settings.prompt_file == "…/notes.txt" and "…/notes.txt" in failed.message
    assert session.url == "http://<host>:8080" and log.text.endswith("~/models/qwen.gguf")
    assert len(recording.events) == len(_private_events()) and not recording.problems


def test_record_redact_writes_a_shareable_file(tmp_path, child):
    path = tmp_path / "mine.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cliff_tui",
            "watch",
            "--headless",
            "-i",
            "0.2",
            "--pid",
            str(child.pid),
            "--record",
            str(path),
            "--redact",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_samples(path, 3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    recording = open_recording(path)
    assert recording.header["redacted"] and recording.header["machine"]["hostname"] == "<host>"
    assert recording.header["command"][recording.header["command"].index("--pid") + 1] == "1"
    assert "…/mine.jsonl" in recording.header["command"] and str(tmp_path) not in path.read_text()
    pids = {e.process.pid for e in recording.events if getattr(e, "process", None) is not None}
    assert pids == {1}


@pytest.mark.parametrize(
    "fields",
    [
        {"machine": "box", "gpus": ["H200"], "command": 5, "redacted": 5},
        {"gpus": [{"name": 7}], "command": [1, None], "tool_version": ["x"]},
        {"command": ["watch", "--pid", "²"]},
        {"machine": {"hostname": 5}},
    ],
)
@pytest.mark.parametrize("fmt", ["md", "csv", "json", "jsonl"])
@pytest.mark.parametrize("redact", [False, True])
def test_a_header_with_fields_of_the_wrong_shape_still_exports(tmp_path, fields, fmt, redact):
    header = {"type": "header", "format": "cliff-tui-recording", "schema": 1, **fields}
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(event_to_plain(SAMPLE)) + "\n")
    out = export(str(path), fmt, redact=redact)
    assert out and "Traceback" not in out


@pytest.mark.parametrize("depth", [900, 100_000])  # near the interpreter's limit (read, then walked) and past it
def test_a_header_nested_too_deep_reads_or_is_one_clear_error(tmp_path, depth):
    path = tmp_path / "deep.jsonl"
    nested = "[" * depth + "]" * depth
    path.write_text('{"type": "header", "format": "cliff-tui-recording", "schema": 1, "x": ' + nested + "}\n")
    try:
        open_recording(path)
    except BadInput as exc:
        assert "nested too deep" in str(exc)
    else:
        assert depth < 1000
