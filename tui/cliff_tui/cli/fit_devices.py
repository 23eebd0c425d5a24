"""`cliff-tui fit` over several devices: llama.cpp's split of a model per device (--rpc endpoints,
--devices sizes, or this machine's GPUs), what each holds and has left, the context where the
first one fills, and the -ts that reaches the largest context."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import replace

from cliff_tui.analysis.devices import (
    ContextLimit,
    Device,
    SplitFlags,
    SplitPlan,
    SplitSuggestion,
    backend_for,
    context_limit,
    parse_gpu_layers,
    parse_split_mode,
    parse_tensor_split,
    plan_lines,
    plan_record,
    server_command,
    split_plan,
    suggest_split,
)
from cliff_tui.analysis.theory import CUDA, N_CTX_PAD, KvSettings
from cliff_tui.errors import BadInput
from cliff_tui.models.weights import split_weights
from cliff_tui.records import ModelInfo
from cliff_tui.units import fmt_bytes, parse_size

SPLIT_OPTIONS = ("rpc", "devices", "tensor_split", "split_mode", "main_gpu", "device", "gpu_layers", "compute")


def wants_devices(args: argparse.Namespace) -> bool:
    return any(getattr(args, name, None) not in (None, False) for name in SPLIT_OPTIONS)


def fit_devices(args: argparse.Namespace, model: ModelInfo, location: str | None, model_args: Sequence[str]) -> int:
    devices, endpoints = _devices(args)
    flags = _flags(args)
    settings = _settings(args, model)
    weights = split_weights(model, location)
    compute = _compute(args.compute, devices)
    reserve = args.reserve or 0
    plan = split_plan(model, weights, devices, flags, settings, compute, reserve)
    cap = model.n_ctx_train or settings.n_ctx
    limit = context_limit(model, weights, devices, flags, settings, cap, compute, reserve)
    suggestion = suggest_split(model, weights, devices, settings, cap, compute, reserve, base=flags)
    command = server_command(model_args, flags, settings, endpoints)
    then = ""
    already = limit.max_context is not None and limit.max_context >= (suggestion.max_context or 0)
    if already:
        suggestion = replace(suggestion, text=f"these flags already reach {limit.max_context:,} tokens")
    elif suggestion.flags is not None and suggestion.max_context:
        best = replace(settings, n_ctx=min(suggestion.max_context, cap))
        then = server_command(model_args, suggestion.flags, best, endpoints)
    if args.json:
        record = plan_record(plan, limit, suggestion) | {"command": command, "best_command": then or None}
        print(json.dumps(record, indent=2))
    else:
        print(_text(plan, _reach(limit, cap), suggestion, command, then))
    return 0 if plan.fits else 1


def _devices(args: argparse.Namespace) -> tuple[tuple[Device, ...], tuple[str, ...]]:
    if args.rpc and args.devices:
        raise BadInput("give --rpc (rpc-servers, asked for their memory) or --devices (sizes), not both")
    if args.rpc:
        endpoints = tuple(e.strip() for e in args.rpc.split(",") if e.strip())
        return _rpc_devices(endpoints), endpoints
    if args.devices:
        return _sized_devices(args.devices), ()
    return _local_gpus(), ()


def _rpc_devices(endpoints: Sequence[str]) -> tuple[Device, ...]:
    from cliff_tui.probes.rpc import rpc_hello

    devices: list[Device] = []
    for endpoint in endpoints:
        info = rpc_hello(endpoint)
        if not info.memory:
            raise BadInput(f"the rpc-server {endpoint} serves no device")
        free, total = info.memory[0]
        devices.append(Device(f"RPC{len(devices)}", total, free, endpoint))
    return tuple(devices)


def _sized_devices(text: str) -> tuple[Device, ...]:
    devices = []
    for i, part in enumerate(p.strip() for p in text.split(",")):
        try:
            size = parse_size(part)
        except ValueError as exc:
            raise BadInput(f"--devices {text!r}: {exc}") from None
        if size <= 0:
            raise BadInput(f"--devices {text!r}: device {i} holds nothing: give each size with a unit, e.g. 24GiB")
        devices.append(Device(f"CUDA{i}", size, backend=CUDA))
    return tuple(devices)


def _local_gpus() -> tuple[Device, ...]:
    from cliff_tui.probes.sampler import Sampler

    sample = Sampler().sample()
    gpus = [g for g in sample.gpus if g.vram_total_bytes]
    if not gpus:
        why = sample.gpus_reason or "no GPU found"
        raise BadInput(f"no devices to split over ({why}): give --devices SIZE,SIZE or --rpc HOST:PORT,HOST:PORT")
    names = {"nvidia": "CUDA", "amd": "ROCm"}
    devices = []
    for g in gpus:
        name = f"{names.get(g.vendor, g.vendor.upper())}{g.index}"
        total = g.vram_total_bytes or 0
        free = total - g.vram_used_bytes if g.vram_used_bytes is not None else None
        devices.append(Device(name, total, free, backend=backend_for(name)))
    return tuple(devices)


def _flags(args: argparse.Namespace) -> SplitFlags:
    devices = None
    if args.device is not None:
        words = [d.strip() for d in args.device.split(",") if d.strip()]
        devices = () if words == ["none"] else tuple(words)
    return SplitFlags(
        n_gpu_layers=parse_gpu_layers(args.gpu_layers) if args.gpu_layers else -1,
        tensor_split=parse_tensor_split(args.tensor_split) if args.tensor_split else (),
        split_mode=parse_split_mode(args.split_mode) if args.split_mode else "layer",
        main_gpu=args.main_gpu or 0,
        device_names=devices,
        kv_offload=not args.no_kv_offload,
    )


def _settings(args: argparse.Namespace, model: ModelInfo) -> KvSettings:
    n_ctx = args.ctx_size or model.n_ctx_train or 4096
    n_seq = args.parallel or 1
    return KvSettings(n_ctx=n_ctx, type_k=args.cache_type_k, type_v=args.cache_type_v, n_seq=n_seq, kv_unified=True)


COMPUTE_RE = re.compile(r"^\s*(?P<dev>[^=\s]+)\s*=\s*(?P<size>.+?)\s*$")


def _compute(text: str | None, devices: Sequence[Device]) -> dict[str, int] | None:
    if not text:
        return None
    names = {d.name for d in devices} | {"CPU", "host"}
    out = {}
    for part in text.split(","):
        match = COMPUTE_RE.match(part)
        if not match:
            raise BadInput(f"--compute {text!r}: give DEV=SIZE pairs, e.g. RPC0=12MiB,RPC1=20MiB")
        if match["dev"] not in names:
            raise BadInput(f"--compute names {match['dev']}, not one of the devices: {', '.join(sorted(names))}")
        try:
            out[match["dev"]] = parse_size(match["size"])
        except ValueError as exc:
            raise BadInput(f"--compute {text!r}: {exc}") from None
    return out


def _reach(limit: ContextLimit, cap: int) -> str:
    if limit.max_context is None:
        return f"With these flags not even the smallest context fits: {limit.first_full} is full first."
    if limit.max_context >= cap // N_CTX_PAD * N_CTX_PAD:
        return f"With these flags the whole trained context, {cap:,} tokens, fits on every device."
    return f"With these flags the context reaches {limit.max_context:,} tokens, where {limit.first_full} is full."


def _text(plan: SplitPlan, reach: str, suggestion: SplitSuggestion, command: str, then: str) -> str:
    kv = f"{plan.settings.type_k}/{plan.settings.type_v}"
    lines = [f"{plan.model} over {len(plan.devices)} devices at -c {plan.n_ctx:,} ({kv} KV):", ""]
    lines += plan_lines(plan)
    lines.append("")
    tight = plan.tightest
    if not plan.fits:
        short = [d for d in plan.devices if not d.fits]
        lines.append("Does not fit: " + ", ".join(f"{d.name} is {fmt_bytes(-d.left_bytes)} short" for d in short))
    elif tight is not None:
        lines.append(f"Fits: at -c {plan.n_ctx:,} {tight.name} has the least left, {fmt_bytes(tight.left_bytes)}.")
    lines.append(reach)
    lines += [f"Best split: {suggestion.text}"]
    lines += [f"Note: {n}" for n in plan.notes]
    lines += ["", "These flags:", f"  {command}"]
    if then:
        lines += ["The best split:", f"  {then}"]
    return "\n".join(lines)
