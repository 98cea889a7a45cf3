"""What a benchmark client will report for a served deployment, with an honest range: ``pdcalc predict``.

The client's run is simulated (:func:`pdcalc.perf.scheduler.simulate`) at the served terms of the deployment's
class (vendor, engine, model family; :mod:`pdcalc.reality.calibration`, fitted on the served corpus and stored)
or at a user's own calibration (:func:`load_calibration`, written by ``pdcalc calibrate``). Each figure carries
the 80 % range its class's held-out errors give (vendor x metric x model family, pooled where thin). The kernels
alone (the published costs with no served terms) are given beside it as the hardware's bound: what the engine
would reach at its kernels' unit-test speed and no host or request time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pdcalc.core.errors import ConfigError, load_toml
from pdcalc.core.units import GiB
from pdcalc.hardware.cards import get_card
from pdcalc.layout.served import ServedSpec
from pdcalc.model.config import load_config
from pdcalc.perf.scheduler import simulate
from pdcalc.perf.served import ServedTables, ServedTerms, served_tables, steady_state
from pdcalc.reality.calibration import POOLS, error_class_keys, pool_key, stored

#: What a calibration file holds (``pdcalc calibrate -o FILE``): each field's allowed range and its default
#: (``None``: required; files written before the DP host factor or the request time existed have none, which
#: reads as 1 and 0).
CALIBRATION_FIELDS = {"k_decode": (0.01, 100.0, None), "k_prefill": (0.01, 100.0, None),
                      "host_ms": (0.0, 10_000.0, None), "dp_host_factor": (1.0, 100.0, 1.0),
                      "request_ms": (0.0, 100_000.0, 0.0)}
CALIBRATION_KEYS = tuple(k for k, (_, _, default) in CALIBRATION_FIELDS.items() if default is None)


@dataclass(frozen=True)
class Ranged:
    """A predicted figure and its likely range (the 10th to the 90th percentile of held-out errors)."""

    value: float
    low: float
    high: float
    range_from: str = ""        # the class of held-out errors the range comes from

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}

    def scaled(self, f: float) -> Ranged:
        return Ranged(self.value * f, self.low * f, self.high * f, self.range_from)


@dataclass(frozen=True)
class ServedPrediction:
    """``pdcalc predict``'s answer for one spec (``fits`` False: the figures are None and ``short_gib`` says by
    how much a card is short)."""

    spec: ServedSpec
    fits: bool
    short_gib: float
    output_tokens_per_s: Ranged | None
    output_tokens_per_s_per_card: Ranged | None
    tpot_ms: Ranged | None
    ttft_ms: Ranged | None
    binds: str                      # what limits the throughput
    terms: ServedTerms
    bound_output_tokens_per_s: float | None   # the kernels alone: the hardware's bound
    bound_tpot_ms: float | None
    acceptance: float
    cost_sources: tuple = field(default=())

    def as_dict(self) -> dict:
        def r(x):
            return None if x is None else x.as_dict()

        return {"fits": self.fits, "short_gib": self.short_gib,
                "output_tokens_per_s": r(self.output_tokens_per_s),
                "output_tokens_per_s_per_card": r(self.output_tokens_per_s_per_card),
                "tpot_ms": r(self.tpot_ms), "ttft_ms": r(self.ttft_ms), "binds": self.binds,
                "range": "80 % range: the 10th to 90th percentile of held-out errors of "
                         + (self.tpot_ms.range_from if self.tpot_ms else "its class"),
                "bound": {"output_tokens_per_s": self.bound_output_tokens_per_s, "tpot_ms": self.bound_tpot_ms,
                          "what": "the published kernel costs alone, no host or request time: the hardware's bound"},
                "terms": self.terms.as_dict(),
                "mtp_acceptance": self.acceptance, "cost_sources": list(self.cost_sources)}


def vendor_of(card) -> str:
    return get_card(card).family


def family_of(model) -> str:
    """The model family of the term and error classes: ``v4``, ``v3.2`` or ``v3`` (V2, V3, R1 alike)."""
    t = load_config(model).model_type
    return {"deepseek_v4": "v4", "deepseek_v32": "v3.2"}.get(t, "v3")


def class_of(spec: ServedSpec) -> tuple[str, str, str]:
    return vendor_of(spec.card), spec.engine, family_of(spec.model)


def stored_terms(cls: tuple[str, str, str]) -> ServedTerms:
    """The corpus terms of class ``cls``, from the most specific pool the stored fit has."""
    terms = stored().get("terms", {})
    for _, fields in POOLS:
        key = pool_key(cls, fields)
        if key in terms:
            t = terms[key]
            return ServedTerms.from_dict(t, label=f"served corpus, pool {key} ({t['runs']} runs, {t['documents']} "
                                                  "documents)")
    return ServedTerms()


def stored_range(vendor: str, metric: str, family: str) -> tuple[float, float, str]:
    """The stored held-out log-error quantiles (10th, 90th) of the most specific class that has them."""
    errs = stored().get("errors", {})
    for key, name in error_class_keys(vendor, metric, family):
        if key in errs:
            e = errs[key]
            return e["q10"], e["q90"], f"{name} {key} ({e['points']} points, {e['documents']} documents)"
    raise KeyError(f"no held-out errors stored for {metric}")


def ranged(value: float, vendor: str, metric: str, family: str) -> Ranged:
    q10, q90, cls = stored_range(vendor, metric, family)
    return Ranged(value=value, low=value / math.exp(q90), high=value / math.exp(q10), range_from=cls)


def load_calibration(path) -> ServedTerms:
    """A user's calibration (``pdcalc calibrate -o FILE``): its terms, each field checked."""
    source = str(path)
    data = load_toml(path, source)
    t = data.get("terms")
    if not isinstance(t, dict):
        raise ConfigError(source, "[terms]", "missing: a calibration file has [terms] with "
                          + ", ".join(CALIBRATION_KEYS))
    vals = {}
    for key, (lo, hi, default) in CALIBRATION_FIELDS.items():
        v = t.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
            raise ConfigError(source, f"[terms] {key}", f"must be a number from {lo:g} to {hi:g}, got {v!r}")
        vals[key] = float(v)
    run = data.get("run", {}).get("id", source) if isinstance(data.get("run"), dict) else source
    return ServedTerms.from_dict(vals, label=f"calibrated on {run}")


