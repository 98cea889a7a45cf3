"""Expert parallelism (EP) and tensor parallelism (TP): which card holds what, and what moves.

Expert placement follows vLLM's contiguous expert map: with ``E`` logical experts over ``N`` cards,
card ``k`` holds a contiguous block; when ``N`` does not divide ``E`` the first ``E mod N`` cards hold
one expert more. Redundant experts (DeepSeek's EPLB: e.g. 256 + 32 copies over 288 slots) add physical
slots; without routing statistics the copies go to experts ``0, 1, ...`` in order, one per slot.

Source: vLLM ``vllm/model_executor/layers/fused_moe/layer.py`` (``determine_expert_map``);
DeepSeek open-infra-index day 6 (redundant experts in prefill and decode).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdcalc.errors import LayoutError


@dataclass(frozen=True)
class Placement:
    """Physical expert slots per card of one EP group."""

    n_experts: int                     # logical routed experts per layer
    ep_size: int                       # cards in the EP group
    redundant: int                     # extra physical copies
    cards: tuple[tuple[int, ...], ...]  # logical expert ids held by each card (copies included)

    @property
    def experts_per_card(self) -> np.ndarray:
        return np.array([len(c) for c in self.cards])

    @property
    def max_experts_per_card(self) -> int:
        return int(self.experts_per_card.max())

    def card_of(self, expert: int) -> int:
        """The first card holding a copy of ``expert``."""
        for k, held in enumerate(self.cards):
            if expert in held:
                return k
        raise LayoutError(f"expert {expert} is not placed (experts are 0..{self.n_experts - 1})")

    def ranges(self) -> list[str]:
        """Human-readable ``first ~ last`` per card (contiguous blocks)."""
        out = []
        for held in self.cards:
            base = [e for e in held]
            out.append(f"{base[0]} ~ {base[-1]}" if len(base) > 1 else str(base[0]))
        return out


def place_experts(n_experts: int, ep_size: int, redundant: int = 0) -> Placement:
    """Contiguous placement of ``n_experts`` (+ ``redundant`` copies) over ``ep_size`` cards.

    .. math:: n_k = \\lfloor S / N \\rfloor + [k < S \\bmod N], \\quad S = E + R
    """
    for name, v, low in (("n_experts", n_experts, 1), ("ep_size", ep_size, 1), ("redundant", redundant, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise LayoutError(f"{name} must be an integer >= {low}, got {v!r}")
    slots = n_experts + redundant
    if ep_size > slots:
        raise LayoutError(f"cannot spread {n_experts} experts (+{redundant} redundant) over {ep_size} cards: "
                          f"{ep_size - slots} cards would hold no expert")
    if redundant > n_experts:
        raise LayoutError(f"{redundant} redundant copies exceed the {n_experts} experts they copy")
    logical = list(range(n_experts)) + list(range(redundant))
    base, extra = divmod(slots, ep_size)
    cards, start = [], 0
    for k in range(ep_size):
        n = base + (1 if k < extra else 0)
        cards.append(tuple(logical[start:start + n]))
        start += n
    return Placement(n_experts=n_experts, ep_size=ep_size, redundant=redundant, cards=tuple(cards))


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
