"""A server's memory split read from /proc, on this test's own process mapping a real file."""

from __future__ import annotations

import dataclasses
import mmap
import os

from cliff_tui.probes.endpoints.server_memory import ProcessMemory, read_process_memory

PAGE = mmap.PAGESIZE


def _mapped_file(tmp_path, pages: int) -> tuple[str, mmap.mmap]:
    path = tmp_path / "model.gguf"
    path.write_bytes(os.urandom(pages * PAGE))
    f = open(path, "rb")  # noqa: SIM115 - kept open with the mapping
    mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return str(path), mapping


def _touch(mapping: mmap.mmap, pages: range) -> None:
    for page in pages:
        mapping[page * PAGE]


def test_the_model_files_resident_pages_are_counted(tmp_path):
    path, mapping = _mapped_file(tmp_path, 64)
    _touch(mapping, range(16))
    memory = read_process_memory(os.getpid(), path)
    assert isinstance(memory, ProcessMemory)
    assert memory.model_mapped is not None and 16 * PAGE <= memory.model_mapped <= 64 * PAGE


def test_smaps_is_walked_again_only_once_file_backed_pages_moved(tmp_path):
    path, mapping = _mapped_file(tmp_path, 256)
    _touch(mapping, range(8))
    first = read_process_memory(os.getpid(), path)
    assert isinstance(first, ProcessMemory)
    marked = dataclasses.replace(first, model_mapped=1)  # a figure only the previous reading has
    same = read_process_memory(os.getpid(), path, marked)
    assert isinstance(same, ProcessMemory)
    if same.file == first.file:
        assert same.model_mapped == 1
    _touch(mapping, range(256))
    moved = read_process_memory(os.getpid(), path, marked)
    assert isinstance(moved, ProcessMemory)
    assert moved.file != first.file
    assert moved.model_mapped is not None and moved.model_mapped >= 256 * PAGE


def test_a_process_that_is_gone_is_one_line():
    memory = read_process_memory(2**22 + 1)
    assert isinstance(memory, str) and "\n" not in memory
