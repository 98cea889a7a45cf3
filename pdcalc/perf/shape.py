"""A model as a step uses it: parameters split by how a step touches them (replicated, TP-split,
routed, the output head) and the attention and MoE dimensions, read once from the tensor inventory; with the
argument checks every step function shares.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

import numpy as np

from pdcalc.core.errors import ConfigError, LayoutError
from pdcalc.model.config import ModelConfig
from pdcalc.model.inventory import get_inventory


def layer_ratios(cfg: ModelConfig) -> tuple[tuple[int, int], ...]:
    """``(compress_ratio, layers)`` of the main model, in first-appearance order (MTP layers excluded)."""
    return tuple(Counter(cfg.compress_ratios[:cfg.num_hidden_layers]).items())


PHASES = ("prefill", "decode")
BOUNDS = ("compute", "memory", "communication")


MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "deepseek_v4")


# ------------------------------------------------------------------------------ model structure
@dataclass(frozen=True)
class ModelShape:
    """Parameters of the main model by how a step uses them (MTP layers excluded)."""

    model_type: str        # the config's model_type (MODEL_TYPES)
    layers: int            # transformer blocks
    moe_layers: int        # blocks with a routed MoE FFN
    heads: int             # query heads
    hidden: int            # hidden size
    kv_lora_rank: int | None  # d_c (V3)
    rope: int              # d_R
    nope: int | None       # d_nope (V3)
    v_head: int | None     # d_v (V3)
    n_experts: int         # routed experts per MoE layer
    top_k: int             # routed experts per token
    replicated: int        # non-routed, computed in full on every TP card (wq_a, wkv_a, router, norms)
    tp_split: int          # non-routed, split over the TP group (wq_b, wkv_b, wo, dense FFN, shared expert)
    head: int              # output head (split over TP; one row of logits per sequence in prefill)
    routed: int            # all routed experts of all MoE layers
    activated: int         # Inventory.activated()
    config: ModelConfig | None = None  # the model's config (V4 attention reads it)
    c4_layers: int = 0     # V4: ratio-4 layers (with an indexer)
    o_groups: int | None = None       # V4: groups of the grouped output projection
    index_heads: int | None = None    # V4, V3.2: indexer query heads
    index_dim: int | None = None      # V3.2: indexer head width
    index_topk: int | None = None     # V3.2: tokens the indexer selects per query

    @property
    def sparse(self) -> bool:
        """MLA with DeepSeek Sparse Attention (V3.2): a lightning indexer over the whole context."""
        return self.index_dim is not None and not self.v4

    @property
    def v4(self) -> bool:
        return self.model_type == "deepseek_v4"


def model_key(model):
    return model if isinstance(model, str) else None


@cache
def _split_cached(model: str) -> ModelShape:
    return _build_split(model)


def model_shape(model) -> ModelShape:
    key = model_key(model)
    return _split_cached(key) if key is not None else _build_split(model)


def _build_split(model) -> ModelShape:
    inv = get_inventory(model)
    cfg = inv.config
    if cfg is None or cfg.model_type not in MODEL_TYPES:
        raise ConfigError(str(getattr(inv, "name", model)), "model_type",
                          "the throughput model covers models with a config of model_type "
                          + ", ".join(repr(t) for t in MODEL_TYPES))
    repl = tp = head = routed = 0
    for t in inv.tensors:
        if t.part != "main" or t.category in ("embedding", "hash_routing"):   # lookups: one row per token
            continue
        if t.category == "routed_experts":
            routed += t.params
        elif t.category == "lm_head":
            head += t.params
        elif t.shard == "tp":
            tp += t.params
        else:
            repl += t.params
    v4 = cfg.model_type == "deepseek_v4"
    return ModelShape(model_type=cfg.model_type, layers=cfg.num_hidden_layers, moe_layers=cfg.n_moe_layers,
                  heads=cfg.num_attention_heads, hidden=cfg.hidden_size, kv_lora_rank=cfg.kv_lora_rank,
                  rope=cfg.qk_rope_head_dim, nope=cfg.qk_nope_head_dim, v_head=cfg.v_head_dim,
                  n_experts=cfg.n_routed_experts, top_k=cfg.num_experts_per_tok, replicated=repl, tp_split=tp,
                  head=head, routed=routed, activated=inv.activated(), config=cfg,
                  c4_layers=dict(layer_ratios(cfg)).get(4, 0) if v4 else 0,
                  o_groups=cfg.o_groups if v4 else None,
                  index_heads=cfg.index_n_heads if v4 or cfg.sparse else None,
                  index_dim=cfg.index_head_dim if cfg.sparse else None,
                  index_topk=cfg.index_topk if cfg.sparse else None)


def check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise LayoutError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    return phase


def as_array(x, name: str, minimum: float):
    a = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < minimum):
        raise LayoutError(f"{name} must be >= {minimum:g}, got {x!r}")
    return a


def scalar_or_array(x, scalar: bool):
    return float(x) if scalar else x


def check_int(name: str, v, low: int = 1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise LayoutError(f"{name} must be an integer >= {low}, got {v!r}")


def check_eff(name: str, v):
    if not (isinstance(v, (int, float)) and 0 < v <= 1):
        raise LayoutError(f"{name} must be in (0, 1], got {v!r}")
