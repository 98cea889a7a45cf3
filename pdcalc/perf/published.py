"""The published-cost step (:func:`pdcalc.perf.step.step` with ``costs="published"``): every GEMM, attention
kernel, all-reduce and dispatch/combine message of one step timed from published figures
(``pdcalc/data/costs.toml``).

Each layer is timed kernel by kernel: every (fused) GEMM of the inventory at the slower of its two published
ceilings (:func:`pdcalc.perf.kernels.gemm_seconds`; grouped contiguous in prefill, grouped masked in decode for
the routed experts, at ``rho`` times the balanced rows of the hottest rank), MLA attention at FlashMLA's (or
AMLA's) compute and memory shares (:func:`pdcalc.perf.kernels.attention_ceilings`; prefill attention at the
decoding kernel's compute share), TP all-reduces by the NCCL fit (:func:`pdcalc.perf.comm.allreduce_seconds`),
dispatch and combine as alpha-beta per message (:func:`pdcalc.perf.comm.ep_message_seconds`: normal kernels in
prefill, low-latency kernels in decode). Per layer, attention ``a``, FFN ``f``, dispatch ``d``, combine ``e``:

.. math::

   t_\\text{layer} = a + f + d + e \\quad (\\text{no overlap}), \\qquad
   t_\\text{layer} = \\max(a', d') + \\max(f', d') + \\max(f', e') + \\max(a', e') \\quad
   (\\text{two micro-batches})

with primes for one micro-batch of half the sequences (each reads the weights again): the schedule of
DeepSeek's overlap, where the dispatch of one micro-batch runs under the other's attention and FFN and its
combine under the other's FFN and next attention. Each communication is hidden up to the other micro-batch's
computation; the rest is exposed. In the MoE layers the computation runs on the SMs the communication leaves it
(DeepSeek's profile: 108 of the H800's 132 while DeepEP's normal kernels hold 24 in prefill, all 132 in decode,
where the low-latency kernels hold none), so the compute-bound kernel time of ``a'`` and ``f'`` is taken
``k = 132 / 108`` times in prefill (:func:`pdcalc.perf.schedule.overlap_compute_slowdown`;
``overlap_model="ideal"``: ``k = 1``). Communication is taken at its unit-test speed (DeepEP's normal-kernel
table was measured on the same 24 SMs). The step adds the output head, the MTP draft passes (``d`` passes of the
MTP module's projection, layer and head) and the host overhead. Where a card has no published figure, the one
of its maker's measured card (or the H800) is carried as a share of peak or scaled by link bandwidth;
``StepTime.cost_sources`` says which (the overlap's figure included), and ``StepTime.breakdown`` gives seconds
by component.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from pdcalc.layout.parallel import allreduce_bytes, place_experts
from pdcalc.model.inventory import get_inventory
from pdcalc.model.quant import get_scheme
from pdcalc.perf.comm import allreduce_fit, allreduce_seconds, ep_message_seconds, ranks_per_card
from pdcalc.perf.flops import attention_flops_per_card
from pdcalc.perf.inputs import StepInputs
from pdcalc.perf.kernels import (GEMM_REFERENCE, WEIGHT_ONLY_REFERENCE, CostSource, attention_ceilings, cost_tables,
                                 gemm_bytes, gemm_ceilings, gemm_seconds, weight_only_ceiling, weight_only_seconds)
from pdcalc.perf.routing import expected_experts_hit, imbalance_factor
from pdcalc.perf.schedule import overhead_seconds, overlap_compute_slowdown
from pdcalc.perf.shape import model_shape
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


class _Kernels:
    """The kernels and messages of one published-cost step, each timed into ``tally`` (see
    :func:`published_step`)."""

    def __init__(self, x: StepInputs, tally: _Tally):
        s, c = x.s, x.c
        self.x, self.s, self.c, self.tally = x, s, c, tally
        self.kinds, self.head, _ = gemm_plan(x.model, x.quant, x.tp, x.ep, x.redundant)
        self.q_per_seq = x.L if x.prefill else float(1 + x.mtp_steps)
        # (activation bytes, dtype, peak) of a GEMM: the routed experts' (True) and the other layers' (False)
        self.gemm_dtype = {routed: (1.0 if dtype in ("fp8", "int8") else 2.0, dtype, peak) for routed, dtype, peak
                           in ((False, x.lin_dtype, x.p_lin), (True, x.expert_dtype, x.p_expert))}
        self.att = attention_ceilings(str(x.card_key) if x.card_key is not None else c.name, x.attn_dtype,
                                      "sparse" if s.sparse else "dense", topk=s.index_topk if s.sparse else None)
        self.P_attn = c.flops(x.attn_dtype)
        self.W = c.hbm_bandwidth_bytes_per_s
        slots = (s.n_experts + x.redundant) / x.ep if x.ep else float(s.n_experts)
        self.rho, self.rho_source = imbalance_factor(x.eplb, experts_per_rank=slots / ranks_per_card(c) if x.ep
                                                     else slots, ep=(x.ep or 1) * ranks_per_card(c),
                                                     redundant_experts=x.redundant)
        self.gemm_ops: set = set()
        self.mode = "normal" if x.prefill else "low_latency"
        self.layers = sum(k.count for k in self.kinds)
        self.ep_sources: dict = {}

    def gemm(self, part, g: _Gemm, rows, hit_tokens, times):
        """One (grouped) GEMM of ``rows`` rows, booked ``times`` times; its time."""
        x, s = self.x, self.s
        op = ("grouped_contiguous" if x.prefill else "grouped_masked") if g.routed else "dense"
        self.gemm_ops.add(op)
        if g.routed:
            hit = expected_experts_hit(hit_tokens, s.n_experts, s.top_k) / s.n_experts
            w = g.weight_bytes * hit
        else:
            w = g.weight_bytes
        f = 2.0 * rows * g.n * g.k
        in_bytes, dtype, peak = self.gemm_dtype[g.routed]
        b = gemm_bytes(rows, g.n, g.k, weight_bytes=w, in_bytes=in_bytes, out_bytes=x.act_bytes)
        if g.routed and x.expert_dtype != x.lin_dtype:     # FP4 experts multiplied weight-only
            t, cb = weight_only_seconds(flops=f, bytes_moved=b, card=self.c, peak_flops_per_s=peak)
        else:
            t, cb = gemm_seconds(op, g.n, g.k, flops=f, bytes_moved=b, card=self.c, dtype=dtype,
                                 peak_flops_per_s=peak)
        self.tally.kernel(part, t, cb, f, b, times)
        return t

    def attn_core(self, seqs, queries, times, layers_share):
        """The attention kernel of ``queries`` queries over ``seqs`` sequences' caches, for a share of the
        layers; its time."""
        x = self.x
        f = queries * attention_flops_per_card(x.model, x.L, phase=x.phase, tp=x.tp)
        b = seqs * kv_read_bytes_per_sequence(x.model, x.L, phase=x.phase, engine=x.engine, kv_bytes=x.kv_bytes)
        f, b = f * layers_share, b * layers_share
        t_f, t_b = f / (self.att.compute_share * self.P_attn), b / (self.att.memory_share * self.W)
        self.tally.kernel("attention core", np.maximum(t_f, t_b), t_f >= t_b, f, b, times)
        return np.maximum(t_f, t_b)

    def messages(self, tokens_per_card):
        """Dispatch and combine of ``tokens_per_card`` tokens: ``(d, bytes_d, e, bytes_e)``."""
        x, s = self.x, self.s
        kw = dict(mode=self.mode, ep=x.ep, tokens_per_card=tokens_per_card, n_experts=s.n_experts, top_k=s.top_k,
                  hidden=s.hidden, imbalance=self.rho)
        d, bd, self.ep_sources["dispatch"] = ep_message_seconds(self.c, operation="dispatch", dtype=x.dispatch_dtype,
                                                                **kw)
        e, be, self.ep_sources["combine"] = ep_message_seconds(self.c, operation="combine", dtype=x.combine_dtype,
                                                               **kw)
        return d, bd, e, be

    def ffn(self, part, kind: _LayerKind, T_r, T_all, times):
        """The FFN GEMMs of one layer for ``T_r`` tokens per TP rank (``T_all`` over the deployment)."""
        x, s = self.x, self.s
        f = 0.0
        for g in kind.ffn:
            if g.routed:
                pairs = (T_all * s.top_k / x.cards * self.rho) if x.ep else T_r * s.top_k
                hit_tokens = T_all / x.groups if x.ep else T_r
                f = f + self.gemm(part or "routed experts", g, pairs, hit_tokens, times)
            else:
                f = f + self.gemm(part or "dense FFN and shared experts", g, T_r, None, times)
        return f

    def layer_segments(self, kind: _LayerKind, share_x, S_x, times, share):
        """Attention and FFN segment times and dispatch/combine of one layer of ``kind`` for a fraction
        ``share_x`` of the step's tokens (one micro-batch: 0.5), booked ``times`` times; with the compute-bound
        part of each segment's kernel time."""
        x, s, tally = self.x, self.s, self.tally
        T_r = share_x * S_x * self.q_per_seq / x.dp          # tokens of one TP rank
        T_all = share_x * S_x * self.q_per_seq               # tokens of the deployment
        c0 = tally.compute
        a = sum(self.gemm("attention GEMMs", g, T_r, None, times) for g in kind.attn)
        a = a + self.attn_core(share_x * S_x / x.dp, T_r, times, share)
        c1 = tally.compute
        f = self.ffn(None, kind, T_r, T_all, times)
        c2 = tally.compute
        if x.tp > 1:
            ar = allreduce_seconds(self.c, payload_bytes=T_r * s.hidden * x.act_bytes, tp=x.tp)
            n_ar = max(x.allreduces, 1)
            tally.message("TP all-reduce", ar, allreduce_bytes(T_r * s.hidden * x.act_bytes, x.tp), times * n_ar)
            a = a + ar
            f = f + ar * (n_ar - 1)
        d = e = 0.0
        if kind.moe and x.ep_on:
            d, bd, e, be = self.messages(T_all / x.cards)
            tally.message("MoE dispatch", d, bd, times)
            tally.message("MoE combine", e, be, times)
        return a, f, d, e, (c1 - c0) / times, (c2 - c1) / times


