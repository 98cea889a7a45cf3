"""The claims registry: every number the two audited articles print, recomputed.

The printed numbers are data (``pdcalc/data/claims/v4.toml`` and ``v3.toml``: section, quantity, the
characters as printed, value and unit as printed). Recomputations are functions registered with
:func:`recomputes`, each returning the value in the claim's printed unit from the article's own
assumptions (or from the official model where the claim is a fact about it), with a one-line method
and, where the article is wrong, the explanation of the cause.

Verdicts are computed, never typed:

``match``
    the recomputed value, rounded to the printed precision, equals the printed value
    (a bound such as "<0.02 GB" holds);
``rounding``
    off by more than half but at most one unit in the last significant printed digit (the trailing
    zeros of a printed integer are not significant: "3,170M" is precise to 10M, "~280GB" to 10 GB),
    and by at most 10% of the printed value;
``erratum``
    anything else; an explanation is required;
``input``
    a stated assumption or fact with no recomputation;
``pending``
    a derived number whose recomputation is not written yet.

One quantity, one verdict: a claim that prints again, in another section, a quantity already printed
with the same value names its first occurrence in ``same_as`` and is judged by the same recomputation
(:func:`pdcalc.audit.registry.evaluate`); a wrong figure is wrong wherever it is printed.

Every erratum carries a ``severity``, how much it moves a deployment conclusion (data, with a one-line
``severity_reason``), on the scale of :data:`SEVERITIES`: ``major`` (changes which layout or split to
run, or whether it fits), ``moderate`` (changes a sizing figure materially), ``minor`` (changes no
conclusion), ``cosmetic`` (a unit label or rounding presentation).
"""

from __future__ import annotations

import math
import re
from functools import cache

import pandas as pd

from pdcalc.audit.registry import ARTICLES, Claim, defects, evaluate, registered_ids, severity_rank
from pdcalc.core.errors import UnknownNameError
from pdcalc.core.precision import MAX_SIG


def _load_recomputations() -> None:
    # importing the audit modules registers their recomputations
    from pdcalc.audit import architecture, budgets, mooncake, pd_split, per_card, v3_article  # noqa: F401


def claims(article: str | None = None) -> list[Claim]:
    """All claims (of one article: ``"v4"`` or ``"v3"``), evaluated."""
    _load_recomputations()
    return evaluate(article)


def get_claim(claim_id: str) -> Claim:
    """One evaluated claim by id."""
    for c in claims(claim_id.split("-", 1)[0] if claim_id.split("-", 1)[0] in ARTICLES else None):
        if c.id == claim_id:
            return c
    raise UnknownNameError("claim", claim_id, [c.id for c in claims()])


def chapter_ids(module) -> list[str]:
    """The claims a chapter audits, in article order: those its audit module recomputes
    (``module.CLAIM_IDS``) and every other judged claim (not ``input``) printed in the sections it covers
    (``module.SECTIONS``), such as a repeat judged by its first occurrence's recomputation."""
    ids = set(module.CLAIM_IDS)
    secs = {(a, s) for a, ss in module.SECTIONS.items() for s in ss}
    return [c.id for c in claims() if c.id in ids or ((c.article, c.section) in secs and c.verdict != "input")]


#: The book page that audits each audit module's claims, in the book's order (a claim shown on several
#: pages is first given on the earliest).
CHAPTER_PAGES = (("architecture", "architecture"), ("per_card", "per_card"), ("budgets", "kv_memory"),
                 ("mooncake", "transfer"), ("pd_split", "pd_split"), ("v3_article", "v3_article"))


@cache
def _pages() -> tuple[tuple[str, str], ...]:
    import importlib

    out: dict[str, str] = {}
    for module, page in CHAPTER_PAGES:
        for cid in chapter_ids(importlib.import_module(f"pdcalc.audit.{module}")):
            out.setdefault(cid, page)
    return tuple(out.items())


def pages() -> dict[str, str]:
    """Claim id -> the page (``book/<page>.ipynb``) whose audit table first gives its verdict."""
    return dict(_pages())


def homes() -> dict[str, tuple[str, str]]:
    """Claim id -> (page, claim id) of the row that first gives its quantity's verdict in the book.

    A quantity printed several times (``same_as``) is judged once; its home is the earliest page, in the
    book's order, that shows any of its occurrences, and the row is that occurrence's.
    """
    return dict(_homes())


@cache
def _homes() -> tuple[tuple[str, tuple[str, str]], ...]:
    first = pages()
    order = {page: i for i, (_, page) in enumerate(CHAPTER_PAGES)}
    f = frame()
    root = {cid: (same or cid) for cid, same in zip(f["id"], f["same_as"])}
    best: dict[str, tuple[int, str]] = {}
    for cid in f["id"]:  # article order
        if cid in first:
            key = (order[first[cid]], cid)
            if root[cid] not in best or key[0] < best[root[cid]][0]:
                best[root[cid]] = key
    return tuple((cid, (first[best[r][1]], best[r][1])) for cid, r in root.items() if r in best)


def anchor(claim_id: str) -> str:
    """The HTML id of a claim's row in its page's audit table (``claim-v4-6-1-kv-conservative``)."""
    return "claim-" + re.sub(r"[^a-z0-9]+", "-", claim_id.lower()).strip("-")


