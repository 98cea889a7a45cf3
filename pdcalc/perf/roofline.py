"""The roofline step: the step's FLOPs, HBM bytes and bytes sent per card at flat assumed efficiencies
(:func:`pdcalc.perf.step.step` with ``costs="roofline"``, the default).

Per card, with ``T = concurrency x tokens per sequence`` tokens over ``n = tp x dp`` cards, ``T_r = T / dp``
per rank, ``T_g`` tokens per EP group and ``t = tp``:

.. math::

   F_\\text{card} = 2 T_r \\Bigl(N_\\text{repl} + \\frac{N_\\text{tp}}{t}\\Bigr) + \\frac{2 S_r N_\\text{head}}{t}
   + \\frac{2 T k N_\\text{routed}}{E n} + \\frac{T_r F_\\text{attn}(L)}{t}

   B_\\text{card} = B_\\text{w}(T_g) + \\frac{S}{dp} L \\, b_\\text{KV} \\;(\\text{decode}), \\qquad
   B_\\text{card} = B_\\text{w}(T_g) + T_r \\, b_\\text{KV} \\;(\\text{prefill: cache writes})

with ``S`` sequences (``S_r`` per rank; logits for ``S_r`` rows), the MLA cache whole on every TP card (the
latent is shared by all heads), :func:`pdcalc.perf.traffic.weight_bytes_per_card` for ``B_w``,
:func:`pdcalc.perf.comm.tp_allreduce_per_layer` over ``n_layers`` and
:func:`pdcalc.perf.comm.ep_alltoall_per_layer` over the MoE layers; the times are

.. math::

   t_\\text{compute} = \\frac{F_\\text{lin}}{\\eta_F P_\\text{lin}} + \\frac{F_\\text{attn}}{\\eta_F P_\\text{attn}},
   \\qquad t_\\text{memory} = \\frac{B_\\text{card}}{\\eta_B W_\\text{HBM}}, \\qquad
   t = \\max(t_\\text{compute}, t_\\text{memory}) + t_\\text{comm} \\;(\\text{or} \\max \\text{ of the three
   with overlap}).

DeepSeek-V4 uses the same linear terms (its inventory's ``shard``: ``wq_a``, ``wkv``, compressors, router and
mHC replicated; ``wq_b``, ``wo_a``, ``wo_b``, indexer projections, shared expert and head TP-split) and
:func:`pdcalc.perf.flops.attention_flops_per_token` for ``F_attn`` (heads and indexer heads split over TP). Its
single KV head (MQA) keeps the cache whole on every TP card; KV bytes come from ``engine``'s layout:

.. math::

   B_\\text{card} = B_\\text{w}(T_g) + S_r \\, B_\\text{read}(L) \\;(\\text{decode}), \\qquad
   B_\\text{card} = B_\\text{w}(T_g) + S_r \\, B_\\text{write}(L) \\;(\\text{prefill})

(:func:`pdcalc.perf.traffic.kv_read_bytes_per_sequence`), and under TP each ratio-4 layer adds
:func:`pdcalc.perf.comm.indexer_allreduce_per_layer`. With ``mtp_steps`` the roofline verifies ``1 + d`` tokens
per sequence (the MTP module's own passes are left out) and ``rho`` (:func:`pdcalc.perf.routing.imbalance_factor`)
scales the routed FLOPs and the all-to-all.
"""

from __future__ import annotations

import numpy as np

from pdcalc.perf.comm import ep_alltoall_per_layer, indexer_allreduce_per_layer, tp_allreduce_per_layer
from pdcalc.perf.flops import attention_flops_per_card
from pdcalc.perf.inputs import StepInputs
from pdcalc.perf.routing import imbalance_factor
from pdcalc.perf.speculative import accepted_tokens
from pdcalc.perf.traffic import kv_read_bytes_per_sequence, weight_bytes_per_card


