"""Communication of a step: the TP all-reduces, DeepSeek-V4's indexer-score all-reduce and the EP
dispatch/combine, as a roofline over link bandwidth and, with published costs, from DeepEP's and NCCL's
measured figures (alpha-beta per message, carried to other cards by link bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from pdcalc.core.errors import ConfigError
from pdcalc.hardware.cards import Card, get_card
from pdcalc.layout.parallel import allreduce_bytes, expected_remote_cards, place_experts
from pdcalc.perf.flops import sum_capped_floor
from pdcalc.perf.kernels import GEMM_REFERENCE, CostSource, cost_tables, nearest_card
from pdcalc.perf.shape import as_array, check_eff, check_int, check_phase, model_shape, scalar_or_array

DEFAULT_COMM_EFF = 0.7   # assumed share of the link bandwidth reached by all-reduce and all-to-all
DEFAULT_ALLREDUCES_PER_LAYER = 2   # Megatron-LM TP: one after attention, one after the FFN (Shoeybi et al. 2019)
DEFAULT_ACT_BYTES = 2.0            # BF16 hidden states on the TP all-reduce
DEFAULT_DISPATCH_BYTES = 1.0       # DeepEP dispatch: FP8 hidden state (as pdcalc.layout.parallel.dispatch)
DEFAULT_COMBINE_BYTES = 2.0        # DeepEP combine: BF16 expert output (as pdcalc.layout.parallel.dispatch)


# ------------------------------------------------------------------------------ communication
def link_bytes_per_s(card: Card, group: int) -> float:
    """Per-card one-way bandwidth of a group: the node's fabric when the group fits in a node."""
    return card.intra_node_bytes_per_s if group <= card.cards_per_node else card.scale_out_bytes_per_s


def tp_allreduce_per_layer(model, card, *, tokens, tp: int,
                           act_bytes: float = DEFAULT_ACT_BYTES, comm_eff: float = DEFAULT_COMM_EFF,
                           allreduces: int = 1):
    """Bytes each card sends and seconds spent in the TP all-reduces of one layer for ``tokens`` tokens.

    The payload is the hidden state of every token the TP group processes; a ring all-reduce sends
    ``2 (t - 1) / t`` of it per card (:func:`pdcalc.layout.parallel.allreduce_bytes`). ``tokens`` must be the
    same tokens as the compute it is compared with (one decode step: one per sequence):

    .. math::

       B_\\text{TP} = a \\cdot 2 \\frac{t-1}{t} \\, T \\, d \\, s_\\text{act}, \\qquad
       t_\\text{TP} = \\frac{B_\\text{TP}}{\\eta_\\text{comm} W_\\text{link}}

    with ``a`` all-reduces per layer and ``W_link`` the card's intra-node bandwidth when ``t`` fits in
    a node, else its scale-out bandwidth. Returns ``(bytes, seconds)``.
    """
    s, c = model_shape(model), get_card(card)
    check_int("tp", tp)
    check_eff("comm_eff", comm_eff)
    T = as_array(tokens, "tokens", 0)
    b = allreduces * allreduce_bytes(T * s.hidden * act_bytes, tp)
    scalar = np.ndim(tokens) == 0
    return scalar_or_array(b, scalar), scalar_or_array(b / (comm_eff * link_bytes_per_s(c, tp)), scalar)


