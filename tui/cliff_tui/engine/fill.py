"""Fill a KV cache to a depth without prefilling it.

Decode speed at depth and the memory a context holds depend on how many cells its KV cache
holds, not on what is in them. A short real prefill is saved with ``llama_state_seq_save_file``
and its layout learned from the bytes (llama.cpp's sequence-state file: magic, version, the
tokens, then each KV cache's cells and K/V rows); a state for depth ``n`` repeats those rows over
``n`` cells at positions 0…n−1, is written to disk in chunks and loaded with
``llama_state_seq_load_file``. The layout is checked, never assumed: whatever cannot be read or
written this way raises :class:`FillUnavailable`, and the caller prefills for real instead.

A run that fills to several depths can write its deepest state once and load it for each
shallower depth, dropping the cells beyond (``llama_memory_seq_rm``): the same cells, logits and
decode speed as a state written for that depth, for one write instead of one per depth
(:func:`keeps_deepest` says where).
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from cliff_tui.errors import DoesNotFit
from cliff_tui.units import fmt_bytes

if TYPE_CHECKING:
    from cliff_tui.engine.llama import Context, LoadedModel


SEQ_MAGIC = 0x67677371  # 'ggsq': LLAMA_STATE_SEQ_MAGIC
SEQ_VERSION = 3  # LLAMA_STATE_SEQ_VERSION, the only layout read here
CELL = np.dtype([("pos", "<i4"), ("n_seq", "<u4"), ("seq", "<i4")])
ROW_HEADER = struct.Struct("<iQ")  # ggml type, row size in bytes
TRANSPOSED_HEADER = struct.Struct("<iII")  # ggml type, element size, embedding rows
CHUNK_BYTES = 4 << 20  # what one write holds in memory: a state of any depth streams to disk
MAX_ROW_BYTES = 1 << 24
LEARN_TOKENS = 32  # the rows repeated: few, so that holding them adds no memory a prefill would not
CHUNKED_SWA_ARCHS = {"llama4"}  # a window that restarts every n_swa positions, not a sliding one
DEEPEST_ROOM = 2  # RAM must have room for the deepest state this many times over for it to be kept


class FillUnavailable(Exception):
    """This model or build cannot have its cache filled synthetically; ``str()`` says why."""


# --- reading a learned state ----------------------------------------------------------------


class _Reader:
    """A saved state read from its file: headers whole, of each layer's rows only the first
    ``keep`` (the rest is skipped), so a long learned state is never held in memory."""

    def __init__(self, f: BinaryIO, keep: int) -> None:
        self.f = f
        self.keep = keep
        self.size = f.seek(0, os.SEEK_END)
        f.seek(0)

    def _check(self, n: int) -> None:
        if n < 0 or self.at + n > self.size:
            raise FillUnavailable("the saved state ends early: its layout is not the one this reader knows")

    def take(self, n: int) -> bytes:
        self._check(n)
        return self.f.read(n)

    def skip(self, n: int) -> None:
        self._check(n)
        self.f.seek(n, os.SEEK_CUR)

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    @property
    def at(self) -> int:
        return self.f.tell()

    def back_to(self, at: int) -> None:
        self.f.seek(at)

    def done(self) -> bool:
        return self.at == self.size


@dataclass(frozen=True)
class Rows:
    """One layer's K or V: its header as llama.cpp writes it, and the learned cells' bytes —
    ``(cells, row bytes)``, or ``(embedding rows, cells, element size)`` for a transposed V."""

    header: bytes
    data: np.ndarray
    transposed: bool

    @property
    def cell_bytes(self) -> int:
        learned = self.data.shape[1] if self.transposed else self.data.shape[0]
        return self.data.nbytes // learned

    def nbytes(self, cells: int) -> int:
        return len(self.header) + self.cell_bytes * cells

    def write(self, f: BinaryIO, cells: int) -> None:
        f.write(self.header)
        if self.transposed:
            self._write_transposed(f, cells)
        else:
            self._write_rows(f, cells)

    def _write_rows(self, f: BinaryIO, cells: int) -> None:
        learned, row = self.data.shape
        step = max(1, CHUNK_BYTES // row)
        for start in range(0, cells, step):
            f.write(self.data[np.arange(start, min(cells, start + step)) % learned])

    def _write_transposed(self, f: BinaryIO, cells: int) -> None:
        n_embd, learned, size = self.data.shape
        index = np.arange(cells) % learned
        step = max(1, CHUNK_BYTES // max(1, cells * size))
        for start in range(0, n_embd, step):
            f.write(np.ascontiguousarray(self.data[start : start + step][:, index]))  # type: ignore[call-overload]  # an ndarray is a buffer: numpy's stubs say so from Python 3.12


def _read_rows(r: _Reader, cells: int) -> Rows:
    header = bytes(r.take(ROW_HEADER.size))
    _type, row = ROW_HEADER.unpack(header)
    if not 0 < row <= MAX_ROW_BYTES:
        raise FillUnavailable(f"a K/V row of {row} bytes: not the layout this reader knows")
    keep = min(cells, r.keep)
    data = np.frombuffer(r.take(row * keep), dtype=np.uint8).reshape(keep, row)
    r.skip(row * (cells - keep))
    return Rows(header, data, transposed=False)


def _read_transposed(r: _Reader, cells: int) -> Rows:
    header = bytes(r.take(TRANSPOSED_HEADER.size))
    _type, size, n_embd = TRANSPOSED_HEADER.unpack(header)
    if size not in (1, 2, 4) or not 0 < n_embd <= MAX_ROW_BYTES:
        raise FillUnavailable(f"a transposed V of {n_embd} rows of {size}-byte elements: not a known layout")
    keep = min(cells, r.keep)
    parts = []
    for _ in range(n_embd):  # each embedding row holds every cell's element
        parts.append(r.take(keep * size))
        r.skip((cells - keep) * size)
    data = np.frombuffer(b"".join(parts), dtype=np.uint8).reshape(n_embd, keep, size)
    return Rows(header, data, transposed=True)


@dataclass(frozen=True)
class Section:
    """One KV cache's part of a sequence state (an iSWA model writes two: its full-attention
    layers, then its sliding-window layers). ``window``: None where the cache holds every
    position, else how many of the last positions it keeps."""

    window: int | None
    v_trans: int
    k: tuple[Rows, ...]
    v: tuple[Rows, ...]

    def cells(self, depth: int) -> int:
        return depth if self.window is None else min(self.window, depth)

    def nbytes(self, depth: int) -> int:
        n = self.cells(depth)
        return 16 + n * CELL.itemsize + sum(rows.nbytes(n) for rows in (*self.k, *self.v))

    def write(self, f: BinaryIO, depth: int) -> None:
        n = self.cells(depth)
        f.write(struct.pack("<II", 1, n))  # one stream, n cells
        step = CHUNK_BYTES // CELL.itemsize
        for start in range(0, n, step):
            cells = np.zeros(min(step, n - start), dtype=CELL)
            cells["pos"] = np.arange(depth - n + start, depth - n + start + len(cells))
            cells["n_seq"] = 1
            f.write(cells)  # type: ignore[call-overload]  # an ndarray is a buffer: numpy's stubs say so from Python 3.12
        f.write(struct.pack("<II", self.v_trans, len(self.k)))
        for rows in (*self.k, *self.v):
            rows.write(f, n)


def _read_cells(r: _Reader, learned: int) -> int | None:
    """The cells of one section: returns its window (None: all ``learned`` positions)."""
    n_stream = r.u32()
    if n_stream != 1:
        raise FillUnavailable(f"a KV cache in {n_stream} streams: only a single-sequence cache can be filled")
    count = r.u32()
    cells = np.frombuffer(r.take(count * CELL.itemsize), dtype=CELL)
    positions = np.sort(cells["pos"])
    expected = np.arange(learned - count, learned)
    if (
        count == 0
        or (cells["n_seq"] != 1).any()
        or (cells["seq"] != 0).any()
        or not np.array_equal(positions, expected)
    ):
        raise FillUnavailable(
            "the cells of the saved state are not laid out as this reader knows "
            "(a model whose cells carry more than a position and a sequence?)"
        )
    return None if count == learned else count


def _read_section(r: _Reader, learned: int) -> list[Section]:
    """This section and every one after it to the end of the state."""
    window = _read_cells(r, learned)
    count = learned if window is None else window
    v_trans, n_layer = r.u32(), r.u32()
    if v_trans > 1 or not 0 < n_layer <= 4096:
        raise FillUnavailable(f"a cache of {n_layer} layers (V transposed: {v_trans}): not a known layout")
    k = tuple(_read_rows(r, count) for _ in range(n_layer))
    mark = r.at
    try:  # every layer has a V, or none has (MLA keeps one compressed K row per token)
        v = tuple((_read_transposed if v_trans else _read_rows)(r, count) for _ in range(n_layer))
        return [Section(window, v_trans, k, v), *_read_rest(r, learned)]
    except FillUnavailable as with_v:
        r.back_to(mark)
        try:
            return [Section(window, v_trans, k, ()), *_read_rest(r, learned)]
        except FillUnavailable:
            raise with_v from None


def _read_rest(r: _Reader, learned: int) -> list[Section]:
    return [] if r.done() else _read_section(r, learned)


@dataclass(frozen=True)
class Layout:
    """A learned sequence state, able to write itself at any depth."""

    learned: int
    sections: tuple[Section, ...]

    def nbytes(self, depth: int) -> int:
        return 12 + 4 * depth + sum(s.nbytes(depth) for s in self.sections)

    def write(self, path: str, tokens: Sequence[int]) -> None:
        depth = len(tokens)
        with open(path, "wb") as f:
            f.write(struct.pack("<III", SEQ_MAGIC, SEQ_VERSION, depth))
            f.write(np.asarray(tokens, dtype="<i4"))  # type: ignore[arg-type]  # an ndarray is a buffer: numpy's stubs say so from Python 3.12
            for section in self.sections:
                section.write(f, depth)


def parse_state(f: BinaryIO, keep: int = LEARN_TOKENS) -> Layout:
    """The layout of a state file written by ``llama_state_seq_save_file`` for sequence 0, with
    the first ``keep`` cells' rows of each layer."""
    r = _Reader(f, keep)
    magic, version = r.u32(), r.u32()
    if (magic, version) != (SEQ_MAGIC, SEQ_VERSION):
        raise FillUnavailable(
            f"this llama.cpp writes sequence states as magic {magic:#010x} version {version}; "
            f"the filler knows {SEQ_MAGIC:#010x} version {SEQ_VERSION}"
        )
    learned = r.u32()
    r.skip(4 * learned)
    if learned == 0 or r.done():
        raise FillUnavailable("the saved state holds no KV cells")
    return Layout(learned, tuple(_read_section(r, learned)))


