"""What served runs pay beyond the published kernel costs, estimated from the served corpus without leaking:
every error this module reports is out of sample, the run's whole source document left out of the fit.

Terms (:class:`pdcalc.perf.served.ServedTerms`: a kernel-time factor ``k`` and a host time ``h`` per scheduler
step) belong to a *class* of runs, the card's vendor and the serving engine (:func:`term_class`). A class is fitted
on the runs of its own class where the training set holds at least :data:`MIN_SOURCES` documents of it, else on
its vendor's, else on every run: pooled where data are thin. The fit minimises, over a grid of ``(k, h)``, the
squared log error of the steady state (:func:`pdcalc.perf.served.steady_state`) against what each run measured
(output tokens/s, mean TPOT and mean TTFT where printed), each run weighted by one over its document's run count
so that no document outweighs another:

.. math:: \\min_{k, h} \\sum_{r} \\frac{1}{n_{s(r)}} \\sum_{m} \\Bigl(\\log \\frac{\\hat y_m(r; k, h)}{y_m(r)}\\Bigr)^2

Leave one source out (:func:`held_out`): for each document, the terms are fitted on every other document and
its runs predicted by the client simulation (:func:`pdcalc.perf.scheduler.simulate`) at those terms. The held-out
log errors, grouped by vendor x metric x model family and pooled where thin (:func:`error_class`), give each
prediction its 80 % range (:func:`interval`); a held-out point's own range leaves its document out too, so that
the coverage check (:func:`coverage`) is out of sample as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from pdcalc.perf.scheduler import simulate
from pdcalc.perf.served import ServedTables, ServedTerms, served_tables, steady_state

#: The grid the terms are fitted on: kernel-time factors and host seconds per scheduler step.
K_GRID = tuple(float(x) for x in np.round(np.geomspace(0.5, 12.0, 37), 4))
H_GRID = tuple(float(x) for x in (0.0, *np.round(np.geomspace(2e-4, 0.06, 26), 6)))
#: Documents a class needs in a training set to be fitted on its own runs (else pooled).
MIN_SOURCES = 2
#: Held-out points an error class needs for its own range (else pooled).
MIN_POINTS = 8
#: The metrics predicted, as the client reports them.
METRICS = ("output_tokens_per_s", "tpot_s", "ttft_s")
#: The range a prediction carries: the 10th to the 90th percentile of its class's held-out errors.
RANGE = (0.10, 0.90)


def grid_terms() -> list[ServedTerms]:
    return [ServedTerms(k_decode=k, k_prefill=k, host_s=h, label="grid") for k in K_GRID for h in H_GRID]


# ------------------------------------------------------------------------------ what a run measured
def observed(run) -> dict[str, float]:
    """What ``run`` measured, in the client's terms and SI units: output tokens/s of the whole deployment, mean
    TPOT and mean TTFT in seconds (a median where the source prints no mean); metrics it does not print are
    left out."""
    spec = run.spec
    out = {}
    m = run.metric
    if m("output_tokens_per_s") is not None and m("output_tokens_per_s").scope == "deployment":
        out["output_tokens_per_s"] = m("output_tokens_per_s").value
    elif m("output_tokens_per_s_per_card") is not None:
        out["output_tokens_per_s"] = m("output_tokens_per_s_per_card").value * spec.cards
    elif m("total_tokens_per_s_per_card") is not None:
        w = spec.workload
        out["output_tokens_per_s"] = m("total_tokens_per_s_per_card").value * spec.cards * w.output / (
            w.prompt + w.output)
    for name, keys in (("tpot_s", ("tpot_ms_mean", "tpot_ms_median", "tpot_ms", "tpot_s")),
                       ("ttft_s", ("ttft_ms_mean", "ttft_ms_median", "ttft_s"))):
        for key in keys:
            v = m(key)
            if v is not None:
                out[name] = v.value / (1 if key.endswith("_s") else 1e3)
                break
    return out


# ------------------------------------------------------------------------------ classes
def term_class(run) -> tuple[str, str]:
    """The class a run's terms are fitted in: its card's vendor and its engine."""
    return run.vendor, run.spec.engine


def error_class(run, metric: str) -> tuple[str, str, str]:
    """The class a prediction's range comes from: vendor x metric x model family."""
    return run.vendor, metric, run.model_family


