"""The engine on real llama.cpp: a tiny GGUF written by the tests, and SmolLM2 at shallow depths."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import threading
import time

import pytest

from cliff_tui.engine.llama import Context
from cliff_tui.engine.llama_log import parse_buffer_line, parse_flash_attn
from cliff_tui.engine.runner import (
    MIN_WINDOW_TOKENS,
    Run,
    RunOptions,
    context_size,
    probe_depths,
    window_length,
)
from cliff_tui.engine.settings import resolve_settings
from cliff_tui.errors import BadInput, Cancelled, DoesNotFit
from cliff_tui.events import DecodeWindow, Notice, RunFailed, RunFinished, RunProgress
from cliff_tui.recording.reader import open_recording
from cliff_tui.records import BufferSize, RunSettings


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliff_tui", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB",
            BufferSize("CPU_Mapped", "model", round(92.10 * 2**20)),
        ),
        ("llama_kv_cache:        CPU KV buffer size =    45.00 MiB", BufferSize("CPU", "kv", 47185920)),
        (
            "sched_reserve:        CPU compute buffer size =   102.51 MiB",
            BufferSize("CPU", "compute", round(102.51 * 2**20)),
        ),
        ("llama_kv_cache_unified:      CUDA0 KV buffer size =  1024.00 MiB", BufferSize("CUDA0", "kv", 1073741824)),
        (
            "llama_context:  CUDA_Host  output buffer size =     0.58 MiB",
            BufferSize("CUDA_Host", "output", round(0.58 * 2**20)),
        ),
        (
            "llama_new_context_with_model:      Metal compute buffer size =   164.01 MiB",
            BufferSize("Metal", "compute", round(164.01 * 2**20)),
        ),
        (
            "load_tensors: RPC0[127.0.0.1:50052] model buffer size =    33.82 MiB",
            BufferSize("RPC0[127.0.0.1:50052]", "model", round(33.82 * 2**20)),
        ),
        ("llama_context: n_ctx = 2048", None),
    ],
)
def test_buffer_log_lines_match_the_suffix_whatever_the_prefix(line, expected):
    assert parse_buffer_line(line) == expected


def test_flash_attention_state_from_the_log():
    assert parse_flash_attn("resolve_fused_ops: Flash Attention enabled") is True
    assert parse_flash_attn("llama_context: flash_attn = auto") is None


def test_settings_resolution():
    s, notes = resolve_settings(RunSettings("m", 100, 10, cache_type_v="q8_0"))
    assert s.flash_attn == "on" and "flash attention turned on" in notes[0]
    assert s.threads and s.threads >= 1
    with pytest.raises(BadInput, match="needs flash attention"):
        resolve_settings(RunSettings("m", 100, 10, cache_type_v="q8_0", flash_attn="off"))
    with pytest.raises(BadInput, match="smaller than"):
        resolve_settings(RunSettings("m", 1000, 10, n_ctx=512))
    assert context_size(RunSettings("m", 1000, 32)) == 1280  # padded to 256 as llama.cpp pads


def test_tiny_model_run_measures_everything(tiny_model):
    events = []
    result = Run(RunSettings(str(tiny_model), 256, 16), events.append).execute()
    assert result.n_ctx == 512 and result.depth == 256
    assert set(result.kv_buffers) == {"CPU"} and result.kv_device == "CPU"
    # textbook f16 KV: 2 layers × 2 KV heads × (32 + 32) × 2 bytes = 512 B/token, × 512 cells
    # (the log prints MiB with two decimals)
    assert result.kv_buffers["CPU"] == pytest.approx(512 * 512, abs=0.01 * 2**20)
    assert result.baseline_tok_s and result.depth_tok_s and result.prefill_tok_s
    assert [p.phase for p in result.decode_points].count("probe") == 7
    assert result.rss_peak_bytes >= result.rss_baseline_bytes > 0
    # no spill on a tiny CPU run; a slower decode may still be put down to a measured load beside it
    assert result.cliff is not None and result.cliff.level != "red", result.cliff.text
    assert result.verdict.level != "red", result.verdict.text
    assert result.verdict.level != "amber" or result.verdict.cause, result.verdict.text
    kinds = {type(e) for e in events}
    assert {RunProgress, DecodeWindow, RunFinished} <= kinds
    phases = [e.phase for e in events if isinstance(e, RunProgress)]
    assert phases[0] == "load" and "prefill" in phases and phases[-1] == "done"


def test_probes_leave_out_what_an_earlier_run_measured():
    assert probe_depths(65_000, 7) == [8125, 16250, 24375, 32500, 40625, 48750, 56875]
    # an earlier point decoded up to 32,056: 32,500 is within half a step of it
    assert probe_depths(65_000, 7, measured=32_056) == [40625, 48750, 56875]
    assert probe_depths(65_000, 7, measured=28_000) == [32500, 40625, 48750, 56875]


def test_a_window_closes_after_its_tokens_or_its_seconds():
    options = RunOptions(window_tokens=8, window_seconds=4.0)
    assert window_length(8, 0.01, options) == 8
    assert window_length(8, 0.7, options) == 6
    assert window_length(8, 2.0, options) == MIN_WINDOW_TOKENS  # never fewer, however slow
    assert window_length(6, 0.5, options) == 6


@pytest.mark.parametrize("seconds, tokens", [(1e-6, MIN_WINDOW_TOKENS), (60.0, 8)])
def test_slow_tokens_close_windows_and_probes_sooner(tiny_model, seconds, tokens):
    events = []
    options = RunOptions(window_seconds=seconds)
    result = Run(RunSettings(str(tiny_model), 256, 24), events.append, options=options).execute()
    depth = [e for e in events if isinstance(e, DecodeWindow) and e.phase == "depth"]
    probes = [p for p in result.decode_points if p.phase == "probe"]
    assert [w.n_tokens for w in depth] == [tokens] * (24 // tokens)
    assert {p.n_tokens for p in probes} == {min(tokens, options.probe_tokens)}
    points = [p for p in result.decode_points if p.phase == "depth"]
    assert [p.depth for p in points] == [256 + k * tokens for k in range(len(points))]


def test_quantised_cache_needs_and_gets_flash_attention(tiny_model):
    result = Run(
        RunSettings(str(tiny_model), 128, 8, cache_type_k="q8_0", cache_type_v="q8_0"), lambda e: None
    ).execute()
    assert result.settings.flash_attn == "on"
    # q8_0 stores 34 bytes per 32 values: 2 layers × 2 heads × 64 values × 1.0625 B = 272 B/token × 256 cells
    assert result.kv_buffers["CPU"] == pytest.approx(272 * 256, abs=0.01 * 2**20)


def test_a_context_that_cannot_fit_is_a_clean_failure(tiny_model):
    events = []
    with pytest.raises(DoesNotFit, match="does not fit"):
        Run(RunSettings(str(tiny_model), 4_000_000_000, 8, n_gpu_layers=0), events.append).execute()
    failed = [e for e in events if isinstance(e, RunFailed)]
    assert failed and failed[0].kind == "does_not_fit" and failed[0].n_ctx >= 4_000_000_000


def test_a_context_the_address_space_cannot_hold_fails_in_llama_cpp_as_does_not_fit(tiny_model, tmp_path):
    """RLIMIT_AS below the KV cache: the check from RAM and swap lets the context through, and
    llama.cpp's own allocation fails as the context is created."""
    n_ctx = 2 * 1024 * 1024  # 1 GiB of the tiny model's f16 cache (512 B a cell), in 1 GiB of address space
    record = tmp_path / "r.jsonl"
    argv = ["run", "--headless", "-m", str(tiny_model), "--depth", "64", "--n-gen", "8", "-t", "2"]
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}  # glibc's per-thread arenas reserve address space too

    def one_gib_of_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", *argv, "-c", str(n_ctx), "--record", str(record)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=one_gib_of_address_space,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert re.fullmatch(
        r"cliff-tui: a context of 2,097,152 tokens does not fit: .*allocate.*kv cache — try a smaller -c/--depth, .*",
        proc.stderr.strip().splitlines()[-1],
    ), proc.stderr
    failed = [e for e in open_recording(record).events if isinstance(e, RunFailed)]
    assert [(f.kind, f.n_ctx) for f in failed] == [("does_not_fit", n_ctx)]
    unlimited = subprocess.run(  # the same context where the address space is not held
        [sys.executable, "-m", "cliff_tui", *argv, "-c", str(n_ctx), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert unlimited.returncode == 0, unlimited.stderr[-2000:]
    assert json.loads(unlimited.stdout)["n_ctx"] == n_ctx


@pytest.mark.model
def test_cancel_during_prefill_stops_the_chunk_in_flight(smollm2, monkeypatch):
    cancel = threading.Event()
    chunks: list[tuple[bool, str]] = []  # prefill calls: (cancel already set as it began, how it ended)
    decode = Context.decode

    def counted(self, tokens):
        if len(tokens) == 1:  # a probe's token, not a prefill chunk
            return decode(self, tokens)
        began_cancelled = cancel.is_set()
        try:
            decode(self, tokens)
        except Cancelled:
            chunks.append((began_cancelled, "aborted"))
            raise
        chunks.append((began_cancelled, "done"))

    monkeypatch.setattr(Context, "decode", counted)
    events = []
    # chunks of 128 between the probes at 1,024 and 2,048: the cancel lands inside one
    run = Run(RunSettings(str(smollm2), 8192, 8, batch_size=128, ubatch_size=128), events.append, cancel=cancel)
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(_capture(run.execute)))
    thread.start()
    deadline = time.monotonic() + 300  # a loaded machine prefills slowly
    while time.monotonic() < deadline and not any(
        isinstance(e, RunProgress) and e.phase == "prefill" and 1024 < e.depth <= 1664 for e in events
    ):
        time.sleep(0.01)
    cancel.set()
    thread.join(120)
    assert not thread.is_alive()
    assert isinstance(outcome[0], Cancelled)
    # the chunk in flight was stopped inside llama.cpp (or, where it had just ended, the next one
    # as it began): none ran to its end after the cancel
    assert chunks[-1][1] == "aborted"
    assert not [c for c in chunks if c == (True, "done")]


def _capture(fn):
    try:
        return fn()
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp, tiny: "/nonexistent.gguf", "model file not found"),
        (lambda tmp, tiny: _write(tmp / "notes.txt", b"just some text\n"), "is not a GGUF file"),
        (lambda tmp, tiny: _write(tmp / "cut.gguf", tiny.read_bytes()[: tiny.stat().st_size // 2]), "truncated GGUF"),
        (lambda tmp, tiny: _write(tmp / "head.gguf", tiny.read_bytes()[:100]), "truncated GGUF"),
    ],
)
def test_bad_model_files_exit_2_with_one_line(tmp_path, tiny_model, make, message):
    proc = cli("run", "-m", str(make(tmp_path, tiny_model)), "--headless")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_quantised_v_without_flash_attention_exits_2(tiny_model):
    proc = cli("run", "-m", str(tiny_model), "--headless", "-ctv", "q8_0", "-fa", "off")
    assert proc.returncode == 2 and "needs flash attention" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.model
def test_headless_run_on_the_default_model_prints_the_record():
    proc = cli("run", "--headless", "--depth", "1024", "--n-gen", "32", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    for key in (
        "depth",
        "n_ctx",
        "baseline_tok_s",
        "depth_tok_s",
        "drop_pct",
        "verdict",
        "ram_delta_bytes",
        "kv_buffers",
        "gpus",
    ):
        assert key in record
    assert record["depth"] == 1024 and record["n_ctx"] == 1280
    assert "CPU" in record["kv_buffers"]
    # SmolLM2: 30 layers × 3 KV heads × (64 + 64) × 2 B = 22.5 KiB per token, f16
    assert record["kv_buffers"]["CPU"] == pytest.approx(1280 * 23040, rel=0.01)
    assert record["gpus"] == [] and "no GPU" in record["gpus_reason"]
    # nothing spills (CPU-only, no swap): no cliff; amber only for the load other tests put on this machine
    assert record["verdict"] in ("ok", "info", "amber"), record["verdict_text"]
    if record["verdict"] == "amber":
        assert "other processes used" in record["verdict_text"], record["verdict_text"]


@pytest.mark.parametrize("fmt", ["md", "csv", "jsonl"])
def test_headless_formats(tiny_model, fmt):
    proc = cli("run", "-m", str(tiny_model), "--headless", "--depth", "128", "--n-gen", "8", "-o", fmt)
    assert proc.returncode == 0, proc.stderr
    if fmt == "md":
        assert proc.stdout.startswith("| model |") and "\ncliff: " in proc.stdout
    elif fmt == "csv":
        header, _row = proc.stdout.strip().splitlines()[:2]
        assert "baseline_tok_s" in header and "kv_buffers.CPU" in header
    else:
        assert json.loads(proc.stdout.strip().splitlines()[0])["depth"] == 128


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_a_prompt_file_shorter_than_the_depth_is_repeated_and_says_so(tiny_model, tmp_path):
    document = tmp_path / "GPL-3"
    document.write_text("the quick brown fox jumps over the lazy dog " * 4)
    events: list = []
    Run(RunSettings(str(tiny_model), 256, 8, prompt_file=str(document)), events.append).execute()
    (note,) = [e.text for e in events if isinstance(e, Notice) and "repeated" in e.text]
    assert note.startswith("GPL-3: ") and note.endswith(" to reach 256")
    one_copy = int(note.split(": ")[1].split(" tokens")[0])
    assert 1 < one_copy < 256 and f"×{256 / one_copy:.2f}" in note


def test_a_prompt_file_longer_than_the_depth_is_cut_silently(tiny_model, tmp_path):
    document = tmp_path / "long.txt"
    document.write_text("the quick brown fox jumps over the lazy dog " * 200)
    events: list = []
    Run(RunSettings(str(tiny_model), 128, 8, prompt_file=str(document)), events.append).execute()
    assert not [e for e in events if isinstance(e, Notice) and "repeated" in e.text]
