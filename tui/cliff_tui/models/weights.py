"""A model's weights as llama.cpp places them layer by layer: the tensor table of a local GGUF, or
what a remote header's summary keeps of it."""

from __future__ import annotations

from pathlib import Path

from cliff_tui.analysis.devices import ModelWeights, WeightTensor, model_weights, weights_from_info
from cliff_tui.engine.gguf_meta import read_local_header, tensor_sizes
from cliff_tui.errors import BadInput
from cliff_tui.records import ModelInfo


def split_weights(model: ModelInfo, location: str | None) -> ModelWeights:
    """Each tensor's bytes (the gap to the next offset) of a local single-file GGUF; the per-layer
    totals of the header's summary otherwise."""
    if location and Path(location).is_file():
        header = read_local_header(location)
        sizes = tensor_sizes(list(header.tensors), header.size - header.data_start)
        offsets = dict(header.tensors)
        tensors = [WeightTensor(n, size, offset=header.data_start + offsets[n]) for n, size in sizes.items()]
        if any(n.startswith("blk.") for n in sizes):
            return model_weights(tensors, model.n_layer or 0)
    weights = weights_from_info(model)
    if weights is None:
        raise BadInput(f"{model.name}: the header has no per-layer tensor table to split (a split GGUF?)")
    return weights
