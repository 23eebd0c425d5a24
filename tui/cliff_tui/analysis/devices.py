"""How llama.cpp splits a model over several devices: each device's layers, weights, KV cache and
headroom, from the GGUF's tensor table and the run's flags (-ngl, -ts, -sm, -mg, -dev, -nkvo).

It follows the vendored llama.cpp (llama-cpp-python 0.3.36), ``llama_model_base::load_tensors``.
The -ts values (each device's free memory where -ts is absent or all zero) become cumulative
fractions in float32. Of the ``n_layer + 1`` layers (the repeating layers, then the output layer)
the last ``-ngl`` are offloaded, and offloaded layer ``il`` goes to the first device whose
fraction exceeds ``(il - first offloaded) / offloaded`` (``std::upper_bound``); the others stay on
the CPU, and so does the input layer (the token embeddings), always. A model without
``output.weight`` gets a second copy of ``token_embd.weight`` on the output layer's device.
``rope_freqs``-style tensors are loaded once per device that holds a layer. Each tensor is padded
to its buffer's alignment. A layer's KV cache sits on its layer's device (on the CPU with
``-nkvo``), sized by :func:`cliff_tui.analysis.theory.kv_bytes_by_layer`. RPC devices
(``rpc-server``) come first, in ``--rpc`` order, then local GPUs; ``-dev`` picks and orders them.

Compute buffers depend on the graph and the backend and the theory does not derive them: pass
measured ones (llama-server's log, ``llama-fit-params --fit-print on``); the plan counts them as
fixed at every context.
"""

from __future__ import annotations

import functools
import math
import re
import shlex
import struct
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from cliff_tui.analysis.theory import (
    CPU,
    CUDA,
    N_CTX_PAD,
    Backend,
    InvalidSettings,
    KvSettings,
    kv_bytes_by_layer,
    kv_layout,
)
from cliff_tui.errors import BadInput
from cliff_tui.records import ModelInfo
from cliff_tui.units import fmt_bytes

SplitMode = Literal["layer", "row", "none", "tensor"]
SPLIT_MODES: tuple[SplitMode, ...] = ("layer", "row", "none", "tensor")
Source = Literal["flag", "env", "default"]
KvKind = Literal["global", "swa", "recurrent"]
KV_ORDER: tuple[KvKind, ...] = ("global", "swa", "recurrent")  # llama_kv_cache_iswa: non-SWA, then SWA
RPC = Backend("RPC", 32)  # an rpc-server's CPU device; a remote GPU keeps its own buffer rules
CUDA_LIKE = ("CUDA", "ROCm", "MUSA")  # ggml-cuda's device names: 128-byte alignment, padded quantised rows
MAX_DEVICES = 16  # llama_max_devices(): -ts takes fewer values than this
TS_SEPARATORS = re.compile(r"[,/]+")
LAYER_RE = re.compile(r"^blk\.(\d+)\.")
INPUT_TENSORS = ("token_embd.", "position_embd.", "token_types.")
PER_DEVICE_TENSORS = ("rope_freqs.", "rope_factors_long.", "rope_factors_short.")
FIRST_LAYER_TENSORS = ("token_embd_norm.",)


# --- devices and flags ------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One device llama.cpp offloads to, named as llama.cpp names it (``RPC0``, ``CUDA1``)."""

    name: str
    total_bytes: int
    free_bytes: int | None = None  # None: the total
    endpoint: str = ""  # host:port of an rpc-server
    backend: Backend = RPC

    @property
    def free(self) -> int:
        return self.total_bytes if self.free_bytes is None else self.free_bytes


def backend_for(name: str) -> Backend:
    """The buffer rules of a device by its llama.cpp name; 32-byte alignment where unknown."""
    if name.startswith("RPC"):
        return RPC
    if name.startswith(CUDA_LIKE):
        return CUDA
    return Backend(re.sub(r"\d+$", "", name) or name, CPU.alignment)


def rpc_devices(endpoints: Sequence[str], sizes: Sequence[int]) -> tuple[Device, ...]:
    """One device per rpc-server (each serving one device), named RPC0, RPC1… in --rpc order."""
    if len(endpoints) != len(sizes):
        raise BadInput(f"{len(endpoints)} --rpc endpoints but {len(sizes)} device sizes: give one size per endpoint")
    return tuple(Device(f"RPC{i}", size, endpoint=ep) for i, (ep, size) in enumerate(zip(endpoints, sizes)))


