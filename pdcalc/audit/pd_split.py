"""Recomputations for the V4 article's summary (§8.1 the one-picture split, §8.2 five conclusions,
§8.3 the dp-size decision tree) and its abstract, on the same article model as §5-§6."""

from __future__ import annotations

from functools import partial

from pdcalc.audit import budgets as b
from pdcalc.audit.architecture import class_ii_why, total_why
from pdcalc.audit.architecture import params_of as _params
from pdcalc.audit.per_card import (D_EP, P_EP, art_ii_gb, article_usable_gb, card_why, class_ii_gb, experts_card,
                                   routed_card_gb, tutorial_deployment)
from pdcalc.audit.per_card import weight_card_gb as _w
from pdcalc.audit.registry import printed_value, recomputes, registered_by
from pdcalc.core.units import GB

recomputes("v4-abstract-total-cards", method="published deployment: servers x cards per server")(
    lambda: tutorial_deployment()["servers"] * tutorial_deployment()["cards_per_server"])

# ---- §8.1 and §8.2: the same per-card figures as §5-§6 --------------------------------------------
recomputes("v4-8.1-total-bytes", method="article: every tensor x 1 B, GB", why=total_why)(
    lambda: _params(b.V4 + "-article") / GB)
recomputes("v4-8.1-routed-bytes", "v4-8.2-routed-bytes", method="article shapes x 1 B: all routed experts, GB")(
    partial(routed_card_gb, 1))
recomputes("v4-8.1-nonsplit-bytes", "v4-8.2-nonsplit-bytes",
           method="article shapes: class-II bytes per card (1 B per parameter), GB", why=class_ii_why)(
    class_ii_gb)
recomputes("v4-8.1-p-experts-card", method="place_experts(256, 8): experts on the fullest card")(
    partial(experts_card, P_EP))
recomputes("v4-8.1-d-experts-card", method="place_experts(256, 32): experts on the fullest card")(
    partial(experts_card, D_EP))
recomputes("v4-8.1-p-routed-card", "v4-8.2-p-routed-card",
           method="card_weights(article, 1 B, ep=8).class_i_bytes, GB")(partial(routed_card_gb, P_EP))
recomputes("v4-8.1-d-routed-card", "v4-8.2-d-routed-card",
           method="card_weights(article, 1 B, ep=32).class_i_bytes, GB")(partial(routed_card_gb, D_EP))
recomputes("v4-8.1-p-weight-card", "v4-8.2-p-weight-card", method="card_weights(article, 1 B, ep=8).total_bytes, GB",
           why=card_why("p"))(lambda: _w(P_EP))
recomputes("v4-8.1-d-weight-card", "v4-8.2-d-weight-card",
           method="card_weights(article, 1 B, ep=32).total_bytes, GB", why=card_why("d"))(lambda: _w(D_EP))

_P_TOTAL_WHY = b.sum_why(b.p_plan, ("v4-6.2-p-weight-card", "v4-6.2-p-kv", "v4-6.2-p-act", "v4-6.2-p-framework"),
                          "P total")
recomputes("v4-8.1-p-total", "v4-8.2-p-total", method="article parts: weights (own shapes) + KV + 2.0 + 1.5, GB",
           why=_P_TOTAL_WHY)(lambda: b.p_plan().total_bytes / GB)
recomputes("v4-8.1-p-util", "v4-8.2-p-util", method="article: P total / 64 GB, %", why=b.util_why)(
    lambda: 100 * b.p_plan().total_bytes / b.p_plan().capacity_bytes)
recomputes("v4-8.1-d-kv-range", method="article: scenarios A ~ B KV per D card, GB", why=b.range_why)(
    lambda: (b.scenario_kv_gb("A"), b.scenario_kv_gb("B")))
recomputes("v4-8.1-d-total-range", method="article: D totals, scenarios A ~ B, GB", why=b.total_why("B"))(
    lambda: (b.d_plan("A").total_bytes / GB, b.d_plan("B").total_bytes / GB))
recomputes("v4-8.1-d-util", method="article: D totals (scenarios A ~ B) / 64 GB, %", why=b.util_why)(
    lambda: tuple(100 * b.d_plan(n).total_bytes / b.d_plan(n).capacity_bytes for n in "AB"))


def _free_kv(ep: int) -> float:
    """Usable memory minus weights: the article's "KV space" of §2.2, §6.5 and §8.2-8.3, GB."""
    return article_usable_gb() - _w(ep)


recomputes("v4-8.2-weight-ratio", method="P / D total weight per card (article shapes)",
           why=lambda: f"With the article's own class II the ratio is {_w(P_EP) / _w(D_EP):.2f}, not "
                       f"{printed_value('v4-8.2-weight-ratio'):g}.")(
    lambda: _w(P_EP) / _w(D_EP))