@dataclass(frozen=True)
class Point:
    """One predictable run of the corpus, with its tables (acceptance from other documents only) and its error
    over the term grid."""

    run: object
    tables: ServedTables
    observed: dict
    errors: dict          # metric -> log(predicted / measured) over the grid (array)


def predictable_runs() -> list:
    """The corpus runs the served model predicts: a spec, a memory fit, and at least one measured metric."""
    from pdcalc.reality.served_runs import load

    return [r for r in load() if r.not_predictable is None and r.spec is not None and observed(r)]


@cache
def points() -> tuple[Point, ...]:
    """Every predictable run with its grid errors (computed once per process)."""
    grid = grid_terms()
    out = []
    for run in predictable_runs():
        t = served_tables(run.spec, exclude_sources=(run.source_id,))
        if not t.fits:
            continue
        s = steady_state(t, grid)
        pred = {"output_tokens_per_s": s.output_tokens_per_s, "tpot_s": s.tpot_s, "ttft_s": s.ttft_s}
        obs = observed(run)
        errs = {m: np.log(np.maximum(pred[m], 1e-12) / v) for m, v in obs.items()}
        out.append(Point(run=run, tables=t, observed=obs, errors=errs))
    return tuple(out)


# ------------------------------------------------------------------------------ fitting
def _objective(pts) -> np.ndarray:
    """Sum over runs (weighted by 1 / runs of their document) of squared log errors, over the grid."""
    n_src: dict = {}
    for p in pts:
        n_src[p.run.source_id] = n_src.get(p.run.source_id, 0) + 1
    total = np.zeros(len(K_GRID) * len(H_GRID))
    for p in pts:
        for e in p.errors.values():
            total += np.where(np.isfinite(e), e, 10.0) ** 2 / n_src[p.run.source_id]
    return total


def fit(pts, cls: tuple[str, str]) -> tuple[ServedTerms, str]:
    """The terms of class ``cls`` fitted on ``pts``: its own runs where they come from at least
    :data:`MIN_SOURCES` documents, else its vendor's, else all; and which pool was used."""
    grid = grid_terms()
    pools = (("class", [p for p in pts if term_class(p.run) == cls]),
             ("vendor", [p for p in pts if p.run.vendor == cls[0]]),
             ("all", list(pts)))
    for name, pool in pools:
        if len({p.run.source_id for p in pool}) >= MIN_SOURCES:
            i = int(np.argmin(_objective(pool)))
            g = grid[i]
            return ServedTerms(k_decode=g.k_decode, k_prefill=g.k_prefill, host_s=g.host_s,
                               label=f"fitted on {name} ({cls[0]}, {cls[1]}): {len(pool)} runs, "
                                     f"{len({p.run.source_id for p in pool})} documents"), name
    return ServedTerms(), "none"


@cache
def corpus_terms() -> dict[tuple[str, str], ServedTerms]:
    """Every class's terms fitted on the whole corpus (what a user's prediction takes)."""
    pts = points()
    return {cls: fit(pts, cls)[0] for cls in sorted({term_class(p.run) for p in pts})}


def terms_for(vendor: str, engine: str) -> ServedTerms:
    """The corpus terms of a vendor and engine (its vendor's pool, or all, where the corpus has no such class)."""
    pts = points()
    cls = (vendor, engine)
    terms = corpus_terms()
    return terms[cls] if cls in terms else fit(pts, cls)[0]


