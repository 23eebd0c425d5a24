"""A thin stand-in for the ``pynvml`` module (nvidia-ml-py) on a machine with no NVIDIA driver.

It replays the shapes that NVML documents and the installed binding returns, and nothing more:

* the return values are the binding's own ctypes structures (``c_nvmlMemory_t``,
  ``c_nvmlMemory_v2_t``, ``c_nvmlUtilization_t``) and ``nvmlFriendlyObject`` process entries, so an
  attribute the real call does not have (``.reserved`` on a v1 reading) fails here too;
* errors are the binding's own classes: ``pynvml.NVMLError(code)`` builds the subclass
  (``NVMLError_NotSupported``, ``NVMLError_FunctionNotFound``, ``NVMLError_GpuIsLost`` …), and the
  constants (``NVML_ERROR_*``, ``NVML_CLOCK_*``, ``nvmlMemory_v2`` …) are copied from it;
* a call is keyed by the *driver symbol* it resolves, as the binding does: ``nvmlDeviceGetMemoryInfo(h,
  version=nvmlMemory_v2)`` looks up ``nvmlDeviceGetMemoryInfo_v2``, and the binding's plain
  ``nvmlDeviceGetComputeRunningProcesses`` is ``…_v3`` (nvidia-ml-py ≥ 11.515). A symbol that the
  driver lacks raises ``NVML_ERROR_FUNCTION_NOT_FOUND``, just as ``_nvmlGetFunctionPointer`` does;
* calls before ``nvmlInit`` raise ``NVML_ERROR_UNINITIALIZED``, as the real binding does.

It contains no probe logic: no fallbacks, no caching, no unit conversion. Every call is counted
(``fake.calls[symbol]``, ``fake.gpu_calls[(index, symbol)]``) so a test can prove that a probe does
not ask an unsupported function again on every tick.

Example::

    fake = FakeNvml([FakeGpu(errors={"nvmlDeviceGetPcieThroughput": NVML_ERROR_NOT_SUPPORTED})])
    probe = NvidiaProbe(nvml=fake.module)
"""

from __future__ import annotations

import types
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

MiB = 1024 * 1024
GiB = 1024 * MiB

# Names copied from the real binding: constants and the real exception classes.
_COPIED_PREFIXES = ("NVML_", "NVMLError", "nvmlMemory_v", "nvmlClocksEventReason", "nvmlClocksThrottleReason")


@dataclass
class FakeProcess:
    """One entry of ``nvmlDeviceGetComputeRunningProcesses*``. ``used_bytes=None`` is what the
    binding returns where NVML says NVML_VALUE_NOT_AVAILABLE (WDDM on Windows, some containers)."""

    pid: int
    used_bytes: int | None


@dataclass
class FakeGpu:
    """What one GPU reports. Memory follows NVML's documented v2 meaning: ``used`` is allocated
    framebuffer, ``reserved`` is what the driver/firmware keep, ``free = total - reserved - used``;
    the v1 struct has no ``reserved`` and reports ``used = total - free`` (reserved included)."""

    name: str | bytes = "NVIDIA GeForce RTX 4070"
    uuid: str | bytes = "GPU-6f1c2a8e-3b9d-4c1e-9a57-0d2e8b4f7c31"
    total: int = 12 * GiB
    used: int = 3 * GiB
    reserved: int = 300 * MiB
    util_gpu: int = 87
    util_memory: int = 41
    temperature_c: int = 64
    clocks_mhz: Mapping[int, int] = field(
        default_factory=lambda: {
            pynvml.NVML_CLOCK_GRAPHICS: 2475,
            pynvml.NVML_CLOCK_SM: 2475,
            pynvml.NVML_CLOCK_MEM: 10501,
            pynvml.NVML_CLOCK_VIDEO: 1950,
        }
    )
    clock_events: int = 0  # nvmlClocksEventReason* bitmask
    pcie_rx_kb_s: int = 1200  # NVML: KB/s over a 20 ms window
    pcie_tx_kb_s: int = 300
    processes: Sequence[FakeProcess] = ()
    # driver symbol → NVML_ERROR_* code raised by every call of it on this GPU
    errors: Mapping[str, int] = field(default_factory=dict)
    # None: never lost; N: N more calls on this GPU succeed, then NVML_ERROR_GPU_IS_LOST for good
    lost_after: int | None = None


