"""The split theory on its own: llama.cpp's layer rule, what each device holds, the largest context
and the split that reaches it, and one line for each mismatch between flags and devices."""

from __future__ import annotations

import itertools
import json
import random
import struct

import pytest

from cliff_tui.analysis.devices import (
    RPC,
    Device,
    ModelWeights,
    SplitFlags,
    WeightTensor,
    context_limit,
    model_weights,
    parse_tensor_split,
    place,
    plan_lines,
    plan_record,
    rpc_devices,
    server_command,
    server_split,
    split_fractions,
    split_plan,
    suggest_split,
    weights_from_info,
)
from cliff_tui.analysis.theory import CUDA, KvSettings, kv_bytes_by_layer
from cliff_tui.errors import BadInput
from cliff_tui.records import ModelInfo
from cliff_tui.units import MiB

LAYER_BYTES = 3 * MiB
EMBD_BYTES = 8 * MiB
KV_PER_TOKEN_LAYER = 2 * 2 * 64 * 2  # K and V, 2 heads × 64, f16


def model_info(n_layer: int = 8) -> ModelInfo:
    return ModelInfo(
        path="m.gguf",
        name="m",
        size_bytes=n_layer * LAYER_BYTES + EMBD_BYTES,
        architecture="llama",
        n_layer=n_layer,
        n_head=4,
        n_head_kv=2,
        head_dim_k=64,
        head_dim_v=64,
        n_ctx_train=32768,
        n_embd=256,
        n_vocab=1000,
    )


def tensors(n_layer: int = 8, tied: bool = True, rope: bool = False) -> list[WeightTensor]:
    out = [WeightTensor("token_embd.weight", EMBD_BYTES, offset=0)]
    for il in range(n_layer):
        base = EMBD_BYTES + il * LAYER_BYTES
        out += [
            WeightTensor(f"blk.{il}.attn_q.weight", LAYER_BYTES - 1024, offset=base),
            WeightTensor(f"blk.{il}.attn_norm.weight", 1024, offset=base + LAYER_BYTES - 1024),
        ]
    end = EMBD_BYTES + n_layer * LAYER_BYTES
    out.append(WeightTensor("output_norm.weight", 1024, offset=end))
    if not tied:
        out.append(WeightTensor("output.weight", EMBD_BYTES, offset=end + 1024))
    if rope:
        out.append(WeightTensor("rope_freqs.weight", 128, offset=end + 2048 + EMBD_BYTES))
    return out


def weights(n_layer: int = 8, **kw: bool) -> ModelWeights:
    return model_weights(tensors(n_layer, **kw), n_layer)


def devices(*mib: int) -> tuple[Device, ...]:
    return rpc_devices([f"127.0.0.1:{50052 + i}" for i in range(len(mib))], [m * MiB for m in mib])


def kv(n_ctx: int, **kw: object) -> KvSettings:
    return KvSettings(n_ctx, n_seq=1, **kw)


# --- the layer rule ---------------------------------------------------------------------------


def test_an_even_split_gives_the_first_device_the_extra_layer_and_the_last_the_output():
    """30 layers + output over -ts 1,1: layer il goes where il/31 first falls below a split point."""
    placement = place(devices(1000, 1000), SplitFlags(99, (1.0, 1.0)), 30)
    assert placement.layers_on(0) == tuple(range(16))
    assert placement.layers_on(1) == tuple(range(16, 30))
    assert placement.output_on() == 1


def test_three_to_one_puts_three_quarters_of_the_layers_first():
    placement = place(devices(1000, 1000), SplitFlags(99, (3.0, 1.0)), 30)
    assert len(placement.layers_on(0)) == 24  # il/31 < 0.75
    assert placement.layers_on(1) == tuple(range(24, 30))


def test_layer_counts_as_ts_reproduce_themselves():
    """llama-fit-params prints -ts as layer counts; read back, they give exactly those counts."""
    rng = random.Random(7)
    for _ in range(300):
        n_dev = rng.randint(2, 8)
        n_layer = rng.randint(n_dev, 90)
        cuts = sorted(rng.sample(range(1, n_layer + 1), n_dev - 1))
        counts = [b - a for a, b in zip([0, *cuts], [*cuts, n_layer + 1])]
        placement = place(devices(*[1000] * n_dev), SplitFlags(99, tuple(map(float, counts))), n_layer)
        got = [len(placement.layers_on(i)) + (placement.output_on() == i) for i in range(n_dev)]
        assert got == counts, (counts, n_layer)


