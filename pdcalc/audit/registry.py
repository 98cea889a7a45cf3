"""The claims registry's core: the articles' printed numbers (data), the recomputations the audit modules
register, and the verdict rules.

The audit modules (:mod:`pdcalc.audit`) import this module to register recomputations with
:func:`recomputes` and to read printed values; :mod:`pdcalc.audit.claims`, the public view, loads the audit
modules and evaluates every claim with :func:`evaluate`. Nothing here imports the audit modules, so the
dependency runs one way: claims -> audit -> registry. The verdict rules are documented in
:mod:`pdcalc.audit.claims`.
"""

from __future__ import annotations

import math
import re
import sys
import tomllib
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Callable

from pdcalc.core.errors import UnknownNameError

ARTICLES = {
    "v4": "deepseek-v4-flash-910b-pd-analysis.zh.txt",
    "v3": "deepseek-v3-910b2-tp-dp-deployment.zh.txt",
}
VERDICTS = ("match", "rounding", "erratum", "input", "pending")

#: How much an erratum moves a deployment conclusion, most consequential first. Every erratum carries one
#: (``severity`` in the claims data, with a one-line ``severity_reason``).
SEVERITIES: dict[str, str] = {
    "major": "changes which layout or split to run, or whether the deployment fits",
    "moderate": "changes a sizing figure materially, without changing the layout or the fit",
    "minor": "a wrong figure that changes no conclusion",
    "cosmetic": "a unit label or the presentation of a rounded number",
}
#: The order in which audit tables list claims: errata (most severe first), then rounding, match, input,
#: pending.
VERDICT_ORDER = ("erratum", "rounding", "match", "input", "pending")


@dataclass(frozen=True)
class Recompute:
    """How pdcalc recomputes one claim."""

    fn: Callable[[], float | tuple]
    method: str
    why: str | Callable[[], str] = ""  # explanation of a mismatch (required for an erratum); a callable
                                        # builds it from computed numbers
    module: str = ""                    # the audit module that registered it

    def explanation(self) -> str:
        return self.why() if callable(self.why) else self.why


_REGISTRY: dict[str, Recompute] = {}


def recomputes(*claim_ids: str, method: str, why: str | Callable[[], str] = ""):
    """Register ``fn`` as the recomputation of ``claim_ids`` (same function, same method), on behalf of the
    module that calls this."""
    module = sys._getframe(1).f_globals.get("__name__", "")

    def deco(fn):
        for cid in claim_ids:
            if cid in _REGISTRY:
                raise ValueError(f"claim {cid} registered twice")
            _REGISTRY[cid] = Recompute(fn=fn, method=method, why=why, module=module)
        return fn

    return deco


def registered_ids() -> tuple[str, ...]:
    """Every claim id with a registered recomputation, in registration order."""
    return tuple(_REGISTRY)


def registered_by(*modules: str) -> tuple[str, ...]:
    """The claim ids the audit ``modules`` (dotted names) register, in registration order."""
    return tuple(cid for cid, r in _REGISTRY.items() if r.module in modules)


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
    same_as: str = ""            # id of the first claim that prints the same quantity with the same value
    severity: str = ""           # for an erratum: one of SEVERITIES (a repeat takes its first occurrence's)
    severity_reason: str = ""    # one line: why that severity
    recomputed: float | tuple | None = None
    method: str = ""
    verdict: str = "pending"
    explanation: str = ""
    delta: float | None = None


def printed_decimals(printed: str, value: float) -> int:
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
    d = printed_decimals(printed, value)
    if d == 0 and float(value).is_integer() and value != 0:
        n, zeros = int(abs(value)), 0
        while n % 10 == 0:
            n //= 10
            zeros += 1
        return 10.0 ** zeros
    return 10.0 ** -d


def printed_bound(printed: str) -> str | None:
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
    bound = printed_bound(printed)
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
def raw_claims(article: str) -> tuple[dict, ...]:
    path = resources.files("pdcalc").joinpath("data", "claims", f"{article}.toml")
    if not path.is_file():
        return ()
    with path.open("rb") as fh:
        return tuple(tomllib.load(fh)["claim"])


def printed_value(claim_id: str):
    """The value a claim prints, read from the registry data (no recomputation involved)."""
    article = claim_id.split("-", 1)[0]
    for raw in raw_claims(article):
        if raw["id"] == claim_id:
            return tuple(raw["value"]) if isinstance(raw["value"], list) else raw["value"]
    raise UnknownNameError("claim", claim_id, [r["id"] for a in ARTICLES for r in raw_claims(a)])


def _groups(raws: tuple[dict, ...]) -> dict[str, list[str]]:
    """First occurrence -> every claim of its quantity (itself first), in article order."""
    out: dict[str, list[str]] = {}
    for r in raws:
        out.setdefault(r.get("same_as") or r["id"], []).append(r["id"])
    return out


def _recompute_of(raw: dict, groups: dict[str, list[str]]) -> Recompute | None:
    """The claim's own recomputation; without one, its quantity's: that of the first claim of its group
    (the first occurrence and its repeats, in article order) that has one."""
    rc = _REGISTRY.get(raw["id"])
    if rc is not None:
        return rc
    return next((_REGISTRY[m] for m in groups.get(raw.get("same_as") or raw["id"], ()) if m in _REGISTRY), None)


