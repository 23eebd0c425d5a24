"""The records the event stream carries: readings of the machine and of a server, a run's
settings and results, the verdicts. Frozen values, compared and recorded field by field.

A reading that a platform cannot give is ``None`` with a human reason in the record's ``reasons``
mapping, never a fake zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cliff_tui.units import fmt_bytes

# --- the words a record may hold (the codec refuses any other in a recording) ---------------------

FlashAttn = Literal["on", "off", "auto"]
DecodePhase = Literal["baseline", "probe", "depth"]
RunPhase = Literal["load", "baseline", "prefill", "decode", "done"]
FailureKind = Literal["does_not_fit", "bad_input", "cancelled", "error"]
VerdictLevel = Literal["ok", "info", "amber", "red", "unknown"]
CliffLevel = Literal["ok", "info", "amber", "red"]
AlertLevel = Literal["info", "amber", "red", "ok"]
NoticeLevel = Literal["info", "warning"]
ServerKind = Literal["llama-server", "ollama", "vllm"]
ServerStatus = Literal["ok", "unreachable", "no-metrics", "not-llama", "error"]
BufferKind = Literal["model", "kv", "compute", "output", "recurrent"]
GpuVendor = Literal["nvidia", "amd"]
FillMode = Literal["real", "synthetic"]  # how the KV cache reached depth: prefilled, or cells loaded

CGROUP_TIER = "RAM (cgroup limit"  # how a cgroup's RAM tier is named: "RAM (cgroup limit 2 GiB)"
UNKNOWN_MODEL = "unknown"  # a triangulation's file that does not name its model


# --- readings of the machine ------------------------------------------------------------------


@dataclass(frozen=True)
class RamReading:
    used_bytes: int
    total_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class SwapReading:
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    name: str | None
    rss_bytes: int | None
    children_rss_bytes: int | None
    n_children: int = 0
    gpu_used_bytes: int | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    swap_bytes: int | None = None  # this process's memory paged out to swap (Linux: VmSwap)
    cpu_s: float | None = None  # CPU seconds used so far by the process and its children
    major_faults: int | None = None  # pages it has read back from swap or disk so far (Linux)

    @property
    def total_rss_bytes(self) -> int | None:
        if self.rss_bytes is None:
            return None
        return self.rss_bytes + (self.children_rss_bytes or 0)


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None
    shared_bytes: int | None = None  # Windows (WDDM): this process's shared GPU memory


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    vendor: GpuVendor
    vram_used_bytes: int | None
    vram_total_bytes: int | None
    vram_reserved_bytes: int | None = None
    shared_used_bytes: int | None = None
    shared_total_bytes: int | None = None
    util_pct: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    pcie_rx_bytes_s: float | None = None
    pcie_tx_bytes_s: float | None = None
    processes: tuple[GpuProcess, ...] | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    uuid: str | None = None  # NVML's GPU-… identifier: stable across reboots and index reordering


NO_GPU = "no GPU found"  # how every reason for an empty ``gpus`` begins; alone where none was recorded


@dataclass(frozen=True)
class CgroupReading:
    """The memory cgroup a process runs in, where its limit is below the machine's RAM (Docker
    ``--memory``, Kubernetes limits, systemd slices): then the limit is the RAM tier."""

    path: str
    limit_bytes: int
    usage_bytes: int | None
    swap_bytes: int | None = None

    @property
    def available_bytes(self) -> int | None:
        return None if self.usage_bytes is None else max(0, self.limit_bytes - self.usage_bytes)

    @property
    def tier(self) -> str:
        return f"{CGROUP_TIER} {fmt_bytes(self.limit_bytes)})"


@dataclass(frozen=True)
class CpuQuota:
    """The CPU time a process's cgroup may use (Docker ``--cpus``, a Kubernetes CPU limit): ``cpus``
    CPUs' worth each period, set on cgroup ``path``; its periods so far, and those it ran out of
    time in and was throttled (None where cpu.stat could not be read)."""

    path: str
    cpus: float
    periods: int | None = None
    throttled_periods: int | None = None

    @property
    def words(self) -> str:
        """``1 CPU``, ``1.5 CPUs``."""
        return f"{self.cpus:.3g} CPU{'' if self.cpus == 1 else 's'}"


# --- a generation run -------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInfo:
    """What the GGUF header says about a model (no weights loaded)."""

    path: str
    name: str
    size_bytes: int
    architecture: str | None
    n_layer: int | None
    n_head: int | None
    n_head_kv: int | None
    head_dim_k: int | None
    head_dim_v: int | None
    n_ctx_train: int | None
    sliding_window: int | None = None
    file_type: str | None = None
    # What the KV theory needs beyond the textbook formula (None where the header has no key).
    n_embd: int | None = None
    n_vocab: int | None = None
    n_head_kv_layers: tuple[int, ...] | None = None  # the header's per-layer array, when it has one
    n_ff_layers: tuple[int, ...] | None = None
    swa_layers: tuple[bool, ...] | None = None  # attention.sliding_window_pattern written per layer
    swa_period: int | None = None  # attention.sliding_window_pattern written as one number
    head_dim_k_swa: int | None = None
    head_dim_v_swa: int | None = None
    head_dim_k_mla: int | None = None
    head_dim_v_mla: int | None = None
    kv_lora_rank: int | None = None
    n_rot: int | None = None
    n_layer_nextn: int | None = None
    shared_kv_layers: int | None = None
    full_attention_interval: int | None = None
    ssm_conv_kernel: int | None = None
    ssm_inner_size: int | None = None
    ssm_state_size: int | None = None
    ssm_group_count: int | None = None
    wkv_head_size: int | None = None
    token_shift_count: int | None = None
    shortconv_l_cache: int | None = None
    block_weight_bytes: tuple[int, ...] | None = None  # weights of each blk.N, from the tensor table
    output_weight_bytes: int | None = None  # output.weight (token_embd.weight where they are tied)
    # The header's rope scaling (llama.cpp applies it): its type, factor and the context it stretches.
    rope_scaling: str | None = None
    rope_scaling_factor: float | None = None
    rope_scaling_original_ctx: int | None = None


@dataclass(frozen=True)
class RunSettings:
    """llama.cpp's own knobs, named as its flags are."""

    model_path: str
    depth: int
    n_gen: int
    n_ctx: int | None = None
    n_gpu_layers: int = -1
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: FlashAttn = "auto"
    threads: int | None = None
    batch_size: int = 2048
    ubatch_size: int = 512
    prompt_file: str | None = None
    swa_full: bool = False

    @property
    def call_tokens(self) -> int:
        """The most tokens one ``llama_decode`` computes at once: a ubatch, no larger than the batch."""
        return min(self.ubatch_size, self.batch_size)

    @property
    def cache_label(self) -> str:
        """``f16`` when K and V share a type, else ``q8_0/f16``."""
        k, v = self.cache_type_k, self.cache_type_v
        return k if k == v else f"{k}/{v}"


