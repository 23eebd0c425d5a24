from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Snapshots are rendered in colour with the default theme: a user's NO_COLOR/TEXTUAL_THEME must
# not leak into them (pytest-textual-snapshot compares exact SVGs).
for _var in ("NO_COLOR", "TEXTUAL_THEME", "FORCE_COLOR"):
    os.environ.pop(_var, None)

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def smollm2() -> Path:
    from cliff_tui.engine.default_model import default_model_path

    return default_model_path()
