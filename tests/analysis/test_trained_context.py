"""Wherever a largest context or a projection passes the model's trained context, the answer says
so, naming the header's rope scaling as llama.cpp's flags where the header has it."""

from __future__ import annotations

import json
import subprocess
import sys

from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.recording.export import replay_all
from cliff_tui.recording.reader import open_recording
from cliff_tui.report.triangulation import triangulation_output
from paths import DATA
from tiny_model import write_tiny_llama


def fit(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", "--capacity", "8GiB", "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_header_rope_scaling_is_read_and_named_as_llama_cpp_flags(tmp_path):
    model = write_tiny_llama(tmp_path / "long.gguf", n_ctx_train=32768, rope_scaling=("yarn", 4.0, 8192))
    info = read_model_info(model)
    assert (info.rope_scaling, info.rope_scaling_factor, info.rope_scaling_original_ctx) == ("yarn", 4.0, 8192)
    record = fit("-m", str(model), "-c", "64k")
    past = [o for o in record["options"] if o["past_trained"]]
    assert past and all(o["max_context"] > 32768 for o in past)
    [note] = [n for n in record["notes"] if "trained context" in n]
    assert note.startswith("† marks a largest context past the trained context (32,768 tokens, rope scaling")
    assert "--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 8192" in note


def test_a_largest_context_within_the_trained_one_says_nothing(tmp_path):
    record = fit("-m", str(write_tiny_llama(tmp_path / "m.gguf", n_ctx_train=4096)))
    assert not any(o["past_trained"] for o in record["options"])
    assert not any("trained context (" in n for n in record["notes"])


def test_a_target_past_the_trained_context_is_named_where_nothing_reaches_it(tmp_path):
    model = write_tiny_llama(tmp_path / "m.gguf", n_ctx_train=4096)
    record = fit("-m", str(model), "-c", "1000k", "--capacity", "1500KiB", "--reserve", "0")
    assert not any(o["past_trained"] for o in record["options"])
    assert any(n.startswith("the target 1,000,000 is past the trained context (4,096 tokens") for n in record["notes"])


def test_the_recorded_triangulation_says_its_largest_context_is_past_the_trained_one():
    store = replay_all(open_recording(DATA / "smollm2_triangulation.jsonl"))
    text = triangulation_output(store, "md")
    assert (
        "- the largest context, 852,992 tokens, is past the trained context (8,192 tokens, no rope scaling "
        "in the header): answers degrade past it"
    ) in text
    [tri] = store.runs.triangulations().values()
    assert tri.projection.max_context > 8192 and tri.projection.trained_note
