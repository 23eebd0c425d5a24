"""The event stream: what producers publish and every consumer reads, in one typed union.

Producers (the sampler, a job, an attached server's poller, a recording being replayed, the user
choosing a target) publish these; the store, the recorder, the screens and the headless printers
consume them. What they carry is in :mod:`cliff_tui.records`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cliff_tui.records import (
    NO_GPU,
    AlertLevel,
    BufferSize,
    CgroupReading,
    CpuQuota,
    DecodePhase,
    DeviceLoad,
    FailureKind,
    FoundServer,
    GpuReading,
    KvBlocks,
    ModelInfo,
    NoticeLevel,
    OomKill,
    ProcessReading,
    RamReading,
    RunPhase,
    RunResult,
    RunSettings,
    ServedModel,
    ServerKind,
    ServerRates,
    ServerStatus,
    SlotReading,
    SwapReading,
)

ATTACH_RUN_ID = "attach"  # the run_id of an attached server's DecodeWindows


@dataclass(frozen=True)
class Sample:
    """One reading of every memory tier, bus and clock, taken at ``t`` (Unix seconds)."""

    t: float
    ram: RamReading
    swap: SwapReading
    gpus: tuple[GpuReading, ...] = ()
    gpus_reason: str | None = None
    process: ProcessReading | None = None
    cpu_busy_s: float | None = None  # CPU seconds every core has been busy since boot (all processes)
    cgroup: CgroupReading | None = None  # the followed process's (else this one's) memory limit
    cpu_quota: CpuQuota | None = None  # the followed process's (else this one's) CPU quota, where one is set

    @property
    def no_vram(self) -> str | None:
        """Why there is no VRAM tier, in words; None where there is one."""
        return None if self.gpus else f"No VRAM tier: {self.gpus_reason or NO_GPU}"

    @property
    def ram_capacity_bytes(self) -> int:
        """The RAM tier's size: the cgroup's limit where one applies, else the machine's RAM."""
        return self.cgroup.limit_bytes if self.cgroup is not None else self.ram.total_bytes

    @property
    def ram_used_bytes(self) -> int | None:
        """In use on the RAM tier: the cgroup's usage where its limit applies (None where that usage
        could not be read), else the machine's RAM in use."""
        return self.cgroup.usage_bytes if self.cgroup is not None else self.ram.used_bytes

    @property
    def ram_room_bytes(self) -> int:
        """What the model can still take from RAM: the lesser of the machine's and the cgroup's."""
        room = self.ram.available_bytes
        if self.cgroup is not None and self.cgroup.available_bytes is not None:
            room = min(room, self.cgroup.available_bytes)
        return room


# --- a generation run -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStarted:
    t: float
    run_id: str
    settings: RunSettings
    model: ModelInfo
    n_ctx: int


@dataclass(frozen=True)
class BuffersReported:
    t: float
    run_id: str
    buffers: tuple[BufferSize, ...]


@dataclass(frozen=True)
class RunProgress:
    t: float
    run_id: str
    phase: RunPhase
    depth: int
    depth_target: int
    prefill_tok_s: float | None = None
    eta_s: float | None = None


@dataclass(frozen=True)
class DecodeWindow:
    """A window of decoded tokens: its rate and the spread of per-token rates inside it."""

    t: float
    run_id: str
    phase: DecodePhase
    depth: int
    n_tokens: int
    tok_s: float
    spread_tok_s: float
    major_faults: int | None = None  # pages the decoding process read back, from swap or a file, meanwhile


@dataclass(frozen=True)
class GeneratedText:
    """Generated text; recorded only with ``--record-text``."""

    t: float
    run_id: str
    text: str


@dataclass(frozen=True)
class RunFinished:
    t: float
    result: RunResult


@dataclass(frozen=True)
class RunFailed:
    t: float
    run_id: str
    kind: FailureKind
    message: str
    n_ctx: int | None = None
    depth: int | None = None
    oom: OomKill | None = None  # its process ended by SIGKILL: whether the OOM killer did it


@dataclass(frozen=True)
class TriangulationPlanned:
    t: float
    depths: tuple[int, ...]
    kv_types: tuple[str, ...]
    target: int
    reserve_bytes: int | None
    ram_available_bytes: int | None = None
    vram_total_bytes: tuple[int | None, ...] = ()
    note: str = ""
    ram_tier: str = "RAM (swap beyond)"


