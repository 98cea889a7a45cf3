"""What the book found, article by article: each finding reads "the article says -> its own inputs give ->
as it really is", with what it changes and a link to the audit row that shows it.

The findings are the ranked errata (:data:`pdcalc.audit.errata.ERRATA`, most consequential first) plus, per
article, the number a reader sizes a deployment by that the engine's own log or the registry's floor
corrects (:data:`EXTRA`). Every figure is computed when the page is built, so the findings follow the
code; the landing page renders them with :func:`html`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pdcalc.core.units import GB, GiB
from pdcalc.model.quant import V4_ASCEND_W8A8

ARTICLE_TITLES = {
    "v4": "DeepSeek-V4-Flash on 64 x Ascend 910B, prefill/decode disaggregated",
    "v3": "DeepSeek-V3 on Ascend 910B2, TP x DP",
}


@dataclass(frozen=True)
class Finding:
    """One finding: a printed number, what the article's own inputs give, what the real model gives."""

    article: str            # "v4" or "v3"
    claim_id: str           # the claim in the registry
    section: str            # the article's section
    quantity: str
    severity: str           # the erratum's severity (pdcalc.audit.registry.SEVERITIES)
    says: str               # the number as printed
    own_inputs: str         # what the article's own inputs give
    real: str               # what the official model, the engine or its log give
    changes: str            # what it changes in the conclusion
    page: str               # the book page whose audit table shows the claim
    anchor: str             # the claim's row on that page


def _p_weights_real() -> str:
    from pdcalc.layout.memory import card_weights
    from pdcalc.reality.weights import logged_weights, weight_candidates

    log = logged_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=8, mtp=True)
    w = card_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=8, mtp=True)
    loaded = weight_candidates(log.id).query("chosen").iloc[0]["predicted_bytes"]
    return (f"{log.bytes / GiB:.1f} GiB ({log.bytes / GB:.1f} GB) logged by vllm-ascend for the W8A8 checkpoint "
            f"with its MTP layer on this layout; pdcalc gives {w.total_bytes / GiB:.2f} GiB of weights as the "
            f"checkpoint is loaded, {loaded / GiB:.2f} GiB with the buffers the engine builds with the model")


def _p_weights_changes() -> str:
    from pdcalc.audit.registry import printed_value
    from pdcalc.layout.memory import budget
    from pdcalc.reality.weights import logged_weights

    log = logged_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=8, mtp=True)
    b = budget("ascend-910b2", log.bytes)
    return (f"At gpu-memory-utilization {b.utilization:g} a P card keeps {b.kv_bytes / GiB:.1f} GiB for activations "
            f"and the cache of the prompts it prefills, against the {printed_value('v4-6.2-p-free')} GB the "
            f"article counts after its overheads.")


def _v3_kv_real() -> str:
    from pdcalc.audit.v3_memory import kv_floor_gib

    return f"at least {kv_floor_gib():.2f} GiB: a paged cache holds every byte of the tokens it holds"


#: Per article, findings beyond the ranked errata: (claim id, what its own inputs give (None: the registry's
#: recomputation), what it really is, what it changes).
EXTRA: dict[str, tuple[tuple[str, Callable[[], str] | None, Callable[[], str], Callable[[], str]], ...]] = {
    "v4": (("v4-2.2-p-weight-card", None, _p_weights_real, _p_weights_changes),),
    "v3": (("v3-2.3.2-kv-optimised", lambda: "the same figure: the multiplication holds on its premise", _v3_kv_real,
            lambda: "The optimised plan's cache is below what its own sequences need, so its memory margin is smaller "
                    "than printed."),),
}


def _own(c) -> str:
    if c.recomputed is None:
        return "no figure follows from its own inputs"
    r = c.recomputed
    return (" ~ ".join(f"{v:,.4g}" for v in r) if isinstance(r, tuple) else f"{r:,.4g}") + f" {c.unit}"


def findings(article: str) -> list[Finding]:
    """The findings of ``article`` (``"v4"`` or ``"v3"``), most consequential first."""
    from pdcalc.audit import claims
    from pdcalc.audit.errata import ERRATA

    pages = claims.pages()
    out = []
    for e in ERRATA:
        c = claims.get_claim(e.claim_id)
        if c.article == article:
            out.append(Finding(article, c.id, c.section, c.quantity, c.severity, c.printed, e.corrected(), e.real(),
                               e.changes(), pages.get(c.id, ""), claims.anchor(c.id)))
    for cid, own, real, changes in EXTRA[article]:
        c = claims.get_claim(cid)
        out.append(Finding(article, c.id, c.section, c.quantity, c.severity, c.printed, own() if own else _own(c),
                           real(), changes(), pages.get(c.id, ""), claims.anchor(c.id)))
    return out
