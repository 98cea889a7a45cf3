"""The published-cost step: every GEMM, attention kernel, all-reduce and dispatch/combine message of
one step timed from published figures, layer by layer, with two-micro-batch overlap and MTP draft passes
(:func:`pdcalc.perf.step.step` with ``costs="published"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from pdcalc.hardware.cards import Card
from pdcalc.layout.parallel import allreduce_bytes, place_experts
from pdcalc.model.inventory import get_inventory
from pdcalc.model.quant import get_scheme
from pdcalc.perf.comm import allreduce_fit, allreduce_seconds, ep_message_seconds, ranks_per_card
from pdcalc.perf.flops import attention_flops_per_card
from pdcalc.perf.kernels import (
    GEMM_REFERENCE,
    CostSource,
    attention_ceilings,
    cost_tables,
    gemm_bytes,
    gemm_ceilings,
    gemm_seconds,
)
from pdcalc.perf.routing import expected_experts_hit, imbalance_factor
from pdcalc.perf.schedule import overhead_seconds, overlap_compute_slowdown
from pdcalc.perf.shape import ModelShape, model_shape
from pdcalc.perf.speculative import accepted_tokens, mtp_acceptance_default
from pdcalc.perf.traffic import kv_read_bytes_per_sequence

# --------------------------------------------------------------------- the published step
_ATTN_CATEGORIES = frozenset({"attention", "kv_compressor", "indexer", "mhc"})
_SKIP_CATEGORIES = frozenset({"embedding", "hash_routing", "norms"})


@dataclass(frozen=True)
class _Gemm:
    """One (fused) GEMM of a layer on one card: tensors of the same layer, segment and input fused."""

    segment: str            # "attn", "ffn", "head", "proj" (MTP input projection)
    routed: bool            # a grouped GEMM over the card's routed experts
    n: int                  # output features on the card (one expert for routed)
    k: int                  # input features on the card
    weight_bytes: float     # weights on the card (routed: all local experts)


@dataclass(frozen=True)
class _LayerKind:
    count: int
    attn: tuple
    ffn: tuple
    moe: bool


def _gemm_plan_build(model, quant: str, tp: int, ep: int | None, redundant: int, part: str):
    from pdcalc.layout.memory import tensor_card_bytes

    inv, sch = get_inventory(model), get_scheme(quant)
    s = model_shape(model)
    n_loc = place_experts(s.n_experts, ep, redundant).max_experts_per_card if ep else None
    groups: dict = {}
    for t in inv.tensors:
        if t.part != part or t.category in _SKIP_CATEGORIES or len(t.shape) != 2:
            continue
        routed = t.category == "routed_experts"
        seg = ("head" if t.category == "lm_head" else "proj" if t.category == "mtp_proj"
               else "attn" if t.category in _ATTN_CATEGORIES else "ffn")
        n, k = int(t.shape[0]), int(t.shape[1])
        split = t.shard == "tp" or (routed and ep is None)
        if split and tp > 1:
            n, k = (n, max(1, k // tp)) if n == s.hidden else (max(1, n // tp), k)
        b = tensor_card_bytes(t, sch, experts_per_card=n_loc or t.count, tp=tp, experts_tp_split=ep is None)
        key = (t.layer if seg not in ("head",) else None, seg, routed, t.shard, k)
        g = groups.get(key)
        groups[key] = (n + (g[0] if g else 0), b + (g[1] if g else 0.0))
    layers: dict = {}
    head, proj = [], []
    for (layer, seg, routed, _, k), (n, b) in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1:])):
        g = _Gemm(segment=seg, routed=routed, n=n, k=k, weight_bytes=b)
        if seg == "head":
            head.append(g)
        elif seg == "proj":
            proj.append(g)
        else:
            layers.setdefault(layer, []).append(g)
    kinds: dict = {}
    for layer, gs in layers.items():
        sig = (tuple(g for g in gs if g.segment == "attn"), tuple(g for g in gs if g.segment == "ffn"),
               any(g.routed for g in gs))
        kinds[sig] = kinds.get(sig, 0) + 1
    return (tuple(_LayerKind(count=c, attn=a, ffn=f, moe=m) for (a, f, m), c in kinds.items()),
            tuple(head), tuple(proj))


@cache
def _gemm_plan_cached(model: str, quant: str, tp: int, ep, redundant: int, part: str):
    return _gemm_plan_build(model, quant, tp, ep, redundant, part)


def gemm_plan(model, quant, tp, ep, redundant, part="main"):
    if isinstance(model, str) and isinstance(quant, str):
        return _gemm_plan_cached(model, quant, tp, ep, redundant, part)
    return _gemm_plan_build(model, quant, tp, ep, redundant, part)


class _Tally:
    """Accumulates kernel times by what bounds them, FLOPs, bytes and a breakdown by component."""

    def __init__(self, shape):
        self.zero = np.zeros(shape)
        self.compute = self.zero.copy()
        self.memory = self.zero.copy()
        self.comm = self.zero.copy()
        self.flops = self.zero.copy()
        self.bytes = self.zero.copy()
        self.comm_bytes = self.zero.copy()
        self.parts: dict = {}

    def kernel(self, part, t, cbound, flops, nbytes, times=1.0):
        t = np.broadcast_to(t, self.zero.shape)
        self.compute = self.compute + times * np.where(cbound, t, 0.0)
        self.memory = self.memory + times * np.where(cbound, 0.0, t)
        self.flops = self.flops + times * flops
        self.bytes = self.bytes + times * nbytes
        self.parts[part] = self.parts.get(part, self.zero) + times * t

    def message(self, part, t, nbytes, times=1.0):
        self.comm = self.comm + times * t
        self.comm_bytes = self.comm_bytes + times * nbytes
        self.parts[part] = self.parts.get(part, self.zero) + times * t

    def slowed(self, part, t, times=1.0):
        """Compute-bound kernel time added by fewer SMs (no FLOPs or bytes of its own)."""
        self.compute = self.compute + times * t
        self.parts[part] = self.parts.get(part, self.zero) + times * t


def published_step(model, s: ModelShape, c: Card, *, quant, tp, dp, ep, cards, L, S, phase, lin_dtype, p_lin,
                    attn_dtype, kv_bytes, engine, overlap, overlap_model, mtp_steps, acceptance, eplb, redundant,
                    graph, act_bytes, allreduces, dispatch_dtype, combine_dtype, card_key=None):
    """The step of :func:`step` with ``costs="published"``: see its docstring. ``card_key`` is how the card
    was named (a preset or a hardware file), for the lookups that load it again."""
    sources: list = []
    kinds, head, _ = gemm_plan(model, quant, tp, ep, redundant)
    prefill = phase == "prefill"
    q_per_seq = L if prefill else float(1 + mtp_steps)
    in_bytes = 1.0 if lin_dtype in ("fp8", "int8") else 2.0
    att = attention_ceilings(str(card_key) if card_key is not None else c.name, attn_dtype, "sparse" if s.sparse else "dense",
                             topk=s.index_topk if s.sparse else None)
    sources.extend(att.sources)
    P_attn = c.flops(attn_dtype)
    W = c.hbm_bandwidth_bytes_per_s
    slots = (s.n_experts + redundant) / ep if ep else float(s.n_experts)
    rho, src = imbalance_factor(eplb, experts_per_rank=slots / ranks_per_card(c) if ep else slots,
                                ep=(ep or 1) * ranks_per_card(c), redundant_experts=redundant)
    if src:
        sources.append(src)
    gemm_src = set()
    groups = cards // ep if ep else dp
    mode = "normal" if prefill else "low_latency"
    ep_on = ep is not None and ep > 1
    layers = sum(k.count for k in kinds)
    kv_b = kv_bytes
    ep_src = {}

    def gemm(tally, part, g: _Gemm, rows, hit_tokens, times):
        op = ("grouped_contiguous" if prefill else "grouped_masked") if g.routed else "dense"
        gemm_src.add(op)
        if g.routed:
            hit = expected_experts_hit(hit_tokens, s.n_experts, s.top_k) / s.n_experts
            w = g.weight_bytes * hit
        else:
            w = g.weight_bytes
        f = 2.0 * rows * g.n * g.k
        b = gemm_bytes(rows, g.n, g.k, weight_bytes=w, in_bytes=in_bytes, out_bytes=act_bytes)
        t, cb = gemm_seconds(op, g.n, g.k, flops=f, bytes_moved=b, card=c, dtype=lin_dtype, peak_flops_per_s=p_lin)
        tally.kernel(part, t, cb, f, b, times)
        return t

    def attn_core(tally, seqs, queries, times, layers_share):
        if prefill:
            f = queries * attention_flops_per_card(model, L, phase="prefill", tp=tp)
            b = seqs * kv_read_bytes_per_sequence(model, L, phase="prefill", engine=engine, kv_bytes=kv_b)
        else:
            f = queries * attention_flops_per_card(model, L, phase="decode", tp=tp)
            b = seqs * kv_read_bytes_per_sequence(model, L, phase="decode", engine=engine, kv_bytes=kv_b)
        f, b = f * layers_share, b * layers_share
        t_f, t_b = f / (att.compute_share * P_attn), b / (att.memory_share * W)
        tally.kernel("attention core", np.maximum(t_f, t_b), t_f >= t_b, f, b, times)
        return np.maximum(t_f, t_b)

    def layer_segments(tally, kind: _LayerKind, x, S_x, times, share):
        """Attention and FFN segment times and dispatch/combine of one layer of ``kind`` for a fraction
        ``x`` of the step's tokens (one micro-batch: 0.5), booked ``times`` times; with the compute-bound
        part of each segment's kernel time."""
        T_r = x * S_x * q_per_seq / dp            # tokens of one TP rank
        T_all = x * S_x * q_per_seq               # tokens of the deployment
        c0 = tally.compute
        a = sum(gemm(tally, "attention GEMMs", g, T_r, None, times) for g in kind.attn)
        a = a + attn_core(tally, x * S_x / dp, T_r, times, share)
        c1 = tally.compute
        f = 0.0
        for g in kind.ffn:
            if g.routed:
                pairs = (T_all * s.top_k / cards * rho) if ep else T_r * s.top_k
                hit_tokens = T_all / groups if ep else T_r
                f = f + gemm(tally, "routed experts", g, pairs, hit_tokens, times)
            else:
                f = f + gemm(tally, "dense FFN and shared experts", g, T_r, None, times)
        c2 = tally.compute
        if tp > 1:
            ar = allreduce_seconds(c, payload_bytes=T_r * s.hidden * act_bytes, tp=tp)
            n_ar = max(allreduces, 1)
            tally.message("TP all-reduce", ar, allreduce_bytes(T_r * s.hidden * act_bytes, tp), times * n_ar)
            a = a + ar
            f = f + ar * (n_ar - 1)
        d = e = 0.0
        if kind.moe and ep_on:
            tok = T_all / cards
            d, bd, ep_src["dispatch"] = ep_message_seconds(c, mode=mode, operation="dispatch", ep=ep,
                                                           tokens_per_card=tok, n_experts=s.n_experts,
                                                           top_k=s.top_k, hidden=s.hidden, dtype=dispatch_dtype,
                                                           imbalance=rho)
            e, be, ep_src["combine"] = ep_message_seconds(c, mode=mode, operation="combine", ep=ep,
                                                          tokens_per_card=tok, n_experts=s.n_experts,
                                                          top_k=s.top_k, hidden=s.hidden, dtype=combine_dtype,
                                                          imbalance=rho)
            tally.message("MoE dispatch", d, bd, times)
            tally.message("MoE combine", e, be, times)
        return a, f, d, e, (c1 - c0) / times, (c2 - c1) / times

    shape = np.broadcast(L, S).shape
    tally = _Tally(shape)
    total = np.zeros(shape)
    k_sm, ov_src = overlap_compute_slowdown(c, mode, overlap_model) if overlap and ep_on else (1.0, None)
    for kind in kinds:
        share = 1.0 / layers
        if overlap:
            a, f, d, e, a_c, f_c = layer_segments(tally, kind, 0.5, S, 2 * kind.count, share)
            if kind.moe and ep_on:
                # computation on the SMs the communication leaves it: compute-bound time x k_sm
                a, f = a + (k_sm - 1) * a_c, f + (k_sm - 1) * f_c
                tally.slowed("SMs held by communication", (k_sm - 1) * (a_c + f_c), 2 * kind.count)
                per = (np.maximum(a, d) + np.maximum(f, d) + np.maximum(f, e) + np.maximum(a, e))
            else:
                per = 2 * (a + f)
        else:
            a, f, d, e, _, _ = layer_segments(tally, kind, 1.0, S, kind.count, share)
            per = a + f + d + e
        total = total + kind.count * per
    if ov_src is not None:
        sources.append(ov_src)
    # output head: logits of the last position of each prompt, of every verified token in decode
    rows_head = S / dp if prefill else S * q_per_seq / dp
    parts = 2 if overlap else 1
    total = total + sum(gemm(tally, "output head", g, rows_head / parts, None, parts) for g in head)
    # MTP draft passes
    acc = 0.0
    if mtp_steps:
        acc = accepted_tokens(mtp_steps, acceptance)
        mk, mhead, mproj = gemm_plan(model, quant, tp, ep, redundant, part="mtp")
        passes = 1 if prefill else mtp_steps
        rows = S * (L if prefill else 1.0) / dp
        t_mtp = tally.zero.copy()
        for g in mproj:
            t_mtp = t_mtp + gemm(tally, "MTP draft", g, rows, None, passes)
        q_draft = L if prefill else 1.0          # a prefill runs the prompt through the MTP module once
        for kind in mk:
            T_r = S * q_draft / dp
            a = sum(gemm(tally, "MTP draft", g, T_r, None, passes) for g in kind.attn)
            a = a + attn_core(tally, S / dp, T_r, passes, 1.0 / layers)
            f = 0.0
            for g in kind.ffn:
                if g.routed:
                    pairs = (S * q_draft * s.top_k / cards * rho) if ep else T_r * s.top_k
                    hit_tokens = S * q_draft / groups if ep else T_r
                    f = f + gemm(tally, "MTP draft", g, pairs, hit_tokens, passes)
                else:
                    f = f + gemm(tally, "MTP draft", g, T_r, None, passes)
            d = e = 0.0
            if ep_on:
                tok = S * q_draft / cards
                d, bd, _ = ep_message_seconds(c, mode=mode, operation="dispatch", ep=ep, tokens_per_card=tok,
                                              n_experts=s.n_experts, top_k=s.top_k, hidden=s.hidden,
                                              dtype=dispatch_dtype, imbalance=rho)
                e, be, _ = ep_message_seconds(c, mode=mode, operation="combine", ep=ep, tokens_per_card=tok,
                                              n_experts=s.n_experts, top_k=s.top_k, hidden=s.hidden,
                                              dtype=combine_dtype, imbalance=rho)
                tally.message("MTP draft", d + e, bd + be, passes)
            t_mtp = t_mtp + a + f + d + e
        for g in head:
            t_mtp = t_mtp + gemm(tally, "MTP draft", g, S / dp, None, passes)
        total = total + passes * t_mtp
        sources.append(CostSource("MTP acceptance", f"{mtp_steps} draft token(s)", "DeepSeek-V3 (report)",
                                  tuple(p.table_id for p in cost_tables().mtp_acceptance("DeepSeek-V3")),
                                  False, f"acceptance {acceptance:.3g} per draft token"
                                  + ("" if acceptance == mtp_acceptance_default() else " (the run's own, not the "
                                                                                      "report's)")
                                  + f", {acc:.3g} accepted per step"))
    oh, src = overhead_seconds(layers, graph=graph)
    total = total + oh
    tally.parts["overhead"] = tally.zero + oh
    sources.append(src)
    # sources of the GEMMs and the messages
    ref_card, ref_dtype = GEMM_REFERENCE
    for op in sorted(gemm_src):
        tabs = tuple(sorted({t for g in gemm_ceilings(op) for t in g.tables}))
        carried = c.name != ref_card or lin_dtype != ref_dtype
        sources.append(CostSource(f"GEMM ({op.replace('_', ' ')})", f"{c.name} {lin_dtype}",
                                  f"{ref_card} {ref_dtype}", tabs, carried,
                                  "two ceilings per published shape (highest FLOP/s and bandwidth reached), "
                                  "nearest shape by N and K" + (f"; carried to {c.name} {lin_dtype} as shares of "
                                                                f"its peak and HBM bandwidth" if carried else "")))
    for op in ("dispatch", "combine"):
        if op in ep_src:
            sources.append(ep_src[op])
    if tp > 1:
        _, table, _ = allreduce_fit()
        sources.append(CostSource("TP all-reduce", c.name, "h100", (table,), c.name != "h100",
                                  "alpha-beta fit of NCCL all-reduce on 8 H100 (outlier left out); bandwidth "
                                  "scaled by the card's link bandwidth and the ring size"))
    if s.v4:
        sources.append(CostSource("DeepSeek-V4 attention", c.name, "MLA decoding kernels", (), True,
                                  "no published kernel for V4's hybrid attention: the MLA ceilings are used"))
    if s.sparse:
        sources.append(CostSource("DeepSeek-V3.2 indexer", c.name, "MLA decoding kernels", (), True,
                                  "the indexer's FP8 scores take the sparse MLA kernel's share of peak: DeepGEMM's "
                                  "indexer-logit kernel publishes no figure in costs.toml"))
    tokens_out = S * (1.0 + acc) if not prefill else S * L
    parts = {k: v for k, v in tally.parts.items()}
    parts["overlap saved"] = np.maximum(0.0, sum(v for k, v in parts.items()) - total) if overlap else tally.zero
    return dict(time=total, compute=tally.compute, memory=tally.memory, comm=tally.comm, flops=tally.flops,
                bytes=tally.bytes, comm_bytes=tally.comm_bytes, tokens=tokens_out, parts=parts,
                sources=tuple(sources))
