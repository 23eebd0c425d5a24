"""``cliff-tui triangulate``: a run per depth, each in a fresh worker process, chained.

Memory points need a context per depth (llama.cpp reserves the KV cache for n_ctx when the
context is created), but speed at depth needs a prefill to that depth. Three naive runs at
16k/32k/65k prefill 113k tokens; chained, each worker loads the previous worker's KV state
(``llama_state_seq_save_file`` → ``load_file``) into its own, larger context and prefills only
the difference: 65k tokens in all, and the costliest deep tokens once. Every point still has its
own context, its own baseline (memory and decode speed, measured before the state is loaded),
its own peak and its own decode at depth.

The depths and the time they will take are planned in :mod:`cliff_tui.jobs.triangulation_plan`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence

from cliff_tui.analysis.theory import kv_bytes_per_token, kv_layout
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.engine.options import FillChoice, choose_fill
from cliff_tui.engine.runner import (
    RunOptions,
    largest_prefill_call,
)
from cliff_tui.engine.settings import resolve_settings
from cliff_tui.engine.tokens import check_rereadable
from cliff_tui.engine.worker import PrefillProfile, calibrate, calibrate_deep, run_point
from cliff_tui.errors import BadInput, Cancelled
from cliff_tui.events import Notice, RunFailed, Sample, TriangulationPlanned
from cliff_tui.jobs import OnWorker, Outcome, Publish
from cliff_tui.jobs.triangulation_plan import (
    DEFAULT_DEPTHS,
    estimate_filled_seconds,
    estimate_seconds,
    plan_depths,
    synthetic_note,
)
from cliff_tui.probes.nvidia import NvidiaProbe
from cliff_tui.probes.sampler import Sampler
from cliff_tui.records import DecodePoint, FillMode, ModelInfo, RunResult, RunSettings
from cliff_tui.units import fmt_bytes, fmt_duration

OVERSHOOT = 1.25  # a triangulation this much longer than it said it would take says so


def _check_reserve(reserve: int, sample: Sample) -> None:
    """A reserve no memory tier here can hold leaves every projection at 0 tokens: said before
    anything runs. (Which tier the cache lands on is known only once it is allocated, so a reserve
    that only the larger tier holds gets through.)"""
    rooms = {
        "RAM available": sample.ram_room_bytes,
        **{f"GPU{i} VRAM": g.vram_total_bytes for i, g in enumerate(sample.gpus) if g.vram_total_bytes},
    }
    name, largest = max(rooms.items(), key=lambda item: item[1])
    if reserve >= largest:
        raise BadInput(
            f"--reserve {fmt_bytes(reserve)} is more than any memory tier here holds (the largest: "
            f"{fmt_bytes(largest)} of {name}): pass a smaller --reserve"
        )


def _tiers_now() -> Sample:
    """One reading of the tiers, without the PCIe windows a live sampler waits for."""
    sampler = Sampler(pid=None, nvidia=NvidiaProbe(pcie=False))
    try:
        return sampler.sample()
    finally:
        sampler.close()


class TriangulateJob:
    follows_own_process = False

    def __init__(
        self,
        base: RunSettings,
        *,
        depths: Sequence[int] | None,
        target: int | None,
        reserve: int | None,
        kv_types: Sequence[tuple[str, str]],
        budget_s: float = 300,
        chain: bool = True,
        options: RunOptions | None = None,
        fill: FillChoice = "real",
    ) -> None:
        self.base = base
        self.requested_depths = sorted(set(depths)) if depths else None
        self.target = target
        self.reserve = reserve
        self.kv_types = list(kv_types)
        self.budget_s = budget_s
        self.chain = chain
        self.options = dataclasses.replace(options or RunOptions(), stop_when_steady=True)
        self.fill_choice = fill
        self.fill: FillMode = "real" if fill == "auto" else fill  # auto decides in run()
        self.depths: list[int] = list(self.requested_depths or DEFAULT_DEPTHS)
        self.profile: PrefillProfile | None = None  # the calibration's cost model, refitted as points finish
        self.promised_s: float | None = None  # the time it said it would take
        self.model: ModelInfo | None = None  # read from the GGUF header when the job runs
        self._ram_room: int | None = None  # RAM free when the job started: whether filled points keep a state
        self._t0 = time.monotonic()
        shown = ",".join(f"{d:,}" for d in self.depths) if self.requested_depths else "adaptive"
        self.title = f"depths {shown}"

    def check(self, tiers: Sample | None = None) -> None:
        """``tiers``: a reading already taken, for the reserve (else one is taken here)."""
        for k, v in self.kv_types:
            resolve_settings(dataclasses.replace(self.base, depth=1, cache_type_k=k, cache_type_v=v))
        if self.requested_depths or self.fill_choice == "synthetic":  # else planned in run()
            resolve_settings(dataclasses.replace(self.base, depth=max(self.depths)))  # with -c, every depth must fit
        if self.base.prompt_file:
            check_rereadable(self.base.prompt_file)
        if self.reserve is not None:
            _check_reserve(self.reserve, tiers or _tiers_now())

    def run(self, publish: Publish, cancel: threading.Event, on_worker: OnWorker) -> Outcome:
        first = _tiers_now()
        self.check(first)
        self._ram_room = first.ram_room_bytes
        model = self.model = read_model_info(self.base.model_path)
        note = ""
        if self.requested_depths is None and self.fill_choice != "synthetic":
            self.depths, note = self._plan_depths(model, publish, cancel, on_worker)
        elif self.fill_choice == "auto":
            self.fill = choose_fill("auto", max(self.depths))
        self.title = f"depths {', '.join(f'{d:,}' for d in self.depths)}"
        resolve_settings(dataclasses.replace(self.base, depth=max(self.depths)))  # with -c, every depth must fit
        publish(
            TriangulationPlanned(
                t=time.time(),
                depths=tuple(self.depths),
                kv_types=tuple(
                    dataclasses.replace(self.base, cache_type_k=k, cache_type_v=v).cache_label for k, v in self.kv_types
                ),
                target=self.target or model.n_ctx_train or 2 * max(self.depths),
                reserve_bytes=self.reserve,
                ram_available_bytes=first.ram_room_bytes,
                ram_tier=first.cgroup.tier if first.cgroup is not None else "RAM (swap beyond)",
                vram_total_bytes=tuple(g.vram_total_bytes for g in first.gpus),
                note=note,
            )
        )
        self._t0 = time.monotonic()
        for index, (k, v) in enumerate(self.kv_types):
            self._triangulate_type(model, k, v, publish, cancel, on_worker, len(self.kv_types) - index - 1)
        return "done"

    def _plan_depths(
        self, model: ModelInfo, publish: Publish, cancel: threading.Event, on_worker: OnWorker
    ) -> tuple[list[int], str]:
        publish(
            Notice(
                time.time(),
                "measuring this machine's prefill speed to choose depths that fit "
                f"{fmt_duration(self.budget_s)} (pass --depths to choose)",
            )
        )
        settings = dataclasses.replace(
            self.base, depth=2048, n_gen=16, cache_type_k=self.kv_types[0][0], cache_type_v=self.kv_types[0][1]
        )
        profile = calibrate(settings, cancel, on_pid=on_worker)
        if cancel.is_set():
            raise Cancelled("cancelled")
        if isinstance(profile, RunFailed):
            raise BadInput(profile.message)
        if profile is None:
            raise BadInput("the calibration worker died: see the log (l) or run `cliff-tui run` to see why")
        depths, note, reduced = plan_depths(profile, self.budget_s / len(self.kv_types), self.base.n_gen)
        self.profile = profile
        if reduced and self.fill_choice == "auto":
            self.fill, depths, reduced = "synthetic", list(DEFAULT_DEPTHS), False
            # what grows with depth, measured where the points will be and on the call the first
            # one prefills for real: a shallow calibration sees too little of it to say what a
            # filled point's last call and decode will cost, and a shorter call runs slower a token
            call = largest_prefill_call(min(depths), self.options.probes, self.base.call_tokens)
            self.profile = calibrate_deep(settings, profile, min(depths), cancel, chunk=call, on_pid=on_worker)
            if cancel.is_set():
                raise Cancelled("cancelled")
            self.promised_s = len(self.kv_types) * self._estimate(depths)
            note = synthetic_note(self.profile, self.base.n_gen, self.promised_s)
            publish(Notice(time.time(), note))
        else:
            self.promised_s = len(self.kv_types) * self._estimate(depths)
        if reduced:
            publish(Notice(time.time(), note, "warning"))
        return depths, note

    def _estimate(self, depths: Sequence[int], reached: int = 0) -> float:
        """Seconds the points at ``depths`` will take for one KV type, as this job reaches them."""
        assert self.profile is not None
        n_gen, opt = self.base.n_gen, self.options
        if self.fill == "synthetic":
            k, v = self.kv_types[0]
            per_cell = (kv_bytes_per_token(self.model, k, v) if self.model else None) or 0
            layout = kv_layout(self.model) if self.model else None
            n_swa = layout.n_swa if layout else 0
            return estimate_filled_seconds(
                self.profile,
                depths,
                n_gen,
                per_cell,
                self.base.call_tokens,
                opt,
                reached,
                n_swa,
                self._ram_room,
                os.path.getsize(self.base.model_path),
            )
        return estimate_seconds(self.profile, depths, n_gen, self.chain, opt, reached if self.chain else 0)

    def _triangulate_type(
        self,
        model: ModelInfo,
        k: str,
        v: str,
        publish: Publish,
        cancel: threading.Event,
        on_worker: OnWorker,
        types_after: int = 0,
    ) -> None:
        workdir = tempfile.mkdtemp(prefix="cliff-tui-")
        state_in = None
        prior: tuple[DecodePoint, ...] = ()
        try:
            for i, depth in enumerate(self.depths):
                deeper = i + 1 < len(self.depths)
                chain = self.chain and self.fill == "real"  # a filled point needs no earlier state
                state_out = os.path.join(workdir, f"kv-{depth}.bin") if chain and deeper else None
                if state_out and not _room_for_state(model, k, v, depth, workdir):
                    publish(
                        Notice(
                            time.time(),
                            f"not enough free disk in {workdir} to chain the KV state at "
                            f"{depth:,} tokens: the next point prefills from zero",
                            "warning",
                        )
                    )
                    state_out = None
                settings = dataclasses.replace(self.base, depth=depth, cache_type_k=k, cache_type_v=v)
                # a filled point, like a chained one, probes only deeper than the points before it
                earlier = prior if state_in or self.fill == "synthetic" else ()
                # the filled states go in the folder removed below: a worker killed on cancel
                # cannot remove its own
                options = dataclasses.replace(
                    self.options,
                    run_id=f"{k}-{depth}",
                    state_in=state_in,
                    state_out=state_out,
                    prior_points=earlier,
                    fill=self.fill,
                    fill_dir=self.options.fill_dir or workdir,
                )
                expected_s = self._estimate([depth], reached=self.depths[i - 1] if i else 0) if self.profile else None
                finished = self._point(settings, options, publish, cancel, on_worker)
                if state_in and os.path.exists(state_in):
                    os.remove(state_in)
                state_in = state_out if finished and state_out and os.path.exists(state_out) else None
                if finished:
                    self.fill = finished.fill  # a point that could not be filled: the rest prefill and chain
                    prior = tuple(p for p in finished.decode_points if p.phase != "baseline")
                    self._revise_estimate(finished, expected_s, self.depths[i + 1 :], types_after, publish)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _revise_estimate(
        self, result: RunResult, expected_s: float | None, remaining: Sequence[int], types_after: int, publish: Publish
    ) -> None:
        """Refit the cost model to the prefill and decode just measured; where the whole
        triangulation will now overshoot what it said, say so with the new estimate and the point
        that slipped."""
        if self.profile is None or self.promised_s is None or not result.prefill_tok_s:
            return
        start, depth = result.started_from_depth, result.depth
        self.profile = self.profile.with_prefill(start, depth, (depth - start) / result.prefill_tok_s)
        if result.depth_tok_s:
            self.profile = self.profile.with_decode(depth, 1 / result.depth_tok_s)
        left = self._estimate(remaining, reached=depth) + types_after * self._estimate(self.depths)
        total = time.monotonic() - self._t0 + left
        if total > OVERSHOOT * self.promised_s:
            took = f"the {depth:,} point took {fmt_duration(result.elapsed_s)}"
            if expected_s:
                took += f" where {fmt_duration(expected_s)} was expected"
            decode = f", decode {result.depth_tok_s:.1f} tok/s at depth" if result.depth_tok_s else ""
            publish(
                Notice(
                    time.time(),
                    f"this triangulation will take about {fmt_duration(total)} in all, not "
                    f"{fmt_duration(self.promised_s)}: {took} (prefill "
                    f"{result.prefill_tok_s:.0f} tok/s{decode})",
                    "warning",
                )
            )
            self.promised_s = total  # the next word only if it slips again

    def _point(
        self, settings: RunSettings, options: RunOptions, publish: Publish, cancel: threading.Event, on_worker: OnWorker
    ) -> RunResult | None:
        end = run_point(settings, options, publish, cancel, on_pid=on_worker)
        if end.event is None:
            raise Cancelled("cancelled")
        return end.result


def _room_for_state(model: ModelInfo, k: str, v: str, depth: int, folder: str) -> bool:
    per_token = kv_bytes_per_token(model, k, v)
    if per_token is None:
        return True
    return per_token * depth * 1.2 < shutil.disk_usage(folder).free