class FakeNvml:
    """Builds a ``pynvml``-shaped module over ``gpus``.

    ``init_error``: an NVML_ERROR_* code that ``nvmlInit`` raises (DRIVER_NOT_LOADED,
    LIBRARY_NOT_FOUND, NO_PERMISSION …). ``errors``: driver symbol → code for every GPU (merged
    under each GPU's own). ``absent``: names deleted from the module, as in an older nvidia-ml-py
    that does not have them (e.g. ``nvmlMemory_v2``, ``nvmlDeviceGetCurrentClocksEventReasons``).
    """

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        init_error: int | None = None,
        errors: Mapping[str, int] | None = None,
        absent: Iterable[str] = (),
    ) -> None:
        self.gpus = list(gpus)
        self.init_error = init_error
        self.errors = dict(errors or {})
        self.calls: Counter[str] = Counter()
        self.gpu_calls: Counter[tuple[int, str]] = Counter()
        self.initialised = 0  # nvmlInit refcount, as the binding keeps it
        self.module = self._build_module(set(absent))

    # --- test helpers -----------------------------------------------------------------------

    def lose(self, index: int, after: int = 0) -> None:
        """GPU ``index`` falls off the bus after ``after`` more calls on it."""
        self.gpus[index].lost_after = after

    def device_calls(self, index: int) -> int:
        return sum(n for (i, _), n in self.gpu_calls.items() if i == index)

    # --- the module ---------------------------------------------------------------------------

    def _build_module(self, absent: set[str]) -> types.ModuleType:
        mod = types.ModuleType("pynvml", "fake pynvml (tests/support/fakes/nvml.py)")
        for name in dir(pynvml):
            if name.startswith(_COPIED_PREFIXES):
                setattr(mod, name, getattr(pynvml, name))
        functions = {
            "nvmlInit": self._init,
            "nvmlShutdown": self._shutdown,
            "nvmlDeviceGetCount": self._count,
            "nvmlDeviceGetHandleByIndex": self._handle_by_index,
            "nvmlDeviceGetName": lambda h: self._device(h, "nvmlDeviceGetName", lambda g: g.name),
            "nvmlDeviceGetUUID": lambda h: self._device(h, "nvmlDeviceGetUUID", lambda g: g.uuid),
            "nvmlDeviceGetMemoryInfo": self._memory_info,
            "nvmlDeviceGetUtilizationRates": lambda h: self._device(h, "nvmlDeviceGetUtilizationRates", _utilization),
            "nvmlDeviceGetTemperature": lambda h, sensor: self._device(
                h, "nvmlDeviceGetTemperature", lambda g: _temperature(g, sensor)
            ),
            "nvmlDeviceGetClockInfo": lambda h, clock: self._device(
                h, "nvmlDeviceGetClockInfo", lambda g: _clock(g, clock)
            ),
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: self._device(
                h, "nvmlDeviceGetCurrentClocksEventReasons", lambda g: g.clock_events
            ),
            "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: self._device(
                h, "nvmlDeviceGetCurrentClocksThrottleReasons", lambda g: g.clock_events
            ),
            "nvmlDeviceGetPcieThroughput": lambda h, counter: self._device(
                h, "nvmlDeviceGetPcieThroughput", lambda g: _pcie(g, counter)
            ),
            "nvmlDeviceGetComputeRunningProcesses_v3": lambda h: self._device(
                h, "nvmlDeviceGetComputeRunningProcesses_v3", _processes
            ),
            "nvmlDeviceGetComputeRunningProcesses_v2": lambda h: self._device(
                h, "nvmlDeviceGetComputeRunningProcesses_v2", _processes
            ),
            # nvidia-ml-py ≥ 11.515: the plain name calls the _v3 symbol (see pynvml.py).
            "nvmlDeviceGetComputeRunningProcesses": lambda h: self._device(
                h, "nvmlDeviceGetComputeRunningProcesses_v3", _processes
            ),
        }
        for name, fn in functions.items():
            setattr(mod, name, fn)
        for name in absent:
            if hasattr(mod, name):
                delattr(mod, name)
        return mod

    def _raise(self, code: int) -> None:
        raise pynvml.NVMLError(code)

    def _init(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            self._raise(self.init_error)
        self.initialised += 1

    def _shutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        if not self.initialised:
            self._raise(pynvml.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def _library(self, symbol: str) -> None:
        self.calls[symbol] += 1
        if not self.initialised:
            self._raise(pynvml.NVML_ERROR_UNINITIALIZED)
        if symbol in self.errors:
            self._raise(self.errors[symbol])

    def _count(self) -> int:
        self._library("nvmlDeviceGetCount")
        return len(self.gpus)

    def _handle_by_index(self, index: int) -> _Handle:
        self._library("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def _memory_info(self, handle: _Handle, version: int | None = None) -> Any:
        if not version:
            return self._device(handle, "nvmlDeviceGetMemoryInfo", _memory_v1)
        return self._device(handle, "nvmlDeviceGetMemoryInfo_v2", lambda g: _memory_v2(g, version))

    def _device(self, handle: _Handle, symbol: str, value: Any) -> Any:
        """One device call: counted, then lost / injected error / the documented value."""
        if not isinstance(handle, _Handle):
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.calls[symbol] += 1
        self.gpu_calls[(handle.index, symbol)] += 1
        if not self.initialised:
            self._raise(pynvml.NVML_ERROR_UNINITIALIZED)
        gpu = self.gpus[handle.index]
        if gpu.lost_after is not None:
            if gpu.lost_after <= 0:
                self._raise(pynvml.NVML_ERROR_GPU_IS_LOST)
            gpu.lost_after -= 1
        code = {**self.errors, **gpu.errors}.get(symbol)
        if code is not None:
            self._raise(code)
        return value(gpu)


@dataclass(frozen=True)
class _Handle:
    """Stands for ``c_nvmlDevice_t``: opaque to the caller."""

    index: int


def _memory_v1(g: FakeGpu) -> Any:
    m = pynvml.c_nvmlMemory_t()
    m.total = g.total
    m.free = g.total - g.reserved - g.used
    m.used = g.total - m.free  # v1 counts the reserved memory as used
    return m


def _memory_v2(g: FakeGpu, version: int) -> Any:
    if version != pynvml.nvmlMemory_v2:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    m = pynvml.c_nvmlMemory_v2_t()
    m.version = version
    m.total = g.total
    m.reserved = g.reserved
    m.used = g.used
    m.free = g.total - g.reserved - g.used
    return m


def _utilization(g: FakeGpu) -> Any:
    u = pynvml.c_nvmlUtilization_t()
    u.gpu = g.util_gpu
    u.memory = g.util_memory
    return u


def _temperature(g: FakeGpu, sensor: int) -> int:
    if sensor != pynvml.NVML_TEMPERATURE_GPU:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return g.temperature_c


def _clock(g: FakeGpu, clock: int) -> int:
    if clock not in g.clocks_mhz:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return g.clocks_mhz[clock]


def _pcie(g: FakeGpu, counter: int) -> int:
    if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
        return g.pcie_rx_kb_s
    if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
        return g.pcie_tx_kb_s
    raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)


def _processes(g: FakeGpu) -> list[Any]:
    # The binding returns nvmlFriendlyObject entries; NVML_VALUE_NOT_AVAILABLE becomes None.
    return [
        pynvml.nvmlFriendlyObject(
            {"pid": p.pid, "usedGpuMemory": p.used_bytes, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF}
        )
        for p in g.processes
    ]
