"""The layouts a reader names: published P/D splits and co-located layouts, the labels of splits and layouts,
and the memory of one card of each side.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdcalc.core.units import GiB
from pdcalc.hardware.cards import get_card
from pdcalc.plan.roles import layout_weights, seq_kv_bytes
from pdcalc.plan.workload import Setup, Workload


#: The columns that name a disaggregated split and a co-located option in a plan's tables.
SPLIT_KEYS = ("p_instances", "p_size", "p_tp", "d_instances", "d_size", "d_tp")
AGG_KEYS = ("instances", "size", "tp")


@dataclass(frozen=True, kw_only=True)
class PDSplit:
    """A published P/D disaggregated split."""

    label: str
    model: str                # the model preset it deploys
    source: str
    p_instances: int
    p_size: int
    p_tp: int
    d_instances: int
    d_size: int
    d_tp: int

    @property
    def cards(self) -> int:
        return self.p_instances * self.p_size + self.d_instances * self.d_size


@dataclass(frozen=True, kw_only=True)
class Colocated:
    """A published co-located layout: ``dp`` replicas of ``tp`` cards serving prefill and decode alike;
    ``ep`` the EP group in cards (``None``: each replica holds every expert, split ``tp`` ways)."""

    label: str
    model: str
    source: str
    tp: int
    dp: int
    ep: int | None = None

    @property
    def cards(self) -> int:
        return self.tp * self.dp


def split_label(row) -> str:
    """A split as people write it, ``"4 x P8 + 1 x D32"`` (TP degrees added when above 1); ``"none"`` for
    ``None`` (no plan)."""
    if row is None:
        return "none"
    tp = "".join(f", {r.upper()} TP {int(row[f'{r}_tp'])}" for r in ("p", "d") if int(row[f"{r}_tp"]) > 1)
    return (f"{int(row['p_instances'])} x P{int(row['p_size'])} + {int(row['d_instances'])} x D{int(row['d_size'])}"
            + tp)


def card_plans(setup: Setup, work: Workload, row) -> tuple:
    """Memory of one P card and one D card of a candidate (a row of :attr:`Plan.candidates`): weights,
    KV cache in use (one prompt per P rank; the D instance's share of the sequences per D rank) and the
    overhead, as :class:`pdcalc.layout.memory.MemoryPlan` objects."""
    from pdcalc.layout.memory import memory_plan

    c = get_card(setup.card)
    base = c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes
    out = []
    for role in ("p", "d"):
        size, tp = int(row[f"{role}_size"]), int(row[f"{role}_tp"])
        w = layout_weights(setup, size, tp)
        if role == "p":
            kv = float(seq_kv_bytes(setup, work.prompt_tokens))
            over = setup.p_overhead_bytes
        else:
            per_rank = float(row["concurrency"]) / (int(row["d_instances"]) * (size // tp))
            kv = per_rank * float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
            over = setup.d_overhead_bytes
        out.append(memory_plan(f"{role.upper()} card ({row[f'{role}_instances']} x {size} cards, tp {tp})",
                               usable_bytes=setup.utilization * base, capacity_bytes=base, weights=w, kv_cache=kv,
                               overhead=over))
    return tuple(out)


def aggregated_label(row) -> str:
    """A co-located option as people write it, ``"4 x 16 co-located"`` (TP added when above 1); ``"none"``
    for ``None``."""
    if row is None:
        return "none"
    tp = f", TP {int(row['tp'])}" if int(row["tp"]) > 1 else ""
    return f"{int(row['instances'])} x {int(row['size'])} co-located{tp}"


def option_label(row, mode: str) -> str:
    """:func:`split_label` or :func:`aggregated_label`, by ``mode``."""
    return aggregated_label(row) if mode == "aggregated" else split_label(row)


def aggregated_card_plan(setup: Setup, work: Workload, row):
    """Memory of one card of a co-located option (a row of :attr:`Plan.aggregated`): weights, the KV cache
    of its rank's sequences of ``prompt + output`` tokens plus the prompt being prefilled, and the larger
    of the P and D overheads, as a :class:`pdcalc.layout.memory.MemoryPlan`."""
    from pdcalc.layout.memory import memory_plan

    c = get_card(setup.card)
    base = c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes
    size, tp, n = int(row["size"]), int(row["tp"]), int(row["instances"])
    per_rank = float(row["concurrency"]) / (n * (size // tp))
    kv = (per_rank * float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
          + float(seq_kv_bytes(setup, work.prompt_tokens)))
    return memory_plan(f"co-located card ({n} x {size} cards, tp {tp})", usable_bytes=setup.utilization * base,
                       capacity_bytes=base, weights=layout_weights(setup, size, tp), kv_cache=kv,
                       overhead=setup.a_overhead_bytes)


#: Names of a card's memory parts in the JSON (:meth:`Plan.answer`) and in the table (:meth:`Plan.memory`).
_JSON_NAMES = {"weights": "weights", "kv_cache": "kv_cache", "overhead": "activations_and_framework",
               "headroom": "headroom", "usable": "usable"}
TABLE_NAMES = {"weights": "weights", "kv_cache": "KV cache in use", "overhead": "activations and framework",
                "headroom": "headroom", "usable": "usable (utilization x memory)"}


def gib_parts(mp, names: dict = _JSON_NAMES) -> dict:
    """A :class:`pdcalc.layout.memory.MemoryPlan` in GiB: weights, KV cache, activations and framework, headroom,
    usable, under ``names``."""
    out = {names.get(k, k): v / GiB for k, v in mp.parts.items()}
    out.update({names["headroom"]: mp.free_bytes / GiB, names["usable"]: mp.usable_bytes / GiB})
    return out
