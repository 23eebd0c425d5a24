"""A running llama-server's split over RPC devices, placed by the theory from its flags (--rpc, -ts,
-sm, -dev, -ngl, the KV flags) and its model's header: what each device holds, and what stays in
the server's own memory.

An rpc-server answers one client at a time, so the devices' sizes cannot be asked while the server
holds them: the split needs -ts (without it llama.cpp splits by each device's free memory)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cliff_tui.analysis.devices import (
    Device,
    SplitFlags,
    SplitPlan,
    parse_gpu_layers,
    parse_split_mode,
    parse_tensor_split,
    split_plan,
)
from cliff_tui.analysis.theory import KvSettings
from cliff_tui.errors import CliffError
from cliff_tui.records import DeviceLoad

UNKNOWN_SIZE = 1 << 62  # a device whose size cannot be asked: the plan places, it does not judge room


@dataclass(frozen=True)
class ServerSplit:
    devices: tuple[DeviceLoad, ...]
    host_kv_bytes: int | None  # the KV cache left in the server's own memory; None: no split read
    note: str  # why there is no split, where the server names devices


NO_SPLIT = ServerSplit((), None, "")


def server_split(model_path: str | None, values: Mapping[str, str], kv: KvSettings) -> ServerSplit:
    endpoints = [e.strip() for e in values.get("rpc", "none").split(",") if e.strip() and e.strip() != "none"]
    if not endpoints or model_path is None:
        return NO_SPLIT
    if values.get("tensor_split", "by free memory") == "by free memory":
        return ServerSplit(
            (), None, "split by each device's free memory (no -ts), which an rpc-server in use cannot be asked"
        )
    try:
        plan = _plan(model_path, values, endpoints, kv)
    except (OSError, ValueError, CliffError) as exc:
        return ServerSplit((), None, f"split not placed: {exc}")
    loads = tuple(DeviceLoad(d.name, d.endpoint, d.layers_text(), d.weights_bytes, d.kv_bytes) for d in plan.devices)
    return ServerSplit(loads, plan.host.kv_bytes, "")


def _plan(model_path: str, values: Mapping[str, str], endpoints: list[str], kv: KvSettings) -> SplitPlan:
    from cliff_tui.engine.gguf_meta import read_model_info
    from cliff_tui.models.weights import split_weights

    info = read_model_info(model_path)
    devices = tuple(Device(f"RPC{i}", UNKNOWN_SIZE, endpoint=e) for i, e in enumerate(endpoints))
    named = values.get("device", "all")
    flags = SplitFlags(
        n_gpu_layers=parse_gpu_layers(values.get("n_gpu_layers", "auto")),
        tensor_split=parse_tensor_split(values["tensor_split"]),
        split_mode=parse_split_mode(values.get("split_mode", "layer")),
        main_gpu=int(values.get("main_gpu", "0")),
        device_names=None if named == "all" else tuple(d for d in named.split(",") if d and d != "none"),
        kv_offload=values.get("kv_offload", "true") != "false",
    )
    return split_plan(info, split_weights(info, model_path), devices, flags, kv)
