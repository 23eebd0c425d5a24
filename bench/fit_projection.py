"""The fit advisor's theory-plus-ratio path against a measured point deeper than the triangulation.

1. `cliff-tui triangulate` of the default model at --depths (f16): the touched line, and the
   touched/allocated ratio of its slope;
2. the fit table's figure for another KV type (q8_0, flash attention on), which has no measured
   line of its own: its theory (what llama.cpp allocates) × that ratio, per token;
3. one real run of that type at a deeper depth, in a fresh process: its touched memory (RSS peak).

Projected touched at the deep run's n_ctx = the f16 line's intercept + n_ctx × theory × ratio.
Goal: within 3 % of the measured point.

    python bench/fit_projection.py [--depths 1k,2k,4k] [--deep 8k] [--kv q8_0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchutil import ROOT, command_line, machine_line

sys.path[:0] = [str(ROOT / "tui")]

from cliff_tui.analysis.fit import MeasuredLine, fit_table  # noqa: E402
from cliff_tui.engine.default_model import default_model_path  # noqa: E402
from cliff_tui.engine.gguf_meta import read_model_info  # noqa: E402
from cliff_tui.units import GiB, fmt_bytes, parse_tokens  # noqa: E402


def cliff(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "cliff_tui", *args], capture_output=True, text=True, timeout=3600,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="1k,2k,4k")
    ap.add_argument("--deep", type=parse_tokens, default=8000)
    ap.add_argument("--kv", default="q8_0")
    args = ap.parse_args()
    print(machine_line())
    print(command_line(__file__))
    t0 = time.monotonic()
    tri = cliff("triangulate", "--headless", "--depths", args.depths, "-fa", "on", "-o", "json")
    slope, intercept = tri["slope_bytes_per_token"], tri["intercept_bytes"]
    ratio = slope["touched"] / slope["allocated"]
    model = read_model_info(default_model_path())
    line = MeasuredLine(slope["touched"], intercept["touched"], "f16", "f16", True)
    table = fit_table(model, 16 * GiB, n_seq=1, touched_ratio=ratio, measured=[line], cache_types=("f16", args.kv))
    option = next(o for o in table.options if o.type_k == args.kv and o.flash_attn and o.valid)
    deep = cliff("run", "--headless", "--depth", str(args.deep), "-ctk", args.kv, "-ctv", args.kv, "-fa", "on",
                 "-o", "json")
    n_ctx = deep["n_ctx"]
    projected = intercept["touched"] + n_ctx * option.bytes_per_token
    measured = deep["touched_bytes"]
    miss = (projected - measured) / measured * 100
    print(f"\nf16 triangulation at {args.depths}: touched {slope['touched'] / 1024:.2f} KiB/token, allocated "
          f"{slope['allocated'] / 1024:.2f}, ratio {ratio:.3f}; intercept {fmt_bytes(intercept['touched'])}")
    print(f"{args.kv}, fa on: {option.basis_text}: {option.bytes_per_token / 1024:.2f} KiB/token")
    print(f"at n_ctx {n_ctx:,}: projected touched {fmt_bytes(projected)}, measured {fmt_bytes(measured)} "
          f"→ miss {miss:+.1f} % (goal ±3 %); {time.monotonic() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
