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
import tomllib
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Callable

import pandas as pd

from pdcalc.errors import UnknownNameError

ARTICLES = {
    "v4": "deepseek-v4-flash-910b-pd-analysis.zh.txt",
    "v3": "deepseek-v3-910b2-tp-dp-deployment.zh.txt",
}
VERDICTS = ("match", "rounding", "erratum", "input", "pending")


@dataclass(frozen=True)
class Recompute:
    """How pdcalc recomputes one claim."""

    fn: Callable[[], float | tuple]
    method: str
    why: str | Callable[[], str] = ""  # explanation of a mismatch (required for an erratum); a callable
                                        # builds it from computed numbers

    def explanation(self) -> str:
        return self.why() if callable(self.why) else self.why


_REGISTRY: dict[str, Recompute] = {}


def recomputes(*claim_ids: str, method: str, why: str | Callable[[], str] = ""):
    """Register ``fn`` as the recomputation of ``claim_ids`` (same function, same method)."""

    def deco(fn):
        for cid in claim_ids:
            if cid in _REGISTRY:
                raise ValueError(f"claim {cid} registered twice")
            _REGISTRY[cid] = Recompute(fn=fn, method=method, why=why)
        return fn

    return deco


@dataclass(frozen=True)
class Claim:
    """One printed number and its audit."""

    id: str
    article: str
    section: str
    where: str
    quantity: str
    printed: str
    value: float | tuple
    unit: str
    kind: str
    formula: str = ""
    note: str = ""
    occurrences: int = 1
    recomputed: float | tuple | None = None
    method: str = ""
    verdict: str = "pending"
    explanation: str = ""
    delta: float | None = None


def _decimals(printed: str, value: float) -> int:
    """Decimal places of the printed number equal to ``value`` (thousands separators ignored)."""
    for tok in re.findall(r"\d[\d,]*(?:\.\d+)?", printed):
        num = tok.replace(",", "")
        try:
            if math.isclose(float(num), float(value), rel_tol=1e-12, abs_tol=1e-12):
                return len(num.split(".")[1]) if "." in num else 0
        except ValueError:
            continue
    text = repr(float(value))
    return 0 if float(value).is_integer() else len(text.split(".")[1])


def _last_digit_unit(printed: str, value: float) -> float:
    """Size of one unit in the last significant printed digit (trailing zeros of an integer are not
    significant: "3,170M" is precise to 10M)."""
    d = _decimals(printed, value)
    if d == 0 and float(value).is_integer() and value != 0:
        n, zeros = int(abs(value)), 0
        while n % 10 == 0:
            n //= 10
            zeros += 1
        return 10.0 ** zeros
    return 10.0 ** -d


def _bound(printed: str) -> str | None:
    p = printed.strip()
    for mark in ("<=", "≤", ">=", "≥", "<", ">"):
        if p.startswith(mark) or p.startswith("~" + mark):
            return mark
    return None


#: Units of whole things (cards, experts, ids...): an integer printed without "~" must be exact.
EXACT_UNITS = frozenset({"count", "cards", "servers", "experts", "layers", "users", "sequences", "replicas",
                         "instances", "groups", "heads", "dim", "params", "tokens"})
_APPROX = ("~", "≈", "约", "量级")
#: A "rounding" slip is at most one unit in the last printed digit *and* at most this fraction of the
#: printed value: "1 KB" for 0.13 KB is not a rounding slip, whatever its last digit.
ROUNDING_MAX_RELATIVE = 0.1


