"""A running server's split over RPC devices, placed from its flags as `attach` reads them."""

from __future__ import annotations

import pytest

from cliff_tui.analysis.server_memory import memory_split
from cliff_tui.events import ServerMemory
from cliff_tui.jobs.server_memory import kv_settings
from cliff_tui.jobs.server_split import server_split
from cliff_tui.units import MiB

FLAGS = {
    "rpc": "127.0.0.1:50052,127.0.0.1:50053",
    "tensor_split": "1,1",
    "pool_ctx": "1024",
    "slots": "1",
    "kv_unified": "true",
}


def mib(n: int) -> float:
    return round(n / MiB, 2)


@pytest.mark.model
def test_each_rpc_device_holds_its_layers_weights_and_kv(smollm2):
    split = server_split(str(smollm2), FLAGS, kv_settings(FLAGS))
    rpc0, rpc1 = split.devices
    # llama-server's own log for this split: RPC0 33.82 + 12.00 MiB, RPC1 58.28 + 10.50 MiB
    assert (rpc0.name, rpc0.endpoint, mib(rpc0.weights_bytes), mib(rpc0.kv_bytes)) == (
        "RPC0",
        "127.0.0.1:50052",
        33.82,
        12.00,
    )
    assert (mib(rpc1.weights_bytes), mib(rpc1.kv_bytes)) == (58.28, 10.50) and "output" in rpc1.layers
    assert split.host_kv_bytes == 0 and split.note == ""


@pytest.mark.model
def test_without_ts_the_split_is_by_free_memory_which_cannot_be_asked(smollm2):
    flags = {k: v for k, v in FLAGS.items() if k != "tensor_split"}
    split = server_split(str(smollm2), flags, kv_settings(flags))
    assert split.devices == () and "free memory" in split.note


def test_a_server_without_rpc_has_no_split():
    assert server_split("/no/model.gguf", {"rpc": "none"}, kv_settings({})).devices == ()


@pytest.mark.model
def test_a_bad_ts_is_a_note_not_a_crash(smollm2):
    flags = FLAGS | {"tensor_split": "a,b"}
    split = server_split(str(smollm2), flags, kv_settings(flags))
    assert split.devices == () and "not a number" in split.note


@pytest.mark.model
def test_the_memory_line_names_each_device(smollm2):
    split = server_split(str(smollm2), FLAGS, kv_settings(FLAGS))
    reading = ServerMemory(1.0, "http://127.0.0.1:8080", 42, 200 * MiB, 100 * MiB, 100 * MiB, 0, devices=split.devices)
    memory = memory_split([reading])
    assert memory is not None and "RPC0 45.8 MiB" in memory.short_text()
    assert memory.device_lines()[0].startswith("RPC0 (127.0.0.1:50052): layers 0–15, weights 33.8 MiB + KV 12.0 MiB")