def _compute_s(x: StepInputs, T, T_r, S_r, rho):
    s = x.s
    attn_card = attention_flops_per_card(x.model, x.L, phase=x.phase, tp=x.tp)
    f_lin = (2 * T_r * (s.replicated + s.tp_split / x.tp)          # non-routed tensors of the rank
             + 2 * (S_r if x.prefill else T_r) * s.head / x.tp      # logits: a row per sequence (prefill)
             + 2 * T * s.top_k * s.routed * rho / (s.n_experts * x.cards))  # routed experts, spread over all cards
    f_attn = T_r * attn_card
    return f_lin / (x.p_lin * x.mfu) + f_attn / (x.c.flops(x.attn_dtype) * x.mfu), f_lin + f_attn


def _memory_s(x: StepInputs, T_g, S_r):
    w_read = weight_bytes_per_card(x.model, x.quant, tp=x.tp, ep=x.ep, routed_tokens=T_g)
    kv_read = S_r * kv_read_bytes_per_sequence(x.model, x.L, phase=x.phase, engine=x.engine, kv_bytes=x.kv_bytes)
    bytes_card = w_read + kv_read
    return bytes_card / (x.c.hbm_bandwidth_bytes_per_s * x.mbu), bytes_card


def _comm_s(x: StepInputs, T, T_r, S_r, rho):
    s, c = x.s, x.c
    comm_b = np.zeros_like(T)
    comm_s = np.zeros_like(T)
    if x.tp > 1:
        b, t = tp_allreduce_per_layer(x.model, c, tokens=T_r, tp=x.tp, act_bytes=x.act_bytes, comm_eff=x.comm_eff,
                                      allreduces=x.allreduces)
        comm_b, comm_s = comm_b + s.layers * b, comm_s + s.layers * t
        if s.v4 and s.c4_layers:
            b, t = indexer_allreduce_per_layer(x.model, c, context=x.L, sequences=S_r, tp=x.tp, phase=x.phase,
                                               act_bytes=x.act_bytes, comm_eff=x.comm_eff)
            comm_b, comm_s = comm_b + s.c4_layers * b, comm_s + s.c4_layers * t
    if x.ep_on:
        b, t = ep_alltoall_per_layer(x.model, c, tokens_per_card=T / x.cards, ep=x.ep, dispatch_bytes=x.dispatch_bytes,
                                     combine_bytes=x.combine_bytes, comm_eff=x.comm_eff)
        comm_b, comm_s = comm_b + s.moe_layers * b * rho, comm_s + s.moe_layers * t * rho
    return comm_s, comm_b


def roofline_step(x: StepInputs) -> dict:
    """The roofline terms of one step (see the module docstring): arrays ``time``, ``compute``, ``memory``,
    ``comm`` (seconds), ``flops``, ``bytes``, ``comm_bytes`` (per card) and ``tokens`` (of the deployment)."""
    s = x.s
    rho, _ = imbalance_factor(x.eplb, experts_per_rank=(s.n_experts + x.redundant) / x.ep if x.ep else s.n_experts,
                              ep=x.ep or 1, redundant_experts=x.redundant)
    per_seq = x.L if x.prefill else 1.0 + x.mtp_steps
    T = x.S * per_seq                  # tokens of the deployment
    T_r = T / x.dp                     # tokens of one TP rank
    S_r = x.S / x.dp
    T_g = T / x.groups                 # tokens routed inside one EP group (or rank)
    compute_s, flops = _compute_s(x, T, T_r, S_r, rho)
    memory_s, bytes_card = _memory_s(x, T_g, S_r)
    comm_s, comm_b = _comm_s(x, T, T_r, S_r, rho)
    busy = np.maximum(compute_s, memory_s)
    time_s = np.maximum(busy, comm_s) if x.overlap else busy + comm_s
    tokens = T if x.prefill else x.S * (1.0 + (accepted_tokens(x.mtp_steps, x.acceptance) if x.mtp_steps else 0.0))
    return dict(time=time_s, compute=compute_s, memory=memory_s, comm=comm_s, flops=flops, bytes=bytes_card,
                comm_bytes=comm_b, tokens=tokens)