def indexer_allreduce_per_layer(model, card, *, context, sequences, tp: int, phase: str = "decode",
                                act_bytes: float = DEFAULT_ACT_BYTES, comm_eff: float = DEFAULT_COMM_EFF):
    """DeepSeek-V4: bytes each card sends and seconds spent all-reducing one ratio-4 layer's indexer scores.

    Under TP each card holds ``n_I / t`` indexer heads (``wq_b``, ``weights_proj`` column-parallel), so
    every query's scores over the ``L / 4`` compressed entries are partial sums, all-reduced in BF16
    before the top-k. ``sequences`` are those of one TP rank; a decode query scores ``floor(L/4)``
    entries, a prompt's queries ``sum_i floor(i/4)`` (causal):

    .. math::

       B_\\text{idx} = 2 \\frac{t-1}{t} \\, S \\, N_\\text{scores}(L) \\, s_\\text{act}, \\qquad
       t_\\text{idx} = \\frac{B_\\text{idx}}{\\eta_\\text{comm} W_\\text{link}}

    Returns ``(bytes, seconds)``.

    Source: deepseek-ai/DeepSeek-V4-Flash ``inference/model.py``, ``Indexer.forward``
    (``if world_size > 1: dist.all_reduce(index_score)``).
    """
    s, c = model_shape(model), get_card(card)
    phase = check_phase(phase)
    if not s.v4:
        raise ConfigError(s.config.source, "model_type", "only deepseek_v4 has an indexer")
    check_int("tp", tp)
    check_eff("comm_eff", comm_eff)
    L = np.floor(as_array(context, "context", 1))
    S = as_array(sequences, "sequences", 0)
    scores = np.floor(L / 4) if phase == "decode" else sum_capped_floor(L, 4)
    b = allreduce_bytes(S * scores * act_bytes, tp)
    scalar = np.ndim(context) == 0 and np.ndim(sequences) == 0
    return scalar_or_array(b, scalar), scalar_or_array(b / (comm_eff * link_bytes_per_s(c, tp)), scalar)


def ep_alltoall_per_layer(model, card, *, tokens_per_card, ep: int,
                          dispatch_bytes: float = DEFAULT_DISPATCH_BYTES,
                          combine_bytes: float = DEFAULT_COMBINE_BYTES, comm_eff: float = DEFAULT_COMM_EFF):
    """Bytes each card sends and seconds spent in one MoE layer's dispatch + combine.

    Each token goes once to every remote card holding one of its experts (deduplicated per card, as
    DeepEP): :func:`pdcalc.layout.parallel.expected_remote_cards` cards on average. Of the ``ep - 1`` remote
    cards, ``min(ep, n_node) - 1`` share the node and use its fabric, the rest the scale-out network;
    the slower of the two sets the time:

    .. math::

       B_\\text{EP} = T_\\text{card} \\, \\mathbb{E}[\\text{cards}] \\, d \\, (s_\\text{dispatch} + s_\\text{combine}),
       \\qquad t_\\text{EP} = \\frac{\\max(f B_\\text{EP} / W_\\text{intra}, (1-f) B_\\text{EP} / W_\\text{out})}
       {\\eta_\\text{comm}}

    with ``f = (min(ep, n_node) - 1) / (ep - 1)``. Returns ``(bytes, seconds)``. Routing is taken as
    uniform over cards: DeepSeek-V3's node-limited routing (each token to at most 4 nodes) and DeepEP's
    one-copy-per-node forwarding over the scale-out network are not modelled, so the scale-out bytes are an
    upper bound.
    """
    s, c = model_shape(model), get_card(card)
    check_int("ep", ep)
    check_eff("comm_eff", comm_eff)
    T = as_array(tokens_per_card, "tokens_per_card", 0)
    scalar = np.ndim(tokens_per_card) == 0
    if ep == 1:
        return scalar_or_array(T * 0.0, scalar), scalar_or_array(T * 0.0, scalar)
    place_experts(s.n_experts, ep)  # raises a LayoutError when ep exceeds the experts
    b = T * expected_remote_cards(s.n_experts, ep, s.top_k) * s.hidden * (dispatch_bytes + combine_bytes)
    f = (min(ep, c.cards_per_node) - 1) / (ep - 1)
    t = np.maximum(f * b / c.intra_node_bytes_per_s, (1 - f) * b / c.scale_out_bytes_per_s) / comm_eff
    return scalar_or_array(b, scalar), scalar_or_array(t, scalar)


