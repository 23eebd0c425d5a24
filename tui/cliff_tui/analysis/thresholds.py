"""Every threshold the detectors use, in one place."""

from cliff_tui.units import MiB

# Sign 1: shared VRAM (or swap, on a CPU-only run) above its baseline by more than this is a spill.
SHARED_SPILL_BYTES = 64 * MiB
SWAP_SPILL_BYTES = 64 * MiB

# Sign 2: system RAM "rising" over a sliding window.
RAM_TREND_WINDOW_S = 20.0
RAM_RISE_BYTES_PER_S = 4 * MiB
RAM_RISE_MIN_BYTES = 128 * MiB

# Sign 3: decode speed against the decline that depth alone explains (time/token ≈ a + b·depth).
SPEED_AMBER_PCT = 10.0   # ~10 % can be throttling or background load
SPEED_RED_PCT = 50.0     # ≥ 50 % means the bottleneck moved to memory bandwidth / PCIe
FIT_MIN_POINTS = 3       # fewer points than this: compare against the baseline only
SPEED_NOISE_SIGMAS = 3.0  # a run whose own probes scatter by ±x % cannot flag less than 3x

# Triangulation: the third point is "on the line" when its miss is within this many noise sigmas,
# and never stricter than the relative floor (allocator rounding, page granularity).
THIRD_POINT_SIGMAS = 4.0
THIRD_POINT_FLOOR_PCT = 2.0

# Projection: what to keep free on the cliff tier unless --reserve says otherwise.
DEFAULT_RESERVE_FRACTION = 0.05
DEFAULT_RESERVE_MIN_BYTES = 256 * MiB

# Colour bands of a tier's fill in the sparklines.
FILL_AMBER = 0.80
FILL_RED = 0.95
