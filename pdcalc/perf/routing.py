"""How routed tokens spread over experts and cards: the experts a batch hits, and the load of the
hottest EP rank with and without EPLB (TensorRT-LLM's published imbalance table).
"""

from __future__ import annotations

import numpy as np

from pdcalc.core.errors import LayoutError
from pdcalc.perf.kernels import CostSource, cost_tables
from pdcalc.perf.shape import as_array, scalar_or_array


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
    b = as_array(tokens, "tokens", 0)
    return scalar_or_array(n_experts * (1 - (1 - top_k / n_experts) ** b), np.ndim(tokens) == 0)


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
    pts = cost_tables().expert_imbalance(by="rank")
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
