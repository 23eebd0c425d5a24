"""A Hugging Face model's ``config.json``: the attention shape vLLM sizes its KV cache from.

Read from a local folder (``DIR/config.json``, with the weights' size from its safetensors files),
the file itself, ``hf:owner/name[@rev]`` (the Hub's ``resolve/REV/config.json``, ``HF_ENDPOINT``
honoured) or an http(s) URL to a ``config.json``. Only ``config.json`` goes over the network,
within one deadline and at most ``MAX_CONFIG_BYTES``. Every failure is a :class:`BadInput` line.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cliff_tui.analysis.vllm_fit import FULL, SLIDING, AttentionShape, LayerKind
from cliff_tui.errors import BadInput, read_bytes
from cliff_tui.models.hub import endpoint
from cliff_tui.models.remote import DEFAULT_TIMEOUT, Http, hub_token, origin, shown_url
from cliff_tui.text import inert
from cliff_tui.units import KiB, MiB, fmt_bytes, is_number

MAX_CONFIG_BYTES = 4 * MiB  # real configs are a few KiB; one with a big label map, tens of KiB
CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
_REPO_RE = re.compile(r"^[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)*/[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)*$")
_REV_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,255}$")
_KINDS: dict[str, LayerKind] = {FULL: FULL, SLIDING: SLIDING}
# config keys vLLM reads a model's length from, and RoPE types whose length is already scaled
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_SCALED_ROPE = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
_DEFAULT_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}
_USAGE = "give a model folder with a config.json, the config.json, hf:owner/name[@rev] or its http(s) URL"


@dataclass(frozen=True)
class HfConfig:
    """The fields of a transformer's ``config.json`` that size its KV cache."""

    source: str  # the path or URL read
    name: str  # the folder's or repo's name
    model_type: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    dtype: str | None  # torch_dtype / dtype as written: "bfloat16", "float16", "float32"
    sliding_window: int | None
    layer_types: tuple[LayerKind, ...]  # one per layer
    max_position_embeddings: int | None
    derived_max_len: int | None  # vLLM's default max_model_len: the smallest length key × RoPE factor
    max_len_key: str | None  # the key it came from
    weights_bytes: int | None
    weights_text: str  # where weights_bytes came from, or why it is unknown
    mla: bool = False  # multi-head latent attention: one latent vector per token and layer, no K/V pair

    def shape(self) -> AttentionShape:
        return AttentionShape(
            layers=self.layer_types,
            kv_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            dtype=self.dtype,
            sliding_window=self.sliding_window,
            mla=self.mla,
            max_position_embeddings=self.derived_max_len,
        )


def is_hf_spec(spec: str | None) -> bool:
    """Whether ``-m`` names an HF model (a folder with a config.json and no GGUF, a config.json, or
    ``hf:…@rev``) rather than a GGUF: what `cliff-tui fit` answers for vLLM without ``--vllm``."""
    if not spec:
        return False
    if spec.startswith("hf:"):
        return "@" in spec
    if spec.startswith(("http://", "https://")):
        return urllib.parse.urlsplit(spec).path.endswith("/" + CONFIG)
    path = Path(spec)
    if path.name == CONFIG:
        return True
    return (path / CONFIG).is_file() and not any(path.glob("*.gguf"))


def read_hf_config(spec: str, *, timeout: float = DEFAULT_TIMEOUT, offline: bool = False) -> HfConfig:
    """The config ``spec`` names (see the module's docstring)."""
    if spec.startswith("hf:"):
        url, name = hub_url(spec[3:])
        return _remote(spec, url, name, timeout, offline)
    if spec.startswith(("http://", "https://")):
        return _remote(spec, spec, _name_from_url(spec), timeout, offline)
    return _local(Path(spec))


def hub_url(text: str) -> tuple[str, str]:
    """``owner/name[@rev]`` → the Hub's URL of its config.json, and the repo."""
    repo, _, rev = text.partition("@")
    if not _REPO_RE.match(repo) or len(repo) > 256 or (rev and (not _REV_RE.match(rev) or ".." in rev)):
        raise BadInput(f"hf:{inert(text)} is not a Hub repo: give hf:owner/name or hf:owner/name@revision")
    return f"{endpoint()}/{repo}/resolve/{urllib.parse.quote(rev or 'main', safe='')}/{CONFIG}", repo


