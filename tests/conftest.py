from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paths import CHILD_BYTES

# Snapshots are rendered in colour with the default theme: a user's NO_COLOR/TEXTUAL_THEME must
# not leak into them (pytest-textual-snapshot compares exact SVGs).
for _var in ("NO_COLOR", "TEXTUAL_THEME", "FORCE_COLOR"):
    os.environ.pop(_var, None)

# Fixtures kept in tests/support (on pytest's pythonpath), each module a plugin of its own.
pytest_plugins = ["cgroup_fixtures", "llama_server"]

# Fixtures that load SmolLM2: a test using one, directly or through another fixture, is marked model.
MODEL_FIXTURES = {"smollm2", "real_llama_server"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unmarked = [
        item.nodeid
        for item in items
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("model") is None
    ]
    if unmarked:
        raise pytest.UsageError(f"these load SmolLM2 without @pytest.mark.model: {', '.join(unmarked)}")


@pytest.fixture(scope="module")
def child():
    """A real Python child holding ≥ 50 MB resident (bytearray zero-fills, so its pages are touched)."""
    code = f"import time; x = bytearray({CHILD_BYTES}); print('ready', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def smollm2() -> Path:
    from cliff_tui.engine.default_model import default_model_path

    return default_model_path()


@pytest.fixture
def server():
    """Start loopback fake servers (``server(llama, metrics_route)``); all stopped after the test."""
    from fakes.http_server import FakeHttpServer

    servers: list[FakeHttpServer] = []

    def make(factory, *args, **kwargs) -> FakeHttpServer:
        servers.append(factory(*args, **kwargs))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()