@dataclass(frozen=True)
class BufferSize:
    """One line of llama.cpp's buffer log: ``<device> <kind> buffer size = X MiB``."""

    device: str
    kind: BufferKind
    bytes: int


@dataclass(frozen=True, slots=True)  # thousands kept per attached server
class DecodePoint:
    """Decode speed measured at one depth (KV cells in use)."""

    depth: int
    ms_per_token: float
    n_tokens: int
    phase: DecodePhase = "probe"
    major_faults: int | None = None  # pages the decoding process read back meanwhile (Linux)


@dataclass(frozen=True)
class GpuDelta:
    index: int
    name: str
    baseline_bytes: int | None
    peak_bytes: int | None
    shared_baseline_bytes: int | None
    shared_peak_bytes: int | None
    process_peak_bytes: int | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def delta_bytes(self) -> int | None:
        if self.baseline_bytes is None or self.peak_bytes is None:
            return None
        return self.peak_bytes - self.baseline_bytes

    @property
    def shared_delta_bytes(self) -> int | None:
        if self.shared_baseline_bytes is None or self.shared_peak_bytes is None:
            return None
        return self.shared_peak_bytes - self.shared_baseline_bytes


@dataclass(frozen=True)
class SpeedVerdict:
    """Sign 3: the measured slowdown set against the decline that depth alone explains."""

    level: VerdictLevel
    text: str
    raw_drop_pct: float | None
    expected_tok_s: float | None
    drop_vs_expected_pct: float | None
    knee_depth: int | None = None
    cause: str | None = None


