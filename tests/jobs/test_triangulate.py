"""A real triangulation on the tiny test GGUF: worker processes, chained state, the record,
a failed allocation as a data point, KV types side by side, and replay parity."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading

import psutil
import pytest

from cliff_tui.engine.worker import PrefillProfile
from cliff_tui.errors import BadInput
from cliff_tui.events import RunFinished
from cliff_tui.jobs.triangulate import TriangulateJob
from cliff_tui.jobs.triangulation_plan import estimate_seconds
from cliff_tui.recording.export import replay_all
from cliff_tui.recording.reader import open_recording
from cliff_tui.records import RunSettings
from cliff_tui.report.triangulation import triangulation_output
from cliff_tui.units import fmt_duration


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliff_tui", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def recorded(tiny_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("tri") / "tri.jsonl"
    proc = cli(
        "triangulate",
        "-m",
        str(tiny_model),
        "--headless",
        "--depths",
        "256,512,1024",
        "--n-gen",
        "16",
        "--target",
        "4096",
        "-o",
        "json",
        "--record",
        str(path),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), path


def test_headless_json_has_the_slopes_theory_verdict_and_projection(recorded):
    record, _ = recorded
    assert [r["n_ctx"] for r in record["runs"]] == [512, 768, 1280]
    assert record["slope_bytes_per_token"]["touched"] > 0
    # the buffer log: KV (512 B/token for this model) plus a compute buffer that grows with n_ctx
    assert record["slope_bytes_per_token"]["allocated"] >= 512
    assert record["theory_bytes_per_token"] == 512
    assert record["verdict"] == "linear"
    projection = record["projection"]
    assert projection["target"] == 4096 and projection["max_context"] > 4096
    assert projection["tier"].startswith("RAM")
    assert "MiB +" in projection["formula"] and "KiB/tok" in projection["formula"]


def test_points_are_chained_and_isolated(recorded):
    record, _ = recorded
    runs = record["runs"]
    assert [r["started_from_depth"] for r in runs] == [0, 256, 512]
    assert runs[0]["rss_peak_bytes"] < runs[-1]["rss_peak_bytes"]


def test_each_point_runs_in_a_worker_process_of_its_own(tiny_model):
    job = TriangulateJob(
        RunSettings(model_path=str(tiny_model), depth=0, n_gen=8),
        depths=[128, 256],
        target=1024,
        reserve=None,
        kv_types=[("f16", "f16")],
    )
    followed: list[int | None] = []
    events: list[object] = []
    assert job.run(events.append, threading.Event(), followed.append) == "done"
    workers = [pid for pid in followed if pid is not None]
    assert len(workers) == 2 and len(set(workers)) == 2 and os.getpid() not in workers
    assert followed[-1] is None  # the sampler stops following a worker that has exited
    assert sum(isinstance(e, RunFinished) for e in events) == 2


def test_a_job_given_a_reserve_no_tier_holds_refuses_before_it_runs_anything(tiny_model):
    reserve = 4 * psutil.virtual_memory().total
    job = TriangulateJob(
        RunSettings(model_path=str(tiny_model), depth=0, n_gen=8),
        depths=[128, 256],
        target=1024,
        reserve=reserve,
        kv_types=[("f16", "f16")],
    )
    events: list[object] = []
    with pytest.raises(BadInput, match=r"is more than any memory tier here holds \(the largest: "):
        job.run(events.append, threading.Event(), lambda pid: None)
    assert events == []


def test_a_replayed_triangulation_gives_the_same_output(recorded):
    record, path = recorded
    replayed = json.loads(triangulation_output(replay_all(open_recording(path)), "json"))
    for key in ("slope_bytes_per_token", "theory_bytes_per_token", "verdict", "projection", "checks"):
        assert replayed[key] == record[key]


def test_a_context_that_does_not_fit_is_a_data_point_and_the_others_go_on(tiny_model):
    proc = cli(
        "triangulate",
        "-m",
        str(tiny_model),
        "--headless",
        "--depths",
        "256,512,2000000000",
        "--n-gen",
        "8",
        "-o",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert len(record["runs"]) == 2
    assert record["failures"][0]["kind"] == "does_not_fit"
    assert record["does_not_fit_at"] >= 2_000_000_000  # far past this memory, yet a context llama.cpp addresses
    assert "does not fit" in record["verdict"]
    assert record["projection"]["max_context"] < record["does_not_fit_at"]


def test_compare_kv_types_side_by_side(tiny_model):
    proc = cli(
        "triangulate",
        "-m",
        str(tiny_model),
        "--headless",
        "--depths",
        "256,512,1024",
        "--n-gen",
        "8",
        "--compare-kv",
        "f16,q8_0",
        "-o",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert [t["cache_types"] for t in record["kv_compare"]] == ["f16", "q8_0"]
    ratio = record["kv_ratios"][0]
    assert ratio["types"] == "q8_0 vs f16"
    assert ratio["expected"] == pytest.approx(34 / 64)
    assert ratio["measured_allocated"] < 1.0
    md = cli(
        "triangulate",
        "-m",
        str(tiny_model),
        "--headless",
        "--depths",
        "256,512",
        "--n-gen",
        "8",
        "--compare-kv",
        "f16,q8_0",
        "-o",
        "md",
    )
    assert "q8_0 vs f16: measured" in md.stdout and "expected 0.53" in md.stdout


def test_bad_depths_and_kv_types_exit_2(tiny_model):
    for args in (["--depths", "abc"], ["--compare-kv", "f16,q9_9"], ["--depths", "0"]):
        proc = cli("triangulate", "-m", str(tiny_model), "--headless", *args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_a_measured_prefill_refits_what_grows_with_depth():
    calibrated = PrefillProfile(p=1 / 200, q=1e-7, a=0.01, b=1e-6, load_s=0.5)
    truth = PrefillProfile(p=1 / 200, q=1.5e-6, a=0.01, b=1e-6, load_s=0.5)
    refit = calibrated.with_prefill(2_000, 6_000, truth.prefill_seconds(2_000, 6_000))
    assert refit.q == pytest.approx(truth.q) and refit.p == calibrated.p
    assert calibrated.with_prefill(0, 6_000, 1.0).q == calibrated.q  # faster than calibrated: kept
    slower = calibrated.with_decode(32_000, truth.a + 3e-6 * 32_000)
    assert slower.b == pytest.approx(3e-6) and slower.a == calibrated.a
    assert calibrated.with_decode(32_000, 0.001).b == calibrated.b


def test_a_point_slower_than_the_calibration_says_the_new_estimate(recorded):
    _, path = recorded
    result = replay_all(open_recording(path)).runs.results[0]
    job = TriangulateJob(result.settings, depths=None, target=None, reserve=None, kv_types=[("f16", "f16")])
    job.depths = [2_048, 4_096, 8_192]
    job.profile = PrefillProfile(p=1 / 200, q=0.0, a=0.01, b=0.0, load_s=0.1)
    job.promised_s = estimate_seconds(job.profile, job.depths, job.base.n_gen, chain=True)
    notices: list = []
    on_time = dataclasses.replace(result, depth=2_048, started_from_depth=0, prefill_tok_s=200.0)
    job._revise_estimate(on_time, 10.0, job.depths[1:], 0, notices.append)
    assert notices == []
    slow = dataclasses.replace(on_time, prefill_tok_s=60.0)
    job._revise_estimate(slow, 10.0, job.depths[1:], 0, notices.append)
    assert len(notices) == 1 and notices[0].level == "warning"
    took = fmt_duration(slow.elapsed_s)
    assert (
        "will take about" in notices[0].text
        and f"the 2,048 point took {took} where 10s was expected (prefill 60 tok/s" in notices[0].text
    ), notices[0].text
