"""A thin, cancellable wrapper over llama-cpp-python's C API.

The high-level ``Llama`` class evaluates a whole prompt in one call and cannot be interrupted;
here every batch is our own ``llama_decode`` call, an abort callback stops a long prefill batch
between graph nodes, and the model load can be abandoned through its progress callback.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from collections.abc import Iterator, Sequence

import llama_cpp as L
import numpy as np

from cliff_tui.engine.llama_log import LEVEL_ERROR, LEVEL_WARN, LlamaLog
from cliff_tui.errors import BadInput, Cancelled, DoesNotFit
from cliff_tui.records import RunSettings

# GGML type ids (ggml.h) for the KV cache types llama.cpp accepts with -ctk/-ctv.
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
FLASH_ATTN = {
    "auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}

_MEMORY_WORDS = re.compile(r"alloc|memory|buffer|out of|OOM", re.IGNORECASE)
_backend_lock = threading.Lock()
_backend_ready = False


def _backend_init() -> LlamaLog:
    global _backend_ready
    log = LlamaLog.install()
    with _backend_lock:
        if not _backend_ready:
            L.llama_backend_init()
            _backend_ready = True
    return log


def supports_gpu_offload() -> bool:
    return bool(L.llama_supports_gpu_offload())


def last_problem(log: LlamaLog, since: int) -> str:
    """The last warning/error llama.cpp logged after line ``since`` (for one-line messages)."""
    lines = list(log.lines)[since:]
    for line in reversed(lines):
        if line.level in (LEVEL_ERROR, LEVEL_WARN):
            return line.text.split(": ", 1)[-1].strip()
    return ""


class LoadedModel:
    def __init__(self, path: str, n_gpu_layers: int, cancel: threading.Event | None = None) -> None:
        self.log = _backend_init()
        mark = len(self.log.lines)
        params = L.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        self._progress = None
        if cancel is not None:

            @L.llama_progress_callback
            def progress(_fraction: float, _user: ctypes.c_void_p) -> bool:
                return not cancel.is_set()

            self._progress = progress
            params.progress_callback = progress
        self.ptr = L.llama_model_load_from_file(path.encode(), params)
        if not self.ptr:
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled while loading the model")
            why = last_problem(self.log, mark) or "see the log (l)"
            raise BadInput(f"llama.cpp could not load {path}: {why} — is it a complete, supported GGUF?")
        self.vocab = L.llama_model_get_vocab(self.ptr)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.bos = L.llama_vocab_bos(self.vocab)

    def tokenize(self, text: str, add_bos: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buf = (L.llama_token * capacity)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_bos, False)
        if n < 0:
            capacity = -n
            buf = (L.llama_token * capacity)()
            n = L.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_bos, False)
        return list(buf[:n])

    def piece(self, token: int) -> str:
        buf = ctypes.create_string_buffer(64)
        n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def memory_kind(self) -> str:
        """The memory it keeps: "attention" (a cell per token), "recurrent" or "hybrid" (a state per sequence)."""
        if L.llama_model_is_hybrid(self.ptr):
            return "hybrid"
        return "recurrent" if L.llama_model_is_recurrent(self.ptr) else "attention"

    def n_swa(self) -> int:
        """The sliding attention window in tokens; 0 where every layer sees the whole context."""
        return int(L.llama_model_n_swa(self.ptr))

    def free(self) -> None:
        if self.ptr:
            L.llama_model_free(self.ptr)
            self.ptr = None


class Context:
    def __init__(self, model: LoadedModel, n_ctx: int, settings: RunSettings) -> None:
        self.model = model
        log = model.log
        mark = len(log.lines)
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = min(settings.batch_size, n_ctx)
        params.n_ubatch = min(settings.ubatch_size, params.n_batch)
        if settings.threads:
            params.n_threads = params.n_threads_batch = settings.threads
        params.type_k = GGML_TYPES[settings.cache_type_k]
        params.type_v = GGML_TYPES[settings.cache_type_v]
        params.flash_attn_type = FLASH_ATTN[settings.flash_attn]
        params.no_perf = False
        # The C API defaults to full-size sliding-window caches; llama-server and llama-cli do
        # not (--swa-full is opt-in there), and this measures what a user's server would use.
        params.swa_full = settings.swa_full
        self.n_batch = params.n_batch
        self.n_ubatch = params.n_ubatch
        self.ptr = L.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            why = last_problem(log, mark)
            if why and not _MEMORY_WORDS.search(why):
                raise BadInput(f"llama.cpp refused a context of {n_ctx:,} tokens with these settings: {why}")
            raise DoesNotFit(
                f"a context of {n_ctx:,} tokens does not fit: {why or 'allocation failed'} — try a "
                "smaller -c/--depth, a quantised cache (-ctk q8_0 -ctv q8_0 -fa on) or fewer -ngl "
                "layers",
                n_ctx=n_ctx,
            )
        self.n_ctx = L.llama_n_ctx(self.ptr)
        self.memory = L.llama_get_memory(self.ptr)
        self._abort: object = None  # the ctypes callback, kept alive while llama.cpp holds it

    # --- cancellation ---------------------------------------------------------------------

    def abort_on(self, cancel: threading.Event | None) -> None:
        """Let ``cancel`` stop a decode between graph nodes. Off for single-token decodes: the
        callback takes the GIL per node, which a busy UI thread would turn into decode stalls."""
        if cancel is None:
            L.llama_set_abort_callback(self.ptr, L.ggml_abort_callback(0), None)  # NULL: no callback
            self._abort = None
            return

        @L.ggml_abort_callback
        def abort(_user: ctypes.c_void_p) -> bool:
            return cancel.is_set()

        self._abort = abort
        L.llama_set_abort_callback(self.ptr, abort, None)

    # --- work -----------------------------------------------------------------------------

    def decode(self, tokens: Sequence[int]) -> None:
        n = len(tokens)
        array = (L.llama_token * n)(*tokens)
        rc = L.llama_decode(self.ptr, L.llama_batch_get_one(array, n))
        if rc == 0:
            return
        if rc == 2:
            raise Cancelled("cancelled")
        if rc == 1:
            raise DoesNotFit(f"the KV cache is full at {self.used_cells():,} of {self.n_ctx:,} cells", n_ctx=self.n_ctx)
        raise DoesNotFit(
            f"llama_decode failed (code {rc}) at depth {self.used_cells():,}: out of memory? see the log (l)",
            n_ctx=self.n_ctx,
        )

    def synchronize(self) -> None:
        L.llama_synchronize(self.ptr)

    def timed_greedy_decode(self, n: int) -> Iterator[tuple[int, float]]:
        """Greedy decode of ``n`` tokens, one ``llama_decode`` each: yields (token, wall seconds)."""
        token = self.greedy_token()
        for _ in range(n):
            t = time.perf_counter()
            self.decode((token,))
            self.synchronize()
            token = self.greedy_token()
            yield token, time.perf_counter() - t

    def greedy_token(self) -> int:
        logits = L.llama_get_logits_ith(self.ptr, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(self.model.n_vocab,))))

    def used_cells(self) -> int:
        return int(L.llama_memory_seq_pos_max(self.memory, 0)) + 1

    def truncate(self, depth: int) -> None:
        """Forget every cell from position ``depth`` on (removes probe tokens after measuring)."""
        L.llama_memory_seq_rm(self.memory, 0, depth, -1)

    def clear(self) -> None:
        L.llama_memory_clear(self.memory, True)

    def save_state(self, path: str, tokens: Sequence[int]) -> None:
        array = (L.llama_token * len(tokens))(*tokens)
        if not L.llama_state_seq_save_file(self.ptr, path.encode(), 0, array, len(tokens)):
            raise OSError(f"could not save the KV state to {path}")

    def load_state(self, path: str) -> int:
        """Restore a saved sequence; returns how many tokens it holds."""
        capacity = self.n_ctx
        out = (L.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        if not L.llama_state_seq_load_file(self.ptr, path.encode(), 0, out, capacity, ctypes.byref(count)):
            raise OSError(f"could not load the KV state from {path}")
        return int(count.value)

    def free(self) -> None:
        if self.ptr:
            L.llama_free(self.ptr)
            self.ptr = None
