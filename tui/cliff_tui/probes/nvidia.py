"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

Initialised lazily on the first read. Every call is guarded: a field the GPU or driver does not
support (NotSupported, FunctionNotFound) becomes ``None`` with a reason and is not asked again;
no driver gives one reason for the whole probe, said once; a GPU that fell off the bus is
reported as lost. ``nvmlDeviceGetPcieThroughput`` samples a 20 ms window per call, so this probe
belongs on the sampler thread, never the UI thread.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from cliff_tui.records import GpuProcess, GpuReading
from cliff_tui.text import inert
from cliff_tui.units import KiB

# nvmlClocksEventReason* bits → the words a user acts on.
_CLOCK_EVENT_BITS = {
    0x0000000000000001: "idle",
    0x0000000000000002: "app clocks",
    0x0000000000000004: "power cap",
    0x0000000000000008: "hw slowdown",
    0x0000000000000010: "sync boost",
    0x0000000000000020: "thermal (sw)",
    0x0000000000000040: "thermal (hw)",
    0x0000000000000080: "power brake",
    0x0000000000000100: "display clocks",
}
CLOCK_EVENT_REASONS = tuple(_CLOCK_EVENT_BITS.values())
# The name since driver R535 first, then the one before it.
_CLOCK_EVENT_FUNCTIONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


NVML_LIBRARY = "libnvidia-ml.so.1"  # the soname nvidia-ml-py loads on Linux
NO_DRIVER = "no NVIDIA driver (libnvidia-ml not found)"


def _import_pynvml() -> ModuleType:
    import pynvml

    return pynvml


