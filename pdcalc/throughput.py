"""Step time and throughput of a DeepSeek MoE model on a parallel layout: a roofline with communication.

Two architectures: DeepSeek-V3 (``model_type`` "deepseek_v3": MLA + MoE) and DeepSeek-V4 ("deepseek_v4":
hybrid sliding-window / compressed attention with an indexer, MoE with hash-routed first layers).

One *step* is one forward pass of the whole deployment: in prefill a batch of prompts, in decode one
new token for every sequence in flight. Per card, three times are compared:

.. math::

   t_\\text{compute} = \\frac{F_\\text{lin}}{\\eta_F P_\\text{lin}} + \\frac{F_\\text{attn}}{\\eta_F P_\\text{attn}},
   \\qquad
   t_\\text{memory} = \\frac{B_\\text{weights} + B_\\text{KV}}{\\eta_B W_\\text{HBM}},
   \\qquad
   t_\\text{comm} = t_\\text{TP} + t_\\text{EP}

with ``P`` the card's dense peak (linear layers at the quantization's compute dtype, attention at
``attn_dtype``), ``W_HBM`` its HBM bandwidth and the efficiencies ``eta`` explicit parameters. The
step takes

.. math::

   t = \\max(t_\\text{compute}, t_\\text{memory}) + t_\\text{comm} \\quad (\\text{no overlap}), \\qquad
   t = \\max(t_\\text{compute}, t_\\text{memory}, t_\\text{comm}) \\quad (\\text{overlap}),

and the term that dominates names the bound ("compute", "memory" or "communication").

Layout: ``tp x dp`` cards. Attention, the dense FFN layers, the shared expert and the output head are
split over the ``tp`` cards of each of the ``dp`` ranks; sequences are spread evenly over the ranks.
Routed experts are spread over EP groups of ``ep`` cards (``ep=None``: no expert parallelism, every
rank splits every expert over its ``tp`` cards, as vLLM does without ``--enable-expert-parallel``).
Loads are balanced expected values: no routing skew, no stragglers, no scheduling gaps. DeepSeek-V4's
hash-routed first ``num_hash_layers`` layers pick their ``k`` experts by token id; they are loaded like
top-k routed layers (uniform over experts).

KV cache: DeepSeek-V3 keeps one BF16 MLA latent per token and layer (dtype bytes: ``kv_bytes``).
DeepSeek-V4 keeps, per layer kind, the caches of :func:`pdcalc.kv_cache.engine_layout` (``engine``):
a sliding window of raw entries on every layer, compressed entries on ratio-4 and ratio-128 layers,
indexer keys on ratio-4 layers, compressor states. A decode step reads only what the new token
attends to (:func:`kv_read_bytes_per_sequence`).

Not modelled: activation memory traffic, kernel launch and synchronisation latency, speculative
decoding: the MTP layers are not run in the step, and neither their weights nor their KV cache are
counted; prefix-cache hits; DeepSeek-V4's compressor pooling, compressor-state reads and mHC mixing
beyond its parameters.

Sources: DeepSeek-V3 ``inference/model.py`` (``MLA.forward``: ``attn_impl = "naive"`` expands the
latent into per-head keys and values, ``"absorb"`` scores queries against the latent cache itself;
``MoE``, ``Gate``: top-k routing); DeepSeek-V4-Flash ``inference/model.py`` at 60d8d707
(``Attention.forward``, ``Indexer.forward``, ``Gate.forward``: ``tid2eid`` hash routing; ``wo_b``
row-parallel and ``MoE`` all-reduces; ``Indexer``: ``dist.all_reduce(index_score)`` under TP); vLLM
(MLA keeps one latent cache that every TP rank stores whole, since the latent is shared by all heads);
Shoeybi et al. 2019 (Megatron-LM: two all-reduces per transformer layer under TP); DeepEP (FP8
dispatch, BF16 combine).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from pdcalc import measurements
from pdcalc.errors import ConfigError, LayoutError, UnknownNameError
from pdcalc.flops import hybrid_attention_flops, layer_ratios, sum_capped_floor
from pdcalc.hardware import Card, get_card
from pdcalc.inventory import get_inventory
from pdcalc.kv_cache import ENGINES, engine_layout, mla_bytes_per_token
from pdcalc.model import ModelConfig
from pdcalc.checks import tp_problem
from pdcalc.memory import card_weights
from pdcalc.parallel import allreduce_bytes, expected_remote_cards, place_experts
from pdcalc.quant import get_scheme

PHASES = ("prefill", "decode")
BOUNDS = ("compute", "memory", "communication")

#: Card peak used for the linear layers of each quantization scheme: the dtype the matmuls run in
#: (W8A8 multiplies int8 by int8; FP8 checkpoints run FP8 GEMMs; pdcalc.quant for the schemes).
COMPUTE_DTYPE: dict[str, str] = {
    "bf16": "bf16",
    "fp16-all": "fp16",
    "fp8": "fp8",
    "fp8-fp4": "fp8",
    "w8a8": "int8",
    "article-1byte": "int8",
}

# Efficiencies: assumptions, not measurements. Change them per call.
DEFAULT_MFU = 0.5        # assumed share of the dense peak reached by the matmuls and attention kernels
DEFAULT_MBU = 0.7        # assumed share of the HBM bandwidth reached when streaming weights and KV
DEFAULT_COMM_EFF = 0.7   # assumed share of the link bandwidth reached by all-reduce and all-to-all
DEFAULT_ALLREDUCES_PER_LAYER = 2   # Megatron-LM TP: one after attention, one after the FFN (Shoeybi et al. 2019)
DEFAULT_ACT_BYTES = 2.0            # BF16 hidden states on the TP all-reduce
DEFAULT_DISPATCH_BYTES = 1.0       # DeepEP dispatch: FP8 hidden state (as pdcalc.parallel.dispatch)
DEFAULT_COMBINE_BYTES = 2.0        # DeepEP combine: BF16 expert output (as pdcalc.parallel.dispatch)
DEFAULT_KV_BYTES = 2.0             # BF16 latent + RoPE key cache (reference MLA.__init__)
DEFAULT_V4_ENGINE = "vllm-ascend"  # engine whose KV layout a DeepSeek-V4 step reads (pdcalc.kv_cache)
MODEL_TYPES = ("deepseek_v3", "deepseek_v4")


# ------------------------------------------------------------------------------ model structure
@dataclass(frozen=True)
class _Split:
    """Parameters of the main model by how a step uses them (MTP layers excluded)."""

    model_type: str        # "deepseek_v3" or "deepseek_v4"
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
    index_heads: int | None = None    # V4: indexer query heads

    @property
    def v4(self) -> bool:
        return self.model_type == "deepseek_v4"


def _model_key(model):
    return model if isinstance(model, str) else None


@cache
def _split_cached(model: str) -> _Split:
    return _build_split(model)


def _split(model) -> _Split:
    key = _model_key(model)
    return _split_cached(key) if key is not None else _build_split(model)


def _build_split(model) -> _Split:
    inv = get_inventory(model)
    cfg = inv.config
    if cfg is None or cfg.model_type not in MODEL_TYPES:
        raise ConfigError(str(getattr(inv, "name", model)), "model_type",
                          "the throughput model covers models with a config of model_type 'deepseek_v3' (MLA) "
                          "or 'deepseek_v4' (hybrid attention)")
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
    return _Split(model_type=cfg.model_type, layers=cfg.num_hidden_layers, moe_layers=cfg.n_moe_layers,
                  heads=cfg.num_attention_heads, hidden=cfg.hidden_size, kv_lora_rank=cfg.kv_lora_rank,
                  rope=cfg.qk_rope_head_dim, nope=cfg.qk_nope_head_dim, v_head=cfg.v_head_dim,
                  n_experts=cfg.n_routed_experts, top_k=cfg.num_experts_per_tok, replicated=repl, tp_split=tp,
                  head=head, routed=routed, activated=inv.activated(), config=cfg,
                  c4_layers=dict(layer_ratios(cfg)).get(4, 0) if v4 else 0,
                  o_groups=cfg.o_groups if v4 else None, index_heads=cfg.index_n_heads if v4 else None)


def _check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise LayoutError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    return phase


def _array(x, name: str, minimum: float):
    a = np.asarray(x, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a < minimum):
        raise LayoutError(f"{name} must be >= {minimum:g}, got {x!r}")
    return a


def _out(x, scalar: bool):
    return float(x) if scalar else x


def attention_flops_per_token(model, context, *, phase: str = "decode"):
    """Attention-core FLOPs of one token, summed over layers (projections excluded).

    DeepSeek-V3 (MLA). Decode uses the absorbed form (reference ``attn_impl = "absorb"``): the query is
    scored against the latent cache (``d_c``) and the RoPE key cache (``d_R``), and the softmax weights are
    applied to the latent cache; the absorbed up-projections cost exactly the ``wkv_b`` matmul and are
    counted with the parameters. Prefill uses the naive form on per-head keys (``d_nope + d_R``) and values (``d_v``)
    under a causal mask, where token ``i`` of a prompt of ``L`` tokens attends to ``i`` positions:

    .. math::

       F_\\text{decode}(L) = n_\\text{layers} \\cdot 2 h L (2 d_c + d_R), \\qquad
       F_\\text{prefill}(L) = n_\\text{layers} \\cdot 2 h \\frac{L + 1}{2} (d_\\text{nope} + d_R + d_v)

    ``context`` is the KV length ``L`` in decode and the prompt length in prefill (arrays welcome).

    DeepSeek-V4 (hybrid attention, :func:`pdcalc.flops.hybrid_attention_flops`): the query attends to
    ``k(L)`` keys of one shared 512-wide latent on every layer (window, selected or all compressed
    entries), and on ratio-4 layers the indexer scores all ``L / 4`` compressed entries. Decode counts
    the one query at position ``L``; prefill averages over the ``L`` queries of the prompt:

    .. math::

       F_\\text{decode}(L) = \\sum_\\text{layers} 4 h d \\, k(L) + n_{r=4} \\, 2 n_I d_I \\lfloor L/4 \\rfloor,
       \\qquad
       F_\\text{prefill}(L) = \\frac{1}{L} \\sum_{i=1}^{L} F_\\text{decode}(i)

    (``L`` in whole tokens for V4.)

    Source: deepseek-ai/DeepSeek-V3 ``inference/model.py``, ``MLA.forward`` (the einsums of both branches);
    deepseek-ai/DeepSeek-V4-Flash ``inference/model.py``, ``Attention.forward``, ``Indexer.forward``.
    """
    s, phase = _split(model), _check_phase(phase)
    L = _array(context, "context", 1)
    if s.v4:
        attn, index = hybrid_attention_flops(s.config, L, phase=phase)
        f = attn + index if phase == "decode" else (attn + index) / L
    elif phase == "decode":
        f = s.layers * 2 * s.heads * L * (2 * s.kv_lora_rank + s.rope)
    else:
        f = s.layers * 2 * s.heads * (L + 1) / 2 * (s.nope + s.rope + s.v_head)
    return _out(f, np.ndim(context) == 0)


def flops_per_token(model, context, *, phase: str = "decode"):
    """FLOPs of one token on one card holding the whole model.

    Two FLOPs per multiply-accumulate of every activated parameter (``Inventory.activated``: the
    embedding lookup excluded, routed experts at ``k / E``), plus the attention core. In prefill only
    the last position of a prompt needs logits, so the output head counts once per prompt:

    .. math::

       F_\\text{decode} = 2 N_\\text{act} + F_\\text{attn}(L), \\qquad
       F_\\text{prefill} = 2 (N_\\text{act} - N_\\text{head}) + \\frac{2 N_\\text{head}}{L} + F_\\text{attn}(L)

    Source: the tensor inventory (:mod:`pdcalc.inventory`); :func:`attention_flops_per_token`.
    """
    s = _split(model)
    attn = attention_flops_per_token(model, context, phase=phase)
    if phase == "decode":
        return 2 * s.activated + attn
    L = _array(context, "context", 1)
    return _out(2 * (s.activated - s.head) + 2 * s.head / L + attn, np.ndim(context) == 0)


def expected_experts_hit(tokens, n_experts: int, top_k: int):
    """Expected distinct routed experts of one MoE layer that ``tokens`` tokens select.

    Each token picks ``k`` of ``E`` experts; with routing uniform over experts, an expert is missed by
    one token with probability ``1 - k/E``:

    .. math:: \\mathbb{E}[n_\\text{hit}] = E \\bigl(1 - (1 - k / E)^{B}\\bigr)

    Equal per card of an EP group: a card holding ``n`` of the ``E`` experts reads ``n`` times the hit
    fraction. Real routing is skewed, which lowers the count for the same ``B``.
    """
    if not 1 <= top_k <= n_experts:
        raise LayoutError(f"top_k must be in 1..{n_experts}, got {top_k}")
    b = _array(tokens, "tokens", 0)
    return _out(n_experts * (1 - (1 - top_k / n_experts) ** b), np.ndim(tokens) == 0)


# ------------------------------------------------------------------------------ bytes per card
@cache
def _weights_cached(model: str, quant: str, ep: int, tp: int):
    return card_weights(model, quant, ep=ep, tp=tp)


def _weights(model, quant, ep, tp):
    if isinstance(model, str) and isinstance(quant, str):
        return _weights_cached(model, quant, ep, tp)
    return card_weights(model, quant, ep=ep, tp=tp)


def weight_bytes_per_card(model, quant: str = "w8a8", *, tp: int = 1, ep: int | None = None,
                          routed_tokens=None):
    """Weight bytes one card holds, or reads in one step when ``routed_tokens`` is given.

    Non-expert tensors come from :func:`pdcalc.memory.card_weights` (replicated in full, TP-split ones
    ``1/t``). Routed experts: the card's EP share (``ep``), or with ``ep=None`` ``1/t`` of every expert.
    In a step, a card reads its lookup tables only a row per token (left out) and of its experts only
    those the step's tokens hit (:func:`expected_experts_hit`), ``routed_tokens`` being the tokens routed
    inside the card's EP group (or TP rank):

    .. math:: B_\\text{w} = W_\\text{non-routed} - W_\\text{lookup} + W_\\text{routed}\\,\\bigl(1 - (1 - k/E)^{B}\\bigr)
    """
    w = _weights(model, quant, ep or 1, tp)
    routed = w.class_i_bytes if ep else w.class_i_bytes / tp
    if routed_tokens is None:
        return w.class_ii_bytes + routed
    s = _split(model)
    lookup = w.by_category.get("embedding", 0.0) + w.by_category.get("hash_routing", 0.0)
    hit = expected_experts_hit(routed_tokens, s.n_experts, s.top_k) / s.n_experts
    return w.class_ii_bytes - lookup + routed * hit


def kv_bytes_per_token(model, kv_bytes: float = DEFAULT_KV_BYTES) -> float:
    """MLA cache bytes of one token over all layers (:func:`pdcalc.kv_cache.mla_bytes_per_token`)."""
    return mla_bytes_per_token(model, dtype_bytes=kv_bytes)


@dataclass(frozen=True)
class _KVKind:
    """The caches of one kind of DeepSeek-V4 main layer, as one engine stores them."""

    layers: int                # main layers of this kind
    window: int                # raw tokens of the sliding window
    window_entry: float        # bytes of one window entry
    ratio: int                 # tokens per compressed entry (0: none)
    compressed_entry: float    # bytes of one compressed entry
    selected: float            # compressed entries a query attends to at most (index_topk, or all)
    indexer_ratio: int         # tokens per indexer key (0: no indexer)
    indexer_entry: float       # bytes of one indexer key
    caches: tuple              # CacheSpec of every cache of the layer (stored bytes)


def _build_v4_kv(model, engine: str) -> tuple[_KVKind, ...]:
    s = _split(model)
    layout = engine_layout(engine, s.config)
    out = []
    for kind in layout.kinds(include_mtp=False):
        c = {cs.name: cs for cs in kind.caches}
        comp, idx = c.get("compressed"), c.get("indexer")
        out.append(_KVKind(
            layers=kind.n_layers, window=kind.window_entries, window_entry=kind.window_entry_bytes,
            ratio=comp.tokens_per_entry if comp else 0, compressed_entry=comp.entry_bytes if comp else 0.0,
            selected=float(s.config.index_topk) if idx else np.inf,
            indexer_ratio=idx.tokens_per_entry if idx else 0, indexer_entry=idx.entry_bytes if idx else 0.0,
            caches=kind.caches))
    return tuple(out)


@cache
def _v4_kv_cached(model: str, engine: str) -> tuple[_KVKind, ...]:
    return _build_v4_kv(model, engine)


def _v4_kv(model, engine: str) -> tuple[_KVKind, ...]:
    key = _model_key(model)
    return _v4_kv_cached(key, engine) if key is not None else _build_v4_kv(model, engine)


def _engine(s: _Split, engine: str | None) -> str | None:
    """The engine whose KV layout a step reads: V4 default :data:`DEFAULT_V4_ENGINE`; V3 none."""
    if not s.v4:
        if engine not in (None, "reference"):
            raise LayoutError(f"engine={engine!r}: DeepSeek-V3 steps use the reference BF16 MLA cache (its dtype "
                              f"set by kv_bytes); engine must be None or 'reference'")
        return None
    engine = DEFAULT_V4_ENGINE if engine is None else engine
    if engine not in ENGINES:
        raise UnknownNameError("engine", engine, ENGINES)
    return engine


def kv_read_bytes_per_sequence(model, context, *, phase: str = "decode", engine: str | None = None,
                               kv_bytes: float = DEFAULT_KV_BYTES):
    """KV bytes one sequence moves in one step: read in decode, written in prefill.

    DeepSeek-V3: the whole MLA cache in decode, the new tokens' entries in prefill, ``b_KV`` =
    :func:`kv_bytes_per_token` bytes each (``engine`` None or "reference").

    DeepSeek-V4: the new token reads only what it attends to and what its indexer scores, with the entry
    sizes ``e`` of ``engine``'s layout (:func:`pdcalc.kv_cache.engine_layout`; page padding is not
    read): on every layer the ``min(L, w)`` window entries, on a ratio-4 layer the ``min(L/4, K)``
    entries the indexer selects (``K`` = ``index_topk``) and all ``L/4`` indexer keys, on a ratio-128
    layer all ``L/128`` compressed entries. A prefill writes the entries the prompt leaves in the cache:

    .. math::

       B_\\text{read}(L) = \\sum_\\text{layers} \\Bigl[\\min(L, w)\\,e_\\text{win}
       + \\min(\\lfloor L/r \\rfloor, K_r)\\,e_\\text{c} + [r = 4] \\lfloor L/4 \\rfloor\\,e_\\text{idx}\\Bigr],
       \\qquad K_4 = K,\\; K_{128} = \\infty

       B_\\text{write}(L) = \\sum_\\text{layers} \\Bigl[\\min(L, w)\\,e_\\text{win}
       + \\lfloor L/r \\rfloor\\,e_\\text{c} + [r = 4] \\lfloor L/4 \\rfloor\\,e_\\text{idx}\\Bigr]

    Compressor states (at most a few KB per layer and step, amortised) and the MTP layer are left out.
    ``L`` counts whole tokens (rounded down).

    Source: deepseek-ai/DeepSeek-V4-Flash ``inference/model.py`` (60d8d707): ``get_window_topk_idxs``,
    ``Indexer.forward`` (scores ``kv_cache[:, :end_pos // ratio]``, keeps ``topk(min(index_topk, ...))``),
    ``get_compress_topk_idxs`` (all entries without an indexer), ``sparse_attn`` (gathers the selected
    entries); entry bytes from :mod:`pdcalc.kv_cache`.
    """
    s, phase = _split(model), _check_phase(phase)
    engine = _engine(s, engine)
    L = _array(context, "context", 1)
    scalar = np.ndim(context) == 0
    if not s.v4:
        return _out(L * kv_bytes_per_token(model, kv_bytes), scalar)
    n = np.floor(L)
    out = np.zeros(n.shape)
    for k in _v4_kv(model, engine):
        b = np.minimum(n, k.window) * k.window_entry
        if k.ratio:
            entries = np.floor(n / k.ratio)
            b = b + (np.minimum(entries, k.selected) if phase == "decode" else entries) * k.compressed_entry
        if k.indexer_ratio:
            b = b + np.floor(n / k.indexer_ratio) * k.indexer_entry
        out = out + k.layers * b
    return _out(out, scalar)


def kv_stored_bytes_per_sequence(model, context, *, engine: str | None = None,
                                 kv_bytes: float = DEFAULT_KV_BYTES):
    """KV bytes one sequence of ``L`` tokens holds on a card (main layers; the cache is whole on every TP card).

    DeepSeek-V3: ``L b_KV`` (:func:`kv_bytes_per_token`). DeepSeek-V4: every cache of ``engine``'s
    layout, pages and padding included, MTP layer excluded, i.e.
    ``pdcalc.kv_cache.kv_bytes(model, L, engine, include_mtp=False).total_bytes``:

    .. math:: B_\\text{stored}(L) = \\sum_\\text{layers} \\sum_\\text{caches} B_\\text{cache}(L)

    Source: :func:`pdcalc.kv_cache.kv_bytes`.
    """
    s = _split(model)
    engine = _engine(s, engine)
    L = _array(context, "context", 1)
    scalar = np.ndim(context) == 0
    if not s.v4:
        return _out(L * kv_bytes_per_token(model, kv_bytes), scalar)
    n = np.floor(L).astype(np.int64)
    out = np.zeros(n.shape)
    for k in _v4_kv(model, engine):
        for c in k.caches:
            out = out + k.layers * c.bytes_at(n)
    return _out(out, scalar)


# ------------------------------------------------------------------------------ communication
def _link(card: Card, group: int) -> float:
    """Per-card one-way bandwidth of a group: the node's fabric when the group fits in a node."""
    return card.intra_node_bytes_per_s if group <= card.cards_per_node else card.scale_out_bytes_per_s


def tp_allreduce_per_layer(model, card, *, tokens, tp: int,
                           act_bytes: float = DEFAULT_ACT_BYTES, comm_eff: float = DEFAULT_COMM_EFF,
                           allreduces: int = 1):
    """Bytes each card sends and seconds spent in the TP all-reduces of one layer for ``tokens`` tokens.

    The payload is the hidden state of every token the TP group processes; a ring all-reduce sends
    ``2 (t - 1) / t`` of it per card (:func:`pdcalc.parallel.allreduce_bytes`). ``tokens`` must be the
    same tokens as the compute it is compared with (one decode step: one per sequence):

    .. math::

       B_\\text{TP} = a \\cdot 2 \\frac{t-1}{t} \\, T \\, d \\, s_\\text{act}, \\qquad
       t_\\text{TP} = \\frac{B_\\text{TP}}{\\eta_\\text{comm} W_\\text{link}}

    with ``a`` all-reduces per layer and ``W_link`` the card's intra-node bandwidth when ``t`` fits in
    a node, else its scale-out bandwidth. Returns ``(bytes, seconds)``.
    """
    s, c = _split(model), get_card(card)
    _check_int("tp", tp)
    _check_eff("comm_eff", comm_eff)
    T = _array(tokens, "tokens", 0)
    b = allreduces * allreduce_bytes(T * s.hidden * act_bytes, tp)
    scalar = np.ndim(tokens) == 0
    return _out(b, scalar), _out(b / (comm_eff * _link(c, tp)), scalar)


def indexer_allreduce_per_layer(model, card, *, context, sequences, tp: int, phase: str = "decode",
                                act_bytes: float = DEFAULT_ACT_BYTES, comm_eff: float = DEFAULT_COMM_EFF):
    """DeepSeek-V4: bytes each card sends and seconds spent all-reducing one ratio-4 layer's indexer scores.

    Under TP each card holds ``n_I / t`` indexer heads (``wq_b``, ``weights_proj`` column-parallel), so
    every query's scores over the ``L / 4`` compressed entries are partial sums, all-reduced in BF16
    before the top-k. ``sequences`` are those of one TP rank; a decode query scores ``floor(L/4)``
    entries, a prompt's queries ``sum_i floor(i/4)`` (causal):

    .. math::

       B_\\text{idx} = 2 \\frac{t-1}{t} \\, S \\, N_\\text{scores}(L) \\, s_\\text{act}, \\qquad
       t_\\text{idx} = \\frac{B_\\text{idx}}{\\eta_\\text{comm} W_\\text{link}}

    Returns ``(bytes, seconds)``.

    Source: deepseek-ai/DeepSeek-V4-Flash ``inference/model.py``, ``Indexer.forward``
    (``if world_size > 1: dist.all_reduce(index_score)``).
    """
    s, c = _split(model), get_card(card)
    phase = _check_phase(phase)
    if not s.v4:
        raise ConfigError(s.config.source, "model_type", "only deepseek_v4 has an indexer")
    _check_int("tp", tp)
    _check_eff("comm_eff", comm_eff)
    L = np.floor(_array(context, "context", 1))
    S = _array(sequences, "sequences", 0)
    scores = np.floor(L / 4) if phase == "decode" else sum_capped_floor(L, 4)
    b = allreduce_bytes(S * scores * act_bytes, tp)
    scalar = np.ndim(context) == 0 and np.ndim(sequences) == 0
    return _out(b, scalar), _out(b / (comm_eff * _link(c, tp)), scalar)


def ep_alltoall_per_layer(model, card, *, tokens_per_card, ep: int,
                          dispatch_bytes: float = DEFAULT_DISPATCH_BYTES,
                          combine_bytes: float = DEFAULT_COMBINE_BYTES, comm_eff: float = DEFAULT_COMM_EFF):
    """Bytes each card sends and seconds spent in one MoE layer's dispatch + combine.

    Each token goes once to every remote card holding one of its experts (deduplicated per card, as
    DeepEP): :func:`pdcalc.parallel.expected_remote_cards` cards on average. Of the ``ep - 1`` remote
    cards, ``min(ep, n_node) - 1`` share the node and use its fabric, the rest the scale-out network;
    the slower of the two sets the time:

    .. math::

       B_\\text{EP} = T_\\text{card} \\, \\mathbb{E}[\\text{cards}] \\, d \\, (s_\\text{dispatch} + s_\\text{combine}),
       \\qquad t_\\text{EP} = \\frac{\\max(f B_\\text{EP} / W_\\text{intra}, (1-f) B_\\text{EP} / W_\\text{out})}
       {\\eta_\\text{comm}}

    with ``f = (min(ep, n_node) - 1) / (ep - 1)``. Returns ``(bytes, seconds)``. Routing is taken as
    uniform over cards: DeepSeek-V3's node-limited routing (each token to at most 4 nodes) and DeepEP's
    one-copy-per-node forwarding over the scale-out network are not modelled, so the scale-out bytes are an
    upper bound.
    """
    s, c = _split(model), get_card(card)
    _check_int("ep", ep)
    _check_eff("comm_eff", comm_eff)
    T = _array(tokens_per_card, "tokens_per_card", 0)
    scalar = np.ndim(tokens_per_card) == 0
    if ep == 1:
        return _out(T * 0.0, scalar), _out(T * 0.0, scalar)
    place_experts(s.n_experts, ep)  # raises a LayoutError when ep exceeds the experts
    b = T * expected_remote_cards(s.n_experts, ep, s.top_k) * s.hidden * (dispatch_bytes + combine_bytes)
    f = (min(ep, c.cards_per_node) - 1) / (ep - 1)
    t = np.maximum(f * b / c.intra_node_bytes_per_s, (1 - f) * b / c.scale_out_bytes_per_s) / comm_eff
    return _out(b, scalar), _out(t, scalar)


# ------------------------------------------------------------------------------ the step
@dataclass(frozen=True)
class StepTime:
    """One step of a deployment, per card (arrays where ``context`` or ``concurrency`` were arrays)."""

    phase: str
    card: str
    cards: int                  # tp x dp
    tokens: object              # tokens the deployment processes in the step
    flops_per_card: object      # FLOP
    bytes_per_card: object      # HBM bytes read: weights hit + KV
    comm_bytes_per_card: object  # bytes sent: TP all-reduces (V4: + indexer scores) + EP all-to-all
    compute_s: object
    memory_s: object
    comm_s: object
    time_s: object              # the step
    tokens_per_s: object        # the deployment
    bound: object               # "compute", "memory" or "communication"
    stored_bytes_per_card: object  # weights held + KV held
    usable_bytes_per_card: float   # what the card's runtime exposes (hardware preset)

    @property
    def tokens_per_s_per_card(self):
        return self.tokens_per_s / self.cards

    @property
    def fits(self):
        """Whether weights and KV cache fit in the memory the runtime exposes (no utilisation cap)."""
        return self.stored_bytes_per_card <= self.usable_bytes_per_card


def _check_int(name: str, v, low: int = 1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise LayoutError(f"{name} must be an integer >= {low}, got {v!r}")


def _check_eff(name: str, v):
    if not (isinstance(v, (int, float)) and 0 < v <= 1):
        raise LayoutError(f"{name} must be in (0, 1], got {v!r}")


def step(model, card, *, tp: int, dp: int, ep: int | None = None, context,
         concurrency, phase: str, quant: str = "w8a8", mfu: float = DEFAULT_MFU, mbu: float = DEFAULT_MBU,
         comm_eff: float = DEFAULT_COMM_EFF, overlap: bool = False, compute_dtype: str | None = None,
         attn_dtype: str = "bf16", peak_flops_per_s: float | None = None,
         kv_bytes: float = DEFAULT_KV_BYTES, act_bytes: float = DEFAULT_ACT_BYTES,
         allreduces_per_layer: int = DEFAULT_ALLREDUCES_PER_LAYER,
         dispatch_bytes: float = DEFAULT_DISPATCH_BYTES, combine_bytes: float = DEFAULT_COMBINE_BYTES,
         engine: str | None = None) -> StepTime:
    """Time and throughput of one step of ``model`` on ``tp x dp`` cards of ``card``.

    Parameters
    ----------
    tp, dp, ep
        TP degree, DP ranks, EP group in cards (``None``: experts TP-split inside each rank).
    context
        Decode: KV length of every sequence. Prefill: prompt length.
    concurrency
        Decode: sequences in flight over the deployment (one new token each). Prefill: prompts in the step.
    phase
        ``"prefill"`` or ``"decode"``.
    quant
        :mod:`pdcalc.quant` scheme of the stored weights; sets the linear layers' compute dtype
        (:data:`COMPUTE_DTYPE`) unless ``compute_dtype`` is given.
    mfu, mbu, comm_eff
        Assumed shares of the peak FLOP/s, HBM bandwidth and link bandwidth reached.
    overlap
        Communication hidden under compute and memory traffic (two micro-batches) or added to them.
    peak_flops_per_s
        Overrides the card's peak for the linear layers (for a dtype the preset lacks).
    kv_bytes
        DeepSeek-V3 only: bytes per value of the MLA cache (BF16: 2).
    engine
        DeepSeek-V4 only: the engine whose KV layout (:func:`pdcalc.kv_cache.engine_layout`) sets the
        bytes of every cache entry (``None``: :data:`DEFAULT_V4_ENGINE`). DeepSeek-V3 takes ``None`` or
        ``"reference"`` (its cache is set by ``kv_bytes``).

    Per card, with ``T = concurrency x tokens per sequence`` tokens over ``n = tp x dp`` cards, ``T_r = T / dp``
    per rank, ``T_g`` tokens per EP group and ``t = tp``:

    .. math::

       F_\\text{card} = 2 T_r \\Bigl(N_\\text{repl} + \\frac{N_\\text{tp}}{t}\\Bigr) + \\frac{2 S_r N_\\text{head}}{t}
       + \\frac{2 T k N_\\text{routed}}{E n} + \\frac{T_r F_\\text{attn}(L)}{t}

       B_\\text{card} = B_\\text{w}(T_g) + \\frac{S}{dp} L \\, b_\\text{KV} \\;(\\text{decode}), \\qquad
       B_\\text{card} = B_\\text{w}(T_g) + T_r \\, b_\\text{KV} \\;(\\text{prefill: cache writes})

    with ``S`` sequences (``S_r`` per rank; logits for ``S_r`` rows), the MLA cache whole on every TP card
    (the latent is shared by all heads), :func:`weight_bytes_per_card` for ``B_w``,
    :func:`tp_allreduce_per_layer` over ``n_layers`` and :func:`ep_alltoall_per_layer` over the MoE layers.

    DeepSeek-V4 uses the same linear terms (its inventory's ``shard``: ``wq_a``, ``wkv``, compressors,
    router and mHC replicated; ``wq_b``, ``wo_a``, ``wo_b``, indexer projections, shared expert and head
    TP-split) and :func:`attention_flops_per_token` for ``F_attn`` (heads and indexer heads split over
    TP). Its single KV head (MQA) keeps the cache whole on every TP card; KV bytes come from
    ``engine``'s layout:

    .. math::

       B_\\text{card} = B_\\text{w}(T_g) + S_r \\, B_\\text{read}(L) \\;(\\text{decode}), \\qquad
       B_\\text{card} = B_\\text{w}(T_g) + S_r \\, B_\\text{write}(L) \\;(\\text{prefill}), \\qquad
       M_\\text{card} = W_\\text{card} + S_r \\, B_\\text{stored}(L)

    (:func:`kv_read_bytes_per_sequence`, :func:`kv_stored_bytes_per_sequence`), and under TP each
    ratio-4 layer adds :func:`indexer_allreduce_per_layer`. The MTP layers are not in the step.
    """
    phase = _check_phase(phase)
    s, c = _split(model), get_card(card)
    _check_int("tp", tp)
    _check_int("dp", dp)
    problem = tp_problem(tp, heads=s.heads, o_groups=s.o_groups if s.v4 else None,
                         index_heads=s.index_heads if s.v4 else None)
    if problem:
        raise LayoutError(f"TP degree {problem}")
    engine = _engine(s, engine)
    cards = tp * dp
    if ep is not None:
        _check_int("ep", ep)
        if cards % ep:
            raise LayoutError(f"ep={ep} does not divide the {cards} cards (tp x dp = {tp} x {dp}): every card "
                              f"must belong to one EP group")
        if ep > s.n_experts:
            raise LayoutError(f"ep={ep} exceeds the {s.n_experts} routed experts: {ep - s.n_experts} cards "
                              f"would hold no expert")
    for name, v in (("mfu", mfu), ("mbu", mbu), ("comm_eff", comm_eff)):
        _check_eff(name, v)
    if not isinstance(overlap, bool):
        raise LayoutError(f"overlap must be True or False, got {overlap!r}")
    L = _array(context, "context", 1)
    S = _array(concurrency, "concurrency", 0)
    if np.any(S <= 0):
        raise LayoutError(f"concurrency must be > 0, got {concurrency!r}")
    scalar = np.ndim(context) == 0 and np.ndim(concurrency) == 0
    L, S = np.broadcast_arrays(L, S)

    per_seq = L if phase == "prefill" else 1.0
    T = S * per_seq                    # tokens of the deployment
    T_r = T / dp                       # tokens of one TP rank
    S_r = S / dp
    groups = cards // ep if ep else dp
    T_g = T / groups                   # tokens routed inside one EP group (or rank)

    # compute
    attn_phase = attention_flops_per_token(model, L, phase=phase)
    f_lin = (2 * T_r * (s.replicated + s.tp_split / tp)          # non-routed tensors of the rank
             + 2 * S_r * s.head / tp                                # logits: one row per sequence
             + 2 * T * s.top_k * s.routed / (s.n_experts * cards))  # routed experts, spread over all cards
    f_attn = T_r * attn_phase / tp
    scheme = get_scheme(quant).name
    if compute_dtype is None and scheme not in COMPUTE_DTYPE:
        raise LayoutError(f"no compute dtype known for quantization scheme {scheme!r}; pass compute_dtype")
    lin_dtype = compute_dtype or COMPUTE_DTYPE[scheme]
    p_lin = peak_flops_per_s if peak_flops_per_s is not None else c.flops(lin_dtype)
    compute_s = f_lin / (p_lin * mfu) + f_attn / (c.flops(attn_dtype) * mfu)

    # memory
    w_read = weight_bytes_per_card(model, quant, tp=tp, ep=ep, routed_tokens=T_g)
    if s.v4:
        kv_read = S_r * kv_read_bytes_per_sequence(model, L, phase=phase, engine=engine)
        kv_held = S_r * kv_stored_bytes_per_sequence(model, L, engine=engine)
    else:
        b_kv_tok = kv_bytes_per_token(model, kv_bytes)
        kv_read = S_r * L * b_kv_tok if phase == "decode" else T_r * b_kv_tok
        kv_held = S_r * L * b_kv_tok
    bytes_card = w_read + kv_read
    memory_s = bytes_card / (c.hbm_bandwidth_bytes_per_s * mbu)
    stored = weight_bytes_per_card(model, quant, tp=tp, ep=ep) + kv_held

    # communication
    comm_b = np.zeros_like(T)
    comm_s = np.zeros_like(T)
    if tp > 1:
        b, t = tp_allreduce_per_layer(model, c, tokens=T_r, tp=tp, act_bytes=act_bytes, comm_eff=comm_eff,
                                      allreduces=allreduces_per_layer)
        comm_b, comm_s = comm_b + s.layers * b, comm_s + s.layers * t
        if s.v4 and s.c4_layers:
            b, t = indexer_allreduce_per_layer(model, c, context=L, sequences=S_r, tp=tp, phase=phase,
                                               act_bytes=act_bytes, comm_eff=comm_eff)
            comm_b, comm_s = comm_b + s.c4_layers * b, comm_s + s.c4_layers * t
    if ep is not None and ep > 1:
        b, t = ep_alltoall_per_layer(model, c, tokens_per_card=T / cards, ep=ep, dispatch_bytes=dispatch_bytes,
                                     combine_bytes=combine_bytes, comm_eff=comm_eff)
        comm_b, comm_s = comm_b + s.moe_layers * b, comm_s + s.moe_layers * t

    busy = np.maximum(compute_s, memory_s)
    time_s = np.maximum(busy, comm_s) if overlap else busy + comm_s
    terms = np.stack([compute_s, memory_s, comm_s])
    bound = np.asarray(BOUNDS)[np.argmax(terms, axis=0)]
    out = {k: _out(v, scalar) for k, v in dict(
        tokens=T, flops_per_card=f_lin + f_attn, bytes_per_card=bytes_card, comm_bytes_per_card=comm_b,
        compute_s=compute_s, memory_s=memory_s, comm_s=comm_s, time_s=time_s, tokens_per_s=T / time_s,
        stored_bytes_per_card=stored).items()}
    return StepTime(phase=phase, card=c.name, cards=cards, bound=str(bound) if scalar else bound,
                    usable_bytes_per_card=c.usable_base_bytes, **out)


def layer_times(model, card, *, tp: int, context: int, concurrency: int, phase: str, quant: str = "w8a8",
                mfu: float = DEFAULT_MFU, mbu: float = DEFAULT_MBU, comm_eff: float = DEFAULT_COMM_EFF,
                overlap: bool = False) -> tuple[float, float]:
    """Compute time and TP all-reduce time of one layer of one TP group, for the same tokens: the step's
    compute over its layers (:func:`step`, ``dp = 1``) and :func:`tp_allreduce_per_layer` with
    :data:`DEFAULT_ALLREDUCES_PER_LAYER` all-reduces of all the step's tokens.

    .. math:: t_\\text{compute} = \\frac{t_\\text{compute, step}}{n_\\text{layers}}, \\qquad
       t_\\text{AR} = t_\\text{AR}(T), \\quad T = S \\cdot (L \\text{ in prefill}, 1 \\text{ in decode})
    """
    st = step(model, card, tp=tp, dp=1, context=context, concurrency=concurrency, phase=phase, quant=quant, mfu=mfu,
              mbu=mbu, comm_eff=comm_eff, overlap=overlap)
    tokens = concurrency * (context if _check_phase(phase) == "prefill" else 1)
    _, ar = tp_allreduce_per_layer(model, get_card(card), tokens=tokens, tp=tp, comm_eff=comm_eff,
                                   allreduces=DEFAULT_ALLREDUCES_PER_LAYER)
    return float(st.compute_s) / _split(model).layers, float(ar)


# ------------------------------------------------------------------------------ published measurements
@dataclass(frozen=True)
class PublishedRun:
    """The conditions of one published throughput (an entry of :mod:`pdcalc.measurements`) as the step
    model needs them; the measured value, its card and its source stay in that registry."""

    measurement: str             # id in pdcalc.measurements
    phase: str
    quant: str                   # pdcalc.quant scheme of the served weights
    compute_dtype: str           # card peak used for the linear layers
    cards_per_unit: int          # cards in the measurement's scope (8 for "per node", 1 for "per NPU")
    tp: int                      # attention TP degree
    ep: int                      # EP group, cards (the deployment modelled is one group)
    context: int                 # prompt length (prefill) or average KV length (decode)
    prompt_tokens_per_card: float | None  # prefill: prompt tokens per card in one step
    tpot_s: float | None         # decode: seconds between two output tokens of one user (sets the batch)
    cache_hit: float             # share of input tokens served from a KV cache (not computed)
    conditions: str              # what is published, and what is assumed
    source: str                  # where the conditions come from


_DAY6 = ("deepseek-ai/open-infra-index 202502OpenSourceWeek/day_6_one_more_thing_deepseekV3R1_inference_system_"
         "overview.md")
_PROFILE = "deepseek-ai/profile-data README"
_CM384 = "arXiv 2506.12708 (Serving Large Language Models on Huawei CloudMatrix384), abstract"

#: Published DeepSeek-V3/R1 throughputs to test the model against. Where a condition is not published,
#: ``conditions`` says what is assumed.
PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        measurement="deepseek-prod-h800-prefill-per-node", phase="prefill", quant="fp8", compute_dtype="fp8",
        cards_per_unit=8, tp=1, ep=32, context=4096, prompt_tokens_per_card=16 * 1024, tpot_s=None,
        cache_hit=0.563,
        conditions="24 h average incl. on-disk KV cache hits (56.3 %); EP32 prefill units; batch of the profile "
                   "runs (16K tokens per GPU, 4K prompts) assumed",
        source=f"{_DAY6}; {_PROFILE}"),
    PublishedRun(
        measurement="deepseek-prod-h800-decode-per-node", phase="decode", quant="fp8", compute_dtype="fp8",
        cards_per_unit=8, tp=1, ep=144, context=4989, prompt_tokens_per_card=None,
        tpot_s=2 / (20 + 22), cache_hit=0.0,   # 20-22 tokens/s per user: the midpoint, 21
        conditions="EP144 decode units, average KV length 4,989, 20-22 tokens/s per user",
        source=_DAY6),
    PublishedRun(
        measurement="cloudmatrix384-r1-prefill-per-npu", phase="prefill", quant="w8a8", compute_dtype="bf16",
        cards_per_unit=1, tp=1, ep=16, context=4096, prompt_tokens_per_card=16 * 1024, tpot_s=None, cache_hit=0.0,
        conditions="DeepSeek-R1 INT8, 4K prompts, perfect-EPLB projection; EP group (16 NPUs = 32 dies) and batch "
                   "(16K tokens per NPU) assumed; the 910C preset has no INT8 peak, so INT8 matmuls run at its "
                   "BF16 peak",
        source=_CM384),
    PublishedRun(
        measurement="cloudmatrix384-r1-decode-per-npu-tpot50", phase="decode", quant="w8a8", compute_dtype="bf16",
        cards_per_unit=1, tp=1, ep=320 // 2, context=4096, prompt_tokens_per_card=None,   # EP320 dies, 2 per NPU
        tpot_s=0.050, cache_hit=0.0,
        conditions="DeepSeek-R1 INT8, 4K prompts, EP320 over dies (2 per NPU), TPOT < 50 ms (taken as 50 ms); the "
                   "910C preset has no INT8 peak, so INT8 matmuls run at its BF16 peak",
        source=_CM384),
)


def measured_per_card(run: PublishedRun) -> float:
    """The published throughput of ``run``, tokens/s per card."""
    return measurements.get(run.measurement).value_si / run.cards_per_unit


def predict(run: PublishedRun, model="deepseek-v3", **efficiencies) -> StepTime:
    """The model's step for the conditions of ``run``: one EP group of ``run.ep`` cards.

    Decode runs the batch the measurement implies (Little's law: sequences per card = tokens/s per card
    x seconds per output token); prefill runs ``prompt_tokens_per_card`` prompt tokens per card.
    """
    dp = run.ep // run.tp
    if run.phase == "decode":
        concurrency = measured_per_card(run) * run.tpot_s * run.ep
    else:
        concurrency = run.prompt_tokens_per_card * run.ep / run.context
    return step(model, measurements.get(run.measurement).card, tp=run.tp, dp=dp, ep=run.ep, context=run.context,
                concurrency=concurrency, phase=run.phase, quant=run.quant, compute_dtype=run.compute_dtype,
                **efficiencies)


def compare_published(model="deepseek-v3", *, mfu: float = DEFAULT_MFU, mbu: float = DEFAULT_MBU,
                      comm_eff: float = DEFAULT_COMM_EFF, overlap: bool = True) -> pd.DataFrame:
    """Predicted vs published throughput per card, one row per :data:`PUBLISHED_RUNS` entry.

    Prefill measurements that include KV-cache hits count input tokens that were never computed; the
    prediction is scaled the same way (computed tokens / (1 - hit rate)). Both production systems overlap
    communication with computation (two micro-batches), hence ``overlap=True``. DeepSeek-R1 shares
    DeepSeek-V3's architecture.
    """
    rows = []
    for run in PUBLISHED_RUNS:
        m = measurements.get(run.measurement)
        st = predict(run, model, mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap)
        predicted = st.tokens_per_s_per_card / (1 - run.cache_hit)
        measured = measured_per_card(run)
        per_seq = run.context if run.phase == "prefill" else 1
        rows.append({
            "measurement": run.measurement, "engine": m.engine, "phase": run.phase, "card": m.card,
            "quant": run.quant, "tp": run.tp, "ep": run.ep, "context": run.context,
            "sequences_per_card": st.tokens / st.cards / per_seq,
            "predicted_tokens_per_s_per_card": predicted, "measured_tokens_per_s_per_card": measured,
            "ratio": predicted / measured, "bound": st.bound, "step_ms": st.time_s / 1e-3,
            "conditions": run.conditions, "source": m.source,
        })
    return pd.DataFrame(rows)
