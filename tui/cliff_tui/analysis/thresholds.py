"""Every threshold the detectors use, in one place."""

from cliff_tui.units import MiB

# Sign 1: shared VRAM (or swap, on a CPU-only run) above its baseline by more than this is a spill.
SHARED_SPILL_BYTES = 64 * MiB
SWAP_SPILL_BYTES = 64 * MiB
# ... and only a cliff while the model reads its pages back: this many major faults a second of
# generating (4 KiB each). Pages put in swap as the cache was created and left there cost nothing.
SWAP_IN_FAULTS_PER_S = 256.0
# Where a decode window counted its own faults: this many a token (256 KiB read back per token).
SWAP_IN_FAULTS_PER_TOKEN = 64.0

# Sign 2: system RAM "rising" over a sliding window.
RAM_TREND_WINDOW_S = 20.0
RAM_RISE_BYTES_PER_S = 4 * MiB
RAM_RISE_MIN_BYTES = 128 * MiB

# Sign 3: decode speed against the run's own depth trend (the local line through the deepest probes).
SPEED_AMBER_PCT = 10.0  # ~10 % can be throttling or background load
SPEED_RED_PCT = 50.0  # a raw drop this large with too few probes to judge is worth a word
FIT_MIN_POINTS = 3  # fewer points than this: compare against the baseline only
LOCAL_FIT_POINTS = 4  # the trend at depth: a line through the deepest this many probes
SPEED_NOISE_SIGMAS = 3.0  # a run whose own probes scatter by ±x % cannot flag less than 3x
CONFIRMING_WINDOWS = 2  # windows at depth beyond the band before the run is: one slow window never is
BEND_SLOPE_GROWTH = 2.0  # the deep probes' slope this many times the shallow ones': decode bends up
LOAD_CORES = 0.3  # other processes' CPU use, in cores, that can slow a decode
THROTTLED_SHARE = 0.1  # a cgroup's CPU periods that ran out of quota: the run stalled to each one's end
THROTTLED_MIN_PERIODS = 20  # periods (100 ms each by default) before that share is read
# A triangulation's decode at depth has measured enough once this many windows in a row lie
# within this share of their median (and none of them paged): closer than sign 3's amber, so more
# tokens would move no verdict.
STEADY_WINDOWS = 3
STEADY_WINDOW_SPREAD = 0.10

# A tier is full when this much of it is in use (VRAM), or this little of it is left (RAM).
TIER_FULL = 0.98

# Triangulation: the third point is "on the line" when its miss is within this many noise sigmas,
# and never stricter than the relative floor (allocator rounding, page granularity).
THIRD_POINT_SIGMAS = 4.0
THIRD_POINT_FLOOR_PCT = 2.0
# llama.cpp's allocation is exact but for the page rounding of its buffers.
ALLOCATED_FLOOR_BYTES = MiB
ALLOCATED_FLOOR_PCT = 0.5

# Projection: what to keep free on the cliff tier unless --reserve says otherwise.
DEFAULT_RESERVE_FRACTION = 0.05
DEFAULT_RESERVE_MIN_BYTES = 256 * MiB


DEFAULT_RESERVE_MAX_FRACTION = 0.1  # a small tier (a container's memory limit) keeps no more than this


def default_reserve(capacity: int, container: bool = False) -> int:
    """What to keep free on the cliff tier unless the user says otherwise; ``container``: the
    tier is a memory cgroup's limit, often far below a machine's RAM, where the machine's floor
    would keep all of it: a tenth of it at most."""
    floor = DEFAULT_RESERVE_MIN_BYTES
    if container:
        floor = min(floor, int(capacity * DEFAULT_RESERVE_MAX_FRACTION))
    return max(floor, int(capacity * DEFAULT_RESERVE_FRACTION))


# The cliff gauge turns amber at this share of the largest context before the cliff.
GAUGE_AMBER = 0.9
POOL_FAILURE_HOLD_S = 60.0  # the context-pool gauge stays red this long after a request failed for cells
PREEMPTION_WINDOW_S = 60.0  # a vLLM gauge is red while its preemptions rose within this
POOL_GROWTH_WINDOW_S = 120.0  # the pool's growth rate (time to full) over this window

# Colour bands of a tier's fill in the sparklines.
FILL_AMBER = 0.80
FILL_RED = 0.95
