"""Looking for llama-server and Ollama on their default loopback ports."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from cliff_tui.events import ServerReading
from cliff_tui.probes.endpoints import llama_server, ollama
from cliff_tui.probes.endpoints.llama_server import LLAMA_SERVER, read_llama_server
from cliff_tui.probes.endpoints.ollama import OLLAMA, read_ollama

DEFAULT_URLS = {LLAMA_SERVER: llama_server.DEFAULT_URL, OLLAMA: ollama.DEFAULT_URL}
READERS: dict[str, Callable[..., ServerReading]] = {LLAMA_SERVER: read_llama_server, OLLAMA: read_ollama}


@dataclass(frozen=True)
class Discovery:
    found: dict[str, str]  # source → base URL
    readings: dict[str, ServerReading]  # source → the reading that decided
    message: str


def is_found(reading: ServerReading) -> bool:
    """The server is there (even if it needs a flag); only silence or another program is not."""
    return reading.status not in ("unreachable", "not-llama")


def discover(timeout: float = 1.0, urls: dict[str, str] | None = None) -> Discovery:
    """Look for llama-server on 8080 and Ollama on 11434 (loopback) and say what was found."""
    urls = urls or DEFAULT_URLS
    readings = {source: READERS[source](url, timeout) for source, url in urls.items()}
    found = {source: r.url for source, r in readings.items() if is_found(r)}
    return Discovery(found, readings, describe_discovery(readings))


def describe_discovery(readings: dict[str, ServerReading]) -> str:
    parts = []
    for source, r in readings.items():
        where = urllib.parse.urlsplit(r.url).netloc
        if is_found(r):
            parts.append(f"found {source} at {r.url}" + (f" ({r.status})" if r.status != "ok" else ""))
        else:
            parts.append(f"no {source} on {where} ({r.message})")
    text = "; ".join(parts)
    if not any(is_found(r) for r in readings.values()):
        text += "; pass --llama-server URL or --ollama URL"
    return text
