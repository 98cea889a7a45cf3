"""Step time and throughput of a DeepSeek MoE model on a parallel layout: a roofline with communication.

Two architectures: MLA + MoE (DeepSeek-V2, V3, Kimi-K2, and DeepSeek-V3.2 with the lightning indexer of
DeepSeek Sparse Attention: :attr:`pdcalc.model.ModelConfig.mla`) and DeepSeek-V4 ("deepseek_v4": hybrid
sliding-window / compressed attention with an indexer, MoE with hash-routed first layers).

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

Two cost models (``costs``): ``"roofline"``, the formulas above with flat assumed efficiencies, and
``"published"``, where every GEMM, attention kernel, all-reduce and dispatch/combine message is timed from
the published kernel tables of ``pdcalc/data/costs.toml`` (:mod:`pdcalc.costs`): DeepGEMM's GEMM ceilings
by shape, FlashMLA/AMLA attention ceilings, DeepEP alpha-beta per message, an NCCL all-reduce fit, with MTP
speculative decoding, EPLB imbalance and DeepSeek's two-micro-batch overlap as parameters
(:func:`step`; under overlap the computation loses the SMs DeepSeek's profile gives the communication,
:func:`overlap_compute_slowdown`). A card without a figure of its own carries its maker's measured card's,
said in ``StepTime.cost_sources``. What a whole step takes beyond its kernels' published figures (elementwise
kernels: norms, activations, quantisation, routing; communication slowed by the computation it overlaps) is
taken in prefill as one ratio, DeepSeek's profiled prefill step over the same kernel sum
(:func:`beyond_kernels`), carried to every card and model.

Not modelled: the same in decode (no profiled decode step with a stated token count is recorded), kernel
launch latency under graph capture; the MTP module's weights and KV cache in memory; prefix-cache hits;
DeepSeek-V4's compressor pooling, compressor-state reads and mHC mixing beyond its parameters.

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

import dataclasses
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pandas as pd

from pdcalc import measurements
from pdcalc.errors import ConfigError, LayoutError, UnknownNameError
from pdcalc.flops import hybrid_attention_flops, layer_ratios, sum_capped_floor
from pdcalc.hardware import Card, get_card
from pdcalc.inventory import get_inventory
from pdcalc.kv_cache import ENGINES, engine_layout, indexer_entry_bytes, mla_bytes_per_token
from pdcalc.model import ModelConfig, load_config
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
    "w8a8-msmodelslim": "int8",
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
#: How the published-cost step overlaps two micro-batches: "published", computation on the SMs DeepSeek's
#: profile leaves it (:func:`overlap_compute_slowdown`); "ideal", communication and computation never slow
#: each other (for comparison).
OVERLAP_MODELS = ("published", "ideal")
DEFAULT_OVERLAP_MODEL = "published"
MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "deepseek_v4")


# ------------------------------------------------------------------------------ model structure
@dataclass(frozen=True)
class _Split:
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
    return _Split(model_type=cfg.model_type, layers=cfg.num_hidden_layers, moe_layers=cfg.n_moe_layers,
                  heads=cfg.num_attention_heads, hidden=cfg.hidden_size, kv_lora_rank=cfg.kv_lora_rank,
                  rope=cfg.qk_rope_head_dim, nope=cfg.qk_nope_head_dim, v_head=cfg.v_head_dim,
                  n_experts=cfg.n_routed_experts, top_k=cfg.num_experts_per_tok, replicated=repl, tp_split=tp,
                  head=head, routed=routed, activated=inv.activated(), config=cfg,
                  c4_layers=dict(layer_ratios(cfg)).get(4, 0) if v4 else 0,
                  o_groups=cfg.o_groups if v4 else None,
                  index_heads=cfg.index_n_heads if v4 or cfg.sparse else None,
                  index_dim=cfg.index_head_dim if cfg.sparse else None,
                  index_topk=cfg.index_topk if cfg.sparse else None)


def kv_step_kwargs(model, engine: str, kv_cache_dtype: str | None = None) -> dict:
    """The KV arguments of :func:`step` for ``model`` served by ``engine`` with the cache format
    ``kv_cache_dtype``: DeepSeek-V4 reads the engine's layout; the other MLA models the latent at 1 byte per
    value in FP8 (``fp8``, ``fp8_ds_mla``) and 2 otherwise, and V3.2 also the engine's indexer keys."""
    model_type = load_config(model).model_type
    if model_type == "deepseek_v4":
        return {"engine": engine}
    out = {"kv_bytes": 1.0} if kv_cache_dtype in ("fp8", "fp8_ds_mla") else {}
    if model_type == "deepseek_v32":
        out["engine"] = engine
    return out


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

    DeepSeek-V3.2 (DeepSeek Sparse Attention): the lightning indexer scores all ``L`` cached index keys with
    ``n_I`` heads of width ``d_I``, and MLA attends in the absorbed (MQA) form to the ``K = index_topk`` keys
    it selects. In prefill a query ``i`` takes the cheaper of that and the masked MHA mode DeepSeek runs
    for short sequences (the naive form over all ``i`` keys):

    .. math::

       F_\\text{decode}(L) = n_\\text{layers} \\bigl[b \\min(L, K) + 2 n_I d_I L\\bigr],
       \\qquad
       F_\\text{prefill}(L) = \\frac{n_\\text{layers}}{L} \\sum_{i=1}^{L} \\bigl[\\min\\bigl(a\\,i,\\;
       b \\min(i, K)\\bigr) + 2 n_I d_I\\, i\\bigr]

    with ``b = 2h(2 d_c + d_R)`` and ``a = 2h(d_\\text{nope} + d_R + d_v)``.

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
    deepseek-ai/DeepSeek-V3.2-Exp ``inference/model.py``, ``Indexer.forward`` (``index_score`` over
    ``k_cache[:bsz, :end_pos]``, ``topk(min(index_topk, end_pos))``) and ``MLA.forward`` (the index mask);
    the DeepSeek-V3.2-Exp report (deepseek-ai/DeepSeek-V3.2-Exp ``DeepSeek_V3_2.pdf``): DSA is instantiated
    on MLA's MQA mode, and "for short-sequence prefilling, we specially implement a masked MHA mode";
    deepseek-ai/DeepSeek-V4-Flash ``inference/model.py``, ``Attention.forward``, ``Indexer.forward``.
    """
    s, phase = _split(model), _check_phase(phase)
    L = _array(context, "context", 1)
    if s.v4:
        attn, index = hybrid_attention_flops(s.config, L, phase=phase)
        f = attn + index if phase == "decode" else (attn + index) / L
    elif s.sparse:
        K = float(s.index_topk)
        b = 2 * s.heads * (2 * s.kv_lora_rank + s.rope)       # absorbed (MQA) form, per selected key
        per_index_key = 2 * s.index_heads * s.index_dim
        if phase == "decode":
            f = s.layers * (b * np.minimum(L, K) + per_index_key * L)
        else:
            f = s.layers * (_sparse_prefill_mean(np.floor(L), K, b, 2 * s.heads * (s.nope + s.rope + s.v_head))
                            + per_index_key * (np.floor(L) + 1) / 2)
    elif phase == "decode":
        f = s.layers * 2 * s.heads * L * (2 * s.kv_lora_rank + s.rope)
    else:
        f = s.layers * 2 * s.heads * (L + 1) / 2 * (s.nope + s.rope + s.v_head)
    return _out(f, np.ndim(context) == 0)


def indexer_flops_per_token(model, context, *, phase: str = "decode"):
    """DeepSeek-V3.2: the lightning indexer's share of :func:`attention_flops_per_token` (0 for other models):
    ``n_layers 2 n_I d_I L`` in decode, the mean over the prompt in prefill. Every card of a TP group computes
    it whole: the reference ``Indexer`` builds plain ``Linear`` layers (deepseek-ai/DeepSeek-V3.2-Exp
    ``inference/model.py`` L441-444), and vLLM, SGLang and vllm-ascend replicate it."""
    s, phase = _split(model), _check_phase(phase)
    L = _array(context, "context", 1)
    if not s.sparse:
        return _out(np.zeros_like(L), np.ndim(context) == 0)
    per_index_key = 2 * s.index_heads * s.index_dim
    f = s.layers * per_index_key * (L if phase == "decode" else (np.floor(L) + 1) / 2)
    return _out(f, np.ndim(context) == 0)


def attention_flops_per_card(model, context, *, phase: str = "decode", tp: int = 1):
    """Attention-core FLOPs of one token on one card of a TP group of ``tp``: the heads split ``1/tp``, the
    V3.2 indexer whole on every card (:func:`indexer_flops_per_token`)."""
    attn = attention_flops_per_token(model, context, phase=phase)
    index = indexer_flops_per_token(model, context, phase=phase)
    return (attn - index) / tp + index


def _sparse_prefill_mean(n, K: float, b: float, a: float):
    """Mean over queries ``i = 1..n`` of ``min(a i, b min(i, K))``: the cheaper of masked MHA over all ``i``
    keys (``a`` per key) and sparse MQA over the ``min(i, K)`` selected keys (``b`` per key)."""
    m = np.minimum(n, K)
    head = min(a, b) * m * (m + 1) / 2                       # i <= K: every key is selected
    i_star = max(K, np.floor(b * K / a))                      # beyond K, MHA is cheaper up to i*
    u = np.clip(n, K, i_star)
    mid = a * (u * (u + 1) / 2 - K * (K + 1) / 2)             # K < i <= min(n, i*): masked MHA
    tail = b * K * np.maximum(n - np.maximum(u, K), 0)        # i > i*: sparse MQA on K keys
    return (head + mid + tail) / n


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


def index_key_bytes_per_token(model, engine: str | None = None) -> float:
    """DeepSeek-V3.2: lightning-indexer key bytes of one token over all layers (0 without an indexer), as
    ``engine`` stores them (:func:`pdcalc.kv_cache.indexer_entry_bytes`; None: the reference code's, ``d_I``
    FP8 values and one fp32 scale per 128 of them, as vLLM; vllm-ascend keeps BF16 keys)."""
    s = _split(model)
    return s.layers * indexer_entry_bytes(s.config, engine or "reference") if s.sparse else 0.0


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
    """The engine whose KV layout a step reads: V4 default :data:`DEFAULT_V4_ENGINE`; V3.2 the engine's indexer
    keys (None: the reference's); the other MLA models none (their latent's dtype is ``kv_bytes``)."""
    if not s.v4:
        if s.sparse:
            if engine is not None and engine not in ENGINES:
                raise UnknownNameError("engine", engine, ENGINES)
            return engine
        if engine not in (None, "reference"):
            raise LayoutError(f"engine={engine!r}: {s.model_type} steps read the MLA latent at the dtype kv_bytes "
                              f"sets, the same in every engine; engine must be None or 'reference'")
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

    DeepSeek-V3.2: in decode the ``min(L, K)`` latents the indexer selects and all ``L`` index keys
    (:func:`index_key_bytes_per_token` ``b_I``); a prefill writes both for every token:

    .. math:: B_\\text{read}(L) = \\min(L, K)\\,b_\\text{KV} + L\\,b_I, \\qquad B_\\text{write}(L) = L\\,(b_\\text{KV} + b_I)

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
    if s.sparse and phase == "decode":
        n = np.floor(L)
        return _out(np.minimum(n, s.index_topk) * kv_bytes_per_token(model, kv_bytes)
                    + n * index_key_bytes_per_token(model, engine), scalar)
    if not s.v4:
        return _out(L * (kv_bytes_per_token(model, kv_bytes) + index_key_bytes_per_token(model, engine)), scalar)
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

    DeepSeek-V3: ``L b_KV`` (:func:`kv_bytes_per_token`); V3.2 adds the index keys, ``L (b_KV + b_I)``. DeepSeek-V4: every cache of ``engine``'s
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
        return _out(L * (kv_bytes_per_token(model, kv_bytes) + index_key_bytes_per_token(model, engine)), scalar)
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


# ------------------------------------------------------------------------------ published costs
#: The cost models :func:`step` offers: ``"roofline"``, flat assumed efficiencies (:data:`DEFAULT_MFU`,
#: :data:`DEFAULT_MBU`, :data:`DEFAULT_COMM_EFF`) on whole-step FLOPs, bytes and bytes sent; ``"published"``,
#: every kernel and message timed from the published figures of ``pdcalc/data/costs.toml``
#: (:mod:`pdcalc.costs`).
COSTS = ("roofline", "published")
#: The cost model of :func:`step` when none is named.
DEFAULT_COSTS = "roofline"

#: The card and dtype of the only published GEMM tables (DeepGEMM's README, :mod:`pdcalc.costs`).
GEMM_REFERENCE = ("h800", "fp8")
#: Where a card has no published figure of a kind, the card its efficiency is carried from: the
#: measured card of the same maker (``hardware.toml`` ``family``).
NEAREST_CARD = {"nvidia": "h800", "ascend": "ascend-910c"}
#: Devices (EP ranks) per card where a card is a package of several: a 910C package holds two dies and
#: CANN exposes each as its own device (arXiv 2506.12708; the A3 runs of pdcalc/data/measurements.toml
#: launch 16 ranks on 8 packages).
RANKS_PER_CARD = {"ascend-910c": 2}
#: Cards whose scale-up fabric spans more than a server, in cards: the CloudMatrix384 supernode links its
#: 384 910C NPUs over the UB plane (arXiv 2506.12708), and DeepEP-Ascend's A3 tables are 'Intranode' at
#: every EP size.
SCALE_UP_DOMAIN = {"ascend-910c": 384}
#: Bytes of one FP8 / INT8 dispatched hidden value including its scale: one FP32 scale per 128 values
#: (DeepSeek-V3 report §3.3.2, fine-grained 1 x 128 activation tiles; DeepEP's FP8 dispatch).
FP8_SCALE_BYTES_PER_VALUE = 4 / 128


@dataclass(frozen=True)
class CostSource:
    """Where one component of a published-cost step takes its cost from.

    ``carried`` is True where the figure was measured on another card or in another dtype than the one
    it is applied to; ``note`` says how it was carried (as a share of the other card's peak, scaled by
    link bandwidth, ...)."""

    component: str          # "GEMM (dense)", "MLA attention", "MoE dispatch/combine", ...
    applied_to: str         # card (and dtype) of the step
    measured_on: str        # card (and dtype) of the published figure
    tables: tuple           # pdcalc/data/costs.toml table ids
    carried: bool
    note: str


def _costs():
    from pdcalc import costs
    return costs


def _nearest(card: Card, have) -> str:
    """``card`` itself if it has a figure (``have``: card names), else its maker's measured card, else H800."""
    if card.name in have:
        return card.name
    near = NEAREST_CARD.get(card.family)
    return near if near in have else GEMM_REFERENCE[0]


