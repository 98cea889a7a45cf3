"""Recomputations for the V4 article's cluster layout, EP placement and per-card weights
(§2.1-2.3, §4.2-4.5, §5.3-5.5): the article's own architecture (``deepseek-v4-flash-article`` at
1 byte per parameter) placed with :func:`pdcalc.layout.parallel.place_experts` and
:func:`pdcalc.layout.memory.card_weights`; the layout facts against the published deployment.
"""

from __future__ import annotations

from functools import cache, partial

from pdcalc.audit.architecture import article_class_ii, class_ii_why
from pdcalc.audit.registry import printed_value, recomputes, registered_by
from pdcalc.core.units import GB
from pdcalc.hardware.cards import get_card
from pdcalc.layout.deployment import get_deployment
from pdcalc.layout.memory import card_weights
from pdcalc.layout.parallel import dispatch, place_experts
from pdcalc.model.inventory import get_inventory

V4A = "deepseek-v4-flash-article"
DEP = "v4-flash-910b-pd"


@cache
def tutorial_deployment():
    return get_deployment(DEP)


@cache
def article_card(ep: int):
    """The article's per-card weights (its own shapes, 1 byte per parameter) on an EP group of ``ep``."""
    return card_weights(V4A, "article-1byte", ep=ep)


def art_hbm_gb() -> float:
    """The card memory the V4 article computes with, its GB (§5.4)."""
    return printed_value("v4-5.4-card-hbm")


def art_ii_gb() -> float:
    """The class-II figure the V4 article carries through its tables, GB (§5.4)."""
    return printed_value("v4-5.4-nonsplit-bytes")


def article_usable_gb() -> float:
    """The article's usable memory: its "64GB" x 0.9, in its GB."""
    return printed_value("v4-5.4-card-hbm") * printed_value("v4-5.4-mem-util")


P_EP, D_EP = 8, 32


def n_experts() -> int:
    """Routed experts per layer, as the article states them (§4.2)."""
    return printed_value("v4-4.2-routed-experts")


def experts_card(ep: int) -> int:
    """Routed experts per layer on the fullest card of an EP group of ``ep`` (vLLM's contiguous placement)."""
    return place_experts(n_experts(), ep).max_experts_per_card


def routed_card_gb(ep: int) -> float:
    """The article's routed-expert (class I) weights on one card of an EP group of ``ep``, GB."""
    return article_card(ep).class_i_bytes / GB


def weight_card_gb(ep: int) -> float:
    """The article's total weights on one card of an EP group of ``ep``, GB (its shapes, 1 B per parameter)."""
    return article_card(ep).total_bytes / GB


def class_ii_gb() -> float:
    """The article's replicated (class II) weights per card, GB."""
    return article_class_ii() / GB


def _dep_field(field):
    return lambda: tutorial_deployment()[field]


for _field, _ids in {
    "servers": ("v4-2.1-servers",),
    "cards_per_server": ("v4-2.1-cards-per-server",),
    "prefill_dp": ("v4-2.1-p-dp", "v4-2.2-p-dp", "v4-2.3-p-dp", "v4-4.2-p-dp", "v4-5.4-p-dp"),
    "decode_dp": ("v4-2.1-d-dp", "v4-2.2-d-dp", "v4-2.3-d-dp", "v4-4.2-d-dp", "v4-5.4-d-dp"),
    "prefill_tp": ("v4-2.1-p-tp", "v4-2.2-p-tp", "v4-4.5-tp"),
    "decode_tp": ("v4-2.1-d-tp", "v4-2.2-d-tp"),
    "decode_max_num_seqs": ("v4-2.3-d-seqs",),
    "gpu_memory_utilization": ("v4-5.4-mem-util",),
}.items():
    recomputes(*_ids, method=f"published deployment {DEP}: {_field}")(_dep_field(_field))

