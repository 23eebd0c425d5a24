"""The prompt cache read from a process's mappings: which runs of populated pages are saved prompts."""

from __future__ import annotations

import os

from cliff_tui.probes.endpoints.prompt_cache import (
    Run,
    cache_from_runs,
    candidates,
    parse_smaps,
    read_prompt_cache,
    runs_in,
    smallest_block,
)
from cliff_tui.units import MiB

KV = 180 * MiB
PER_CELL = 23040.0

# A mapping with no file ends in a space in /proc/PID/smaps, written \x20 here.
SMAPS = """\
7f0000000000-7f0004000000 rw-p 00000000 00:00 0\x20
Rss:               65536 kB
Swap:                  0 kB
7f0004000000-7f0008000000 ---p 00000000 00:00 0\x20
Rss:                   0 kB
7f1000000000-7f1001000000 rw-p 00000000 00:00 0\x20
Rss:               12288 kB
Swap:               4096 kB
7f2000000000-7f2000100000 r--p 00000000 08:01 1234                       /models/smol.gguf
Rss:                1024 kB
"""


def test_smaps_mappings_carry_resident_and_swapped_bytes():
    mappings = parse_smaps(SMAPS)
    assert [m.populated for m in mappings] == [64 * MiB, 0, 16 * MiB, MiB]
    assert mappings[2].anonymous and not mappings[3].anonymous


def test_glibc_s_thread_heaps_and_file_mappings_are_not_candidates():
    chosen = list(candidates(parse_smaps(SMAPS), 4 * MiB))
    assert [hex(m.lo) for m in chosen] == ["0x7f1000000000"]


def test_the_kv_cache_s_block_is_set_aside_and_saved_prompts_are_summed():
    runs = [Run(KV, True), Run(12 * MiB, True), Run(14 * MiB, True), Run(2 * MiB, True)]
    read = cache_from_runs(runs, KV, PER_CELL)
    assert read.bytes == 26 * MiB and read.blocks == 2  # the 2 MiB start-up buffer is below a block


def test_a_saved_prompt_merged_below_the_kv_cache_counts_beyond_it():
    read = cache_from_runs([Run(KV + 20 * MiB, True)], KV, PER_CELL)
    assert read.bytes == 20 * MiB


def test_runs_that_do_not_begin_their_mapping_are_not_saved_prompts():
    assert cache_from_runs([Run(KV, True), Run(30 * MiB, False)], KV, PER_CELL).bytes == 0


def test_no_block_as_large_as_the_kv_cache_is_unreadable_not_zero():
    read = cache_from_runs([Run(12 * MiB, True)], KV, PER_CELL)
    assert read.bytes is None and "on a GPU" in read.problem


def test_populated_pages_become_runs():
    flags = b"\x01\x01\x00\x01\x01\x01"
    assert [(r.length, r.at_start) for r in runs_in(flags)] == [(8192, True), (12288, False)]


def test_a_large_model_s_smallest_block_is_64_cells():
    assert smallest_block(None) == 4 * MiB
    assert smallest_block(1_000_000.0) == 64_000_000


def test_this_process_reads_without_error_and_a_gone_one_says_so():
    assert read_prompt_cache(os.getpid(), None, None).bytes is not None
    gone = read_prompt_cache(2**22 + 7, None, None)
    assert gone.bytes is None and "ended" in gone.problem