# --------------------------------------------------------------------- GEMM
@dataclass(frozen=True)
class GemmCeiling:
    """The two ceilings of one published GEMM shape (DeepGEMM's README tables, H800, FP8).

    ``flop_per_s`` is the highest FLOP/s any row of the shape reached (its compute ceiling),
    ``bytes_per_s`` the highest memory bandwidth any row of the shape reached, in this operation's table
    or in the dense table (its memory ceiling: small-``M`` rows stream the weights). As shares of the
    measured card's peak they carry to other cards and dtypes."""

    operation: str
    n: int
    k: int
    flop_per_s: float
    bytes_per_s: float
    compute_share: float          # flop_per_s / peak FLOP/s of the measured card and dtype
    memory_share: float           # bytes_per_s / HBM bandwidth of the measured card
    tables: tuple


@cache
def gemm_ceilings(operation: str) -> tuple[GemmCeiling, ...]:
    """The published GEMM shapes of one ``operation`` ("dense", "grouped_contiguous", "grouped_masked")
    with their compute and memory ceilings (:class:`GemmCeiling`)."""
    costs = _costs()
    card, dtype = GEMM_REFERENCE
    own = costs.gemm(card, dtype, operation=operation)
    dense = costs.gemm(card, dtype, operation="dense")
    ref = get_card(card)
    out = []
    for n, k in sorted({(p.n, p.k) for p in own}):
        rows = [p for p in own if (p.n, p.k) == (n, k)]
        mem_rows = rows + [p for p in dense if (p.n, p.k) == (n, k)]
        f = max(p.achieved_flop_per_s for p in rows)
        b = max(p.memory_bytes_per_s for p in mem_rows)
        out.append(GemmCeiling(operation=operation, n=n, k=k, flop_per_s=f, bytes_per_s=b,
                               compute_share=f / ref.flops(dtype), memory_share=b / ref.hbm_bandwidth_bytes_per_s,
                               tables=tuple(sorted({p.table_id for p in mem_rows}))))
    return tuple(out)


def nearest_gemm(operation: str, n: int, k: int) -> GemmCeiling:
    """The published shape of ``operation`` nearest to ``n x k`` (sum of the log ratios of both sides)."""
    return min(gemm_ceilings(operation), key=lambda g: (abs(np.log(g.n / n)) + abs(np.log(g.k / k)), g.n, g.k))


def gemm_bytes(m, n: int, k: int, *, weight_bytes: float, in_bytes: float = 1.0, out_bytes: float = 2.0):
    """Bytes a GEMM moves as DeepGEMM counts them: the weights, the ``m x k`` input and the ``m x n`` output.

    .. math:: B = W + m\\,k\\,s_\\text{in} + m\\,n\\,s_\\text{out}
    """
    return weight_bytes + m * (k * in_bytes + n * out_bytes)


def gemm_seconds(operation: str, n: int, k: int, *, flops, bytes_moved, card, dtype: str,
                 peak_flops_per_s: float | None = None):
    """Time of one GEMM (or grouped GEMM) of shape ``n x k`` on ``card``: the slower of its two ceilings.

    .. math:: t = \\max\\Bigl(\\frac{F}{s_F P}, \\frac{B}{s_B W}\\Bigr)

    with ``s_F`` and ``s_B`` the compute and memory shares of the nearest published shape
    (:func:`nearest_gemm`), ``P`` the card's peak in ``dtype`` and ``W`` its HBM bandwidth. Returns
    ``(seconds, compute_bound)``.
    """
    c = get_card(card)
    g = nearest_gemm(operation, n, k)
    p = peak_flops_per_s if peak_flops_per_s is not None else c.flops(dtype)
    t_f = flops / (g.compute_share * p)
    t_b = bytes_moved / (g.memory_share * c.hbm_bandwidth_bytes_per_s)
    return np.maximum(t_f, t_b), t_f >= t_b


