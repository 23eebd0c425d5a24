"""Write tiny random-weight GGUF models with ggml's own ``gguf`` writer.

They only have to load and run in real llama.cpp (well under a second, a few MiB): a byte-fallback
SPM vocabulary and a few layers. One writer per architecture whose KV cache llama.cpp lays out
differently: llama (plain attention; ``sliding_window`` adds the key, the arch stays llama;
``arch="deci"`` for per-layer KV heads), gemma3 (interleaved sliding-window layers), deepseek2
(MLA: one compressed K row, no V), mamba (a recurrent state per sequence, no per-token cache)
and jamba (a hybrid of the two). ``f16`` stores the weight matrices as F16 (half the file;
norms stay F32); ``name`` is the model's ``general.name``; ``split_max_tensors`` writes a split
model as gguf-split does (``NAME-00001-of-0000N.gguf``, the first part's path returned).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SPM_NORMAL, SPM_UNKNOWN, SPM_CONTROL, SPM_BYTE = 1, 2, 3, 6
WORDS = ["▁the", "▁a", "▁memory", "▁cliff", "▁cache", "▁token", "▁speed", "▁and", "e", "t", "a", "o"]
N_VOCAB = 3 + 256 + len(WORDS)


class _Model:
    """A GGUFWriter with the shared header, vocabulary and random tensors."""

    def __init__(
        self, path: Path, arch: str, name: str, seed: int, f16: bool = False, split_max_tensors: int = 0
    ) -> None:
        import gguf

        self.rng = np.random.default_rng(seed)
        self.w = gguf.GGUFWriter(str(path), arch, split_max_tensors=split_max_tensors)
        self.arch = arch
        self.path = path
        self.w.add_name(name)
        self.w.add_file_type(1 if f16 else 0)  # LLAMA_FTYPE_MOSTLY_F16 / ALL_F32
        self.dtype = np.float16 if f16 else np.float32
        self._vocab()

    def _vocab(self) -> None:
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + WORDS
        types = [SPM_UNKNOWN, SPM_CONTROL, SPM_CONTROL] + [SPM_BYTE] * 256 + [SPM_NORMAL] * len(WORDS)
        self.w.add_tokenizer_model("llama")
        self.w.add_token_list(tokens)
        self.w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(WORDS))])
        self.w.add_token_types(types)
        self.w.add_bos_token_id(1)
        self.w.add_eos_token_id(2)
        self.w.add_unk_token_id(0)

    def uint(self, key: str, value: int) -> None:
        self.w.add_uint32(f"{self.arch}.{key}", value)

    def random(self, name: str, *shape: int) -> None:
        """``shape`` in numpy order: the reverse of ggml's {ne0, ne1, ...}."""
        self.w.add_tensor(name, (self.rng.standard_normal(shape) * 0.05).astype(self.dtype))

    def ones(self, name: str, n: int) -> None:
        self.w.add_tensor(name, np.ones(n, dtype=np.float32))

    def embeddings(self, n_embd: int) -> None:
        self.random("token_embd.weight", N_VOCAB, n_embd)
        self.ones("output_norm.weight", n_embd)
        self.random("output.weight", N_VOCAB, n_embd)

    def finish(self) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self.w.format_shard_names(self.path)[0]


def _per_layer(value: int | Sequence[int], n_layer: int) -> list[int]:
    return [value] * n_layer if isinstance(value, int) else list(value)


def write_tiny_llama(
    path: Path,
    *,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    n_head_kv: int | Sequence[int] = 2,
    n_ff: int = 128,
    n_ctx_train: int = 4096,
    seed: int = 0,
    sliding_window: int | None = None,
    arch: str = "llama",
    f16: bool = False,
    name: str | None = None,
    split_max_tensors: int = 0,
    rope_scaling: tuple[str, float, int] | None = None,
) -> Path:
    """``n_head_kv`` may be one count per layer with ``arch="deci"`` (Nemotron-NAS, the llama
    layout whose loader sizes each layer from its own count); ``rope_scaling`` is the header's
    (type, factor, original context), as a long-context release writes it."""
    m = _Model(path, arch, name or f"tiny-test-{arch}", seed, f16, split_max_tensors)
    kv_heads = _per_layer(n_head_kv, n_layer)
    head_dim = n_embd // n_head
    m.w.add_block_count(n_layer)
    m.w.add_context_length(n_ctx_train)
    m.w.add_embedding_length(n_embd)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(kv_heads[0] if isinstance(n_head_kv, int) else kv_heads)
    m.w.add_layer_norm_rms_eps(1e-5)
    m.w.add_rope_dimension_count(head_dim)
    if sliding_window:
        m.w.add_sliding_window(sliding_window)
    if rope_scaling:
        import gguf

        kind, factor, original = rope_scaling
        m.w.add_rope_scaling_type(gguf.RopeScalingType(kind))
        m.w.add_rope_scaling_factor(factor)
        m.w.add_rope_scaling_orig_ctx_len(original)
    m.embeddings(n_embd)
    for i in range(n_layer):
        _attention(m, i, n_embd, n_head * head_dim, head_dim * kv_heads[i])
        _ffn(m, i, n_embd, n_ff)
    return m.finish()