def _main_layers(k: _Kernels):
    """Every main layer, serial or as two overlapped micro-batches; and the overlap's cost source."""
    x, tally = k.x, k.tally
    total = np.zeros(tally.zero.shape)
    k_sm, ov_src = (overlap_compute_slowdown(k.c, k.mode, x.overlap_model) if x.overlap and x.ep_on
                    else (1.0, None))
    for kind in k.kinds:
        share = 1.0 / k.layers
        if x.overlap:
            a, f, d, e, a_c, f_c = k.layer_segments(kind, 0.5, x.S, 2 * kind.count, share)
            if kind.moe and x.ep_on:
                # computation on the SMs the communication leaves it: compute-bound time x k_sm
                a, f = a + (k_sm - 1) * a_c, f + (k_sm - 1) * f_c
                tally.slowed("SMs held by communication", (k_sm - 1) * (a_c + f_c), 2 * kind.count)
                per = (np.maximum(a, d) + np.maximum(f, d) + np.maximum(f, e) + np.maximum(a, e))
            else:
                per = 2 * (a + f)
        else:
            a, f, d, e, _, _ = k.layer_segments(kind, 1.0, x.S, kind.count, share)
            per = a + f + d + e
        total = total + kind.count * per
    return total, ov_src


def _output_head(k: _Kernels):
    """Logits of the last position of each prompt, of every verified token in decode."""
    x = k.x
    rows_head = x.S / x.dp if x.prefill else x.S * k.q_per_seq / x.dp
    parts = 2 if x.overlap else 1
    return sum(k.gemm("output head", g, rows_head / parts, None, parts) for g in k.head)


