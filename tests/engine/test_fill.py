"""Filling the KV cache without a prefill, on real llama.cpp: tiny GGUFs, and SmolLM2 at 2k."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

from cliff_tui.engine import fill
from cliff_tui.engine.fill import FillUnavailable, KvFiller, Layout, parse_state
from cliff_tui.engine.llama import Context, L, LoadedModel
from cliff_tui.engine.options import AUTO_REAL_DEPTH, choose_fill
from cliff_tui.engine.runner import Run, RunOptions
from cliff_tui.engine.settings import resolve_settings
from cliff_tui.engine.worker import PrefillProfile
from cliff_tui.errors import Cancelled
from cliff_tui.events import DecodeWindow, Notice
from cliff_tui.jobs.triangulate import TriangulateJob
from cliff_tui.jobs.triangulation_plan import DEFAULT_DEPTHS
from cliff_tui.records import RunSettings
from cliff_tui.report.runs import run_record, run_rows
from tiny_model import write_tiny


def _context(path, n_ctx: int, **knobs) -> tuple[LoadedModel, Context]:
    settings, _ = resolve_settings(RunSettings(str(path), n_ctx // 2, 8, **knobs))
    model = LoadedModel(str(path), 0)
    return model, Context(model, n_ctx, settings)


KNOBS = {
    "fa on": {"flash_attn": "on"},
    "fa off (V transposed)": {"flash_attn": "off"},
    "q8_0 cache": {"cache_type_k": "q8_0", "cache_type_v": "q8_0"},
}


@pytest.fixture(params=list(KNOBS))
def tiny_context(tiny_model, request):
    knobs = KNOBS[request.param]
    model, context = _context(tiny_model, 2048, **knobs)
    yield model, context, knobs
    context.free()
    model.free()


def _tokens(model: LoadedModel, n: int) -> list[int]:
    from cliff_tui.engine.tokens import prompt_tokens

    return prompt_tokens(model, n).tokens


def _saved(context: Context, tokens: list[int], path) -> bytes:
    context.clear()
    for i in range(0, len(tokens), context.n_ubatch):
        context.decode(tokens[i : i + context.n_ubatch])
    context.save_state(str(path), tokens)
    return path.read_bytes()


def test_auto_fills_only_deep_runs():
    assert choose_fill("auto", AUTO_REAL_DEPTH) == "real"
    assert choose_fill("auto", AUTO_REAL_DEPTH + 1) == "synthetic"
    assert choose_fill("real", 10**6) == "real" and choose_fill("synthetic", 10) == "synthetic"


def test_a_state_written_at_the_learned_depth_is_the_one_llama_cpp_saved(tiny_context, tmp_path):
    model, context, knobs = tiny_context
    tokens = _tokens(model, 300)
    saved = _saved(context, tokens, tmp_path / "saved.bin")
    layout = parse_state(io.BytesIO(saved), keep=len(tokens))
    assert layout.learned == 300 and len(layout.sections) == 1
    section = layout.sections[0]
    assert section.window is None and len(section.k) == len(section.v) == 2
    assert section.v_trans == (knobs.get("flash_attn") == "off")
    layout.write(str(tmp_path / "written.bin"), tokens)
    assert (tmp_path / "written.bin").read_bytes() == saved
    assert layout.nbytes(300) == len(saved)


def test_a_fill_holds_the_cells_written_and_decodes_on_them(tiny_context):
    model, context, _knobs = tiny_context
    tokens = _tokens(model, 1500)
    with KvFiller(context, tokens[:256]) as filler:
        filler.fill(tokens[:1400])
        assert context.used_cells() == 1400
        filler.fill(tokens[:700])  # a shallower fill replaces the deeper one
        assert context.used_cells() == 700
    context.decode(tokens[700:800])
    assert context.used_cells() == 800


def _logits_after(context: Context, token: int) -> np.ndarray:
    context.decode((token,))
    logits = L.llama_get_logits_ith(context.ptr, -1)
    return np.ctypeslib.as_array(logits, shape=(context.model.n_vocab,)).copy()


def test_the_deepest_state_trimmed_is_the_state_written_for_that_depth(tiny_context):
    model, context, _knobs = tiny_context
    tokens = _tokens(model, 1500)
    with KvFiller(context, tokens[:256]) as filler:
        filler.fill(tokens[:700])
        alone = _logits_after(context, tokens[700])
        filler.keep_deepest(tokens[:1400])
        written = sorted(os.listdir(filler.folder))
        for depth in (700, 1000, 1400):
            filler.fill(tokens[:depth])
            assert context.used_cells() == depth
        filler.fill(tokens[:700])
        assert np.array_equal(_logits_after(context, tokens[700]), alone)
        assert sorted(os.listdir(filler.folder)) == written  # no state of its own
        filler.fill(tokens[:1450])  # deeper than the kept state: one written for it
        assert context.used_cells() == 1450


def test_a_filled_run_keeps_its_deepest_state_only_where_ram_has_room_for_it(tiny_model, monkeypatch):
    written, write = [], Layout.write
    monkeypatch.setattr(
        Layout, "write", lambda self, path, tokens: (written.append(len(tokens)), write(self, path, tokens))
    )
    settings, options = RunSettings(str(tiny_model), 4096, 8), RunOptions(fill="synthetic")
    roomy = Run(settings, lambda _: None, options=options).execute()
    assert written == [4096 - 512]  # one state: each probe's depth is trimmed from it
    written.clear()
    monkeypatch.setattr(fill, "DEEPEST_ROOM", 10**9)  # no machine has room for it that many times
    short = Run(settings, lambda _: None, options=options).execute()
    assert written == [512 * k for k in range(1, 8)]  # a state per probe; the last stands at 4096 − 512
    assert [p.depth for p in roomy.decode_points] == [p.depth for p in short.decode_points]
    assert not fill.keeps_deepest(128, 1, 10**12)  # a sliding window's deeper state holds other positions
    assert not fill.keeps_deepest(0, 1, None)


def test_an_unknown_version_is_refused_before_anything_is_written(tiny_context, tmp_path):
    model, context, _knobs = tiny_context
    saved = bytearray(_saved(context, _tokens(model, 64), tmp_path / "saved.bin"))
    saved[4] = 99
    with pytest.raises(FillUnavailable, match="version 99"):
        parse_state(io.BytesIO(saved))
    with pytest.raises(FillUnavailable, match="ends early"):
        parse_state(io.BytesIO(_saved(context, _tokens(model, 64), tmp_path / "s.bin")[:-7]))


def _corrupt_version(monkeypatch) -> None:
    write = Layout.write

    def corrupted(self, path, tokens):
        write(self, path, tokens)
        with open(path, "r+b") as f:
            f.seek(4)
            f.write((99).to_bytes(4, "little"))

    monkeypatch.setattr(Layout, "write", corrupted)


def test_a_state_llama_cpp_refuses_falls_back_to_a_real_prefill_and_says_so(tiny_model, monkeypatch):
    _corrupt_version(monkeypatch)
    events = []
    result = Run(RunSettings(str(tiny_model), 1024, 8), events.append, options=RunOptions(fill="synthetic")).execute()
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any("prefilled for real" in n and "llama.cpp refused" in n for n in notices), notices
    assert result.fill == "real" and result.prefilled_tokens == 1024 and result.started_from_depth == 0
    assert [p.phase for p in result.decode_points].count("probe") == 7


def test_a_disk_too_full_for_the_state_falls_back_to_a_real_prefill_and_says_so(tiny_model, monkeypatch):
    real_usage = fill.shutil.disk_usage
    monkeypatch.setattr(fill.shutil, "disk_usage", lambda path: real_usage(path)._replace(free=4096))
    events = []
    result = Run(RunSettings(str(tiny_model), 1024, 8), events.append, options=RunOptions(fill="synthetic")).execute()
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any("prefilled for real" in n and "on disk" in n and "is free in" in n for n in notices), notices
    assert result.fill == "real" and result.prefilled_tokens == 1024


def test_a_state_the_disk_fails_to_take_falls_back_to_a_real_prefill_and_says_so(tiny_model, monkeypatch):
    def full(self, path, tokens):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Layout, "write", full)  # the disk filled after the room was checked
    events = []
    result = Run(RunSettings(str(tiny_model), 1024, 8), events.append, options=RunOptions(fill="synthetic")).execute()
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any("prefilled for real" in n and "No space left on device" in n for n in notices), notices
    assert result.fill == "real" and result.prefilled_tokens == 1024


def test_a_filled_run_probes_on_the_way_and_prefills_only_its_largest_call(tiny_model):
    events = []
    result = Run(RunSettings(str(tiny_model), 4096, 8), events.append, options=RunOptions(fill="synthetic")).execute()
    assert result.fill == "synthetic"
    assert result.started_from_depth == 4096 - 512 and result.prefilled_tokens == 512  # one ubatch
    probes = [p.depth for p in result.decode_points if p.phase == "probe"]
    assert probes == [4096 * k // 8 for k in range(1, 8)]
    assert result.prefill_tok_s and result.depth_tok_s
    assert run_record(result)["fill"] == "synthetic" and run_rows([result])[0]["depth"] == "4,096 filled"
    assert any(
        isinstance(e, Notice)
        and e.text.startswith("KV filled to 3,584 cells; prefill measured on the last 512 tokens at ")
        for e in events
    )


def test_where_probes_come_closer_than_a_ubatch_the_filled_tail_is_the_gap_between_them(tiny_model):
    result = Run(RunSettings(str(tiny_model), 2048, 8), lambda _: None, options=RunOptions(fill="synthetic")).execute()
    # a real prefill of 2,048 tokens with 7 probes never calls llama_decode with more than 256
    assert result.started_from_depth == 2048 - 256 and result.prefilled_tokens == 256


@pytest.mark.parametrize("arch, why", [("mamba", "recurrent"), ("jamba", "hybrid")])
def test_a_model_without_per_token_cells_is_prefilled_for_real(tmp_path, arch, why):
    path = write_tiny(arch, tmp_path)
    events = []
    result = Run(RunSettings(str(path), 1024, 8), events.append, options=RunOptions(fill="synthetic")).execute()
    assert result.fill == "real" and result.prefilled_tokens == 1024
    assert any(isinstance(e, Notice) and why in e.text for e in events)


@pytest.mark.parametrize("arch", ["gemma3", "deepseek2"])
def test_sliding_window_and_mla_caches_fill(tmp_path, arch):
    """Gemma 3 writes two caches (full layers, then a window of the last positions); MLA has no V."""
    path = write_tiny(arch, tmp_path)
    model, context = _context(path, 2048)
    try:
        tokens = _tokens(model, 1500)
        with KvFiller(context, tokens[: fill.learn_tokens(model)]) as filler:
            windows = [s.window for s in filler.layout.sections]
            filler.fill(tokens[:1400])
            assert context.used_cells() == 1400
        if arch == "gemma3":
            assert windows == [None, model.n_swa()]
        else:
            assert windows == [None] and filler.layout.sections[0].v == ()
    finally:
        context.free()
        model.free()
    events = []
    result = Run(RunSettings(str(path), 1536, 8), events.append, options=RunOptions(fill="synthetic")).execute()
    if arch == "deepseek2":
        assert result.fill == "synthetic" and result.prefilled_tokens == 1536 // 8  # the gap between probes
    else:  # the probes come closer than a window's ring: prefilling on from one to the next is the shorter way
        assert result.fill == "real" and result.prefilled_tokens == 1536 // 8
        assert any(isinstance(e, Notice) and "probes are closer together" in e.text for e in events)


def test_a_filled_sliding_window_cache_has_its_ring_prefilled_for_real(tmp_path, monkeypatch):
    """Loaded, a window's cells sit packed where a prefill leaves them spread around the ring
    (window + ubatch cells): before each probe and at depth that much is prefilled for real."""
    path = write_tiny("gemma3", tmp_path)  # a window of 128
    loaded, fill_to = [], KvFiller.fill
    monkeypatch.setattr(KvFiller, "fill", lambda self, tokens: (loaded.append(len(tokens)), fill_to(self, tokens)))
    events = []
    settings = RunSettings(str(path), 4096, 8, batch_size=128, ubatch_size=128)
    result = Run(settings, events.append, options=RunOptions(fill="synthetic")).execute()
    assert result.fill == "synthetic" and result.prefilled_tokens == 128 + 128
    probes = [p.depth for p in result.decode_points if p.phase == "probe"]
    assert probes == [512 * k for k in range(1, 8)] and loaded == [d - 256 for d in probes] + [4096 - 256]
    assert any(
        isinstance(e, Notice) and e.text.startswith("KV filled to 3,840 cells; prefill measured on the last 256 tokens")
        for e in events
    )


def _cli_run(model, fill_mode: str, depth: int, *flags: str) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cliff_tui",
            "run",
            "-m",
            str(model),
            "--depth",
            str(depth),
            "--n-gen",
            "16",
            "--fill",
            fill_mode,
            *flags,
            "--headless",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.model
@pytest.mark.slow
def test_a_filled_context_holds_the_memory_a_prefilled_one_does(smollm2):
    """Each run in its own process (RSS does not come back in one): the KV buffers are the same
    bytes, and the RSS peak and its rise from the baseline agree within 2 %. At 2k the probes,
    256 tokens apart, cut a real prefill into calls of 256, and the filled run's one real call is
    as long, so both touch as much of the compute buffer."""
    real, filled = (_cli_run(smollm2, mode, 2048) for mode in ("real", "synthetic"))
    assert (real["fill"], filled["fill"]) == ("real", "synthetic")
    assert filled["kv_buffers"] == real["kv_buffers"] and filled["allocated_bytes"] == real["allocated_bytes"]
    assert filled["rss_peak_bytes"] == pytest.approx(real["rss_peak_bytes"], rel=0.02)
    rise = [r["rss_peak_bytes"] - r["rss_baseline_bytes"] for r in (real, filled)]
    assert abs(rise[1] - rise[0]) <= 0.02 * real["rss_peak_bytes"], rise


@pytest.mark.model
def test_a_triangulation_cancelled_while_it_probes_leaves_no_state_on_disk(smollm2, tmp_path, monkeypatch):
    """Its worker is killed holding the state its probes load (1k–16k of SmolLM2's cells)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the worker's temp folder too
    cancel, probed = threading.Event(), []

    def publish(event: object) -> None:
        if isinstance(event, DecodeWindow) and event.phase == "probe":
            probed.append(event.depth)
            cancel.set()

    job = TriangulateJob(
        RunSettings(str(smollm2), 16_000, 8),
        depths=[16_000],
        target=None,
        reserve=None,
        kv_types=[("f16", "f16")],
        fill="synthetic",
    )
    with pytest.raises(Cancelled):
        job.run(publish, cancel, lambda _pid: None)
    assert probed and list(tmp_path.iterdir()) == []


def test_a_filled_triangulation_fills_each_point_and_says_so_in_its_output(tiny_model):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cliff_tui",
            "triangulate",
            "-m",
            str(tiny_model),
            "--headless",
            "--depths",
            "1024,2048",
            "--n-gen",
            "8",
            "--fill",
            "synthetic",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)["runs"]
    assert [(r["fill"], r["started_from_depth"]) for r in runs] == [
        ("synthetic", 1024 - 128),
        ("synthetic", 2048 - 256),
    ]


