"""How a step's parts are scheduled: DeepSeek's two-micro-batch overlap (the SMs the communication
holds) and the host time per step outside graph capture.
"""

from __future__ import annotations

from functools import cache

from pdcalc.core.errors import UnknownNameError
from pdcalc.hardware.cards import Card, get_card
from pdcalc.perf.kernels import CostSource, cost_tables

#: How the published-cost step overlaps two micro-batches: "published", computation on the SMs DeepSeek's
#: profile leaves it (:func:`overlap_compute_slowdown`); "ideal", communication and computation never slow
#: each other (for comparison).
OVERLAP_MODELS = ("published", "ideal")
DEFAULT_OVERLAP_MODEL = "published"


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
    (p,) = [q for q in cost_tables().overlap(phase=phase, mode=mode) if q.compute_sms is not None
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
    pts = [p for p in cost_tables().overheads() if p.what == "eager_decode_host_gap"]
    p = pts[0]
    if graph:
        return 0.0, CostSource("per-step overhead", "graph mode", "none", (), False,
                               "graph capture: no published per-step overhead; none added")
    return layers * p.idle_s, CostSource("per-step overhead", "eager mode", p.card, (p.table_id,), True,
                                         f"host gap {p.idle_s * 1e6:g} us per transformer block in eager "
                                         f"decode ({p.card}), carried")


@cache
def profiled_steps() -> dict:
    return {p.phase: p for p in cost_tables().overheads() if p.what == "profiled_step"}
