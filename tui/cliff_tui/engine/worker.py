"""Each measurement point in a fresh process.

In one process, RSS does not come back when a llama.cpp context is freed (glibc keeps the
memory and raises its mmap threshold: a larger context created after freeing a smaller one can
show no RSS rise at all), so points taken one after another in one process would be wrong. A worker is started with the ``spawn`` method (a clean interpreter, no inherited heap),
runs one :class:`Run` or the calibration, and sends every event back over a pipe.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cliff_tui.analysis.theory import pad_n_ctx
from cliff_tui.events import RunFailed, RunFinished, RunProgress, RunStarted
from cliff_tui.probes.oom import OomWatch, raise_oom_score
from cliff_tui.records import FailureKind, OomKill, RunResult, RunSettings

_CTX = multiprocessing.get_context("spawn")
_tracker_lock = threading.Lock()
POLL_S = 0.05


@dataclass(frozen=True)
class PrefillProfile:
    """Measured cost model of this model on this machine: seconds per prefill token at depth x
    ≈ ``p + q·x``; seconds per decoded token at depth x ≈ ``a + b·x``; model load seconds."""

    p: float
    q: float
    a: float
    b: float
    load_s: float

    def prefill_seconds(self, start: int, end: int) -> float:
        return self.p * (end - start) + self.q * (end * end - start * start) / 2

    def decode_seconds(self, depth: int, n: int) -> float:
        return (self.a + self.b * depth) * n

    def prefill_tok_s(self, depth: int) -> float:
        return 1.0 / (self.p + self.q * depth)

    def with_prefill(self, start: int, end: int, seconds: float) -> PrefillProfile:
        """The profile with its depth term refitted to a measured prefill of ``start → end``
        (its shallow cost kept): a short calibration sees the least of what grows with depth,
        so a measured prefill that ran slower raises it, never lowers it."""
        span = end * end - start * start
        if span <= 0 or seconds <= 0:
            return self
        q = 2 * (seconds - self.p * (end - start)) / span
        return dataclasses.replace(self, q=max(self.q, q))

    def with_decode(self, depth: int, seconds_per_token: float) -> PrefillProfile:
        """The profile with its decode depth term refitted to one measured at ``depth`` (raised,
        never lowered, as with_prefill: on a CPU decode slows faster than a shallow line says)."""
        if depth <= 0 or seconds_per_token <= 0:
            return self
        return dataclasses.replace(self, b=max(self.b, (seconds_per_token - self.a) / depth))


# --- child side -------------------------------------------------------------------------------


def _child_main(target: Callable, *args: Any) -> None:
    """Ctrl-C in the terminal reaches the whole process group: the parent owns the cancelling, so
    an interrupted child does not die with a traceback, or read as a run that failed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise_oom_score()  # where memory runs out, the kernel kills the worker, not the monitor beside it
    target(*args)


def _run_point_main(settings: RunSettings, options: Any, conn: Any) -> None:
    from cliff_tui.engine.runner import Run
    from cliff_tui.errors import CliffError

    try:
        Run(settings, conn.send, options=options).execute()
    except CliffError:
        pass  # already sent as RunFailed
    finally:
        conn.close()


def _calibrate_main(settings: RunSettings, tokens: int, chunk: int, conn: Any) -> None:
    from cliff_tui.analysis.speed import fit_line
    from cliff_tui.engine.llama import Context, LoadedModel
    from cliff_tui.engine.runner import context_size
    from cliff_tui.engine.settings import resolve_settings
    from cliff_tui.engine.tokens import prompt_tokens
    from cliff_tui.errors import CliffError

    try:
        settings, _ = resolve_settings(settings)
        t0 = time.perf_counter()
        model = LoadedModel(settings.model_path, settings.n_gpu_layers)
        load_s = time.perf_counter() - t0
        context = Context(model, context_size(settings), settings)
        ids = prompt_tokens(model, tokens, settings.prompt_file).tokens
        context.decode(ids[:16])
        shallow = _decode_seconds(context, 9)
        context.truncate(16)
        mids, per_token = [], []
        for start in range(16, tokens, chunk):
            t = time.perf_counter()
            context.decode(ids[start : start + chunk])
            context.synchronize()
            mids.append(start + chunk / 2)
            per_token.append((time.perf_counter() - t) / chunk)
        deep = _decode_seconds(context, 9)
        fit = fit_line(mids[1:], per_token[1:]) or fit_line(mids, per_token)
        q = max(fit.slope, 0.0) if fit else 0.0
        p = max(fit.intercept if fit else per_token[0], 1e-6)
        b = max((deep - shallow) / (tokens - 16), 0.0)
        conn.send(PrefillProfile(p=p, q=q, a=shallow, b=b, load_s=load_s))
        context.free()
        model.free()
    except CliffError as exc:
        conn.send(RunFailed(time.time(), "calibration", exc.kind, str(exc)))
    finally:
        conn.close()


