"""How much host RAM a running llama-server's prompt cache holds, read from outside the process.

llama-server saves a slot's state (its tokens' KV, plus the slot's context checkpoints) into a
``std::vector`` that it sizes and then writes in full. glibc serves a block that large with a
mapping of its own (above its mmap threshold, which rises with freed blocks up to 32 MiB), and the
kernel merges neighbouring mappings, so saved prompts show up as blocks of anonymous memory whose
every page is resident (or swapped), often several in one mapping and sometimes at the low end of
a start-up buffer's mapping. The start-up buffers look different: the compute buffer is touched
in patches, the scheduler's buffer barely at all, and the KV cache is one block of the size its
model and flags give.

So the figure is: in the private anonymous mappings outside glibc's heaps (``/proc/PID/smaps``),
the runs of populated pages (``/proc/PID/pagemap``) that begin where their mapping begins and are
at least :func:`smallest_block` long, less the KV cache (the run that holds a KV-sized block).

Not counted: saved prompts glibc put in its heap (small ones, after a larger one was freed).
Counted although not the cache: a buffer the server wrote in full at start-up and larger than the
smallest block: model weights copied into anonymous memory (``--no-mmap``, the CPU repack of
quantised weights). ``kv_cache_bytes`` must be the KV cache held in host RAM: None where it lives
on a GPU, so that nothing is taken off for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from cliff_tui.units import MiB, fmt_bytes

KIB = 1024
PAGE = 4096
ARENA = 64 * MiB  # glibc's per-thread heaps are this size and this aligned (HEAP_MAX_SIZE on 64-bit)
MIN_BLOCK = 4 * MiB  # start-up graph buffers written in full stay below this
MIN_BLOCK_CELLS = 64  # and below this many cells' worth of KV for a large model
KV_SLACK = 0.01  # the KV cache's block may differ from the theory by this share (at least 1 MiB)
BASIS = "blocks of anonymous memory the server wrote in full after start-up (/proc/PID/smaps and pagemap)"
_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ (\d+)\s*(.*)$")


@dataclass(frozen=True)
class PromptCacheRead:
    bytes: int | None  # saved prompts + checkpoints now; None where unreadable
    basis: str  # in words, which basis gave the figure (shown to users)
    problem: str = ""  # why it is None
    blocks: int = 0  # separate blocks counted: saved prompts, neighbours merged into one


@dataclass(frozen=True)
class Mapping:
    lo: int
    hi: int
    perms: str
    inode: int
    path: str
    populated: int  # resident + swapped bytes (smaps Rss + Swap)

    @property
    def size(self) -> int:
        return self.hi - self.lo

    @property
    def anonymous(self) -> bool:
        return self.inode == 0 and not self.path


@dataclass(frozen=True)
class Run:
    """Populated pages one after another in one mapping; ``at_start``: the run begins where the
    mapping does (a block allocated on its own, or merged below another)."""

    length: int
    at_start: bool


def read_prompt_cache(pid: int, kv_cache_bytes: int | None, kv_bytes_per_cell: float | None) -> PromptCacheRead:
    """The prompt cache's bytes now, or None and why (see the module's docstring for the basis)."""
    try:
        mappings = parse_smaps(_read_text(f"/proc/{pid}/smaps"))
        runs = populated_runs(pid, mappings, smallest_block(kv_bytes_per_cell))
    except PermissionError:
        return PromptCacheRead(None, BASIS, f"/proc/{pid}/smaps or pagemap: permission denied (another user's process)")
    except OSError as exc:
        return PromptCacheRead(None, BASIS, f"/proc/{pid}/smaps: {exc.strerror or exc} (the process ended?)")
    return cache_from_runs(runs, kv_cache_bytes, kv_bytes_per_cell)


def cache_from_runs(runs: list[Run], kv_cache_bytes: int | None, kv_bytes_per_cell: float | None) -> PromptCacheRead:
    """The runs that are saved prompts, summed, once the KV cache's run is set aside."""
    kv_runs: list[Run] = []
    kv_cache_bytes = kv_cache_bytes or 0
    if kv_cache_bytes:
        kv_runs = find_kv(runs, kv_cache_bytes)
        if not kv_runs:
            return PromptCacheRead(None, BASIS, _no_kv(kv_cache_bytes))
    smallest = smallest_block(kv_bytes_per_cell)
    total, blocks = 0, 0
    for run in runs:
        length = run.length
        if any(run is k for k in kv_runs):
            length = max(0, length - kv_cache_bytes) if len(kv_runs) == 1 else 0
        if run.at_start and length >= smallest:
            total, blocks = total + length, blocks + 1
    return PromptCacheRead(total, BASIS, blocks=blocks)


