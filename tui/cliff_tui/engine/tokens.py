"""What the prefill reads: a real document (``--prompt-file``) or a fixed built-in text,
repeated to the depth asked for. Deterministic, so runs compare."""

from __future__ import annotations

from pathlib import Path

from cliff_tui.engine.errors import BadInput

BUILTIN_TEXT = """\
A memory hierarchy trades capacity for speed. Registers answer in a cycle, caches in a few,
main memory in a hundred, and a disk in millions. A program that fits in the fast levels runs
at their pace; one that spills into the slow levels runs at theirs, and the change is rarely
gradual. Engineers call the point where the working set outgrows a level a cliff, because the
throughput curve looks like one: flat, then a sudden fall. Graphics processors have the same
shape. Their dedicated memory is wide and close to the compute units; the link to the host is
narrow and far. When a workload outgrows the dedicated memory, the driver may place the excess
in system memory and reach it across the bus, one transfer at a time. Each step still works,
and nothing fails loudly; the work only takes longer, then much longer. The only reliable way
to know where the edge lies for a given machine is to walk toward it with measurements in hand:
note the memory used and the speed reached at several sizes, draw the line through them, and
see where the line meets the capacity of the fast level.
"""

MINIMAL_PROMPT = "The"


def prompt_tokens(model, depth: int, prompt_file: str | None = None) -> list[int]:
    """``depth`` tokens, starting with BOS: the document repeated as often as needed."""
    text = read_prompt_file(prompt_file) if prompt_file else BUILTIN_TEXT
    body = model.tokenize(text, add_bos=False)
    if not body:
        raise BadInput(f"{prompt_file} holds no text to tokenize: pass a real document with --prompt-file")
    out = model.tokenize(text, add_bos=True)  # BOS where the model's vocab asks for one
    while len(out) < depth:
        out.extend(body[: depth - len(out)])
    return out[:depth]


def read_prompt_file(path: str) -> str:
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"prompt file not found: {p}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{p} is not UTF-8 text: --prompt-file takes a text document") from None
    except OSError as exc:
        raise BadInput(f"cannot read {p}: {exc.strerror or exc}") from None