def _calibrate_deep_main(settings: RunSettings, profile: PrefillProfile, depth: int, chunk: int, conn: Any) -> None:
    """Fill a context to ``depth`` (engine.fill), then time one prefill call of ``chunk`` tokens
    and a few decode steps there: the shallow calibration's depth terms refitted."""
    from cliff_tui.engine.fill import FillUnavailable, KvFiller, learn_tokens, unfillable_reason
    from cliff_tui.engine.gguf_meta import read_model_info
    from cliff_tui.engine.llama import Context, LoadedModel
    from cliff_tui.engine.settings import resolve_settings
    from cliff_tui.engine.tokens import prompt_tokens
    from cliff_tui.errors import CliffError

    try:
        settings, _ = resolve_settings(settings)
        model = LoadedModel(settings.model_path, settings.n_gpu_layers)
        if unfillable_reason(model, read_model_info(settings.model_path).architecture):
            conn.send(profile)  # no filled cache to measure on: the shallow figures stand
            model.free()
            return
        context = Context(model, depth + chunk + 16, settings)
        ids = prompt_tokens(model, depth, settings.prompt_file).tokens
        with KvFiller(context, ids[: learn_tokens(model)]) as filler:
            filler.fill(ids[: depth - chunk])
        t = time.perf_counter()
        context.decode(ids[depth - chunk : depth])
        context.synchronize()
        prefill_s = (time.perf_counter() - t) / chunk
        decode_s = _decode_seconds(context, 5)
        deep = profile.with_prefill(depth - chunk, depth, prefill_s * chunk).with_decode(depth, decode_s)
        conn.send(deep)
        context.free()
        model.free()
    except (CliffError, FillUnavailable):
        conn.send(profile)  # the shallow figures stand
    finally:
        conn.close()