def test_split_points_are_float32_as_llama_cpp_computes_them():
    fractions = split_fractions(devices(1, 1, 1), (0.1, 0.2, 0.7))
    as_f32 = [struct.unpack("f", struct.pack("f", x))[0] for x in fractions]
    assert list(fractions) == as_f32
    assert fractions[-1] == 1.0


def test_float32_rounding_moves_a_boundary_layer():
    """0.55/1.55 is 11/31: in float64 layer 11 falls on the split point and goes to RPC1; in float32
    the split point rounds above it, and llama.cpp gives RPC0 12 layers."""
    placement = place(devices(1, 1), SplitFlags(99, (0.55, 1.0)), 30)
    assert len(placement.layers_on(0)) == 12
    assert 0.55 / 1.55 <= 11 / 31 < split_fractions(devices(1, 1), (0.55, 1.0))[0]


def test_without_ts_devices_share_by_free_memory():
    placement = place(devices(300, 500), SplitFlags(99), 30)
    assert len(placement.layers_on(0)) == 12  # il/31 < 3/8
    assert placement.layers_on(1) == tuple(range(12, 30))


def test_partial_offload_keeps_the_first_layers_on_the_host():
    plan = split_plan(model_info(), weights(), devices(1000, 1000), SplitFlags(5, (1.0, 1.0)), kv(1024))
    assert plan.host.layers == (0, 1, 2, 3)
    assert [d.layers for d in plan.devices] == [(4, 5, 6), (7,)]
    assert plan.devices[1].holds_output
    per_layer = kv_bytes_by_layer(model_info(), kv(1024))
    assert per_layer is not None
    assert plan.host.kv_bytes == sum(per_layer[il] for il in range(4))


def test_no_gpu_layers_leave_every_device_empty():
    plan = split_plan(model_info(), weights(), devices(1000, 1000), SplitFlags(0, (1.0, 1.0)), kv(1024))
    assert all(d.weights_bytes == 0 and d.kv_bytes == 0 for d in plan.devices)
    assert plan.host.holds_output and plan.host.layers == tuple(range(8))


# --- what each device holds ---------------------------------------------------------------------


def test_a_tied_output_is_a_second_copy_of_the_embeddings_on_the_output_device():
    plan = split_plan(model_info(), weights(), devices(1000, 1000), SplitFlags(99, (1.0, 1.0)), kv(1024))
    first, last = plan.devices
    assert first.weights_bytes == 5 * LAYER_BYTES
    assert last.weights_bytes == 3 * LAYER_BYTES + 1024 + EMBD_BYTES
    assert plan.host.weights_bytes == EMBD_BYTES
    assert any("second copy" in note for note in plan.notes)


def test_an_untied_output_moves_output_weight_only():
    plan = split_plan(model_info(), weights(tied=False), devices(1000), SplitFlags(99), kv(1024))
    assert plan.devices[0].weights_bytes == 8 * LAYER_BYTES + 1024 + EMBD_BYTES
    assert not any("second copy" in note for note in plan.notes)


def test_rope_frequencies_are_loaded_once_on_every_device_holding_a_layer():
    plan = split_plan(
        model_info(), weights(rope=True), devices(1000, 1000, 1000), SplitFlags(99, (1.0, 1.0, 0.0)), kv(256)
    )
    with_rope = [d.weights_bytes % LAYER_BYTES for d in plan.devices]
    assert with_rope[0] == 128 and plan.devices[2].weights_bytes == 0


def test_the_host_maps_one_file_range_for_its_weights():
    plan = split_plan(model_info(), weights(), devices(1000), SplitFlags(3), kv(1024))
    assert plan.host.layers == tuple(range(6))
    assert plan.host.mapped_bytes == EMBD_BYTES + 6 * LAYER_BYTES
    gapless = model_weights([WeightTensor(t.name, t.nbytes) for t in tensors()], 8)
    assert split_plan(model_info(), gapless, devices(1000), SplitFlags(3), kv(1024)).host.mapped_bytes is None


