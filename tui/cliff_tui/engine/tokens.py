"""What the prefill reads: a real document (``--prompt-file``) or a fixed built-in text,
repeated to the depth asked for. Deterministic, so runs compare."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
LARGEST_READ = 2**28  # millions of tokens: deeper, the document repeats


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
        return (
            f"{Path(self.document).name}: {self.document_tokens:,} tokens, repeated ×{times:.2f} "
            f"to reach {len(self.tokens):,}"
        )


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


def check_rereadable(path: str) -> None:
    """A triangulation reads the document once per depth, each time in a process of its own: a
    pipe would be empty by the second, or wait for a writer for ever."""
    check_readable(path, "prompt file")
    if not Path(path).is_file():
        raise BadInput(f"{path} is a pipe: triangulate reads the prompt file once per depth, so pass a regular file")


def read_prompt_file(path: str, depth: int) -> str:
    """The document, as far as ``depth`` tokens can reach into it: a file of gigabytes, or a pipe
    that never ends, is read no further."""
    p = Path(path)
    check_readable(p, "prompt file")
    limit = min(max(depth * BYTES_PER_TOKEN, SMALLEST_READ), LARGEST_READ)
    try:
        with p.open("rb") as f:
            data = _read_up_to(f, limit)
    except OSError as exc:
        raise file_error(exc, p, "prompt file") from None
    try:  # a character cut at the limit is left out, not an error
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=len(data) < limit)
    except UnicodeDecodeError:
        raise BadInput(f"{p} is not UTF-8 text: --prompt-file takes a text document") from None


def _read_up_to(f: BinaryIO, limit: int) -> bytes:
    """Read in steps: one read of ``limit`` bytes would reserve them all, for a file of a few."""
    chunks, size = [], 0
    while size < limit and (chunk := f.read(min(SMALLEST_READ, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