def gemm_check() -> pd.DataFrame:
    """Every published GEMM row against :func:`gemm_seconds` on the H800 in FP8: the rows that set a
    ceiling are reproduced by construction, the others (intermediate ``M``) are a check of the
    two-ceiling model. Columns ``table, operation, m, n, k, groups, published_s, model_s, ratio, sets_ceiling``."""
    costs = _costs()
    card, dtype = GEMM_REFERENCE
    rows = []
    for op in ("dense", "grouped_contiguous", "grouped_masked"):
        g_by = {(g.n, g.k): g for g in gemm_ceilings(op)}
        for p in costs.gemm(card, dtype, operation=op):
            groups = p.groups or 1
            m = p.m if p.m is not None else p.m_per_group * groups
            f = 2.0 * m * p.n * p.k
            b = gemm_bytes(m, p.n, p.k, weight_bytes=groups * p.n * p.k)
            t, _ = gemm_seconds(op, p.n, p.k, flops=f, bytes_moved=b, card=card, dtype=dtype)
            pub = f / p.achieved_flop_per_s
            g = g_by[(p.n, p.k)]
            rows.append({"table": p.table_id, "operation": op, "m": m, "n": p.n, "k": p.k, "groups": groups,
                         "published_s": pub, "model_s": float(t), "ratio": float(t) / pub,
                         "sets_ceiling": bool(p.achieved_flop_per_s == g.flop_per_s
                                              or p.memory_bytes_per_s == g.bytes_per_s)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------- MLA attention
@dataclass(frozen=True)
class AttentionCeilings:
    """Compute and memory shares an MLA attention kernel reaches on one card, and where they come from."""

    compute_share: float      # of the card's peak in the attention dtype
    memory_share: float       # of the card's HBM bandwidth
    sources: tuple


@cache
def attention_ceilings(card: str, attn_dtype: str = "bf16", attention: str = "dense",
                       topk: int | None = None) -> AttentionCeilings:
    """Shares of peak an MLA decoding kernel reaches (FlashMLA on the H800, AMLA on the 910C).

    Compute: the highest published FLOP/s of the card's kernels of that ``attention`` ("dense", or "sparse":
    FlashMLA's token-level sparse kernel of DeepSeek-V3.2, at ``topk`` selected tokens where a point states
    it) over its peak in ``attn_dtype`` (the preset's); memory: the highest published bandwidth of a dense
    kernel over its HBM bandwidth (no sparse kernel publishes one). A card without a figure takes the share
    of its maker's measured card (:data:`NEAREST_CARD`), the memory share of the H800 where its maker
    published none. Prefill attention has no published figure: the decoding kernel's compute share is used
    for it (see :func:`step`).
    """
    costs = _costs()
    c = get_card(card)
    pts = [p for p in costs.points("mla") if p.attention == "dense" and p.phase == "decode"]
    comp = [p for p in costs.points("mla") if p.attention == attention and p.phase == "decode"
            and p.achieved_flop_per_s is not None]
    if attention == "sparse" and topk is not None and any(p.topk == topk for p in comp):
        comp = [p for p in comp if p.topk == topk]
    mem = [p for p in pts if p.memory_bytes_per_s is not None and p.bound == "memory"]
    src_c = _nearest(c, {p.card for p in comp})
    src_m = _nearest(c, {p.card for p in mem})
    sc, sm = get_card(src_c), get_card(src_m)
    best_c = max((p for p in comp if p.card == src_c), key=lambda p: p.achieved_flop_per_s)
    best_m = max((p for p in mem if p.card == src_m), key=lambda p: p.memory_bytes_per_s)
    cs = best_c.achieved_flop_per_s / sc.flops(attn_dtype if attn_dtype in sc.flops_per_s else "bf16")
    ms = best_m.memory_bytes_per_s / sm.hbm_bandwidth_bytes_per_s
    sources = (
        CostSource("MLA attention, compute", f"{c.name} {attn_dtype}", f"{src_c} bf16", (best_c.table_id,),
                   src_c != c.name or attn_dtype != "bf16",
                   f"{best_c.achieved_flop_per_s / 1e12:g} TFLOPS of a {attention} decoding kernel = {cs:.1%} of "
                   f"{src_c}'s BF16 peak" + ("" if src_c == c.name else f", carried to {c.name} as a share of its "
                                                                        f"{attn_dtype} peak")),
        CostSource("MLA attention, memory", c.name, src_m, (best_m.table_id,), src_m != c.name,
                   f"{best_m.memory_bytes_per_s / 1e9:g} GB/s = {ms:.1%} of {src_m}'s HBM bandwidth"
                   + ("" if src_m == c.name else f", carried to {c.name} as a share of its HBM bandwidth")),
    )
    return AttentionCeilings(compute_share=cs, memory_share=ms, sources=sources)


# --------------------------------------------------------------------- MoE dispatch / combine
def _ranks(card: Card) -> int:
    return RANKS_PER_CARD.get(card.name, 1)


def _domain(card: Card) -> int:
    """Cards that reach each other over the scale-up fabric (NVLink, HCCS, UB)."""
    return SCALE_UP_DOMAIN.get(card.name, card.cards_per_node)


def _interp_log2(x, xs, ys):
    """``ys`` at ``x``, linear in log2 of the EP size between published sizes, constant beyond them."""
    order = np.argsort(xs)
    xs, ys = np.log2(np.asarray(xs, float)[order]), np.asarray(ys, float)[order]
    return float(np.interp(np.log2(x), xs, ys))


def _copy_bytes(dtype: str, hidden: int) -> float:
    return hidden * (2.0 if dtype in ("bf16", "fp16") else 1.0 + FP8_SCALE_BYTES_PER_VALUE)


@dataclass(frozen=True)
class MessageCost:
    """One dispatch or combine call, as :func:`ep_message_seconds` times it: ``t = alpha + bytes / beta``."""

    alpha_s: float                  # latency per call
    intra_bytes_per_s: float        # beta over the scale-up fabric (per rank)
    inter_bytes_per_s: float        # beta over the scale-out network (per rank)
    source: CostSource


def _link_ratio(card: Card, src: Card, inter: bool) -> float:
    """Per-rank link bandwidth of ``card`` over that of ``src`` (scale-out or scale-up)."""
    attr = "scale_out_bytes_per_s" if inter else "intra_node_bytes_per_s"
    return (getattr(card, attr) / _ranks(card)) / (getattr(src, attr) / _ranks(src))


@cache
def _dispatch_points(src: str, mode: str, operation: str, inter: bool):
    costs = _costs()
    pts = costs.dispatch(src, mode=mode, operation=operation)
    if mode == "low_latency":
        both = [p for p in pts if p.link == "RDMA+NVLink"]
        pts = both or pts
    elif inter:
        pts = [p for p in pts if p.link == "RDMA"]
    else:
        pts = [p for p in pts if p.link in ("NVLink", "HCCS")]
    return tuple(pts)


def ep_message_cost(card, *, mode: str, operation: str, ep: int) -> MessageCost:
    """Latency and bandwidths of one MoE ``operation`` ("dispatch" or "combine") in ``mode`` ("normal":
    prefill kernels, "low_latency": decode kernels) over an EP group of ``ep`` cards.

    Normal kernels publish a bottleneck bandwidth by EP size (no latency): ``beta`` is that bandwidth at
    ``ep`` (over NVLink/HCCS inside the scale-up domain, RDMA beyond it), ``alpha = 0``. Low-latency
    kernels publish the latency of one call at 128 tokens by EP size: ``beta`` is the link's stated maximum
    (DeepEP: ~50 GB/s per CX7 NIC, ~160 GB/s NVLink; DeepEP-Ascend states none, so the card preset's
    scale-up bandwidth), and ``alpha`` the published latency less the time of the published bytes at
    ``beta``, i.e. what the call costs beyond moving its data. Sizes between published ones interpolate
    in log2 of the size; beyond them the nearest is kept. A card without tables carries those of its
    maker's measured card (:data:`NEAREST_CARD`; scale-out from the H800), ``beta`` scaled by the ratio of
    the cards' per-rank link bandwidths.
    """
    costs = _costs()
    c = get_card(card)
    ranks = ep * _ranks(c)
    inter = ep > _domain(c)
    have = {p.card for p in costs.points("dispatch") if p.mode == mode and p.card in _card_names()}
    src_name = _nearest(c, have)
    if inter and not _dispatch_points(src_name, mode, operation, True):
        src_name = GEMM_REFERENCE[0]          # scale-out tables: the H800's
    src = get_card(src_name)
    pts = _dispatch_points(src_name, mode, operation, inter)
    if not pts:
        raise ConfigError("pdcalc/data/costs.toml", "dispatch", f"no {mode} {operation} figure for {src_name}")
    scale_intra = _link_ratio(c, src, False)
    scale_inter = _link_ratio(c, src, True)
    eps = [p.ep_size for p in pts]
    tables = tuple(sorted({p.table_id for p in pts}))
    carried = src_name != c.name
    how = "" if not carried else f"; carried from {src_name}, bandwidth scaled by the per-rank link ratio"
    if mode == "normal":
        bw = _interp_log2(ranks, eps, [p.bandwidth_bytes_per_s for p in pts])
        scale = scale_inter if inter else scale_intra
        note = (f"{'RDMA' if inter else 'scale-up'} bottleneck bandwidth {bw / 1e9:.3g} GB/s at EP {ranks} "
                f"(normal kernels; no latency published, alpha = 0){how}")
        return MessageCost(alpha_s=0.0, intra_bytes_per_s=bw * scale, inter_bytes_per_s=bw * scale,
                           source=CostSource(f"MoE {operation} (normal)", c.name, src_name, tables, carried, note))
    # low latency: alpha from the published latency at the published batch
    nic = next((p.nic_max_bytes_per_s for p in pts if p.nic_max_bytes_per_s), None) \
        or src.scale_out_bytes_per_s / _ranks(src)
    normal = _dispatch_points(src_name, "normal", operation, False)
    nvl = next((p.link_max_bytes_per_s for p in normal if p.link_max_bytes_per_s), None) \
        or src.intra_node_bytes_per_s / _ranks(src)
    domain_ranks = _domain(src) * _ranks(src)
    alphas = []
    for p in pts:
        per = p.tokens_per_batch * p.top_k * _copy_bytes(p.dispatch_dtype if operation == "dispatch"
                                                         else p.combine_dtype, p.hidden)
        f_out = max(0, p.ep_size - domain_ranks) / p.ep_size
        alphas.append(max(0.0, p.latency_s - max(per * f_out / nic, per * (1 - f_out) / nvl)))
    a = _interp_log2(ranks, eps, alphas)
    note = (f"latency {a * 1e6:.3g} us per call beyond its bytes (published latency at 128 tokens less the "
            f"bytes at {nic / 1e9:g} GB/s RDMA, {nvl / 1e9:g} GB/s scale-up){how}")
    return MessageCost(alpha_s=a, intra_bytes_per_s=nvl * scale_intra, inter_bytes_per_s=nic * scale_inter,
                       source=CostSource(f"MoE {operation} (low latency)", c.name, src_name, tables, carried, note))


def _card_names():
    from pdcalc.hardware import card_names
    return set(card_names())


def ep_message_seconds(card, *, mode: str, operation: str, ep: int, tokens_per_card, n_experts: int, top_k: int,
                       hidden: int, dtype: str, imbalance: float = 1.0):
    """Seconds of one dispatch or combine call of ``tokens_per_card`` tokens per card, and the bytes each
    card sends (arrays welcome).

    Normal kernels (prefill) send each token once per remote card (inside the scale-up domain) or once
    per remote node (beyond it) that holds one of its experts, as DeepEP forwards over NVLink after one
    RDMA copy per node; low-latency kernels (decode) send each of the ``k`` copies, those to other nodes
    over RDMA and the rest over the scale-up fabric:

    .. math::

       t_\\text{normal} = \\frac{\\rho\\,T\\,\\mathbb{E}[\\text{remote}]\\,b}{\\beta}, \\qquad
       t_\\text{LL} = \\alpha + \\rho\\max\\Bigl(\\frac{f\\,T k b}{\\beta_\\text{out}},
       \\frac{(1-f)\\,T k b}{\\beta_\\text{in}}\\Bigr)

    with ``b`` the bytes of one copy (FP8 with its scales, or BF16), ``f`` the share of ranks on other
    nodes, ``rho`` the max/mean load of the hottest rank (:func:`imbalance_factor`) and ``alpha``,
    ``beta`` from :func:`ep_message_cost`. Per rank: a card of several ranks (:data:`RANKS_PER_CARD`)
    splits its tokens over them. Routing is uniform over experts (DeepSeek-V3's group-limited routing,
    at most 4 nodes per token, is not modelled: the node count is an upper bound).
    """
    c = get_card(card)
    r = _ranks(c)
    ranks = ep * r
    T = np.asarray(tokens_per_card, dtype=float) / r
    mc = ep_message_cost(c, mode=mode, operation=operation, ep=ep)
    b = _copy_bytes(dtype, hidden)
    domain_ranks = _domain(c) * r
    if mode == "normal":
        if ranks <= domain_ranks:
            remote = expected_remote_cards(n_experts, ranks, top_k)
            sent = T * remote * b
            t = imbalance * sent / mc.intra_bytes_per_s
        else:
            nodes = max(1, ranks // domain_ranks)
            remote = expected_remote_cards(n_experts, nodes, top_k) if nodes > 1 else 0.0
            sent = T * remote * b
            t = imbalance * sent / mc.inter_bytes_per_s
        return t, sent * r, mc.source
    f_out = max(0, ranks - domain_ranks) / ranks
    sent = T * top_k * b
    t = mc.alpha_s + imbalance * np.maximum(f_out * sent / mc.inter_bytes_per_s,
                                            (1 - f_out) * sent / mc.intra_bytes_per_s)
    return t, sent * r, mc.source


# --------------------------------------------------------------------- all-reduce
@cache
def allreduce_fit():
    """The alpha-beta fit of NCCL all-reduce on 8 H100 (:func:`pdcalc.costs.allreduce_alpha_beta`), with
    the points whose time exceeds that of a larger message left out (the source's own outlier)."""
    costs = _costs()
    pts = sorted((p for p in costs.allreduce("h100", "intranode") if p.time_s is not None),
                 key=lambda p: p.size_bytes)
    tables = {p.table_id for p in pts}
    table = sorted(tables)[0]
    pts = [p for p in pts if p.table_id == table]
    out = [p.size_bytes for i, p in enumerate(pts) if any(q.time_s < p.time_s for q in pts[i + 1:])]
    return costs.allreduce_alpha_beta("h100", "intranode", table_id=table, exclude_sizes_bytes=out), table, pts


def allreduce_seconds(card, *, payload_bytes, tp: int):
    """One all-reduce of ``payload_bytes`` over ``tp`` cards: the NCCL H100 fit, its bandwidth scaled by
    the card's link bandwidth over the H100's and by the ring's ``2 (t-1)/t`` over that of the 8 GPUs
    measured; its latency kept.

    .. math:: t = \\alpha + \\frac{P}{\\beta}\\,\\frac{W_\\text{H100}}{W_\\text{link}}\\,
       \\frac{(t-1)/t}{7/8}
    """
    c = get_card(card)
    if tp == 1:
        return np.zeros_like(np.asarray(payload_bytes, dtype=float))
    fit, _, pts = allreduce_fit()
    world = pts[0].world_size if pts and pts[0].world_size else 8
    h100 = get_card("h100")
    ratio = _link(c, tp) / h100.intra_node_bytes_per_s
    ring = ((tp - 1) / tp) / ((world - 1) / world)
    return fit.latency_s + np.asarray(payload_bytes, dtype=float) * ring / (fit.bandwidth_bytes_per_s * ratio)


# --------------------------------------------------------------------- MTP, imbalance, overheads
def mtp_acceptance_default() -> float:
    """Acceptance rate of one MTP draft token: the midpoint of the DeepSeek-V3 report's 85-90 %
    (:func:`pdcalc.costs.mtp_acceptance`)."""
    p = _costs().mtp_acceptance("DeepSeek-V3")[0]
    return (p.acceptance_low_fraction + p.acceptance_high_fraction) / 2


def accepted_tokens(mtp_steps: int, acceptance: float) -> float:
    """Expected draft tokens accepted per step when each of ``mtp_steps`` chained drafts is accepted with
    probability ``acceptance`` given the one before it was:

    .. math:: \\mathbb{E}[\\text{accepted}] = \\sum_{i=1}^{d} a^i
    """
    return float(sum(acceptance ** i for i in range(1, mtp_steps + 1)))


def imbalance_factor(eplb: bool | None, *, experts_per_rank: float = 8.0, ep: int = 32,
                     redundant_experts: int = 0) -> tuple[float, CostSource | None]:
    """Max/mean routed tokens of the hottest EP rank (TensorRT-LLM's EPLB table, DeepSeek-R1 on 32 GB200).

    ``eplb=None``: balanced (1). ``eplb=True``: ``1 + r`` with ``r`` the published ``(max - mean) / mean``
    with EPLB's redundant slots, at the published EP size nearest to ``ep``. ``eplb=False``: ``1 + r`` of
    the run without EPLB, scaled to the rank's expert count: the table's own per-slot and per-rank rows
    agree with ranks summing independent slots (relative spread ``1/sqrt(slots)``), so

    .. math:: \\rho = 1 + r_\\text{none}\\sqrt{s_\\text{pub} / s}

    with ``s`` experts per rank. The published runs all carry 32 redundant slots; with EPLB and no
    redundant experts the same figure is carried (an optimistic bound), and said so.
    """
    if eplb is None:
        return 1.0, None
    pts = _costs().expert_imbalance(by="rank")
    if eplb:
        rows = [p for p in pts if p.eplb != "none"]
        p = min(rows, key=lambda q: (abs(np.log(q.ep_size / ep)), q.ep_size))
        rho = 1 + p.imbalance_ratio
        note = (f"max/mean {rho:.3g} with EPLB ({p.slots_per_rank} slots per rank, EP {p.ep_size}, "
                f"{p.slots_per_rank * p.ep_size - 256} redundant)")
        if redundant_experts == 0:
            note += "; no figure without redundant experts is published, this one is carried (optimistic)"
    else:
        p = next(q for q in pts if q.eplb == "none")
        rho = 1 + p.imbalance_ratio * np.sqrt(p.slots_per_rank / max(experts_per_rank, 1e-9))
        note = (f"max/mean {rho:.3g} without EPLB: {1 + p.imbalance_ratio:.4g} at {p.slots_per_rank} experts "
                f"per rank (EP {p.ep_size}), scaled by sqrt({p.slots_per_rank} / {experts_per_rank:g})")
    return float(rho), CostSource("expert-load imbalance", f"EP {ep}", f"{p.card} EP {p.ep_size}",
                                  (p.table_id,), True, note + "; carried to every card and EP size")


#: Phase of DeepSeek's profile whose overlap figure times each DeepEP mode.
_OVERLAP_PHASE = {"normal": "prefill", "low_latency": "decode"}


def overlap_compute_slowdown(card, mode: str, overlap_model: str = DEFAULT_OVERLAP_MODEL) -> tuple[float, CostSource]:
    """Factor on the compute-bound kernel time of a layer whose two micro-batches overlap computation with
    DeepEP ``mode`` communication, and its source.

    DeepSeek's profile gives the communication of its prefill (DeepEP normal kernels) 24 of the H800's 132
    SMs and the computation the other 108; its decode communication (low-latency kernels) holds none
    (``pdcalc/data/costs.toml``, tables ``deepseek-profile-prefill-overlap`` and
    ``deepseek-profile-decode-overlap``). A compute-bound kernel spreads the same work over fewer SMs:

    .. math:: k = \\frac{N_\\text{SM}}{N_\\text{SM} - N_\\text{comm}} = \\frac{132}{108} \\;(\\text{normal}),
       \\qquad k = 1 \\;(\\text{low latency})

    for the whole overlapped layer, not only while a message is in flight: DeepSeek's training trace
    (``deepseek-profile-train-trace``) launches its GEMMs on 132 - 20 = 112 thread blocks throughout.
    Memory-bound kernels keep their time (the V3 report: the SMs given to communication "limit the
    computational throughput"). Other cards carry the H800's share of SMs to their own compute units.
    ``overlap_model="ideal"`` gives 1 (the computation keeps every SM)."""
    if overlap_model not in OVERLAP_MODELS:
        raise UnknownNameError("overlap model", overlap_model, OVERLAP_MODELS)
    c = card if isinstance(card, Card) else get_card(card)
    if overlap_model == "ideal":
        return 1.0, CostSource("two-micro-batch overlap", c.name, "none", (), False,
                               "ideal overlap: computation keeps every SM, communication hidden up to the other "
                               "micro-batch's computation")
    phase = _OVERLAP_PHASE[mode]
    (p,) = [q for q in _costs().overlap(phase=phase, mode=mode) if q.compute_sms is not None
            and q.comm_sms is not None and q.table_id.startswith("deepseek-profile")]
    carried = c.name != p.card
    k = p.compute_slowdown
    note = (f"{p.comm_sms} of {p.sms} SMs to communication (DeepEP {mode.replace('_', '-')} kernels) in DeepSeek's "
            f"{phase} profile: compute-bound kernels of the overlapped layers x{k:.4g}")
    if carried and p.comm_sms:
        note += f"; the share ({p.comm_sm_share:.3g}) carried to {c.name}'s compute units"
    return float(k), CostSource("two-micro-batch overlap", c.name, p.card, (p.table_id,), carried and bool(p.comm_sms),
                                note)


def overhead_seconds(layers: int, *, graph: bool) -> tuple[float, CostSource]:
    """Fixed host time per step. Under graph capture (CUDA graphs, Ascend graph mode) no per-step figure is
    published: none is added. Eager decode adds the host gap per transformer block published for the
    910B3 (vllm-ascend issue #9404), carried to every card."""
    pts = [p for p in _costs().overheads() if p.what == "eager_decode_host_gap"]
    p = pts[0]
    if graph:
        return 0.0, CostSource("per-step overhead", "graph mode", "none", (), False,
                               "graph capture: no published per-step overhead; none added")
    return layers * p.idle_s, CostSource("per-step overhead", "eager mode", p.card, (p.table_id,), True,
                                         f"host gap {p.idle_s * 1e6:g} us per transformer block in eager "
                                         f"decode ({p.card}), carried")


@cache
def _profiled_steps() -> dict:
    return {p.phase: p for p in _costs().overheads() if p.what == "profiled_step"}


@cache
def beyond_kernels(phase: str, overlap_model: str | None = None) -> tuple[float, CostSource | None]:
    """How much longer a whole step of a serving system takes than its published kernel costs add up to:
    the time of the step profiled in ``phase`` (``pdcalc/data/costs.toml``, ``what = "profiled_step"``:
    DeepSeek's own prefill profile) over the published-cost step of :func:`step` at the profile's
    conditions (its model, card, dtype, EP size, prompt length and tokens per card, two micro-batches,
    balanced routing), under ``overlap_model`` (:data:`OVERLAP_MODELS`; ``None``: the default), so that a
    what-if on the overlap model is scaled to the same profile.

    Returns ``(k, source)``: every published-cost step of the phase takes ``k`` times its kernel sum
    (every card and model: the share is carried); the per-step host overhead is not scaled. ``(1.0,
    None)`` where no step of the phase is recorded (decode). ``k`` is set by the profiled rate, which
    LMSYS reads from DeepSeek's profile in the post that also reports SGLang's prefill runs at the same
    conditions: those runs are in sample (:mod:`pdcalc.validation` marks them).
    """
    p = _profiled_steps().get(phase)
    if p is None:
        return 1.0, None
    c = get_card(p.card)
    model = p.model.lower()
    st = step(model, p.card, tp=1, dp=p.ep_size, ep=p.ep_size, context=p.context_tokens,
              concurrency=p.tokens_per_batch * p.ep_size / p.context_tokens, phase=phase, quant=p.dtype,
              costs="published", overlap=True, overlap_model=overlap_model, beyond=False)
    kernels_node = float(st.tokens_per_s_per_card) * c.cards_per_node
    k = kernels_node / p.node_tokens_per_s
    note = (f"{p.model}'s {phase} profile on the {p.card} ({p.ep_size}-way EP, {p.context_tokens:,.0f}-token "
            f"prompts, {p.tokens_per_batch:,} tokens per card): {p.node_tokens_per_s:,.0f} tokens/s per node "
            f"against {kernels_node:,.0f} from the published kernel costs; every {phase} step x{k:.4g}")
    return k, CostSource(f"beyond the kernel tables ({phase})", "every card", p.card, (p.table_id,), True,
                         note)


# --------------------------------------------------------------------- the published step
_ATTN_CATEGORIES = frozenset({"attention", "kv_compressor", "indexer", "mhc"})
_SKIP_CATEGORIES = frozenset({"embedding", "hash_routing", "norms"})


@dataclass(frozen=True)
class _Gemm:
    """One (fused) GEMM of a layer on one card: tensors of the same layer, segment and input fused."""

    segment: str            # "attn", "ffn", "head", "proj" (MTP input projection)
    routed: bool            # a grouped GEMM over the card's routed experts
    n: int                  # output features on the card (one expert for routed)
    k: int                  # input features on the card
    weight_bytes: float     # weights on the card (routed: all local experts)


@dataclass(frozen=True)
class _LayerKind:
    count: int
    attn: tuple
    ffn: tuple
    moe: bool


def _gemm_plan_build(model, quant: str, tp: int, ep: int | None, redundant: int, part: str):
    from pdcalc.memory import tensor_card_bytes

    inv, sch = get_inventory(model), get_scheme(quant)
    s = _split(model)
    n_loc = place_experts(s.n_experts, ep, redundant).max_experts_per_card if ep else None
    groups: dict = {}
    for t in inv.tensors:
        if t.part != part or t.category in _SKIP_CATEGORIES or len(t.shape) != 2:
            continue
        routed = t.category == "routed_experts"
        seg = ("head" if t.category == "lm_head" else "proj" if t.category == "mtp_proj"
               else "attn" if t.category in _ATTN_CATEGORIES else "ffn")
        n, k = int(t.shape[0]), int(t.shape[1])
        split = t.shard == "tp" or (routed and ep is None)
        if split and tp > 1:
            n, k = (n, max(1, k // tp)) if n == s.hidden else (max(1, n // tp), k)
        b = tensor_card_bytes(t, sch, experts_per_card=n_loc or t.count, tp=tp, experts_tp_split=ep is None)
        key = (t.layer if seg not in ("head",) else None, seg, routed, t.shard, k)
        g = groups.get(key)
        groups[key] = (n + (g[0] if g else 0), b + (g[1] if g else 0.0))
    layers: dict = {}
    head, proj = [], []
    for (layer, seg, routed, _, k), (n, b) in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1:])):
        g = _Gemm(segment=seg, routed=routed, n=n, k=k, weight_bytes=b)
        if seg == "head":
            head.append(g)
        elif seg == "proj":
            proj.append(g)
        else:
            layers.setdefault(layer, []).append(g)
    kinds: dict = {}
    for layer, gs in layers.items():
        sig = (tuple(g for g in gs if g.segment == "attn"), tuple(g for g in gs if g.segment == "ffn"),
               any(g.routed for g in gs))
        kinds[sig] = kinds.get(sig, 0) + 1
    return (tuple(_LayerKind(count=c, attn=a, ffn=f, moe=m) for (a, f, m), c in kinds.items()),
            tuple(head), tuple(proj))


@cache
def _gemm_plan_cached(model: str, quant: str, tp: int, ep, redundant: int, part: str):
    return _gemm_plan_build(model, quant, tp, ep, redundant, part)


def _gemm_plan(model, quant, tp, ep, redundant, part="main"):
    if isinstance(model, str) and isinstance(quant, str):
        return _gemm_plan_cached(model, quant, tp, ep, redundant, part)
    return _gemm_plan_build(model, quant, tp, ep, redundant, part)


class _Tally:
    """Accumulates kernel times by what bounds them, FLOPs, bytes and a breakdown by component."""

    def __init__(self, shape):
        self.zero = np.zeros(shape)
        self.compute = self.zero.copy()
        self.memory = self.zero.copy()
        self.comm = self.zero.copy()
        self.flops = self.zero.copy()
        self.bytes = self.zero.copy()
        self.comm_bytes = self.zero.copy()
        self.parts: dict = {}

    def kernel(self, part, t, cbound, flops, nbytes, times=1.0):
        t = np.broadcast_to(t, self.zero.shape)
        self.compute = self.compute + times * np.where(cbound, t, 0.0)
        self.memory = self.memory + times * np.where(cbound, 0.0, t)
        self.flops = self.flops + times * flops
        self.bytes = self.bytes + times * nbytes
        self.parts[part] = self.parts.get(part, self.zero) + times * t

    def message(self, part, t, nbytes, times=1.0):
        self.comm = self.comm + times * t
        self.comm_bytes = self.comm_bytes + times * nbytes
        self.parts[part] = self.parts.get(part, self.zero) + times * t

    def slowed(self, part, t, times=1.0):
        """Compute-bound kernel time added by fewer SMs (no FLOPs or bytes of its own)."""
        self.compute = self.compute + times * t
        self.parts[part] = self.parts.get(part, self.zero) + times * t


def _published_step(model, s: _Split, c: Card, *, quant, tp, dp, ep, cards, L, S, phase, lin_dtype, p_lin,
                    attn_dtype, kv_bytes, engine, overlap, overlap_model, mtp_steps, acceptance, eplb, redundant,
                    graph, act_bytes, allreduces, dispatch_dtype, combine_dtype, card_key=None):
    """The step of :func:`step` with ``costs="published"``: see its docstring. ``card_key`` is how the card
    was named (a preset or a hardware file), for the lookups that load it again."""
    sources: list = []
    kinds, head, _ = _gemm_plan(model, quant, tp, ep, redundant)
    prefill = phase == "prefill"
    q_per_seq = L if prefill else float(1 + mtp_steps)
    in_bytes = 1.0 if lin_dtype in ("fp8", "int8") else 2.0
    att = attention_ceilings(str(card_key) if card_key is not None else c.name, attn_dtype, "sparse" if s.sparse else "dense",
                             topk=s.index_topk if s.sparse else None)
    sources.extend(att.sources)
    P_attn = c.flops(attn_dtype)
    W = c.hbm_bandwidth_bytes_per_s
    slots = (s.n_experts + redundant) / ep if ep else float(s.n_experts)
    rho, src = imbalance_factor(eplb, experts_per_rank=slots / _ranks(c) if ep else slots,
                                ep=(ep or 1) * _ranks(c), redundant_experts=redundant)
    if src:
        sources.append(src)
    gemm_src = set()
    groups = cards // ep if ep else dp
    mode = "normal" if prefill else "low_latency"
    ep_on = ep is not None and ep > 1
    layers = sum(k.count for k in kinds)
    kv_b = kv_bytes
    ep_src = {}

    def gemm(tally, part, g: _Gemm, rows, hit_tokens, times):
        op = ("grouped_contiguous" if prefill else "grouped_masked") if g.routed else "dense"
        gemm_src.add(op)
        if g.routed:
            hit = expected_experts_hit(hit_tokens, s.n_experts, s.top_k) / s.n_experts
            w = g.weight_bytes * hit
        else:
            w = g.weight_bytes
        f = 2.0 * rows * g.n * g.k
        b = gemm_bytes(rows, g.n, g.k, weight_bytes=w, in_bytes=in_bytes, out_bytes=act_bytes)
        t, cb = gemm_seconds(op, g.n, g.k, flops=f, bytes_moved=b, card=c, dtype=lin_dtype, peak_flops_per_s=p_lin)
        tally.kernel(part, t, cb, f, b, times)
        return t

    def attn_core(tally, seqs, queries, times, layers_share):
        if prefill:
            f = queries * attention_flops_per_card(model, L, phase="prefill", tp=tp)
            b = seqs * kv_read_bytes_per_sequence(model, L, phase="prefill", engine=engine, kv_bytes=kv_b)
        else:
            f = queries * attention_flops_per_card(model, L, phase="decode", tp=tp)
            b = seqs * kv_read_bytes_per_sequence(model, L, phase="decode", engine=engine, kv_bytes=kv_b)
        f, b = f * layers_share, b * layers_share
        t_f, t_b = f / (att.compute_share * P_attn), b / (att.memory_share * W)
        tally.kernel("attention core", np.maximum(t_f, t_b), t_f >= t_b, f, b, times)
        return np.maximum(t_f, t_b)

    def layer_segments(tally, kind: _LayerKind, x, S_x, times, share):
        """Attention and FFN segment times and dispatch/combine of one layer of ``kind`` for a fraction
        ``x`` of the step's tokens (one micro-batch: 0.5), booked ``times`` times; with the compute-bound
        part of each segment's kernel time."""
        T_r = x * S_x * q_per_seq / dp            # tokens of one TP rank
        T_all = x * S_x * q_per_seq               # tokens of the deployment
        c0 = tally.compute
        a = sum(gemm(tally, "attention GEMMs", g, T_r, None, times) for g in kind.attn)
        a = a + attn_core(tally, x * S_x / dp, T_r, times, share)
        c1 = tally.compute
        f = 0.0
        for g in kind.ffn:
            if g.routed:
                pairs = (T_all * s.top_k / cards * rho) if ep else T_r * s.top_k
                hit_tokens = T_all / groups if ep else T_r
                f = f + gemm(tally, "routed experts", g, pairs, hit_tokens, times)
            else:
                f = f + gemm(tally, "dense FFN and shared experts", g, T_r, None, times)
        c2 = tally.compute
        if tp > 1:
            ar = allreduce_seconds(c, payload_bytes=T_r * s.hidden * act_bytes, tp=tp)
            n_ar = max(allreduces, 1)
            tally.message("TP all-reduce", ar, allreduce_bytes(T_r * s.hidden * act_bytes, tp), times * n_ar)
            a = a + ar
            f = f + ar * (n_ar - 1)
        d = e = 0.0
        if kind.moe and ep_on:
            tok = T_all / cards
            d, bd, ep_src["dispatch"] = ep_message_seconds(c, mode=mode, operation="dispatch", ep=ep,
                                                           tokens_per_card=tok, n_experts=s.n_experts,
                                                           top_k=s.top_k, hidden=s.hidden, dtype=dispatch_dtype,
                                                           imbalance=rho)
            e, be, ep_src["combine"] = ep_message_seconds(c, mode=mode, operation="combine", ep=ep,
                                                          tokens_per_card=tok, n_experts=s.n_experts,
                                                          top_k=s.top_k, hidden=s.hidden, dtype=combine_dtype,
                                                          imbalance=rho)
            tally.message("MoE dispatch", d, bd, times)
            tally.message("MoE combine", e, be, times)
        return a, f, d, e, (c1 - c0) / times, (c2 - c1) / times

    shape = np.broadcast(L, S).shape
    tally = _Tally(shape)
    total = np.zeros(shape)
    k_sm, ov_src = overlap_compute_slowdown(c, mode, overlap_model) if overlap and ep_on else (1.0, None)
    for kind in kinds:
        share = 1.0 / layers
        if overlap:
            a, f, d, e, a_c, f_c = layer_segments(tally, kind, 0.5, S, 2 * kind.count, share)
            if kind.moe and ep_on:
                # computation on the SMs the communication leaves it: compute-bound time x k_sm
                a, f = a + (k_sm - 1) * a_c, f + (k_sm - 1) * f_c
                tally.slowed("SMs held by communication", (k_sm - 1) * (a_c + f_c), 2 * kind.count)
                per = (np.maximum(a, d) + np.maximum(f, d) + np.maximum(f, e) + np.maximum(a, e))
            else:
                per = 2 * (a + f)
        else:
            a, f, d, e, _, _ = layer_segments(tally, kind, 1.0, S, kind.count, share)
            per = a + f + d + e
        total = total + kind.count * per
    if ov_src is not None:
        sources.append(ov_src)
    # output head: logits of the last position of each prompt, of every verified token in decode
    rows_head = S / dp if prefill else S * q_per_seq / dp
    parts = 2 if overlap else 1
    total = total + sum(gemm(tally, "output head", g, rows_head / parts, None, parts) for g in head)
    # MTP draft passes
    acc = 0.0
    if mtp_steps:
        acc = accepted_tokens(mtp_steps, acceptance)
        mk, mhead, mproj = _gemm_plan(model, quant, tp, ep, redundant, part="mtp")
        passes = 1 if prefill else mtp_steps
        rows = S * (L if prefill else 1.0) / dp
        t_mtp = tally.zero.copy()
        for g in mproj:
            t_mtp = t_mtp + gemm(tally, "MTP draft", g, rows, None, passes)
        q_draft = L if prefill else 1.0          # a prefill runs the prompt through the MTP module once
        for kind in mk:
            T_r = S * q_draft / dp
            a = sum(gemm(tally, "MTP draft", g, T_r, None, passes) for g in kind.attn)
            a = a + attn_core(tally, S / dp, T_r, passes, 1.0 / layers)
            f = 0.0
            for g in kind.ffn:
                if g.routed:
                    pairs = (S * q_draft * s.top_k / cards * rho) if ep else T_r * s.top_k
                    hit_tokens = S * q_draft / groups if ep else T_r
                    f = f + gemm(tally, "MTP draft", g, pairs, hit_tokens, passes)
                else:
                    f = f + gemm(tally, "MTP draft", g, T_r, None, passes)
            d = e = 0.0
            if ep_on:
                tok = S * q_draft / cards
                d, bd, _ = ep_message_seconds(c, mode=mode, operation="dispatch", ep=ep, tokens_per_card=tok,
                                              n_experts=s.n_experts, top_k=s.top_k, hidden=s.hidden,
                                              dtype=dispatch_dtype, imbalance=rho)
                e, be, _ = ep_message_seconds(c, mode=mode, operation="combine", ep=ep, tokens_per_card=tok,
                                              n_experts=s.n_experts, top_k=s.top_k, hidden=s.hidden,
                                              dtype=combine_dtype, imbalance=rho)
                tally.message("MTP draft", d + e, bd + be, passes)
            t_mtp = t_mtp + a + f + d + e
        for g in head:
            t_mtp = t_mtp + gemm(tally, "MTP draft", g, S / dp, None, passes)
        total = total + passes * t_mtp
        sources.append(CostSource("MTP acceptance", f"{mtp_steps} draft token(s)", "DeepSeek-V3 (report)",
                                  tuple(p.table_id for p in _costs().mtp_acceptance("DeepSeek-V3")),
                                  False, f"acceptance {acceptance:.3g} per draft token"
                                  + ("" if acceptance == mtp_acceptance_default() else " (the run's own, not the "
                                                                                      "report's)")
                                  + f", {acc:.3g} accepted per step"))
    oh, src = overhead_seconds(layers, graph=graph)
    total = total + oh
    tally.parts["overhead"] = tally.zero + oh
    sources.append(src)
    # sources of the GEMMs and the messages
    ref_card, ref_dtype = GEMM_REFERENCE
    for op in sorted(gemm_src):
        tabs = tuple(sorted({t for g in gemm_ceilings(op) for t in g.tables}))
        carried = c.name != ref_card or lin_dtype != ref_dtype
        sources.append(CostSource(f"GEMM ({op.replace('_', ' ')})", f"{c.name} {lin_dtype}",
                                  f"{ref_card} {ref_dtype}", tabs, carried,
                                  "two ceilings per published shape (highest FLOP/s and bandwidth reached), "
                                  "nearest shape by N and K" + (f"; carried to {c.name} {lin_dtype} as shares of "
                                                                f"its peak and HBM bandwidth" if carried else "")))
    for op in ("dispatch", "combine"):
        if op in ep_src:
            sources.append(ep_src[op])
    if tp > 1:
        _, table, _ = allreduce_fit()
        sources.append(CostSource("TP all-reduce", c.name, "h100", (table,), c.name != "h100",
                                  "alpha-beta fit of NCCL all-reduce on 8 H100 (outlier left out); bandwidth "
                                  "scaled by the card's link bandwidth and the ring size"))
    if s.v4:
        sources.append(CostSource("DeepSeek-V4 attention", c.name, "MLA decoding kernels", (), True,
                                  "no published kernel for V4's hybrid attention: the MLA ceilings are used"))
    if s.sparse:
        sources.append(CostSource("DeepSeek-V3.2 indexer", c.name, "MLA decoding kernels", (), True,
                                  "the indexer's FP8 scores take the sparse MLA kernel's share of peak: DeepGEMM's "
                                  "indexer-logit kernel publishes no figure in costs.toml"))
    tokens_out = S * (1.0 + acc) if not prefill else S * L
    parts = {k: v for k, v in tally.parts.items()}
    parts["overlap saved"] = np.maximum(0.0, sum(v for k, v in parts.items()) - total) if overlap else tally.zero
    return dict(time=total, compute=tally.compute, memory=tally.memory, comm=tally.comm, flops=tally.flops,
                bytes=tally.bytes, comm_bytes=tally.comm_bytes, tokens=tokens_out, parts=parts,
                sources=tuple(sources))


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
    costs: str = "roofline"        # the cost model (COSTS)
    cost_sources: tuple = ()       # CostSource of every published figure used ("published" costs)
    breakdown: dict | None = field(default=None, compare=False)  # seconds by component ("published")

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
         engine: str | None = None, costs: str | None = None, mtp_steps: int = 0,
         mtp_acceptance: float | None = None, eplb: bool | None = None, redundant_experts: int = 0,
         graph: bool = True, overlap_model: str | None = None, beyond: bool = True) -> StepTime:
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
    costs
        ``"roofline"`` (the default, :data:`DEFAULT_COSTS`): flat efficiencies ``mfu``, ``mbu``,
        ``comm_eff`` on the step's totals, as below. ``"published"``: every kernel and message timed from
        published figures (``pdcalc/data/costs.toml``), see "Published costs" below; ``mfu``, ``mbu`` and
        ``comm_eff`` are then unused.
    mtp_steps, mtp_acceptance
        MTP speculative decoding: draft tokens per step and the acceptance of each (``None``: the
        DeepSeek-V3 report's 85-90 %, :func:`mtp_acceptance_default`). A decode step verifies ``1 + d``
        tokens per sequence and emits ``1 + sum_i a^i`` (:func:`accepted_tokens`).
    eplb, redundant_experts
        Expert-load imbalance (:func:`imbalance_factor`): ``None`` balanced, ``True`` with EPLB, ``False``
        without; ``redundant_experts`` copies spread over the EP group (held in memory).
    graph
        Graph capture (CUDA graphs, Ascend graph mode): no per-step host overhead; ``False`` adds the
        published eager host gap (published costs only).
    overlap_model
        Published costs with ``overlap``: ``"published"`` (the default, :data:`DEFAULT_OVERLAP_MODEL`), the
        computation on the SMs DeepSeek's profile leaves it (:func:`overlap_compute_slowdown`); ``"ideal"``,
        computation and communication never slow each other (for comparison). Unused by the roofline.
    beyond
        Published costs: scale the step by what a whole profiled step takes beyond its kernels
        (:func:`beyond_kernels`: prefill only, from DeepSeek's prefill profile). ``False``: the kernel sum
        alone. Unused by the roofline.

    Published costs (``costs="published"``). Each layer is timed kernel by kernel: every (fused) GEMM of
    the inventory at the slower of its two published ceilings (:func:`gemm_seconds`; grouped contiguous in
    prefill, grouped masked in decode for the routed experts, at ``rho`` times the balanced rows of the
    hottest rank), MLA attention at FlashMLA's (or AMLA's) compute and memory shares
    (:func:`attention_ceilings`; prefill attention at the decoding kernel's compute share), TP all-reduces
    by the NCCL fit (:func:`allreduce_seconds`), dispatch and combine as alpha-beta per message
    (:func:`ep_message_seconds`: normal kernels in prefill, low-latency kernels in decode). Per layer,
    attention ``a``, FFN ``f``, dispatch ``d``, combine ``e``:

    .. math::

       t_\\text{layer} = a + f + d + e \\quad (\\text{no overlap}), \\qquad
       t_\\text{layer} = \\max(a', d') + \\max(f', d') + \\max(f', e') + \\max(a', e') \\quad
       (\\text{two micro-batches})

    with primes for one micro-batch of half the sequences (each reads the weights again): the schedule of
    DeepSeek's overlap, where the dispatch of one micro-batch runs under the other's attention and FFN and
    its combine under the other's FFN and next attention. Each communication is hidden up to the other
    micro-batch's computation; the rest is exposed. In the MoE layers the computation runs on the SMs the
    communication leaves it (DeepSeek's profile: 108 of the H800's 132 while DeepEP's normal kernels hold 24
    in prefill, all 132 in decode, where the low-latency kernels hold none), so the compute-bound kernel time
    of ``a'`` and ``f'`` is taken ``k = 132 / 108`` times in prefill (:func:`overlap_compute_slowdown`;
    ``overlap_model="ideal"``: ``k = 1``). Communication is taken at its unit-test speed (DeepEP's
    normal-kernel table was measured on the same 24 SMs). The step adds the output head, the MTP draft
    passes (``d`` passes of the MTP module's projection, layer and head) and the host overhead. Where a
    card has no published figure, the one of its maker's measured card (or the H800) is carried as a share
    of peak or scaled by link bandwidth; ``StepTime.cost_sources`` says which (the overlap's figure
    included), and ``StepTime.breakdown`` gives seconds by component.

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
    ratio-4 layer adds :func:`indexer_allreduce_per_layer`. With ``mtp_steps`` the roofline verifies
    ``1 + d`` tokens per sequence (the MTP module's own passes are left out) and ``rho`` scales the routed
    FLOPs and the all-to-all.
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
    costs = DEFAULT_COSTS if costs is None else costs
    if costs not in COSTS:
        raise UnknownNameError("cost model", costs, COSTS)
    _check_int("redundant_experts", redundant_experts, low=0)
    _check_int("mtp_steps", mtp_steps, low=0)
    cards = tp * dp
    if ep is not None:
        _check_int("ep", ep)
        if cards % ep:
            raise LayoutError(f"ep={ep} does not divide the {cards} cards (tp x dp = {tp} x {dp}): every card "
                              f"must belong to one EP group")
        if ep > s.n_experts + redundant_experts:
            raise LayoutError(f"ep={ep} exceeds the {s.n_experts} routed experts: "
                              f"{ep - s.n_experts - redundant_experts} cards would hold no expert")
    elif redundant_experts:
        raise LayoutError("redundant_experts needs expert parallelism (ep)")
    for name, v in (("mfu", mfu), ("mbu", mbu), ("comm_eff", comm_eff)):
        _check_eff(name, v)
    for name, v in (("overlap", overlap), ("graph", graph), ("beyond", beyond)):
        if not isinstance(v, bool):
            raise LayoutError(f"{name} must be True or False, got {v!r}")
    overlap_model = DEFAULT_OVERLAP_MODEL if overlap_model is None else overlap_model
    if overlap_model not in OVERLAP_MODELS:
        raise UnknownNameError("overlap model", overlap_model, OVERLAP_MODELS)
    if eplb is not None and not isinstance(eplb, bool):
        raise LayoutError(f"eplb must be True, False or None, got {eplb!r}")
    acceptance = mtp_acceptance_default() if (mtp_steps and mtp_acceptance is None) else (mtp_acceptance or 0.0)
    if mtp_steps and not 0 <= acceptance <= 1:
        raise LayoutError(f"mtp_acceptance must be in [0, 1], got {mtp_acceptance!r}")
    L = _array(context, "context", 1)
    S = _array(concurrency, "concurrency", 0)
    if np.any(S <= 0):
        raise LayoutError(f"concurrency must be > 0, got {concurrency!r}")
    scalar = np.ndim(context) == 0 and np.ndim(concurrency) == 0
    L, S = np.broadcast_arrays(L, S)

    scheme = get_scheme(quant).name
    if compute_dtype is None and scheme not in COMPUTE_DTYPE:
        raise LayoutError(f"no compute dtype known for quantization scheme {scheme!r}; pass compute_dtype")
    lin_dtype = compute_dtype or COMPUTE_DTYPE[scheme]
    p_lin = peak_flops_per_s if peak_flops_per_s is not None else c.flops(lin_dtype)
    c.flops(attn_dtype)

    # memory held: weights (with redundant expert copies) and KV
    stored_w = weight_bytes_per_card(model, quant, tp=tp, ep=ep)
    if redundant_experts:
        w = _weights(model, quant, ep, tp)
        base = place_experts(s.n_experts, ep).max_experts_per_card
        more = place_experts(s.n_experts, ep, redundant_experts).max_experts_per_card
        stored_w = stored_w + w.class_i_bytes * (more / base - 1)
    kv_held = S / dp * kv_stored_bytes_per_sequence(model, L, engine=engine, kv_bytes=kv_bytes)
    stored = stored_w + kv_held

    if costs == "published":
        dtype_of = {1.0: "fp8", 2.0: "bf16"}
        r = _published_step(model, s, c, card_key=card, quant=quant, tp=tp, dp=dp, ep=ep, cards=cards, L=L, S=S, phase=phase,
                            lin_dtype=lin_dtype, p_lin=p_lin, attn_dtype=attn_dtype, kv_bytes=kv_bytes,
                            engine=engine, overlap=overlap, overlap_model=overlap_model, mtp_steps=mtp_steps,
                            acceptance=acceptance, eplb=eplb,
                            redundant=redundant_experts, graph=graph, act_bytes=act_bytes,
                            allreduces=allreduces_per_layer, dispatch_dtype=dtype_of.get(dispatch_bytes, "bf16"),
                            combine_dtype=dtype_of.get(combine_bytes, "bf16"))
        k_beyond, src_beyond = beyond_kernels(phase, overlap_model) if beyond else (1.0, None)
        if src_beyond is not None:   # the kernels' time, not the per-step host overhead
            kernels_time = r["time"] - r["parts"]["overhead"]
            r["parts"]["beyond the kernel tables"] = (k_beyond - 1) * kernels_time
            r["time"] = r["time"] + (k_beyond - 1) * kernels_time
            r["sources"] = r["sources"] + (dataclasses.replace(src_beyond, applied_to=c.name,
                                                               carried=c.name != src_beyond.measured_on),)
        terms = np.stack([np.broadcast_to(r[k], L.shape) for k in ("compute", "memory", "comm")])
        bound = np.asarray(BOUNDS)[np.argmax(terms, axis=0)]
        out = {k: _out(np.broadcast_to(v, L.shape), scalar) for k, v in dict(
            tokens=r["tokens"], flops_per_card=r["flops"], bytes_per_card=r["bytes"],
            comm_bytes_per_card=r["comm_bytes"], compute_s=r["compute"], memory_s=r["memory"], comm_s=r["comm"],
            time_s=r["time"], tokens_per_s=r["tokens"] / r["time"], stored_bytes_per_card=stored).items()}
        parts = {k: _out(np.broadcast_to(v, L.shape), scalar) for k, v in r["parts"].items()}
        return StepTime(phase=phase, card=c.name, cards=cards, bound=str(bound) if scalar else bound,
                        usable_bytes_per_card=c.usable_base_bytes, costs=costs, cost_sources=r["sources"],
                        breakdown=parts, **out)

    # roofline: flat efficiencies on the step's FLOPs, bytes and bytes sent
    rho, _ = imbalance_factor(eplb, experts_per_rank=(s.n_experts + redundant_experts) / ep if ep else s.n_experts,
                              ep=ep or 1, redundant_experts=redundant_experts)
    per_seq = L if phase == "prefill" else 1.0 + mtp_steps
    T = S * per_seq                    # tokens of the deployment
    T_r = T / dp                       # tokens of one TP rank
    S_r = S / dp
    groups = cards // ep if ep else dp
    T_g = T / groups                   # tokens routed inside one EP group (or rank)

    # compute
    attn_card = attention_flops_per_card(model, L, phase=phase, tp=tp)
    f_lin = (2 * T_r * (s.replicated + s.tp_split / tp)          # non-routed tensors of the rank
             + 2 * (S_r if phase == "prefill" else T_r) * s.head / tp   # logits: a row per sequence (prefill)
             + 2 * T * s.top_k * s.routed * rho / (s.n_experts * cards))  # routed experts, spread over all cards
    f_attn = T_r * attn_card
    compute_s = f_lin / (p_lin * mfu) + f_attn / (c.flops(attn_dtype) * mfu)

    # memory
    w_read = weight_bytes_per_card(model, quant, tp=tp, ep=ep, routed_tokens=T_g)
    kv_read = S_r * kv_read_bytes_per_sequence(model, L, phase=phase, engine=engine, kv_bytes=kv_bytes)
    bytes_card = w_read + kv_read
    memory_s = bytes_card / (c.hbm_bandwidth_bytes_per_s * mbu)

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
        comm_b, comm_s = comm_b + s.moe_layers * b * rho, comm_s + s.moe_layers * t * rho

    busy = np.maximum(compute_s, memory_s)
    time_s = np.maximum(busy, comm_s) if overlap else busy + comm_s
    terms = np.stack([compute_s, memory_s, comm_s])
    bound = np.asarray(BOUNDS)[np.argmax(terms, axis=0)]
    tokens = T if phase == "prefill" else S * (1.0 + (accepted_tokens(mtp_steps, acceptance) if mtp_steps else 0.0))
    out = {k: _out(v, scalar) for k, v in dict(
        tokens=tokens, flops_per_card=f_lin + f_attn, bytes_per_card=bytes_card, comm_bytes_per_card=comm_b,
        compute_s=compute_s, memory_s=memory_s, comm_s=comm_s, time_s=time_s, tokens_per_s=tokens / time_s,
        stored_bytes_per_card=stored).items()}
    return StepTime(phase=phase, card=c.name, cards=cards, bound=str(bound) if scalar else bound,
                    usable_bytes_per_card=c.usable_base_bytes, costs=costs, **out)


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
                      comm_eff: float = DEFAULT_COMM_EFF, overlap: bool = True,
                      costs: str | None = None, overlap_model: str | None = None) -> pd.DataFrame:
    """Predicted vs published throughput per card, one row per :data:`PUBLISHED_RUNS` entry.

    Prefill measurements that include KV-cache hits count input tokens that were never computed; the
    prediction is scaled the same way (computed tokens / (1 - hit rate)). Both production systems overlap
    communication with computation (two micro-batches), hence ``overlap=True``. DeepSeek-R1 shares
    DeepSeek-V3's architecture. ``costs`` picks the cost model of :func:`step` (the efficiencies apply to
    the roofline only, ``overlap_model`` to the published costs); every registry throughput under its own
    conditions is in :func:`pdcalc.validation.table`.
    """
    rows = []
    for run in PUBLISHED_RUNS:
        m = measurements.get(run.measurement)
        st = predict(run, model, mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap, costs=costs,
                     overlap_model=overlap_model)
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
