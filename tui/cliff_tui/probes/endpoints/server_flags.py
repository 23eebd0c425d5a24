"""A llama-server's settings read from its command line, its ``LLAMA_ARG_*`` environment and its
``/props``, each with where it came from (llama.cpp ``common/arg.cpp``: a flag on the command line
wins over its environment variable; neither given, the built-in default applies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cliff_tui.records import ServerSetting

TRUE_WORDS = ("1", "true", "on", "yes", "enabled")


@dataclass(frozen=True)
class Flag:
    name: str
    aliases: tuple[str, ...]
    env: str
    default: str
    negations: tuple[str, ...] = ()  # boolean flags: the spellings that turn it off
    boolean: bool = False


FLAGS = (
    Flag("model", ("-m", "--model"), "LLAMA_ARG_MODEL", "none"),
    Flag("host", ("--host",), "LLAMA_ARG_HOST", "127.0.0.1"),
    Flag("port", ("--port",), "LLAMA_ARG_PORT", "8080"),
    Flag("ctx_size", ("-c", "--ctx-size"), "LLAMA_ARG_CTX_SIZE", "0"),
    Flag("parallel", ("-np", "--parallel"), "LLAMA_ARG_N_PARALLEL", "-1"),
    Flag(
        "kv_unified",
        ("-kvu", "--kv-unified"),
        "LLAMA_ARG_KV_UNIFIED",
        "on if -np is auto",
        negations=("-no-kvu", "--no-kv-unified"),
        boolean=True,
    ),
    Flag("cache_type_k", ("-ctk", "--cache-type-k"), "LLAMA_ARG_CACHE_TYPE_K", "f16"),
    Flag("cache_type_v", ("-ctv", "--cache-type-v"), "LLAMA_ARG_CACHE_TYPE_V", "f16"),
    Flag("flash_attn", ("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN", "auto"),
    Flag("n_gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers"), "LLAMA_ARG_N_GPU_LAYERS", "auto"),
    Flag("rpc", ("--rpc",), "LLAMA_ARG_RPC", "none"),
    Flag("device", ("-dev", "--device"), "LLAMA_ARG_DEVICE", "all"),
    Flag("tensor_split", ("-ts", "--tensor-split"), "LLAMA_ARG_TENSOR_SPLIT", "by free memory"),
    Flag("split_mode", ("-sm", "--split-mode"), "LLAMA_ARG_SPLIT_MODE", "layer"),
    Flag("main_gpu", ("-mg", "--main-gpu"), "LLAMA_ARG_MAIN_GPU", "0"),
    Flag("swa_full", ("--swa-full",), "LLAMA_ARG_SWA_FULL", "false", boolean=True),
    Flag("cache_ram", ("-cram", "--cache-ram"), "LLAMA_ARG_CACHE_RAM", "8192"),
    Flag("ctx_checkpoints", ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "LLAMA_ARG_CTX_CHECKPOINTS", "32"),
)
AUTO_SLOTS = 4  # what -np -1 (auto) gives in llama-server
UNITS = {"cache_ram": " MiB"}


def command_line_value(argv: Sequence[str], flag: Flag) -> tuple[str, str] | None:
    """(value, the spelling used), the last one given winning; None when the flag is absent."""
    found: tuple[str, str] | None = None
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        if flag.boolean and arg in flag.aliases:
            found = ("true", arg)
        elif arg in flag.negations:
            found = ("false", arg)
        elif not flag.boolean and name in flag.aliases:
            if eq:
                found = (inline, arg)
            elif i + 1 < len(argv):
                found = (argv[i + 1], f"{arg} {argv[i + 1]}")
    return found


def read_flag(argv: Sequence[str], env: Mapping[str, str], flag: Flag) -> ServerSetting:
    given = command_line_value(argv, flag)
    if given is not None:
        return ServerSetting(flag.name, given[0], f"command line ({given[1].split()[0].split('=')[0]})")
    if flag.env in env:
        value = env[flag.env]
        if flag.boolean:
            value = "true" if value.strip().lower() in TRUE_WORDS else "false"
        return ServerSetting(flag.name, value, f"environment ({flag.env})")
    return ServerSetting(flag.name, flag.default, "default (not given)")


def llama_server_settings(argv: Sequence[str], env: Mapping[str, str], props: Any = None) -> tuple[ServerSetting, ...]:
    """Every setting in :data:`FLAGS`, then what follows from them and from ``/props``: the slots,
    whether the KV cache is one pool, each slot's context and the pool's size."""
    read = {f.name: read_flag(argv, env, f) for f in FLAGS}
    derived = _derived(read, props if isinstance(props, dict) else {})
    return tuple(s for s in read.values() if s.name != "kv_unified") + derived


def _derived(read: dict[str, ServerSetting], props: dict[str, Any]) -> tuple[ServerSetting, ...]:
    out: list[ServerSetting] = []
    slots_props = _int(props.get("total_slots"))
    parallel = _int(read["parallel"].value)
    auto = parallel is None or parallel < 0
    if slots_props is not None:
        slots = ServerSetting("slots", str(slots_props), "/props (total_slots)")
    elif auto:
        slots = ServerSetting("slots", str(AUTO_SLOTS), "default (-np auto gives 4)")
    else:
        slots = ServerSetting("slots", str(parallel), read["parallel"].source)
    out.append(slots)
    unified = read["kv_unified"]
    if unified.source.startswith("default"):
        on = "true" if auto else "false"
        why = "-np is auto" if auto else f"-np {parallel} without --kv-unified"
        unified = ServerSetting("kv_unified", on, f"default ({why})")
    out.append(unified)
    settings = props.get("default_generation_settings")
    slot_ctx = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if slot_ctx is not None:
        out.append(ServerSetting("slot_ctx", str(slot_ctx), "/props (default_generation_settings.n_ctx)"))
    n_slots = _int(slots.value) or 1
    pool = _pool(read["ctx_size"], unified.value == "true", slot_ctx, n_slots)
    if pool is not None:
        out.append(pool)
    return tuple(out)


def _pool(ctx: ServerSetting, unified: bool, slot_ctx: int | None, n_slots: int) -> ServerSetting | None:
    """The cells all slots share: -c where it was given (a unified pool, or the split one's sum),
    else each slot's context times the slots where the cache is split."""
    given = _int(ctx.value)
    if given:
        return ServerSetting("pool_ctx", str(given), ctx.source)
    if slot_ctx is None:
        return None
    if unified:
        return ServerSetting("pool_ctx", str(slot_ctx), "/props (n_ctx of a slot: the model's own context)")
    return ServerSetting("pool_ctx", str(slot_ctx * n_slots), f"/props (n_ctx {slot_ctx} × {n_slots} slots)")


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def setting_text(s: ServerSetting) -> str:
    return f"{s.name} {s.value}{UNITS.get(s.name, '')} ({s.source})"