@dataclass(frozen=True)
class Alert:
    t: float
    sign: int
    level: AlertLevel
    message: str


@dataclass(frozen=True)
class LogLine:
    t: float
    level: int
    text: str


@dataclass(frozen=True)
class Notice:
    t: float
    text: str
    level: NoticeLevel = "info"


@dataclass(frozen=True)
class TargetChosen:
    """The context the projection is held against, chosen by the user (``t``)."""

    t: float
    target: int


# --- an attached server -----------------------------------------------------------------------


@dataclass(frozen=True)
class ServerReading:
    """What an attached llama-server or Ollama reported at ``t``."""

    t: float
    source: ServerKind
    url: str
    status: ServerStatus
    message: str = ""
    tokens_predicted_total: float | None = None
    tokens_predicted_seconds_total: float | None = None
    prompt_tokens_total: float | None = None
    prompt_seconds_total: float | None = None
    requests_processing: int | None = None
    slots: tuple[SlotReading, ...] = ()
    models: tuple[ServedModel, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)
    rates: ServerRates | None = None  # from its counters' moves up to this reading (None: not measured)
    context_failures: int | None = None  # requests its log says failed for lack of cells (None: unread)
    log: str = ""  # where its log is read, or why it is not
    kv_blocks: KvBlocks | None = None  # a paged KV cache's state (vLLM)


@dataclass(frozen=True)
class MeasuredCapacity:
    """The largest context before the cliff that a triangulation measured for a model, given to
    ``attach --from FILE``: what a server's slots are held against."""

    t: float
    model: str  # the GGUF's file name, or UNKNOWN_MODEL
    kv_type: str
    tier: str
    max_context: int


@dataclass(frozen=True)
class ServersFound:
    """The llama.cpp-family servers found on this machine when ``attach`` looked, busiest first;
    ``attached`` is the URL it follows ("" where none)."""

    t: float
    servers: tuple[FoundServer, ...]
    attached: str = ""


@dataclass(frozen=True)
class ServerMemory:
    """A local server's resident memory at ``t``, split by kind, with the KV cache its model and
    flags size (the theory ``fit`` uses) and the ``--cache-ram`` limit on its prompt cache."""

    t: float
    url: str
    pid: int
    rss_bytes: int
    anon_bytes: int
    file_bytes: int
    shmem_bytes: int
    model_mapped_bytes: int | None = None  # resident pages of the model file
    kv_cache_bytes: int | None = None
    kv_bytes_per_cell: float | None = None
    cache_ram_bytes: int | None = None  # None: no limit (-1) or unknown
    prompt_cache_bytes: int | None = None  # saved prompts + checkpoints now; None: unreadable
    prompt_cache_basis: str = ""  # how that figure was read, or why it could not be
    devices: tuple[DeviceLoad, ...] = ()  # the split over other devices (--rpc), where the flags give it
    devices_note: str = ""  # why there is no split, where the server names devices


Event = (
    Sample
    | RunStarted
    | BuffersReported
    | RunProgress
    | DecodeWindow
    | GeneratedText
    | RunFinished
    | RunFailed
    | TriangulationPlanned
    | TargetChosen
    | Alert
    | LogLine
    | Notice
    | ServerReading
    | MeasuredCapacity
    | ServersFound
    | ServerMemory
)

EVENT_TYPES: dict[str, type[Event]] = {
    "sample": Sample,
    "run_started": RunStarted,
    "buffers": BuffersReported,
    "progress": RunProgress,
    "decode_window": DecodeWindow,
    "text": GeneratedText,
    "run_finished": RunFinished,
    "run_failed": RunFailed,
    "triangulation_planned": TriangulationPlanned,
    "target": TargetChosen,
    "alert": Alert,
    "log": LogLine,
    "notice": Notice,
    "server": ServerReading,
    "measured_capacity": MeasuredCapacity,
    "servers_found": ServersFound,
    "server_memory": ServerMemory,
}

EVENT_NAMES: dict[type[Event], str] = {cls: name for name, cls in EVENT_TYPES.items()}

# Names older recordings wrote, read as today's events.
FORMER_EVENT_NAMES: dict[str, type[Event]] = {"session": ServerReading}