def write_tiny_gemma3(
    path: Path,
    *,
    n_layer: int = 8,
    n_embd: int = 128,
    n_head: int = 2,
    n_head_kv: int = 1,
    head_dim: int = 64,
    n_ff: int = 128,
    n_ctx_train: int = 8192,
    sliding_window: int = 128,
    swa_period: int | None = None,
    seed: int = 0,
) -> Path:
    """Gemma 3: five sliding-window layers then one global (llama.cpp's default period of 6)."""
    m = _Model(path, "gemma3", "tiny-test-gemma3", seed)
    m.w.add_block_count(n_layer)
    m.w.add_context_length(n_ctx_train)
    m.w.add_embedding_length(n_embd)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(n_head_kv)
    m.w.add_key_length(head_dim)
    m.w.add_value_length(head_dim)
    m.w.add_layer_norm_rms_eps(1e-6)
    m.w.add_sliding_window(sliding_window)
    if swa_period is not None:
        m.uint("attention.sliding_window_pattern", swa_period)
    m.embeddings(n_embd)
    for i in range(n_layer):
        _attention(m, i, n_embd, n_head * head_dim, n_head_kv * head_dim)
        m.ones(f"blk.{i}.post_attention_norm.weight", n_embd)
        m.ones(f"blk.{i}.attn_k_norm.weight", head_dim)
        m.ones(f"blk.{i}.attn_q_norm.weight", head_dim)
        _ffn(m, i, n_embd, n_ff)
        m.ones(f"blk.{i}.post_ffw_norm.weight", n_embd)
    return m.finish()


def write_tiny_deepseek2(
    path: Path,
    *,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    kv_lora_rank: int = 64,
    n_rot: int = 32,
    head_dim_nope: int = 32,
    head_dim_v: int = 32,
    q_lora_rank: int = 64,
    n_ff: int = 128,
    n_ctx_train: int = 4096,
    seed: int = 0,
) -> Path:
    """DeepSeek-2 with MLA as current converters write it: one KV head whose K row is the
    compressed latent (kv_lora_rank + n_rot), the per-head sizes in the ``*_mla`` keys. Every
    layer is a leading dense block (no experts)."""
    m = _Model(path, "deepseek2", "tiny-test-deepseek2", seed)
    head_dim_k_mla = head_dim_nope + n_rot
    m.w.add_block_count(n_layer)
    m.w.add_context_length(n_ctx_train)
    m.w.add_embedding_length(n_embd)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(1)
    m.w.add_key_length(kv_lora_rank + n_rot)
    m.w.add_value_length(kv_lora_rank)
    m.uint("attention.key_length_mla", head_dim_k_mla)
    m.uint("attention.value_length_mla", head_dim_v)
    m.uint("attention.q_lora_rank", q_lora_rank)
    m.uint("attention.kv_lora_rank", kv_lora_rank)
    m.uint("leading_dense_block_count", n_layer)
    m.uint("expert_feed_forward_length", n_ff)
    m.uint("expert_shared_count", 0)
    m.w.add_rope_dimension_count(n_rot)
    m.w.add_layer_norm_rms_eps(1e-6)
    m.embeddings(n_embd)
    for i in range(n_layer):
        blk = f"blk.{i}"
        m.ones(f"{blk}.attn_norm.weight", n_embd)
        m.ones(f"{blk}.attn_q_a_norm.weight", q_lora_rank)
        m.ones(f"{blk}.attn_kv_a_norm.weight", kv_lora_rank)
        m.random(f"{blk}.attn_q_a.weight", q_lora_rank, n_embd)
        m.random(f"{blk}.attn_q_b.weight", n_head * head_dim_k_mla, q_lora_rank)
        m.random(f"{blk}.attn_kv_a_mqa.weight", kv_lora_rank + n_rot, n_embd)
        m.random(f"{blk}.attn_k_b.weight", n_head, kv_lora_rank, head_dim_nope)
        m.random(f"{blk}.attn_v_b.weight", n_head, head_dim_v, kv_lora_rank)
        m.random(f"{blk}.attn_output.weight", n_embd, n_head * head_dim_v)
        _ffn(m, i, n_embd, n_ff)
    return m.finish()


