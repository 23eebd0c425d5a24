"""Probes: psutil for real, amdgpu sysfs through real files, NVML and Windows counters through thin fakes.

NVML cannot run here (no NVIDIA driver), so ``tests/support/fakes/nvml.py`` replays its documented return
shapes and error codes through the real ``pynvml`` exception classes and constants; the probe's own
logic (remembering NotSupported, v2→v1 and v3→v2 fallbacks, GPU lost, KB/s → B/s) runs unchanged.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pynvml
import pytest

from cliff_tui.analysis.buffers import gpu_reading_of
from cliff_tui.analysis.gauge import CliffRoom, cliff_room
from cliff_tui.probes import system
from cliff_tui.probes.amd import AmdSysfsProbe, find_amd_cards
from cliff_tui.probes.nvidia import NvidiaProbe
from cliff_tui.probes.sampler import CPU_ONLY_TIERS, Sampler, SamplerThread, SamplesInLoop
from cliff_tui.probes.shared_vram import (
    ADAPTER_DEDICATED,
    ADAPTER_SHARED,
    APPLE_REASON,
    NVIDIA_LINUX_REASON,
    PROCESS_SHARED,
    AmdGtt,
    Unavailable,
    WindowsCounters,
    choose_backends,
    fill_shared,
    per_adapter,
    per_process,
)
from cliff_tui.probes.system import ProcessProbe, read_memory
from cliff_tui.records import GpuProcess, GpuReading, RamReading, SwapReading
from cliff_tui.report.samples import sample_record

try:
    from fakes.nvml import FakeGpu, FakeNvml, FakeProcess, GiB, MiB
except ImportError:  # tests/ became a package
    from tests.fakes.nvml import FakeGpu, FakeNvml, FakeProcess, GiB, MiB

from paths import CHILD_BYTES  # the `child` fixture holds this much

# --- helpers ----------------------------------------------------------------------------------


def _meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name == key:
            return int(rest.split()[0])
    raise KeyError(key)


def _free_pid() -> int:
    for pid in (999_999, 4_194_303, 3_999_999):
        if not psutil.pid_exists(pid):
            return pid
    pytest.skip("could not find an unused PID")


def nvidia_driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def probe_for(*gpus: FakeGpu, **kwargs) -> tuple[NvidiaProbe, FakeNvml]:
    fake = FakeNvml(gpus, **kwargs)
    return NvidiaProbe(nvml=fake.module), fake


def only(probe: NvidiaProbe) -> GpuReading:
    gpus, reason = probe.read()
    assert reason is None
    assert len(gpus) == 1
    return gpus[0]


# --- psutil (real) ----------------------------------------------------------------------------


def test_ram_is_this_machines_ram_as_psutil_counts_it():
    ram, _ = read_memory()
    vm = psutil.virtual_memory()
    assert ram.total_bytes == _meminfo_kib("MemTotal") * 1024 == vm.total
    assert 0 < ram.used_bytes < ram.total_bytes
    assert ram.used_bytes == pytest.approx(vm.used, abs=64 * MiB)  # read a moment apart
    assert ram.available_bytes == pytest.approx(vm.available, abs=64 * MiB)
    assert ram.used_bytes + ram.available_bytes == ram.total_bytes
    assert isinstance(ram.used_bytes, int) and isinstance(ram.total_bytes, int)


def test_swap_is_this_machines_swap():
    _, swap = read_memory()
    assert swap.total_bytes == _meminfo_kib("SwapTotal") * 1024
    assert 0 <= swap.used_bytes <= swap.total_bytes


def test_without_meminfo_both_come_from_psutil(tmp_path: Path, monkeypatch):
    psutil_swap = psutil.swap_memory()
    monkeypatch.setattr(system, "_MEMINFO", str(tmp_path / "absent"))
    ram, swap = read_memory()
    assert swap == SwapReading(used_bytes=psutil_swap.used, total_bytes=psutil_swap.total)
    assert ram.total_bytes == psutil.virtual_memory().total


FAKE_MEMINFO = (
    "MemTotal:       24684000 kB\nMemFree:        20000000 kB\nMemAvailable:   {available} kB\n"
    "SwapCached:            0 kB\nSwapTotal:       2097148 kB\nSwapFree:         1048572 kB\n"
)


def test_ram_and_swap_from_one_meminfo(tmp_path: Path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(FAKE_MEMINFO.format(available=22684000))
    monkeypatch.setattr(system, "_MEMINFO", str(meminfo))
    ram, swap = read_memory()
    assert ram == RamReading(used_bytes=2000000 * 1024, total_bytes=24684000 * 1024, available_bytes=22684000 * 1024)
    assert swap == SwapReading(used_bytes=1048576 * 1024, total_bytes=2097148 * 1024)


@pytest.mark.parametrize("available", [0, 30000000])  # a kernel's 0; a container's figure above MemTotal
def test_odd_available_memory_is_left_to_psutil(tmp_path: Path, monkeypatch, available):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(FAKE_MEMINFO.format(available=available))
    monkeypatch.setattr(system, "_MEMINFO", str(meminfo))
    ram, swap = read_memory()
    assert ram.total_bytes == psutil.virtual_memory().total != 24684000 * 1024  # psutil read the real file
    assert swap.total_bytes == 2097148 * 1024


def test_process_probe_reads_a_real_child(child):
    reading = ProcessProbe(child.pid).read()
    assert reading.pid == child.pid
    assert reading.name is not None and reading.name.startswith("python")
    assert reading.rss_bytes >= CHILD_BYTES
    assert reading.rss_bytes == pytest.approx(psutil.Process(child.pid).memory_info().rss, rel=0.05)
    assert reading.reasons == {}


def test_process_probe_counts_the_childrens_rss(child):
    probe = ProcessProbe(os.getpid())
    reading = probe.read()
    assert child.pid in probe.children_pids()
    assert reading.n_children >= 1
    assert reading.children_rss_bytes >= CHILD_BYTES
    assert reading.total_rss_bytes == reading.rss_bytes + reading.children_rss_bytes


def test_the_children_are_found_again_every_few_seconds_and_read_every_tick():
    now = [0.0]
    probe = ProcessProbe(os.getpid(), children_every_s=2.0, clock=lambda: now[0])
    before = probe.read().n_children
    code = f"import time; x = bytearray({CHILD_BYTES}); print('ready', flush=True); time.sleep(30)"
    late = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert late.stdout.readline().strip() == "ready"
        now[0] = 1.9
        assert late.pid not in probe.children_pids()  # the list from t=0 still holds
        assert probe.read().n_children == before
        now[0] = 2.0
        reading = probe.read()
        assert late.pid in probe.children_pids()
        assert reading.n_children == before + 1 and reading.children_rss_bytes >= CHILD_BYTES
    finally:
        late.kill()
        late.wait()
    assert probe.read().n_children == before  # an exited child drops out before the next search


def test_a_pid_that_does_not_exist_gives_a_reason_not_an_exception():
    pid = _free_pid()
    reading = ProcessProbe(pid).read()
    assert reading.rss_bytes is None and reading.children_rss_bytes is None
    assert str(pid) in reading.reasons["rss_bytes"]
    assert "no process" in reading.reasons["rss_bytes"]


def test_a_process_that_exits_after_the_probe_was_made_gives_a_reason():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    probe = ProcessProbe(proc.pid)
    assert probe.read().rss_bytes > 0
    proc.kill()
    proc.wait()  # reaped: the PID is gone
    reading = probe.read()
    assert reading.rss_bytes is None
    assert reading.reasons["rss_bytes"] == f"process {proc.pid} has exited"
    assert probe.children_pids() == []


# --- NVML through the fake --------------------------------------------------------------------


def test_every_field_of_a_healthy_gpu():
    gpu = FakeGpu(
        name=b"NVIDIA GeForce RTX 4070",
        total=12 * GiB,
        used=3 * GiB,
        reserved=300 * MiB,
        util_gpu=87,
        temperature_c=64,
        pcie_rx_kb_s=1200,
        pcie_tx_kb_s=300,
        processes=[FakeProcess(4242, 2 * GiB), FakeProcess(4343, None)],
    )
    probe, fake = probe_for(gpu)
    r = only(probe)
    assert r.index == 0 and r.vendor == "nvidia"
    assert r.name == "NVIDIA GeForce RTX 4070"  # bytes from an older binding are decoded
    assert (r.vram_used_bytes, r.vram_total_bytes, r.vram_reserved_bytes) == (3 * GiB, 12 * GiB, 300 * MiB)
    assert (r.util_pct, r.temperature_c) == (87.0, 64.0)
    assert (r.sm_clock_mhz, r.mem_clock_mhz) == (2475, 10501)
    assert r.throttle_reasons == ()
    assert (r.pcie_rx_bytes_s, r.pcie_tx_bytes_s) == (1_228_800.0, 307_200.0)  # NVML's KB/s are KiB/s
    assert r.processes == (GpuProcess(4242, 2 * GiB), GpuProcess(4343, None))
    assert r.shared_used_bytes is None  # NVML has no shared VRAM; the shared backends say why
    assert r.reasons == {}
    assert fake.calls["nvmlInit"] == 1
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1 and fake.calls["nvmlDeviceGetMemoryInfo"] == 0


def test_readings_follow_the_gpu():
    gpu = FakeGpu(used=1 * GiB)
    probe, fake = probe_for(gpu)
    assert only(probe).vram_used_bytes == 1 * GiB
    gpu.used = 5 * GiB
    gpu.temperature_c = 80
    r = only(probe)
    assert (r.vram_used_bytes, r.temperature_c) == (5 * GiB, 80.0)
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 1  # handles are looked up once


def test_nothing_is_called_before_the_first_read():
    probe, fake = probe_for(FakeGpu())
    assert sum(fake.calls.values()) == 0
    probe.read()
    assert fake.calls["nvmlInit"] == 1


@pytest.mark.parametrize(
    "symbol, fields",
    [
        ("nvmlDeviceGetPcieThroughput", ("pcie_rx_bytes_s", "pcie_tx_bytes_s")),
        ("nvmlDeviceGetTemperature", ("temperature_c",)),
        ("nvmlDeviceGetUtilizationRates", ("util_pct",)),
        ("nvmlDeviceGetCurrentClocksEventReasons", ("throttle_reasons",)),
        ("nvmlDeviceGetComputeRunningProcesses_v3", ("processes",)),
    ],
)
def test_not_supported_is_na_with_a_reason_and_not_asked_again(symbol, fields):
    probe, fake = probe_for(FakeGpu(errors={symbol: pynvml.NVML_ERROR_NOT_SUPPORTED}))
    first = only(probe)
    for name in fields:
        assert getattr(first, name) is None
        assert first.reasons[name] == "not supported by this GPU"
    asked = fake.calls[symbol]
    assert asked >= 1
    util_calls = fake.calls["nvmlDeviceGetUtilizationRates"]
    second = only(probe)
    third = only(probe)
    assert fake.calls[symbol] == asked  # remembered, not retried every tick
    for name in fields:
        assert getattr(third, name) is None and third.reasons[name] == "not supported by this GPU"
    # the rest of the GPU is still read every tick
    assert second.vram_used_bytes == 3 * GiB
    if symbol != "nvmlDeviceGetUtilizationRates":
        assert fake.calls["nvmlDeviceGetUtilizationRates"] == util_calls + 2


def test_other_nvml_errors_are_reported_and_retried():
    gpu = FakeGpu(errors={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_UNKNOWN})
    probe, fake = probe_for(gpu)
    r = only(probe)
    assert r.temperature_c is None
    assert r.reasons["temperature_c"] == "NVML error: Unknown Error"
    gpu.errors = {}  # a transient error: the next tick reads it again
    r = only(probe)
    assert r.temperature_c == 64.0 and "temperature_c" not in r.reasons
    assert fake.calls["nvmlDeviceGetTemperature"] == 2


def test_memory_v2_missing_in_the_driver_falls_back_to_v1():
    probe, fake = probe_for(
        FakeGpu(total=8 * GiB, used=2 * GiB, reserved=256 * MiB),
        errors={"nvmlDeviceGetMemoryInfo_v2": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND},
    )
    for _ in range(3):
        r = only(probe)
        assert r.vram_reserved_bytes is None
        assert r.reasons == {"vram_reserved_bytes": "nvmlDeviceGetMemoryInfo_v2 not available in this driver"}
        # v1's used is total - free: 2.25 GiB, the 256 MiB reserved counted as used
        assert (r.vram_used_bytes, r.vram_total_bytes) == (2_415_919_104, 8_589_934_592)
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 3


def test_a_binding_without_nvmlMemory_v2_uses_v1_without_trying_v2():
    probe, fake = probe_for(FakeGpu(total=8 * GiB, used=2 * GiB, reserved=0), absent=["nvmlMemory_v2"])
    r = only(probe)
    assert (r.vram_used_bytes, r.vram_total_bytes, r.vram_reserved_bytes) == (2 * GiB, 8 * GiB, None)
    assert r.reasons == {"vram_reserved_bytes": "nvmlDeviceGetMemoryInfo_v2 not available in this driver"}
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 0


def test_memory_not_readable_at_all_is_na_for_used_and_total():
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    probe, fake = probe_for(
        FakeGpu(errors={"nvmlDeviceGetMemoryInfo_v2": not_supported, "nvmlDeviceGetMemoryInfo": not_supported})
    )
    r = only(probe)
    assert (r.vram_used_bytes, r.vram_total_bytes, r.vram_reserved_bytes) == (None, None, None)
    assert r.reasons["vram_used_bytes"] == r.reasons["vram_total_bytes"] == "not supported by this GPU"
    only(probe)
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1 and fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1


def test_processes_v3_missing_uses_v2_and_remembers_it():
    gpu = FakeGpu(
        processes=[FakeProcess(77, 512 * MiB)],
        errors={"nvmlDeviceGetComputeRunningProcesses_v3": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND},
    )
    probe, fake = probe_for(gpu)
    for _ in range(3):
        assert only(probe).processes == (GpuProcess(77, 512 * MiB),)
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 3


def test_no_process_function_in_the_driver_is_na_once():
    fnf = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    probe, fake = probe_for(
        FakeGpu(
            processes=[FakeProcess(77, MiB)],
            errors={"nvmlDeviceGetComputeRunningProcesses_v3": fnf, "nvmlDeviceGetComputeRunningProcesses_v2": fnf},
        )
    )
    r = only(probe)
    assert r.processes is None and r.reasons["processes"] == "not in this NVIDIA driver"
    asked = sum(
        fake.calls[s] for s in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
    )
    only(probe)
    only(probe)
    assert (
        sum(
            fake.calls[s]
            for s in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
        )
        == asked
    )


def test_an_empty_process_list_is_empty_not_na():
    r = only(probe_for(FakeGpu(processes=()))[0])
    assert r.processes == () and "processes" not in r.reasons


@pytest.mark.parametrize(
    "code, words",
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "the NVIDIA driver is not loaded"),
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver (libnvidia-ml not found)"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    ],
)
def test_no_driver_is_one_reason_and_init_is_tried_once(code, words):
    probe, fake = probe_for(FakeGpu(), init_error=code)
    for _ in range(3):
        gpus, reason = probe.read()
        assert gpus == []
        assert words in reason
    assert fake.calls["nvmlInit"] == 1
    assert sum(fake.gpu_calls.values()) == 0 and fake.calls["nvmlDeviceGetCount"] == 0
    probe.close()
    assert fake.calls["nvmlShutdown"] == 0  # nothing was started


@pytest.mark.skipif(nvidia_driver_present(), reason="this machine has the NVIDIA driver")
def test_without_the_driver_the_real_probe_says_so_and_never_loads_the_binding():
    code = (
        "import sys; from cliff_tui.probes.nvidia import NvidiaProbe; p = NvidiaProbe(); "
        "print(p.read()[1]); print('pynvml' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "tui")},
    ).stdout
    assert out.splitlines() == ["no NVIDIA driver (libnvidia-ml not found)", "False"]


def test_a_driver_with_no_gpu_says_so():
    probe, _fake = probe_for()
    gpus, reason = probe.read()
    assert gpus == [] and reason == "the NVIDIA driver is loaded but reports no GPU"


def test_close_shuts_nvml_down_once():
    probe, fake = probe_for(FakeGpu())
    probe.read()
    probe.close()
    assert fake.calls["nvmlShutdown"] == 1 and fake.initialised == 0


def test_close_before_any_read_touches_nothing():
    probe, fake = probe_for(FakeGpu())
    probe.close()
    assert sum(fake.calls.values()) == 0


def test_a_gpu_lost_between_reads():
    probe, fake = probe_for(FakeGpu(name="GPU A", used=1 * GiB), FakeGpu(name="GPU B", used=2 * GiB))
    gpus, _ = probe.read()
    assert [g.vram_used_bytes for g in gpus] == [1 * GiB, 2 * GiB]
    fake.lose(1)
    gpus, reason = probe.read()
    assert reason is None
    healthy, lost = gpus
    assert healthy.vram_used_bytes == 1 * GiB and healthy.reasons == {}
    assert (lost.index, lost.name, lost.vendor) == (1, "GPU B", "nvidia")
    for name in (
        "vram_used_bytes",
        "vram_total_bytes",
        "vram_reserved_bytes",
        "util_pct",
        "temperature_c",
        "sm_clock_mhz",
        "pcie_rx_bytes_s",
        "processes",
        "throttle_reasons",
    ):
        assert getattr(lost, name) is None, name
    assert "lost" in lost.reasons["vram_used_bytes"]
    assert "lost" in lost.reasons["vram_total_bytes"]
    # a lost GPU stays lost until a reboot: it is not asked again every tick
    asked = fake.device_calls(1)
    gpus, _ = probe.read()
    assert fake.device_calls(1) == asked
    assert gpus[1].vram_used_bytes is None and "lost" in gpus[1].reasons["vram_used_bytes"]
    assert gpus[0].vram_used_bytes == 1 * GiB


def test_a_gpu_lost_in_the_middle_of_a_read_is_never_half_a_reading():
    probe, fake = probe_for(FakeGpu())
    probe.read()
    calls_per_read = fake.device_calls(0) - 2  # minus nvmlDeviceGetName and nvmlDeviceGetUUID at start
    assert calls_per_read >= 8
    for after in range(calls_per_read):
        probe, fake = probe_for(FakeGpu())
        probe.read()
        fake.lose(0, after=after)
        r = only(probe)
        values = (
            r.vram_used_bytes,
            r.vram_total_bytes,
            r.util_pct,
            r.temperature_c,
            r.sm_clock_mhz,
            r.mem_clock_mhz,
            r.throttle_reasons,
            r.pcie_rx_bytes_s,
            r.pcie_tx_bytes_s,
            r.processes,
        )
        assert values == (None,) * len(values), f"lost after {after} calls: {r}"
        assert "lost" in r.reasons["vram_used_bytes"]


def test_a_gpu_lost_before_the_first_read():
    probe, _fake = probe_for(FakeGpu(lost_after=1))  # nvmlDeviceGetName at start works, then lost (UUID too)
    r = only(probe)
    assert r.vram_used_bytes is None and "lost" in r.reasons["vram_used_bytes"]


def test_the_uuid_is_read_once_and_carried_by_every_reading():
    probe, fake = probe_for(FakeGpu(uuid=b"GPU-0a1b"), FakeGpu(uuid="GPU-2c3d"))
    for _ in range(3):
        gpus, _ = probe.read()
        assert [g.uuid for g in gpus] == ["GPU-0a1b", "GPU-2c3d"]
    assert fake.calls["nvmlDeviceGetUUID"] == 2


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_UNKNOWN]
)
def test_a_gpu_without_a_uuid_still_reads(code):
    r = only(probe_for(FakeGpu(used=2 * GiB, errors={"nvmlDeviceGetUUID": code}))[0])
    assert r.uuid is None and r.vram_used_bytes == 2 * GiB


def test_a_lost_gpu_keeps_its_uuid():
    probe, fake = probe_for(FakeGpu(uuid="GPU-lost"))
    probe.read()
    fake.lose(0)
    assert only(probe).uuid == "GPU-lost"


def test_clock_event_bits_become_words():
    mask = (
        pynvml.nvmlClocksEventReasonHwThermalSlowdown
        | pynvml.nvmlClocksEventReasonSwPowerCap
        | pynvml.nvmlClocksEventReasonSwThermalSlowdown
    )
    r = only(probe_for(FakeGpu(clock_events=mask))[0])
    assert r.throttle_reasons == ("power cap", "thermal (sw)", "thermal (hw)")


@pytest.mark.parametrize(
    "mask, words",
    [
        (0, ()),
        (pynvml.nvmlClocksEventReasonGpuIdle, ("idle",)),
        (pynvml.nvmlClocksEventReasonHwSlowdown, ("hw slowdown",)),
        (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, ("power brake",)),
        (pynvml.nvmlClocksEventReasonSyncBoost, ("sync boost",)),
        (pynvml.nvmlClocksEventReasonApplicationsClocksSetting, ("app clocks",)),
        (pynvml.nvmlClocksEventReasonDisplayClockSetting, ("display clocks",)),
    ],
)
def test_each_documented_clock_event_bit(mask, words):
    assert only(probe_for(FakeGpu(clock_events=mask))[0]).throttle_reasons == words


def test_a_driver_older_than_clock_event_reasons_uses_throttle_reasons():
    mask = pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    fnf = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    probe, fake = probe_for(FakeGpu(clock_events=mask, errors={"nvmlDeviceGetCurrentClocksEventReasons": fnf}))
    assert only(probe).throttle_reasons == ("thermal (hw)",)
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1
    probe, fake = probe_for(FakeGpu(clock_events=mask), absent=["nvmlDeviceGetCurrentClocksEventReasons"])
    assert only(probe).throttle_reasons == ("thermal (hw)",)
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


EVENT_REASONS = "nvmlDeviceGetCurrentClocksEventReasons"  # the name since driver R535
THROTTLE_REASONS = "nvmlDeviceGetCurrentClocksThrottleReasons"  # the name before it


@pytest.mark.parametrize(
    "absent, driver_lacks, words, reason",
    [
        # the newest binding, without the old name: the new one answers
        ([THROTTLE_REASONS], [], ("thermal (hw)",), None),
        # ... on a driver older than R535, which has only the old symbol
        ([THROTTLE_REASONS], [EVENT_REASONS], None, "not in this NVIDIA driver"),
        # a binding older than the new name, on a driver without the old symbol
        ([EVENT_REASONS], [THROTTLE_REASONS], None, "not in this NVIDIA driver"),
        # a binding with neither
        (
            [EVENT_REASONS, THROTTLE_REASONS],
            [],
            None,
            "not in this nvidia-ml-py (it has neither nvmlDeviceGetCurrentClocksEventReasons"
            " nor nvmlDeviceGetCurrentClocksThrottleReasons)",
        ),
    ],
)
def test_a_binding_of_any_age_gives_a_reading(absent, driver_lacks, words, reason):
    fnf = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    gpu = FakeGpu(
        used=3 * GiB,
        clock_events=pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        errors=dict.fromkeys(driver_lacks, fnf),
    )
    probe, fake = probe_for(gpu, absent=absent)
    for tick in range(3):
        r = only(probe)
        assert r.throttle_reasons == words
        assert r.reasons.get("throttle_reasons") == reason
        assert r.vram_used_bytes == 3 * GiB  # the rest of the GPU is read
        if tick == 0:
            asked = fake.calls[EVENT_REASONS] + fake.calls[THROTTLE_REASONS]
    # one call a tick once found; a function neither has is not asked again
    expected = asked + (2 if words is not None else 0)
    assert fake.calls[EVENT_REASONS] + fake.calls[THROTTLE_REASONS] == expected


def test_a_missing_clock_event_function_is_not_asked_every_tick():
    fnf = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    probe, fake = probe_for(FakeGpu(errors={"nvmlDeviceGetCurrentClocksEventReasons": fnf}))
    for _ in range(3):
        only(probe)
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1


def test_a_gpu_lost_at_start_does_not_hide_the_healthy_ones():
    probe, _fake = probe_for(FakeGpu(used=1 * GiB), FakeGpu(lost_after=0))
    gpus, reason = probe.read()
    assert reason is None
    assert gpus[0].vram_used_bytes == 1 * GiB
    assert gpus[1].vram_used_bytes is None and "lost" in gpus[1].reasons["vram_used_bytes"]


def test_close_balances_a_successful_init_even_without_gpus():
    probe, fake = probe_for()
    probe.read()
    probe.close()
    assert fake.initialised == 0


def test_a_transient_v2_memory_error_does_not_shift_used_by_reserved():
    gpu = FakeGpu(used=3 * GiB, reserved=300 * MiB)
    probe, fake = probe_for(gpu)
    assert only(probe).vram_used_bytes == 3 * GiB
    gpu.errors = {"nvmlDeviceGetMemoryInfo_v2": pynvml.NVML_ERROR_UNKNOWN}
    r = only(probe)
    # n/a this tick: v1's used (3 GiB + 300 MiB reserved) would be a jump nothing allocated
    assert (r.vram_used_bytes, r.vram_total_bytes, r.vram_reserved_bytes) == (None, None, None)
    assert r.reasons == dict.fromkeys(
        ("vram_used_bytes", "vram_total_bytes", "vram_reserved_bytes"), "NVML error: Unknown Error"
    )
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 0
    gpu.errors = {}
    assert only(probe).vram_used_bytes == 3 * GiB  # v2 again on the next tick


def test_pcie_kb_per_second_become_bytes_per_second():
    r = only(probe_for(FakeGpu(pcie_rx_kb_s=250_000, pcie_tx_kb_s=0))[0])
    assert r.pcie_rx_bytes_s == 256_000_000.0
    assert r.pcie_tx_bytes_s == 0.0  # a real zero from NVML stays zero


def test_pcie_sampling_off_never_calls_the_20ms_function():
    fake = FakeNvml([FakeGpu()])
    r = only(NvidiaProbe(nvml=fake.module, pcie=False))
    assert r.pcie_rx_bytes_s is None and r.reasons["pcie_rx_bytes_s"] == "PCIe sampling is off"
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0


# --- the fake itself stays honest ---------------------------------------------------------------


def test_the_fake_uses_the_real_binding_errors_and_shapes():
    gpu = FakeGpu(
        total=8 * GiB,
        used=2 * GiB,
        reserved=256 * MiB,
        errors={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_NOT_SUPPORTED},
    )
    fake = FakeNvml([gpu])
    nvml = fake.module
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)
    v1 = nvml.nvmlDeviceGetMemoryInfo(h)
    assert type(v1) is pynvml.c_nvmlMemory_t and not hasattr(v1, "reserved")
    # NVML's documented meanings: v2 used excludes the reserved memory, v1 used is total - free
    assert (v1.total, v1.free, v1.used) == (8_589_934_592, 6_174_015_488, 2_415_919_104)
    v2 = nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
    assert type(v2) is pynvml.c_nvmlMemory_v2_t
    assert (v2.total, v2.reserved, v2.used, v2.free) == (8_589_934_592, 268_435_456, 2_147_483_648, 6_174_015_488)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(1)


# --- AMD sysfs through a real directory tree --------------------------------------------------


def _amd_tree(
    root: Path,
    card: str = "card0",
    *,
    vendor: str = "0x1002",
    vram_used: int = 2 * GiB,
    vram_total: int = 16 * GiB,
    gtt_used: int = 300 * MiB,
    gtt_total: int = 31 * GiB,
    busy: int | None = 37,
    temp_milli: int | None = 45000,
    product: str | None = None,
) -> Path:
    device = root / card / "device"
    (device / "hwmon" / "hwmon0").mkdir(parents=True)
    files = {
        "vendor": vendor,
        "mem_info_vram_used": vram_used,
        "mem_info_vram_total": vram_total,
        "mem_info_gtt_used": gtt_used,
        "mem_info_gtt_total": gtt_total,
        "gpu_busy_percent": busy,
        "hwmon/hwmon0/temp1_input": temp_milli,
        "product_name": product,
    }
    for name, value in files.items():
        if value is not None:
            (device / name).write_text(f"{value}\n")
    return device


@pytest.fixture
def drm(tmp_path: Path) -> Path:
    """/sys/class/drm as amdgpu lays it out: a card, its connector, a render node, another vendor."""
    root = tmp_path / "drm"
    _amd_tree(root, "card0", product="AMD Radeon RX 7900 XTX")
    (root / "card0-DP-1").mkdir()  # a connector: skipped
    (root / "renderD128").mkdir()
    nvidia = root / "card1" / "device"
    nvidia.mkdir(parents=True)
    (nvidia / "vendor").write_text("0x10de\n")  # not AMD: skipped
    return root


def test_amd_cards_are_found_by_vendor(drm: Path):
    _amd_tree(drm, "card2", vram_total=None)  # amdgpu without VRAM info (a display-only APU path)
    assert find_amd_cards(drm) == [drm / "card0" / "device"]


def test_amd_sysfs_reading(drm: Path):
    probe = AmdSysfsProbe(drm)
    [r] = probe.read(first_index=1)
    assert (r.index, r.vendor, r.name) == (1, "amd", "AMD Radeon RX 7900 XTX")
    assert (r.vram_used_bytes, r.vram_total_bytes) == (2 * GiB, 16 * GiB)
    assert (r.util_pct, r.temperature_c) == (37.0, 45.0)
    assert r.shared_used_bytes is None and r.reasons == {}
    (drm / "card0" / "device" / "mem_info_vram_used").write_text(f"{5 * GiB}\n")
    assert probe.read()[0].vram_used_bytes == 5 * GiB  # every read reads the file again


def test_amd_unreadable_files_are_na_with_a_reason(tmp_path: Path):
    root = tmp_path / "drm"
    _amd_tree(root, busy=None, temp_milli=None)
    (root / "card0" / "device" / "mem_info_vram_used").write_text("garbage\n")
    [r] = AmdSysfsProbe(root).read()
    assert r.name == "AMD GPU (card0)"
    assert (r.vram_used_bytes, r.util_pct, r.temperature_c) == (None, None, None)
    assert r.vram_total_bytes == 16 * GiB
    assert set(r.reasons) == {"vram_used_bytes", "util_pct", "temperature_c"}
    assert "card0" in r.reasons["util_pct"]


def test_amd_unreadable_total_has_a_reason(tmp_path: Path):
    root = tmp_path / "drm"
    _amd_tree(root)
    (root / "card0" / "device" / "mem_info_vram_total").write_text("garbage\n")
    [r] = AmdSysfsProbe(root).read()
    assert r.vram_total_bytes is None
    assert "card0" in r.reasons["vram_total_bytes"]


def test_amd_gtt_is_the_shared_vram(drm: Path):
    amd = AmdSysfsProbe(drm)
    nvidia = GpuReading(index=0, name="RTX", vendor="nvidia", vram_used_bytes=1, vram_total_bytes=2)
    backends = choose_backends("linux", amd.cards)
    assert [type(b) for b in backends] == [AmdGtt, Unavailable]
    out_nvidia, out_amd = fill_shared([nvidia, *amd.read(first_index=1)], backends)
    assert (out_amd.shared_used_bytes, out_amd.shared_total_bytes) == (300 * MiB, 31 * GiB)
    assert "shared_used_bytes" not in out_amd.reasons
    assert out_nvidia.shared_used_bytes is None
    assert out_nvidia.reasons["shared_used_bytes"] == NVIDIA_LINUX_REASON


def test_amd_gtt_unreadable_is_na_not_zero(drm: Path):
    amd = AmdSysfsProbe(drm)
    (drm / "card0" / "device" / "mem_info_gtt_used").unlink()
    [r] = fill_shared(amd.read(), choose_backends("linux", amd.cards))
    assert r.shared_used_bytes is None
    assert r.reasons["shared_used_bytes"].startswith("not readable")
    assert "mem_info_gtt_used" in r.reasons["shared_used_bytes"]


def test_amd_cards_are_in_the_drivers_numeric_order(tmp_path: Path):
    root = tmp_path / "drm"
    for n in (10, 2, 1):
        _amd_tree(root, f"card{n}", product=f"card {n}")
    assert [r.name for r in AmdSysfsProbe(root).read()] == ["card 1", "card 2", "card 10"]


def test_on_a_box_with_both_vendors_each_llama_device_is_its_own_vendors_card(tmp_path: Path):
    root = tmp_path / "drm"
    _amd_tree(root, "card1", vram_used=2 * GiB, vram_total=16 * GiB, product="AMD Radeon RX 7900 XTX")
    _amd_tree(root, "card2", vram_used=1 * GiB, vram_total=8 * GiB, product="AMD Radeon RX 7600")
    fake = FakeNvml([FakeGpu(name="NVIDIA GeForce RTX 4070", total=12 * GiB, used=3 * GiB, reserved=0)])
    sampler = Sampler(nvidia=NvidiaProbe(nvml=fake.module), amd=AmdSysfsProbe(root), platform="linux")
    sample = sampler.sample()
    sampler.close()
    # every card its own index: the screen's history keys (gpu0.vram …) and labels never collide
    assert [(g.index, g.vendor, g.name) for g in sample.gpus] == [
        (0, "nvidia", "NVIDIA GeForce RTX 4070"),
        (1, "amd", "AMD Radeon RX 7900 XTX"),
        (2, "amd", "AMD Radeon RX 7600"),
    ]
    # llama.cpp numbers each backend's devices from 0
    assert cliff_room(sample, "CUDA0") == CliffRoom("GPU0 dedicated VRAM", 12 * GiB, 9 * GiB)
    assert cliff_room(sample, "ROCm0") == CliffRoom("GPU1 dedicated VRAM", 16 * GiB, 14 * GiB)
    assert cliff_room(sample, "ROCm1") == CliffRoom("GPU2 dedicated VRAM", 8 * GiB, 7 * GiB)
    assert cliff_room(sample, "HIP1").tier == "GPU2 dedicated VRAM"
    assert cliff_room(sample, "CUDA1").tier == "RAM"  # no second NVIDIA card: not an AMD one
    assert gpu_reading_of("SYCL0", sample.gpus) is None  # an Intel card: none of these
    assert gpu_reading_of("CPU", sample.gpus) is None


# --- Windows counters through recorded instance shapes ------------------------------------------

NV_LUID = "0x00000000_0x0000D1B5"
IGPU_LUID = "0x00000000_0x0000E2C7"


def _wddm(shared: dict[str, float], dedicated: dict[str, float], process: dict[str, float] | None = None):
    """A ``read_counter`` that replays what PDH returns for the wildcard paths: (instance, value)."""
    table = {
        ADAPTER_SHARED: list(shared.items()),
        ADAPTER_DEDICATED: list(dedicated.items()),
        PROCESS_SHARED: list((process or {}).items()),
    }
    asked: list[str] = []

    def read(path: str) -> list[tuple[str, float]]:
        asked.append(path)
        return table[path]

    read.asked = asked  # type: ignore[attr-defined]
    return read


def _gpu(index: int, used: int | None, vendor: str = "nvidia") -> GpuReading:
    return GpuReading(index=index, name=f"GPU {index}", vendor=vendor, vram_used_bytes=used, vram_total_bytes=12 * GiB)


def test_windows_shared_usage_is_matched_to_the_gpu_by_dedicated_usage():
    read = _wddm(
        shared={f"luid_{NV_LUID}_phys_0": 512 * MiB, f"luid_{IGPU_LUID}_phys_0": 1 * GiB},
        dedicated={f"luid_{NV_LUID}_phys_0": 6 * GiB, f"luid_{IGPU_LUID}_phys_0": 128 * MiB},
    )
    [r] = WindowsCounters(read_counter=read).fill([_gpu(0, 6 * GiB - 3 * MiB)])
    assert r.shared_used_bytes == 512 * MiB
    assert "shared_used_bytes" not in r.reasons
    assert set(read.asked) == {ADAPTER_SHARED, ADAPTER_DEDICATED, PROCESS_SHARED}


def test_windows_per_process_shared_usage_lands_on_the_gpus_processes():
    read = _wddm(
        shared={f"luid_{NV_LUID}_phys_0": 512 * MiB, f"luid_{IGPU_LUID}_phys_0": 1 * GiB},
        dedicated={f"luid_{NV_LUID}_phys_0": 6 * GiB, f"luid_{IGPU_LUID}_phys_0": 128 * MiB},
        process={f"pid_1234_luid_{NV_LUID}_phys_0": 300 * MiB, f"pid_88_luid_{IGPU_LUID}_phys_0": 5 * MiB},
    )
    gpu = dataclasses.replace(_gpu(0, 6 * GiB), processes=(GpuProcess(1234, 4 * GiB), GpuProcess(77, GiB)))
    [r] = WindowsCounters(read_counter=read).fill([gpu])
    by_pid = {p.pid: p for p in r.processes}
    assert by_pid[1234] == GpuProcess(1234, 4 * GiB, 300 * MiB)
    assert by_pid[77].shared_bytes is None and 88 not in by_pid  # pid 88 uses the other adapter


def test_windows_two_gpus_get_two_adapters():
    read = _wddm(
        shared={f"luid_{NV_LUID}_phys_0": 512 * MiB, f"luid_{IGPU_LUID}_phys_0": 64 * MiB},
        dedicated={f"luid_{NV_LUID}_phys_0": 6 * GiB, f"luid_{IGPU_LUID}_phys_0": 5 * GiB},
    )
    a, b = WindowsCounters(read_counter=read).fill([_gpu(0, 5 * GiB), _gpu(1, 6 * GiB)])
    assert (a.shared_used_bytes, b.shared_used_bytes) == (64 * MiB, 512 * MiB)


def test_windows_no_matching_adapter_is_na_not_zero():
    read = _wddm(shared={}, dedicated={})
    [r] = WindowsCounters(read_counter=read).fill([_gpu(0, GiB)])
    assert r.shared_used_bytes is None
    assert r.reasons["shared_used_bytes"] == "not available: no WDDM adapter matches this GPU"


def test_windows_unreadable_counters_are_na_with_the_error():
    def broken(path: str):
        raise OSError("PdhCollectQueryData failed: 0xC0000BC6")

    [r] = WindowsCounters(read_counter=broken).fill([_gpu(0, GiB)])
    assert r.shared_used_bytes is None
    assert "0xC0000BC6" in r.reasons["shared_used_bytes"]
    assert r.reasons["shared_used_bytes"].startswith("not available")


def test_windows_counter_instances_are_summed_per_adapter_and_per_process():
    adapters = per_adapter(
        [
            (f"luid_{NV_LUID}_phys_0", 100.0),
            (f"luid_{NV_LUID}_phys_1", 20.0),
            (f"luid_{IGPU_LUID}_phys_0", 7.0),
            ("_Total", 999.0),
        ]
    )
    assert adapters == {NV_LUID: 120.0, IGPU_LUID: 7.0}
    processes = per_process(
        [
            (f"pid_1234_luid_{NV_LUID}_phys_0", 300.0),
            (f"pid_1234_luid_{NV_LUID}_phys_1", 12.0),
            (f"pid_1234_luid_{IGPU_LUID}_phys_0", 7.0),
            (f"pid_88_luid_{NV_LUID}_phys_0", 5.0),
            ("_Total", 999.0),
        ]
    )
    assert processes == {NV_LUID: {1234: 312.0, 88: 5.0}, IGPU_LUID: {1234: 7.0}}


# --- platforms that cannot report shared VRAM ----------------------------------------------------


@pytest.mark.parametrize("platform, reason", [("linux", NVIDIA_LINUX_REASON), ("darwin", APPLE_REASON)])
def test_unavailable_says_why_and_never_zero(platform, reason):
    [r] = fill_shared([_gpu(0, GiB)], choose_backends(platform, []))
    assert r.shared_used_bytes is None and r.shared_total_bytes is None
    assert r.reasons["shared_used_bytes"] == reason
    assert reason.startswith("not available: ")


def test_unavailable_keeps_a_value_or_reason_already_there():
    measured = dataclasses.replace(_gpu(0, GiB), shared_used_bytes=7)
    explained = dataclasses.replace(_gpu(1, GiB), reasons={"shared_used_bytes": "mine"})
    a, b = Unavailable("not available: x").fill([measured, explained])
    assert a.shared_used_bytes == 7 and "shared_used_bytes" not in a.reasons
    assert b.reasons["shared_used_bytes"] == "mine"


# --- the sampler --------------------------------------------------------------------------------


def test_sampler_without_any_gpu_says_why_and_keeps_ram_and_swap(tmp_path: Path):
    probe, fake = probe_for(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    sampler = Sampler(nvidia=probe, amd=AmdSysfsProbe(tmp_path), platform="linux")
    s = sampler.sample()
    assert s.gpus == ()
    assert "no NVIDIA driver (libnvidia-ml not found)" in s.gpus_reason
    assert "AMD: no amdgpu card" in s.gpus_reason
    assert s.gpus_reason.endswith(CPU_ONLY_TIERS)
    assert s.ram.total_bytes == _meminfo_kib("MemTotal") * 1024
    assert s.swap.total_bytes == _meminfo_kib("SwapTotal") * 1024
    sampler.sample()
    assert fake.calls["nvmlInit"] == 1
    record = json.loads(json.dumps(sample_record(s)))
    assert record["gpus"] == [] and record["gpus_reason"] == s.gpus_reason
    assert "process" not in record


@pytest.mark.skipif(
    nvidia_driver_present() or bool(find_amd_cards()),
    reason="this machine has a GPU; the CPU-only case is covered with the fake above",
)
def test_sampler_on_this_cpu_only_machine():
    sampler = Sampler()  # the real pynvml, the real /sys/class/drm
    s = sampler.sample()
    sampler.close()
    assert s.gpus == ()
    assert s.gpus_reason.startswith("no GPU found (NVIDIA: ")
    assert "RAM and swap are the memory tiers" in s.gpus_reason
    assert s.ram.used_bytes > 0 and s.ram.total_bytes == psutil.virtual_memory().total


def test_sampler_with_nvidia_on_linux(tmp_path: Path, child):
    me = os.getpid()
    gpu = FakeGpu(
        used=4 * GiB, processes=[FakeProcess(me, 300 * MiB), FakeProcess(child.pid, 200 * MiB), FakeProcess(1, 3 * GiB)]
    )
    probe, fake = probe_for(gpu)
    sampler = Sampler(me, nvidia=probe, amd=AmdSysfsProbe(tmp_path), platform="linux")
    s = sampler.sample()
    assert s.gpus_reason is None
    [g] = s.gpus
    assert g.vram_used_bytes == 4 * GiB
    assert g.shared_used_bytes is None
    assert g.reasons["shared_used_bytes"] == NVIDIA_LINUX_REASON
    # the followed process: its own and its children's GPU memory, nobody else's
    assert s.process.pid == me
    assert s.process.gpu_used_bytes == 500 * MiB
    assert s.process.children_rss_bytes >= CHILD_BYTES
    record = json.loads(json.dumps(sample_record(s)))
    assert record["gpus"][0]["vram_used_bytes"] == 4 * GiB
    assert record["gpus"][0]["shared_used_bytes"] is None
    assert record["gpus"][0]["reasons"]["shared_used_bytes"] == NVIDIA_LINUX_REASON
    assert "gpus_reason" not in record
    assert record["process"]["gpu_used_bytes"] == 500 * MiB
    sampler.close()
    assert fake.calls["nvmlShutdown"] == 1


def test_sampler_process_absent_from_nvml_gets_a_reason(tmp_path: Path):
    probe, _ = probe_for(FakeGpu(processes=[FakeProcess(1, GiB)]))
    s = Sampler(os.getpid(), nvidia=probe, amd=AmdSysfsProbe(tmp_path), platform="linux").sample()
    assert s.process.gpu_used_bytes is None
    assert s.process.reasons["gpu_used_bytes"] == "NVML lists no GPU memory for this process"


def test_sampler_set_pid_follows_another_process(tmp_path: Path, child):
    probe, _ = probe_for(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    sampler = Sampler(nvidia=probe, amd=AmdSysfsProbe(tmp_path), platform="linux")
    assert sampler.sample().process is None
    sampler.set_pid(child.pid)
    assert sampler.pid == child.pid
    assert sampler.sample().process.rss_bytes >= CHILD_BYTES
    sampler.set_pid(None)
    assert sampler.sample().process is None


def test_a_sampler_reads_gpus_where_nvml_or_amdgpu_has_one(tmp_path: Path):
    without, _ = probe_for(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert not Sampler(nvidia=without, amd=AmdSysfsProbe(tmp_path), platform="linux").reads_gpus()
    with_one, _ = probe_for(FakeGpu())
    assert Sampler(nvidia=with_one, amd=AmdSysfsProbe(tmp_path), platform="linux").reads_gpus()


def test_samples_in_the_loop_come_when_due_and_skip_ahead_when_late(tmp_path: Path):
    probe, _ = probe_for(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    taken: list = []
    loop = SamplesInLoop(Sampler(nvidia=probe, amd=AmdSysfsProbe(tmp_path), platform="linux"), taken.append, 0.25)
    loop.take_if_due(100.0)
    loop.take_if_due(100.1, early_s=0.125)
    assert len(taken) == 1  # the next is due at 100.25
    loop.take_if_due(100.249, early_s=0.125)  # a tick a hair early still takes it
    assert len(taken) == 2
    loop.take_if_due(103.0)  # late by seconds: one sample, not a burst
    loop.take_if_due(103.0)
    assert len(taken) == 3
    loop.take_if_due(103.25)
    assert len(taken) == 4 and taken[-1].ram.total_bytes > 0


def test_a_session_samples_in_its_loop_only_where_no_gpu_is_read(tmp_path: Path):
    from cliff_tui.session import Session

    without, _ = probe_for(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with_one, _ = probe_for(FakeGpu())
    for probe, kind in ((without, SamplesInLoop), (with_one, SamplerThread)):
        session = Session(sampler=Sampler(nvidia=probe, amd=AmdSysfsProbe(tmp_path), platform="linux"), interval=0.25)
        session.start_sampling(in_loop=True)
        try:
            assert type(session._sampling) is kind
            if kind is SamplesInLoop:
                assert session.drain() == 1  # the first sample, waiting for the first frame
                session.sample_if_due(time.monotonic() + 0.25)
                assert session.drain() == 1
        finally:
            session.stop()


def test_a_recorded_session_samples_on_a_thread_from_the_moment_it_records(tmp_path: Path):
    """A recording keeps its samples while the screen's loop stalls."""
    from cliff_tui.session import Session

    def session() -> Session:
        probe, _ = probe_for(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        return Session(sampler=Sampler(nvidia=probe, amd=AmdSysfsProbe(tmp_path), platform="linux"), interval=0.25)

    recorded = session()
    recorded.start_recording(str(tmp_path / "a.jsonl"))
    later = session()
    try:
        recorded.start_sampling(in_loop=True)
        later.start_sampling(in_loop=True)
        assert type(recorded._sampling) is SamplerThread and type(later._sampling) is SamplesInLoop
        later.start_recording(str(tmp_path / "b.jsonl"))
        assert type(later._sampling) is SamplerThread
    finally:
        recorded.stop()
        later.stop()
