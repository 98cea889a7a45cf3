"""What one step is asked, checked once: the model and card, the layout, the batch, the cost model and its
options, resolved into :class:`StepInputs` that the roofline (:mod:`pdcalc.perf.roofline`) and the published
costs (:mod:`pdcalc.perf.published`) both read; and the bytes a card holds for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdcalc.core.checks import MAX_CARDS, tp_problem
from pdcalc.core.errors import LayoutError, UnknownNameError
from pdcalc.hardware.cards import Card, get_card
from pdcalc.layout.parallel import place_experts
from pdcalc.model.quant import get_scheme
from pdcalc.perf.comm import (DEFAULT_ACT_BYTES, DEFAULT_ALLREDUCES_PER_LAYER, DEFAULT_COMBINE_BYTES, DEFAULT_COMM_EFF,
                              DEFAULT_DISPATCH_BYTES)
from pdcalc.perf.schedule import DEFAULT_OVERLAP_MODEL, OVERLAP_MODELS
from pdcalc.perf.shape import ModelShape, as_array, check_eff, check_int, check_phase, model_shape
from pdcalc.perf.speculative import mtp_acceptance_default
from pdcalc.perf.traffic import (DEFAULT_KV_BYTES, card_weights_cached, kv_stored_bytes_per_sequence, step_engine,
                                 weight_bytes_per_card)

#: Card peak used for the linear layers of each quantization scheme: the dtype the matmuls run in
#: (W8A8 multiplies int8 by int8; Ascend's W4A8 multiplies int8 activations by int4 experts, counted at the int8
#: peak; FP8 checkpoints run FP8 GEMMs; pdcalc.model.quant for the schemes).
COMPUTE_DTYPE: dict[str, str] = {
    "bf16": "bf16",
    "fp16-all": "fp16",
    "fp8": "fp8",
    "fp8-fp4": "fp8",
    "w8a8": "int8",
    "w8a8-msmodelslim": "int8",
    "w4a8": "int8",
    "w4a8-msmodelslim": "int8",
    "article-1byte": "int8",
}

#: Where the routed experts are stored in FP4 and the card has no FP4 tensor cores (its ``flops_per_s`` lists no
#: ``fp4``: Hopper and older), the engines multiply them weight-only: the FP4 weights are dequantized inside the
#: kernel and multiplied with BF16 activations (vLLM, vllm/model_executor/layers/quantization/utils/
#: marlin_utils_fp4.py: "Your GPU does not have native support for FP4 computation but FP4 quantization is being
#: used. Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade performance for
#: compute-heavy workloads."; SGLang's ``--moe-runner-backend marlin``, the MoE runner of its Hopper launches of
#: DeepSeek-V4; Marlin, IST-DASLab/marlin README: "an extremely optimized FP16xINT4 matmul kernel"). Their
#: GEMMs then run at the card's peak in this dtype, held to the ceilings of published weight-only 4-bit GEMMs
#: (:func:`pdcalc.perf.kernels.weight_only_ceiling`).
WEIGHT_ONLY_FP4_DTYPE = "bf16"

# Efficiencies: assumptions, not measurements. Change them per call.
DEFAULT_MFU = 0.5        # assumed share of the dense peak reached by the matmuls and attention kernels
DEFAULT_MBU = 0.7        # assumed share of the HBM bandwidth reached when streaming weights and KV

#: The cost models :func:`pdcalc.perf.step.step` offers: ``"roofline"``, flat assumed efficiencies
#: (:data:`DEFAULT_MFU`, :data:`DEFAULT_MBU`, :data:`pdcalc.perf.comm.DEFAULT_COMM_EFF`) on whole-step FLOPs,
#: bytes and bytes sent; ``"published"``, every kernel and message timed from the published figures of
#: ``pdcalc/data/costs.toml`` (:mod:`pdcalc.perf.costs`).
COSTS = ("roofline", "published")
#: The cost model of :func:`pdcalc.perf.step.step` when none is named.
DEFAULT_COSTS = "roofline"
#: Dispatch and combine message dtypes of the published costs, by bytes per value.
MESSAGE_DTYPE = {1.0: "fp8", 2.0: "bf16"}


@dataclass(frozen=True, kw_only=True)
class StepInputs:
    """The arguments of :func:`pdcalc.perf.step.step`, checked and resolved (``L`` and ``S`` broadcast
    against each other)."""

    model: object               # the model as given (preset name, path or config)
    card_key: object            # the card as given (preset name or hardware file), for lookups that reload it
    s: ModelShape
    c: Card
    phase: str
    quant: str
    tp: int
    dp: int
    ep: int | None
    cards: int                  # tp x dp
    L: np.ndarray               # context (decode) or prompt length (prefill)
    S: np.ndarray               # sequences in flight (decode) or prompts in the step (prefill)
    scalar: bool                # both given as scalars: the step's fields are floats
    lin_dtype: str              # compute dtype of the linear layers
    p_lin: float                # peak FLOP/s of the linear layers
    expert_dtype: str           # compute dtype of the routed experts' GEMMs (lin_dtype unless weight-only FP4)
    p_expert: float             # peak FLOP/s of the routed experts' GEMMs
    attn_dtype: str
    mfu: float
    mbu: float
    comm_eff: float
    overlap: bool
    kv_bytes: float
    act_bytes: float
    allreduces: int
    dispatch_bytes: float
    combine_bytes: float
    engine: str | None
    costs: str
    mtp_steps: int
    acceptance: float           # per draft token (0 without MTP)
    eplb: bool | None
    redundant: int
    graph: bool
    overlap_model: str
    beyond: bool

    @property
    def prefill(self) -> bool:
        return self.phase == "prefill"

    @property
    def ep_on(self) -> bool:
        return self.ep is not None and self.ep > 1

    @property
    def groups(self) -> int:
        """EP groups, or DP ranks without expert parallelism."""
        return self.cards // self.ep if self.ep else self.dp

    @property
    def dispatch_dtype(self) -> str:
        return MESSAGE_DTYPE.get(self.dispatch_bytes, "bf16")

    @property
    def combine_dtype(self) -> str:
        return MESSAGE_DTYPE.get(self.combine_bytes, "bf16")


def _check_tp(s: ModelShape, tp, dp) -> None:
    check_int("tp", tp)
    check_int("dp", dp)
    problem = tp_problem(tp, heads=s.heads, o_groups=s.o_groups if s.v4 else None,
                         index_heads=s.index_heads if s.v4 else None)
    if problem:
        raise LayoutError(f"TP degree {problem}")


def _check_experts(s: ModelShape, tp, dp, ep, redundant_experts, mtp_steps) -> int:
    check_int("redundant_experts", redundant_experts, low=0)
    check_int("mtp_steps", mtp_steps, low=0)
    cards = tp * dp
    if cards > MAX_CARDS:
        raise LayoutError(f"tp x dp = {tp} x {dp} = {cards:,} cards; at most {MAX_CARDS:,}")
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
    return cards


def _check_options(*, mfu, mbu, comm_eff, overlap, graph, beyond, overlap_model, eplb, mtp_steps,
                   mtp_acceptance) -> tuple[str, float]:
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
    return overlap_model, acceptance


def resolve(model, card, *, tp, dp, ep, context, concurrency, phase, quant, mfu, mbu, comm_eff, overlap,
            compute_dtype, attn_dtype, peak_flops_per_s, kv_bytes, act_bytes, allreduces_per_layer, dispatch_bytes,
            combine_bytes, engine, costs, mtp_steps, mtp_acceptance, eplb, redundant_experts, graph, overlap_model,
            beyond) -> StepInputs:
    """The arguments of :func:`pdcalc.perf.step.step` checked (a :class:`pdcalc.core.errors.LayoutError` or
    :class:`pdcalc.core.errors.UnknownNameError` naming the argument) and resolved into :class:`StepInputs`."""
    phase = check_phase(phase)
    s, c = model_shape(model), get_card(card)
    _check_tp(s, tp, dp)
    engine = step_engine(s, engine)
    costs = DEFAULT_COSTS if costs is None else costs
    if costs not in COSTS:
        raise UnknownNameError("cost model", costs, COSTS)
    cards = _check_experts(s, tp, dp, ep, redundant_experts, mtp_steps)
    overlap_model, acceptance = _check_options(
        mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap, graph=graph, beyond=beyond,
        overlap_model=overlap_model, eplb=eplb, mtp_steps=mtp_steps, mtp_acceptance=mtp_acceptance)
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
    expert_dtype, p_expert = lin_dtype, p_lin
    if compute_dtype is None and peak_flops_per_s is None and weight_only_fp4(scheme, c):
        expert_dtype = WEIGHT_ONLY_FP4_DTYPE
        p_expert = c.flops(expert_dtype)
    c.flops(attn_dtype)
    return StepInputs(model=model, card_key=card, s=s, c=c, phase=phase, quant=quant, tp=tp, dp=dp, ep=ep,
                      cards=cards, L=L, S=S, scalar=scalar, lin_dtype=lin_dtype, p_lin=p_lin,
                      expert_dtype=expert_dtype, p_expert=p_expert, attn_dtype=attn_dtype,
                      mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap, kv_bytes=kv_bytes, act_bytes=act_bytes,
                      allreduces=allreduces_per_layer, dispatch_bytes=dispatch_bytes, combine_bytes=combine_bytes,
                      engine=engine, costs=costs, mtp_steps=mtp_steps, acceptance=acceptance, eplb=eplb,
                      redundant=redundant_experts, graph=graph, overlap_model=overlap_model, beyond=beyond)


def weight_only_fp4(scheme, card) -> bool:
    """Whether ``scheme`` stores the routed experts in FP4 and ``card`` has no FP4 tensor cores, so that the
    experts are multiplied weight-only (:data:`WEIGHT_ONLY_FP4_DTYPE`)."""
    fp4 = any(r.roles is not None and "expert" in r.roles and r.dtype == "fp4" for r in get_scheme(scheme).rules)
    return fp4 and "fp4" not in get_card(card).flops_per_s


def held_bytes(x: StepInputs):
    """Bytes one card holds for the step: its weights (with the redundant expert copies) and the KV cache of
    its share of the sequences (whole on every TP card).

    .. math:: M_\\text{card} = W_\\text{card} + \\frac{S}{dp} B_\\text{stored}(L)
    """
    stored_w = weight_bytes_per_card(x.model, x.quant, tp=x.tp, ep=x.ep)
    if x.redundant:
        w = card_weights_cached(x.model, x.quant, x.ep, x.tp)
        base = place_experts(x.s.n_experts, x.ep).max_experts_per_card
        more = place_experts(x.s.n_experts, x.ep, x.redundant).max_experts_per_card
        stored_w = stored_w + w.class_i_bytes * (more / base - 1)
    return stored_w + x.S / x.dp * kv_stored_bytes_per_sequence(x.model, x.L, engine=x.engine, kv_bytes=x.kv_bytes)


__all__ = ["COMPUTE_DTYPE", "COSTS", "DEFAULT_ACT_BYTES", "DEFAULT_ALLREDUCES_PER_LAYER", "DEFAULT_COMBINE_BYTES",
           "DEFAULT_COMM_EFF", "DEFAULT_COSTS", "DEFAULT_DISPATCH_BYTES", "DEFAULT_KV_BYTES", "DEFAULT_MBU",
           "DEFAULT_MFU", "MESSAGE_DTYPE", "StepInputs", "WEIGHT_ONLY_FP4_DTYPE", "held_bytes", "resolve",
           "weight_only_fp4"]