recomputes("v4-8.2-kv-space-ratio", method="article: (57.6 - P weights) / (57.6 - D weights)")(
    lambda: _free_kv(P_EP) / _free_kv(D_EP))
recomputes("v4-8.2-p-overhead", method="article: P KV + activations + framework, GB")(
    lambda: b.p_plan().total_bytes / GB - _w(P_EP))
recomputes("v4-8.2-p-free", method="article: 57.6 - P total, GB",
           why=lambda: f"{article_usable_gb():g} - {b.p_plan().total_bytes / GB:.2f} = {b.p_plan().free_bytes / GB:.2f} "
                       f"GB: the P total carries the {art_ii_gb():g} GB class-II error.")(lambda: b.p_plan().free_bytes / GB)
recomputes("v4-8.2-d-kv-a", method="article: scenario A KV per D card, GB", why=b.kv_why("A", "v4-8.2-d-kv-a"))(
    lambda: b.scenario_kv_gb("A"))
recomputes("v4-8.2-d-overhead", method="article: D activations + framework, GB")(b.d_overhead_gb)
recomputes("v4-8.2-d-total-a", method="article: D weights + scenario A KV + 2.0 + 2.0, GB", why=b.total_why("A"))(
    lambda: b.d_plan("A").total_bytes / GB)
recomputes("v4-8.2-d-util-a", method="article: D total (scenario A) / 64 GB, %")(
    lambda: 100 * b.d_plan("A").total_bytes / b.d_plan("A").capacity_bytes)
recomputes("v4-8.2-d-free-a", method="article: 57.6 - D total (scenario A), GB",
           why=lambda: f"{article_usable_gb():g} - {b.d_plan('A').total_bytes / GB:.2f} = {b.d_plan('A').free_bytes / GB:.2f} GB.")(
    lambda: b.d_plan("A").free_bytes / GB)
recomputes("v4-8.2-d-total-b", method="article: D weights + scenario B KV + 2.0 + 2.0, GB", why=b.total_why("B"))(
    lambda: b.d_plan("B").total_bytes / GB)
recomputes("v4-8.2-d-util-b", method="article: D total (scenario B) / 64 GB, %", why=b.util_why)(
    lambda: 100 * b.d_plan("B").total_bytes / b.d_plan("B").capacity_bytes)


# ---- §8.3 the decision tree -----------------------------------------------------------------------
def _d16() -> int:
    return printed_value("v4-8.3-d-dp16")


def _d32() -> int:
    return printed_value("v4-8.3-d-dp32")


def p_cards() -> int:
    """Cards on the prefill side of the deployment."""
    return tutorial_deployment()["servers"] // 2 * tutorial_deployment()["cards_per_server"]


for _side, _dp in (("p", 4), ("p", 8), ("p", 16), ("d", 16), ("d", 32)):
    _cid = f"v4-8.3-{_side}-dp{_dp}"
    recomputes(f"{_cid}-experts", method="place_experts(256, dp): experts on the fullest card")(
        (lambda c: lambda: experts_card(printed_value(c)))(_cid))
    _why = ""
    if _dp == 8:
        _why = card_why("p")
    elif _dp == 32:
        _why = card_why("d")
    recomputes(f"{_cid}-weight", method="card_weights(article, 1 B, ep=dp).total_bytes, GB", why=_why)(
        (lambda c: lambda: _w(printed_value(c)))(_cid))

recomputes("v4-8.3-p-dp16-instances", method="prefill cards / 16")(lambda: p_cards() // printed_value("v4-8.3-p-dp16"))
recomputes("v4-8.3-d-dp16-kv", method="article: 57.6 - weights at D dp=16, GB (the rule of the dp=32 branch)",
           why=lambda: f"By the rule of the dp={_d32()} branch ({article_usable_gb():g} GB minus weights) dp={_d16()} "
                       f"leaves {_free_kv(_d16()):.2f} GB, not ~{printed_value('v4-8.3-d-dp16-kv'):g}; after the "
                       f"{b.d_overhead_gb():.1f} GB of activations and framework of §6.3 it is "
                       f"{_free_kv(_d16()) - b.d_overhead_gb():.2f} GB.")(lambda: _free_kv(_d16()))
recomputes("v4-8.3-d-dp32-kv", method="article: 57.6 - weights at D dp=32, GB",
           why=lambda: f"{article_usable_gb():g} - {_w(D_EP):.2f} = {_free_kv(D_EP):.2f} GB on the article's own shapes.")(
    lambda: _free_kv(D_EP))
recomputes("v4-8.3-d-dp64-cards", method="one D instance of dp=64 x tp=1")(
    lambda: printed_value("v4-8.3-d-dp64") * tutorial_deployment()["decode_tp"])

#: The article sections this chapter covers (exact section names, per article).
SECTIONS = {"v4": ("abstract", "8.1", "8.2", "8.3")}
#: The claims this module recomputes.
CLAIM_IDS = registered_by(__name__)
