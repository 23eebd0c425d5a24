"""One run of the method (baseline, deep prefill, decode at depth), publishing events as it goes.

1. load the model and create the context (n_ctx = depth + n_gen, padded as llama.cpp pads);
   llama.cpp reserves the whole KV cache here, and logs each buffer's size;
2. baseline: memory, and decode tok/s after a minimal prompt;
3. deep prefill to ``depth`` in batches, with short decode probes on the way (they give the
   depth trend that sign 3 is judged against, and are removed from the cache after); or, with
   ``fill="synthetic"``, KV cells loaded (engine.fill) on the way to each probe depth and to
   depth (where RAM has room, from one state written for the deepest load and trimmed to each
   probe's depth), only the last call prefilled for real, or a sliding-window model's whole
   ring of cells (:func:`window_ring`), or the stretch from the probe before where shorter;
4. ``n_gen`` tokens of decode at depth, in windows; the memory peak is tracked throughout.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from cliff_tui.analysis.buffers import by_kind, gpu_index_of, kv_device
from cliff_tui.analysis.cliff import cliff_verdict, memory_sign
from cliff_tui.analysis.speed import classify_speed, steady, window_rate
from cliff_tui.analysis.theory import kv_bytes_per_token, pad_n_ctx
from cliff_tui.engine.fill import FillUnavailable, KvFiller, keeps_deepest, learn_tokens, unfillable_reason
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.engine.llama import Context, LoadedModel, supports_gpu_offload
from cliff_tui.engine.llama_log import LlamaLog, parse_buffer_line, parse_flash_attn
from cliff_tui.engine.memory import MemoryTracker
from cliff_tui.engine.options import MIN_WINDOW_TOKENS, RunOptions
from cliff_tui.engine.settings import resolve_settings
from cliff_tui.engine.tokens import MINIMAL_PROMPT, prompt_tokens
from cliff_tui.errors import Cancelled, CliffError, DoesNotFit
from cliff_tui.events import (
    BuffersReported,
    DecodeWindow,
    GeneratedText,
    LogLine,
    Notice,
    RunFailed,
    RunFinished,
    RunProgress,
    RunStarted,
    Sample,
)
from cliff_tui.heap import return_freed_memory
from cliff_tui.probes.nvidia import NvidiaProbe
from cliff_tui.probes.sampler import Sampler, SamplerThread
from cliff_tui.probes.system import read_major_faults
from cliff_tui.records import (
    BufferSize,
    CliffVerdict,
    DecodePhase,
    DecodePoint,
    FillMode,
    ModelInfo,
    RunPhase,
    RunResult,
    RunSettings,
    SpeedVerdict,
)
from cliff_tui.units import fmt_bytes

Publish = Callable[[object], None]


def probe_depths(depth: int, probes: int, measured: int = 0) -> list[int]:
    """Where a run to ``depth`` stops its prefill to probe decode speed: evenly spaced, leaving
    out those within half a step of ``measured`` or shallower (what earlier runs measured)."""
    step = depth / (probes + 1)
    return [d for d in (depth * k // (probes + 1) for k in range(1, probes + 1)) if d > measured + step / 2]


def largest_prefill_call(depth: int, probes: int, n_ubatch: int) -> int:
    """The longest ``llama_decode`` call a real prefill to ``depth`` makes: one ubatch, or less
    where the probes come closer together."""
    return min(n_ubatch, depth - max(probe_depths(depth, probes), default=0))


def window_ring(n_swa: int, n_ubatch: int) -> int:
    """The cells a sliding-window cache cycles through (its window and one ubatch), 0 without one.
    A loaded state packs its window's cells together where a prefill leaves them spread around
    this ring, and decode runs faster on packed cells (see bench/RESULTS.md, 'Filled against
    prefilled'): a filled run prefills the ring's worth of tokens for real before it measures,
    so its cache is laid out as a prefilled one."""
    return n_swa + n_ubatch if n_swa > 0 else 0


def filled_tail(depth: int, probes: int, n_ubatch: int, n_swa: int) -> int:
    """The tokens a filled run to ``depth`` prefills for real at its end: the longest call a real
    prefill makes (so the compute buffers are touched as far), or the window's ring if longer."""
    return min(depth, max(largest_prefill_call(depth, probes, n_ubatch), window_ring(n_swa, n_ubatch)))


def filled_load(reached: int, depth: int, tail: int, learned: int) -> int:
    """Where a filled run that holds ``reached`` cells and must reach ``depth``, the last ``tail``
    tokens prefilled for real, loads a state: ``depth − tail``, or 0 (load nothing, prefill on
    from ``reached``) where that is no deeper than what it holds or than the learned layout."""
    start = depth - tail
    return start if start > max(reached, learned) else 0


def window_closes(n_tokens: int, seconds: float, limit: int, options: RunOptions) -> bool:
    """Whether a decode window of ``n_tokens`` that took ``seconds`` is complete: ``limit`` tokens,
    or ``options.window_seconds`` once it holds MIN_WINDOW_TOKENS."""
    return n_tokens >= limit or (n_tokens >= MIN_WINDOW_TOKENS and seconds >= options.window_seconds)


def window_length(limit: int, token_s: float, options: RunOptions) -> int:
    """The tokens a window holds where each takes ``token_s`` seconds."""
    return next((n for n in range(1, limit) if window_closes(n, n * token_s, limit, options)), limit)


@dataclass
class _Window:
    durations: list[float]
    rate: float
    major_faults: int | None

    @property
    def faults_per_token(self) -> float | None:
        return None if self.major_faults is None else self.major_faults / len(self.durations)


def context_size(settings: RunSettings) -> int:
    return pad_n_ctx(settings.n_ctx or settings.depth + settings.n_gen)


class Run:
    def __init__(
        self,
        settings: RunSettings,
        publish: Publish,
        *,
        cancel: threading.Event | None = None,
        options: RunOptions | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self.options = options or RunOptions()
        self.run_id = self.options.run_id or uuid.uuid4().hex[:8]
        self.settings = settings
        self.publish = publish
        self.cancel = cancel or threading.Event()
        self.sampler = sampler or Sampler(pid=os.getpid(), nvidia=NvidiaProbe(pcie=False))
        self.tracker = MemoryTracker()
        self.buffers: list[BufferSize] = []
        self.flash_attn_on: bool | None = None
        self.fill: FillMode = "real"  # how this run's cache reached depth
        self.architecture: str | None = None
        self._last_progress = 0.0

    # --- the experiment -------------------------------------------------------------------

    def execute(self) -> RunResult:
        """Run it; publishes RunFinished, or RunFailed and re-raises the :class:`CliffError`."""
        n_ctx = None
        try:
            self.settings, notes = resolve_settings(self.settings)
            n_ctx = context_size(self.settings)
            for note in notes:
                self.publish(Notice(time.time(), note))
            model_info = read_model_info(self.settings.model_path)
            return self._execute(model_info, n_ctx)
        except CliffError as exc:
            self.publish(
                RunFailed(
                    time.time(),
                    self.run_id,
                    exc.kind,
                    str(exc),
                    n_ctx=getattr(exc, "n_ctx", None) or n_ctx,
                    depth=self.settings.depth,
                )
            )
            exc.published = True
            raise

    def _execute(self, info: ModelInfo, n_ctx: int) -> RunResult:
        s = self.settings
        t0 = time.monotonic()
        self.architecture = info.architecture
        self.publish(RunStarted(time.time(), self.run_id, s, info, n_ctx))
        self._progress("load", 0, force=True)
        self._check_host_memory(info, n_ctx)
        tracking = SamplerThread(self.sampler, self.tracker.observe, self.options.sample_interval)
        model = context = None
        self.tracker.start_watch(self.sampler.sample())
        stop_listening = LlamaLog.install().listen(self._on_log)
        try:
            model = LoadedModel(s.model_path, s.n_gpu_layers, self.cancel)
            context = Context(model, n_ctx, s)
            self.tracker.kv_on_gpu = self.tracker.watch.kv_on_gpu = gpu_index_of(kv_device(self.buffers)) is not None
            self.publish(BuffersReported(time.time(), self.run_id, tuple(self.buffers)))
            self._check_cancel()
            created = self.sampler.sample()
            tracking.start()
            baseline_tok_s, base_point = self._baseline(model, context)
            baseline = self.sampler.sample(fresh=True)  # the cgroup read after the context took its memory
            self.tracker.mark_baseline(baseline)
            context.clear()
            started_from, prefill_tok_s, points = self._prefill(model, context)
            self.tracker.mark_steady()
            depth_tok_s, depth_points = self._decode_at_depth(model, context)
            self.tracker.observe(self.sampler.sample())
        finally:
            stop_listening()
            tracking.stop()
            if context is not None:
                context.free()
            if model is not None:
                model.free()
        all_points = (base_point, *self.options.prior_points, *points, *depth_points)
        evidence = self.tracker.watch.evidence()
        spilled = memory_sign(evidence)
        verdict = classify_speed(
            baseline_tok_s,
            depth_tok_s,
            s.depth,
            all_points,
            self.tracker.throttle_seen,
            cpu_cause=self.tracker.watch.cpu_cause,
            kv_on_gpu=self.tracker.kv_on_gpu,
            memory_sign=spilled.text if spilled else None,
        )
        cliff = cliff_verdict(evidence, verdict)
        result = self._result(
            info,
            n_ctx,
            created,
            baseline_tok_s,
            depth_tok_s,
            prefill_tok_s,
            started_from,
            all_points,
            verdict,
            time.monotonic() - t0,
            cliff,
        )
        self._progress("done", s.depth, force=True)
        self.publish(RunFinished(time.time(), result))
        return result

    def _baseline(self, model: LoadedModel, context: Context) -> tuple[float | None, DecodePoint]:
        self._progress("baseline", 0, force=True)
        prompt = model.tokenize(MINIMAL_PROMPT, add_bos=True)
        context.decode(prompt)
        n = min(self.options.baseline_tokens, max(2, self.settings.n_gen))
        durations = _joined(self._generate(model, context, n, "baseline", emit_text=False))
        rate = _steady_rate(durations)
        if rate is None:
            raise CliffError(f"the baseline's {n} tokens took no measurable time: the clock is not advancing")
        return rate, DecodePoint(depth=len(prompt), ms_per_token=1000 / rate, n_tokens=n, phase="baseline")

    def _prefill(self, model: LoadedModel, context: Context) -> tuple[int, float | None, list[DecodePoint]]:
        s, opt = self.settings, self.options
        prompt = prompt_tokens(model, s.depth, s.prompt_file)
        note = prompt.repetition_note()
        if note is not None:
            self.publish(Notice(time.time(), note))
        tokens = prompt.tokens
        measured = max((p.depth for p in opt.prior_points), default=0)  # an earlier point probed up to here
        checkpoints = probe_depths(s.depth, opt.probes, measured)
        largest_call = largest_prefill_call(s.depth, opt.probes, context.n_ubatch)
        step, reached = context.n_ubatch, 0
        points: list[DecodePoint] = []
        if opt.state_in:
            reached = min(context.load_state(opt.state_in), s.depth)
            context.truncate(reached)
        elif opt.fill == "synthetic":
            reached, points = self._fill(model, context, tokens, checkpoints, largest_call)
            step = largest_call
        started_from = reached
        probed = {p.depth for p in points}
        checkpoints = [c for c in checkpoints if c > reached and c not in probed]
        t_start = time.perf_counter()
        self._progress("prefill", reached, force=True)
        context.abort_on(self.cancel)
        try:
            while reached < s.depth:
                # one ubatch per call: llama.cpp splits a batch into ubatches anyway, and smaller
                # calls give a live depth and ETA
                stop = min(s.depth, reached + step, *(c for c in checkpoints if c > reached))
                t = time.perf_counter()
                context.decode(tokens[reached:stop])
                context.synchronize()
                rate = (stop - reached) / max(time.perf_counter() - t, 1e-9)
                reached = stop
                self._progress("prefill", reached, prefill_tok_s=rate, eta_s=(s.depth - reached) / rate + s.n_gen / 10)
                if reached in checkpoints and reached < s.depth:
                    context.abort_on(None)
                    points.append(self._probe(model, context, reached))
                    context.abort_on(self.cancel)
        finally:
            context.abort_on(None)
        elapsed = time.perf_counter() - t_start
        prefill_rate = (s.depth - started_from) / elapsed if s.depth > started_from and elapsed > 0 else None
        if self.fill == "synthetic":
            self._say_filled(started_from, prefill_rate)
        if opt.state_out:
            context.save_state(opt.state_out, tokens[: s.depth])
        return started_from, prefill_rate, points

    def _fill(
        self, model: LoadedModel, context: Context, tokens: list[int], checkpoints: list[int], call: int
    ) -> tuple[int, list[DecodePoint]]:
        """Bring the cache to each probe depth and probe there, then to :func:`filled_tail`
        tokens short of depth or the last probe, whichever is deeper (the caller prefills the
        rest for real, in calls of at most ``call``, the largest a real prefill would make).
        Returns the depth reached and the points; (0, no points) where the cache cannot be
        filled, said in a notice."""
        tail = filled_tail(self.settings.depth, self.options.probes, context.n_ubatch, model.n_swa())
        try:
            why = unfillable_reason(model, self.architecture)
            if why is None and self.settings.depth - tail <= learn_tokens(model):
                why = f"{self.settings.depth:,} tokens is too shallow to fill"
            if why is not None:
                raise FillUnavailable(why)
            with KvFiller(context, tokens[: learn_tokens(model)], self.options.fill_dir, call) as filler:
                if checkpoints:  # more fills than one
                    self._keep_deepest(filler, tokens, self.settings.depth - tail)
                reached, points = self._filled_probes(filler, model, tokens, checkpoints, call)
                reached = _load_toward(filler, tokens, reached, self.settings.depth, tail)
        except FillUnavailable as exc:
            context.clear()
            self.publish(Notice(time.time(), f"the KV cache is prefilled for real: {exc}", "warning"))
            return 0, []
        return_freed_memory()  # the filler is gone: its learned rows and chunks are free
        self.tracker.forget_host_peaks(self.sampler.sample())
        if filler.loaded:
            self.fill = "synthetic"
        else:
            self.publish(
                Notice(
                    time.time(),
                    "the KV cache is prefilled for real: its probes are closer together "
                    "than the stretch a filled run prefills before each",
                )
            )
        return reached, points

    def _keep_deepest(self, filler: KvFiller, tokens: list[int], deepest: int) -> None:
        """Write the deepest state once for every fill on the way (engine.fill.keeps_deepest),
        where RAM has room for it: the room after the context was created and zeroed."""
        baseline = self.tracker.baseline
        model, state = filler.context.model, filler.layout.nbytes(deepest)
        if baseline is None or deepest <= learn_tokens(model) or model.n_swa() > 0:
            return
        room = baseline.ram_room_bytes
        if keeps_deepest(model.n_swa(), state, room):
            filler.keep_deepest(tokens[:deepest])
        else:
            self.publish(
                Notice(
                    time.time(),
                    f"a KV state written for each probe's depth: RAM has "
                    f"{fmt_bytes(room)} free, not twice the deepest state's "
                    f"{fmt_bytes(state)}",
                )
            )

    def _filled_probes(
        self, filler: KvFiller, model: LoadedModel, tokens: list[int], checkpoints: list[int], call: int
    ) -> tuple[int, list[DecodePoint]]:
        points: list[DecodePoint] = []
        ring, reached = window_ring(model.n_swa(), filler.context.n_ubatch), 0
        self._progress("prefill", 0, force=True)
        for depth in checkpoints:
            self._check_cancel()
            reached = _load_toward(filler, tokens, reached, depth, ring)
            for start in range(reached, depth, call):
                filler.context.decode(tokens[start : min(depth, start + call)])
            reached = depth
            self._progress("prefill", depth, force=True)
            points.append(self._probe(model, filler.context, depth))
        return reached, points

    def _say_filled(self, filled: int, rate: float | None) -> None:
        measured = f" at {rate:,.0f} tok/s" if rate else ""
        self.publish(
            Notice(
                time.time(),
                f"KV filled to {filled:,} cells; prefill measured on the last "
                f"{self.settings.depth - filled:,} tokens{measured}",
            )
        )

    def _probe(self, model: LoadedModel, context: Context, depth: int) -> DecodePoint:
        (window,) = self._generate(
            model,
            context,
            self.options.probe_tokens,
            "probe",
            emit_text=False,
            limit=self.options.probe_tokens,
            one_window=True,
        )
        context.truncate(depth)
        return DecodePoint(
            depth=depth,
            ms_per_token=_window_ms(window.durations),
            n_tokens=len(window.durations),
            phase="probe",
            major_faults=window.major_faults,
        )

    def _decode_at_depth(self, model: LoadedModel, context: Context) -> tuple[float | None, list[DecodePoint]]:
        self._progress("decode", self.settings.depth, force=True)
        windows = self._generate(
            model, context, self.settings.n_gen, "depth", emit_text=True, until_steady=self.options.stop_when_steady
        )
        points, depth = [], self.settings.depth
        for window in windows:
            points.append(
                DecodePoint(
                    depth=depth,
                    ms_per_token=_window_ms(window.durations),
                    n_tokens=len(window.durations),
                    phase="depth",
                    major_faults=window.major_faults,
                )
            )
            depth += len(window.durations)
        return _steady_rate(_joined(windows)), points

    def _generate(
        self,
        model: LoadedModel,
        context: Context,
        n: int,
        phase: DecodePhase,
        emit_text: bool,
        limit: int | None = None,
        one_window: bool = False,
        until_steady: bool = False,
    ) -> list[_Window]:
        """Greedy decode of ``n`` tokens, one ``llama_decode`` each, in windows of at most ``limit``
        tokens (window_closes); fewer tokens once the first window closes (``one_window``) or once
        the windows are steady (``until_steady``). Returns each window's per-token wall seconds and
        the pages this process read back during it."""
        limit = limit or self.options.window_tokens
        windows: list[_Window] = []
        window: list[float] = []
        text: list[str] = []
        start_depth = context.used_cells()
        self._check_cancel()
        faults_before = read_major_faults(os.getpid())
        for i, (token, dt) in enumerate(context.timed_greedy_decode(n)):
            window.append(dt)
            if emit_text:
                text.append(model.piece(token))
            if window_closes(len(window), sum(window), limit, self.options) or i == n - 1:
                rate, spread = window_rate(window)
                faults_now = read_major_faults(os.getpid())
                faults = None if faults_now is None or faults_before is None else faults_now - faults_before
                faults_before = faults_now
                windows.append(_Window(window, rate, faults))
                decoded = DecodeWindow(
                    time.time(),
                    self.run_id,
                    phase,
                    start_depth + i + 1 - len(window),
                    len(window),
                    rate,
                    spread,
                    faults,
                )
                self.tracker.watch.decoded(decoded)
                self.publish(decoded)
                if text:
                    self.publish(GeneratedText(time.time(), self.run_id, "".join(text)))
                window, text = [], []
                if phase == "depth":
                    self._progress("decode", start_depth + i + 1, eta_s=(n - i - 1) / rate if rate else None)
                if one_window or (until_steady and steady([(w.rate, w.faults_per_token) for w in windows])):
                    break
            if i < n - 1:
                self._check_cancel()
        return windows

    # --- helpers --------------------------------------------------------------------------

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("cancelled")

    def _progress(
        self,
        phase: RunPhase,
        depth: int,
        *,
        force: bool = False,
        prefill_tok_s: float | None = None,
        eta_s: float | None = None,
    ) -> None:
        self.tracker.depth = depth
        now = time.monotonic()
        if not force and now - self._last_progress < self.options.progress_interval:
            return
        self._last_progress = now
        self.publish(RunProgress(time.time(), self.run_id, phase, depth, self.settings.depth, prefill_tok_s, eta_s))

    def _on_log(self, line: LogLine) -> None:
        buffer = parse_buffer_line(line.text)
        if buffer is not None:
            self.buffers.append(buffer)
        flash = parse_flash_attn(line.text)
        if flash is not None:
            self.flash_attn_on = flash
        self.publish(line)

    def _check_host_memory(self, info: ModelInfo, n_ctx: int) -> None:
        """A context far beyond RAM + swap would not fail cleanly on the host (the allocator
        overcommits and the kernel kills us later): refuse it up front, from the textbook size."""
        s = self.settings
        if s.n_gpu_layers != 0 and supports_gpu_offload():
            return
        per_token = kv_bytes_per_token(info, s.cache_type_k, s.cache_type_v)
        if per_token is None:
            return
        need = per_token * n_ctx + info.size_bytes
        sample = self.sampler.sample()
        have = sample.ram.available_bytes + (sample.swap.total_bytes - sample.swap.used_bytes)
        if need > have:
            raise DoesNotFit(
                f"a context of {n_ctx:,} tokens does not fit: its KV cache alone needs about "
                f"{fmt_bytes(per_token * n_ctx)} in RAM (textbook) and {fmt_bytes(have)} is free "
                "with swap — try a smaller depth or -ctk q8_0 -ctv q8_0",
                n_ctx=n_ctx,
            )

    def _result(
        self,
        info: ModelInfo,
        n_ctx: int,
        created: Sample,
        baseline_tok_s: float | None,
        depth_tok_s: float | None,
        prefill_tok_s: float | None,
        started_from: int,
        points: tuple[DecodePoint, ...],
        verdict: SpeedVerdict,
        elapsed: float,
        cliff: CliffVerdict,
    ) -> RunResult:
        t = self.tracker
        base = t.baseline
        if base is None:
            raise CliffError("no memory baseline was taken before the model loaded")
        sizes = by_kind(self.buffers)
        return RunResult(
            run_id=self.run_id,
            settings=self.settings,
            model_name=info.name,
            n_ctx=n_ctx,
            depth=self.settings.depth,
            n_gen=self.settings.n_gen,
            kv_device=kv_device(self.buffers),
            kv_buffers=sizes["kv"],
            model_buffers=sizes["model"],
            compute_buffers=sizes["compute"],
            baseline_tok_s=baseline_tok_s,
            depth_tok_s=depth_tok_s,
            prefill_tok_s=prefill_tok_s,
            prefilled_tokens=self.settings.depth - started_from,
            decode_points=tuple(points),
            verdict=verdict,
            ram_baseline_bytes=base.ram.used_bytes,
            ram_peak_bytes=t.ram_peak,
            swap_baseline_bytes=base.swap.used_bytes,
            swap_peak_bytes=t.swap_peak,
            rss_created_bytes=created.process.total_rss_bytes if created.process else None,
            rss_baseline_bytes=base.process.total_rss_bytes if base.process else None,
            rss_peak_bytes=t.rss_peak,
            rss_noise_bytes=t.rss_noise(),
            gpus=t.gpu_deltas(),
            gpus_reason=base.gpus_reason,
            elapsed_s=elapsed,
            started_from_depth=started_from,
            cliff=cliff,
            fill=self.fill,
        )


def _load_toward(filler: KvFiller, tokens: list[int], reached: int, depth: int, tail: int) -> int:
    """Load a state ``tail`` tokens short of ``depth`` where that is deeper than the ``reached``
    cells the cache holds (:func:`filled_load`); returns where it stands."""
    loaded = filled_load(reached, depth, tail, learn_tokens(filler.context.model))
    if loaded:
        filler.fill(tokens[:loaded])
    return loaded or reached


def _joined(windows: list[_Window]) -> list[float]:
    return [dt for window in windows for dt in window.durations]


def _window_ms(durations: list[float]) -> float:
    """ms per token over a window, as its DecodeWindow reports it (so the live verdict and the
    result's agree)."""
    return sum(durations) / len(durations) * 1000


def _steady_rate(durations: list[float]) -> float | None:
    """tok/s without the first token (it pays for warm-up), as llama-bench averages."""
    steady = durations[1:] if len(durations) > 2 else durations
    total = sum(steady)
    return len(steady) / total if total > 0 else None