def _sources(t: ServedTables) -> tuple[str, ...]:
    out = ["kernel times: published costs (pdcalc.perf.published) at the card's figures"]
    if t.sources:
        out.append(f"MTP acceptance {t.acceptance:.3g} per draft: {', '.join(t.sources)}")
    return tuple(out)


def predict(spec: ServedSpec, *, terms: ServedTerms | None = None) -> ServedPrediction:
    """What the benchmark client will report for ``spec`` (see the module docstring); ``terms``: a user's
    calibration instead of the corpus's."""
    t = served_tables(spec)
    cls = class_of(spec)
    vendor, _, family = cls
    terms = terms or stored_terms(cls)
    short = max(t.decode.short_bytes, t.prefill.short_bytes) / GiB
    if not t.fits:
        return ServedPrediction(spec=spec, fits=False, short_gib=short, output_tokens_per_s=None,
                                output_tokens_per_s_per_card=None, tpot_ms=None, ttft_ms=None, binds="memory",
                                terms=terms, bound_output_tokens_per_s=None, bound_tpot_ms=None,
                                acceptance=t.acceptance, cost_sources=_sources(t))
    sim = simulate(t, terms)
    bound = simulate(t, ServedTerms())
    out = ranged(sim.output_tokens_per_s, vendor, "output_tokens_per_s", family)
    return ServedPrediction(spec=spec, fits=True, short_gib=0.0, output_tokens_per_s=out,
                            output_tokens_per_s_per_card=out.scaled(1 / spec.cards),
                            tpot_ms=ranged(sim.mean_tpot_s * 1e3, vendor, "tpot_s", family),
                            ttft_ms=ranged(sim.mean_ttft_s * 1e3, vendor, "ttft_s", family),
                            binds=str(steady_state(t, terms).binds[0]), terms=terms,
                            bound_output_tokens_per_s=bound.output_tokens_per_s,
                            bound_tpot_ms=bound.mean_tpot_s * 1e3, acceptance=t.acceptance,
                            cost_sources=_sources(t))