def _local(path: Path) -> HfConfig:
    folder, file = (path, path / CONFIG) if path.is_dir() else (path.parent, path)
    if path.is_dir() and not file.is_file():
        raise BadInput(f"{inert(str(path))} has no {CONFIG}: {_USAGE}")
    if not path.exists():
        raise BadInput(f"model not found: {inert(str(path))} ({_USAGE})")
    if file.suffix.lower() == ".gguf":
        raise BadInput(
            f"{inert(str(path))} is a GGUF: vLLM serves a model folder ({_USAGE}); without --vllm, fit answers for llama.cpp"
        )
    if file.is_file() and file.stat().st_size > MAX_CONFIG_BYTES:
        raise BadInput(f"{inert(str(file))} is {fmt_bytes(file.stat().st_size)}: not a {CONFIG} ({_USAGE})")
    raw = read_bytes(file, "model config")
    weights, text = weights_in(folder) if file.name == CONFIG else (None, "unknown: not in a model folder")
    return parse_config(raw, str(file), folder.resolve().name, weights, text)


def _remote(spec: str, url: str, name: str, timeout: float, offline: bool) -> HfConfig:
    if offline:
        raise BadInput(f"{inert(spec)} is remote and --offline was given: download its {CONFIG} and pass the folder")
    hub = endpoint()
    with Http(timeout, token=hub_token(), token_origin=origin(hub)) as http:
        response, final = http.open(url, {"Accept": "application/json"})
        with response:
            body = http.read(response, MAX_CONFIG_BYTES + 1, final)
    if len(body) > MAX_CONFIG_BYTES:
        raise BadInput(f"{shown_url(url)} sent over {fmt_bytes(MAX_CONFIG_BYTES)}: not a model's {CONFIG}")
    return parse_config(body, shown_url(url), name, None, "unknown: only config.json is read over the network")


def _name_from_url(url: str) -> str:
    parts = [p for p in urllib.parse.urlsplit(url).path.split("/") if p]
    if len(parts) >= 5 and parts[-3] == "resolve":
        return inert("/".join(parts[-5:-3]))
    return inert(parts[-2] if len(parts) >= 2 else urllib.parse.urlsplit(url).netloc)


def weights_in(folder: Path) -> tuple[int | None, str]:
    """The weights' bytes: the safetensors index's ``metadata.total_size``, else the sum of the
    folder's ``*.safetensors`` files."""
    index = folder / INDEX
    if index.is_file():
        total = _index_total(index)
        if total is not None:
            return total, f"{INDEX} metadata.total_size"
    files = sorted(folder.glob("*.safetensors"))
    if files:
        total = sum(f.stat().st_size for f in files)
        return total, f"{len(files)} safetensors file{'s' if len(files) != 1 else ''}"
    return None, "unknown: no safetensors files in the folder"


def _index_total(index: Path) -> int | None:
    try:
        record = json.loads(read_bytes(index, "safetensors index"))
    except (ValueError, RecursionError, BadInput):
        return None
    total = record.get("metadata", {}).get("total_size") if isinstance(record, dict) else None
    return total if isinstance(total, int) and is_number(total) and total > 0 else None


def parse_config(raw: bytes, source: str, name: str, weights: int | None, weights_text: str) -> HfConfig:
    """A ``config.json``'s bytes as an :class:`HfConfig`; :class:`BadInput` for what is not one."""
    where = inert(source)
    try:
        record = json.loads(raw)
    except UnicodeDecodeError:
        raise BadInput(f"{where} is not text, so not a {CONFIG}: {_USAGE}") from None
    except (ValueError, RecursionError):
        raise BadInput(
            f"{where} is not JSON ({fmt_bytes(len(raw)) if len(raw) >= KiB else f'{len(raw)} bytes'}): {_USAGE}"
        ) from None
    if not isinstance(record, dict):
        raise BadInput(f"{where} is JSON but not an object, so not a model's {CONFIG}: {_USAGE}")
    text = record.get("text_config")
    fields = {**record, **text} if isinstance(text, dict) else record
    return _from_fields(fields, record, where, name, weights, weights_text)


def _from_fields(
    fields: dict[str, Any], top: dict[str, Any], where: str, name: str, weights: int | None, weights_text: str
) -> HfConfig:
    model_type = fields.get("model_type") or top.get("model_type")
    layers = _count(fields, "num_hidden_layers", where, ("n_layer", "num_layers"))
    heads = _count(fields, "num_attention_heads", where, ("n_head",))
    kv_heads = _count(fields, "num_key_value_heads", where, ("num_kv_heads", "multi_query_group_num"), default=heads)
    mla = is_number(fields.get("kv_lora_rank"))
    head_dim = _mla_dim(fields, where) if mla else _head_dim(fields, heads, where)
    window = _window(fields)
    derived, key = derived_max_len(fields)
    return HfConfig(
        source=where,
        name=inert(name),
        model_type=inert(str(model_type)) if isinstance(model_type, str) else "unknown",
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=1 if mla else kv_heads,
        head_dim=head_dim,
        dtype=_dtype(fields, top),
        sliding_window=window,
        layer_types=layer_kinds(fields, layers, window, where),
        max_position_embeddings=_optional_count(fields, "max_position_embeddings"),
        derived_max_len=derived,
        max_len_key=key,
        weights_bytes=weights,
        weights_text=weights_text,
        mla=mla,
    )