recomputes("v4-2.1-p-servers", "v4-2.1-d-servers", method=f"published deployment {DEP}: servers / 2")(
    lambda: tutorial_deployment()["servers"] // 2)
recomputes("v4-2.1-total-cards", method="servers x cards per server")(
    lambda: tutorial_deployment()["servers"] * tutorial_deployment()["cards_per_server"])
recomputes("v4-2.1-p-cards", "v4-2.1-d-cards", "v4-2.2-p-cards", "v4-2.2-d-cards",
           method="4 servers x 8 cards")(
    lambda: tutorial_deployment()["servers"] // 2 * tutorial_deployment()["cards_per_server"])
recomputes("v4-2.1-p-ep-groups", "v4-2.2-p-ep-groups", "v4-2.3-p-instances", "v4-4.4-p-ep-groups",
           method=f"published deployment {DEP}: prefill instances")(_dep_field("prefill_instances"))
recomputes("v4-2.1-d-ep-groups", "v4-2.2-d-ep-groups", "v4-2.3-d-ep-groups", "v4-2.3-d-instances",
           "v4-4.4-d-ep-groups", method=f"published deployment {DEP}: decode instances")(
    _dep_field("decode_instances"))
recomputes("v4-2.1-p-ep-size", "v4-2.2-p-ep-size", "v4-2.3-p-ep-size", "v4-4.2-p-ep-size", "v4-4.3-p-ep-size",
           "v4-4.4-p-ep-size", "v4-5.3.3-p-ep-size",
           method="EP group = dp x tp cards with --enable-expert-parallel")(
    lambda: tutorial_deployment()["prefill_dp"] * tutorial_deployment()["prefill_tp"])
recomputes("v4-2.1-d-ep-size", "v4-2.2-d-ep-size", "v4-2.3-d-ep-size", "v4-4.2-d-ep-size", "v4-4.4-d-ep-size",
           "v4-5.3.4-d-ep-size", method="EP group = dp x tp cards with --enable-expert-parallel")(
    lambda: tutorial_deployment()["decode_dp"] * tutorial_deployment()["decode_tp"])
recomputes("v4-2.1-p-experts-card", "v4-2.2-p-experts-card", "v4-2.3-p-experts-card", "v4-4.2-p-experts-card",
           "v4-4.4-p-experts-card", "v4-5.3.3-p-experts-card", "v4-5.4-p-experts-card", "v4-5.5-p-experts-card",
           method="place_experts(256, 8): experts on the fullest card")(
    partial(experts_card, P_EP))
recomputes("v4-2.1-d-experts-card", "v4-2.2-d-experts-card", "v4-2.3-d-experts-card", "v4-4.2-d-experts-card",
           "v4-4.4-d-experts-card", "v4-5.3.4-d-experts-card", "v4-5.4-d-experts-card", "v4-5.5-d-experts-card",
           method="place_experts(256, 32): experts on the fullest card")(
    partial(experts_card, D_EP))
recomputes("v4-4.2-expert-id-range", method="first and last routed expert id")(lambda: (0, 255))
recomputes("v4-5.3.3-p-card-last-offset", "v4-5.4-p-card-last-offset", method="experts per P card - 1")(
    lambda: experts_card(P_EP) - 1)
recomputes("v4-5.3.4-d-card-last-offset", "v4-5.4-d-card-last-offset", method="experts per D card - 1")(
    lambda: experts_card(D_EP) - 1)


def _range_of(ep, card):
    return place_experts(n_experts(), ep).first_last(card)


for _sec, _ep, _cards in (("4.4", 8, range(8)), ("4.4", 32, (0, 1, 2, 3, 4, 30, 31)),
                          ("5.3.3", 8, (0, 1, 2, 7)), ("5.3.4", 32, (0, 1, 2, 31))):
    for _k in _cards:
        _cid = f"v4-{_sec}-{'p' if _ep == 8 else 'd'}-card{_k}-experts"
        recomputes(_cid, method=f"place_experts(256, {_ep}).first_last({_k}): first ~ last")(
            (lambda e, k: lambda: _range_of(e, k))(_ep, _k))


# ---- §4.3 the AllToAll example
#: The article's example token (§4.3): it sits on P card 0 and its router picks these experts.
EXAMPLE_EXPERTS = (10, 45, 100, 200, 230, 250)
EXAMPLE_SRC_CARD = 0


def example_dispatch(n_routed: int | None = None, ep: int = P_EP, hidden: int | None = None):
    """The §4.3 example token's AllToAll on an EP group of ``ep`` cards (the article's own sizes by default).

    A model with too few routed experts to hold the article's example experts takes the article's own count.
    """
    if n_routed is not None and n_routed <= max(EXAMPLE_EXPERTS):
        n_routed = None
    return dispatch(place_experts(n_routed or n_experts(), ep), list(EXAMPLE_EXPERTS), EXAMPLE_SRC_CARD,
                    hidden or printed_value("v4-4.3-hidden-dim"))


def _local_expert_why(e: int):
    def why():
        per_card = place_experts(n_experts(), P_EP).max_experts_per_card
        return (f"With {per_card} experts per card, expert {e} sits on card {e // per_card} ({e} // {per_card} = "
                f"{e // per_card}), the token's own card: its FFN runs locally and never enters the AllToAll.")
    return why


def _local_why():
    ex = example_dispatch()
    remote = [c for c in ex.expert_cards if c != ex.src_card]
    local = [e for e, c in zip(EXAMPLE_EXPERTS, ex.expert_cards) if c == ex.src_card]
    return (f"Expert {', '.join(map(str, local))} is on card {ex.src_card} itself, so card {ex.src_card} sends "
            f"{ex.copies_sent} copies (to cards {', '.join(map(str, remote))}) and gets {ex.copies_sent} back; a "
            f"deduplicating dispatch such as DeepEP's sends once per card: {ex.cards_reached} cards.")


for _e in EXAMPLE_EXPERTS:
    _local = place_experts(n_experts(), P_EP).card_of(_e) == EXAMPLE_SRC_CARD
    recomputes(f"v4-4.3-card-of-expert-{_e}", method=f"place_experts(256, 8).card_of({_e})",
               why=_local_expert_why(_e) if _local else "")(
        (lambda e: lambda: place_experts(n_experts(), P_EP).card_of(e))(_e))

recomputes("v4-4.3-sends", method="dispatch(...).copies_sent: remote experts of the example", why=_local_why)(
    lambda: example_dispatch().copies_sent)
recomputes("v4-4.3-receives", method="dispatch(...).copies_sent: combine mirrors dispatch", why=_local_why)(
    lambda: example_dispatch().copies_sent)
recomputes("v4-4.3-src-card", method="the example's source card")(lambda: example_dispatch().src_card)
recomputes("v4-4.5-alltoall-per-layer", method="one dispatch + one combine per MoE layer")(lambda: 2)


# ---- §4.4, §5.3-5.5 per-card weights on the article's own shapes
def _routed_total_why():
    exact = article_card(1).class_i_bytes
    printed = printed_value("v4-5.3.2-routed-params-exact")
    return (f"Arithmetic slip: {n_experts()} x {printed_value('v4-5.3.2-layers')} x "
            f"{printed_value('v4-1.4-expert-params'):,} = {exact:,.0f}, not {printed:,} ({printed - exact:,.0f} "
            f"too many); the per-card figures {article_card(P_EP).class_i_bytes / GB:.2f} and "
            f"{article_card(D_EP).class_i_bytes / GB:.2f} GB come out the same either way.")


recomputes("v4-5.3.2-routed-params-exact", method="article shapes: 256 x 43 x 25,165,824",
           why=_routed_total_why)(lambda: article_card(1).class_i_bytes)
recomputes("v4-5.3.2-routed-params", method="article shapes: 256 x 43 x 25,165,824, B params",
           why=_routed_total_why)(lambda: article_card(1).class_i_bytes / 1e9)
recomputes("v4-5.3.2-routed-bytes", "v4-5.3.3-routed-bytes", "v4-5.3.4-routed-bytes",
           method="article shapes x 1 B: all routed experts, GB", why=_routed_total_why)(
    partial(routed_card_gb, 1))
def _expert_matrix() -> int:
    """One SwiGLU matrix of an expert: d_model x d_ff as the article states them (§1.2)."""
    return printed_value("v4-1.2-d-model") * printed_value("v4-1.2-d-ff")


def _expert_matrices() -> int:
    """Matrices per routed expert in the article's own architecture (gate and up stacked, down)."""
    inv = get_inventory(V4A)
    return sum(t.shape[0] if len(t.shape) == 3 else 1 for t in inv.tensors
               if t.category == "routed_experts" and t.layer == 0)


def _expert_params() -> int:
    return _expert_matrices() * _expert_matrix()


recomputes("v4-5.3.1-expert-gate", "v4-5.3.1-expert-up", "v4-5.3.1-expert-down", method="article: 4096 x 2048")(
    _expert_matrix)
recomputes("v4-5.3.1-expert-params", method="article: 3 x 4096 x 2048")(_expert_params)
recomputes("v4-5.3.1-expert-params-m", "v4-5.3.2-expert-params-m", method="article: 3 x 4096 x 2048, M params")(
    lambda: _expert_params() / 1e6)
recomputes("v4-5.3.1-expert-bytes", method="article: one expert x 1 B, GB")(lambda: _expert_params() / GB)
recomputes("v4-5.3.1-swiglu-matrices", method="gate, up, down")(_expert_matrices)

recomputes("v4-5.3.3-p-routed-card", "v4-5.4-p-routed-card", "v4-5.5-p-routed-card",
           method="card_weights(article, 1 B, ep=8).class_i_bytes, GB")(partial(routed_card_gb, P_EP))
recomputes("v4-4.4-p-routed-card", method="card_weights(article, 1 B, ep=8).class_i_bytes, GB",
           why="277.03 / 8 = 34.63 GB, which rounds to 34.6, not '~34.7'.")(
    partial(routed_card_gb, P_EP))
recomputes("v4-4.4-d-routed-card", "v4-5.3.4-d-routed-card", "v4-5.4-d-routed-card", "v4-5.5-d-routed-card",
           method="card_weights(article, 1 B, ep=32).class_i_bytes, GB")(
    partial(routed_card_gb, D_EP))
recomputes("v4-5.5-routed-ratio", "v4-5.5-routed-ratio-prose", method="P / D routed-expert bytes per card")(
    lambda: routed_card_gb(P_EP) / routed_card_gb(D_EP))

recomputes("v4-4.5-ep-nonexpert", "v4-5.4-nonsplit-bytes", "v4-5.5-nonsplit-bytes",
           method="article shapes: class-II bytes per card (1 B per parameter), GB", why=class_ii_why)(
    class_ii_gb)
recomputes("v4-4.5-tp2-nonexpert", method="article shapes: class II halved by tp=2, GB")(
    lambda: article_class_ii() / 2 / GB)

_CAT = {"emb": "embedding", "head": "lm_head", "mla": "attention", "shared": "shared_experts", "router": "router"}
for _k, _cat in _CAT.items():
    _ids = [f"v4-5.4-{_k}-bytes", f"v4-5.5-p-{_k}-bytes", f"v4-5.5-d-{_k}-bytes"]
    recomputes(*_ids, method=f"article shapes: {_cat} per card x 1 B, GB")(
        (lambda c: lambda: article_card(P_EP).by_category[c] / GB)(_cat))
    recomputes(f"v4-5.5-{_k}-ratio", method=f"P / D {_cat} bytes per card (replicated)")(
        (lambda c: lambda: article_card(P_EP).by_category[c] / article_card(D_EP).by_category[c])(_cat))


def _misc():
    return sum(article_card(P_EP).by_category.get(c, 0) for c in ("norms", "mhc")) / GB


recomputes("v4-5.4-misc-bytes", method="article: norms + mHC per card x 1 B, GB",
           why=lambda: f"The article's own norms + mHC are {_misc():.4f} GB; 0.01 carries over §5.2.7's ~10M.")(_misc)
recomputes("v4-5.5-p-misc-bytes", "v4-5.5-d-misc-bytes", method="article: norms + mHC per card x 1 B, GB")(_misc)
recomputes("v4-5.5-misc-ratio", method="P / D norms + mHC (replicated)")(lambda: 1)


def card_why(side):
    ep = P_EP if side == "p" else D_EP
    w = article_card(ep)
    return lambda: (f"Carries the {art_ii_gb():g} GB class-II error: {w.class_i_bytes / GB:.2f} + {w.class_ii_bytes / GB:.2f} "
                    f"= {w.total_bytes / GB:.2f} GB on the article's own shapes.")


recomputes("v4-2.2-p-weight-card", "v4-2.3-p-weight-card", "v4-5.4-p-weight-card", "v4-5.5-p-weight-card",
           method="card_weights(article, 1 B, ep=8).total_bytes, GB", why=card_why("p"))(
    partial(weight_card_gb, P_EP))
recomputes("v4-2.2-d-weight-card", "v4-2.3-d-weight-card", "v4-5.4-d-weight-card", "v4-5.5-d-weight-card",
           method="card_weights(article, 1 B, ep=32).total_bytes, GB", why=card_why("d"))(
    partial(weight_card_gb, D_EP))


def _ratio():
    return article_card(P_EP).total_bytes / article_card(D_EP).total_bytes


recomputes("v4-2.2-pd-weight-ratio", "v4-5.5-weight-ratio", "v4-5.5-weight-ratio-prose",
           method="P / D total weight per card (article shapes)",
           why=lambda: f"With the article's own class II the ratio is {_ratio():.2f}, not "
                       f"{printed_value('v4-5.5-weight-ratio'):g}.")(_ratio)


# ---- usable memory (§5.4) and what is left
recomputes("v4-2.1-card-hbm", "v4-3.3-card-hbm", "v4-5.4-card-hbm",
           method="ascend-910b2 preset: installed HBM in GB (10^9 B)",
           why=lambda: f"The 910B card has 64 GiB = {get_card('ascend-910b2').hbm_bytes / GB:.2f} GB of HBM, of "
                       f"which the runtime exposes {get_card('ascend-910b2').usable_base_bytes / 2**30:.2f} GiB; the "
                       f"article computes with 64 of its 10^9-byte GB.")(
    lambda: get_card("ascend-910b2").hbm_bytes / GB)
recomputes("v4-5.4-usable-mem", method="the article's 64 x 0.9 (its own inputs)")(article_usable_gb)


def _remaining(ep):
    return article_usable_gb() - article_card(ep).total_bytes / GB


recomputes("v4-5.4-p-remaining", "v4-2.2-p-kv-space", method="article: 57.6 - P weights (article shapes), GB",
           why=card_why("p"))(lambda: _remaining(P_EP))
recomputes("v4-5.4-d-remaining", "v4-2.2-d-kv-space", "v4-2.3-d-kv-space",
           method="article: 57.6 - D weights (article shapes), GB", why=card_why("d"))(lambda: _remaining(D_EP))
recomputes("v4-2.2-kv-space-ratio", method="article: D / P memory left after weights")(
    lambda: _remaining(D_EP) / _remaining(P_EP))

#: The article sections this chapter covers (exact section names, per article).
SECTIONS = {"v4": ("2.1", "2.2", "2.3", "3.1", "3.3", "4.1", "4.2", "4.3", "4.4", "4.5", "5", "5.3.1", "5.3.2", "5.3.3",
                   "5.3.4", "5.4", "5.5")}
#: The claims this module recomputes.
CLAIM_IDS = registered_by(__name__)
