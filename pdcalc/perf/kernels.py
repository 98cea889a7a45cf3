"""Published compute-kernel ceilings: DeepGEMM's GEMM tables and the MLA decoding kernels
(FlashMLA on the H800, AMLA on the 910C) as shares of a card's peak and HBM bandwidth, and where each
figure comes from (:class:`CostSource`), carried to cards without figures of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from pdcalc.hardware.cards import Card, get_card

#: The card and dtype of the only published GEMM tables (DeepGEMM's README, :mod:`pdcalc.perf.costs`).
GEMM_REFERENCE = ("h800", "fp8")
#: Where a card has no published figure of a kind, the card its efficiency is carried from: the
#: measured card of the same maker (``hardware.toml`` ``family``).
NEAREST_CARD = {"nvidia": "h800", "ascend": "ascend-910c"}


@dataclass(frozen=True)
class CostSource:
    """Where one component of a published-cost step takes its cost from.

    ``carried`` is True where the figure was measured on another card or in another dtype than the one
    it is applied to; ``note`` says how it was carried (as a share of the other card's peak, scaled by
    link bandwidth, ...)."""

    component: str          # "GEMM (dense)", "MLA attention", "MoE dispatch/combine", ...
    applied_to: str         # card (and dtype) of the step
    measured_on: str        # card (and dtype) of the published figure
    tables: tuple           # pdcalc/data/costs.toml table ids
    carried: bool
    note: str


def cost_tables():
    from pdcalc.perf import costs
    return costs


def nearest_card(card: Card, have) -> str:
    """``card`` itself if it is a preset with a figure (``have``: card names), else its maker's measured card,
    else H800. A user's card file is never matched by its name: its figures are always carried."""
    if card.preset and card.name in have:
        return card.name
    near = NEAREST_CARD.get(card.family)
    return near if near in have else GEMM_REFERENCE[0]


# --------------------------------------------------------------------- GEMM
@dataclass(frozen=True)
class GemmCeiling:
    """The two ceilings of one published GEMM shape (DeepGEMM's README tables, H800, FP8).

    ``flop_per_s`` is the highest FLOP/s any row of the shape reached (its compute ceiling),
    ``bytes_per_s`` the highest memory bandwidth any row of the shape reached, in this operation's table
    or in the dense table (its memory ceiling: small-``M`` rows stream the weights). As shares of the
    measured card's peak they carry to other cards and dtypes."""

    operation: str
    n: int
    k: int
    flop_per_s: float
    bytes_per_s: float
    compute_share: float          # flop_per_s / peak FLOP/s of the measured card and dtype
    memory_share: float           # bytes_per_s / HBM bandwidth of the measured card
    tables: tuple


@cache
def gemm_ceilings(operation: str) -> tuple[GemmCeiling, ...]:
    """The published GEMM shapes of one ``operation`` ("dense", "grouped_contiguous", "grouped_masked")
    with their compute and memory ceilings (:class:`GemmCeiling`)."""
    costs = cost_tables()
    card, dtype = GEMM_REFERENCE
    own = costs.gemm(card, dtype, operation=operation)
    dense = costs.gemm(card, dtype, operation="dense")
    ref = get_card(card)
    out = []
    for n, k in sorted({(p.n, p.k) for p in own}):
        rows = [p for p in own if (p.n, p.k) == (n, k)]
        mem_rows = rows + [p for p in dense if (p.n, p.k) == (n, k)]
        f = max(p.achieved_flop_per_s for p in rows)
        b = max(p.memory_bytes_per_s for p in mem_rows)
        out.append(GemmCeiling(operation=operation, n=n, k=k, flop_per_s=f, bytes_per_s=b,
                               compute_share=f / ref.flops(dtype), memory_share=b / ref.hbm_bandwidth_bytes_per_s,
                               tables=tuple(sorted({p.table_id for p in mem_rows}))))
    return tuple(out)


def nearest_gemm(operation: str, n: int, k: int) -> GemmCeiling:
    """The published shape of ``operation`` nearest to ``n x k`` (sum of the log ratios of both sides)."""
    return min(gemm_ceilings(operation), key=lambda g: (abs(np.log(g.n / n)) + abs(np.log(g.k / k)), g.n, g.k))


