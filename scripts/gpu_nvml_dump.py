"""Raw NVML readings as the installed nvidia-ml-py returns them, for tests/support/fakes/nvml.py to replay.

Records exactly the calls the fake stands in for (and the probe makes), each as its value (a
ctypes structure as its fields plus its type name, a process list as its entries) or as the
NVMLError it raised (code, NVML_ERROR_* name, exception class), with how long it took (the PCIe
counter samples a 20 ms window). A driver with no GPU or no NVML is a reading too: the init error.

Usage: python scripts/gpu_nvml_dump.py OUT.json --phase NAME [--count N] [--every S]
Readings are appended to OUT.json when it exists (one file for the idle and the busy phase).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

SCHEMA = 1
# The binding's plain name calls the _v3 symbol (nvidia-ml-py ≥ 11.515); there is no v1 wrapper.
PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
CLOCKS = ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_CLOCK_VIDEO")
PCIE = ("NVML_PCIE_UTIL_RX_BYTES", "NVML_PCIE_UTIL_TX_BYTES")
OPTIONAL_NAMES = (
    "nvmlMemory_v2",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    *PROCESS_CALLS,
)
_ERROR_NAMES = {getattr(pynvml, n): n for n in dir(pynvml) if n.startswith("NVML_ERROR_")}


def plain(value: Any) -> Any:
    """A JSON shape of what the binding returned, keeping the ctypes type name."""
    if isinstance(value, ctypes.Structure):
        return {"_type": type(value).__name__, **{name: plain(getattr(value, name)) for name, *_ in value._fields_}}
    if isinstance(value, pynvml.nvmlFriendlyObject):
        return {"_type": "nvmlFriendlyObject", **{k: plain(v) for k, v in vars(value).items()}}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return {"_type": "bytes", "text": value.decode(errors="replace")}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return {"_type": type(value).__name__, "repr": repr(value)}


def outcome(call: Callable[[], Any]) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        value = call()
    except pynvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        return {
            "error": code,
            "error_name": _ERROR_NAMES.get(code),
            "error_class": type(exc).__name__,
            "message": str(exc),
            "ms": _ms(start),
        }
    return {"value": plain(value), "ms": _ms(start)}


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def process_names(entries: list[dict[str, Any]]) -> dict[str, str]:
    """pid → process name, to tell cliff-tui's own processes from others in the list."""
    try:
        import psutil
    except ImportError:
        return {}
    names = {}
    for entry in entries:
        try:
            names[str(entry["pid"])] = psutil.Process(entry["pid"]).name()
        except (psutil.Error, KeyError, TypeError):
            pass
    return names


class _ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: the struct of the driver's unsuffixed symbol (the binding has none)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def processes_v1(handle: Any) -> list[dict[str, Any]]:
    """The driver's v1 ``nvmlDeviceGetComputeRunningProcesses`` called directly: does this driver
    still export it, and what does it return? (The binding's plain name calls _v3.)"""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == pynvml.NVML_SUCCESS:
        return []
    if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise pynvml.NVMLError(ret)
    count.value = count.value * 2 + 5
    entries = (_ProcessInfoV1 * count.value)()
    ret = fn(handle, ctypes.byref(count), entries)
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return [{"pid": e.pid, "usedGpuMemory": e.usedGpuMemory} for e in entries[: count.value]]


