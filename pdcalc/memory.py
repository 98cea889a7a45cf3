"""Per-card weights and memory budgets under EP and TP.

Per card, a tensor sharded by EP contributes the experts the card holds, one sharded by TP its
``1/t`` slice, and a replicated one all of it:

.. math:: W_\\text{card} = \\sum_\\text{repl} W + \\sum_\\text{tp} \\frac{W}{t} + \\frac{n_\\text{card}}{E} \\sum_\\text{ep} W

The usable memory is the engine's utilisation fraction of what the card exposes (vLLM and
vllm-ascend: ``gpu_memory_utilization`` x the device's total memory as the runtime reports it).
What is left after weights, activations and framework overhead is the KV cache budget; a negative
budget is a result ("does not fit, short by ..."), not an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdcalc.errors import LayoutError
from pdcalc.hardware import get_card
from pdcalc.inventory import CATEGORIES, get_inventory
from pdcalc.parallel import place_experts
from pdcalc.quant import get_scheme
from pdcalc.units import GiB


@dataclass(frozen=True)
class CardWeights:
    """Weight bytes on the fullest card of an EP x TP layout."""

    model: str
    scheme: str
    ep: int
    tp: int
    mtp: bool
    experts_per_card: int           # routed experts per layer on the fullest card (copies included)
    by_category: dict = field(repr=False)  # bytes per category on that card
    total_bytes: float = 0.0
    class_i_bytes: float = 0.0      # EP-split routed experts
    class_ii_bytes: float = 0.0     # everything replicated or TP-split


def card_weights(model, scheme: str = "w8a8", *, ep: int = 1, tp: int = 1, mtp: bool = False,
                 redundant: int = 0) -> CardWeights:
    """Weight bytes on one card of an EP group of ``ep`` cards with TP degree ``tp``."""
    inv, sch = get_inventory(model), get_scheme(scheme)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise LayoutError(f"tp must be an integer >= 1, got {tp!r}")
    placement = place_experts(inv.n_routed_experts, ep, redundant)
    n_card = placement.max_experts_per_card
    out = dict.fromkeys(CATEGORIES, 0.0)
    for t in inv.tensors:
        if t.part == "mtp" and not mtp:
            continue
        b = sch.tensor_bytes(t)
        if t.shard == "ep":
            b = b / t.count * n_card
        elif t.shard == "tp":
            b = b / tp
        out[t.category] += b
    by_cat = {k: v for k, v in out.items() if v}
    one = by_cat.get("routed_experts", 0.0)
    total = sum(by_cat.values())
    return CardWeights(model=inv.name, scheme=sch.name, ep=ep, tp=tp, mtp=mtp, experts_per_card=n_card,
                       by_category=by_cat, total_bytes=total, class_i_bytes=one, class_ii_bytes=total - one)


@dataclass(frozen=True)
class Budget:
    """One card's memory budget."""

    card: str
    base_bytes: float               # memory the utilisation fraction applies to
    utilization: float
    usable_bytes: float
    weights_bytes: float
    activation_bytes: float
    overhead_bytes: float
    kv_bytes: float                 # left for the KV cache (negative: does not fit)

    @property
    def fits(self) -> bool:
        return self.kv_bytes >= 0

    def verdict(self, unit: float = GiB, unit_name: str = "GiB") -> str:
        if self.fits:
            return f"fits, {self.kv_bytes / unit:.2f} {unit_name} left for KV cache"
        return f"does not fit, short by {-self.kv_bytes / unit:.2f} {unit_name}"


def budget(card, weights_bytes: float, *, utilization: float = 0.9, activation_bytes: float = 0.0,
           overhead_bytes: float = 0.0, base: str = "visible") -> Budget:
    """Memory left for KV on ``card`` after weights, activations and overhead.

    ``base`` is "visible" (what the runtime reports, where documented) or "installed" (the HBM size).

    .. math:: M_\\text{KV} = u\\,M_\\text{base} - W - A - F
    """
    c = get_card(card)
    if not 0 < utilization <= 1:
        raise LayoutError(f"utilization must be in (0, 1], got {utilization}")
    if base not in ("visible", "installed"):
        raise LayoutError(f"base must be 'visible' or 'installed', got {base!r}")
    base_bytes = c.usable_base_bytes if base == "visible" else c.hbm_bytes
    usable = utilization * base_bytes
    kv = usable - weights_bytes - activation_bytes - overhead_bytes
    return Budget(card=c.name, base_bytes=base_bytes, utilization=utilization, usable_bytes=usable,
                  weights_bytes=weights_bytes, activation_bytes=activation_bytes, overhead_bytes=overhead_bytes,
                  kv_bytes=kv)