def frame(article: str | None = None, *, sections: tuple[str, ...] | None = None,
          ids: list[str] | None = None) -> pd.DataFrame:
    """The registry as a table: ``id, article, section, quantity, article_value, article_unit,
    recomputed_value, delta, verdict, severity, severity_reason, explanation`` (plus printed, where,
    method, kind, same_as).

    ``severity`` is empty unless the verdict is ``erratum``; ``same_as`` names the first occurrence of
    a quantity printed again. ``sections`` keeps claims whose section starts with one of the prefixes
    (``"5.2"`` keeps 5.2.1 ...); ``ids`` keeps the listed claims. Rows stay in the order the article
    prints them.
    """
    rows = []
    for c in claims(article):
        if sections and not any(c.section == s or c.section.startswith(s + ".") for s in sections):
            continue
        if ids is not None and c.id not in ids:
            continue
        rows.append({
            "id": c.id, "article": c.article, "section": c.section, "quantity": c.quantity,
            "printed": c.printed, "article_value": c.value, "article_unit": c.unit,
            "recomputed_value": c.recomputed, "delta": c.delta, "verdict": c.verdict,
            "severity": c.severity if c.verdict == "erratum" else "",
            "severity_reason": c.severity_reason if c.verdict == "erratum" else "",
            "explanation": c.explanation,
            "method": c.method, "where": c.where, "kind": c.kind, "same_as": c.same_as,
        })
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


#: The columns of :func:`frame`.
FRAME_COLUMNS = ("id", "article", "section", "quantity", "printed", "article_value", "article_unit",
                 "recomputed_value", "delta", "verdict", "severity", "severity_reason", "explanation",
                 "method", "where", "kind", "same_as")


def problems(article: str | None = None) -> list[str]:
    """Registry defects (:func:`pdcalc.audit.registry.defects`): errata without an explanation or a severity,
    explanations or severities left on numbers that are not errata, a repeated quantity with two verdicts
    or a ``same_as`` that names no earlier claim of the same value; and recomputations registered for ids
    that do not exist."""
    cs = claims(article)
    out = defects(cs)
    if article is None:
        known = {c.id for c in cs}
        out += [f"{cid}: recomputation registered for an unknown claim id" for cid in registered_ids()
                if cid not in known]
    return out


def audit_table(ids: list[str] | None = None, *, article: str | None = None,
                sections: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The chapter view: ``section | id | quantity | article | recomputed | verdict | severity | why``,
    indexed by section.

    Rows come errata first, most severe first, then rounding, match, input and pending (article order
    within each), so that a page can lead with what is wrong; ``id`` lets a page anchor a row. An
    explanation already given in an earlier row of the same table is replaced by a pointer to it.
    """
    df = frame(article, sections=sections, ids=ids)
    if df.empty:
        return df
    by_id = {c.id: c for c in claims(article)}
    order = sorted(range(len(df)), key=lambda i: severity_rank(by_id[df["id"].iloc[i]]))
    df = df.iloc[order].reset_index(drop=True)

    def fmt(x, printed):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return ""
        if isinstance(x, tuple):
            return " ~ ".join(fmt(v, printed) for v in x)
        if abs(x) >= 1e4 or float(x).is_integer():
            return f"{x:,.0f}"
        whole = len(str(int(abs(x)))) if abs(x) >= 1 else 0
        d = min(_printed_decimals(printed) + 2, max(0, MAX_SIG - whole))
        return f"{x:,.0f}" if float(round(x, d)).is_integer() else f"{x:,.{d}f}"   # no trailing ".000"

    why, seen = [], {}
    for i, (sec, text) in enumerate(zip(df["section"], df["explanation"])):
        if text and text in seen:
            why.append(f"As for {seen[text]} above.")
        else:
            why.append(text)
            if text:
                seen[text] = f"{df['quantity'].iloc[i]} (§{sec})"
    return pd.DataFrame({
        "section": df["section"],
        "id": df["id"],
        "quantity": df["quantity"],
        "article": df["printed"],
        "recomputed": [f"{fmt(r, p)} {u}" if fmt(r, p) else "" for r, p, u in
                       zip(df["recomputed_value"], df["printed"], df["article_unit"])],
        "verdict": df["verdict"],
        "severity": df["severity"],
        "why": why,
    }).set_index("section")


def _printed_decimals(printed: str) -> int:
    """Most decimal places of any number in a printed string."""
    return max((len(t.split(".")[1]) for t in re.findall(r"\d+\.\d+", printed)), default=0)


def inputs_table(sections: dict[str, tuple[str, ...]]) -> pd.DataFrame:
    """The numbers an article takes as given (verdict ``input``) in the listed sections:
    ``sections`` maps an article (``"v4"``, ``"v3"``) to exact section names.

    Columns ``section | quantity | article | where``, in the order the article prints them.
    """
    rows = [{"article": c.article, "section": c.section, "quantity": c.quantity, "printed": c.printed, "where": c.where}
            for a, secs in sections.items() for c in claims(a) if c.section in secs and c.verdict == "input"]
    df = pd.DataFrame(rows, columns=["article", "section", "quantity", "printed", "where"])
    df = df.rename(columns={"printed": "as printed"})
    if len(sections) == 1:
        df = df.drop(columns="article")
    return df.set_index("section")
