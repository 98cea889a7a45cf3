"""Expert parallelism (EP) and tensor parallelism (TP): which card holds what, and what moves.

Expert placement follows vLLM's contiguous expert map: with ``E`` logical experts over ``N`` cards,
card ``k`` holds a contiguous block; when ``N`` does not divide ``E`` the first ``E mod N`` cards hold
one expert more. Redundant experts (DeepSeek's EPLB: e.g. 256 + 32 copies over 288 slots) add physical
slots; without routing statistics the copies go to experts ``0, 1, ...`` in order, one per slot.

Source: vLLM ``vllm/model_executor/layers/fused_moe/layer.py`` (``determine_expert_map``);
DeepSeek open-infra-index day 6 (redundant experts in prefill and decode).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pdcalc.core.errors import LayoutError

#: Largest placement: logical experts and cards of one EP group. The placement is arithmetic (nothing
#: is stored per expert); the bounds only keep the per-card count array small and within int64.
MAX_EXPERTS = 2**32
MAX_EP_SIZE = 2**20


@dataclass(frozen=True)
class Placement:
    """Physical expert slots per card of one EP group, computed on demand (nothing is stored per expert).

    Slot ``s`` (``0 <= s < E + R``) holds logical expert ``s`` for ``s < E`` and the redundant copy of
    expert ``s - E`` after that; card ``k`` holds the contiguous slots :meth:`slots` ``(k)``, so at most
    two contiguous runs of expert ids (:meth:`blocks`).
    """

    n_experts: int                     # logical routed experts per layer
    ep_size: int                       # cards in the EP group
    redundant: int                     # extra physical copies

    @property
    def slots_total(self) -> int:
        """Physical expert slots over the group: ``E + R``."""
        return self.n_experts + self.redundant

    @property
    def experts_per_card(self) -> np.ndarray:
        """Slots (experts, copies included) on each card, as an ``int64`` array of ``ep_size`` entries."""
        base, extra = divmod(self.slots_total, self.ep_size)
        return np.full(self.ep_size, base, dtype=np.int64) + (np.arange(self.ep_size) < extra)

    @property
    def max_experts_per_card(self) -> int:
        """Slots on the fullest card: ``ceil((E + R) / N)``."""
        return -(-self.slots_total // self.ep_size)

    def _card(self, card) -> int:
        if isinstance(card, bool) or not isinstance(card, numbers.Integral) or not 0 <= card < self.ep_size:
            raise LayoutError(f"card {card!r} is outside the EP group (cards are 0..{self.ep_size - 1})")
        return int(card)

    def slots(self, card: int) -> range:
        """The physical slots of ``card``: ``k * base + min(k, extra)`` onwards, ``base (+1)`` of them."""
        k = self._card(card)
        base, extra = divmod(self.slots_total, self.ep_size)
        start = k * base + min(k, extra)
        return range(start, start + base + (1 if k < extra else 0))

    def blocks(self, card: int) -> tuple[range, ...]:
        """The expert ids ``card`` holds, in slot order, as one or two contiguous ranges (originals, then
        redundant copies of experts ``0, 1, ...``)."""
        s, e = self.slots(card), self.n_experts
        out = []
        if s.start < e:
            out.append(range(s.start, min(s.stop, e)))
        if s.stop > e:
            out.append(range(max(s.start, e) - e, s.stop - e))
        return tuple(out)

    def held(self, card: int) -> tuple[int, ...]:
        """The expert ids ``card`` holds, in slot order (costs the card's own count, not the group's)."""
        return tuple(i for r in self.blocks(card) for i in r)

    def first_last(self, card: int) -> tuple[int, int]:
        """The first and the last expert id ``card`` holds, in slot order."""
        s, e = self.slots(card), self.n_experts
        return (s.start if s.start < e else s.start - e, s.stop - 1 if s.stop - 1 < e else s.stop - 1 - e)

    @property
    def cards(self) -> Sequence[tuple[int, ...]]:
        """Per-card view: ``cards[k]`` is :meth:`held` ``(k)``, computed when indexed."""
        return _Cards(self)

    def card_of(self, expert: int) -> int:
        """The first card holding a copy of ``expert`` (the card of its original slot ``expert``)."""
        if isinstance(expert, bool) or not isinstance(expert, numbers.Integral) or not 0 <= expert < self.n_experts:
            raise LayoutError(f"expert {expert!r} is not placed (experts are 0..{self.n_experts - 1})")
        base, extra = divmod(self.slots_total, self.ep_size)
        big = extra * (base + 1)                     # slots on the first `extra` cards, base + 1 each
        s = int(expert)
        return s // (base + 1) if s < big else extra + (s - big) // base

    def ranges(self) -> list[str]:
        """Human-readable ``first ~ last`` per card (in slot order; a single expert alone)."""
        base, extra = divmod(self.slots_total, self.ep_size)
        out = []
        for k in range(self.ep_size):
            first, last = self.first_last(k)
            out.append(f"{first} ~ {last}" if base + (k < extra) > 1 else str(first))
        return out


class _Cards(Sequence):
    """``Placement.cards``: a read-only sequence of per-card expert tuples, each computed when indexed."""

    def __init__(self, placement: Placement):
        self._p = placement

    def __len__(self) -> int:
        return self._p.ep_size

    def __getitem__(self, k):
        if isinstance(k, slice):
            return tuple(self._p.held(i) for i in range(*k.indices(len(self))))
        if isinstance(k, numbers.Integral) and not isinstance(k, bool) and -len(self) <= k < 0:
            k += len(self)
        if isinstance(k, numbers.Integral) and not isinstance(k, bool) and not 0 <= k < len(self):
            raise IndexError(f"card {k} is outside the EP group of {len(self)}")
        return self._p.held(k)


def place_experts(n_experts: int, ep_size: int, redundant: int = 0) -> Placement:
    """Contiguous placement of ``n_experts`` (+ ``redundant`` copies) over ``ep_size`` cards.

    .. math:: n_k = \\lfloor S / N \\rfloor + [k < S \\bmod N], \\quad S = E + R
    """
    for name, v, low, high in (("n_experts", n_experts, 1, MAX_EXPERTS), ("ep_size", ep_size, 1, MAX_EP_SIZE),
                               ("redundant", redundant, 0, MAX_EXPERTS)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise LayoutError(f"{name} must be an integer >= {low}, got {v!r}")
        if v > high:
            raise LayoutError(f"{name} must be an integer in {low}..{high:,}, got {int(v):,}")
    n_experts, ep_size, redundant = int(n_experts), int(ep_size), int(redundant)
    slots = n_experts + redundant
    if ep_size > slots:
        raise LayoutError(f"cannot spread {n_experts} experts (+{redundant} redundant) over {ep_size} cards: "
                          f"{ep_size - slots} cards would hold no expert (an EP group of at most {slots} cards)")
    if redundant > n_experts:
        raise LayoutError(f"{redundant} redundant copies exceed the {n_experts} experts they copy "
                          f"(at most {n_experts})")
    return Placement(n_experts=n_experts, ep_size=ep_size, redundant=redundant)


@dataclass(frozen=True)
class Dispatch:
    """The AllToAll of one token through its top-k experts, in one MoE layer."""

    src_card: int
    expert_cards: tuple[int, ...]     # card of each selected expert, in selection order
    copies_sent: int                  # one hidden state per remote expert (the article's count)
    cards_reached: int                # distinct remote cards (what a deduplicating dispatch sends)
    local_experts: int                # experts on the source card itself
    dispatch_bytes_per_copy: float    # bytes of one hidden state on the wire
    bytes_article: float              # copies_sent x bytes per copy, dispatch + combine
    bytes_dedup: float                # cards_reached x bytes per copy, dispatch + combine


def dispatch(placement: Placement, experts: list[int], src_card: int, hidden_size: int,
             dispatch_bytes_per_elem: float = 1.0, combine_bytes_per_elem: float = 2.0) -> Dispatch:
    """Where one token's hidden state goes and how many bytes move (dispatch + combine).

    Dispatch sends the hidden state (FP8 in DeepEP, 1 B per element) to each remote card holding a
    selected expert; combine returns the weighted expert output (BF16, 2 B per element). An
    implementation that deduplicates per card (DeepEP) sends once per card, not once per expert.
    """
    if not 0 <= src_card < placement.ep_size:
        raise LayoutError(f"source card {src_card} outside the EP group of {placement.ep_size}")
    cards = tuple(placement.card_of(e) for e in experts)
    remote = [c for c in cards if c != src_card]
    per_copy = hidden_size * (dispatch_bytes_per_elem + combine_bytes_per_elem)
    return Dispatch(src_card=src_card, expert_cards=cards, copies_sent=len(remote),
                    cards_reached=len(set(remote)), local_experts=len(cards) - len(remote),
                    dispatch_bytes_per_copy=hidden_size * dispatch_bytes_per_elem,
                    bytes_article=len(remote) * per_copy, bytes_dedup=len(set(remote)) * per_copy)


def expected_remote_cards(n_experts: int, ep_size: int, top_k: int) -> float:
    """Expected distinct remote cards one token reaches with uniform routing (top-k without replacement).

    .. math:: \\mathbb{E}[\\text{cards}] = (N-1)\\Bigl(1 - \\binom{E - E/N}{k} / \\binom{E}{k}\\Bigr)
    """
    from math import comb

    for name, v, low in (("n_experts", n_experts, 1), ("ep_size", ep_size, 1), ("top_k", top_k, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise LayoutError(f"{name} must be an integer >= {low}, got {v!r}")
    if top_k > n_experts or n_experts > MAX_EXPERTS:
        raise LayoutError(f"top_k must be in 0..n_experts and n_experts at most {MAX_EXPERTS:,}, got top_k={top_k}, "
                          f"n_experts={n_experts}")
    per = n_experts // ep_size
    p_miss = comb(n_experts - per, top_k) / comb(n_experts, top_k)
    return (ep_size - 1) * (1 - p_miss)


def allreduce_bytes(payload_bytes: float, group: int) -> float:
    """Bytes each card sends in a ring all-reduce of ``payload_bytes``.

    .. math:: B = 2\\,\\frac{t-1}{t}\\,P
    """
    if group < 1:
        raise LayoutError(f"TP group size must be >= 1, got {group}")
    return 2 * (group - 1) / group * payload_bytes