@pytest.mark.parametrize(
    "fill_choice, tok_s, depths, mode",
    [
        ("auto", 5_000, DEFAULT_DEPTHS, "real"),  # the default depths fit the budget
        ("auto", 20, DEFAULT_DEPTHS, "synthetic"),  # they do not: filled, not reduced
        ("real", 20, None, "real"),  # reduced to the budget, as without the option
    ],
)
def test_auto_fills_where_a_real_prefill_would_not_fit_the_budget(
    tiny_model, monkeypatch, fill_choice, tok_s, depths, mode
):
    from cliff_tui.engine.gguf_meta import read_model_info
    from cliff_tui.jobs import triangulate

    slow = PrefillProfile(p=1 / tok_s, q=0.0, a=0.001, b=0.0, load_s=0.1)  # a machine this one cannot be
    monkeypatch.setattr(triangulate, "calibrate", lambda *args, **kwargs: slow)
    deep_calls: list[int] = []
    monkeypatch.setattr(
        triangulate,
        "calibrate_deep",
        lambda settings, profile, depth, *args, **kwargs: deep_calls.append(depth) or profile,
    )
    job = TriangulateJob(
        RunSettings(str(tiny_model), 0, 8),
        depths=None,
        target=None,
        reserve=None,
        kv_types=[("f16", "f16")],
        fill=fill_choice,
    )
    notices: list[Notice] = []
    chosen, _ = job._plan_depths(read_model_info(str(tiny_model)), notices.append, threading.Event(), lambda pid: None)
    assert job.fill == mode
    if depths:
        assert tuple(chosen) == depths
    else:
        assert max(chosen) < max(DEFAULT_DEPTHS)
    assert any("filled synthetically" in n.text for n in notices) == (mode == "synthetic")
    if mode == "synthetic":  # the time it will take, as the real path says its own
        assert any("prefilled: about " in n.text for n in notices)
    assert deep_calls == ([min(DEFAULT_DEPTHS)] if mode == "synthetic" else [])


def test_the_deep_calibration_measures_a_filled_cache_and_only_raises_what_grows(tiny_model):
    from cliff_tui.engine.worker import calibrate_deep

    shallow = PrefillProfile(p=1e-5, q=0.0, a=1e-5, b=0.0, load_s=0.1)  # faster than any machine
    deep = calibrate_deep(RunSettings(str(tiny_model), 2048, 8), shallow, 2048, threading.Event())
    assert (deep.p, deep.a, deep.load_s) == (shallow.p, shallow.a, shallow.load_s)
    assert deep.q > 0 and deep.b > 0
    fast = PrefillProfile(p=1e-5, q=1.0, a=1e-5, b=1.0, load_s=0.1)  # slower than any machine: kept
    assert calibrate_deep(RunSettings(str(tiny_model), 2048, 8), fast, 2048, threading.Event()) == fast
