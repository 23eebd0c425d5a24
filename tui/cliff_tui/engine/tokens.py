"""What the prefill reads: a real document (``--prompt-file``) or a fixed built-in text,
repeated to the depth asked for. Deterministic, so runs compare."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path

from cliff_tui.errors import BadInput, check_readable, file_error

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
BYTES_PER_TOKEN = 64  # far more than any tokenizer averages over a text: such a prefix holds the depth
SMALLEST_READ = 2**20


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]
    document: str | None  # the --prompt-file, or None for the built-in text
    document_tokens: int  # one copy of the text, BOS included

    def repetition_note(self) -> str | None:
        """Said when a document was shorter than the depth and had to be repeated."""
        if self.document is None or len(self.tokens) <= self.document_tokens:
            return None
        times = len(self.tokens) / self.document_tokens
        return (f"{Path(self.document).name}: {self.document_tokens:,} tokens, repeated ×{times:.2f} "
                f"to reach {len(self.tokens):,}")


def prompt_tokens(model, depth: int, prompt_file: str | None = None) -> Prompt:
    """``depth`` tokens, starting with BOS: the document repeated as often as needed."""
    text = read_prompt_file(prompt_file, depth) if prompt_file else BUILTIN_TEXT
    body = model.tokenize(text, add_bos=False)
    if not body:
        raise BadInput(f"{prompt_file} holds no text to tokenize: pass a real document with --prompt-file")
    out = model.tokenize(text, add_bos=True)  # BOS where the model's vocab asks for one
    one_copy = len(out)
    while len(out) < depth:
        out.extend(body[: depth - len(out)])
    return Prompt(out[:depth], prompt_file, one_copy)


def read_prompt_file(path: str, depth: int) -> str:
    """The document, as far as ``depth`` tokens can reach into it: a file of gigabytes, or a pipe
    that never ends, is read no further."""
    p = Path(path)
    check_readable(p, "prompt file")
    limit = max(depth * BYTES_PER_TOKEN, SMALLEST_READ)
    try:
        with p.open("rb") as f:
            data = f.read(limit)
    except OSError as exc:
        raise file_error(exc, p, "prompt file") from None
    try:  # a character cut at the limit is left out, not an error
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=len(data) < limit)
    except UnicodeDecodeError:
        raise BadInput(f"{p} is not UTF-8 text: --prompt-file takes a text document") from None