@dataclass(frozen=True)
class SplitFlags:
    """llama-server's placement flags, as its command line gives them."""

    n_gpu_layers: int = -1  # -ngl; -1 (auto) and -2 (all): every layer
    tensor_split: tuple[float, ...] = ()  # -ts; (): by each device's free memory
    split_mode: SplitMode = "layer"  # -sm
    main_gpu: int = 0  # -mg
    device_names: tuple[str, ...] | None = None  # -dev; None: every device; (): -dev none
    kv_offload: bool = True  # False: -nkvo

    def args(self) -> list[str]:
        """The flags that differ from llama-server's defaults."""
        out: list[str] = []
        if self.device_names is not None:
            out += ["-dev", ",".join(self.device_names) or "none"]
        if self.n_gpu_layers != -1:
            out += ["-ngl", "all" if self.n_gpu_layers == -2 else str(self.n_gpu_layers)]
        if self.split_mode != "layer":
            out += ["-sm", self.split_mode]
        if self.main_gpu:
            out += ["-mg", str(self.main_gpu)]
        if self.tensor_split:
            out += ["-ts", ",".join(_fmt_number(v) for v in self.tensor_split)]
        if not self.kv_offload:
            out.append("-nkvo")
        return out


def _fmt_number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def parse_tensor_split(text: str) -> tuple[float, ...]:
    """-ts as llama.cpp reads it: proportions separated by ``,`` or ``/``."""
    parts = [p.strip() for p in TS_SEPARATORS.split(text.strip()) if p.strip()]
    if not parts:
        raise BadInput(f"-ts {text!r} has no values: give one proportion per device, e.g. -ts 3,1")
    if len(parts) >= MAX_DEVICES:
        raise BadInput(f"-ts {text!r} has {len(parts)} values: llama.cpp takes at most {MAX_DEVICES - 1}")
    values = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise BadInput(f"-ts {text!r}: {part!r} is not a number (give proportions such as 3,1)") from None
        if not math.isfinite(value) or value < 0:
            raise BadInput(f"-ts {text!r}: {part!r} is not a proportion (use 0 or more)")
        values.append(value)
    return tuple(values)


def parse_split_mode(text: str) -> SplitMode:
    for mode in SPLIT_MODES:
        if text.strip().lower() == mode:
            return mode
    raise BadInput(f"-sm {text!r}: use one of {', '.join(SPLIT_MODES)}")


def parse_gpu_layers(text: str) -> int:
    value = text.strip().lower()
    if value in ("auto", "all"):
        return -1 if value == "auto" else -2
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"-ngl {text!r}: give a number of layers, auto or all") from None


# --- the weights, from the GGUF's tensor table -------------------------------------------------