@dataclass(frozen=True)
class OomKill:
    """A run's process ended by SIGKILL, and what says whether the out-of-memory killer did it.

    ``confirmed``: the memory cgroup's own count of OOM kills rose while it ran (``by_cgroup``), or
    the kernel's log names its PID (``by_kernel_log``); None in either: not readable here."""

    pid: int
    confirmed: bool
    by_cgroup: bool | None
    by_kernel_log: bool | None
    cgroup_path: str | None
    limit_bytes: int | None  # the memory limit that applied to it (None: no cgroup limit)
    limit_path: str | None
    last_rss_bytes: int | None  # its resident memory, last read before it died
    depth: int | None  # the depth its context had reached

    @property
    def tier(self) -> str:
        return f"RAM (cgroup limit {fmt_bytes(self.limit_bytes)})" if self.limit_bytes else "RAM"

    @property
    def words(self) -> str:
        """What is known, and nothing more."""
        at = f" at depth {self.depth:,}" if self.depth is not None else ""
        rss = f"RSS {fmt_bytes(self.last_rss_bytes)}" if self.last_rss_bytes else "RSS unknown"
        limit = (
            f" of limit {fmt_bytes(self.limit_bytes)} (cgroup {self.limit_path})"
            if self.limit_bytes
            else " (no cgroup limit: the machine's RAM)"
        )
        if not self.confirmed:
            why = "neither the cgroup's OOM count nor the kernel's log could be read"
            if self.by_cgroup is False or self.by_kernel_log is False:
                why = "not the OOM killer by the cgroup's count or the kernel's log"
            return f"the model's process was killed (SIGKILL){at}, last {rss}: {why}"
        return f"OOM-killed{at} at {rss}{limit}"


@dataclass(frozen=True)
class CliffEvidence:
    """One sign's part in the verdict: what fired, when, at which depth, by how much."""

    sign: int
    level: CliffLevel
    text: str
    t: float | None = None
    depth: int | None = None
    tier: str | None = None
    amount_bytes: int | None = None
    pct: float | None = None


@dataclass(frozen=True)
class CliffVerdict:
    """The one answer of a run, live or final, from all three signs.

    red: a memory sign fired (the tier is named, and the depth where it did); amber: decode fell
    beyond its own trend for a measured reason other than memory; info: what was seen that is not
    this model's cliff; ok: nothing."""

    level: CliffLevel
    text: str
    tier: str | None = None
    depth: int | None = None
    evidence: tuple[CliffEvidence, ...] = ()