# --- filling a context ------------------------------------------------------------------------


def unfillable_reason(model: LoadedModel, architecture: str | None) -> str | None:
    if model.memory_kind() != "attention":
        return f"a {model.memory_kind()} model keeps a state per sequence, not a cell per token"
    if model.n_swa() > 0 and architecture in CHUNKED_SWA_ARCHS:
        return f"{architecture}'s chunked attention window is not filled synthetically"
    return None


def keeps_deepest(n_swa: int, state_bytes: int, ram_room_bytes: int | None) -> bool:
    """Whether a run loads its deepest state trimmed to each shallower depth. Not with a sliding
    window (a deeper state holds other positions), and not where RAM is short: loading writes
    every cell of the state, so the cells beyond the depth measured would push out of RAM the
    ones a probe reads, where a state written for that depth leaves them alone."""
    return n_swa == 0 and ram_room_bytes is not None and state_bytes * DEEPEST_ROOM <= ram_room_bytes


def learn_tokens(model: LoadedModel) -> int:
    return learn_count(model.n_swa())


def learn_count(n_swa: int) -> int:
    """Enough tokens that a sliding-window cache shows which positions it keeps."""
    return LEARN_TOKENS + max(0, n_swa)


class KvFiller:
    """Learns the state layout from a real prefill of ``tokens`` in ``context``, then fills that
    context to any depth. Its files live in a temporary folder under ``folder``."""

    def __init__(
        self, context: Context, tokens: Sequence[int], folder: str | None = None, call: int | None = None
    ) -> None:
        self.context = context
        self.loaded = False  # whether a filled state is in the context now or was before
        self._deepest: tuple[str, list[int]] | None = None  # a state kept for shallower fills, its tokens
        self.folder = tempfile.mkdtemp(prefix="cliff-tui-fill-", dir=folder)
        try:
            self.layout = self._learn(tokens, min(call or context.n_ubatch, context.n_ubatch))
        except BaseException:
            self.close()
            raise

    def _learn(self, tokens: Sequence[int], call: int) -> Layout:
        """Prefill ``tokens`` for real in calls of at most ``call`` (no longer than the run's own,
        or the learning would touch more compute buffer than the run), save, and read the layout."""
        context = self.context
        context.clear()
        for start in range(0, len(tokens), call):
            context.decode(tokens[start : start + call])
        path = os.path.join(self.folder, "learned.bin")
        context.save_state(path, tokens)
        try:
            with open(path, "rb") as f:
                return parse_state(f)
        finally:
            os.remove(path)
            context.clear()

    def keep_deepest(self, tokens: Sequence[int]) -> None:
        """Write the state for ``tokens`` once: a later fill with a prefix of them loads it and
        drops the cells beyond its depth instead of writing a state of its own."""
        depth = len(tokens)
        path = os.path.join(self.folder, f"deepest-{depth}.bin")
        self._write(path, tokens)
        self._deepest = (path, list(tokens))

    def fill(self, tokens: Sequence[int]) -> None:
        """Leave the context holding ``len(tokens)`` cells of sequence 0, checked."""
        depth = len(tokens)
        if self._deepest is not None and list(tokens) == self._deepest[1][:depth]:
            path, kept = self._deepest
            self._load(path, len(kept))
            self.context.truncate(depth)
            if self.context.used_cells() != depth:
                self.context.clear()
                raise FillUnavailable(f"a state of {len(kept):,} cells trimmed to {depth:,} holds another count")
        else:
            self._fill_alone(tokens)
        self._check_decode(tokens[-1], depth)
        self.loaded = True

    def _fill_alone(self, tokens: Sequence[int]) -> None:
        depth = len(tokens)
        path = os.path.join(self.folder, f"fill-{depth}.bin")
        try:
            self._write(path, tokens)
            self._load(path, depth)
        finally:
            if os.path.exists(path):
                os.remove(path)

    def _write(self, path: str, tokens: Sequence[int]) -> None:
        self._check_room(len(tokens))
        try:
            self.layout.write(path, tokens)
        except OSError as exc:
            raise FillUnavailable(
                f"writing a state of {len(tokens):,} cells to {self.folder} failed: {exc.strerror or exc}"
            ) from None

    def _check_room(self, depth: int) -> None:
        need, free = self.layout.nbytes(depth), shutil.disk_usage(self.folder).free
        if need * 1.1 > free:
            raise FillUnavailable(
                f"a state of {depth:,} cells needs {fmt_bytes(need)} on disk and "
                f"{fmt_bytes(free)} is free in {os.path.dirname(self.folder)}"
            )

    def _load(self, path: str, depth: int) -> None:
        from cliff_tui.engine.llama import last_problem

        log = self.context.model.log
        mark = len(log.lines)
        self.context.clear()
        try:
            count = self.context.load_state(path)
        except OSError:
            raise FillUnavailable(
                f"llama.cpp refused the filled state: {last_problem(log, mark) or 'see the log (l)'}"
            ) from None
        held = self.context.used_cells()
        if count != depth or held != depth:
            self.context.clear()
            raise FillUnavailable(f"the filled state holds {held:,} cells where {depth:,} were written")

    def _check_decode(self, token: int, depth: int) -> None:
        try:
            self.context.decode((token,))
        except DoesNotFit as exc:
            self.context.clear()
            raise FillUnavailable(f"a decode on the filled cache failed: {exc}") from None
        self.context.truncate(depth)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> KvFiller:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