def smallest_block(kv_bytes_per_cell: float | None) -> int:
    """Runs shorter than this are not counted: start-up buffers written in full are smaller."""
    return max(MIN_BLOCK, int(MIN_BLOCK_CELLS * (kv_bytes_per_cell or 0)))


def find_kv(runs: list[Run], kv_cache_bytes: int) -> list[Run]:
    """The run holding the KV cache (the smallest one at least its size: saved prompts or the
    compute buffer may have merged with it), or two runs adding up to it (a sliding-window model's
    two caches); none where it is not in this process's RAM."""
    slack = max(MiB, int(KV_SLACK * kv_cache_bytes))
    large = [r for r in runs if r.length >= kv_cache_bytes - slack]
    if large:
        return [min(large, key=lambda r: r.length)]
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if abs(a.length + b.length - kv_cache_bytes) <= slack:
                return [a, b]
    return []


def _no_kv(kv_cache_bytes: int) -> str:
    return (
        f"no resident block as large as the KV cache ({fmt_bytes(kv_cache_bytes)}): it is on a GPU "
        "or sized otherwise than its model and flags say"
    )


def parse_smaps(text: str) -> list[Mapping]:
    """Every mapping with its resident and swapped bytes."""
    out: list[Mapping] = []
    head: re.Match[str] | None = None
    populated = 0
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            if head:
                out.append(_mapping(head, populated))
            head, populated = match, 0
        elif line.startswith(("Rss:", "Swap:")):
            populated += _kib(line)
    if head:
        out.append(_mapping(head, populated))
    return out


def _mapping(head: re.Match[str], populated: int) -> Mapping:
    lo, hi, perms, inode, path = head.groups()
    return Mapping(int(lo, 16), int(hi, 16), perms, int(inode), path.strip(), populated)


def _kib(line: str) -> int:
    parts = line.split()
    return int(parts[1]) * KIB if len(parts) > 1 and parts[1].isdigit() else 0


def candidates(mappings: list[Mapping], smallest: int) -> Iterator[Mapping]:
    """Private, writable, anonymous mappings with enough populated pages to hold a block, less
    glibc's per-thread heaps (aligned to 64 MiB, a reserved ``---p`` rest right above)."""
    for i, m in enumerate(mappings):
        if m.perms != "rw-p" or not m.anonymous or m.populated < smallest:
            continue
        above = mappings[i + 1] if i + 1 < len(mappings) else None
        if m.lo % ARENA == 0 and above and above.lo == m.hi and above.perms == "---p" and above.anonymous:
            continue
        yield m


def populated_runs(pid: int, mappings: list[Mapping], smallest: int) -> list[Run]:
    """The runs of populated pages in the candidate mappings: a fully populated mapping is one run;
    another's are read from ``/proc/PID/pagemap``."""
    chosen = list(candidates(mappings, smallest))
    runs = [Run(m.size, True) for m in chosen if m.populated >= m.size]
    partial = [m for m in chosen if m.populated < m.size]
    if partial:
        with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for m in partial:
                runs.extend(runs_in(_page_flags(pagemap, m)))
    return runs


_POPULATED = bytes(1 if b & 0xC0 else 0 for b in range(256))  # pagemap bit 63 present, 62 swapped
_RUN = re.compile(rb"\x01+")
CHUNK_PAGES = 1 << 18  # 2 MiB of pagemap entries per read


def _page_flags(pagemap: BinaryIO, m: Mapping) -> bytes:
    """One byte per page of ``m``: 1 where populated. Each pagemap entry is 8 bytes, little-endian;
    its last byte holds the present and swapped bits."""
    pages = m.size // PAGE
    pagemap.seek(m.lo // PAGE * 8)
    parts = []
    while pages > 0:
        n = min(pages, CHUNK_PAGES)
        data = pagemap.read(n * 8)
        if len(data) < n * 8:
            raise OSError(f"short read of pagemap at {m.lo:#x}")
        parts.append(data[7::8].translate(_POPULATED))
        pages -= n
    return b"".join(parts)


def runs_in(flags: bytes) -> Iterator[Run]:
    for match in _RUN.finditer(flags):
        yield Run((match.end() - match.start()) * PAGE, match.start() == 0)


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()