def _decode_seconds(context: Any, n: int) -> float:
    """Median seconds per greedy decode step over ``n`` tokens (the first pays for warm-up)."""
    durations = [seconds for _, seconds in context.timed_greedy_decode(n)]
    rest = sorted(durations[1:])
    return rest[len(rest) // 2]


# --- parent side ------------------------------------------------------------------------------


def _ensure_resource_tracker() -> None:
    """multiprocessing starts its resource tracker with ``sys.stderr.fileno()`` among the fds
    to keep; under Textual, ``sys.stderr`` is a capture object whose fileno is not a real fd
    ("bad value(s) in fds_to_keep"). Start the tracker against the real stderr first."""
    from multiprocessing import resource_tracker

    with _tracker_lock:
        captured = sys.stderr
        try:
            sys.stderr = sys.__stderr__
            resource_tracker.ensure_running()
        finally:
            sys.stderr = captured
        # A worker killed for memory may not have let go of it when the next charge comes (its
        # threads run on until the kill lands), and the kernel then picks again: the tracker, which
        # holds nothing a run needs (it starts again when next used), before the monitor.
        tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
        if tracker is not None:
            raise_oom_score(pid=tracker)


def run_in_worker(
    target: Callable,
    args: tuple,
    on_message: Callable[[Any], None],
    cancel: threading.Event,
    on_pid: Callable[[int | None], None] | None = None,
) -> int | None:
    """Start ``target(*args, conn)`` in a fresh process, hand every message it sends to
    ``on_message``, stop it when ``cancel`` is set. Returns its exit code (None if cancelled)."""
    return run_watched(target, args, on_message, cancel, on_pid)[0]


def run_watched(
    target: Callable,
    args: tuple,
    on_message: Callable[[Any], None],
    cancel: threading.Event,
    on_pid: Callable[[int | None], None] | None = None,
) -> tuple[int | None, OomWatch | None]:
    """:func:`run_in_worker`, with the worker's memory cgroup and resident memory followed as it
    runs (its :class:`OomWatch`, None where it could not start)."""
    _ensure_resource_tracker()
    parent, child = _CTX.Pipe(duplex=False)
    process = _CTX.Process(target=_child_main, args=(target, *args, child), daemon=True, name="cliff-worker")
    process.start()
    child.close()
    watch = OomWatch(process.pid) if process.pid is not None else None
    if on_pid:
        on_pid(process.pid)
    try:
        while True:
            if cancel.is_set():
                process.terminate()
                process.join(2)
                if process.is_alive():
                    process.kill()
                return None, watch
            if watch is not None:
                watch.poll()
            if parent.poll(POLL_S):
                try:
                    on_message(parent.recv())
                except EOFError:
                    break
            elif not process.is_alive():
                while parent.poll():
                    try:
                        on_message(parent.recv())
                    except EOFError:
                        break
                break
        process.join()
        return (None if cancel.is_set() else process.exitcode), watch
    finally:
        parent.close()
        if on_pid:
            on_pid(None)


def run_point(
    settings: RunSettings,
    options: Any,
    publish: Callable[[Any], None],
    cancel: threading.Event,
    on_pid: Callable[[int | None], None] | None = None,
) -> PointEnd:
    """One run in a worker; how it ended. Where the worker died before it said (no RunFinished
    or RunFailed), a RunFailed is published here, naming an OOM kill where one is confirmed."""
    outcome: list[Any] = []
    depth: list[int] = []
    run_id = [options.run_id]

    def relay(event: Any) -> None:
        if isinstance(event, (RunFinished, RunFailed)):
            outcome.append(event)
        elif isinstance(event, RunProgress):
            depth[:] = [event.depth]
        elif isinstance(event, RunStarted):
            run_id[:] = [event.run_id]
        publish(event)

    code, watch = run_watched(_run_point_main, (settings, options), relay, cancel, on_pid)
    if code is None:
        return PointEnd(None, None)
    if outcome:
        return PointEnd(outcome[-1], None)
    reached = depth[0] if depth else None
    oom = watch.ended(code, reached) if watch is not None else None
    kind: FailureKind = "does_not_fit" if oom is not None and oom.confirmed else "error"
    failed = RunFailed(
        time.time(),
        run_id[0],
        kind,
        died_words(settings.depth, code, oom),
        n_ctx=_n_ctx(settings),
        depth=reached if reached is not None else settings.depth,
        oom=oom,
    )
    publish(failed)
    return PointEnd(failed, oom)


@dataclass(frozen=True)
class PointEnd:
    """A point's last word (None: cancelled) and, where its worker was killed, what says why."""

    event: RunFinished | RunFailed | None
    oom: OomKill | None

    @property
    def result(self) -> RunResult | None:
        return self.event.result if isinstance(self.event, RunFinished) else None


def died_words(depth: int, code: int, oom: OomKill | None) -> str:
    if oom is not None and oom.confirmed:
        return f"does not fit at {depth:,}: {oom.words}"
    if oom is not None:
        return f"the worker for {depth:,} tokens died: {oom.words}"
    why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return f"the worker for {depth:,} tokens died: {why}"


def _n_ctx(settings: RunSettings) -> int:
    return pad_n_ctx(settings.n_ctx or settings.depth + settings.n_gen)  # engine.runner's context_size


def calibrate_deep(
    settings: RunSettings,
    profile: PrefillProfile,
    depth: int,
    cancel: threading.Event,
    chunk: int | None = None,
    on_pid: Callable[[int | None], None] | None = None,
) -> PrefillProfile:
    """``profile`` with its depth terms measured at ``depth`` on a filled cache (it stands where
    the model cannot be filled or the worker fails). ``chunk``: the prefill call timed there, as
    long as the one a point makes (a shorter call runs slower a token: see bench/RESULTS.md,
    'Triangulation time against its estimate'); by default one ubatch."""
    chunk = chunk or settings.call_tokens
    found: list[Any] = []
    run_in_worker(_calibrate_deep_main, (settings, profile, depth, chunk), found.append, cancel, on_pid)
    return found[0] if found and isinstance(found[0], PrefillProfile) else profile


def calibrate(
    settings: RunSettings,
    cancel: threading.Event,
    tokens: int = 2048,
    chunk: int = 256,
    on_pid: Callable[[int | None], None] | None = None,
) -> PrefillProfile | RunFailed | None:
    found: list[Any] = []
    run_in_worker(_calibrate_main, (settings, tokens, chunk), found.append, cancel, on_pid)
    return found[0] if found else None
