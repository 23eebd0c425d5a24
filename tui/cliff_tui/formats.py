"""The formats the headless commands and ``export`` write: a module of their own, so that the
command line can offer them without loading the writers."""

from __future__ import annotations

from typing import Literal

OutputFormat = Literal["md", "csv", "json", "jsonl"]
FORMATS: tuple[OutputFormat, ...] = ("md", "csv", "json", "jsonl")