def _count(
    fields: dict[str, Any], key: str, where: str, aliases: tuple[str, ...] = (), default: int | None = None
) -> int:
    for name in (key, *aliases):
        value = fields.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
                raise BadInput(f"{where}: {name} is {inert(repr(value), limit=40)}, not a positive whole number")
            return value
    if default is not None:
        return default
    raise BadInput(f"{where} has no {key}: not a transformer's {CONFIG} ({_USAGE})")


def _optional_count(fields: dict[str, Any], key: str) -> int | None:
    value = fields.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**40 else None


def derived_max_len(fields: dict[str, Any]) -> tuple[int | None, str | None]:
    """vLLM's derived max_model_len (``_get_and_verify_max_len``): the smallest of the length keys,
    times the RoPE scaling factor where its type leaves the length unscaled (not Gemma 3's)."""
    found = [(v, k) for k in _LENGTH_KEYS if (v := _optional_count(fields, k)) is not None]
    if not found:
        return None, None
    length, key = min(found)
    factor = _rope_factor(fields)
    return (int(length * factor), key) if factor != 1 else (length, key)


def _rope_factor(fields: dict[str, Any]) -> float:
    if "gemma3" in str(fields.get("model_type", "")):
        return 1.0
    scaling = fields.get("rope_scaling") or fields.get("rope_parameters")
    if not isinstance(scaling, dict):
        return 1.0
    kind = scaling.get("rope_type") or scaling.get("type")
    factor = scaling.get("factor")
    if kind in _SCALED_ROPE or not isinstance(factor, (int, float)) or not is_number(factor) or factor <= 0:
        return 1.0
    return float(factor)


def _head_dim(fields: dict[str, Any], heads: int, where: str) -> int:
    if fields.get("head_dim") is not None:
        return _count(fields, "head_dim", where)
    hidden = _count(fields, "hidden_size", where, ("n_embd", "d_model"))
    if hidden % heads:
        raise BadInput(f"{where}: hidden_size {hidden:,} is not a multiple of num_attention_heads {heads:,}")
    return hidden // heads


def _mla_dim(fields: dict[str, Any], where: str) -> int:
    """MLA caches the compressed latent and the rotary key part per token and layer."""
    return _count(fields, "kv_lora_rank", where) + _count(fields, "qk_rope_head_dim", where)


def _dtype(fields: dict[str, Any], top: dict[str, Any]) -> str | None:
    for record in (fields, top):
        for key in ("dtype", "torch_dtype"):
            value = record.get(key)
            if isinstance(value, str):
                return inert(value.removeprefix("torch."), limit=40)
    return None


def _window(fields: dict[str, Any]) -> int | None:
    if fields.get("use_sliding_window") is False:
        return None
    value = fields.get("sliding_window")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def layer_kinds(fields: dict[str, Any], layers: int, window: int | None, where: str) -> tuple[LayerKind, ...]:
    """Each layer's attention, as the model's vLLM implementation reads the config: ``layer_types``
    where given; else ``sliding_window_pattern`` (every Nth layer full; transformers' default is 2
    for Gemma 2, 6 for Gemma 3), Qwen2's ``max_window_layers`` (layers from it on sliding);
    else a ``sliding_window`` applies to every layer (Mistral)."""
    given = fields.get("layer_types")
    if given is not None:
        return _given_kinds(given, layers, where)
    if window is None:
        return (FULL,) * layers
    pattern = fields.get("sliding_window_pattern", _DEFAULT_PATTERN.get(str(fields.get("model_type"))))
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        return tuple(FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers))
    first = fields.get("max_window_layers")
    if fields.get("use_sliding_window") is True and isinstance(first, int) and not isinstance(first, bool):
        return tuple(SLIDING if i >= first else FULL for i in range(layers))
    return (SLIDING,) * layers


def _given_kinds(given: Any, layers: int, where: str) -> tuple[LayerKind, ...]:
    if not isinstance(given, list) or len(given) != layers:
        raise BadInput(f"{where}: layer_types does not list one type for each of its {layers:,} layers")
    unknown = sorted({str(k) for k in given if k not in _KINDS})
    if unknown:
        raise BadInput(
            f"{where}: layer type {inert(', '.join(unknown), limit=80)} is not modelled "
            "(cliff-tui fit --vllm knows full and sliding attention only)"
        )
    return tuple(_KINDS[k] for k in given)
