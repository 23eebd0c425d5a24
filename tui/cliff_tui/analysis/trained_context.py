"""A context past the one the model was trained to (the header's ``context_length``): memory may
hold it, but the model was not trained that long, and answers degrade past it. Wherever a largest
context or a projection passes it, the answer says so, naming the header's rope scaling where it
has one (llama.cpp applies it from the header; its flags say what it is).
"""

from __future__ import annotations

from cliff_tui.records import ModelInfo


def rope_flags(model: ModelInfo) -> str | None:
    """The header's rope scaling as llama.cpp's flags, or None where the header has none."""
    if not model.rope_scaling:
        return None
    flags = [f"--rope-scaling {model.rope_scaling}"]
    if model.rope_scaling_factor:
        flags.append(f"--rope-scale {model.rope_scaling_factor:g}")
    if model.rope_scaling_original_ctx and model.rope_scaling == "yarn":
        flags.append(f"--yarn-orig-ctx {model.rope_scaling_original_ctx}")
    return " ".join(flags)


def is_past_trained(model: ModelInfo, n_ctx: int | None) -> bool:
    return bool(model.n_ctx_train and n_ctx and n_ctx > model.n_ctx_train)


def trained_words(model: ModelInfo) -> str:
    """``the trained context (8,192 tokens)``, with the header's rope scaling where it has one."""
    flags = rope_flags(model)
    scaled = f", rope scaling from the header: {flags}" if flags else ", no rope scaling in the header"
    return f"the trained context ({model.n_ctx_train:,} tokens{scaled})"


def past_trained_words(model: ModelInfo) -> str:
    """``past the trained context (…): answers degrade past it`` (the model was not trained longer)."""
    return f"past {trained_words(model)}: answers degrade past it"


def past_trained_note(model: ModelInfo, n_ctx: int | None, what: str) -> str | None:
    """``what`` (e.g. "the largest context 960,768") is past the trained context: the sentence that
    says so, or None where it is not."""
    if not is_past_trained(model, n_ctx):
        return None
    return f"{what} is {past_trained_words(model)}"