def _driver_absent() -> bool:
    """On Linux, whether the library nvidia-ml-py would load is missing: a box without the
    driver is then told so without loading the binding (1.2 MiB held for the whole session)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return True
    return False


class NvidiaProbe:
    def __init__(self, nvml: ModuleType | None = None, *, pcie: bool = True) -> None:
        self._nvml: Any = nvml  # pynvml has no type stubs: its module is Any
        self._pcie = pcie
        self._started = False
        self.reason: str | None = None
        self._handles: list[Any] = []
        self._names: list[str] = []
        self._uuids: list[str | None] = []
        self._unsupported: dict[tuple[int, str], str] = {}
        self._lost: dict[int, str] = {}
        self._process_fn: Callable | None = None
        self._clock_fn: Callable | None = None
        self._initialised = False

    # --- lifecycle ------------------------------------------------------------------------

    def _start(self) -> None:
        self._started = True
        if self._nvml is None and _driver_absent():
            self.reason = NO_DRIVER
            return
        try:
            nvml = self._nvml = self._nvml or _import_pynvml()
        except ImportError:
            self.reason = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self.reason = _init_reason(nvml, exc)
            return
        self._initialised = True
        try:
            for i in range(nvml.nvmlDeviceGetCount()):
                self._open_gpu(i)
        except nvml.NVMLError as exc:
            self.reason = _init_reason(nvml, exc)
            self._handles, self._names, self._uuids = [], [], []
            return
        if not self._handles:
            self.reason = "the NVIDIA driver is loaded but reports no GPU"

    def _open_gpu(self, i: int) -> None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            handle, name = None, f"GPU {i}"  # one GPU off the bus must not hide the others
            self._lost[i] = LOST_REASON
        self._handles.append(handle)
        self._names.append(name)
        self._uuids.append(None if handle is None else self._uuid(handle))

    def _uuid(self, handle: Any) -> str | None:
        """Read once: it never changes. A GPU that cannot say has none (the read that follows
        finds out whether it is lost)."""
        nvml = self._nvml
        try:
            return _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError:
            return None

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    # --- reading --------------------------------------------------------------------------

    def may_have_gpus(self) -> bool:
        """Without starting NVML, which can take seconds where the driver does not persist: False
        where its library is absent or, once started, it found no GPU."""
        if not self._started and self._nvml is not None:
            self._start()  # a module given: nothing to load
        if self._started:
            return not self.reason and bool(self._handles)
        return not _driver_absent()

    def read(self) -> tuple[list[GpuReading], str | None]:
        if not self._started:
            self._start()
        if self.reason:
            return [], self.reason
        return [self._read_gpu(i) for i in range(len(self._handles))], None

    def _read_gpu(self, index: int) -> GpuReading:
        if index in self._lost:
            return _lost_reading(index, self._names[index], self._lost[index], self._uuids[index])
        nvml = self._nvml
        handle = self._handles[index]
        reasons: dict[str, str] = {}
        try:
            used, total, reserved = self._memory(index, handle, reasons)
            util = self._field(index, "util_pct", reasons, lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            temp = self._field(
                index,
                "temperature_c",
                reasons,
                lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            )
            sm = self._field(
                index, "sm_clock_mhz", reasons, lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            )
            mem = self._field(
                index, "mem_clock_mhz", reasons, lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
            )
            throttle = self._field(index, "throttle_reasons", reasons, lambda: self._clock_events(handle))
            rx, tx = self._pcie_throughput(index, handle, reasons)
            processes = self._field(index, "processes", reasons, lambda: self._processes(handle))
        except _GpuLost as lost:
            self._lost[index] = lost.reason
            return _lost_reading(index, self._names[index], lost.reason, self._uuids[index])
        return GpuReading(
            index=index,
            name=self._names[index],
            vendor="nvidia",
            vram_used_bytes=used,
            vram_total_bytes=total,
            vram_reserved_bytes=reserved,
            util_pct=None if util is None else float(util),
            temperature_c=None if temp is None else float(temp),
            sm_clock_mhz=sm,
            mem_clock_mhz=mem,
            throttle_reasons=throttle,
            pcie_rx_bytes_s=rx,
            pcie_tx_bytes_s=tx,
            processes=processes,
            reasons=reasons,
            uuid=self._uuids[index],
        )

    def _memory(self, index: int, handle: Any, reasons: dict[str, str]) -> tuple:
        nvml = self._nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None and (index, "memory_v2") not in self._unsupported:
            v2: dict[str, str] = {}
            info = self._field(index, "memory_v2", v2, lambda: nvml.nvmlDeviceGetMemoryInfo(handle, version=version))
            if info is not None:
                return int(info.used), int(info.total), int(info.reserved)
            if (index, "memory_v2") not in self._unsupported:
                # A passing error: n/a this tick. v1's "used" includes the reserved memory, so
                # falling back would show a jump of `reserved` bytes that nothing allocated.
                for name in ("vram_used_bytes", "vram_total_bytes", "vram_reserved_bytes"):
                    reasons[name] = v2["memory_v2"]
                return None, None, None
        info = self._field(index, "vram_used_bytes", reasons, lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        reasons.setdefault("vram_reserved_bytes", "nvmlDeviceGetMemoryInfo_v2 not available in this driver")
        if info is None:
            reasons["vram_total_bytes"] = reasons["vram_used_bytes"]
            return None, None, None
        return int(info.used), int(info.total), None

    def _clock_events(self, handle: Any) -> tuple[str, ...]:
        """The clock event reasons through whichever function this binding and driver have,
        remembering the one that answered (R535 renamed the throttle reasons to event reasons;
        the newest nvidia-ml-py may drop the old name, an old one lacks the new)."""
        nvml = self._nvml
        if self._clock_fn is not None:
            return _clock_words(self._clock_fn(handle))
        functions = [fn for name in _CLOCK_EVENT_FUNCTIONS if (fn := getattr(nvml, name, None)) is not None]
        if not functions:
            raise _NotInBinding(f"not in this nvidia-ml-py (it has neither {' nor '.join(_CLOCK_EVENT_FUNCTIONS)})")
        for fn in functions[:-1]:
            try:
                mask = fn(handle)
            except nvml.NVMLError_FunctionNotFound:
                continue
            self._clock_fn = fn
            return _clock_words(mask)
        mask = functions[-1](handle)
        self._clock_fn = functions[-1]
        return _clock_words(mask)

    def _pcie_throughput(self, index: int, handle: Any, reasons: dict[str, str]) -> tuple:
        if not self._pcie:
            reasons["pcie_rx_bytes_s"] = reasons["pcie_tx_bytes_s"] = "PCIe sampling is off"
            return None, None
        nvml = self._nvml
        # NVML reports KB/s over a 20 ms window (KiB, as nvidia-smi and nvitop read it).
        rx = self._field(
            index,
            "pcie_rx_bytes_s",
            reasons,
            lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES),
        )
        tx = self._field(
            index,
            "pcie_tx_bytes_s",
            reasons,
            lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES),
        )
        return (None if rx is None else float(rx * KiB)), (None if tx is None else float(tx * KiB))

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        """Per-process used memory; v3 → v2 → v1, remembering which one this driver has.
        (In nvidia-ml-py ≥ 11.515 the unversioned name is v3 again; older bindings give v1.)"""
        nvml = self._nvml
        if self._process_fn is not None:
            return _to_processes(self._process_fn(handle))
        names = (
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetComputeRunningProcesses",
        )
        last: Exception | None = None
        for name in names:
            fn = getattr(nvml, name, None)
            if fn is None:
                continue
            try:
                procs = fn(handle)
            except nvml.NVMLError_FunctionNotFound as exc:
                last = exc
                continue
            self._process_fn = fn
            return _to_processes(procs)
        raise last or nvml.NVMLError_FunctionNotFound(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _field(self, index: int, name: str, reasons: dict[str, str], call: Callable[[], Any]) -> Any:
        """One guarded NVML call: NotSupported/FunctionNotFound are remembered, not retried."""
        key = (index, name)
        if key in self._unsupported:
            reasons[name] = self._unsupported[key]
            return None
        nvml = self._nvml
        try:
            return call()
        except _NotInBinding as missing:
            self._unsupported[key] = reasons[name] = missing.reason
            return None
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == nvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost(LOST_REASON) from exc
            if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                why = (
                    "not supported by this GPU"
                    if code == nvml.NVML_ERROR_NOT_SUPPORTED
                    else "not in this NVIDIA driver"
                )
                self._unsupported[key] = why
                reasons[name] = why
                return None
            reasons[name] = f"NVML error: {exc}"
            return None


LOST_REASON = "GPU is lost (fell off the bus): see dmesg; a reboot may be needed"


def _clock_words(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in _CLOCK_EVENT_BITS.items() if mask & bit)


class _NotInBinding(Exception):
    """The installed nvidia-ml-py has no function for a field: n/a for good, like NotSupported."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _GpuLost(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _init_reason(nvml: ModuleType, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    if code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return NO_DRIVER
    if code == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "the NVIDIA driver is not loaded (is the kernel module in? try nvidia-smi)"
    if code == nvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to talk to the NVIDIA driver"
    return f"NVML did not start: {exc}"


def _lost_reading(index: int, name: str, reason: str, uuid: str | None = None) -> GpuReading:
    fields = ("vram_used_bytes", "vram_total_bytes", "shared_used_bytes", "util_pct", "temperature_c")
    return GpuReading(
        index=index,
        name=name,
        vendor="nvidia",
        vram_used_bytes=None,
        vram_total_bytes=None,
        reasons=dict.fromkeys(fields, reason),
        uuid=uuid,
    )


def _to_processes(procs: Any) -> tuple[GpuProcess, ...]:
    out = []
    for p in procs or ():
        used = getattr(p, "usedGpuMemory", None)
        out.append(GpuProcess(pid=int(p.pid), used_bytes=None if used is None else int(used)))
    return tuple(out)


def _text(value: Any) -> str:
    return inert(value.decode(errors="replace") if isinstance(value, bytes) else str(value))