def read_gpu(index: int) -> dict[str, Any]:
    got = outcome(lambda: pynvml.nvmlDeviceGetHandleByIndex(index))
    reading: dict[str, Any] = {
        "index": index,
        "nvmlDeviceGetHandleByIndex": {k: v for k, v in got.items() if k != "value"},
    }
    if "error" in got:
        return reading
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    calls: dict[str, Any] = {
        "nvmlDeviceGetName": outcome(lambda: pynvml.nvmlDeviceGetName(h)),
        "nvmlDeviceGetUUID": outcome(lambda: pynvml.nvmlDeviceGetUUID(h)),
        "nvmlDeviceGetMemoryInfo": outcome(lambda: pynvml.nvmlDeviceGetMemoryInfo(h)),
        "nvmlDeviceGetUtilizationRates": outcome(lambda: pynvml.nvmlDeviceGetUtilizationRates(h)),
        "nvmlDeviceGetTemperature": {
            "NVML_TEMPERATURE_GPU": outcome(lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
        },
        "nvmlDeviceGetClockInfo": {
            c: outcome(lambda c=c: pynvml.nvmlDeviceGetClockInfo(h, getattr(pynvml, c))) for c in CLOCKS
        },
        "nvmlDeviceGetPcieThroughput": {
            c: outcome(lambda c=c: pynvml.nvmlDeviceGetPcieThroughput(h, getattr(pynvml, c))) for c in PCIE
        },
    }
    if hasattr(pynvml, "nvmlMemory_v2"):
        calls["nvmlDeviceGetMemoryInfo_v2"] = outcome(
            lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        )
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        if hasattr(pynvml, name):
            calls[name] = outcome(lambda name=name: getattr(pynvml, name)(h))
    for name in PROCESS_CALLS:
        if hasattr(pynvml, name):
            calls[name] = outcome(lambda name=name: getattr(pynvml, name)(h))
            if "value" in calls[name]:
                calls[name]["process_names"] = process_names(calls[name]["value"])
    try:
        calls["driver:nvmlDeviceGetComputeRunningProcesses(v1)"] = outcome(lambda: processes_v1(h))
    except Exception as exc:
        calls["driver:nvmlDeviceGetComputeRunningProcesses(v1)"] = {"exception": repr(exc)}
    reading["calls"] = calls
    return reading


def read_system() -> dict[str, Any]:
    return {
        name: outcome(getattr(pynvml, name))
        for name in ("nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion", "nvmlSystemGetCudaDriverVersion")
        if hasattr(pynvml, name)
    }


def reading(phase: str) -> dict[str, Any]:
    count = outcome(pynvml.nvmlDeviceGetCount)
    gpus = [read_gpu(i) for i in range(count["value"])] if "value" in count else []
    return {"t": time.time(), "phase": phase, "nvmlDeviceGetCount": count, "gpus": gpus}


def dump(out: Path, phase: str, count: int, every: float) -> dict[str, Any]:
    doc: dict[str, Any] = (
        json.loads(out.read_text())
        if out.exists() and out.stat().st_size
        else {
            "schema": SCHEMA,
            "nvidia_ml_py": _binding_version(),
            "absent_in_binding": [n for n in OPTIONAL_NAMES if not hasattr(pynvml, n)],
            "sessions": [],
        }
    )
    session: dict[str, Any] = {
        "phase": phase,
        "t": time.time(),
        "pid": os.getpid(),
        "nvmlInit": outcome(pynvml.nvmlInit),
        "readings": [],
    }
    doc["sessions"].append(session)
    if "error" not in session["nvmlInit"]:
        try:
            session["system"] = read_system()
            for i in range(count):
                if i:
                    time.sleep(every)
                session["readings"].append(reading(phase))
                _write(out, doc)
        finally:
            session["nvmlShutdown"] = outcome(pynvml.nvmlShutdown)
    _write(out, doc)
    return doc


def _write(out: Path, doc: dict[str, Any]) -> None:
    out.write_text(json.dumps(doc, indent=1))


def _binding_version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--phase", default="idle")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--every", type=float, default=2.0)
    args = p.parse_args()
    doc = dump(args.out, args.phase, args.count, args.every)
    last = doc["sessions"][-1]
    gpus = [g for r in last["readings"] for g in r["gpus"]]
    print(
        f"{args.phase}: nvmlInit {'ok' if 'error' not in last['nvmlInit'] else last['nvmlInit']['error_name']}, "
        f"{len(last['readings'])} readings, {len(gpus)} GPU readings"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