#: Bytes of one FP8 / INT8 dispatched hidden value including its scale: one FP32 scale per 128 values
#: (DeepSeek-V3 report §3.3.2, fine-grained 1 x 128 activation tiles; DeepEP's FP8 dispatch).
FP8_SCALE_BYTES_PER_VALUE = 4 / 128


# --------------------------------------------------------------------- MoE dispatch / combine
def ranks_per_card(card: Card) -> int:
    """EP ranks one card holds (:attr:`pdcalc.hardware.cards.Card.ranks`)."""
    return card.ranks


def _domain(card: Card) -> int:
    """Cards that reach each other over the scale-up fabric (:attr:`pdcalc.hardware.cards.Card.scale_up_domain`)."""
    return card.scale_up_domain


def _interp_log2(x, xs, ys):
    """``ys`` at ``x``, linear in log2 of the EP size between published sizes, constant beyond them."""
    order = np.argsort(xs)
    xs, ys = np.log2(np.asarray(xs, float)[order]), np.asarray(ys, float)[order]
    return float(np.interp(np.log2(x), xs, ys))


def _copy_bytes(dtype: str, hidden: int) -> float:
    return hidden * (2.0 if dtype in ("bf16", "fp16") else 1.0 + FP8_SCALE_BYTES_PER_VALUE)


@dataclass(frozen=True)
class MessageCost:
    """One dispatch or combine call, as :func:`ep_message_seconds` times it: ``t = alpha + bytes / beta``."""

    alpha_s: float                  # latency per call
    intra_bytes_per_s: float        # beta over the scale-up fabric (per rank)
    inter_bytes_per_s: float        # beta over the scale-out network (per rank)
    source: CostSource


def _link_ratio(card: Card, src: Card, inter: bool) -> float:
    """Per-rank link bandwidth of ``card`` over that of ``src`` (scale-out or scale-up)."""
    attr = "scale_out_bytes_per_s" if inter else "intra_node_bytes_per_s"
    return (getattr(card, attr) / ranks_per_card(card)) / (getattr(src, attr) / ranks_per_card(src))


@cache
def _dispatch_points(src: str, mode: str, operation: str, inter: bool):
    costs = cost_tables()
    pts = costs.dispatch(src, mode=mode, operation=operation)
    if mode == "low_latency":
        both = [p for p in pts if p.link == "RDMA+NVLink"]
        pts = both or pts
    elif inter:
        pts = [p for p in pts if p.link == "RDMA"]
    else:
        pts = [p for p in pts if p.link in ("NVLink", "HCCS")]
    return tuple(pts)


