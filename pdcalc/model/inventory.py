"""The tensor inventory: every weight tensor of a model, as the reference implementation lays it out.

Each row is one tensor (or ``count`` identical tensors, e.g. the 256 routed experts of one layer) with
its name as in DeepSeek's reference ``inference/model.py``, the layer it belongs to, the module and the
reporting category, the logical shape ``[out, in]``, whether the main model or the MTP module owns it,
and which parallel dimension shards it (``replicated``, ``ep`` for expert parallelism, ``tp`` for tensor
parallelism). Counts, checkpoint bytes (:mod:`pdcalc.model.quant`) and per-card placement all derive from it.

Sources
-------
- DeepSeek-V3: ``deepseek-ai/DeepSeek-V3`` ``inference/model.py`` (classes MLA, MLP, Gate, MoE, Block,
  Transformer) and ``README_WEIGHTS.md`` (the MTP module: ``enorm``, ``hnorm``, ``eh_proj``, one full
  block, ``shared_head.norm``; embedding and output head shared with the main model).
- DeepSeek-V4-Flash: ``deepseek-ai/DeepSeek-V4-Flash`` ``inference/model.py`` (classes Attention,
  Compressor, Indexer, Gate, Expert, MoE, Block, MTPBlock, ParallelHead, Transformer).
- DeepSeek-V4-Pro: the same classes (``model_type`` deepseek_v4), sized by its own ``config.json``; every
  tensor equals the released checkpoint's (``tests/test_v4_pro.py``).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from pdcalc.core.errors import ConfigError
from pdcalc.model.config import ARTICLE_PRESETS, MODEL_NAMES, ModelConfig, load_config

#: Reporting categories, in display order.
CATEGORIES = (
    "routed_experts", "shared_experts", "dense_ffn", "attention", "kv_compressor", "indexer",
    "router", "hash_routing", "norms", "mhc", "embedding", "lm_head", "mtp_proj",
    "non_expert", "all_experts",  # the V3 article's two-way split (article preset only)
)

#: The largest model an inventory holds: 2**53 parameters (about 9.0e15; the released models have
#: about 2**40), so that every count is exact in a float64 and in a pandas int64 column.
MAX_PARAMS = 2**53

#: The config fields whose product sizes each category (named when a model is too large).
_SIZED_BY = {
    "routed_experts": "n_routed_experts x moe_intermediate_size x hidden_size",
    "shared_experts": "n_shared_experts x moe_intermediate_size x hidden_size",
    "dense_ffn": "intermediate_size x hidden_size",
    "embedding": "vocab_size x hidden_size",
    "lm_head": "vocab_size x hidden_size",
    "hash_routing": "vocab_size x num_experts_per_tok",
    "router": "n_routed_experts x hidden_size",
    "mhc": "hc_mult x hc_mult x hidden_size",
}


@dataclass(frozen=True, kw_only=True)
class Tensor:
    """One weight tensor (or ``count`` identical ones) of the inventory."""

    name: str                 # reference-implementation parameter name ({expert} for expert rows)
    layer: int | None         # block index (MTP blocks follow the main ones); None for top-level tensors
    part: str                 # "main" or "mtp"
    module: str               # e.g. "attn", "attn.compressor", "attn.indexer", "ffn.experts", "hc"
    category: str             # one of CATEGORIES
    role: str                 # what quantization rules key on: linear, norm, embedding, head, router, ...
    shape: tuple[int, ...]    # logical shape, [out, in] for linear layers
    count: int = 1            # identical instances (routed experts of one layer)
    shard: str = "replicated" # "replicated", "ep" (split over the EP group), "tp" (split over the TP group)
    dtype: str | None = None  # dtype the reference implementation itself gives this tensor, when fixed
    source: str = ""          # where the shape is defined

    def __post_init__(self):
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r} for {self.name}")
        if self.shard not in ("replicated", "ep", "tp"):
            raise ValueError(f"unknown shard {self.shard!r} for {self.name}")

    @property
    def numel(self) -> int:
        """Elements of one instance."""
        return math.prod(self.shape)

    @property
    def params(self) -> int:
        """Elements of all instances."""
        return self.numel * self.count


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model (plain integers)."""

    total: int        # main model, MTP excluded (the official headline convention)
    activated: int    # per token: all non-routed tensors + top-k / n_routed of the routed experts
    mtp: int          # MTP module's own tensors (shared embedding / head not counted again)
    by_category: dict  # main model, per category