def write_tiny_mamba(
    path: Path,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    d_state: int = 16,
    d_conv: int = 4,
    dt_rank: int = 8,
    n_ctx_train: int = 4096,
    seed: int = 0,
) -> Path:
    """Mamba (1): per layer a convolution state and an SSM state per sequence, no attention."""
    m = _Model(path, "mamba", "tiny-test-mamba", seed)
    d_inner = 2 * n_embd  # the only expansion factor llama.cpp supports
    m.w.add_block_count(n_layer)
    m.w.add_context_length(n_ctx_train)
    m.w.add_embedding_length(n_embd)
    m.w.add_feed_forward_length(0)
    m.w.add_head_count(0)
    m.uint("ssm.conv_kernel", d_conv)
    m.uint("ssm.inner_size", d_inner)
    m.uint("ssm.state_size", d_state)
    m.uint("ssm.time_step_rank", dt_rank)
    m.w.add_layer_norm_rms_eps(1e-5)
    m.embeddings(n_embd)
    for i in range(n_layer):
        m.ones(f"blk.{i}.attn_norm.weight", n_embd)
        _mamba_block(m, i, n_embd, d_inner, d_state, d_conv, dt_rank)
    return m.finish()


def write_tiny_jamba(
    path: Path,
    *,
    n_layer: int = 4,
    n_embd: int = 64,
    n_head: int = 2,
    n_head_kv: int = 1,
    attention_every: int = 2,
    n_ff: int = 128,
    d_state: int = 16,
    d_conv: int = 4,
    dt_rank: int = 8,
    n_ctx_train: int = 4096,
    seed: int = 0,
) -> Path:
    """Jamba, a hybrid: Mamba layers (no KV heads in the per-layer array) and, every
    ``attention_every``-th layer, an attention layer with a per-token cache."""
    m = _Model(path, "jamba", "tiny-test-jamba", seed)
    d_inner = 2 * n_embd
    kv_heads = [n_head_kv if (i + 1) % attention_every == 0 else 0 for i in range(n_layer)]
    m.w.add_block_count(n_layer)
    m.w.add_context_length(n_ctx_train)
    m.w.add_embedding_length(n_embd)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(kv_heads)
    m.uint("ssm.conv_kernel", d_conv)
    m.uint("ssm.inner_size", d_inner)
    m.uint("ssm.state_size", d_state)
    m.uint("ssm.time_step_rank", dt_rank)
    m.w.add_layer_norm_rms_eps(1e-5)
    m.embeddings(n_embd)
    head_dim = n_embd // n_head
    for i, heads in enumerate(kv_heads):
        if heads:
            _attention(m, i, n_embd, n_embd, heads * head_dim)
        else:
            m.ones(f"blk.{i}.attn_norm.weight", n_embd)
            _mamba_block(m, i, n_embd, d_inner, d_state, d_conv, dt_rank, norms=True)
        _ffn(m, i, n_embd, n_ff)
    return m.finish()


def _mamba_block(
    m: _Model, i: int, n_embd: int, d_inner: int, d_state: int, d_conv: int, dt_rank: int, norms: bool = False
) -> None:
    blk = f"blk.{i}"
    m.random(f"{blk}.ssm_in.weight", 2 * d_inner, n_embd)
    m.random(f"{blk}.ssm_conv1d.weight", d_inner, d_conv)
    m.random(f"{blk}.ssm_conv1d.bias", d_inner)
    m.random(f"{blk}.ssm_x.weight", dt_rank + 2 * d_state, d_inner)
    m.random(f"{blk}.ssm_dt.weight", d_inner, dt_rank)
    m.random(f"{blk}.ssm_dt.bias", d_inner)
    if norms:
        m.ones(f"{blk}.ssm_dt_norm.weight", dt_rank)
        m.ones(f"{blk}.ssm_b_norm.weight", d_state)
        m.ones(f"{blk}.ssm_c_norm.weight", d_state)
    m.w.add_tensor(f"{blk}.ssm_a", -np.ones((d_inner, d_state), dtype=np.float32))
    m.ones(f"{blk}.ssm_d", d_inner)
    m.random(f"{blk}.ssm_out.weight", n_embd, d_inner)


def _attention(m: _Model, i: int, n_embd: int, n_q: int, n_kv: int) -> None:
    m.ones(f"blk.{i}.attn_norm.weight", n_embd)
    m.random(f"blk.{i}.attn_q.weight", n_q, n_embd)
    m.random(f"blk.{i}.attn_k.weight", n_kv, n_embd)
    m.random(f"blk.{i}.attn_v.weight", n_kv, n_embd)
    m.random(f"blk.{i}.attn_output.weight", n_embd, n_q)


def _ffn(m: _Model, i: int, n_embd: int, n_ff: int) -> None:
    m.ones(f"blk.{i}.ffn_norm.weight", n_embd)
    m.random(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
    m.random(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
    m.random(f"blk.{i}.ffn_down.weight", n_embd, n_ff)


WRITERS: dict[str, Callable[..., Path]] = {
    "llama": write_tiny_llama,
    "gemma3": write_tiny_gemma3,
    "deepseek2": write_tiny_deepseek2,
    "mamba": write_tiny_mamba,
    "jamba": write_tiny_jamba,
}


def write_tiny(arch: str, folder: Path, **kwargs: Any) -> Path:
    """The tiny model of ``arch`` as ``folder/tiny-<arch>.gguf``."""
    return WRITERS[arch](folder / f"tiny-{arch}.gguf", **kwargs)
