"""What llama.cpp really allocates for a context, to the byte.

The log prints the KV buffer in MiB with two decimals (±5 KiB), too coarse for a tiny model.
``llama_get_memory_breakdown`` (llama-ext.h, exported from libllama) returns, per buffer type,
the exact bytes of the model, the context's memory (KV cells and recurrent state:
``ggml_backend_buffer_get_size`` of each cache buffer) and the compute buffer. It is a C++
function returning a ``std::map`` by value, so it is called through the Itanium ABI (the map is
written to a hidden first argument) and the libstdc++ red-black tree is walked by hand: node =
{color, parent, left, right} then the value {buft, {model, context, compute}}. The few nodes
are leaked (no destructor to call); a test process makes a handful.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as L

from cliff_tui.analysis.theory import KvSettings
from cliff_tui.engine.llama import FLASH_ATTN, GGML_TYPES
from cliff_tui.engine.llama_log import LlamaLog, parse_buffer_line

_SYMBOL = "_Z26llama_get_memory_breakdownPK13llama_context"


@dataclass(frozen=True)
class Allocation:
    n_ctx: int
    model_bytes: int
    context_bytes: int  # KV cache + recurrent state, all buffers
    compute_bytes: int
    logged_kv_bytes: int  # the log's "KV buffer" and "RS buffer" lines, MiB rounded to 2 decimals
    logged_buffers: int  # how many such lines (each is off by up to 0.005 MiB)
    log: tuple[str, ...]


def _breakdown_fn():
    fn = getattr(L.llama_cpp._lib, _SYMBOL)
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return fn


def memory_breakdown(ctx: ctypes.c_void_p) -> list[tuple[int, int, int]]:
    """(model, context, compute) bytes per buffer type."""
    tree = (ctypes.c_uint64 * 6)()  # compare, header {color, root, leftmost, rightmost}, count
    _breakdown_fn()(ctypes.addressof(tree), ctx)
    out: list[tuple[int, int, int]] = []

    def walk(node: int) -> None:
        if node:
            n = (ctypes.c_uint64 * 8).from_address(node)
            walk(n[2])
            out.append((n[5], n[6], n[7]))
            walk(n[3])

    walk(tree[2])
    assert len(out) == tree[5], "the std::map walk disagrees with its node count"
    return out


class TinyLlama:
    """A model loaded once; contexts made and freed per settings."""

    def __init__(self, path: Path) -> None:
        self.log = LlamaLog.install()
        L.llama_backend_init()
        self.ptr = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
        assert self.ptr, f"llama.cpp could not load {path}"

    def allocation(self, s: KvSettings) -> Allocation | None:
        """None where llama.cpp refuses the context."""
        seen: list[str] = []
        stop = self.log.listen(lambda line: seen.append(line.text))
        params = L.llama_context_default_params()
        params.n_ctx = s.n_ctx
        params.n_batch = s.n_batch
        params.n_ubatch = s.n_ubatch
        params.n_seq_max = s.n_seq
        params.kv_unified = s.kv_unified
        params.swa_full = s.swa_full
        params.type_k = GGML_TYPES[s.type_k]
        params.type_v = GGML_TYPES[s.type_v]
        params.flash_attn_type = FLASH_ATTN[s.flash_attn]
        params.n_threads = params.n_threads_batch = 1
        try:
            ctx = L.llama_init_from_model(self.ptr, params)
        finally:
            stop()
        if not ctx:
            return None
        try:
            parts = memory_breakdown(ctx)
            lines = tuple(seen)
            logged = [b for b in map(parse_buffer_line, lines) if b and b.kind in ("kv", "recurrent")]
            return Allocation(
                n_ctx=L.llama_n_ctx(ctx),
                model_bytes=sum(p[0] for p in parts),
                context_bytes=sum(p[1] for p in parts),
                compute_bytes=sum(p[2] for p in parts),
                logged_kv_bytes=sum(b.bytes for b in logged),
                logged_buffers=len(logged),
                log=lines,
            )
        finally:
            L.llama_free(ctx)

    def free(self) -> None:
        if self.ptr:
            L.llama_model_free(self.ptr)
            self.ptr = None