@dataclass(frozen=True)
class Inventory:
    """All tensors of one model."""

    name: str
    source: str
    tensors: tuple[Tensor, ...]
    n_routed_experts: int
    num_experts_per_tok: int
    config: ModelConfig | None = None
    notes: tuple[str, ...] = ()
    num_hidden_layers: int = 0   # blocks of the main model

    def per_layer(self, category: str) -> float:
        """Parameters of ``category`` per main-model block, on average."""
        return self.params(category=category) / self.num_hidden_layers

    def frame(self) -> pd.DataFrame:
        """One row per tensor group, with ``params`` = numel x count."""
        rows = [{
            "name": t.name, "layer": t.layer, "part": t.part, "module": t.module, "category": t.category,
            "role": t.role, "shape": t.shape, "count": t.count, "shard": t.shard, "dtype": t.dtype,
            "numel": t.numel, "params": t.params,
        } for t in self.tensors]
        return pd.DataFrame(rows)

    def params(self, *, part: str = "main", category: str | None = None) -> int:
        """Parameters of ``part`` ("main", "mtp" or "all"), optionally of one category."""
        return sum(t.params for t in self.tensors
                   if (part == "all" or t.part == part) and (category is None or t.category == category))

    def activated(self, *, part: str = "main") -> int:
        """Parameters one token computes with.

        Tensors read by lookup (the embedding table, the hash-routing table) contribute one row per
        token and are left out, as in the official "activated" figures; routed experts count at top-k
        out of the routed experts:

        .. math:: N_\\text{act} = N - N_\\text{lookup} - N_\\text{routed}\\,(1 - k / E)
        """
        routed = self.params(part=part, category="routed_experts")
        lookup = self.params(part=part, category="embedding") + self.params(part=part, category="hash_routing")
        rest = self.params(part=part) - routed - lookup
        return rest + routed * self.num_experts_per_tok // self.n_routed_experts

    def counts(self) -> ParamCounts:
        by_cat = {c: self.params(category=c) for c in CATEGORIES if self.params(category=c)}
        return ParamCounts(total=self.params(), activated=self.activated(), mtp=self.params(part="mtp"),
                           by_category=by_cat)

    def by_category(self, part: str = "main") -> pd.Series:
        """Parameters per category (display order), zero categories dropped."""
        s = pd.Series({c: self.params(part=part, category=c) for c in CATEGORIES}, name="params")
        return s[s > 0]


# --------------------------------------------------------------------------------------------
# DeepSeek-V3 (deepseek_v3)
# --------------------------------------------------------------------------------------------
_V3_SRC = "deepseek-ai/DeepSeek-V3 inference/model.py"


