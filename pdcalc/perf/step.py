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

from pdcalc.core.checks import tp_problem
from pdcalc.core.errors import LayoutError, UnknownNameError
from pdcalc.hardware.cards import get_card
from pdcalc.layout.parallel import place_experts
from pdcalc.model.quant import get_scheme
from pdcalc.perf.comm import (
    DEFAULT_ACT_BYTES,
    DEFAULT_ALLREDUCES_PER_LAYER,
    DEFAULT_COMBINE_BYTES,
    DEFAULT_COMM_EFF,
    DEFAULT_DISPATCH_BYTES,
    ep_alltoall_per_layer,
    indexer_allreduce_per_layer,
    tp_allreduce_per_layer,
)
from pdcalc.perf.flops import attention_flops_per_card
from pdcalc.perf.kernels import CostSource
from pdcalc.perf.published import published_step
from pdcalc.perf.routing import imbalance_factor
from pdcalc.perf.schedule import DEFAULT_OVERLAP_MODEL, OVERLAP_MODELS, profiled_steps
from pdcalc.perf.shape import BOUNDS, as_array, check_eff, check_int, check_phase, model_shape, scalar_or_array
from pdcalc.perf.speculative import accepted_tokens, mtp_acceptance_default
from pdcalc.perf.traffic import (
    DEFAULT_KV_BYTES,
    card_weights_cached,
    kv_read_bytes_per_sequence,
    kv_stored_bytes_per_sequence,
    step_engine,
    weight_bytes_per_card,
)

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


# ------------------------------------------------------------------------------ published costs
#: The cost models :func:`step` offers: ``"roofline"``, flat assumed efficiencies (:data:`DEFAULT_MFU`,
#: :data:`DEFAULT_MBU`, :data:`DEFAULT_COMM_EFF`) on whole-step FLOPs, bytes and bytes sent; ``"published"``,
#: every kernel and message timed from the published figures of ``pdcalc/data/costs.toml``
#: (:mod:`pdcalc.costs`).
COSTS = ("roofline", "published")
#: The cost model of :func:`step` when none is named.
DEFAULT_COSTS = "roofline"


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
    p = profiled_steps().get(phase)
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
    phase = check_phase(phase)
    s, c = model_shape(model), get_card(card)
    check_int("tp", tp)
    check_int("dp", dp)
    problem = tp_problem(tp, heads=s.heads, o_groups=s.o_groups if s.v4 else None,
                         index_heads=s.index_heads if s.v4 else None)
    if problem:
        raise LayoutError(f"TP degree {problem}")
    engine = step_engine(s, engine)
    costs = DEFAULT_COSTS if costs is None else costs
    if costs not in COSTS:
        raise UnknownNameError("cost model", costs, COSTS)
    check_int("redundant_experts", redundant_experts, low=0)
    check_int("mtp_steps", mtp_steps, low=0)
    cards = tp * dp
    if ep is not None:
        check_int("ep", ep)
        if cards % ep:
            raise LayoutError(f"ep={ep} does not divide the {cards} cards (tp x dp = {tp} x {dp}): every card "
                              f"must belong to one EP group")
        if ep > s.n_experts + redundant_experts:
            raise LayoutError(f"ep={ep} exceeds the {s.n_experts} routed experts: "
                              f"{ep - s.n_experts - redundant_experts} cards would hold no expert")
    elif redundant_experts:
        raise LayoutError("redundant_experts needs expert parallelism (ep)")
    for name, v in (("mfu", mfu), ("mbu", mbu), ("comm_eff", comm_eff)):
        check_eff(name, v)
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
    L = as_array(context, "context", 1)
    S = as_array(concurrency, "concurrency", 0)
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
        w = card_weights_cached(model, quant, ep, tp)
        base = place_experts(s.n_experts, ep).max_experts_per_card
        more = place_experts(s.n_experts, ep, redundant_experts).max_experts_per_card
        stored_w = stored_w + w.class_i_bytes * (more / base - 1)
    kv_held = S / dp * kv_stored_bytes_per_sequence(model, L, engine=engine, kv_bytes=kv_bytes)
    stored = stored_w + kv_held

    if costs == "published":
        dtype_of = {1.0: "fp8", 2.0: "bf16"}
        r = published_step(model, s, c, card_key=card, quant=quant, tp=tp, dp=dp, ep=ep, cards=cards, L=L, S=S, phase=phase,
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
        out = {k: scalar_or_array(np.broadcast_to(v, L.shape), scalar) for k, v in dict(
            tokens=r["tokens"], flops_per_card=r["flops"], bytes_per_card=r["bytes"],
            comm_bytes_per_card=r["comm_bytes"], compute_s=r["compute"], memory_s=r["memory"], comm_s=r["comm"],
            time_s=r["time"], tokens_per_s=r["tokens"] / r["time"], stored_bytes_per_card=stored).items()}
        parts = {k: scalar_or_array(np.broadcast_to(v, L.shape), scalar) for k, v in r["parts"].items()}
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
    out = {k: scalar_or_array(v, scalar) for k, v in dict(
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
    tokens = concurrency * (context if check_phase(phase) == "prefill" else 1)
    _, ar = tp_allreduce_per_layer(model, get_card(card), tokens=tokens, tp=tp, comm_eff=comm_eff,
                                   allreduces=DEFAULT_ALLREDUCES_PER_LAYER)
    return float(st.compute_s) / model_shape(model).layers, float(ar)