def test_each_layer_keeps_its_cache_on_its_device():
    settings = kv(2048)
    plan = split_plan(model_info(), weights(), devices(1000, 1000), SplitFlags(99, (1.0, 1.0)), settings)
    per_layer = kv_bytes_by_layer(model_info(), settings, RPC)
    assert per_layer is not None
    assert [d.kv_bytes for d in plan.devices] == [5 * per_layer[0], 3 * per_layer[0]]
    assert per_layer[0] == 2048 * KV_PER_TOKEN_LAYER
    assert plan.devices[0].kv_parts == (("global", 5 * per_layer[0]),)


def test_no_kv_offload_keeps_every_cache_on_the_host():
    flags = SplitFlags(99, (1.0, 1.0), kv_offload=False)
    plan = split_plan(model_info(), weights(), devices(1000, 1000), flags, kv(2048))
    assert [d.kv_bytes for d in plan.devices] == [0, 0]
    assert plan.host.kv_bytes == 8 * 2048 * KV_PER_TOKEN_LAYER


def test_a_cuda_buffer_aligns_to_128_and_pads_quantised_rows_to_512_values():
    q4 = WeightTensor("blk.0.ffn_up.weight", 576 // 32 * 18 * 1536, row_values=576, n_rows=1536, quantised=True)
    assert q4.size_on(RPC) == q4.nbytes
    assert q4.size_on(CUDA) == 497_920  # + a 448-value q4_0 row (252 B), then to 128 B
    norm = WeightTensor("blk.0.attn_norm.weight", 576 * 4, row_values=576)
    assert norm.size_on(CUDA) == 2304
    assert WeightTensor("x", 100).size_on(CUDA) == 128


def test_single_device_mode_takes_the_main_gpu_only():
    plan = split_plan(model_info(), weights(), devices(1000, 1000), SplitFlags(99, (), "none", 1), kv(512))
    assert [d.name for d in plan.devices] == ["RPC1"]
    assert plan.devices[0].layers == tuple(range(8)) and plan.devices[0].holds_output


def test_dev_picks_and_orders_the_devices():
    flags = SplitFlags(99, (1.0, 3.0), device_names=("RPC2", "RPC0"))
    plan = split_plan(model_info(), weights(), devices(1000, 1000, 1000), flags, kv(512))
    assert [d.name for d in plan.devices] == ["RPC2", "RPC0"]
    assert plan.layer_counts() == (3, 6)  # il/9 < 0.25
    none = split_plan(model_info(), weights(), devices(1000), SplitFlags(device_names=()), kv(512))
    assert none.devices == () and none.host.layers == tuple(range(8))


def test_the_record_carries_every_device_and_the_suggestion():
    info, w, devs = model_info(), weights(), devices(40, 60)
    plan = split_plan(info, w, devs, SplitFlags(99, (1.0, 1.0)), kv(1024))
    limit = context_limit(info, w, devs, SplitFlags(99, (1.0, 1.0)), kv(1024), 32768)
    record = plan_record(plan, limit, suggest_split(info, w, devs, kv(1024), 32768))
    assert [d["name"] for d in record["devices"]] == ["RPC0", "RPC1"]
    assert record["first_full"] == "RPC0" and record["flags"] == ["-ngl", "99", "-ts", "1,1"]
    assert record["suggestion"]["flags"][:2] == ["-ngl", "9"]
    json.dumps(record)


def test_plan_lines_show_layers_and_headroom():
    lines = plan_lines(split_plan(model_info(), weights(), devices(100, 100), SplitFlags(99, (1.0, 1.0)), kv(1024)))
    assert lines[1].startswith("RPC0") and "layers 0–4" in lines[1]
    assert "layers 5–7 + output" in lines[2]
    assert lines[3].startswith("host")


# --- one line for each mismatch --------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "n_devices", "line"),
    [
        (
            SplitFlags(99, (1.0, 1.0, 1.0)),
            2,
            r"^-ts has 3 values but 2 devices are in use \(RPC0, RPC1\): give one per device",
        ),
        (SplitFlags(99, (1.0,)), 2, r"^-ts has 1 value but 2 devices"),
        (SplitFlags(device_names=("RPC3",)), 2, r"^-dev names RPC3, which is not among the devices \(RPC0, RPC1\)$"),
        (SplitFlags(split_mode="none", main_gpu=2), 2, r"^-mg 2 with 2 devices: use 0 to 1$"),
        (SplitFlags(split_mode="row"), 2, r"^-sm row: RPC0 has no split buffers"),
        (SplitFlags(split_mode="tensor"), 2, r"^-sm tensor .* is not modelled"),
    ],
)
def test_flags_that_do_not_match_the_devices_say_so_in_one_line(flags, n_devices, line):
    with pytest.raises(BadInput, match=line) as caught:
        split_plan(model_info(), weights(), devices(*[1000] * n_devices), flags, kv(512))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", "has no values"),
        ("1,x", "'x' is not a number"),
        ("1,-1", "is not a proportion"),
        (",".join("1" * 16), "at most 15"),
    ],
)
def test_a_bad_tensor_split_says_what_is_wrong(text, line):
    with pytest.raises(BadInput, match=line):
        parse_tensor_split(text)