def judge(printed: str, value, recomputed, unit: str | None = None) -> tuple[str, float | None]:
    """Verdict and signed difference (recomputed - printed) of one number.

    An integer in one of :data:`EXACT_UNITS` printed without an approximation mark is exact: any
    difference is an erratum. A printed range against one recomputed number matches when the number lies
    in the range (the delta is then the distance outside it); against a recomputed range it is judged end
    by end.
    """
    if isinstance(value, (list, tuple)) and not isinstance(recomputed, (list, tuple)):
        # one recomputed number against a printed range ("数百GB": somewhere in the hundreds)
        lo, hi = float(value[0]), float(value[1])
        r = float(recomputed)
        inside = lo <= r <= hi
        return ("match" if inside else "erratum"), (0.0 if inside else (r - lo if r < lo else r - hi))
    if isinstance(value, (list, tuple)):
        if len(recomputed) != len(value):
            raise TypeError("a printed range needs a recomputed range of the same length")
        parts = [judge(printed, v, r, unit) for v, r in zip(value, recomputed)]
        order = ("match", "rounding", "erratum")
        worst = max((p[0] for p in parts), key=order.index)
        return worst, max((p[1] for p in parts), key=abs)
    v, r = float(value), float(recomputed)
    delta = r - v
    bound = _bound(printed)
    if bound is not None:
        ok = {"<": r < v, "≤": r <= v, "<=": r <= v, ">": r > v, "≥": r >= v, ">=": r >= v}[bound]
        return ("match" if ok else "erratum"), delta
    if (unit in EXACT_UNITS and float(v).is_integer() and not any(m in printed for m in _APPROX)):
        return ("match" if delta == 0 else "erratum"), delta
    unit = _last_digit_unit(printed, v)
    if abs(delta) <= 0.5 * unit * (1 + 1e-9) + 1e-12 * abs(v):
        return "match", delta
    if abs(delta) <= unit * (1 + 1e-9) and abs(delta) <= ROUNDING_MAX_RELATIVE * abs(v):
        return "rounding", delta
    return "erratum", delta


@cache
def _raw(article: str) -> tuple[dict, ...]:
    path = resources.files("pdcalc").joinpath("data", "claims", f"{article}.toml")
    if not path.is_file():
        return ()
    with path.open("rb") as fh:
        return tuple(tomllib.load(fh)["claim"])


def printed_value(claim_id: str):
    """The value a claim prints, read from the registry data (no recomputation involved)."""
    article = claim_id.split("-", 1)[0]
    for raw in _raw(article):
        if raw["id"] == claim_id:
            return tuple(raw["value"]) if isinstance(raw["value"], list) else raw["value"]
    raise UnknownNameError("claim", claim_id, [r["id"] for a in ARTICLES for r in _raw(a)])


def _load_recomputations() -> None:
    # importing the audit modules registers their recomputations
    from pdcalc import audit  # noqa: F401


def _evaluate(raw: dict, article: str) -> Claim:
    value = raw["value"]
    value = tuple(value) if isinstance(value, list) else value
    c = Claim(id=raw["id"], article=article, section=str(raw["section"]), where=raw.get("where", ""),
              quantity=raw["quantity"], printed=raw["printed"], value=value, unit=raw["unit"],
              kind=raw["kind"], formula=raw.get("formula", ""), note=raw.get("note", ""),
              occurrences=raw.get("occurrences", 1))
    rc = _REGISTRY.get(c.id)
    if rc is None:
        return replace(c, verdict="input" if c.kind == "input" else "pending")
    rec = rc.fn()
    rec = tuple(rec) if isinstance(rec, list) else rec
    verdict, delta = judge(c.printed, c.value, rec, c.unit)
    return replace(c, recomputed=rec, method=rc.method, verdict=verdict, explanation=rc.explanation(), delta=delta)


def claims(article: str | None = None) -> list[Claim]:
    """All claims (of one article: ``"v4"`` or ``"v3"``), evaluated."""
    _load_recomputations()
    if article is not None and article not in ARTICLES:
        raise UnknownNameError("article", article, ARTICLES)
    out: list[Claim] = []
    for a in ([article] if article else list(ARTICLES)):
        out += [_evaluate(r, a) for r in _raw(a)]
    return out


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
        rc = _REGISTRY.get(c.id)
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
