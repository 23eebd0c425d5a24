"""Paths given on the command line that are not the file they should be: a device, a pipe, a
directory, a document of gigabytes. One line and exit 2, never a read that does not end."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from cliff_tui.cli import main
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.engine.tokens import BYTES_PER_TOKEN, SMALLEST_READ, read_prompt_file
from cliff_tui.errors import BadInput
from cliff_tui.recording.reader import open_recording
from cliff_tui.recording.writer import Recorder, RecordingSetup
from cliff_tui.session import stop_on_signals


def last_error_line(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["replay", "/dev/zero"], "/dev/zero is a device, not a recording: pass a file"),
        (["export", "/dev/zero"], "/dev/zero is a device, not a recording: pass a file"),
        pytest.param(
            ["fit", "--from", "/dev/zero"],
            "/dev/zero is a device, not a triangulation file: pass a file",
            marks=pytest.mark.model,  # fit reads the default model's header first
        ),
        (["exporter", "--from", "/dev/urandom"], "/dev/urandom is a device, not a triangulation file: pass a file"),
        (["fit", "-m", "/dev/zero"], "/dev/zero is not a regular file: pass -m a llama.cpp .gguf model"),
    ],
)
def test_a_device_is_refused_before_it_is_read(argv, words, capsys):
    assert last_error_line(argv, capsys) == f"cliff-tui: {words}"


def test_a_fifo_given_as_the_model_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    said: list[str] = []

    def read() -> None:
        try:
            read_model_info(fifo)
        except BadInput as exc:
            said.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked opening the FIFO: a writer lets it go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert said == [f"{fifo} is not a regular file: pass -m a llama.cpp .gguf model"]


@pytest.mark.parametrize("command", ["run", "triangulate"])
@pytest.mark.parametrize(
    "name, words", [("notes.txt", "prompt file not found: {path}"), (".", "{path} is a directory, not a prompt file")]
)
def test_a_prompt_file_that_is_not_there_is_refused_before_the_model_loads(
    command, name, words, tmp_path, capsys, tiny_model
):
    path = tmp_path / name
    assert main([command, "-m", str(tiny_model), "--headless", "--prompt-file", str(path)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["cliff-tui: " + words.format(path=path)]  # no [load] or [baseline] line before it


def test_a_device_as_the_prompt_file_is_refused():
    with pytest.raises(BadInput, match=r"^/dev/zero is a device, not a prompt file: pass a file$"):
        read_prompt_file("/dev/zero", 64)


def test_a_prompt_file_is_read_only_as_far_as_the_depth_reaches(tmp_path):
    depth = 20_000
    limit = depth * BYTES_PER_TOKEN
    assert limit > SMALLEST_READ
    document = tmp_path / "huge.txt"
    # a character cut at the limit, then bytes that are not UTF-8 where no depth reaches
    head = b"a" * (limit - 1) + "é".encode()
    document.write_bytes(head + b"\xff" * 4096)
    text = read_prompt_file(str(document), depth)
    assert text == "a" * (limit - 1)


def test_the_deepest_depth_does_not_reserve_its_bytes_for_a_small_file(tmp_path):
    document = tmp_path / "small.txt"
    document.write_text("the quick brown fox")
    assert read_prompt_file(str(document), 2**31 - 1) == "the quick brown fox"


def test_a_short_prompt_file_that_is_not_utf8_is_still_refused(tmp_path):
    document = tmp_path / "latin1.txt"
    document.write_bytes("café".encode("latin-1"))
    with pytest.raises(BadInput, match="is not UTF-8 text"):
        read_prompt_file(str(document), 64)


def test_a_pipe_that_never_ends_is_read_up_to_the_limit():
    endless = subprocess.Popen(["yes", "the quick brown fox"], stdout=subprocess.PIPE)
    try:
        text = read_prompt_file(f"/proc/self/fd/{endless.stdout.fileno()}", 64)
    finally:
        endless.kill()
        endless.wait()
    assert len(text) == SMALLEST_READ and text.startswith("the quick brown fox\n")


def test_a_directory_given_to_record_into_says_so(tmp_path):
    with pytest.raises(BadInput, match=f"^{tmp_path} is a directory, not a recording: give a file's path$"):
        Recorder.create(tmp_path, RecordingSetup([]))


def test_a_directory_given_as_a_recording_says_so(tmp_path):
    with pytest.raises(BadInput, match=f"^{tmp_path} is a directory, not a recording$"):
        open_recording(tmp_path)


@pytest.mark.parametrize("command", [["watch", "--once"], ["attach", "--once", "--pid", "1"]])
def test_once_does_not_pretend_to_record(command, tmp_path, capsys):
    target = tmp_path / "r.jsonl"
    line = last_error_line([*command, "--record", str(target)], capsys)
    assert line == (
        f"cliff-tui: --once prints one reading and records nothing: drop --record {target}, "
        "or record a session with --headless"
    )
    assert not target.exists()


def test_a_first_stop_signal_only_cancels_even_when_the_job_cancelled_itself():
    cancel = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(cancel):
        cancel.set()  # a job that ended, or output that failed
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here
        except KeyboardInterrupt:
            pytest.fail("the first signal broke out instead of only cancelling")
        with pytest.raises(KeyboardInterrupt):  # that was the first: the next one breaks out
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert cancel.is_set()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_second_stop_signal_breaks_out_of_whatever_blocks():
    cancel = threading.Event()
    with stop_on_signals(cancel):
        os.kill(os.getpid(), signal.SIGTERM)
        assert cancel.is_set()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs here at the latest