@dataclass(frozen=True)
class WeightTensor:
    """One tensor of the GGUF: its bytes and, for a CUDA buffer's row padding, its shape."""

    name: str
    nbytes: int
    row_values: int = 0  # ne[0]; 0: unknown
    n_rows: int = 1  # the product of the other dimensions
    quantised: bool = False
    offset: int | None = None  # where its data starts in its file (None: unknown)
    file: int = 0  # which part of a split GGUF

    def size_on(self, backend: Backend) -> int:
        """What the tensor takes in a buffer of ``backend``, alignment included."""
        size = self.nbytes
        pad_to = backend.quant_row_pad
        if pad_to and self.quantised and self.row_values and self.row_values % pad_to:
            size += self.nbytes // max(1, self.n_rows) * (pad_to - self.row_values % pad_to) // self.row_values
        return -(-size // backend.alignment) * backend.alignment


@dataclass(frozen=True)
class ModelWeights:
    """The tensors of each part llama.cpp places on its own."""

    layers: tuple[tuple[WeightTensor, ...], ...]  # blk.N, by N
    output: tuple[WeightTensor, ...]  # the output layer (a tied model's token_embd copy included)
    inputs: tuple[WeightTensor, ...]  # the input layer: always on the CPU
    per_device: tuple[WeightTensor, ...] = ()  # one copy on each device that holds a layer
    first_layer: tuple[WeightTensor, ...] = ()  # loaded with layer 0
    tied_output: bool = False

    @property
    def n_layer(self) -> int:
        return len(self.layers)


def model_weights(tensors: Sequence[WeightTensor], n_layer: int) -> ModelWeights:
    """The tensors sorted into llama.cpp's layers by name; ``n_layer`` from the header's block count."""
    layers: list[list[WeightTensor]] = [[] for _ in range(n_layer)]
    output: list[WeightTensor] = []
    inputs: list[WeightTensor] = []
    per_device: list[WeightTensor] = []
    first: list[WeightTensor] = []
    for t in tensors:
        match = LAYER_RE.match(t.name)
        if match:
            il = int(match[1])
            if il >= n_layer:
                raise BadInput(f"tensor {t.name} names layer {il} but the header has {n_layer} layers")
            layers[il].append(t)
        elif t.name.startswith(FIRST_LAYER_TENSORS):
            first.append(t)
        elif t.name.startswith(INPUT_TENSORS):
            inputs.append(t)
        elif t.name.startswith(PER_DEVICE_TENSORS):
            per_device.append(t)
        else:
            output.append(t)
    tied = not any(t.name == "output.weight" for t in output)
    embd = next((t for t in inputs if t.name == "token_embd.weight"), None)
    if tied and embd is not None:
        output.append(embd)
    return ModelWeights(
        tuple(tuple(layer) for layer in layers), tuple(output), tuple(inputs), tuple(per_device), tuple(first), tied
    )


def weights_from_info(model: ModelInfo) -> ModelWeights | None:
    """The weights from what :class:`ModelInfo` keeps of the tensor table (each block's bytes and the
    output weight): per-layer totals, without the output norm or the input layer; None without
    them. Prefer :func:`model_weights` over the table itself."""
    blocks, output = model.block_weight_bytes, model.output_weight_bytes
    if not blocks or output is None or len(blocks) != (model.n_layer or 0):
        return None
    layers = tuple((WeightTensor(f"blk.{il}", size),) for il, size in enumerate(blocks))
    return ModelWeights(layers, (WeightTensor("output.weight", output),), ())


# --- placement -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Which device holds each layer: ``layer_device[il]`` for il < n_layer, then the output
    layer; None is the CPU."""

    devices: tuple[Device, ...]  # the devices in use, in llama.cpp's order
    layer_device: tuple[int | None, ...]
    fractions: tuple[float, ...]  # the cumulative split points

    def layers_on(self, index: int) -> tuple[int, ...]:
        return tuple(il for il, d in enumerate(self.layer_device[:-1]) if d == index)

    def output_on(self) -> int | None:
        return self.layer_device[-1]


def select_devices(devices: Sequence[Device], flags: SplitFlags) -> tuple[Device, ...]:
    """The devices llama.cpp uses under -dev, -sm and -mg."""
    chosen = tuple(devices)
    if flags.device_names is not None:
        by_name = {d.name: d for d in devices}
        unknown = [n for n in flags.device_names if n not in by_name]
        if unknown:
            known = ", ".join(by_name) or "none"
            raise BadInput(f"-dev names {', '.join(unknown)}, which is not among the devices ({known})")
        chosen = tuple(by_name[n] for n in flags.device_names)
    if flags.split_mode == "none" and chosen:
        if flags.main_gpu < 0:
            return ()
        if flags.main_gpu >= len(chosen):
            raise BadInput(f"-mg {flags.main_gpu} with {len(chosen)} devices: use 0 to {len(chosen) - 1}")
        return (chosen[flags.main_gpu],)
    if flags.split_mode == "row":
        raise BadInput(
            f"-sm row: {chosen[0].name if chosen else 'no device'} has no split buffers in the vendored "
            "llama.cpp (it offers them on SYCL and Hexagon only) and cliff-tui does not model a row split: "
            "use -sm layer"
        )
    if flags.split_mode == "tensor":
        raise BadInput("-sm tensor (weights and KV split within each layer) is not modelled: use -sm layer")
    return chosen


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def split_fractions(devices: Sequence[Device], tensor_split: Sequence[float]) -> tuple[float, ...]:
    """llama.cpp's cumulative split points, in float32 as it computes them."""
    n = len(devices)
    if tensor_split and len(tensor_split) != n:
        names = ", ".join(d.name for d in devices) or "none"
        raise BadInput(
            f"-ts has {len(tensor_split)} value{'s' if len(tensor_split) != 1 else ''} but {n} device"
            f"{'s are' if n != 1 else ' is'} in use ({names}): give one per device (0 leaves one empty)"
        )
    weights = [_f32(v) for v in tensor_split] if any(v > 0 for v in tensor_split) else [_f32(d.free) for d in devices]
    total, cumulative = 0.0, []
    for w in weights:
        total = _f32(total + w)
        cumulative.append(total)
    if total <= 0:
        raise BadInput("every device reports 0 bytes free and no -ts is given: pass -ts")
    return tuple(_f32(c / total) for c in cumulative)


def place(devices: Sequence[Device], flags: SplitFlags, n_layer: int) -> Placement:
    """Each layer's device, as ``load_tensors`` assigns them."""
    chosen = select_devices(devices, flags)
    n_all = n_layer + 1
    ngl = n_all if flags.n_gpu_layers < 0 else flags.n_gpu_layers
    if not chosen:
        return Placement((), (None,) * n_all, ())
    fractions = (1.0,) if flags.split_mode == "none" else split_fractions(chosen, flags.tensor_split)
    start = max(n_all - ngl, 0)
    act = min(ngl, n_all)
    out: list[int | None] = []
    for il in range(n_all):
        if il < start or il - start >= act:
            out.append(None)
        else:
            out.append(min(bisect_right(fractions, _f32((il - start) / act)), len(chosen) - 1))
    return Placement(chosen, tuple(out), fractions)


# --- the plan at one context -------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceShare:
    """One device's part of the run."""

    name: str
    endpoint: str
    layers: tuple[int, ...]
    holds_output: bool
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int | None  # None: not known
    free_bytes: int
    reserve_bytes: int
    kv_parts: tuple[tuple[KvKind, int], ...] = ()  # per cache, in the order llama.cpp creates them

    @property
    def need_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + (self.compute_bytes or 0)

    @property
    def left_bytes(self) -> int:
        """What stays free after the run and the reserve (negative: it does not fit)."""
        return self.free_bytes - self.reserve_bytes - self.need_bytes

    @property
    def fits(self) -> bool:
        return self.left_bytes >= 0

    def layers_text(self) -> str:
        text = _ranges(self.layers) if self.layers else "no layers"
        return text + (" + output" if self.holds_output else "")


@dataclass(frozen=True)
class HostShare:
    """What stays in system memory: the input layer, layers not offloaded, their cache, the logits."""

    layers: tuple[int, ...]
    holds_output: bool
    weights_bytes: int
    kv_bytes: int
    logits_bytes: int
    compute_bytes: int | None
    mapped_bytes: int | None = None  # the file range mmap maps for them (what llama.cpp logs as CPU_Mapped)

    @property
    def need_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.logits_bytes + (self.compute_bytes or 0)


@dataclass(frozen=True)
class SplitPlan:
    model: str
    n_ctx: int  # as requested (llama.cpp pads it to 256)
    settings: KvSettings
    flags: SplitFlags
    devices: tuple[DeviceShare, ...]
    host: HostShare
    fractions: tuple[float, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)

    @property
    def tightest(self) -> DeviceShare | None:
        """The device with the least room left (the first to fill as the context grows)."""
        return min(self.devices, key=lambda d: d.left_bytes, default=None)

    def layer_counts(self) -> tuple[int, ...]:
        """Layers per device, the output layer included: as -ts, it reproduces this split."""
        return tuple(len(d.layers) + d.holds_output for d in self.devices)


LOGITS_BYTES = 4  # f32 per vocabulary entry and output row


def split_plan(
    model: ModelInfo,
    weights: ModelWeights,
    devices: Sequence[Device],
    flags: SplitFlags,
    settings: KvSettings,
    compute: Mapping[str, int] | None = None,
    reserve_bytes: int | Sequence[int] = 0,
    host_compute: int | None = None,
) -> SplitPlan:
    """Each device's weights, cache and headroom at ``settings.n_ctx``.

    Raises :class:`BadInput` where the flags do not match the devices, and
    :class:`~cliff_tui.analysis.theory.InvalidSettings` where llama.cpp refuses the cache."""
    n_layer = _check_layers(model, weights)
    placement = place(devices, flags, n_layer)
    reserves = _reserves(placement.devices, reserve_bytes, devices)
    kv = _kv_by_backend(model, settings, placement.devices)
    kinds = _layer_kinds(model)
    shares = tuple(
        _device_share(placement, i, weights, kv, kinds, flags, compute, reserves[i])
        for i in range(len(placement.devices))
    )
    host = _host_share(model, placement, weights, kv, flags, settings, host_compute)
    notes = _plan_notes(model, weights, placement, compute)
    return SplitPlan(model.name, settings.n_ctx, settings, flags, shares, host, placement.fractions, notes)


def _check_layers(model: ModelInfo, weights: ModelWeights) -> int:
    n_layer = model.n_layer or 0
    if n_layer != weights.n_layer:
        raise BadInput(f"the header says {n_layer} layers but the tensor table holds {weights.n_layer}")
    return n_layer


def _reserves(chosen: Sequence[Device], reserve: int | Sequence[int], listed: Sequence[Device]) -> list[int]:
    if isinstance(reserve, int):
        return [reserve] * len(chosen)
    if len(reserve) == 1:
        return [reserve[0]] * len(chosen)
    if len(reserve) != len(listed):
        raise BadInput(f"{len(reserve)} reserves for {len(listed)} devices: give one, or one per device")
    by_name = {d.name: r for d, r in zip(listed, reserve)}
    return [by_name[d.name] for d in chosen]


def _kv_by_backend(model: ModelInfo, settings: KvSettings, chosen: Sequence[Device]) -> dict[str, Mapping[int, int]]:
    """Cache bytes per layer for each buffer kind in use (alignment differs between them)."""
    out: dict[str, Mapping[int, int]] = {}
    for backend in {d.backend for d in chosen} | {CPU}:
        per_layer = _kv_layers(model, settings, backend)
        if per_layer is None:
            raise InvalidSettings(f"{model.name}: the header lacks what the KV theory needs")
        out[backend.name] = per_layer
    return out


@functools.lru_cache(maxsize=512)
def _kv_layers(model: ModelInfo, settings: KvSettings, backend: Backend) -> Mapping[int, int] | None:
    """:func:`kv_bytes_by_layer`, kept: a split search asks for the same context many times."""
    per_layer = kv_bytes_by_layer(model, settings, backend)
    return None if per_layer is None else MappingProxyType(per_layer)


def _weights_on(tensors: Sequence[WeightTensor], backend: Backend) -> int:
    return sum(t.size_on(backend) for t in tensors)


def _device_tensors(placement: Placement, index: int, weights: ModelWeights) -> list[WeightTensor]:
    layers = placement.layers_on(index)
    tensors = [t for il in layers for t in weights.layers[il]]
    if layers:
        tensors += weights.per_device
    if layers and layers[0] == 0:
        tensors += weights.first_layer
    if placement.output_on() == index:
        tensors += weights.output
    return tensors


def _device_share(
    placement: Placement,
    index: int,
    weights: ModelWeights,
    kv: Mapping[str, Mapping[int, int]],
    kinds: Mapping[int, KvKind],
    flags: SplitFlags,
    compute: Mapping[str, int] | None,
    reserve: int,
) -> DeviceShare:
    device = placement.devices[index]
    layers = placement.layers_on(index)
    per_layer = kv[device.backend.name]
    parts = _kv_parts(kinds, per_layer, layers) if flags.kv_offload else ()
    return DeviceShare(
        device.name,
        device.endpoint,
        layers,
        placement.output_on() == index,
        _weights_on(_device_tensors(placement, index, weights), device.backend),
        sum(b for _, b in parts),
        None if compute is None else compute.get(device.name),
        device.free,
        reserve,
        parts,
    )


def _kv_parts(
    kinds: Mapping[int, KvKind], per_layer: Mapping[int, int], layers: Sequence[int]
) -> tuple[tuple[KvKind, int], ...]:
    """A device's cache bytes per cache kind, for the kinds it holds layers of."""
    out = []
    for kind in KV_ORDER:
        held = [il for il in layers if kinds.get(il) == kind]
        if held:
            out.append((kind, sum(per_layer.get(il, 0) for il in held)))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _layer_kinds(model: ModelInfo) -> Mapping[int, KvKind]:
    layout = kv_layout(model)
    kinds: dict[int, KvKind] = {}
    for layer in layout.layers if layout else ():
        kinds.setdefault(layer.index, layer.kind)
    return MappingProxyType(kinds)


def _host_share(
    model: ModelInfo,
    placement: Placement,
    weights: ModelWeights,
    kv: Mapping[str, Mapping[int, int]],
    flags: SplitFlags,
    settings: KvSettings,
    host_compute: int | None,
) -> HostShare:
    layers = tuple(il for il, d in enumerate(placement.layer_device[:-1]) if d is None)
    on_output = placement.output_on() is None
    tensors = list(weights.inputs) + [t for il in layers for t in weights.layers[il]]
    if layers:
        tensors += weights.per_device
    if layers and layers[0] == 0:
        tensors += weights.first_layer
    if on_output:
        tensors += [t for t in weights.output if t not in weights.inputs]
    cpu_kv = kv[CPU.name]
    kv_layers = range(len(weights.layers)) if not flags.kv_offload else layers
    n_outputs = max(1, settings.n_seq)
    logits = (model.n_vocab or 0) * n_outputs * LOGITS_BYTES
    return HostShare(
        layers,
        on_output,
        _weights_on(tensors, CPU),
        sum(cpu_kv.get(il, 0) for il in kv_layers),
        logits,
        host_compute,
        _mapped(tensors),
    )


def _mapped(tensors: Sequence[WeightTensor]) -> int | None:
    """The span of each file from the first to the last byte of ``tensors`` (llama.cpp maps one range)."""
    if not tensors or any(t.offset is None for t in tensors):
        return None
    spans: dict[int, tuple[int, int]] = {}
    for t in tensors:
        start = t.offset or 0
        low, high = spans.get(t.file, (start, start + t.nbytes))
        spans[t.file] = (min(low, start), max(high, start + t.nbytes))
    return sum(high - low for low, high in spans.values())


def _plan_notes(
    model: ModelInfo, weights: ModelWeights, placement: Placement, compute: Mapping[str, int] | None
) -> tuple[str, ...]:
    notes = []
    if weights.tied_output and placement.output_on() is not None:
        notes.append("the output layer reuses token_embd.weight: llama.cpp loads a second copy on its device")
    if compute is None:
        notes.append("compute buffers not counted: pass measured ones (llama-server's log or llama-fit-params)")
    if any(d.backend.name not in (RPC.name, CUDA.name) for d in placement.devices):
        notes.append("buffer alignment of devices other than RPC and CUDA taken as 32 B")
    return tuple(notes)


def _ranges(layers: Sequence[int]) -> str:
    runs: list[str] = []
    start = prev = layers[0]
    for il in [*layers[1:], None]:
        if il is not None and il == prev + 1:
            prev = il
            continue
        runs.append(f"{start}" if start == prev else f"{start}–{prev}")
        if il is not None:
            start = prev = il
    return "layers " + ", ".join(runs)


# --- the largest context, and the split that reaches it ---------------------------------------


@dataclass(frozen=True)
class ContextLimit:
    """The largest context each device allows with a fixed split."""

    per_device: tuple[tuple[str, int | None], ...]  # None: not even the smallest context fits
    max_context: int | None  # the smallest of them; None: the split does not fit at all
    first_full: str | None  # the device that limits it


def context_limit(
    model: ModelInfo,
    weights: ModelWeights,
    devices: Sequence[Device],
    flags: SplitFlags,
    settings: KvSettings,
    cap: int,
    compute: Mapping[str, int] | None = None,
    reserve_bytes: int | Sequence[int] = 0,
) -> ContextLimit:
    """Per device, the largest multiple of 256 up to ``cap`` whose plan fits; which fills first."""

    def left(n_ctx: int) -> dict[str, int]:
        plan = split_plan(model, weights, devices, flags, _at(settings, n_ctx), compute, reserve_bytes)
        return {d.name: d.left_bytes for d in plan.devices}

    def device_fits(name: str) -> Callable[[int], bool]:
        return lambda n_ctx: left(n_ctx)[name] >= 0

    names = list(left(N_CTX_PAD))
    limits = {name: _largest(cap, device_fits(name)) for name in names}
    per_device = tuple((name, limits[name]) for name in names)
    if not names:
        return ContextLimit((), cap, None)
    if any(v is None for v in limits.values()):
        first = next(name for name in names if limits[name] is None)
        return ContextLimit(per_device, None, first)
    first = min(names, key=lambda name: limits[name] or 0)
    return ContextLimit(per_device, limits[first], first)


def _at(settings: KvSettings, n_ctx: int) -> KvSettings:
    return KvSettings(
        n_ctx,
        settings.type_k,
        settings.type_v,
        settings.flash_attn,
        settings.swa_full,
        settings.n_seq,
        settings.kv_unified,
        settings.n_batch,
        settings.n_ubatch,
        settings.n_rs_seq,
    )


def _largest(cap: int, fits: Callable[[int], bool]) -> int | None:
    """The largest multiple of 256 up to ``cap`` that fits (None if 256 does not); fits only shrink."""
    top = max(1, cap // N_CTX_PAD)
    if not fits(N_CTX_PAD):
        return None
    if fits(top * N_CTX_PAD):
        return top * N_CTX_PAD
    lo, hi = 1, top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * N_CTX_PAD):
            lo = mid
        else:
            hi = mid
    return lo * N_CTX_PAD


@dataclass(frozen=True)
class SplitSuggestion:
    """The -ts (layers per device) that reaches the largest context, or why none does."""

    flags: SplitFlags | None  # None: no split puts every layer on the devices
    max_context: int | None
    plan: SplitPlan | None
    text: str
    n_gpu_layers: int  # the layers offloaded, the output layer counted


def suggest_split(
    model: ModelInfo,
    weights: ModelWeights,
    devices: Sequence[Device],
    settings: KvSettings,
    cap: int,
    compute: Mapping[str, int] | None = None,
    reserve_bytes: int | Sequence[int] = 0,
    base: SplitFlags = SplitFlags(),
) -> SplitSuggestion:
    """The contiguous layer split that reaches the largest context up to ``cap``.

    For a context, filling the devices in order with as many layers as each holds is the split
    that fits if any does; the largest context is then found by bisection. Where even 256 tokens
    do not fit with every layer offloaded, the most layers (-ngl) that fit are offloaded instead."""
    n_layer = _check_layers(model, weights)
    chosen = select_devices(devices, SplitFlags(device_names=base.device_names))
    if not chosen:
        return SplitSuggestion(None, None, None, "no device to split over", 0)
    n_all = n_layer + 1

    def counts_at(n_ctx: int, ngl: int) -> tuple[int, ...] | None:
        return _greedy(model, weights, devices, base, _at(settings, n_ctx), compute, reserve_bytes, ngl)

    best_ctx = _largest(cap, lambda n: counts_at(n, n_all) is not None)
    ngl = n_all
    if best_ctx is None:
        ngl = next((k for k in range(n_all - 1, 0, -1) if counts_at(N_CTX_PAD, k) is not None), 0)
        if ngl == 0:
            return SplitSuggestion(None, None, None, _none_fits(chosen), 0)
        best_ctx = _largest(cap, lambda n: counts_at(n, ngl) is not None)
    assert best_ctx is not None
    counts = counts_at(best_ctx, ngl)
    assert counts is not None
    flags = SplitFlags(ngl, tuple(float(c) for c in counts), "layer", 0, base.device_names, base.kv_offload)
    plan = split_plan(model, weights, devices, flags, _at(settings, best_ctx), compute, reserve_bytes)
    text = _suggestion_text(plan, counts, ngl, n_all, best_ctx, cap)
    return SplitSuggestion(flags, best_ctx, plan, text, ngl)


def _greedy(
    model: ModelInfo,
    weights: ModelWeights,
    devices: Sequence[Device],
    base: SplitFlags,
    settings: KvSettings,
    compute: Mapping[str, int] | None,
    reserve: int | Sequence[int],
    ngl: int,
) -> tuple[int, ...] | None:
    """Layers per device when each, in order, takes as many of the last ``ngl`` layers as fit and
    the last device takes the rest; None where that does not fit."""
    n = len(select_devices(devices, SplitFlags(device_names=base.device_names)))

    def fits(counts: list[int], index: int) -> bool:
        trial = counts.copy()
        trial[-1] += ngl - sum(counts)  # a device's layers depend only on the counts before it
        flags = SplitFlags(ngl, tuple(float(c) for c in trial), "layer", 0, base.device_names, base.kv_offload)
        return split_plan(model, weights, devices, flags, settings, compute, reserve).devices[index].fits

    counts = [0] * n
    for index in range(n - 1):
        while sum(counts) < ngl:
            counts[index] += 1
            if not fits(counts, index):
                counts[index] -= 1
                break
    counts[-1] = ngl - sum(counts)
    return tuple(counts) if fits(counts, n - 1) else None


def _none_fits(chosen: Sequence[Device]) -> str:
    names = ", ".join(d.name for d in chosen)
    return f"no split fits: not even the output layer and 256 tokens fit on {names}; run on the CPU (-ngl 0)"


def _suggestion_text(plan: SplitPlan, counts: Sequence[int], ngl: int, n_all: int, n_ctx: int, cap: int) -> str:
    split = ", ".join(f"{d.name} {c}" for d, c in zip(plan.devices, counts))
    reach = f"up to the cap {cap:,}" if n_ctx >= cap // N_CTX_PAD * N_CTX_PAD else f"{n_ctx:,} tokens"
    if ngl < n_all:
        return (
            f"no split holds every layer even at {N_CTX_PAD} tokens; with {ngl - 1} of {n_all - 1} layers "
            f"and the output layer offloaded ({split}) the context reaches {reach}"
        )
    return f"layers per device {split}: the context reaches {reach}"


def server_command(
    model_args: Sequence[str],
    flags: SplitFlags,
    settings: KvSettings,
    rpc: Sequence[str] = (),
) -> str:
    """The llama-server command line for a split."""
    parts = ["llama-server", *model_args]
    if rpc:
        parts += ["--rpc", ",".join(rpc)]
    parts += flags.args()
    parts += ["-c", str(settings.n_ctx), "-ctk", settings.type_k, "-ctv", settings.type_v]
    if settings.flash_attn != "auto":
        parts += ["-fa", settings.flash_attn]
    return " ".join(shlex.quote(p) for p in parts)


def plan_lines(plan: SplitPlan) -> list[str]:
    """A plain-text table of the plan, one line per device and one for the host."""
    lines = [f"{'device':<8} {'layers':<22} {'weights':>10} {'KV':>10} {'compute':>10} {'free':>10} {'left':>10}"]
    for d in plan.devices:
        lines.append(
            f"{d.name:<8} {d.layers_text():<22} {fmt_bytes(d.weights_bytes):>10} {fmt_bytes(d.kv_bytes):>10} "
            f"{fmt_bytes(d.compute_bytes):>10} {fmt_bytes(d.free_bytes):>10} {fmt_bytes(d.left_bytes):>10}"
        )
    h = plan.host
    host_layers = (_ranges(h.layers) if h.layers else "input") + (" + output" if h.holds_output else "")
    lines.append(
        f"{'host':<8} {host_layers:<22} {fmt_bytes(h.weights_bytes):>10} {fmt_bytes(h.kv_bytes):>10} "
        f"{fmt_bytes(h.compute_bytes):>10} {'':>10} {'':>10}"
    )
    return lines


def plan_record(
    plan: SplitPlan, limit: ContextLimit | None = None, suggestion: SplitSuggestion | None = None
) -> dict[str, object]:
    """The plan as JSON-ready data (bytes as integers; None where not known)."""
    record: dict[str, object] = {
        "model": plan.model,
        "n_ctx": plan.n_ctx,
        "flags": plan.flags.args(),
        "fits": plan.fits,
        "devices": [
            {
                "name": d.name,
                "endpoint": d.endpoint or None,
                "layers": list(d.layers),
                "output_layer": d.holds_output,
                "weights_bytes": d.weights_bytes,
                "kv_bytes": d.kv_bytes,
                "kv_parts": dict(d.kv_parts),
                "compute_bytes": d.compute_bytes,
                "free_bytes": d.free_bytes,
                "reserve_bytes": d.reserve_bytes,
                "left_bytes": d.left_bytes,
            }
            for d in plan.devices
        ],
        "host": {
            "layers": list(plan.host.layers),
            "output_layer": plan.host.holds_output,
            "weights_bytes": plan.host.weights_bytes,
            "mapped_bytes": plan.host.mapped_bytes,
            "kv_bytes": plan.host.kv_bytes,
            "logits_bytes": plan.host.logits_bytes,
            "compute_bytes": plan.host.compute_bytes,
        },
        "notes": list(plan.notes),
    }
    if limit is not None:
        record["max_context"] = limit.max_context
        record["first_full"] = limit.first_full
        record["max_context_by_device"] = dict(limit.per_device)
    if suggestion is not None:
        record["suggestion"] = {
            "flags": suggestion.flags.args() if suggestion.flags else None,
            "max_context": suggestion.max_context,
            "text": suggestion.text,
        }
    return record


# --- a running llama-server's split, from its command line ------------------------------------

# option → (names, environment variable); each takes a value unless it is a switch below
SERVER_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "rpc": (("--rpc",), "LLAMA_ARG_RPC"),
    "tensor_split": (("-ts", "--tensor-split"), "LLAMA_ARG_TENSOR_SPLIT"),
    "split_mode": (("-sm", "--split-mode"), "LLAMA_ARG_SPLIT_MODE"),
    "main_gpu": (("-mg", "--main-gpu"), "LLAMA_ARG_MAIN_GPU"),
    "device": (("-dev", "--device"), "LLAMA_ARG_DEVICE"),
    "n_gpu_layers": (("-ngl", "--gpu-layers", "--n-gpu-layers"), "LLAMA_ARG_N_GPU_LAYERS"),
    "ctx_size": (("-c", "--ctx-size"), "LLAMA_ARG_CTX_SIZE"),
    "cache_type_k": (("-ctk", "--cache-type-k"), "LLAMA_ARG_CACHE_TYPE_K"),
    "cache_type_v": (("-ctv", "--cache-type-v"), "LLAMA_ARG_CACHE_TYPE_V"),
    "flash_attn": (("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN"),
    "parallel": (("-np", "--parallel"), "LLAMA_ARG_N_PARALLEL"),
    "fit": (("-fit", "--fit"), "LLAMA_ARG_FIT"),
}
SWITCHES: dict[str, tuple[str, bool]] = {  # name → (option, value)
    "-nkvo": ("kv_offload", False),
    "--no-kv-offload": ("kv_offload", False),
    "-kvo": ("kv_offload", True),
    "--kv-offload": ("kv_offload", True),
    "-kvu": ("kv_unified", True),
    "--kv-unified": ("kv_unified", True),
    "-no-kvu": ("kv_unified", False),
    "--no-kv-unified": ("kv_unified", False),
}
SWITCH_ENV = {"kv_offload": "LLAMA_ARG_KV_OFFLOAD", "kv_unified": "LLAMA_ARG_KV_UNIFIED"}
TRUE_WORDS, FALSE_WORDS = ("on", "enabled", "true", "1"), ("off", "disabled", "false", "0")


@dataclass(frozen=True)
class ServerSplit:
    """What a llama-server command line says about its devices and cache, each value with where it
    came from (``flag``, ``env`` for a LLAMA_ARG_* variable, or ``default``)."""

    flags: SplitFlags
    rpc: tuple[str, ...]
    n_ctx: int | None
    type_k: str
    type_v: str
    flash_attn: str
    n_parallel: int | None
    kv_unified: bool | None
    fit: bool  # llama-server's own fitting: it may change what was left at its default
    sources: tuple[tuple[str, Source], ...]

    def source(self, option: str) -> Source:
        return dict(self.sources).get(option, "default")


def server_split(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServerSplit:
    """The split flags of a llama-server command line (a flag wins over its LLAMA_ARG_* variable)."""
    values, sources = _read_argv(argv)
    for option, (_, var) in SERVER_OPTIONS.items():
        if option not in values and env and var in env:
            values[option], sources[option] = env[var], "env"
    for option, var in SWITCH_ENV.items():
        if option not in values and env and var in env:
            values[option], sources[option] = env[var], "env"
    flags = SplitFlags(
        parse_gpu_layers(values["n_gpu_layers"]) if "n_gpu_layers" in values else -1,
        parse_tensor_split(values["tensor_split"]) if "tensor_split" in values else (),
        parse_split_mode(values["split_mode"]) if "split_mode" in values else "layer",
        _int(values, "main_gpu", "-mg") or 0,
        _device_list(values["device"]) if "device" in values else None,
        _bool(values.get("kv_offload", "on"), "--kv-offload"),
    )
    return ServerSplit(
        flags,
        tuple(ep.strip() for ep in values.get("rpc", "").split(",") if ep.strip()),
        _int(values, "ctx_size", "-c"),
        values.get("cache_type_k", "f16"),
        values.get("cache_type_v", "f16"),
        values.get("flash_attn", "auto"),
        _int(values, "parallel", "-np"),
        _bool(values["kv_unified"], "--kv-unified") if "kv_unified" in values else None,
        _bool(values.get("fit", "on"), "--fit"),
        tuple(sorted(sources.items())),
    )


def _read_argv(argv: Sequence[str]) -> tuple[dict[str, str], dict[str, Source]]:
    by_name = {name: option for option, (names, _) in SERVER_OPTIONS.items() for name in names}
    values: dict[str, str] = {}
    sources: dict[str, Source] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        if name in SWITCHES:
            option, value = SWITCHES[name]
            values[option], sources[option] = "on" if value else "off", "flag"
        elif name in by_name:
            if not eq:
                if i + 1 >= len(args):
                    raise BadInput(f"{name} at the end of the command line has no value")
                i += 1
                inline = args[i]
            values[by_name[name]], sources[by_name[name]] = inline, "flag"
        i += 1
    return values, sources


def _int(values: Mapping[str, str], option: str, flag: str) -> int | None:
    if option not in values:
        return None
    try:
        return int(values[option])
    except ValueError:
        raise BadInput(f"{flag} {values[option]!r} is not a whole number") from None


def _bool(text: str, flag: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise BadInput(f"{flag} {text!r}: use on or off")


def _device_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    return () if names == ("none",) else names
