"""Recordings: every event type round-trips, a killed recorder's file replays, bad files fail
with one clean line, and the reader survives fuzzing, hostile strings included (they come back
inert: nothing a terminal would run)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cliff_tui.codec import DecodeError, event_from_plain, event_to_plain, from_plain
from cliff_tui.errors import BadInput
from cliff_tui.events import (
    EVENT_TYPES,
    Alert,
    BuffersReported,
    DecodeWindow,
    GeneratedText,
    LogLine,
    MeasuredCapacity,
    Notice,
    RunFailed,
    RunFinished,
    RunProgress,
    RunStarted,
    Sample,
    ServerMemory,
    ServerReading,
    ServersFound,
    TargetChosen,
    TriangulationPlanned,
)
from cliff_tui.recording import demo
from cliff_tui.recording.player import Player
from cliff_tui.recording.reader import open_recording, parse_recording
from cliff_tui.recording.writer import Recorder, RecordingSetup
from cliff_tui.records import (
    BufferSize,
    DecodePoint,
    FoundServer,
    GpuDelta,
    GpuProcess,
    GpuReading,
    ModelInfo,
    ProcessReading,
    RamReading,
    RunResult,
    RunSettings,
    ServedModel,
    ServerRates,
    ServerSetting,
    SlotReading,
    SpeedVerdict,
    SwapReading,
)
from cliff_tui.session import Session
from cliff_tui.text import LINE_LIMIT, is_inert
from hostile import HOSTILE, hostile_text
from paths import DATA

SETTINGS = RunSettings("/m.gguf", 1024, 32, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on", threads=2)
MODEL = ModelInfo("/m.gguf", "m", 1000, "llama", 30, 9, 3, 64, 64, 8192)
GPU = GpuReading(
    0,
    "NVIDIA H200",
    "nvidia",
    10,
    100,
    1,
    None,
    None,
    50.0,
    60.0,
    1980,
    2619,
    ("power cap",),
    1024.0,
    2048.0,
    (GpuProcess(42, 10), GpuProcess(43, None)),
    {"shared_used_bytes": "not available: NVIDIA on Linux"},
)
SAMPLE = Sample(
    1.0, RamReading(1, 2, 1), SwapReading(0, 4), (GPU,), None, ProcessReading(42, "python", 5, 1, 1, 10, {})
)
RESULT = RunResult(
    "r1",
    SETTINGS,
    "m",
    1280,
    1024,
    32,
    "CUDA0",
    {"CUDA0": 5},
    {"CUDA0": 7},
    {"CUDA0": 3, "CUDA_Host": 1},
    80.0,
    30.0,
    150.0,
    1024,
    (DecodePoint(16, 12.5, 32, "baseline"), DecodePoint(512, 20.0, 8)),
    SpeedVerdict("ok", "fine", 62.5, 31.0, 3.2),
    1,
    2,
    0,
    0,
    10,
    11,
    12,
    0.5,
    (GpuDelta(0, "NVIDIA H200", 10, 20, 0, 0, 15, {}),),
    None,
    3.5,
    0,
)
ALL_EVENTS = [
    SAMPLE,
    Sample(2.0, RamReading(1, 2, 1), SwapReading(0, 0), (), "no GPU found"),
    RunStarted(3.0, "r1", SETTINGS, MODEL, 1280),
    BuffersReported(3.1, "r1", (BufferSize("CUDA0", "kv", 5), BufferSize("CPU_Mapped", "model", 9))),
    RunProgress(3.2, "r1", "prefill", 512, 1024, 150.0, 4.0),
    DecodeWindow(3.3, "r1", "depth", 1024, 8, 30.0, 1.5),
    GeneratedText(3.4, "r1", "hello"),
    RunFinished(3.5, RESULT),
    RunFailed(3.6, "r2", "does_not_fit", "no room", 65536, 65000),
    TriangulationPlanned(0.5, (512, 1024), ("f16", "q8_0"), 8192, None, 10, (100, None), "note"),
    Alert(3.7, 1, "red", "spill"),
    LogLine(3.8, 2, "llama_kv_cache: CPU KV buffer size = 45.00 MiB"),
    Notice(3.9, "flash attention turned on", "info"),
    ServerReading(
        4.0,
        "llama-server",
        "http://127.0.0.1:8080",
        "ok",
        "",
        10.0,
        1.0,
        100.0,
        0.5,
        1,
        (SlotReading(0, 4096, 100, True),),
        (ServedModel("m", 10, 5, 4096),),
        {"x": "y"},
        ServerRates(20.0, None, None, "no request has run since attaching: send one to measure"),
    ),
    MeasuredCapacity(4.1, "model.gguf", "f16", "RAM", 852_992),
    ServersFound(
        4.2,
        (
            FoundServer(
                "llama-server",
                "http://127.0.0.1:9931",
                "process 42 (llama-server -c 16384) listening on 127.0.0.1:9931",
                42,
                settings=(ServerSetting("ctx_size", "16384", "command line (-c)"),),
                tokens_held=2273,
                processing=1,
            ),
            FoundServer("ollama", "http://127.0.0.1:11434", "default port 11434 answered", unreadable="its process"),
        ),
        "http://127.0.0.1:9931",
    ),
    ServerMemory(
        4.3, "http://127.0.0.1:9931", 42, 180_000_000, 70_000_000, 110_000_000, 0, 96_000_000, 47_185_920, 23_040.0
    ),
    TargetChosen(4.2, 32_768),
]


def test_every_event_type_is_covered():
    assert {type(e) for e in ALL_EVENTS} == set(EVENT_TYPES.values())


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_round_trip_through_a_file(tmp_path, event):
    path = tmp_path / "r.jsonl"
    recorder = Recorder.create(path, RecordingSetup(["test"], record_text=True))
    recorder.write(event)
    recorder.close()
    recording = open_recording(path)
    assert recording.events == [event]
    assert recording.header["schema"] == 1 and recording.header["command"] == ["test"]


def test_text_is_kept_out_unless_asked(tmp_path):
    path = tmp_path / "r.jsonl"
    recorder = Recorder.create(path, RecordingSetup([]))
    recorder.write(GeneratedText(1.0, "r", "secret prompt"))
    recorder.write(SAMPLE)
    recorder.close()
    assert "secret" not in path.read_text()
    assert open_recording(path).events == [SAMPLE]


def test_never_overwrites_without_force(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("precious")
    with pytest.raises(BadInput, match="already exists"):
        Recorder.create(path, RecordingSetup([]))
    assert path.read_text() == "precious"
    Recorder.create(path, RecordingSetup([]), force=True).close()
    assert "cliff-tui-recording" in path.read_text()


def wait_for_samples(path, n: int, limit: float = 60) -> None:
    """Until the recording holds ``n`` samples (a loaded machine starts the interpreter slowly)."""
    deadline = time.monotonic() + limit
    while not path.exists() or path.read_bytes().count(b'"type":"sample"') < n:
        assert time.monotonic() < deadline, f"fewer than {n} samples recorded in {limit:.0f} s"
        time.sleep(0.05)


def test_killed_recorder_loses_at_most_the_last_second(tmp_path):
    path = tmp_path / "s.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cliff_tui", "watch", "--headless", "-i", "0.2", "--record", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for_samples(path, 8)
    killed_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    recording = open_recording(path)
    samples = [e for e in recording.events if isinstance(e, Sample)]
    assert len(samples) >= 5
    assert killed_at - samples[-1].t <= 1.0
    export = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "export", str(path), "-o", "csv"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert export.returncode == 0, export.stderr
    rows = export.stdout.strip().splitlines()
    assert len(rows) == len(samples) + 1


def test_sigterm_closes_the_headless_recording_cleanly(tmp_path):
    path = tmp_path / "t.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cliff_tui", "watch", "--headless", "-i", "0.2", "--record", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for_samples(path, 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    data = path.read_bytes()
    assert data.endswith(b"\n")
    assert not open_recording(path).problems


def test_truncated_last_line_is_tolerated_and_reported(tmp_path):
    lines = [json.dumps(_header())] + [json.dumps(event_to_plain(e)) for e in ALL_EVENTS[:3]]
    data = ("\n".join(lines) + "\n" + json.dumps(event_to_plain(SAMPLE))[:40]).encode()
    recording = parse_recording(data)
    assert recording.events == ALL_EVENTS[:3]
    assert recording.truncated_tail
    assert "cut off" in recording.problems


def test_corrupt_lines_in_the_middle_are_skipped_and_counted():
    lines = [
        json.dumps(_header()),
        json.dumps(event_to_plain(SAMPLE)),
        "{not json",
        '{"type": "sample", "t": "x"}',
        json.dumps(event_to_plain(ALL_EVENTS[1])),
    ]
    recording = parse_recording(("\n".join(lines) + "\n").encode())
    assert recording.events == [SAMPLE, ALL_EVENTS[1]]
    assert len(recording.skipped) == 2
    assert "line 3" in recording.skipped[0]


@pytest.mark.parametrize(
    "field, number, why",
    [
        ("t", "NaN", "t must be a finite number below 2^63, not nan"),
        ("t", "Infinity", "t must be a finite number below 2^63, not inf"),
        ("t", "-Infinity", "t must be a finite number below 2^63, not -inf"),
        ("t", "1e400", "t must be a finite number below 2^63, not inf"),
        ("t", "1e15", "t must be seconds since 1970, not 1000000000000000.0"),
        ("t", "-1", "t must be seconds since 1970, not -1.0"),
        ("used_bytes", "9" * 30, "ram.used_bytes must be an integer below 2^63, not 999999999999999999999999999999"),
    ],
)
@pytest.mark.parametrize("lazy", [False, True])
def test_a_number_out_of_range_skips_its_line(field, number, why, lazy):
    good = json.dumps(event_to_plain(SAMPLE))
    bad = re.sub(rf'"{field}": [0-9.]+', f'"{field}": {number}', good, count=1)
    assert bad != good
    lines = [json.dumps(_header()), good, bad, json.dumps(event_to_plain(ALL_EVENTS[1]))]
    recording = parse_recording(("\n".join(lines) + "\n").encode(), lazy=lazy)
    assert recording.events == [SAMPLE, ALL_EVENTS[1]]
    assert recording.skipped == [f"line 3: {why}"]
    assert Player(recording).t_end == ALL_EVENTS[1].t


@pytest.mark.parametrize("tp", [float, int])
def test_a_number_just_below_2_63_is_refused_as_it_would_not_come_back(tp):
    with pytest.raises(DecodeError, match="below 2\\^63"):
        from_plain(tp, 2**63 - 100)  # float() rounds it to 2^63
    assert from_plain(tp, 2**62) == 2**62


def test_a_line_whose_prefix_and_body_disagree_on_t_keeps_the_replay_inside_the_recording():
    later = dataclasses.replace(SAMPLE, t=2.0)
    second_t = json.dumps(event_to_plain(later))[:-1] + ', "t": 1000000000.0}'  # JSON keeps the last of two keys
    lines = [
        json.dumps(_header()),
        json.dumps(event_to_plain(SAMPLE)),
        second_t,
        json.dumps(event_to_plain(dataclasses.replace(SAMPLE, t=3.0))),
    ]
    player = Player(parse_recording(("\n".join(lines) + "\n").encode(), lazy=True))
    assert (player.t_start, player.t_end) == (1.0, 3.0)
    for _ in range(3):
        player.step()
        assert player.position <= player.t_end and len(player.cursor_line(40)) < 100


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"\x00\xff\xfe garbage \x89PNG", "not a cliff-tui recording"),
        (b"hello world\n", "not a cliff-tui recording"),
        (b'{"type": "header", "format": "other"}\n', "not a cliff-tui recording"),
        (json.dumps({"type": "header", "format": "cliff-tui-recording", "schema": 99}).encode() + b"\n", "newer"),
    ],
)
def test_bad_files_fail_with_one_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(BadInput, match=message):
        open_recording(path)
    for command in (["replay", str(path)], ["export", str(path), "-o", "csv"]):
        proc = subprocess.run([sys.executable, "-m", "cliff_tui", *command], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def _header() -> dict:
    return {"type": "header", "format": "cliff-tui-recording", "schema": 1, "command": []}


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _strings_of(plain: object, path: tuple = ()) -> list[tuple[tuple, str]]:
    """Every string in a plain value, with where it sits."""
    if isinstance(plain, str):
        return [(path, plain)]
    if isinstance(plain, dict):
        return [item for k, v in plain.items() for item in _strings_of(v, (*path, k))]
    if isinstance(plain, list):
        return [item for i, v in enumerate(plain) for item in _strings_of(v, (*path, i))]
    return []


def _set(plain: object, path: tuple, value: str) -> None:
    for key in path[:-1]:
        plain = plain[key]
    plain[path[-1]] = value


_hostile = st.one_of(hostile_text(), st.sampled_from(HOSTILE), st.just("x" * (LINE_LIMIT + 7)))


@st.composite
def _recording_bytes(draw) -> bytes:
    lines = []
    if draw(st.booleans()):
        header = _header()
        header["machine"] = {"hostname": draw(_hostile), "os": draw(_hostile)}
        header["command"] = [draw(_hostile)]
        lines.append(json.dumps(header).encode())
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            lines.append(draw(st.binary(max_size=40)))
        elif kind == 1:
            event = draw(st.sampled_from(ALL_EVENTS))
            plain = event_to_plain(event)
            key = draw(st.sampled_from(sorted(plain)))
            plain[key] = draw(_json_values)
            lines.append(json.dumps(plain).encode())
        elif kind == 2:
            lines.append(json.dumps(draw(_json_values)).encode())
        elif kind in (3, 4):  # an event whose strings are hostile (a Literal field refuses them: a corrupt line)
            plain = event_to_plain(draw(st.sampled_from(ALL_EVENTS)))
            for where, _ in draw(st.lists(st.sampled_from(_strings_of(plain) or [((), "")]), max_size=3)):
                if where:
                    _set(plain, where, draw(_hostile))
            lines.append(json.dumps(plain).encode())
        else:
            lines.append(
                json.dumps(event_to_plain(draw(st.sampled_from(ALL_EVENTS)))).encode()[: draw(st.integers(0, 60))]
            )
    return b"\n".join(lines)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_recording_bytes())
def test_fuzzed_recordings_only_ever_give_clean_errors(data):
    try:
        recording = parse_recording(data)
    except BadInput as exc:
        assert "\n" not in str(exc)
        return
    assert all(is_inert(s) for _, s in _strings_of(recording.header)) and is_inert(recording.problems)
    for event in recording.events:
        assert type(event) in EVENT_TYPES.values()
        assert event_from_plain(event_to_plain(event)) == event
        for where, text in _strings_of(event_to_plain(event)):
            multiline = isinstance(event, GeneratedText) and where == ("text",)
            assert is_inert(text, multiline=multiline), (where, text)
            assert multiline or len(text) <= LINE_LIMIT


def test_a_ten_megabyte_line_is_cut_and_not_held():
    huge = event_to_plain(Notice(1.0, "n" * 10_000_000))
    data = (json.dumps(_header()) + "\n" + json.dumps(huge) + "\n" + json.dumps(event_to_plain(SAMPLE)) + "\n").encode()
    recording = parse_recording(data, lazy=True)
    assert recording._lines[0] is None  # decoded at once, the raw line let go
    notice = recording.event(0)
    assert len(notice.text) == LINE_LIMIT and notice.text.endswith("… [cut from 10,000,000 chars]")
    assert recording.event(1) == SAMPLE and recording._lines[1] is None


def test_a_forward_seek_ends_where_a_seek_from_the_start_does(tmp_path):
    path = tmp_path / "demo.jsonl"
    with Recorder.create(path, RecordingSetup(["test"])) as recorder:
        for event in demo.gpu_cliff_run():
            recorder.write(event)
    stepped, direct = Session(recording=open_recording(path)), Session(recording=open_recording(path))
    middle = (stepped.player.t_start + stepped.player.t_end) / 2
    stepped.seek_fraction(0.5, now=0)
    kept = stepped.store
    stepped.seek_by(10, now=0)  # forward from the middle: the same store goes on
    assert stepped.store is kept
    direct.seek_by(middle + 10 - direct.player.t_start, now=0)
    assert stepped.player.cursor == direct.player.cursor > 0
    a, b = stepped.store, direct.store
    assert a.machine.latest == b.machine.latest and a.signs.current == b.signs.current
    assert a.runs.results == b.runs.results
    assert a.history.get("ram.used").points() == b.history.get("ram.used").points()
    stepped.seek_by(-30, now=0)  # backward: rebuilt
    assert stepped.store is not a and stepped.player.position == pytest.approx(middle - 20)


def _file_size_limit(size: int):
    def limit() -> None:  # in the child: a write past ``size`` fails with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def test_a_recording_that_cannot_grow_stops_with_one_line_and_stays_readable(tmp_path):
    path = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "watch", "--headless", "-i", "0.05", "--record", str(path)],
        preexec_fn=_file_size_limit(8192),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"recording to {path} stopped: File too large; the " in proc.stderr and "kept and readable" in proc.stderr
    recording = open_recording(path)
    assert len(recording.events) >= 2 and all(isinstance(e, Sample) for e in recording.events)
    assert os.path.getsize(path) <= 8192


def test_a_recording_whose_first_line_cannot_be_written_is_refused_with_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "watch", "--headless", "--record", "/dev/full", "--force"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "cannot write the recording /dev/full: No space left on device: record elsewhere" in proc.stderr


@pytest.mark.parametrize(
    "output, words", [("md", "holds every table"), ("json", "holds every table"), ("jsonl", "is the recording itself")]
)
def test_export_table_is_refused_where_the_output_is_not_one_table(output, words, capsys):
    from cliff_tui.cli import main

    recording = str(Path(__file__).parents[1] / "data" / "smollm2_triangulation.jsonl")
    assert main(["export", recording, "-o", output, "--table", "runs"]) == 2
    assert f"-o {output} {words}: drop --table, or use -o csv" in capsys.readouterr().err
    for csv in (["-o", "csv"], []):  # --table alone means csv
        assert main(["export", recording, *csv, "--table", "runs"]) == 0
        assert capsys.readouterr().out.startswith("run_id,model,")


def test_exported_runs_carry_the_cliff_verdict_as_run_writes_it(tmp_path):
    from cliff_tui.recording.export import export
    from cliff_tui.recording.writer import Recorder, RecordingSetup
    from cliff_tui.report.runs import run_record
    from cliff_tui.report.tables import dumps

    path = tmp_path / "cliff.jsonl"
    recorder = Recorder.create(path, RecordingSetup(["run"]))
    for event in demo.gpu_cliff_run():
        recorder.write(event)
    recorder.close()
    result = next(e for e in demo.gpu_cliff_run() if isinstance(e, RunFinished)).result
    exported = export(str(path), "csv", "runs")
    header, row = exported.splitlines()[:2]
    assert "cliff.level" in header.split(",") and f",{result.cliff.level}," in row
    assert exported == dumps([run_record(result)], "csv")  # one way a run becomes a CSV row


def test_an_empty_table_exports_its_header_or_says_there_is_nothing(tmp_path):
    from cliff_tui.recording.writer import Recorder, RecordingSetup

    path = tmp_path / "watch.jsonl"
    recorder = Recorder.create(path, RecordingSetup(["watch"]))
    for event in demo.cpu_watch(5):
        recorder.write(event)
    recorder.close()

    def export(table: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "cliff_tui", "export", str(path), "--table", table],
            capture_output=True,
            text=True,
            timeout=60,
        )

    alerts = export("alerts")
    assert (alerts.returncode, alerts.stdout, alerts.stderr) == (0, "t,sign,level,message\n", "")
    runs = export("runs")
    assert (runs.returncode, runs.stdout) == (0, "")
    assert runs.stderr == f"cliff-tui: {path} holds no finished runs: nothing to export\n"


def test_a_recording_read_from_a_pipe_is_titled_by_its_path_not_its_descriptor_number():
    data = (DATA / "smollm2_triangulation.jsonl").read_bytes()
    read, write = os.pipe()
    writer = subprocess.Popen(
        [sys.executable, "-c", f"import os, sys; os.write({write}, sys.stdin.buffer.read())"],
        stdin=subprocess.PIPE,
        pass_fds=(write,),
    )
    os.close(write)
    writer.stdin.write(data)
    writer.stdin.close()
    try:
        recording = open_recording(f"/dev/fd/{read}")  # as `replay <(zcat r.jsonl.gz)` passes it
    finally:
        os.close(read)
        writer.wait(30)
    assert Player(recording).describe().startswith(f"replay /dev/fd/{read} ")