def test_tensor_split_takes_commas_and_slashes():
    assert parse_tensor_split("3/1") == (3.0, 1.0)
    assert parse_tensor_split("1,,2 ") == (1.0, 2.0)


def test_a_size_list_must_match_the_endpoints():
    with pytest.raises(BadInput, match="2 --rpc endpoints but 1 device sizes"):
        rpc_devices(["a:1", "b:2"], [1])


def test_the_header_summary_gives_the_layers_without_the_small_tensors():
    info = ModelInfo(
        **{**model_info().__dict__, "block_weight_bytes": (LAYER_BYTES,) * 8, "output_weight_bytes": EMBD_BYTES}
    )
    summary = weights_from_info(info)
    assert summary is not None
    full = split_plan(info, weights(), devices(1000, 1000), SplitFlags(99, (1.0, 1.0)), kv(512))
    short = split_plan(info, summary, devices(1000, 1000), SplitFlags(99, (1.0, 1.0)), kv(512))
    first, last = (d.weights_bytes for d in short.devices)
    assert [d.weights_bytes for d in full.devices] == [first, last + 1024]  # output_norm.weight
    assert weights_from_info(model_info()) is None


def test_a_tensor_table_past_the_header_is_refused():
    with pytest.raises(BadInput, match="names layer 9 but the header has 8 layers"):
        model_weights([WeightTensor("blk.9.attn_q.weight", 1)], 8)
    with pytest.raises(BadInput, match="the header says 8 layers but the tensor table holds 6"):
        split_plan(model_info(), weights(6), devices(1000), SplitFlags(), kv(512))


# --- the largest context, and the split that reaches it ---------------------------------------


def test_the_device_with_least_room_fills_first():
    flags = SplitFlags(99, (1.0, 1.0))
    limit = context_limit(model_info(), weights(), devices(40, 60), flags, kv(1024), 32768)
    assert limit.first_full == "RPC0"
    names = dict(limit.per_device)
    assert limit.max_context == names["RPC0"] < (names["RPC1"] or 0)
    at_limit = split_plan(model_info(), weights(), devices(40, 60), flags, kv(limit.max_context or 0))
    past = split_plan(model_info(), weights(), devices(40, 60), flags, kv((limit.max_context or 0) + 256))
    assert at_limit.fits and not past.fits
    assert past.tightest is not None and past.tightest.name == "RPC0"


def test_a_split_that_cannot_hold_its_weights_has_no_context():
    limit = context_limit(model_info(), weights(), devices(10, 60), SplitFlags(99, (1.0, 1.0)), kv(1024), 32768)
    assert limit.max_context is None and limit.first_full == "RPC0"


def test_compute_buffers_and_reserves_count_against_the_device():
    flags = SplitFlags(99, (1.0, 1.0))
    bare = split_plan(model_info(), weights(), devices(100, 100), flags, kv(1024))
    held = split_plan(model_info(), weights(), devices(100, 100), flags, kv(1024), {"RPC0": 10 * MiB}, 5 * MiB)
    assert held.devices[0].left_bytes == bare.devices[0].left_bytes - 15 * MiB
    assert held.devices[1].left_bytes == bare.devices[1].left_bytes - 5 * MiB


def _best_by_brute_force(infos: ModelInfo, w: ModelWeights, devs: tuple[Device, ...], cap: int) -> int:
    n_all = (infos.n_layer or 0) + 1
    best = 0
    for cuts in itertools.combinations(range(n_all + 1), len(devs) - 1):
        counts = [b - a for a, b in zip([0, *cuts], [*cuts, n_all])]
        limit = context_limit(infos, w, devs, SplitFlags(99, tuple(map(float, counts))), kv(256), cap)
        best = max(best, limit.max_context or 0)
    return best


