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
"""

from __future__ import annotations

import math
import re

import pandas as pd

from pdcalc.errors import UnknownNameError
from pdcalc.registry import _REGISTRY, ARTICLES, Claim, evaluate
# the registry's public names, read through this module too
from pdcalc.registry import VERDICTS, judge, printed_value, recomputes  # noqa: F401


def _load_recomputations() -> None:
    # importing the audit modules registers their recomputations
    from pdcalc import audit  # noqa: F401


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


def frame(article: str | None = None, *, sections: tuple[str, ...] | None = None,
          ids: list[str] | None = None) -> pd.DataFrame:
    """The registry as a table: ``id, article, section, quantity, article_value, article_unit,
    recomputed_value, delta, verdict, explanation`` (plus printed, where, method).

    ``sections`` keeps claims whose section starts with one of the prefixes (``"5.2"`` keeps 5.2.1 ...);
    ``ids`` keeps the listed claims. Rows stay in the order the article prints them.
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
            "explanation": c.explanation,
            "method": c.method, "where": c.where, "kind": c.kind,
        })
    return pd.DataFrame(rows)


def problems(article: str | None = None) -> list[str]:
    """Registry defects: errata without an explanation, explanations left on matching numbers,
    recomputations registered for ids that do not exist."""
    out = []
    cs = claims(article)
    for c in cs:
        if c.verdict == "erratum" and not c.explanation:
            out.append(f"{c.id}: erratum without an explanation (printed {c.printed}, recomputed {c.recomputed})")
        if c.verdict == "match" and c.explanation:
            out.append(f"{c.id}: explanation given but the number matches (stale explanation?)")
    if article is None:
        known = {c.id for c in cs}
        out += [f"{cid}: recomputation registered for an unknown claim id" for cid in _REGISTRY if cid not in known]
    return out


def audit_table(ids: list[str] | None = None, *, article: str | None = None,
                sections: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The chapter view: ``section | quantity | article | recomputed | verdict | why``.

    An explanation already given in an earlier row of the same table is replaced by a pointer to it.
    """
    df = frame(article, sections=sections, ids=ids)
    if df.empty:
        return df

    def fmt(x, printed):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return ""
        if isinstance(x, tuple):
            return " ~ ".join(fmt(v, printed) for v in x)
        if abs(x) >= 1e4 or float(x).is_integer():
            return f"{x:,.0f}"
        d = min(_printed_decimals(printed) + 2, 6)
        return f"{x:,.{d}f}"

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
        "quantity": df["quantity"],
        "article": df["printed"],
        "recomputed": [f"{fmt(r, p)} {u}" if r is not None else "" for r, p, u in
                       zip(df["recomputed_value"], df["printed"], df["article_unit"])],
        "verdict": df["verdict"],
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
