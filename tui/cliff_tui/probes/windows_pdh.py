"""Windows performance counters (PDH) through ctypes, for the WDDM shared-memory counters.

Only imported on Windows. ``PdhCounters.read(path)`` returns ``[(instance, value), …]`` for a
wildcard counter path such as ``\\GPU Adapter Memory(*)\\Shared Usage``.
"""

from __future__ import annotations

import ctypes
from ctypes import wintypes

PDH_FMT_DOUBLE = 0x00000200
PDH_MORE_DATA = 0x800007D2
ERROR_SUCCESS = 0


class _CounterValue(ctypes.Structure):
    _fields_ = [("CStatus", wintypes.DWORD), ("doubleValue", ctypes.c_double)]


class _CounterValueItem(ctypes.Structure):
    _fields_ = [("szName", ctypes.c_wchar_p), ("FmtValue", _CounterValue)]


class PdhCounters:  # pragma: no cover - needs Windows
    def __init__(self) -> None:
        try:
            self._pdh = ctypes.WinDLL("pdh.dll")  # type: ignore[attr-defined]
        except (OSError, AttributeError) as exc:
            raise OSError(f"pdh.dll not loadable: {exc}") from exc
        self._query = wintypes.HANDLE()
        self._check(self._pdh.PdhOpenQueryW(None, None, ctypes.byref(self._query)), "PdhOpenQuery")
        self._counters: dict[str, wintypes.HANDLE] = {}

    def read(self, path: str) -> list[tuple[str, float]]:
        counter = self._counters.get(path)
        if counter is None:
            counter = wintypes.HANDLE()
            self._check(
                self._pdh.PdhAddEnglishCounterW(self._query, path, None, ctypes.byref(counter)), "PdhAddEnglishCounter"
            )
            self._counters[path] = counter
        self._check(self._pdh.PdhCollectQueryData(self._query), "PdhCollectQueryData")
        size, count = wintypes.DWORD(0), wintypes.DWORD(0)
        status = self._pdh.PdhGetFormattedCounterArrayW(
            counter, PDH_FMT_DOUBLE, ctypes.byref(size), ctypes.byref(count), None
        )
        if status & 0xFFFFFFFF != PDH_MORE_DATA:
            return []
        buffer = (ctypes.c_byte * size.value)()
        self._check(
            self._pdh.PdhGetFormattedCounterArrayW(
                counter, PDH_FMT_DOUBLE, ctypes.byref(size), ctypes.byref(count), buffer
            ),
            "PdhGetFormattedCounterArray",
        )
        items = ctypes.cast(buffer, ctypes.POINTER(_CounterValueItem))
        return [(items[i].szName, float(items[i].FmtValue.doubleValue)) for i in range(count.value)]

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status & 0xFFFFFFFF != ERROR_SUCCESS:
            raise OSError(f"{what} failed with status 0x{status & 0xFFFFFFFF:08X}")
