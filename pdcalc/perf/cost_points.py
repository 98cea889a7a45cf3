"""The kinds of published kernel figure ``pdcalc/data/costs.toml`` holds, one frozen dataclass
each, in SI units (:mod:`pdcalc.perf.costs` parses and checks the file into them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

#: Where the packaged data file lives (used in error messages).
DEFAULT_SOURCE = "pdcalc/data/costs.toml"


# ------------------------------------------------------------------------------------------ dataclasses
@dataclass(frozen=True, kw_only=True)
class CostPoint:
    """One published figure with its source text; the fields common to every kind.

    ``printed`` lists the numbers as printed: ``(key, value, where)`` with ``where`` one of ``"point"`` (the
    number is in :attr:`quote`), ``"table"`` (in :attr:`table_quote`) or ``"peak"`` (in :attr:`peak_quote`).
    """

    id: str                      # "<table id>-<row number>"
    table_id: str
    kind: str
    card: str | None             # hardware preset or a [cards] slug of the data file
    card_as_stated: str | None
    model: str | None
    source: str
    url: str | None
    commit: str | None
    quote: str                   # exact text of this row or sentence
    table_quote: str             # exact text stating the table's conditions
    peak_quote: str | None
    conditions: str
    notes: str | None
    derived_by: str | None = None  # script (repository path) that recomputes the point; its output is the quote
    printed: tuple = field(default=(), compare=False, repr=False)


def _card_peak(card: str | None, dtype: str | None) -> float | None:
    from pdcalc.hardware.cards import card_names, get_card

    if card is None or dtype is None or card not in card_names():
        return None
    return get_card(card).flops_per_s.get(dtype)


def _card_hbm(card: str | None) -> float | None:
    from pdcalc.hardware.cards import card_names, get_card

    if card is None or card not in card_names():
        return None
    return get_card(card).hbm_bandwidth_bytes_per_s


@dataclass(frozen=True, kw_only=True)
class _ComputePoint(CostPoint):
    dtype: str | None = None
    achieved_flop_per_s: float | None = None        # FLOP/s
    memory_bytes_per_s: float | None = None          # achieved HBM bandwidth, bytes/s
    utilization_fraction: float | None = None        # as published, of the source's peak
    peak_flop_per_s: float | None = None             # peak the source states
    peak_memory_bytes_per_s: float | None = None     # HBM peak the source states

    @property
    def peak(self) -> float | None:
        """Peak FLOP/s used for :attr:`derived_efficiency`: the source's, else the card preset's for the dtype."""
        return self.peak_flop_per_s or _card_peak(self.card, self.dtype)

    @property
    def derived_efficiency(self) -> float | None:
        """``achieved_flop_per_s / peak``; None where either is unknown."""
        if self.achieved_flop_per_s is None or not self.peak:
            return None
        return self.achieved_flop_per_s / self.peak

    @property
    def efficiency(self) -> float | None:
        """Share of the peak reached: the published utilisation where the source states one, else
        :attr:`derived_efficiency`."""
        return self.utilization_fraction if self.utilization_fraction is not None else self.derived_efficiency

    @property
    def memory_efficiency(self) -> float | None:
        """``memory_bytes_per_s`` over the source's HBM peak, else the card preset's HBM bandwidth."""
        peak = self.peak_memory_bytes_per_s or _card_hbm(self.card)
        if self.memory_bytes_per_s is None or not peak:
            return None
        return self.memory_bytes_per_s / peak


@dataclass(frozen=True, kw_only=True)
class GemmPoint(_ComputePoint):
    """A GEMM: ``m x k`` by ``k x n`` (grouped: ``groups`` of ``m_per_group`` rows each)."""

    operation: str = "unspecified"   # dense, grouped_contiguous, grouped_masked, weight_only_4bit, unspecified
    m: int | None = None
    n: int | None = None
    k: int | None = None
    groups: int | None = None
    m_per_group: int | None = None


@dataclass(frozen=True, kw_only=True)
class MlaPoint(_ComputePoint):
    """An MLA attention kernel (decode or prefill, dense or sparse)."""

    phase: str = "decode"
    attention: str = "dense"
    bound: str | None = None                          # "compute" or "memory" as the source says
    kv_dtype: str | None = None
    throttled_peak_flop_per_s: float | None = None
    throttled_peak_utilization_fraction: float | None = None
    batch_size: int | None = None
    heads: int | None = None
    s_q: int | None = None
    topk: int | None = None


@dataclass(frozen=True, kw_only=True)
class DispatchPoint(CostPoint):
    """One MoE dispatch or combine kernel at one EP size."""

    mode: str                                         # "normal" (prefill) or "low_latency" (decode)
    operation: str                                    # "dispatch" or "combine"
    link: str
    ep_size: int                                      # EP ranks (nodes x ranks per node where so printed)
    latency_s: float | None = None
    bandwidth_bytes_per_s: float | None = None        # bottleneck bandwidth as the source defines it
    ep_nodes: int | None = None
    ep_per_node: int | None = None
    num_sms: int | None = None
    tokens_per_batch: int | None = None
    hidden: int | None = None
    top_k: int | None = None
    dispatch_dtype: str | None = None
    combine_dtype: str | None = None
    link_max_bytes_per_s: float | None = None
    nic_max_bytes_per_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class AllreducePoint(CostPoint):
    """An all-reduce: a time for one message size, or a bus/algorithm bandwidth."""

    scope: str                                        # "intranode" or "internode"
    basis: str                                        # "measured" or "expected" (a maintainer's figure)
    library: str | None = None
    algorithm: str | None = None
    world_size: int | None = None
    size_printed: str | None = None
    size_prefixes: str | None = None                  # how size_printed's KB/MB are read: binary or decimal
    size_bytes: float | None = None
    time_s: float | None = None
    bus_bandwidth_bytes_per_s: float | None = None
    alg_bandwidth_bytes_per_s: float | None = None
    line_rate_bytes_per_s: float | None = None
    nic_bandwidth_low_bytes_per_s: float | None = None
    nic_bandwidth_high_bytes_per_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class OverheadPoint(CostPoint):
    """A per-step fixed cost: a host gap inside a decode step, or the speedup of removing launch overhead."""

    what: str
    batch_size: int | None = None
    speedup_x: float | None = None
    block_time_s: float | None = None
    idle_s: float | None = None
    # a whole step profiled in a serving system (what = "profiled_step"): its conditions and its rate
    phase: str | None = None
    dtype: str | None = None
    ep_size: int | None = None
    tokens_per_batch: int | None = None      # tokens per card in the step
    context_tokens: float | None = None      # prompt length
    node_tokens_per_s: float | None = None   # tokens/s per node of the card's preset


@dataclass(frozen=True, kw_only=True)
class MtpPoint(CostPoint):
    """Acceptance of speculative (MTP) draft tokens."""

    acceptance_low_fraction: float | None = None
    acceptance_high_fraction: float | None = None
    speedup_x: float | None = None


@dataclass(frozen=True, kw_only=True)
class ImbalancePoint(CostPoint):
    """Routed-token imbalance; ``imbalance_ratio = (max - mean) / mean``."""

    by: str                                           # "rank" or "expert_slot"
    eplb: str                                         # "none", "offline", "online"
    imbalance_ratio: float
    slots_per_rank: int | None = None
    ep_size: int | None = None
    mean_tokens: float | None = None
    std_tokens: float | None = None

    @property
    def max_over_mean(self) -> float:
        """Load of the hottest rank (or slot) over the mean: ``1 + imbalance_ratio``."""
        return 1.0 + self.imbalance_ratio


@dataclass(frozen=True, kw_only=True)
class OverlapPoint(CostPoint):
    """What two-micro-batch overlap of computation and communication takes on one card.

    ``mode`` names the DeepEP kernels that communicate: ``"normal"`` kernels (prefill, training) run on SMs of
    their own for the whole overlap, ``"low_latency"`` ones (decode) issue RDMA and free them. Of the card's
    SMs, ``compute_sms`` run the computation and ``comm_sms`` the communication; ``comm_kernel_s`` is the
    time communication kernels run and ``comm_alongside_s`` how much of it other kernels run too."""

    phase: str                                        # "prefill", "decode" or "training"
    mode: str                                         # DeepEP kernels: "normal" or "low_latency"
    compute_sms: int | None = None
    comm_sms: int | None = None
    card_sms: int | None = None
    comm_kernel_s: float | None = None
    comm_alongside_s: float | None = None

    @property
    def sms(self) -> int | None:
        """The card's SMs: ``card_sms`` where stated, else ``compute_sms + comm_sms``."""
        if self.card_sms is not None:
            return self.card_sms
        if self.compute_sms is not None and self.comm_sms is not None:
            return self.compute_sms + self.comm_sms
        return None

    @property
    def comm_sm_share(self) -> float | None:
        """Share of the card's SMs the communication kernels hold: ``comm_sms / sms``."""
        if self.comm_sms is None or not self.sms:
            return None
        return self.comm_sms / self.sms

    @property
    def compute_slowdown(self) -> float | None:
        """Time of a compute-bound kernel on the computation's SMs over its time on all of them:
        ``sms / (sms - comm_sms)`` (its work spread over fewer SMs)."""
        share = self.comm_sm_share
        return None if share is None else 1.0 / (1.0 - share)

    @property
    def exposed_fraction(self) -> float | None:
        """Share of the communication kernels' time no other kernel runs alongside."""
        if self.comm_kernel_s is None or self.comm_alongside_s is None:
            return None
        return 1.0 - self.comm_alongside_s / self.comm_kernel_s


POINT_CLASSES = {"gemm": GemmPoint, "mla": MlaPoint, "dispatch": DispatchPoint, "allreduce": AllreducePoint,
            "overhead": OverheadPoint, "mtp_acceptance": MtpPoint, "expert_imbalance": ImbalancePoint,
            "overlap": OverlapPoint}


@dataclass(frozen=True, kw_only=True)
class Gap:
    """A (kind, card) pair with no published figure recorded; ``available_on`` lists the cards that have one."""

    kind: str
    card: str | None
    note: str | None
    available_on: tuple = ()


@dataclass(frozen=True, kw_only=True)
class Costs:
    """The validated contents of a costs file."""

    points: tuple
    gaps: tuple                                       # Gap entries as written in the file
    cards: MappingProxyType = field(compare=False)    # non-preset card slugs -> label (read-only)
    source: str = DEFAULT_SOURCE