@pytest.mark.parametrize("sizes", [(40, 60), (60, 40), (30, 30, 40), (45, 20, 25)])
def test_the_suggested_split_reaches_the_largest_context_of_any_split(sizes):
    info, w, devs = model_info(), weights(), devices(*sizes)
    suggestion = suggest_split(info, w, devs, kv(256), 32768)
    assert suggestion.flags is not None and suggestion.plan is not None
    assert suggestion.max_context == _best_by_brute_force(info, w, devs, 32768)
    assert suggestion.plan.fits
    assert suggestion.plan.layer_counts() == tuple(int(v) for v in suggestion.flags.tensor_split)


def test_when_no_split_holds_every_layer_fewer_are_offloaded():
    suggestion = suggest_split(model_info(), weights(), devices(12, 12), kv(256), 8192)
    assert suggestion.flags is not None and suggestion.n_gpu_layers < 9
    assert suggestion.plan is not None and suggestion.plan.fits and suggestion.plan.host.layers
    assert suggestion.text.startswith("no split holds every layer")


def test_when_nothing_fits_the_suggestion_says_so():
    suggestion = suggest_split(model_info(), weights(), devices(1, 1), kv(256), 8192)
    assert suggestion.flags is None
    assert (
        suggestion.text
        == "no split fits: not even the output layer and 256 tokens fit on RPC0, RPC1; run on the CPU (-ngl 0)"
    )


def test_the_command_carries_the_split():
    suggestion = suggest_split(model_info(), weights(), devices(40, 60), kv(256), 4096)
    assert suggestion.flags is not None and suggestion.max_context is not None
    settings = kv(suggestion.max_context, type_k="q8_0", type_v="q8_0", flash_attn="on")
    command = server_command(["-m", "m.gguf"], suggestion.flags, settings, ["127.0.0.1:50052", "127.0.0.1:50053"])
    counts = ",".join(str(c) for c in suggestion.plan.layer_counts()) if suggestion.plan else ""
    assert command == (
        "llama-server -m m.gguf --rpc 127.0.0.1:50052,127.0.0.1:50053 -ngl 9 "
        f"-ts {counts} -c {suggestion.max_context} -ctk q8_0 -ctv q8_0 -fa on"
    )


# --- a running server's command line -----------------------------------------------------------


def test_a_command_line_gives_the_split_and_where_each_value_came_from():
    argv = ["llama-server", "-m", "m.gguf", "--rpc", "h:1,h:2", "-ts", "3,1", "-ngl", "all", "-nkvo", "-c=4096"]
    env = {"LLAMA_ARG_SPLIT_MODE": "layer", "LLAMA_ARG_TENSOR_SPLIT": "1,1", "LLAMA_ARG_CACHE_TYPE_K": "q8_0"}
    read = server_split(argv, env)
    assert read.rpc == ("h:1", "h:2")
    assert read.flags == SplitFlags(-2, (3.0, 1.0), "layer", 0, None, False)
    assert read.n_ctx == 4096 and read.type_k == "q8_0" and read.fit
    assert (read.source("tensor_split"), read.source("split_mode"), read.source("main_gpu")) == (
        "flag",
        "env",
        "default",
    )


def test_dev_none_and_fit_off_are_read():
    read = server_split(["llama-server", "-dev", "none", "--fit", "off", "-sm", "none", "-mg", "1"])
    assert read.flags.device_names == () and not read.fit
    assert read.flags.split_mode == "none" and read.flags.main_gpu == 1


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["-ts"], "-ts at the end of the command line has no value"),
        (["-sm", "rows"], "-sm 'rows': use one of layer, row, none, tensor"),
        (["-ngl", "many"], "-ngl 'many': give a number of layers, auto or all"),
        (["--fit", "maybe"], "--fit 'maybe': use on or off"),
        (["-mg", "x"], "-mg 'x' is not a whole number"),
    ],
)
def test_a_bad_command_line_value_is_one_line(argv, line):
    with pytest.raises(BadInput, match=line):
        server_split(["llama-server", *argv])