def _v3_block(cfg: ModelConfig, layer: int, part: str, prefix: str) -> list[Tensor]:
    d, h = cfg.hidden_size, cfg.num_attention_heads
    qk_head = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    T = lambda **kw: Tensor(layer=layer, part=part, source=_V3_SRC, **kw)  # noqa: E731
    out: list[Tensor] = []
    a = f"{prefix}.attn"
    if cfg.q_lora_rank:
        out += [
            T(name=f"{a}.wq_a.weight", module="attn", category="attention", role="linear", shape=(cfg.q_lora_rank, d)),
            T(name=f"{a}.q_norm.weight", module="attn", category="attention", role="norm", shape=(cfg.q_lora_rank,)),
            T(name=f"{a}.wq_b.weight", module="attn", category="attention", role="linear",
              shape=(h * qk_head, cfg.q_lora_rank), shard="tp"),
        ]
    else:
        out.append(T(name=f"{a}.wq.weight", module="attn", category="attention", role="linear",
                     shape=(h * qk_head, d), shard="tp"))
    out += [
        T(name=f"{a}.wkv_a.weight", module="attn", category="attention", role="linear",
          shape=(cfg.kv_lora_rank + cfg.qk_rope_head_dim, d)),
        T(name=f"{a}.kv_norm.weight", module="attn", category="attention", role="norm", shape=(cfg.kv_lora_rank,)),
        T(name=f"{a}.wkv_b.weight", module="attn", category="attention", role="linear",
          shape=(h * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank), shard="tp"),
        T(name=f"{a}.wo.weight", module="attn", category="attention", role="linear",
          shape=(d, h * cfg.v_head_dim), shard="tp"),
    ]
    if cfg.sparse:  # DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention)
        ih, ihd = cfg.index_n_heads, cfg.index_head_dim
        I = lambda **kw: T(module="attn.indexer", category="indexer", **kw)  # noqa: E731
        out += [
            # plain Linear layers in the reference (V3.2-Exp inference/model.py L441-444): whole on every card
            I(name=f"{a}.indexer.wq_b.weight", role="linear", shape=(ih * ihd, cfg.q_lora_rank)),
            I(name=f"{a}.indexer.wk.weight", role="linear", shape=(ihd, d)),
            I(name=f"{a}.indexer.k_norm.weight", role="norm", shape=(ihd,), dtype="fp32"),
            I(name=f"{a}.indexer.k_norm.bias", role="norm", shape=(ihd,), dtype="fp32"),
            I(name=f"{a}.indexer.weights_proj.weight", role="linear_bf16", shape=(ih, d)),
        ]
    out += [
        T(name=f"{prefix}.attn_norm.weight", module="block", category="norms", role="norm", shape=(d,)),
        T(name=f"{prefix}.ffn_norm.weight", module="block", category="norms", role="norm", shape=(d,)),
    ]
    f = f"{prefix}.ffn"
    if part == "mtp" or cfg.is_moe_layer(layer):
        inter, e = cfg.moe_intermediate_size, cfg.n_routed_experts
        out += [
            T(name=f"{f}.gate.weight", module="ffn.gate", category="router", role="router", shape=(e, d)),
            # The score-correction bias of auxiliary-loss-free routing (topk_method "noaux_tc", V3 on;
            # HF e_score_correction_bias). DeepSeek-V3's reference Gate keys it on dim == 7168, which
            # the released V3/R1 (and Kimi-K2) configs meet.
            *([T(name=f"{f}.gate.bias", module="ffn.gate", category="router", role="router_bias", shape=(e,),
                 dtype="fp32")] if cfg.router_bias else []),
        ]
        for w, shape in (("w1", (inter, d)), ("w2", (d, inter)), ("w3", (inter, d))):
            out.append(T(name=f"{f}.experts.{{expert}}.{w}.weight", module="ffn.experts", category="routed_experts",
                         role="expert", shape=shape, count=e, shard="ep"))
        if cfg.n_shared_experts:
            si = cfg.n_shared_experts * inter
            for w, shape in (("w1", (si, d)), ("w2", (d, si)), ("w3", (si, d))):
                out.append(T(name=f"{f}.shared_experts.{w}.weight", module="ffn.shared_experts",
                             category="shared_experts", role="linear", shape=shape, shard="tp"))
    else:
        inter = cfg.intermediate_size
        for w, shape in (("w1", (inter, d)), ("w2", (d, inter)), ("w3", (inter, d))):
            out.append(T(name=f"{f}.{w}.weight", module="ffn", category="dense_ffn", role="linear", shape=shape,
                         shard="tp"))
    return out


def _v3_inventory(cfg: ModelConfig) -> Inventory:
    d, v = cfg.hidden_size, cfg.vocab_size
    top = lambda **kw: Tensor(layer=None, part="main", source=_V3_SRC, **kw)  # noqa: E731
    t: list[Tensor] = [top(name="embed.weight", module="embed", category="embedding", role="embedding",
                           shape=(v, d), shard="tp")]
    for i in range(cfg.num_hidden_layers):
        t += _v3_block(cfg, i, "main", f"layers.{i}")
    t.append(top(name="norm.weight", module="norm", category="norms", role="norm", shape=(d,)))
    if not cfg.tie_word_embeddings:
        t.append(top(name="head.weight", module="head", category="lm_head", role="head", shape=(v, d), shard="tp"))
    src = "deepseek-ai/DeepSeek-V3 README_WEIGHTS.md (MTP module)"
    for k in range(cfg.num_nextn_predict_layers):
        layer = cfg.num_hidden_layers + k
        p = f"mtp.{k}"
        M = lambda **kw: Tensor(layer=layer, part="mtp", source=src, **kw)  # noqa: E731
        t += [
            M(name=f"{p}.enorm.weight", module="mtp", category="mtp_proj", role="norm", shape=(d,)),
            M(name=f"{p}.hnorm.weight", module="mtp", category="mtp_proj", role="norm", shape=(d,)),
            M(name=f"{p}.eh_proj.weight", module="mtp", category="mtp_proj", role="linear", shape=(d, 2 * d)),
        ]
        t += _v3_block(cfg, layer, "mtp", p)
        t.append(M(name=f"{p}.shared_head.norm.weight", module="mtp", category="norms", role="norm", shape=(d,)))
    return Inventory(name=cfg.name, source=cfg.source, tensors=tuple(t), n_routed_experts=cfg.n_routed_experts,
                     num_experts_per_tok=cfg.num_experts_per_tok, config=cfg,
                     num_hidden_layers=cfg.num_hidden_layers,
                     notes=("MTP: the embedding and the output head are shared with the main model; the "
                            "Hugging Face checkpoint stores copies of both under model.layers.61, which are "
                            "not counted again here.",))