def ep_message_cost(card, *, mode: str, operation: str, ep: int) -> MessageCost:
    """Latency and bandwidths of one MoE ``operation`` ("dispatch" or "combine") in ``mode`` ("normal":
    prefill kernels, "low_latency": decode kernels) over an EP group of ``ep`` cards.

    Normal kernels publish a bottleneck bandwidth by EP size (no latency): ``beta`` is that bandwidth at
    ``ep`` (over NVLink/HCCS inside the scale-up domain, RDMA beyond it), ``alpha = 0``. Low-latency
    kernels publish the latency of one call at 128 tokens by EP size: ``beta`` is the link's stated maximum
    (DeepEP: ~50 GB/s per CX7 NIC, ~160 GB/s NVLink; DeepEP-Ascend states none, so the card preset's
    scale-up bandwidth), and ``alpha`` the published latency less the time of the published bytes at
    ``beta``, i.e. what the call costs beyond moving its data. Sizes between published ones interpolate
    in log2 of the size; beyond them the nearest is kept. A card without tables carries those of its
    maker's measured card (:data:`NEAREST_CARD`; scale-out from the H800), ``beta`` scaled by the ratio of
    the cards' per-rank link bandwidths.
    """
    costs = cost_tables()
    c = get_card(card)
    ranks = ep * ranks_per_card(c)
    inter = ep > _domain(c)
    have = {p.card for p in costs.points("dispatch") if p.mode == mode and p.card in card_name_set()}
    src_name = nearest_card(c, have)
    if inter and not _dispatch_points(src_name, mode, operation, True):
        src_name = GEMM_REFERENCE[0]          # scale-out tables: the H800's
    src = get_card(src_name)
    pts = _dispatch_points(src_name, mode, operation, inter)
    if not pts:
        raise ConfigError("pdcalc/data/costs.toml", "dispatch", f"no {mode} {operation} figure for {src_name}")
    scale_intra = _link_ratio(c, src, False)
    scale_inter = _link_ratio(c, src, True)
    eps = [p.ep_size for p in pts]
    tables = tuple(sorted({p.table_id for p in pts}))
    carried = src_name != c.name
    how = "" if not carried else f"; carried from {src_name}, bandwidth scaled by the per-rank link ratio"
    if mode == "normal":
        bw = _interp_log2(ranks, eps, [p.bandwidth_bytes_per_s for p in pts])
        scale = scale_inter if inter else scale_intra
        note = (f"{'RDMA' if inter else 'scale-up'} bottleneck bandwidth {bw / 1e9:.3g} GB/s at EP {ranks} "
                f"(normal kernels; no latency published, alpha = 0){how}")
        return MessageCost(alpha_s=0.0, intra_bytes_per_s=bw * scale, inter_bytes_per_s=bw * scale,
                           source=CostSource(f"MoE {operation} (normal)", c.name, src_name, tables, carried, note))
    # low latency: alpha from the published latency at the published batch
    nic = next((p.nic_max_bytes_per_s for p in pts if p.nic_max_bytes_per_s), None) \
        or src.scale_out_bytes_per_s / ranks_per_card(src)
    normal = _dispatch_points(src_name, "normal", operation, False)
    nvl = next((p.link_max_bytes_per_s for p in normal if p.link_max_bytes_per_s), None) \
        or src.intra_node_bytes_per_s / ranks_per_card(src)
    domain_ranks = _domain(src) * ranks_per_card(src)
    alphas = []
    for p in pts:
        per = p.tokens_per_batch * p.top_k * _copy_bytes(p.dispatch_dtype if operation == "dispatch"
                                                         else p.combine_dtype, p.hidden)
        f_out = max(0, p.ep_size - domain_ranks) / p.ep_size
        alphas.append(max(0.0, p.latency_s - max(per * f_out / nic, per * (1 - f_out) / nvl)))
    a = _interp_log2(ranks, eps, alphas)
    note = (f"latency {a * 1e6:.3g} us per call beyond its bytes (published latency at 128 tokens less the "
            f"bytes at {nic / 1e9:g} GB/s RDMA, {nvl / 1e9:g} GB/s scale-up){how}")
    return MessageCost(alpha_s=a, intra_bytes_per_s=nvl * scale_intra, inter_bytes_per_s=nic * scale_inter,
                       source=CostSource(f"MoE {operation} (low latency)", c.name, src_name, tables, carried, note))


def card_name_set():
    from pdcalc.hardware.cards import card_names
    return set(card_names())


