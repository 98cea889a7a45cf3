"""V3 article §2.3.1-2.3.3: the memory plan, the expert storage tiers and the memory per card.
"""

from __future__ import annotations

import math

from pdcalc.audit.registry import recomputes
from pdcalc.audit.v3_common import PCT, V3, P, printed_params, v3_config
from pdcalc.audit.v3_tp import dense_gib, full_weight_gib
from pdcalc.core.units import MB, GiB, MiB
from pdcalc.model.inventory import get_inventory
from pdcalc.model.kv_cache import mla_bytes_per_token


# ================================================================== §2.3.1-2.3.3 memory plan
def _experts_gib(n_id: str, mib_id: str) -> float:
    return P(n_id) * P(mib_id) * MiB / GiB


for _sec in ("2.3.1", "2.3.2"):
    for _tier in ("gpu-hot", "cpu-warm", "ssd-cold"):
        _n = {"gpu-hot": "gpu-hot-experts", "cpu-warm": "cpu-warm-experts", "ssd-cold": "ssd-cold-experts"}[_tier]
        recomputes(f"v3-{_sec}-{_tier}-bytes", method=f"article: {_tier} experts x 84.0 MiB, in GiB")(
            (lambda s, n: lambda: _experts_gib(f"v3-{s}-{n}", f"v3-{s}-bytes-per-expert-mib"))(_sec, _n))
recomputes("v3-2.3.3-gpu-hot-bytes", method="article: 16 experts x 84.0 MiB, in GiB")(
    lambda: _experts_gib("v3-2.3.3-gpu-hot-experts", "v3-2.3.1-bytes-per-expert-mib"))

recomputes("v3-2.3.1-gpu-weight-tiered", method="article: 46.2 + 1.31 GiB")(
    lambda: P("v3-2.3.1-dense-weight-bytes") + P("v3-2.3.1-gpu-hot-bytes"))
recomputes("v3-2.3.1-full-weight-mem", method="article: 46.2 + 1,224.4 GiB")(full_weight_gib)
recomputes("v3-2.3.1-tiered-reduction", method="article: 1 - 47.5 / 1,270.7, %")(
    lambda: (1 - P("v3-2.3.1-gpu-weight-tiered") / P("v3-2.3.1-full-weight-mem")) * PCT)


def _weights_in_total_why():
    official = get_inventory(V3).params()
    x = full_weight_gib()
    return (f"The section's own full weights are {P('v3-2.3.1-dense-weight-bytes')} + "
            f"{P('v3-2.3.1-expert-weight-total'):,} = {x:,.1f} GiB (printed {P('v3-2.3.1-full-weight-mem'):,} a few "
            f"lines above); {P('v3-2.3.1-weights-in-total'):,} matches no sum of its numbers, "
            f"{P('v3-2.3.1-weights-in-total') - x:.1f} GiB more. The official {official / 1e9:.1f}B parameters at "
            f"2 B are {official * P('v3-2.3.1-bytes-per-param-fp16') / GiB:,.1f} GiB.")


def _total_mem() -> float:
    return P("v3-2.3.1-weights-in-total") + P("v3-2.3.1-kv-total-80") + P("v3-2.3.1-system-overhead")


def _total_mem_why(this: str, other: str):
    def why():
        return (f"{P('v3-2.3.1-weights-in-total'):,} + {P('v3-2.3.1-kv-total-80')} + "
                f"{P('v3-2.3.1-system-overhead')} = {_total_mem():,.2f} GiB, printed {P(this):,}; the "
                f"{'next' if this.endswith('mem') else 'previous'} line prints {P(other):,} GiB for the same total.")
    return why


recomputes("v3-2.3.1-weights-in-total", method="article's own full weights: 46.2 + 1,224.4 GiB",
           why=_weights_in_total_why)(full_weight_gib)
recomputes("v3-2.3.1-total-mem", method="article: 1,281.4 + 11.44 + 93.1 GiB",
           why=_total_mem_why("v3-2.3.1-total-mem", "v3-2.3.1-total-mem-alt"))(_total_mem)
recomputes("v3-2.3.1-total-mem-alt", method="article: 1,281.4 + 11.44 + 93.1 GiB",
           why=_total_mem_why("v3-2.3.1-total-mem-alt", "v3-2.3.1-total-mem"))(_total_mem)
recomputes("v3-2.3.1-cards-for-storage", method="article: ceil(1,385.2 / 59.6)")(
    lambda: math.ceil(P("v3-2.3.1-total-mem-alt") / P("v3-2.3.1-hbm-per-card")))


def _expert_total_gib() -> float:
    return printed_params("v3-2.3.1-expert-params") * P("v3-2.3.1-bytes-per-param-fp16") / GiB