# --------------------------------------------------------------------------------------------
# DeepSeek-V4 (deepseek_v4)
# --------------------------------------------------------------------------------------------
_V4_SRC = "deepseek-ai/DeepSeek-V4-Flash inference/model.py"


def _v4_block(cfg: ModelConfig, layer: int, part: str, prefix: str) -> list[Tensor]:
    d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    inter, e = cfg.moe_intermediate_size, cfg.n_routed_experts
    T = lambda **kw: Tensor(layer=layer, part=part, source=_V4_SRC, **kw)  # noqa: E731
    a = f"{prefix}.attn"
    out = [
        T(name=f"{a}.attn_sink", module="attn", category="attention", role="sink", shape=(h,), shard="tp",
          dtype="fp32"),
        T(name=f"{a}.wq_a.weight", module="attn", category="attention", role="linear", shape=(cfg.q_lora_rank, d)),
        T(name=f"{a}.q_norm.weight", module="attn", category="attention", role="norm", shape=(cfg.q_lora_rank,)),
        T(name=f"{a}.wq_b.weight", module="attn", category="attention", role="linear",
          shape=(h * hd, cfg.q_lora_rank), shard="tp"),
        T(name=f"{a}.wkv.weight", module="attn", category="attention", role="linear", shape=(hd, d)),
        T(name=f"{a}.kv_norm.weight", module="attn", category="attention", role="norm", shape=(hd,)),
        T(name=f"{a}.wo_a.weight", module="attn", category="attention", role="linear_wo_a",
          shape=(cfg.o_groups * cfg.o_lora_rank, h * hd // cfg.o_groups), shard="tp"),
        T(name=f"{a}.wo_b.weight", module="attn", category="attention", role="linear",
          shape=(d, cfg.o_groups * cfg.o_lora_rank), shard="tp"),
    ]
    ratio = cfg.compress_ratio(layer)
    if ratio:
        out += _v4_compressor(cfg, layer, part, f"{a}.compressor", ratio, hd, "kv_compressor")
        if ratio == 4:
            ih, ihd = cfg.index_n_heads, cfg.index_head_dim
            out += [
                T(name=f"{a}.indexer.wq_b.weight", module="attn.indexer", category="indexer", role="linear",
                  shape=(ih * ihd, cfg.q_lora_rank), shard="tp"),
                T(name=f"{a}.indexer.weights_proj.weight", module="attn.indexer", category="indexer",
                  role="linear_bf16", shape=(ih, d), shard="tp"),
            ]
            out += _v4_compressor(cfg, layer, part, f"{a}.indexer.compressor", 4, ihd, "indexer")
    f = f"{prefix}.ffn"
    out.append(T(name=f"{f}.gate.weight", module="ffn.gate", category="router", role="router", shape=(e, d)))
    if layer < cfg.num_hash_layers:
        out.append(T(name=f"{f}.gate.tid2eid", module="ffn.gate", category="hash_routing", role="hash_table",
                     shape=(cfg.vocab_size, cfg.num_experts_per_tok), dtype="int32"))
    else:
        out.append(T(name=f"{f}.gate.bias", module="ffn.gate", category="router", role="router_bias",
                     shape=(e,), dtype="fp32"))
    for w, shape in (("w1", (inter, d)), ("w2", (d, inter)), ("w3", (inter, d))):
        out.append(T(name=f"{f}.experts.{{expert}}.{w}.weight", module="ffn.experts", category="routed_experts",
                     role="expert", shape=shape, count=e, shard="ep"))
    si = cfg.n_shared_experts * inter
    if si:
        for w, shape in (("w1", (si, d)), ("w2", (d, si)), ("w3", (si, d))):
            out.append(T(name=f"{f}.shared_experts.{w}.weight", module="ffn.shared_experts",
                         category="shared_experts", role="linear", shape=shape, shard="tp"))
    mix, hc_dim = (2 + cfg.hc_mult) * cfg.hc_mult, cfg.hc_mult * d
    out += [
        T(name=f"{prefix}.attn_norm.weight", module="block", category="norms", role="norm", shape=(d,)),
        T(name=f"{prefix}.ffn_norm.weight", module="block", category="norms", role="norm", shape=(d,)),
    ]
    for site in ("attn", "ffn"):
        out += [
            T(name=f"{prefix}.hc_{site}_fn", module="hc", category="mhc", role="mhc", shape=(mix, hc_dim),
              dtype="fp32"),
            T(name=f"{prefix}.hc_{site}_base", module="hc", category="mhc", role="mhc", shape=(mix,), dtype="fp32"),
            T(name=f"{prefix}.hc_{site}_scale", module="hc", category="mhc", role="mhc", shape=(3,), dtype="fp32"),
        ]
    return out


def _v4_compressor(cfg, layer, part, prefix, ratio, head_dim, category) -> list[Tensor]:
    coff = 2 if ratio == 4 else 1  # overlapping windows when the ratio is 4
    d = cfg.hidden_size
    T = lambda **kw: Tensor(layer=layer, part=part, source=_V4_SRC, category=category, **kw)  # noqa: E731
    mod = prefix.split(".", 2)[-1]
    return [
        T(name=f"{prefix}.ape", module=mod, role="ape", shape=(ratio, coff * head_dim), dtype="fp32"),
        # The reference keeps wkv / wgate in fp32 in memory; the checkpoint stores them in bf16.
        T(name=f"{prefix}.wkv.weight", module=mod, role="linear_bf16", shape=(coff * head_dim, d)),
        T(name=f"{prefix}.wgate.weight", module=mod, role="linear_bf16", shape=(coff * head_dim, d)),
        T(name=f"{prefix}.norm.weight", module=mod, role="norm", shape=(head_dim,)),
    ]


def _v4_inventory(cfg: ModelConfig) -> Inventory:
    d, v = cfg.hidden_size, cfg.vocab_size
    hc_dim = cfg.hc_mult * d
    top = lambda **kw: Tensor(layer=None, part="main", source=_V4_SRC, **kw)  # noqa: E731
    t: list[Tensor] = [top(name="embed.weight", module="embed", category="embedding", role="embedding",
                           shape=(v, d), shard="tp")]
    for i in range(cfg.num_hidden_layers):
        t += _v4_block(cfg, i, "main", f"layers.{i}")
    t += [
        top(name="norm.weight", module="norm", category="norms", role="norm", shape=(d,)),
        top(name="head.weight", module="head", category="lm_head", role="head", shape=(v, d), shard="tp"),
        top(name="hc_head_fn", module="hc", category="mhc", role="mhc", shape=(cfg.hc_mult, hc_dim), dtype="fp32"),
        top(name="hc_head_base", module="hc", category="mhc", role="mhc", shape=(cfg.hc_mult,), dtype="fp32"),
        top(name="hc_head_scale", module="hc", category="mhc", role="mhc", shape=(1,), dtype="fp32"),
    ]
    for k in range(cfg.num_nextn_predict_layers):
        layer = cfg.num_hidden_layers + k
        p = f"mtp.{k}"
        M = lambda **kw: Tensor(layer=layer, part="mtp", source=_V4_SRC, **kw)  # noqa: E731
        t += _v4_block(cfg, layer, "mtp", p)
        t += [
            M(name=f"{p}.e_proj.weight", module="mtp", category="mtp_proj", role="linear", shape=(d, d)),
            M(name=f"{p}.h_proj.weight", module="mtp", category="mtp_proj", role="linear", shape=(d, d)),
            M(name=f"{p}.enorm.weight", module="mtp", category="mtp_proj", role="norm", shape=(d,)),
            M(name=f"{p}.hnorm.weight", module="mtp", category="mtp_proj", role="norm", shape=(d,)),
            M(name=f"{p}.norm.weight", module="mtp", category="norms", role="norm", shape=(d,)),
            M(name=f"{p}.hc_head_fn", module="hc", category="mhc", role="mhc", shape=(cfg.hc_mult, hc_dim),
              dtype="fp32"),
            M(name=f"{p}.hc_head_base", module="hc", category="mhc", role="mhc", shape=(cfg.hc_mult,), dtype="fp32"),
            M(name=f"{p}.hc_head_scale", module="hc", category="mhc", role="mhc", shape=(1,), dtype="fp32"),
        ]
    return Inventory(name=cfg.name, source=cfg.source, tensors=tuple(t), n_routed_experts=cfg.n_routed_experts,
                     num_experts_per_tok=cfg.num_experts_per_tok, config=cfg,
                     num_hidden_layers=cfg.num_hidden_layers,
                     notes=("MTP: the embedding and the output head are shared with the main model "
                            "(MTPBlock.embed / .head point to them) and are not counted again.",))


# --------------------------------------------------------------------------------------------
# The articles' own simplified architectures (data files with the shapes the articles print)
# --------------------------------------------------------------------------------------------

def _article_inventory(name: str) -> Inventory:
    path = Path(str(resources.files("pdcalc").joinpath("data", "models", ARTICLE_PRESETS[name])))
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    layers = data["num_hidden_layers"]
    tensors: list[Tensor] = []
    for row in data["tensor"]:
        per_layer = row.get("per_layer", False)
        count = row.get("count", 1)
        if "shape" in row:
            shape = tuple(row["shape"])
        else:  # a printed total over ``count`` equal pieces (the experts an EP group divides)
            total = int(row["params"])
            if total % count:
                raise ValueError(f"{path.name}: {row['name']}: {total} parameters do not split into {count} pieces")
            shape = (total // count,)
        for layer in (range(layers) if per_layer else [None]):
            tensors.append(Tensor(
                name=row["name"].format(layer=layer), layer=layer, part="main", module=row["module"],
                category=row["category"], role=row["role"], shape=shape, count=count,
                shard=row.get("shard", "replicated"), source=f"{data['article']} §{row['section']}",
            ))
    return Inventory(name=name, source=data["source"], tensors=tuple(tensors),
                     n_routed_experts=data["n_routed_experts"], num_experts_per_tok=data["num_experts_per_tok"],
                     notes=tuple(data.get("notes", ())), num_hidden_layers=layers)


@cache
def _cached_preset(name: str) -> Inventory:
    if name in ARTICLE_PRESETS:
        return _article_inventory(name)
    return build_inventory(load_config(name))


def build_inventory(cfg: ModelConfig) -> Inventory:
    """The tensor inventory of a :class:`~pdcalc.model.config.ModelConfig`.

    A config describing more than :data:`MAX_PARAMS` parameters is a :class:`~pdcalc.core.errors.ConfigError`
    naming the largest category and the fields that size it.
    """
    if cfg.mla:
        inv = _v3_inventory(cfg)
    elif cfg.model_type == "deepseek_v4":
        inv = _v4_inventory(cfg)
    else:
        raise ConfigError(cfg.source, "model_type", f"unsupported model_type {cfg.model_type!r}")
    total = inv.params(part="all")
    if total > MAX_PARAMS:
        by_cat = {c: inv.params(part="all", category=c) for c in CATEGORIES}
        top = max(by_cat, key=by_cat.get)
        sized = _SIZED_BY.get(top, "the attention widths")
        raise ConfigError(cfg.source, None, f"describes {total:.3g} parameters, more than the {MAX_PARAMS:.3g} "
                          f"(2**53) pdcalc counts exactly; the largest part is {top} ({by_cat[top]:.3g}, sized by "
                          f"{sized})")
    return inv


def get_inventory(model: str | Path | ModelConfig | Inventory) -> Inventory:
    """The inventory of a preset name, a ``config.json`` path, a config, or an inventory (returned as is)."""
    if isinstance(model, Inventory):
        return model
    if isinstance(model, ModelConfig):
        return build_inventory(model)
    key = str(model)
    if key in MODEL_NAMES:
        return _cached_preset(key)
    return build_inventory(load_config(key))  # a path, or an UnknownNameError listing MODEL_NAMES