def _mtp_drafts(k: _Kernels):
    """The MTP module's draft passes: ``(time, accepted draft tokens per step)``."""
    x, tally = k.x, k.tally
    acc = accepted_tokens(x.mtp_steps, x.acceptance)
    mk, _, mproj = gemm_plan(x.model, x.quant, x.tp, x.ep, x.redundant, part="mtp")
    passes = 1 if x.prefill else x.mtp_steps
    S = x.S
    rows = S * (x.L if x.prefill else 1.0) / x.dp
    t_mtp = tally.zero.copy()
    for g in mproj:
        t_mtp = t_mtp + k.gemm("MTP draft", g, rows, None, passes)
    q_draft = x.L if x.prefill else 1.0          # a prefill runs the prompt through the MTP module once
    for kind in mk:
        T_r = S * q_draft / x.dp
        a = sum(k.gemm("MTP draft", g, T_r, None, passes) for g in kind.attn)
        a = a + k.attn_core(S / x.dp, T_r, passes, 1.0 / k.layers)
        f = k.ffn("MTP draft", kind, T_r, S * q_draft, passes)
        d = e = 0.0
        if x.ep_on:
            d, bd, e, be = k.messages(S * q_draft / x.cards)
            tally.message("MTP draft", d + e, bd + be, passes)
        t_mtp = t_mtp + a + f + d + e
    for g in k.head:
        t_mtp = t_mtp + k.gemm("MTP draft", g, S / x.dp, None, passes)
    return passes * t_mtp, acc


def _sources(k: _Kernels, ov_src) -> list:
    """The :class:`CostSource` of every published figure the step used."""
    x = k.x
    out = list(k.att.sources)
    if k.rho_source:
        out.append(k.rho_source)
    if ov_src is not None:
        out.append(ov_src)
    if x.mtp_steps:
        acc = accepted_tokens(x.mtp_steps, x.acceptance)
        out.append(CostSource("MTP acceptance", f"{x.mtp_steps} draft token(s)", "DeepSeek-V3 (report)",
                              tuple(p.table_id for p in cost_tables().mtp_acceptance("DeepSeek-V3")),
                              False, f"acceptance {x.acceptance:.3g} per draft token"
                              + ("" if x.acceptance == mtp_acceptance_default() else " (the run's own, not the "
                                                                                    "report's)")
                              + f", {acc:.3g} accepted per step"))
    return out