# ------------------------------------------------------------------------------ held out
@cache
def held_out() -> pd.DataFrame:
    """Leave one source out: every predictable run predicted by the client simulation at terms fitted without
    its document. One row per (run, metric): ``id``, ``source_id``, ``vendor``, ``engine``, ``model_family``,
    ``metric``, ``measured``, ``predicted``, ``log_error``, ``pool`` (how its terms were fitted), and the
    kernels-alone prediction (``before``: the published kernel costs with no served terms)."""
    pts = points()
    rows = []
    for src in sorted({p.run.source_id for p in pts}):
        train = [p for p in pts if p.run.source_id != src]
        for p in (q for q in pts if q.run.source_id == src):
            terms, pool = fit(train, term_class(p.run))
            sim = simulate(p.tables, terms)
            before = simulate(p.tables, ServedTerms())
            pred = {"output_tokens_per_s": sim.output_tokens_per_s, "tpot_s": sim.mean_tpot_s,
                    "ttft_s": sim.mean_ttft_s}
            base = {"output_tokens_per_s": before.output_tokens_per_s, "tpot_s": before.mean_tpot_s,
                    "ttft_s": before.mean_ttft_s}
            for metric, meas in p.observed.items():
                rows.append({"id": p.run.id, "source_id": src, "vendor": p.run.vendor, "engine": p.run.spec.engine,
                             "model_family": p.run.model_family, "metric": metric, "measured": meas,
                             "predicted": pred[metric], "log_error": math.log(pred[metric] / meas),
                             "before": base[metric], "pool": pool, "k": terms.k_decode, "host_s": terms.host_s})
    return pd.DataFrame(rows)


def _class_errors(df: pd.DataFrame, vendor: str, metric: str, family: str) -> tuple[np.ndarray, str]:
    """Held-out log errors of a class, pooled where it has fewer than :data:`MIN_POINTS`."""
    for name, sel in (("vendor x metric x model", (df["vendor"] == vendor) & (df["metric"] == metric)
                       & (df["model_family"] == family)),
                      ("vendor x metric", (df["vendor"] == vendor) & (df["metric"] == metric)),
                      ("metric", df["metric"] == metric)):
        e = df.loc[sel, "log_error"].to_numpy(float)
        if len(e) >= MIN_POINTS:
            return e, name
    return df.loc[df["metric"] == metric, "log_error"].to_numpy(float), "metric"


def interval(predicted: float, vendor: str, metric: str, family: str, *, exclude_source: str | None = None
             ) -> tuple[float, float, str]:
    """The 80 % range of a prediction: ``predicted / exp(q90)`` to ``predicted / exp(q10)`` of its class's
    held-out log errors (``log(predicted / measured)``), leaving out ``exclude_source``; and the class used."""
    df = held_out()
    if exclude_source is not None:
        df = df[df["source_id"] != exclude_source]
    e, name = _class_errors(df, vendor, metric, family)
    lo_q, hi_q = np.quantile(e, RANGE)
    return predicted / math.exp(hi_q), predicted / math.exp(lo_q), name


def coverage() -> pd.DataFrame:
    """Each held-out point with its own out-of-sample 80 % range (its document left out of the errors too) and
    whether the measurement falls in it."""
    df = held_out().copy()
    lows, highs, inside = [], [], []
    for _, r in df.iterrows():
        lo, hi, _ = interval(r["predicted"], r["vendor"], r["metric"], r["model_family"],
                             exclude_source=r["source_id"])
        lows.append(lo)
        highs.append(hi)
        inside.append(lo <= r["measured"] <= hi)
    df["low"], df["high"], df["covered"] = lows, highs, inside
    return df


def summary(df: pd.DataFrame | None = None, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Median and 90th-percentile absolute held-out error (%) and points, overall or by columns ``by``."""
    df = held_out() if df is None else df
    err = (np.exp(df["log_error"].abs()) - 1) * 100
    d = df.assign(abs_err_pct=err)
    if not by:
        return pd.DataFrame([{"points": len(d), "median_abs_err_pct": float(np.median(err)),
                              "p90_abs_err_pct": float(np.quantile(err, 0.9))}])
    g = d.groupby(list(by))["abs_err_pct"]
    return pd.DataFrame({"points": g.size(), "median_abs_err_pct": g.median(),
                         "p90_abs_err_pct": g.quantile(0.9)}).reset_index()
