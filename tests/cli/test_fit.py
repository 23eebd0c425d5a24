"""``cliff-tui fit``: the table from the GGUF header alone, with a triangulation's measurements, and
its bad input; a real subprocess each time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_model import write_tiny_gemma3

DATA = Path(__file__).parents[1] / "data"
GiB = 1024**3


def fit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliff_tui", "fit", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.model
def test_fit_on_the_default_model_prints_the_flags_line():
    proc = fit("--capacity", "8GiB")
    assert proc.returncode == 0, proc.stderr
    assert "| q8_0 | on |" in proc.stdout and "invalid: a q8_0 V cache needs flash attention" in proc.stdout
    assert "Suggested: `llama-server -m " in proc.stdout and " -c 8192 -ctk " in proc.stdout


@pytest.mark.model
def test_fit_json_carries_the_same_table():
    record = json.loads(fit("--capacity", "8GiB", "--json").stdout)
    f16 = next(o for o in record["options"] if o["type_k"] == "f16" and o["flash_attn"])
    q8 = next(o for o in record["options"] if o["type_k"] == "q8_0" and o["flash_attn"])
    assert f16["basis"] == "theory" and f16["bytes_per_token"] == 23040  # 30 × 3 × 64 × 2 × 2 B
    assert q8["bytes_per_token"] < f16["bytes_per_token"] and f16["fits"] and f16["max_context"] == 8192
    assert f16["command"].endswith("-c 8192 -ctk f16 -ctv f16 -fa on")


def test_fit_on_a_sliding_window_model_has_swa_rows(tmp_path):
    model = write_tiny_gemma3(tmp_path / "gemma3.gguf")
    record = json.loads(fit("-m", str(model), "--capacity", "1GiB", "--json").stdout)
    swa = {o["swa_full"] for o in record["options"]}
    assert swa == {True, False}
    windowed = next(o for o in record["options"] if not o["swa_full"] and o["valid"])
    full = next(
        o
        for o in record["options"]
        if o["swa_full"] and o["type_k"] == windowed["type_k"] and o["flash_attn"] == windowed["flash_attn"]
    )
    assert windowed["fixed_bytes"] > 0 and windowed["bytes_per_token"] < full["bytes_per_token"]
    assert "--swa-full" in full["command"]


@pytest.mark.model
def test_fit_from_a_triangulation_uses_the_measured_line():
    record = json.loads(fit("--from", str(DATA / "smollm2_triangulation.jsonl"), "--capacity", "8GiB", "--json").stdout)
    f16 = next(o for o in record["options"] if o["type_k"] == "f16" and o["flash_attn"])
    q8 = next(o for o in record["options"] if o["type_k"] == "q8_0" and o["flash_attn"])
    assert f16["basis"] == "measured" and f16["bytes_per_token"] > 23040  # touched: more than the KV alone
    assert q8["basis"] == "theory + measured"


@pytest.mark.model
def test_a_recording_with_flash_attention_auto_measures_only_the_flash_attention_row():
    record = json.loads(fit("--from", str(DATA / "smollm2_triangulation.jsonl"), "--capacity", "8GiB", "--json").stdout)
    measured = [(o["type_k"], o["flash_attn"], o["swa_full"]) for o in record["options"] if o["basis"] == "measured"]
    assert measured == [("f16", True, False)]  # the recording's runs: f16, flash attention "auto"


@pytest.fixture(scope="module")
def gemma3_triangulation(tmp_path_factory):
    """A real triangulation of a tiny sliding-window model, as its -o json output."""
    folder = tmp_path_factory.mktemp("swa")
    model = write_tiny_gemma3(folder / "gemma3.gguf")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cliff_tui",
            "triangulate",
            "-m",
            str(model),
            "--headless",
            "--depths",
            "256,512",
            "-o",
            "json",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = folder / "triangulation.json"
    out.write_text(proc.stdout)
    return model, out


def test_a_sliding_window_triangulation_measures_only_its_own_settings(gemma3_triangulation):
    model, tri = gemma3_triangulation
    runs = json.loads(tri.read_text())["runs"]
    assert {(r["flash_attn"], r["swa_full"]) for r in runs} == {("auto", False)}
    record = json.loads(fit("-m", str(model), "--from", str(tri), "--capacity", "1GiB", "--json").stdout)
    measured = [(o["type_k"], o["flash_attn"], o["swa_full"]) for o in record["options"] if o["basis"] == "measured"]
    assert measured == [("f16", True, False)]
    assert {o["basis"] for o in record["options"] if o["valid"]} == {"measured", "theory + measured"}


@pytest.mark.parametrize(
    "args, words",
    [
        (["-m", "/nonexistent.gguf"], "model file not found"),
        (["--from", "/nonexistent.json"], "triangulation file not found"),
    ],
)
def test_fit_bad_input_is_one_line_and_exit_2(args, words, tiny_model):
    proc = fit(*args) if "-m" in args else fit("-m", str(tiny_model), *args)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


NOT_A_LINE = {
    "slope_bytes_per_token": {"touched": "Infinity"},
    "intercept_bytes": {"touched": 1},
    "runs": [{"cache_type_k": "f16", "cache_type_v": "f16", "flash_attn": "on"}],
}


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"hello": 1}', "is not a triangulation's JSON output"),
        ('{"kv_compare": 5}', "is not a triangulation's JSON output"),
        (json.dumps(NOT_A_LINE).replace('"Infinity"', "Infinity"), "a slope or an intercept is not a finite number"),
        (json.dumps(NOT_A_LINE).replace('"Infinity"', "1" + "0" * 400), "a slope or an intercept is not a finite"),
        ("[" * 100_000 + "]" * 100_000, "is neither a cliff-tui recording nor a triangulation's JSON output"),
    ],
    ids=["no-slopes", "kv-compare-not-a-list", "infinite-slope", "400-digit-slope", "nested-too-deep"],
)
def test_fit_from_a_file_that_is_no_triangulation_is_one_line(tmp_path, content, words, tiny_model):
    junk = tmp_path / "notes.json"
    junk.write_text(content)
    proc = fit("-m", str(tiny_model), "--from", str(junk))
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def test_a_triangulation_ends_with_the_fit_table_in_md_and_json():
    from cliff_tui.recording.export import replay_all
    from cliff_tui.recording.reader import open_recording
    from cliff_tui.report.triangulation import triangulation_output

    store = replay_all(open_recording(str(DATA / "smollm2_triangulation.jsonl")))
    md = triangulation_output(store, "md")
    table = md[md.index("## What fits") :]
    assert "| f16 ★ | on | no | measured |" in table and "Suggested: `llama-server -m " in table
    record = json.loads(triangulation_output(store, "json"))
    fit_part = record["fit"]
    assert fit_part["best_command"].endswith("-c 8192 -ctk f16 -ctv f16 -fa on -np 1")
    f16 = next(o for o in fit_part["options"] if o["basis"] == "measured")
    # the measured row at the target is the triangulation's own projection (one slot, as it ran)
    assert f16["need_bytes"] == round(record["projection"]["projected_bytes"])
    # one slot: the logits the base leaves out are the ones the table adds back
    assert fit_part["base_bytes"] == round(record["intercept_bytes"]["touched"]) - fit_part["output_bytes"]


@pytest.mark.model
def test_vram_asks_what_fits_on_a_gpu_of_that_size():
    proc = fit("--vram", "100MiB", "--reserve", "4MiB", "-c", "4096")
    assert proc.returncode == 0, proc.stderr
    assert "- tier: a GPU's VRAM (what if: --vram), 100 MiB less 4.00 MiB reserve" in proc.stdout
    assert "(the GGUF tensors a full offload puts on the GPU; the token embeddings stay in RAM); compute" in proc.stdout
    assert "| f16, -ngl " in proc.stdout and "layers and the output layer on the GPU" in proc.stdout
    suggested = proc.stdout.split("Suggested: `")[1].split("`")[0]
    assert " -c 4096 " in suggested and " -ngl " in suggested
    record = json.loads(fit("--vram", "100MiB", "--reserve", "4MiB", "-c", "4096", "--json").stdout)
    partial = [o for o in record["options"] if o["n_gpu_layers"] is not None]
    assert partial and all(o["fits"] and f"-ngl {o['n_gpu_layers']}" in o["command"] for o in partial)
    assert " -ngl " in record["best_command"]


@pytest.mark.model
def test_vram_large_enough_needs_no_ngl_rows():
    record = json.loads(fit("--vram", "8GiB", "--json").stdout)
    assert record["tier"] == "a GPU's VRAM (what if: --vram)" and record["output_bytes"] == 0  # logits stay in RAM
    assert all(o["n_gpu_layers"] is None for o in record["options"]) and " -ngl " not in record["best_command"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--vram", "1GiB", "--capacity", "2GiB"], "not allowed with argument"),
        (
            ["--vram", "100MiB"],
            "cliff-tui: the default reserve (256 MiB) leaves nothing of the 100 MiB of a GPU's VRAM "
            "(what if: --vram): pass --reserve with less (0 keeps nothing free)\n",
        ),
        (
            ["--capacity", "1GiB", "--reserve", "1GiB"],
            "cliff-tui: the reserve (1.00 GiB) leaves nothing of the 1.00 GiB "
            "of the given capacity: pass a smaller --reserve\n",
        ),
        (
            ["--vram", "0.4"],
            "argument --vram: a tier of '0.4' holds nothing: give its size with a unit, e.g. 24GiB "
            "(a bare number is bytes)\n",
        ),
        (["--capacity", "0GiB"], "argument --capacity: a tier of '0GiB' holds nothing: give its size with a unit"),
    ],
)
def test_vram_bad_input_exits_2(args, words, tiny_model):
    proc = fit("-m", str(tiny_model), *args)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "architecture, extra",
    [
        ("clip", {"clip.has_vision_encoder": True}),  # a multimodal projector (mmproj-*.gguf)
        ("llama", {"general.type": "adapter", "adapter.type": "lora"}),
    ],
)
def test_a_gguf_that_is_no_language_model_is_one_line(tmp_path, architecture, extra):
    import gguf
    import numpy as np

    path = tmp_path / "mmproj.gguf"
    writer = gguf.GGUFWriter(str(path), architecture)
    for key, value in extra.items():
        (writer.add_bool if isinstance(value, bool) else writer.add_string)(key, value)
    for i in range(2):
        writer.add_tensor(f"blk.{i}.attn_q.weight", np.ones((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    proc = fit("-m", str(path), "-c", "4096", "--capacity", "8GiB")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().endswith(
        f"the header describes no language model's layers ({architecture}): "
        "a multimodal projector or a LoRA adapter? pass -m the model itself"
    )