def _expert_total_why():
    x = _expert_total_gib()
    tiers = P("v3-2.3.2-tiered-total")
    n = P("v3-2.3.2-gpu-hot-experts") + P("v3-2.3.2-cpu-warm-experts") + P("v3-2.3.2-ssd-cold-experts")
    c = v3_config()
    return (f"{P('v3-2.3.1-expert-params')}B x 2 B = {x:,.2f} GiB, printed {P('v3-2.3.2-expert-weight-total'):,}. "
            f"The three tiers that follow ({n:g} experts x {P('v3-2.3.2-bytes-per-expert-mib')} MiB = {tiers} GiB) "
            f"hold {x / tiers:.1f}x less: {n:g} experts of {P('v3-2.3.2-params-per-expert')}M parameters are one "
            f"MoE layer's routed experts, "
            f"while DeepSeek-V3 has {c.n_moe_layers} MoE layers of {c.n_routed_experts}.")


recomputes("v3-2.3.2-expert-weight-total", method="article: 657.4B x 2 B, in GiB", why=_expert_total_why)(
    _expert_total_gib)
recomputes("v3-2.3.2-params-per-expert", method="article: 3 x 14.68M")(
    lambda: P("v3-2.3.1-sublayers-per-expert") * P("v3-2.3.1-params-per-sublayer"))
recomputes("v3-2.3.2-bytes-per-expert-mb", method="article: 44.04M x 2 B, in MB")(
    lambda: printed_params("v3-2.3.2-params-per-expert") * P("v3-2.3.1-bytes-per-param-fp16") / MB)
recomputes("v3-2.3.2-bytes-per-expert-mib", method="article: 88.08 MB in MiB")(
    lambda: P("v3-2.3.2-bytes-per-expert-mb") * MB / MiB)
recomputes("v3-2.3.2-tiered-total", method="article: 1.31 + 5.25 + 14.44 GiB")(
    lambda: P("v3-2.3.2-gpu-hot-bytes") + P("v3-2.3.2-cpu-warm-bytes") + P("v3-2.3.2-ssd-cold-bytes"))
recomputes("v3-2.3.2-tiered-reduction", method="article: 1 - 21.00 / 1,224.4, %")(
    lambda: (1 - P("v3-2.3.2-tiered-total") / P("v3-2.3.2-expert-weight-total")) * PCT)
recomputes("v3-2.3.2-kv-total-80", method="article: 80 x 0.143 GiB")(
    lambda: P("v3-2.3.2-concurrency") * P("v3-2.3.2-kv-mla-per-user"))
def kv_floor_gib() -> float:
    """The least a KV cache can hold for §2.3.2's 80 users of 2,048 tokens, GiB: the cached tokens' own MLA
    latent and RoPE key in BF16 (:func:`pdcalc.model.kv_cache.mla_bytes_per_token`). A paged cache allocates whole
    blocks: it can add bytes to this, never remove them."""
    return P("v3-2.3.2-concurrency") * P("v3-2.3.1-context-length") * mla_bytes_per_token(V3) / GiB


def _kv_optimised_why():
    users, ctx, block = P("v3-2.3.2-concurrency"), P("v3-2.3.1-context-length"), P("v3-2.3.2-block-size")
    factor = P("v3-2.3.2-kv-opt-factor")
    return (f"{P('v3-2.3.2-kv-total-80')} x (1 - {factor:g}) = {P('v3-2.3.2-kv-total-80') * (1 - factor):.3f} holds, "
            f"but no cache holds {users:g} sequences of {ctx:,} tokens in fewer bytes than the tokens themselves: "
            f"{users:g} x {ctx:,} x {mla_bytes_per_token(V3):,.0f} B = {kv_floor_gib():.2f} GiB. Paging in "
            f"{block:g}-token blocks saves what buffers sized for the longest sequence would waste, which this "
            f"count of tokens held never included; a {100 * factor:g}% saving cannot come off the tokens' own bytes.")


recomputes("v3-2.3.2-kv-optimised", method="80 users x 2,048 tokens x mla_bytes_per_token(deepseek-v3): the least "
           "any cache holds for those tokens, GiB", why=_kv_optimised_why)(kv_floor_gib)
recomputes("v3-2.3.2-kv-saving", method="article: (11.44 - 9.15) / 11.44, %")(
    lambda: (P("v3-2.3.2-kv-total-80") - P("v3-2.3.2-kv-optimised")) / P("v3-2.3.2-kv-total-80") * PCT)
recomputes("v3-2.3.2-dense-weight-bytes", "v3-2.3.3-dense-weight-bytes", method="article: 24.8B x 2 B, in GiB")(
    lambda: dense_gib("v3-2.3.1-dense-params", "v3-2.3.1-bytes-per-param-fp16"))