@dataclass(frozen=True)
class RunResult:
    """The measurements of one context: memory peak − baseline, speed baseline → depth."""

    run_id: str
    settings: RunSettings
    model_name: str
    n_ctx: int
    depth: int
    n_gen: int
    kv_device: str | None
    kv_buffers: dict[str, int]
    model_buffers: dict[str, int]
    compute_buffers: dict[str, int]
    baseline_tok_s: float | None
    depth_tok_s: float | None
    prefill_tok_s: float | None
    prefilled_tokens: int
    decode_points: tuple[DecodePoint, ...]
    verdict: SpeedVerdict
    ram_baseline_bytes: int
    ram_peak_bytes: int
    swap_baseline_bytes: int
    swap_peak_bytes: int
    rss_created_bytes: int | None
    rss_baseline_bytes: int | None
    rss_peak_bytes: int | None
    rss_noise_bytes: float | None
    gpus: tuple[GpuDelta, ...]
    gpus_reason: str | None
    elapsed_s: float
    started_from_depth: int = 0
    cliff: CliffVerdict | None = None  # None in recordings made before the one verdict existed
    fill: FillMode = "real"

    @property
    def drop_pct(self) -> float | None:
        return self.verdict.raw_drop_pct

    @property
    def ram_delta_bytes(self) -> int:
        return self.ram_peak_bytes - self.ram_baseline_bytes

    @property
    def swap_delta_bytes(self) -> int:
        return self.swap_peak_bytes - self.swap_baseline_bytes

    @property
    def allocated_bytes(self) -> int:
        """Everything llama.cpp said it allocated (model + KV + compute, all devices)."""
        return sum(self.model_buffers.values()) + sum(self.kv_buffers.values()) + sum(self.compute_buffers.values())


# --- an attached server -----------------------------------------------------------------------


@dataclass(frozen=True)
class SlotReading:
    id: int
    n_ctx: int | None
    tokens_used: int | None
    processing: bool | None


@dataclass(frozen=True)
class KvBlocks:
    """A paged KV cache as vLLM reports it: the share of its blocks in use, its size in tokens, and
    what its scheduler does when they run out (preempts running requests, queues new ones)."""

    usage: float  # 0–1 of the blocks in use
    capacity_tokens: int | None  # blocks × block size (cache_config_info kv_cache_size_tokens)
    block_size: int | None
    blocks: int | None
    memory_bytes: int | None  # the KV space the engine was given (cache_config_info)
    preemptions_total: float | None
    running: int | None
    waiting: int | None
    waiting_for_capacity: int | None  # waiting because no blocks are free (by reason "capacity")
    max_model_len: int | None  # /v1/models
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None

    @property
    def tokens_used(self) -> int | None:
        return round(self.usage * self.capacity_tokens) if self.capacity_tokens else None


@dataclass(frozen=True)
class DeviceLoad:
    """What one device of a server's split holds, as the theory places it from the server's flags
    and its model's header: the layers, their weights and their KV cache."""

    name: str  # as llama.cpp names it: RPC0, CUDA1
    endpoint: str  # an rpc-server's host:port; "" for a local device
    layers: str  # "layers 0–15 + output"
    weights_bytes: int
    kv_bytes: int


@dataclass(frozen=True)
class ServerSetting:
    """One setting of a found server, and where it was read: ``command line (-c 16384)``,
    ``environment (LLAMA_ARG_CTX_SIZE)``, ``/props``, or ``default (not given)``."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class FoundServer:
    """A llama.cpp-family server found on this machine: by its process, or by a default port."""

    kind: str  # llama-server, ollama runner, llama-cpp-python, lm-studio, ollama
    url: str
    how: str  # how it was found, in words
    pid: int | None = None
    # as its API answered: ok, no-metrics, unreachable, not-llama, error, listed; named: not read yet
    status: str = "ok"
    message: str = ""
    settings: tuple[ServerSetting, ...] = ()
    unreadable: str = ""  # what could not be read about it, and why
    tokens_held: int = 0  # cells its slots hold (how busy it is)
    processing: int = 0  # requests it runs now

    def setting(self, name: str) -> ServerSetting | None:
        return next((s for s in self.settings if s.name == name), None)


@dataclass(frozen=True)
class ServedModel:
    name: str
    size_bytes: int | None
    size_vram_bytes: int | None
    context_length: int | None


@dataclass(frozen=True)
class ServerRates:
    """Decode and prompt tok/s from the deltas of a server's cumulative counters (llama-server's
    ``/metrics``), or the reason there are none."""

    decode_tok_s: float | None
    prompt_tok_s: float | None
    decode_reason: str | None
    prompt_reason: str | None