def ep_message_seconds(card, *, mode: str, operation: str, ep: int, tokens_per_card, n_experts: int, top_k: int,
                       hidden: int, dtype: str, imbalance: float = 1.0):
    """Seconds of one dispatch or combine call of ``tokens_per_card`` tokens per card, and the bytes each
    card sends (arrays welcome).

    Normal kernels (prefill) send each token once per remote card (inside the scale-up domain) or once
    per remote node (beyond it) that holds one of its experts, as DeepEP forwards over NVLink after one
    RDMA copy per node; low-latency kernels (decode) send each of the ``k`` copies, those to other nodes
    over RDMA and the rest over the scale-up fabric:

    .. math::

       t_\\text{normal} = \\frac{\\rho\\,T\\,\\mathbb{E}[\\text{remote}]\\,b}{\\beta}, \\qquad
       t_\\text{LL} = \\alpha + \\rho\\max\\Bigl(\\frac{f\\,T k b}{\\beta_\\text{out}},
       \\frac{(1-f)\\,T k b}{\\beta_\\text{in}}\\Bigr)

    with ``b`` the bytes of one copy (FP8 with its scales, or BF16), ``f`` the share of ranks on other
    nodes, ``rho`` the max/mean load of the hottest rank (:func:`imbalance_factor`) and ``alpha``,
    ``beta`` from :func:`ep_message_cost`. Per rank: a card of several ranks (``ranks_per_card`` of the card preset)
    splits its tokens over them. Routing is uniform over experts (DeepSeek-V3's group-limited routing,
    at most 4 nodes per token, is not modelled: the node count is an upper bound).
    """
    c = get_card(card)
    r = ranks_per_card(c)
    ranks = ep * r
    T = np.asarray(tokens_per_card, dtype=float) / r
    mc = ep_message_cost(c, mode=mode, operation=operation, ep=ep)
    b = _copy_bytes(dtype, hidden)
    domain_ranks = _domain(c) * r
    if mode == "normal":
        if ranks <= domain_ranks:
            remote = expected_remote_cards(n_experts, ranks, top_k)
            sent = T * remote * b
            t = imbalance * sent / mc.intra_bytes_per_s
        else:
            nodes = max(1, ranks // domain_ranks)
            remote = expected_remote_cards(n_experts, nodes, top_k) if nodes > 1 else 0.0
            sent = T * remote * b
            t = imbalance * sent / mc.inter_bytes_per_s
        return t, sent * r, mc.source
    f_out = max(0, ranks - domain_ranks) / ranks
    sent = T * top_k * b
    t = mc.alpha_s + imbalance * np.maximum(f_out * sent / mc.inter_bytes_per_s,
                                            (1 - f_out) * sent / mc.intra_bytes_per_s)
    return t, sent * r, mc.source


# --------------------------------------------------------------------- all-reduce
@cache
def allreduce_fit():
    """The alpha-beta fit of NCCL all-reduce on 8 H100 (:func:`pdcalc.perf.costs.allreduce_alpha_beta`), with
    the points whose time exceeds that of a larger message left out (the source's own outlier)."""
    costs = cost_tables()
    pts = sorted((p for p in costs.allreduce("h100", "intranode") if p.time_s is not None),
                 key=lambda p: p.size_bytes)
    tables = {p.table_id for p in pts}
    table = sorted(tables)[0]
    pts = [p for p in pts if p.table_id == table]
    out = [p.size_bytes for i, p in enumerate(pts) if any(q.time_s < p.time_s for q in pts[i + 1:])]
    return costs.allreduce_alpha_beta("h100", "intranode", table_id=table, exclude_sizes_bytes=out), table, pts


def allreduce_seconds(card, *, payload_bytes, tp: int):
    """One all-reduce of ``payload_bytes`` over ``tp`` cards: the NCCL H100 fit, its bandwidth scaled by
    the card's link bandwidth over the H100's and by the ring's ``2 (t-1)/t`` over that of the 8 GPUs
    measured; its latency kept.

    .. math:: t = \\alpha + \\frac{P}{\\beta}\\,\\frac{W_\\text{H100}}{W_\\text{link}}\\,
       \\frac{(t-1)/t}{7/8}
    """
    c = get_card(card)
    if tp == 1:
        return np.zeros_like(np.asarray(payload_bytes, dtype=float))
    fit, _, pts = allreduce_fit()
    world = pts[0].world_size if pts and pts[0].world_size else 8
    h100 = get_card("h100")
    ratio = link_bytes_per_s(c, tp) / h100.intra_node_bytes_per_s
    ring = ((tp - 1) / tp) / ((world - 1) / world)
    return fit.latency_s + np.asarray(payload_bytes, dtype=float) * ring / (fit.bandwidth_bytes_per_s * ratio)