for _sec, _tp in (("2.3.2", "v3-2.3.2-tp8"), ("2.3.3", "v3-2.3.3-tp8")):
    recomputes(f"v3-{_sec}-dense-shard-per-card", method="article: 46.2 GiB / 8")(
        (lambda s, t: lambda: P(f"v3-{s}-dense-weight-bytes") / P(t))(_sec, _tp))
    recomputes(f"v3-{_sec}-kv-shard-per-card", method="article: 9.15 GiB / 8")(
        (lambda s, t: lambda: P(f"v3-{s}-kv-optimised") / P(t))(_sec, _tp))

recomputes("v3-2.3.3-usable-hbm", method="article: 59.6 GiB x 90%")(
    lambda: P("v3-2.3.3-hbm-per-card") * P("v3-2.3.3-usable-pct") / PCT)
recomputes("v3-2.3.3-expert-shard-per-card", method="article: 1.31 GiB / 8")(
    lambda: P("v3-2.3.3-gpu-hot-bytes") / P("v3-2.3.3-tp8"))

CARD_TERMS = ("v3-2.3.3-dense-shard-per-card", "v3-2.3.3-expert-shard-per-card", "v3-2.3.3-kv-shard-per-card",
               "v3-2.3.3-activation-mem", "v3-2.3.3-system-reserve")


def per_card_total() -> float:
    """The article's per-card memory: dense + hot experts + KV shards, activations, reserve (GiB)."""
    return sum(P(t) for t in CARD_TERMS)


def _per_card_why(restated: bool = False):
    def why():
        c = v3_config()
        full, n, hbm = P("v3-2.3.1-full-weight-mem"), P("v3-2.3.3-tp8"), P("v3-2.3.3-hbm-per-card")
        terms = " + ".join(f"{P(t)}" for t in CARD_TERMS)
        slip = (f"Restated as {P('v3-2.3.3-per-card-total-alt')} GiB, {P('v3-2.3.3-per-card-total-alt') - per_card_total():.2f} "
                f"GiB more than the sum above it, " if restated else "The sum holds, ")
        return (f"{slip}{terms} = {per_card_total():.2f} GiB, but it leaves out most of the model: its "
                f"{P('v3-2.3.3-gpu-hot-experts'):g} cached experts are experts of one MoE layer "
                f"({P('v3-2.3.3-gpu-hot-bytes')} GiB) out of {c.n_moe_layers} layers x {c.n_routed_experts}. The "
                f"article's own FP16 weights, {full:,.1f} GiB, are {full / n:.1f} GiB per card of a TP={n:g} replica, "
                f"{full / n / hbm:.1f}x the {hbm} GiB of HBM; with them and the same KV, activations and reserve a card "
                f"needs {per_card_all_weights_gib():.1f} GiB.")
    return why


recomputes("v3-2.3.3-per-card-total", method="the article's own full weights (§2.3.1) / TP 8 + KV shard + activations "
           "+ reserve, GiB: the plan with every expert", why=_per_card_why())(lambda: per_card_all_weights_gib())
recomputes("v3-2.3.3-per-card-total-alt", method="the article's own full weights (§2.3.1) / TP 8 + KV shard + "
           "activations + reserve, GiB: the plan with every expert", why=_per_card_why(restated=True))(
    lambda: per_card_all_weights_gib())
recomputes("v3-2.3.3-hbm-util", method="article: 14.52 / 59.6, %")(
    lambda: P("v3-2.3.3-per-card-total") / P("v3-2.3.3-hbm-per-card") * PCT)
recomputes("v3-2.3.3-hbm-headroom", method="article: 59.6 - 14.52 GiB")(
    lambda: P("v3-2.3.3-hbm-per-card") - P("v3-2.3.3-per-card-total"))
recomputes("v3-2.3.3-hbm-headroom-pct", method="article: 45.08 / 59.6, %")(
    lambda: P("v3-2.3.3-hbm-headroom") / P("v3-2.3.3-hbm-per-card") * PCT)
recomputes("v3-2.3.3-cpu-mem-total", method="article: 119.2 GiB x 4 nodes")(
    lambda: P("v3-2.3.3-cpu-mem-per-node") * P("v3-2.3.3-nodes"))
recomputes("v3-2.3.3-ssd-total", method="article: 1.86 TiB x 4 nodes")(
    lambda: P("v3-2.3.3-ssd-per-node") * P("v3-2.3.3-nodes"))


def per_card_all_weights_gib() -> float:
    """§2.3.3's per-card sum with the article's own full weights (§2.3.1) split over the TP=8 replica
    instead of the dense shard and 16 experts: 1,270.6 / 8 + 1.14 + 1.86 + 5.59 GiB."""
    return full_weight_gib() / P("v3-2.3.3-tp8") + sum(P(c) for c in CARD_TERMS[2:])