def _evaluate(raw: dict, article: str, groups: dict[str, list[str]] | None = None,
              by_id: dict[str, dict] | None = None) -> Claim:
    value = raw["value"]
    value = tuple(value) if isinstance(value, list) else value
    first = (by_id or {}).get(raw.get("same_as", ""), raw)
    c = Claim(id=raw["id"], article=article, section=str(raw["section"]), where=raw.get("where", ""),
              quantity=raw["quantity"], printed=raw["printed"], value=value, unit=raw["unit"],
              kind=raw["kind"], formula=raw.get("formula", ""), note=raw.get("note", ""),
              occurrences=raw.get("occurrences", 1), same_as=raw.get("same_as", ""),
              severity=raw.get("severity", first.get("severity", "")),
              severity_reason=raw.get("severity_reason", first.get("severity_reason", "")))
    rc = _recompute_of(raw, groups or {})
    if rc is None:
        return replace(c, verdict="input" if c.kind == "input" else "pending")
    rec = rc.fn()
    rec = tuple(rec) if isinstance(rec, list) else rec
    verdict, delta = judge(c.printed, c.value, rec, c.unit)
    return replace(c, recomputed=rec, method=rc.method, verdict=verdict, explanation=rc.explanation(), delta=delta)


def evaluate(article: str | None = None) -> list[Claim]:
    """The claims of ``article`` (``"v4"``, ``"v3"``; ``None``: both) judged against the recomputations
    registered so far (:func:`pdcalc.audit.claims.claims` registers every one first).

    A claim marked ``same_as`` another (the same quantity printed again with the same value), or named by
    one, is judged by its quantity's recomputation when it has none of its own, so that one quantity
    gets one verdict wherever it is printed.
    """
    if article is not None and article not in ARTICLES:
        raise UnknownNameError("article", article, ARTICLES)
    out: list[Claim] = []
    for a in ([article] if article else list(ARTICLES)):
        out += _evaluated(a, frozenset(_REGISTRY))
    return out


@cache
def _evaluated(article: str, registered: frozenset) -> tuple[Claim, ...]:
    """The claims of one article judged against the recomputations registered (``registered``: their ids, so
    that a new registration is judged afresh; the recomputations themselves are pure functions)."""
    raws = raw_claims(article)
    groups, by_id = _groups(raws), {r["id"]: r for r in raws}
    return tuple(_evaluate(r, article, groups, by_id) for r in raws)


def severity_rank(claim: Claim) -> tuple[int, int]:
    """Sort key of a claim in an audit table: verdict (:data:`VERDICT_ORDER`), then severity."""
    sev = list(SEVERITIES).index(claim.severity) if claim.severity in SEVERITIES else len(SEVERITIES)
    return VERDICT_ORDER.index(claim.verdict), sev if claim.verdict == "erratum" else 0


def defects(claims: list[Claim]) -> list[str]:
    """What is wrong with a set of evaluated claims as data, one line each (empty when nothing is).

    - an erratum without an explanation, or without a severity of :data:`SEVERITIES` and its reason;
    - an explanation left on a matching number, a severity left on a claim that is not an erratum;
    - a ``same_as`` that does not name an earlier claim of the same article printing the same value in
      the same unit, or that names a claim which is itself a repeat;
    - one quantity with two verdicts or two severities (a repeat takes its first occurrence's severity
      unless it states one).
    """
    out: list[str] = []
    pos = {c.id: i for i, c in enumerate(claims)}
    by_id = {c.id: c for c in claims}
    for c in claims:
        if c.verdict == "erratum":
            if not c.explanation:
                out.append(f"{c.id}: erratum without an explanation (printed {c.printed}, recomputed {c.recomputed})")
            if c.severity not in SEVERITIES:
                out.append(f"{c.id}: erratum with severity {c.severity!r}; one of {', '.join(SEVERITIES)} is required")
            elif not c.severity_reason:
                out.append(f"{c.id}: severity {c.severity} without a reason")
        elif c.severity and not c.same_as:
            out.append(f"{c.id}: severity {c.severity!r} on a claim judged {c.verdict} (stale severity?)")
        if c.verdict == "match" and c.explanation:
            out.append(f"{c.id}: explanation given but the number matches (stale explanation?)")
        if not c.same_as:
            continue
        first = by_id.get(c.same_as)
        if first is None:
            out.append(f"{c.id}: same_as {c.same_as!r} is not a claim of article {c.article}")
            continue
        if first.article != c.article or pos[first.id] >= pos[c.id]:
            out.append(f"{c.id}: same_as {first.id} must name an earlier claim of the same article")
        if first.same_as:
            out.append(f"{c.id}: same_as {first.id}, which is itself a repeat of {first.same_as}; name the first")
        if (first.value, first.unit) != (c.value, c.unit):
            out.append(f"{c.id}: same_as {first.id} but prints {c.value} {c.unit}, not {first.value} {first.unit}")
        if first.verdict != c.verdict:
            out.append(f"{c.id}: one quantity, two verdicts: {c.verdict} here, {first.verdict} at {first.id}")
        elif (first.severity, first.severity_reason) != (c.severity, c.severity_reason):
            out.append(f"{c.id}: one quantity, two severities: {c.severity!r} here, {first.severity!r} at {first.id}")
    return out
