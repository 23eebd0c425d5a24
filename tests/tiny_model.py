"""Write tiny random-weight GGUF models with ggml's own ``gguf`` writer.

They only have to load and run in real llama.cpp (seconds, a few MiB): a byte-fallback SPM
vocabulary and a 2-layer llama. ``sliding_window`` adds the metadata key (the arch stays llama);
``name`` is its ``general.name``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPM_NORMAL, SPM_UNKNOWN, SPM_CONTROL, SPM_BYTE = 1, 2, 3, 6


def write_tiny_llama(path: Path, *, n_layer: int = 2, n_embd: int = 128, n_head: int = 4, n_head_kv: int = 2,
                     n_ff: int = 128, n_ctx_train: int = 4096, seed: int = 0,
                     sliding_window: int | None = None, name: str = "tiny-test-llama") -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    words = ["▁the", "▁a", "▁memory", "▁cliff", "▁cache", "▁token", "▁speed", "▁and", "e", "t", "a", "o"]
    tokens += words
    types = [SPM_UNKNOWN, SPM_CONTROL, SPM_CONTROL] + [SPM_BYTE] * 256 + [SPM_NORMAL] * len(words)
    scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(0)
    if sliding_window:
        w.add_sliding_window(sliding_window)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def tensor(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    n_embd_kv = n_embd // n_head * n_head_kv
    tensor("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    tensor("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", n_embd, n_embd)
        tensor(f"blk.{i}.attn_k.weight", n_embd_kv, n_embd)
        tensor(f"blk.{i}.attn_v.weight", n_embd_kv, n_embd)
        tensor(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        tensor(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