#: The card whose published weight-only 4-bit GEMMs (``operation = "weight_only_4bit"`` in
#: :mod:`pdcalc.perf.costs`) set the ceilings of FP4 experts on cards without FP4 tensor cores.
WEIGHT_ONLY_REFERENCE = "h100"
#: Bytes per weight of those GEMMs: 4-bit values (their channelwise scales are not counted).
WEIGHT_ONLY_BYTES = 0.5


@cache
def weight_only_ceiling() -> GemmCeiling:
    """The two ceilings of a weight-only 4-bit GEMM (the weights dequantized in registers and multiplied with
    16-bit activations: Marlin, FlashInfer's SM90 mixed-input MoE) as shares of its card's 16-bit peak and HBM
    bandwidth: the highest share any published point reached. A point that prints only FLOP/s at a shape is
    converted to bandwidth by the bytes it moves (:func:`gemm_bytes` with 4-bit weights and 16-bit input and
    output)."""
    pts = cost_tables().gemm(WEIGHT_ONLY_REFERENCE, operation="weight_only_4bit")
    ref = get_card(WEIGHT_ONLY_REFERENCE)
    compute = max(p.efficiency for p in pts if p.efficiency is not None)
    memory = []
    for p in pts:
        if None in (p.m, p.n, p.k, p.achieved_flop_per_s):
            continue
        seconds = 2.0 * p.m * p.n * p.k / p.achieved_flop_per_s
        moved = gemm_bytes(p.m, p.n, p.k, weight_bytes=p.n * p.k * WEIGHT_ONLY_BYTES, in_bytes=2.0, out_bytes=2.0)
        memory.append(moved / seconds / ref.hbm_bandwidth_bytes_per_s)
    share = max(memory)
    return GemmCeiling(operation="weight_only_4bit", n=0, k=0, flop_per_s=compute * ref.flops("bf16"),
                       bytes_per_s=share * ref.hbm_bandwidth_bytes_per_s, compute_share=compute,
                       memory_share=share, tables=tuple(sorted({p.table_id for p in pts})))


def weight_only_seconds(*, flops, bytes_moved, card, peak_flops_per_s: float):
    """Time of a weight-only 4-bit (grouped) GEMM on ``card``: the slower of :func:`weight_only_ceiling`'s two
    ceilings at the card's 16-bit peak ``peak_flops_per_s`` and its HBM bandwidth. Returns
    ``(seconds, compute_bound)``."""
    g = weight_only_ceiling()
    t_f = flops / (g.compute_share * peak_flops_per_s)
    t_b = bytes_moved / (g.memory_share * get_card(card).hbm_bandwidth_bytes_per_s)
    return np.maximum(t_f, t_b), t_f >= t_b


def gemm_bytes(m, n: int, k: int, *, weight_bytes: float, in_bytes: float = 1.0, out_bytes: float = 2.0):
    """Bytes a GEMM moves as DeepGEMM counts them: the weights, the ``m x k`` input and the ``m x n`` output.

    .. math:: B = W + m\\,k\\,s_\\text{in} + m\\,n\\,s_\\text{out}
    """
    return weight_bytes + m * (k * in_bytes + n * out_bytes)


def gemm_seconds(operation: str, n: int, k: int, *, flops, bytes_moved, card, dtype: str,
                 peak_flops_per_s: float | None = None):
    """Time of one GEMM (or grouped GEMM) of shape ``n x k`` on ``card``: the slower of its two ceilings.

    .. math:: t = \\max\\Bigl(\\frac{F}{s_F P}, \\frac{B}{s_B W}\\Bigr)

    with ``s_F`` and ``s_B`` the compute and memory shares of the nearest published shape
    (:func:`nearest_gemm`), ``P`` the card's peak in ``dtype`` and ``W`` its HBM bandwidth. Returns
    ``(seconds, compute_bound)``.
    """
    c = get_card(card)
    g = nearest_gemm(operation, n, k)
    p = peak_flops_per_s if peak_flops_per_s is not None else c.flops(dtype)
    t_f = flops / (g.compute_share * p)
    t_b = bytes_moved / (g.memory_share * c.hbm_bandwidth_bytes_per_s)
    return np.maximum(t_f, t_b), t_f >= t_b


