"""What a benchmark client will report for a served deployment, with an honest range: ``pdcalc predict``.

The client's run is simulated (:func:`pdcalc.perf.scheduler.simulate`) at the served terms of the deployment's
vendor and engine (:mod:`pdcalc.reality.calibration`, fitted on the served corpus) or at a user's own
calibration (:func:`load_calibration`). Each figure carries the 80 % range its class's held-out errors give
(vendor x metric x model family, pooled where thin). The kernels alone (the published costs with no served
terms) are given beside it as the hardware's bound: what the engine would reach at its kernels' unit-test speed.

The corpus fit is stored in ``pdcalc/data/served_calibration.toml`` (written by ``tools/calibrate_corpus.py``,
checked against a fresh fit by the test suite), so that a prediction takes a simulation, not a refit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from pdcalc.core.errors import ConfigError, load_toml
from pdcalc.hardware.cards import get_card
from pdcalc.layout.served import ServedSpec
from pdcalc.model.config import load_config
from pdcalc.perf.scheduler import simulate
from pdcalc.perf.served import ServedTerms, served_tables

STORED = "pdcalc/data/served_calibration.toml"
METRIC_KEYS = ("output_tokens_per_s", "tpot_s", "ttft_s")


@dataclass(frozen=True)
class Ranged:
    """A predicted figure and its likely range (the 10th to the 90th percentile of held-out errors)."""

    value: float
    low: float
    high: float
    range_from: str = ""        # the class of held-out errors the range comes from

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class ServedPrediction:
    """``pdcalc predict``'s answer for one spec."""

    spec: ServedSpec
    output_tokens_per_s: Ranged
    output_tokens_per_s_per_card: Ranged
    tpot_ms: Ranged
    ttft_ms: Ranged
    binds: str                      # what limits the throughput
    terms: ServedTerms
    bound_output_tokens_per_s: float   # the kernels alone: the hardware's bound
    bound_tpot_ms: float
    fits: bool
    short_gib: float
    cost_sources: tuple = field(default=())

    def as_dict(self) -> dict:
        return {"output_tokens_per_s": self.output_tokens_per_s.as_dict(),
                "output_tokens_per_s_per_card": self.output_tokens_per_s_per_card.as_dict(),
                "tpot_ms": self.tpot_ms.as_dict(), "ttft_ms": self.ttft_ms.as_dict(), "binds": self.binds,
                "fits": self.fits, "short_gib": self.short_gib,
                "bound": {"output_tokens_per_s": self.bound_output_tokens_per_s, "tpot_ms": self.bound_tpot_ms,
                          "what": "the published kernel costs alone: the hardware's bound"},
                "terms": {"k": self.terms.k_decode, "host_ms": self.terms.host_s * 1e3, "from": self.terms.label},
                "cost_sources": list(self.cost_sources)}


@cache
def stored() -> dict:
    """The stored corpus fit: terms per class and held-out error quantiles per error class."""
    return load_toml(resources.files("pdcalc").joinpath("data", "served_calibration.toml"), STORED)


def vendor_of(card) -> str:
    return get_card(card).family


def family_of(model) -> str:
    """The model family of the error classes: ``v4``, ``v3.2``, ``v3`` (V2, V3, R1, Kimi-K2 alike)."""
    t = load_config(model).model_type
    return {"deepseek_v4": "v4", "deepseek_v32": "v3.2"}.get(t, "v3")


def stored_terms(vendor: str, engine: str) -> ServedTerms:
    """The corpus terms of a vendor and engine, from the most specific pool the stored fit has."""
    terms = stored().get("terms", {})
    for key in (f"{vendor}/{engine}", vendor, "all"):
        if key in terms:
            t = terms[key]
            return ServedTerms(k_decode=t["k"], k_prefill=t["k"], host_s=t["host_ms"] / 1e3,
                               label=f"served corpus, {t['pool']} ({t['runs']} runs, {t['documents']} documents)")
    return ServedTerms()


def stored_range(vendor: str, metric: str, family: str) -> tuple[float, float, str]:
    """The stored held-out log-error quantiles (10th, 90th) of the most specific class that has them."""
    errs = stored().get("errors", {})
    for key in (f"{vendor}/{metric}/{family}", f"{vendor}/{metric}", metric):
        if key in errs:
            e = errs[key]
            return e["q10"], e["q90"], key
    return -math.log(2), math.log(2), "none (a factor of 2 either side)"


def _ranged(value: float, vendor: str, metric: str, family: str) -> Ranged:
    q10, q90, cls = stored_range(vendor, metric, family)
    return Ranged(value=value, low=value / math.exp(q90), high=value / math.exp(q10), range_from=cls)


def load_calibration(path) -> ServedTerms:
    """A user's calibration (``pdcalc calibrate -o FILE``): its terms."""
    data = load_toml(path, str(path))
    t = data.get("terms")
    if not isinstance(t, dict) or not {"k", "host_ms"} <= set(t):
        raise ConfigError(str(path), "terms", "missing: a calibration file has [terms] with k and host_ms")
    try:
        k, h = float(t["k"]), float(t["host_ms"]) / 1e3
    except (TypeError, ValueError):
        raise ConfigError(str(path), "terms", "k and host_ms must be numbers") from None
    if not (0 < k < 1000 and 0 <= h < 10):
        raise ConfigError(str(path), "terms", f"k must be in (0, 1000) and host_ms in [0, 10000), got {k}, {h * 1e3}")
    return ServedTerms(k_decode=k, k_prefill=k, host_s=h, label=f"calibrated on {data.get('run', path)}")


def predict(spec: ServedSpec, *, terms: ServedTerms | None = None) -> ServedPrediction:
    """What the benchmark client will report for ``spec`` (see the module docstring); ``terms``: a user's
    calibration instead of the corpus's."""
    t = served_tables(spec)
    vendor, family = vendor_of(spec.card), family_of(spec.model)
    terms = terms or stored_terms(vendor, spec.engine)
    sim = simulate(t, terms)
    bound = simulate(t, ServedTerms())
    from pdcalc.perf.served import steady_state

    binds = str(steady_state(t, terms).binds[0])
    out = _ranged(sim.output_tokens_per_s, vendor, "output_tokens_per_s", family)
    per_card = Ranged(out.value / spec.cards, out.low / spec.cards, out.high / spec.cards, out.range_from)
    tpot = _ranged(sim.mean_tpot_s * 1e3, vendor, "tpot_s", family)
    ttft = _ranged(sim.mean_ttft_s * 1e3, vendor, "ttft_s", family)
    sources = tuple(f"MTP acceptance {t.acceptance:.3g}: {', '.join(t.sources)}" for _ in [0] if t.sources)
    return ServedPrediction(spec=spec, output_tokens_per_s=out, output_tokens_per_s_per_card=per_card, tpot_ms=tpot,
                            ttft_ms=ttft, binds=binds if t.fits else "memory", terms=terms,
                            bound_output_tokens_per_s=bound.output_tokens_per_s, bound_tpot_ms=bound.mean_tpot_s * 1e3,
                            fits=t.fits, short_gib=max(t.decode.short_bytes, t.prefill.short_bytes) / 2**30,
                            cost_sources=sources)