def _table_sources(k: _Kernels) -> list:
    """Sources of the GEMM, message and all-reduce tables, and of what V4 and V3.2 borrow."""
    x, s, c = k.x, k.s, k.c
    out = []
    ref_card, ref_dtype = GEMM_REFERENCE
    for op in sorted(k.gemm_ops):
        tabs = tuple(sorted({t for g in gemm_ceilings(op) for t in g.tables}))
        carried = c.name != ref_card or x.lin_dtype != ref_dtype
        out.append(CostSource(f"GEMM ({op.replace('_', ' ')})", f"{c.name} {x.lin_dtype}",
                              f"{ref_card} {ref_dtype}", tabs, carried,
                              "two ceilings per published shape (highest FLOP/s and bandwidth reached), "
                              "nearest shape by N and K" + (f"; carried to {c.name} {x.lin_dtype} as shares of "
                                                            f"its peak and HBM bandwidth" if carried else "")))
    if x.expert_dtype != x.lin_dtype and any(op.startswith("grouped") for op in k.gemm_ops):
        wo = weight_only_ceiling()
        out.append(CostSource("GEMM (routed experts)", f"{c.name} {x.expert_dtype}",
                              f"{WEIGHT_ONLY_REFERENCE} weight-only 4-bit", wo.tables, c.name != WEIGHT_ONLY_REFERENCE,
                              "FP4 experts on a card without FP4 tensor cores, multiplied weight-only (FP4 weights, "
                              "BF16 activations: Marlin's and FlashInfer's SM90 MoE): published weight-only 4-bit "
                              f"GEMMs reach {wo.compute_share:.1%} of the 16-bit peak and {wo.memory_share:.1%} of "
                              f"the HBM bandwidth, carried to {c.name} as shares"))
    for op in ("dispatch", "combine"):
        if op in k.ep_sources:
            out.append(k.ep_sources[op])
    if x.tp > 1:
        _, table, _ = allreduce_fit()
        out.append(CostSource("TP all-reduce", c.name, "h100", (table,), c.name != "h100",
                              "alpha-beta fit of NCCL all-reduce on 8 H100 (outlier left out); bandwidth "
                              "scaled by the card's link bandwidth and the ring size"))
    if s.v4:
        out.append(CostSource("DeepSeek-V4 attention", c.name, "MLA decoding kernels", (), True,
                              "no published kernel for V4's hybrid attention: the MLA ceilings are used"))
    if s.sparse:
        out.append(CostSource("DeepSeek-V3.2 indexer", c.name, "MLA decoding kernels", (), True,
                              "the indexer's FP8 scores take the sparse MLA kernel's share of peak: DeepGEMM's "
                              "indexer-logit kernel publishes no figure in costs.toml"))
    return out


def published_step(x: StepInputs) -> dict:
    """The terms of one step with every kernel and message timed from published figures (the
    ``costs="published"`` step of :func:`pdcalc.perf.step.step`): arrays ``time``, ``compute``, ``memory``,
    ``comm`` (seconds), ``flops``, ``bytes``, ``comm_bytes``, ``tokens``, the seconds by component (``parts``)
    and the :class:`CostSource` of every figure (``sources``). See the module docstring for the model."""
    tally = _Tally(np.broadcast(x.L, x.S).shape)
    k = _Kernels(x, tally)
    total, ov_src = _main_layers(k)
    total = total + _output_head(k)
    acc = 0.0
    if x.mtp_steps:
        t_mtp, acc = _mtp_drafts(k)
        total = total + t_mtp
    sources = _sources(k, ov_src)
    oh, src = overhead_seconds(k.layers, graph=x.graph)
    total = total + oh
    tally.parts["overhead"] = tally.zero + oh
    sources.append(src)
    sources.extend(_table_sources(k))
    tokens_out = x.S * (1.0 + acc) if not x.prefill else x.S * x.L
    parts = {k_: v for k_, v in tally.parts.items()}
    parts["overlap saved"] = (np.maximum(0.0, sum(v for k_, v in parts.items()) - total) if x.overlap
                              else tally.zero)
    return dict(time=total, compute=tally.compute, memory=tally.memory, comm=tally.comm, flops=tally.flops,
                bytes=tally.bytes, comm_bytes=tally.comm_bytes, tokens=tokens_out, parts=parts,
                sources=tuple(sources))
