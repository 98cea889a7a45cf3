"""Step time and throughput of a DeepSeek MoE model on a parallel layout: a roofline with communication.

Two architectures: MLA + MoE (DeepSeek-V2, V3, Kimi-K2, and DeepSeek-V3.2 with the lightning indexer of
DeepSeek Sparse Attention: :attr:`pdcalc.model.config.ModelConfig.mla`) and DeepSeek-V4 ("deepseek_v4": hybrid
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
DeepSeek-V4 keeps, per layer kind, the caches of :func:`pdcalc.model.kv_layout.engine_layout` (``engine``):
a sliding window of raw entries on every layer, compressed entries on ratio-4 and ratio-128 layers,
indexer keys on ratio-4 layers, compressor states. A decode step reads only what the new token
attends to (:func:`kv_read_bytes_per_sequence`).

Two cost models (``costs``): ``"roofline"`` (:mod:`pdcalc.perf.roofline`), the formulas above with flat
assumed efficiencies, and ``"published"`` (:mod:`pdcalc.perf.published`), where every GEMM, attention kernel,
all-reduce and dispatch/combine message is timed from the published kernel tables of
``pdcalc/data/costs.toml`` (:mod:`pdcalc.perf.costs`): DeepGEMM's GEMM ceilings
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

from pdcalc.hardware.cards import get_card
from pdcalc.perf.comm import (DEFAULT_ACT_BYTES, DEFAULT_ALLREDUCES_PER_LAYER, DEFAULT_COMBINE_BYTES, DEFAULT_COMM_EFF,
                              DEFAULT_DISPATCH_BYTES, tp_allreduce_per_layer)
from pdcalc.perf.inputs import DEFAULT_MBU, DEFAULT_MFU, StepInputs, held_bytes, resolve
from pdcalc.perf.kernels import CostSource
from pdcalc.perf.published import published_step
from pdcalc.perf.roofline import roofline_step
from pdcalc.perf.schedule import profiled_steps
from pdcalc.perf.shape import BOUNDS, check_phase, model_shape, scalar_or_array
from pdcalc.perf.traffic import DEFAULT_KV_BYTES


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
    costs: str = "roofline"        # the cost model (pdcalc.perf.inputs.COSTS)
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
         graph: bool = True, overlap_model: str | None = None, beyond: bool = True,
         whole_prompts: bool = True) -> StepTime:
    """Time and throughput of one step of ``model`` on ``tp x dp`` cards of ``card``: the held bytes
    (:func:`pdcalc.perf.inputs.held_bytes`) and the step's terms under the cost model ``costs``
    (:func:`pdcalc.perf.roofline.roofline_step` or :func:`pdcalc.perf.published.published_step`, scaled by
    :func:`beyond_kernels`).

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
        :mod:`pdcalc.model.quant` scheme of the stored weights; sets the linear layers' compute dtype
        (:data:`pdcalc.perf.inputs.COMPUTE_DTYPE`) unless ``compute_dtype`` is given.
    mfu, mbu, comm_eff
        Assumed shares of the peak FLOP/s, HBM bandwidth and link bandwidth reached (the roofline's).
    overlap
        Communication hidden under compute and memory traffic (two micro-batches) or added to them.
    peak_flops_per_s
        Overrides the card's peak for the linear layers (for a dtype the preset lacks).
    kv_bytes
        MLA models: bytes per value of the latent cache (BF16: 2).
    engine
        DeepSeek-V4 (and V3.2's indexer keys): the engine whose KV layout
        (:func:`pdcalc.model.kv_layout.engine_layout`) sets the bytes of every cache entry (``None``:
        :data:`pdcalc.perf.traffic.DEFAULT_V4_ENGINE`). Other MLA models take ``None`` or ``"reference"``.
    costs
        ``"roofline"`` (the default, :data:`pdcalc.perf.inputs.DEFAULT_COSTS`) or ``"published"``.
    mtp_steps, mtp_acceptance
        MTP speculative decoding: draft tokens per step and the acceptance of each (``None``: the
        DeepSeek-V3 report's 85-90 %, :func:`pdcalc.perf.speculative.mtp_acceptance_default`). A decode step
        verifies ``1 + d`` tokens per sequence and emits ``1 + sum_i a^i``.
    eplb, redundant_experts
        Expert-load imbalance (:func:`pdcalc.perf.routing.imbalance_factor`): ``None`` balanced, ``True``
        with EPLB, ``False`` without; ``redundant_experts`` copies spread over the EP group (held in memory).
    graph
        Graph capture (CUDA graphs, Ascend graph mode): no per-step host overhead; ``False`` adds the
        published eager host gap (published costs only).
    overlap_model
        Published costs with ``overlap``: ``"published"`` (the default), the computation on the SMs DeepSeek's
        profile leaves it (:func:`pdcalc.perf.schedule.overlap_compute_slowdown`); ``"ideal"``, computation and
        communication never slow each other (for comparison). Unused by the roofline.
    beyond
        Published costs: scale the step by what a whole profiled step takes beyond its kernels
        (:func:`beyond_kernels`: prefill only, from DeepSeek's prefill profile). ``False``: the kernel sum
        alone. Unused by the roofline.
    whole_prompts
        Prefill: a prompt is never split across DP ranks (each rank holds its own sequences), so fewer prompts
        than ranks take the time of one prompt per busy rank. ``False``: ``concurrency`` may be a fraction of a
        prompt per rank (a chunk of a long prompt, as chunked prefill schedules it).
    """
    x = resolve(model, card, tp=tp, dp=dp, ep=ep, context=context, concurrency=concurrency, phase=phase,
                quant=quant, mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap, compute_dtype=compute_dtype,
                attn_dtype=attn_dtype, peak_flops_per_s=peak_flops_per_s, kv_bytes=kv_bytes, act_bytes=act_bytes,
                allreduces_per_layer=allreduces_per_layer, dispatch_bytes=dispatch_bytes,
                combine_bytes=combine_bytes, engine=engine, costs=costs, mtp_steps=mtp_steps,
                mtp_acceptance=mtp_acceptance, eplb=eplb, redundant_experts=redundant_experts, graph=graph,
                overlap_model=overlap_model, beyond=beyond)
    stored = held_bytes(x)
    if x.prefill and whole_prompts:
        work = np.maximum(x.S, x.dp * np.minimum(x.S, 1.0))       # busy ranks take a whole prompt each
        if np.any(work != x.S):
            done = _terms(dataclasses.replace(x, S=work))
            done["tokens"] = x.S * x.L
            return _assemble(x, done, stored, published=x.costs == "published")
    return _assemble(x, _terms(x), stored, published=x.costs == "published")


def _terms(x: StepInputs) -> dict:
    """The step's terms under its cost model."""
    if x.costs == "published":
        return _beyond(x, published_step(x))
    return roofline_step(x)


def _beyond(x: StepInputs, r: dict) -> dict:
    """The published-cost terms ``r`` with the kernels' time scaled by :func:`beyond_kernels` (not the per-step
    host overhead)."""
    k_beyond, src_beyond = beyond_kernels(x.phase, x.overlap_model) if x.beyond else (1.0, None)
    if src_beyond is not None:
        kernels_time = r["time"] - r["parts"]["overhead"]
        r["parts"]["beyond the kernel tables"] = (k_beyond - 1) * kernels_time
        r["time"] = r["time"] + (k_beyond - 1) * kernels_time
        r["sources"] = r["sources"] + (dataclasses.replace(src_beyond, applied_to=x.c.name,
                                                           carried=x.c.name != src_beyond.measured_on),)
    return r


def _assemble(x: StepInputs, r: dict, stored, *, published: bool) -> StepTime:
    """A :class:`StepTime` from the terms ``r`` of either cost model; the bound is the largest of the
    compute, memory and communication times."""
    fit = (lambda v: np.broadcast_to(v, x.L.shape)) if published else (lambda v: v)
    terms = np.stack([fit(r[k]) for k in ("compute", "memory", "comm")])
    bound = np.asarray(BOUNDS)[np.argmax(terms, axis=0)]
    out = {k: scalar_or_array(fit(v), x.scalar) for k, v in dict(
        tokens=r["tokens"], flops_per_card=r["flops"], bytes_per_card=r["bytes"],
        comm_bytes_per_card=r["comm_bytes"], compute_s=r["compute"], memory_s=r["memory"], comm_s=r["comm"],
        time_s=r["time"], tokens_per_s=r["tokens"] / r["time"], stored_bytes_per_card=stored).items()}
    extra = {}
    if published:
        extra = dict(cost_sources=r["sources"],
                     breakdown={k: scalar_or_array(fit(v), x.scalar) for k, v in r["parts"].items()})
    return StepTime(phase=x.phase, card=x.c.name, cards=x.cards, bound=str(bound) if x.scalar else bound,
                    usable_bytes_per_card=x.c.usable_base_bytes, costs=x.costs, **extra, **out)


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
    conditions: those runs are in sample (:mod:`pdcalc.reality.validation` marks them).
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