def gemm_check() -> pd.DataFrame:
    """Every published GEMM row against :func:`gemm_seconds` on the H800 in FP8: the rows that set a
    ceiling are reproduced by construction, the others (intermediate ``M``) are a check of the
    two-ceiling model. Columns ``table, operation, m, n, k, groups, published_s, model_s, ratio, sets_ceiling``."""
    costs = cost_tables()
    card, dtype = GEMM_REFERENCE
    rows = []
    for op in ("dense", "grouped_contiguous", "grouped_masked"):
        g_by = {(g.n, g.k): g for g in gemm_ceilings(op)}
        for p in costs.gemm(card, dtype, operation=op):
            groups = p.groups or 1
            m = p.m if p.m is not None else p.m_per_group * groups
            f = 2.0 * m * p.n * p.k
            b = gemm_bytes(m, p.n, p.k, weight_bytes=groups * p.n * p.k)
            t, _ = gemm_seconds(op, p.n, p.k, flops=f, bytes_moved=b, card=card, dtype=dtype)
            pub = f / p.achieved_flop_per_s
            g = g_by[(p.n, p.k)]
            rows.append({"table": p.table_id, "operation": op, "m": m, "n": p.n, "k": p.k, "groups": groups,
                         "published_s": pub, "model_s": float(t), "ratio": float(t) / pub,
                         "sets_ceiling": bool(p.achieved_flop_per_s == g.flop_per_s
                                              or p.memory_bytes_per_s == g.bytes_per_s)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------- MLA attention
@dataclass(frozen=True)
class AttentionCeilings:
    """Compute and memory shares an MLA attention kernel reaches on one card, and where they come from."""

    compute_share: float      # of the card's peak in the attention dtype
    memory_share: float       # of the card's HBM bandwidth
    sources: tuple


@cache
def attention_ceilings(card: str, attn_dtype: str = "bf16", attention: str = "dense",
                       topk: int | None = None) -> AttentionCeilings:
    """Shares of peak an MLA decoding kernel reaches (FlashMLA on the H800, AMLA on the 910C).

    Compute: the highest published FLOP/s of the card's kernels of that ``attention`` ("dense", or "sparse":
    FlashMLA's token-level sparse kernel of DeepSeek-V3.2, at ``topk`` selected tokens where a point states
    it) over its peak in ``attn_dtype`` (the preset's); memory: the highest published bandwidth of a dense
    kernel over its HBM bandwidth (no sparse kernel publishes one). A card without a figure takes the share
    of its maker's measured card (:data:`NEAREST_CARD`), the memory share of the H800 where its maker
    published none. Prefill attention has no published figure: the decoding kernel's compute share is used
    for it (see :func:`step`).
    """
    costs = cost_tables()
    c = get_card(card)
    pts = [p for p in costs.points("mla") if p.attention == "dense" and p.phase == "decode"]
    comp = [p for p in costs.points("mla") if p.attention == attention and p.phase == "decode"
            and p.achieved_flop_per_s is not None]
    if attention == "sparse" and topk is not None and any(p.topk == topk for p in comp):
        comp = [p for p in comp if p.topk == topk]
    mem = [p for p in pts if p.memory_bytes_per_s is not None and p.bound == "memory"]
    src_c = nearest_card(c, {p.card for p in comp})
    src_m = nearest_card(c, {p.card for p in mem})
    sc, sm = get_card(src_c), get_card(src_m)
    best_c = max((p for p in comp if p.card == src_c), key=lambda p: p.achieved_flop_per_s)
    best_m = max((p for p in mem if p.card == src_m), key=lambda p: p.memory_bytes_per_s)
    cs = best_c.achieved_flop_per_s / sc.flops(attn_dtype if attn_dtype in sc.flops_per_s else "bf16")
    ms = best_m.memory_bytes_per_s / sm.hbm_bandwidth_bytes_per_s
    sources = (
        CostSource("MLA attention, compute", f"{c.name} {attn_dtype}", f"{src_c} bf16", (best_c.table_id,),
                   src_c != c.name or attn_dtype != "bf16",
                   f"{best_c.achieved_flop_per_s / 1e12:g} TFLOPS of a {attention} decoding kernel = {cs:.1%} of "
                   f"{src_c}'s BF16 peak" + ("" if src_c == c.name else f", carried to {c.name} as a share of its "
                                                                        f"{attn_dtype} peak")),
        CostSource("MLA attention, memory", c.name, src_m, (best_m.table_id,), src_m != c.name,
                   f"{best_m.memory_bytes_per_s / 1e9:g} GB/s = {ms:.1%} of {src_m}'s HBM bandwidth"
                   + ("" if src_m == c.name else f", carried to {c.name} as a share of its HBM bandwidth")),
    )
    return AttentionCeilings(compute_share=cs, memory_share=ms, sources=sources)
