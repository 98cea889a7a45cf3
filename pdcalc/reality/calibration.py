"""What served runs pay beyond the published kernel costs, estimated from the served corpus without leaking:
every error this module reports is out of sample, the run's whole source document left out of the fit.

The terms (:class:`pdcalc.perf.served.ServedTerms`: kernel-time factors ``k_d`` for decode and ``k_p`` for
prefill, a host time ``h`` per scheduler step, the factor ``f`` on it where a role's DP ranks step together, and
a time ``delta`` each request pays outside the engine's steps) belong to a *class* of runs: the card's vendor,
the serving engine and the model family (:func:`term_class`). A class is fitted on its own runs where the training
set holds enough documents of it, else on the first pool of :data:`POOLS` that does: pooled where data are thin.
How many documents are enough (:data:`MIN_SOURCES_CHOICES`) is itself chosen by leaving one source out within the
training set (:func:`choose_min_sources`): a class fitted on two documents that disagree can predict a third worse
than its wider pool.

The fit compares what the client simulation (:func:`pdcalc.perf.scheduler.simulate`) reports with what each run
measured: output tokens/s, mean TPOT and mean TTFT where printed. It minimises the absolute log error, each run
weighted by one over its document's run count so that no document outweighs another, and TTFT (which holds the
queue of a saturated closed loop) a quarter:

.. math:: \\min_{k_d, k_p, h, f, \\delta} \\sum_{r} \\frac{1}{n_{s(r)}} \\sum_{m} w_m \\Bigl|\\log
   \\frac{\\hat y_m(r; k_d, k_p, h, f, \\delta)}{y_m(r)}\\Bigr|

Simulating every run at every candidate is too slow, so each run is simulated once on a design
(:func:`design_points`) and the fit reads an interpolation of it. A closed loop without a KV transfer scales
exactly with the kernel factor (every time in the run is ``k_d`` times longer when ``k_d``, ``k_p``, ``h`` and
``delta`` are), so its design spans ``k_p / k_d``, ``h / k_d`` and ``delta / k_d`` only; other runs span ``k_d`` as
well. A run whose DP ranks step together reads its design at ``f h``, which the host axis spans for every ``f`` of
the fit. The design is
computed by ``tools/calibrate_corpus.py`` and stored (``pdcalc/data/served_design.csv``), with the fit and the
held-out table (``served_calibration.toml``, ``served_held_out.csv``); the test suite re-simulates a sample of
it and refits from it.

Leave one source out (:func:`held_out_frame`): for each document, the terms are fitted on every other document
and its runs simulated at those terms. The held-out log errors, grouped by vendor x metric x model family and
pooled where thin (:func:`error_class_keys`), give each prediction its 80 % range; a held-out point's own range
leaves its document out too, so that the coverage check is out of sample as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from pdcalc.core.precision import round_sig
from pdcalc.perf.scheduler import simulate
from pdcalc.perf.served import ServedTables, ServedTerms, role_dp, served_tables

#: The design each run is simulated on: the decode kernel factor (runs that do not scale with it), the prefill
#: factor relative to it, the host seconds per step relative to it and the seconds per request outside the
#: engine's steps relative to it.
KD_DESIGN = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
RP_DESIGN = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
RH_DESIGN = (0.0, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3)
RD_DESIGN = (0.0, 0.1, 0.2, 0.4, 0.8)
#: The grid the fit searches (interpolated from the design).
KD_FIT = tuple(float(x) for x in np.round(np.geomspace(0.5, 16.0, 31), 4))
RP_FIT = tuple(float(x) for x in np.round(np.geomspace(0.25, 8.0, 16), 4))
RH_FIT = (0.0, *(float(x) for x in np.round(np.geomspace(3e-4, 3e-2, 13), 6)))
RD_FIT = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8)
#: The host-time factor of a role whose DP ranks step together (at the prefill ratio's resolution; its largest
#: times the largest ``h / k_d`` is inside the design).
F_FIT = tuple(float(x) for x in np.round(np.geomspace(1.0, 8.0, 10), 4))
#: Decimals the surrogate's log figures keep: the interpolation's contractions may run in any order, so its last
#: bits differ between machines; rounded, the fit's least is the same everywhere.
SURROGATE_DECIMALS = 10
#: Host time offset of the interpolation axis (seconds): ``log(h / k_d + H0)`` is interpolated linearly.
H0 = 1e-4
#: Weight of each metric in the fit.
METRIC_WEIGHT = {"output_tokens_per_s": 1.0, "tpot_s": 1.0, "ttft_s": 0.25}
#: The choices of how many documents a class needs in a training set to be fitted on its own runs (else pooled):
#: the one a training set takes is chosen by leaving one source out within it (:func:`choose_min_sources`).
MIN_SOURCES_CHOICES = (2, 3, 4)
#: Documents an error class needs for its own range (else pooled): a document's runs share their launch and
#: their machine and err together, so a class's spread is that of its documents, not of its points.
MIN_DOCUMENTS = 6
#: The metrics predicted, as the client reports them.
METRICS = ("output_tokens_per_s", "tpot_s", "ttft_s")
#: The range a prediction carries: the 10th to the 90th percentile of its class's held-out errors.
RANGE = (0.10, 0.90)


# ------------------------------------------------------------------------------ what a run measured
def observed(run) -> dict[str, float]:
    """What ``run`` measured, in the client's terms and SI units: output tokens/s of the whole deployment, mean
    TPOT and mean TTFT in seconds (a median where the source prints no mean); metrics it does not print are
    left out. A total (input + output) rate per card is converted as its source computed it, with the stated
    lengths."""
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
def term_class(run) -> tuple[str, str, str]:
    """The class a run's terms are fitted in: its card's vendor, its engine and its model family."""
    return run.vendor, run.spec.engine, run.model_family


#: Where a class with too few documents borrows its terms, in order: the same engine and model on the other
#: vendor (the engine's software and the model's kernels), the same vendor and model under another engine,
#: the vendor and engine with other models, the vendor, every run. Each pool is named by the class fields
#: it keeps (:func:`pool_key`).
POOLS = (("vendor, engine, model", (0, 1, 2)), ("engine, model", (1, 2)), ("vendor, model", (0, 2)),
         ("vendor, engine", (0, 1)), ("vendor", (0,)), ("all", ()))


def pool_key(cls: tuple[str, str, str], fields: tuple[int, ...]) -> str:
    """The key of a pool of class ``cls``: its kept fields joined by ``/`` (``all`` for every run)."""
    return "/".join(cls[i] for i in fields) if fields else "all"


def error_class_keys(vendor: str, metric: str, family: str) -> tuple[tuple[str, str], ...]:
    """The error classes a prediction's range may come from, most specific first: vendor x metric x model
    family, vendor x metric, metric."""
    return ((f"{vendor}/{metric}/{family}", "vendor x metric x model"), (f"{vendor}/{metric}", "vendor x metric"),
            (metric, "metric"))


# ------------------------------------------------------------------------------ the runs
def predictable_runs() -> list:
    """The corpus runs the served model predicts: a spec that fits in memory and at least one measured
    metric."""
    from pdcalc.reality.served_runs import load

    out = []
    for r in load():
        if r.not_predictable is not None or r.spec is None or not observed(r):
            continue
        if served_tables(r.spec, exclude_sources=(r.source_id,)).fits:
            out.append(r)
    return out


def tables_of(run) -> ServedTables:
    """A run's tables, its MTP acceptance taken from other documents only."""
    return served_tables(run.spec, exclude_sources=(run.source_id,))


def homogeneous(run) -> bool:
    """Whether every time in the run scales with the kernel factor: a closed loop with no KV transfer."""
    return spec_homogeneous(run.spec)


def spec_homogeneous(spec) -> bool:
    w = spec.workload
    return not spec.disaggregated and (w.request_rate is None or w.request_rate == math.inf)


def client_report(t: ServedTables, terms: ServedTerms) -> tuple[float, float, float]:
    """What the client reports for tables ``t`` at ``terms``: output tokens/s, mean TPOT and mean TTFT (s)."""
    r = simulate(t, terms)
    return r.output_tokens_per_s, r.mean_tpot_s, r.mean_ttft_s


def design_points(run) -> list[dict]:
    """``run`` simulated on its design: one row per point, ``kd`` (1 for a homogeneous run, whose other kernel
    factors follow by scaling), ``rp`` (``k_p / k_d``), ``rh`` (``h / k_d``, seconds), ``rd`` (``delta / k_d``,
    seconds) and the client's three figures."""
    return simulate_design(tables_of(run), run.id, homogeneous=homogeneous(run))


def relative_terms(kd, rp, rh, rd, *, dp_host_factor: float = 1.0, label: str = ServedTerms.label) -> ServedTerms:
    """Terms at the design's and the fit grid's coordinates: ``k_d``, ``k_p / k_d``, ``h / k_d``, ``delta / k_d``."""
    return ServedTerms(k_decode=kd, k_prefill=kd * rp, host_s=kd * rh, dp_host_factor=dp_host_factor,
                       request_s=kd * rd, label=label)


def simulate_design(t: ServedTables, run_id: str, *, homogeneous: bool) -> list[dict]:
    """The client simulation of tables ``t`` on the design (see :func:`design_points`)."""
    rows = []
    for kd in (1.0,) if homogeneous else KD_DESIGN:
        for rp in RP_DESIGN:
            for rh in RH_DESIGN:
                for rd in RD_DESIGN:
                    thr, tpot, ttft = client_report(t, relative_terms(kd, rp, rh, rd))
                    rows.append({"id": run_id, "kd": kd, "rp": rp, "rh": rh, "rd": rd,
                                 **{m: round_sig(v, DIGITS) for m, v in zip(METRICS, (thr, tpot, ttft))}})
    return rows


# ------------------------------------------------------------------------------ the surrogate
def _weights(x_design, x_new) -> np.ndarray:
    """The linear-interpolation matrix from ``x_design`` to ``x_new`` (clamped at the ends)."""
    xd, xn = np.asarray(x_design, float), np.asarray(x_new, float)
    eye = np.eye(len(xd))
    return np.stack([np.interp(xn, xd, eye[i]) for i in range(len(xd))], axis=1)


@cache
def _axes(f: float = 1.0):
    """Interpolation matrices from the design to the fit grid; ``f``: the host axis read at ``f`` times the
    grid's host times (a run whose DP ranks step together)."""
    lg = np.log
    w_rp = _weights(lg(RP_DESIGN), lg(RP_FIT))
    w_rh = _weights(lg(np.asarray(RH_DESIGN) + H0), lg(f * np.asarray(RH_FIT) + H0))
    w_kd = _weights(lg(KD_DESIGN), lg(KD_FIT))
    w_rd = _weights(RD_DESIGN, RD_FIT)
    return w_kd, w_rp, w_rh, w_rd


#: Candidates of the kernel factors, the host time and the request time (the fit grid without ``f``).
N_BASE = len(KD_FIT) * len(RP_FIT) * len(RH_FIT) * len(RD_FIT)


@cache
def fit_axes() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``k_d``, ``k_p / k_d``, ``h / k_d`` and ``delta / k_d`` of every candidate of the fit grid without ``f``, in
    the order of :func:`surrogate`'s flattened arrays (kd x rp x rh x rd)."""
    grid = np.meshgrid(KD_FIT, RP_FIT, RH_FIT, RD_FIT, indexing="ij")
    return tuple(np.asarray(a, float).ravel() for a in grid)


def grid_terms(index: int, label: str = "grid") -> ServedTerms:
    """Candidate ``index`` of the fit grid: the candidates of :func:`fit_axes`, each at every ``f`` of
    :data:`F_FIT` (the fastest-varying), flattened as :func:`_objective` flattens its loss."""
    axes = (KD_FIT, RP_FIT, RH_FIT, RD_FIT, F_FIT)
    kd, rp, rh, rd, f = (ax[j] for ax, j in zip(axes, np.unravel_index(index, [len(ax) for ax in axes])))
    return relative_terms(kd, rp, rh, rd, dp_host_factor=f, label=label)


def steps_together(spec) -> bool:
    """Whether ``spec``'s decode (co-located: serving) ranks step together, which the DP host factor applies to
    (the corpus's disaggregated runs have DP ranks on both sides)."""
    return role_dp(spec, "decode") > 1


def surrogate(rows: pd.DataFrame, f: float = 1.0) -> dict[str, np.ndarray]:
    """One run's log figures over the kernel factors, host and request times of the fit grid (flattened kd x rp x
    rh x rd), interpolated from its design rows, with its host times ``f`` times the grid's."""
    w_kd, w_rp, w_rh, w_rd = _axes(f)
    out = {}
    kds = sorted(rows["kd"].unique())
    ordered = rows.sort_values(["kd", "rp", "rh", "rd"])
    for m in METRICS:
        logv = np.log(np.maximum(ordered[m].to_numpy(float), 1e-12))
        if len(kds) == 1:                           # homogeneous: scale by the kernel factor
            g = logv.reshape(len(RP_DESIGN), len(RH_DESIGN), len(RD_DESIGN))
            g = np.einsum("bj,ck,dl,jkl->bcd", w_rp, w_rh, w_rd, g, optimize=True)
            sign = -1.0 if m == "output_tokens_per_s" else 1.0
            full = g[None] + sign * np.log(np.asarray(KD_FIT))[:, None, None, None]
        else:
            g = logv.reshape(len(KD_DESIGN), len(RP_DESIGN), len(RH_DESIGN), len(RD_DESIGN))
            full = np.einsum("ai,bj,ck,dl,ijkl->abcd", w_kd, w_rp, w_rh, w_rd, g, optimize=True)
        out[m] = np.round(full.ravel(), SURROGATE_DECIMALS)
    return out


def grid_surrogate(rows: pd.DataFrame, together: bool) -> dict[str, np.ndarray]:
    """One run's log figures over the whole fit grid: an array ``(N_BASE, len(F_FIT))`` for a run whose DP ranks
    step together, else ``(N_BASE,)`` (the same at every ``f``)."""
    if not together:
        return surrogate(rows)
    per_f = [surrogate(rows, f) for f in F_FIT]
    return {m: np.stack([s[m] for s in per_f], axis=1) for m in METRICS}


@dataclass(frozen=True)
class Point:
    """One predictable run: its class, document, what it measured and its log errors over the fit grid."""

    id: str
    source_id: str
    cls: tuple
    observed: dict
    errors: dict          # metric -> log(predicted / measured) over the grid (see grid_surrogate)


def make_points(runs, design: pd.DataFrame) -> tuple[Point, ...]:
    """Each run with its grid errors, from the stored design."""
    by_id = dict(tuple(design.groupby("id")))
    out = []
    for r in runs:
        s = grid_surrogate(by_id[r.id], steps_together(r.spec))
        obs = observed(r)
        out.append(Point(id=r.id, source_id=r.source_id, cls=term_class(r), observed=obs,
                         errors={m: s[m] - math.log(v) for m, v in obs.items()}))
    return tuple(out)


# ------------------------------------------------------------------------------ fitting
def _objective(pts) -> np.ndarray:
    """The fit's loss at every candidate of the fit grid (flattened, :func:`grid_terms`)."""
    n_src: dict = {}
    for p in pts:
        n_src[p.source_id] = n_src.get(p.source_id, 0) + 1
    total = np.zeros((N_BASE, len(F_FIT)))
    for p in pts:
        for m, e in p.errors.items():
            a = METRIC_WEIGHT[m] * np.abs(e) / n_src[p.source_id]
            total += a if a.ndim == 2 else a[:, None]
    return total.ravel()


class _Pools:
    """The fits of the pools of ``pts`` with some documents left out, each computed once (the choice of
    :data:`MIN_SOURCES_CHOICES` refits the same pools many times)."""

    def __init__(self, pts):
        self.pts = tuple(pts)
        self._memo: dict = {}

    def pool(self, excluded: frozenset, cls: tuple[str, str, str], fields: tuple[int, ...]) -> tuple:
        """One pool of class ``cls`` (the fields of :data:`POOLS` it keeps) without the documents ``excluded``: its
        best :func:`grid_terms` index (None below :data:`MIN_SOURCES_CHOICES`' least), runs and documents."""
        key = (excluded, pool_key(cls, fields))
        if key not in self._memo:
            pool = [p for p in self.pts
                    if p.source_id not in excluded and all(p.cls[i] == cls[i] for i in fields)]
            docs = len({p.source_id for p in pool})
            best = int(np.argmin(_objective(pool))) if docs >= min(MIN_SOURCES_CHOICES) else None
            self._memo[key] = (best, len(pool), docs)
        return self._memo[key]

    def index(self, excluded: frozenset, cls: tuple[str, str, str], min_sources: int):
        """The fit of class ``cls`` without the documents ``excluded``: on the first pool of :data:`POOLS` whose
        runs come from at least ``min_sources`` documents (one of :data:`MIN_SOURCES_CHOICES`). Its :func:`grid_terms`
        index (None where no pool qualifies), the pool's name and key, its runs and documents."""
        if min_sources not in MIN_SOURCES_CHOICES:
            raise ValueError(f"min_sources must be one of {MIN_SOURCES_CHOICES}, got {min_sources!r}")
        for name, fields in POOLS:
            best, runs, docs = self.pool(excluded, cls, fields)
            if docs >= min_sources:
                return best, name, pool_key(cls, fields), runs, docs
        return None, "none", "none", 0, 0

    def terms(self, excluded: frozenset, cls: tuple[str, str, str], min_sources: int) -> tuple[ServedTerms, str, str]:
        """:meth:`index` as terms (the kernels alone where no pool qualifies), with the pool's name and key."""
        best, name, key, runs, docs = self.index(excluded, cls, min_sources)
        if best is None:
            return ServedTerms(), "none", "none"
        return grid_terms(best, f"served corpus, pool {key}: {runs} runs, {docs} documents"), name, key

    def inner_loss(self, excluded: frozenset, min_sources: int) -> float:
        """Leave one source out among the documents not ``excluded``: the fit's objective (:func:`_objective`,
        each document weighing as one) of every document's runs at the terms fitted on the other documents."""
        kept = [p for p in self.pts if p.source_id not in excluded]
        n_src: dict = {}
        for p in kept:
            n_src[p.source_id] = n_src.get(p.source_id, 0) + 1
        total = 0.0
        for p in kept:
            best = self.index(excluded | {p.source_id}, p.cls, min_sources)[0]
            if best is None:
                continue
            for m, e in p.errors.items():
                v = e.ravel()[best] if e.ndim == 2 else e[best // len(F_FIT)]
                total += METRIC_WEIGHT[m] * abs(float(v)) / n_src[p.source_id]
        return total

    def min_sources(self, excluded: frozenset = frozenset()) -> int:
        """The choice of :data:`MIN_SOURCES_CHOICES` with the least :meth:`inner_loss` (the smaller on a tie)."""
        loss = {m: self.inner_loss(excluded, m) for m in MIN_SOURCES_CHOICES}
        return min(MIN_SOURCES_CHOICES, key=lambda m: (loss[m], m))


def fit(pts, cls: tuple[str, str, str], *, min_sources: int) -> tuple[ServedTerms, str, str]:
    """The terms of class ``cls`` fitted on ``pts``: on the first pool of :data:`POOLS` whose runs come from at
    least ``min_sources`` documents; the pool's name and key."""
    return _Pools(pts).terms(frozenset(), cls, min_sources)


def choose_min_sources(pts) -> int:
    """The documents a class of ``pts`` needs to be fitted on its own runs, of :data:`MIN_SOURCES_CHOICES`: the
    choice whose fits predict best when each document of ``pts`` is left out in turn (the held-out table makes
    this choice again inside every training set, so that it never sees the document it predicts)."""
    return _Pools(pts).min_sources()


def corpus_fits(pts) -> tuple[dict[str, dict], int]:
    """Every pool key the corpus can fit (at least :func:`choose_min_sources` documents), fitted on the whole
    corpus: what a user's prediction looks up, most specific pool first; and that number of documents."""
    pools = _Pools(pts)
    need = pools.min_sources()
    out = {}
    for cls in sorted({p.cls for p in pts} | _user_classes()):
        for name, fields in POOLS:
            key = pool_key(cls, fields)
            best, runs, docs = pools.pool(frozenset(), cls, fields)
            if key in out or docs < need:
                continue
            g = grid_terms(best)
            out[key] = {"pool": name, "k_decode": g.k_decode, "k_prefill": g.k_prefill, "host_ms":
                        round(g.host_s * 1e3, 6), "dp_host_factor": g.dp_host_factor,
                        "request_ms": round(g.request_s * 1e3, 6), "runs": runs,
                        "documents": docs}
    return out, need


def _user_classes() -> set:
    """Classes a user may ask for that the corpus may not hold: every engine on every vendor's cards, per family."""
    from pdcalc.layout.served import SERVING_ENGINES

    return {(v, e, f) for v in ("nvidia", "ascend") for e in SERVING_ENGINES for f in ("v3", "v3.2", "v4")}


# ------------------------------------------------------------------------------ held out
def held_out_frame(runs, pts) -> pd.DataFrame:
    """Leave one source out: every run simulated at terms fitted without its document. One row per (run,
    metric): ``id``, ``source_id``, ``vendor``, ``engine``, ``model_family``, ``metric``, ``measured``,
    ``predicted``, ``log_error`` (``log(predicted / measured)``), ``before`` (the kernels alone), ``pool``, the
    terms and ``min_documents``, the documents a class needed in that training set (:func:`choose_min_sources`,
    chosen without the document)."""
    by_id = {r.id: r for r in runs}
    pools = _Pools(pts)
    rows = []
    for src in sorted({p.source_id for p in pts}):
        left_out = frozenset({src})
        need = pools.min_sources(left_out)
        for p in (q for q in pts if q.source_id == src):
            run = by_id[p.id]
            terms, _, key = pools.terms(left_out, p.cls, need)
            t = tables_of(run)
            pred = dict(zip(METRICS, client_report(t, terms)))
            base = dict(zip(METRICS, client_report(t, ServedTerms())))
            for metric, meas in p.observed.items():
                rows.append({"id": p.id, "source_id": src, "vendor": p.cls[0], "engine": p.cls[1],
                             "model_family": p.cls[2], "metric": metric, "measured": meas,
                             "predicted": pred[metric], "log_error": math.log(pred[metric] / meas),
                             "before": base[metric], "pool": key, "k_decode": terms.k_decode,
                             "k_prefill": terms.k_prefill, "host_ms": terms.host_s * 1e3,
                             "dp_host_factor": terms.dp_host_factor, "request_ms": terms.request_s * 1e3,
                             "min_documents": need})
    return pd.DataFrame(rows)


def _class_errors(df: pd.DataFrame, vendor: str, metric: str, family: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Held-out log errors of a class and their weights (each document counts once), pooled where the class
    holds fewer than :data:`MIN_DOCUMENTS` documents."""
    for key, _ in error_class_keys(vendor, metric, family):
        d = df[_in_class(df, key)]
        if d["source_id"].nunique() >= MIN_DOCUMENTS or key == metric:
            w = 1.0 / d.groupby("source_id")["source_id"].transform("size").to_numpy(float)
            return d["log_error"].to_numpy(float), w, key
    raise AssertionError("unreachable: the metric class is the last pool")


def _in_class(df: pd.DataFrame, key: str) -> pd.Series:
    parts = key.split("/")
    sel = df["metric"] == parts[1 if len(parts) >= 2 else 0]
    if len(parts) >= 2:
        sel &= df["vendor"] == parts[0]
    if len(parts) == 3:
        sel &= df["model_family"] == parts[2]
    return sel


def weighted_quantiles(e: np.ndarray, w: np.ndarray, qs) -> list[float]:
    """Quantiles ``qs`` of ``e`` with weights ``w`` (midpoint rule: each value at the middle of its weight)."""
    order = np.argsort(e, kind="stable")
    e, w = e[order], w[order]
    cw = (np.cumsum(w) - w / 2) / w.sum()
    return [float(np.interp(q, cw, e)) for q in qs]


def error_quantiles(df: pd.DataFrame) -> dict[str, dict]:
    """The document-weighted 10th and 90th percentile of held-out log errors of every error class that holds at
    least :data:`MIN_DOCUMENTS` documents (and of every metric)."""
    out = {}
    for (vendor, metric, family), _ in df.groupby(["vendor", "metric", "model_family"]):
        for key, _ in error_class_keys(vendor, metric, family):
            d = df[_in_class(df, key)]
            if key in out or (d["source_id"].nunique() < MIN_DOCUMENTS and key != metric):
                continue
            w = 1.0 / d.groupby("source_id")["source_id"].transform("size").to_numpy(float)
            lo, hi = weighted_quantiles(d["log_error"].to_numpy(float), w, RANGE)
            out[key] = {"q10": lo, "q90": hi, "points": int(len(d)), "documents": int(d["source_id"].nunique())}
    return out


def interval(df: pd.DataFrame, predicted: float, vendor: str, metric: str, family: str, *,
             exclude_source: str | None = None) -> tuple[float, float, str]:
    """The 80 % range of a prediction from the held-out errors ``df`` (leaving out ``exclude_source``):
    ``predicted / exp(q90)`` to ``predicted / exp(q10)``; and the class used."""
    if exclude_source is not None:
        df = df[df["source_id"] != exclude_source]
    e, w, key = _class_errors(df, vendor, metric, family)
    lo_q, hi_q = weighted_quantiles(e, w, RANGE)
    return predicted / math.exp(hi_q), predicted / math.exp(lo_q), key


def with_ranges(df: pd.DataFrame) -> pd.DataFrame:
    """Each held-out point with its own out-of-sample 80 % range (its document left out of the errors too) and
    whether the measurement falls in it."""
    df = df.copy()
    lows, highs, inside = [], [], []
    for r in df.itertuples():
        lo, hi, _ = interval(df, r.predicted, r.vendor, r.metric, r.model_family, exclude_source=r.source_id)
        lows.append(lo)
        highs.append(hi)
        inside.append(bool(lo <= r.measured <= hi))
    df["low"], df["high"], df["covered"] = lows, highs, inside
    return df


def summary(df: pd.DataFrame, by: tuple[str, ...] = (), *, column: str = "log_error") -> pd.DataFrame:
    """Median and 90th-percentile absolute error (%) and points, overall or by columns ``by``; ``column``:
    ``log_error`` (the served model held out) or ``before_log_error`` (the kernels alone)."""
    err = (np.exp(df[column].abs()) - 1) * 100
    d = df.assign(abs_err_pct=err)
    if not by:
        return pd.DataFrame([{"points": len(d), "median_abs_err_pct": float(np.median(err)),
                              "p90_abs_err_pct": float(np.quantile(err, 0.9))}])
    g = d.groupby(list(by))["abs_err_pct"]
    return pd.DataFrame({"points": g.size(), "median_abs_err_pct": g.median(),
                         "p90_abs_err_pct": g.quantile(0.9)}).reset_index()


# ------------------------------------------------------------------------------ the stored fit
#: Files the corpus fit is stored in (``tools/calibrate_corpus.py`` writes them), under ``pdcalc/data``.
DESIGN_FILE = "served_design.csv"
HELD_OUT_FILE = "served_held_out.csv"
CALIBRATION_FILE = "served_calibration.toml"
#: Significant figures the stored figures keep (simulated times are exact to far more; this is what the
#: comparison of a fresh simulation with the stored one allows).
DIGITS = 6


def _data_path(name: str):
    from importlib import resources

    return resources.files("pdcalc").joinpath("data", name)


@cache
def stored_design() -> pd.DataFrame:
    """The stored design: every predictable run simulated on its design points."""
    with _data_path(DESIGN_FILE).open() as f:
        return pd.read_csv(f)


@cache
def stored_held_out() -> pd.DataFrame:
    """The stored held-out table (:func:`held_out_frame` with :func:`with_ranges`)."""
    with _data_path(HELD_OUT_FILE).open() as f:
        return pd.read_csv(f)


@cache
def stored() -> dict:
    """The stored corpus fit: ``fit`` (``min_documents``, :func:`choose_min_sources` on the whole corpus), ``terms``
    per pool key, ``errors`` (held-out quantiles) per error class and the held-out ``summary``."""
    import tomllib

    with _data_path(CALIBRATION_FILE).open("rb") as f:
        return tomllib.load(f)


def build(runs, design: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The held-out table and the calibration (terms per pool, error quantiles, summary) from a design."""
    pts = make_points(runs, design)
    df = with_ranges(held_out_frame(runs, pts))
    df["before_log_error"] = np.log(df["before"] / df["measured"])
    scored = df[df["metric"].isin(("output_tokens_per_s", "tpot_s"))]
    summ = {}
    for name, sel in (("all", scored), *((f"vendor {v}", scored[scored["vendor"] == v])
                                         for v in sorted(scored["vendor"].unique())),
                      *((f"model {f}", scored[scored["model_family"] == f])
                        for f in sorted(scored["model_family"].unique()))):
        s, b = summary(sel).iloc[0], summary(sel, column="before_log_error").iloc[0]
        summ[name] = {"points": int(s["points"]), "median_abs_err_pct": round(float(s["median_abs_err_pct"]), 1),
                      "p90_abs_err_pct": round(float(s["p90_abs_err_pct"]), 1),
                      "before_median_abs_err_pct": round(float(b["median_abs_err_pct"]), 1),
                      "before_p90_abs_err_pct": round(float(b["p90_abs_err_pct"]), 1),
                      "coverage_pct": round(100 * float(sel["covered"].mean()), 1)}
    terms, need = corpus_fits(pts)
    cal = {"fit": {"min_documents": need}, "terms": terms, "errors": error_quantiles(df), "summary": summ}
    return df, cal


def calibration_toml(cal: dict) -> str:
    """The calibration as TOML text (keys quoted: pool and class keys hold ``/`` and ``.``)."""
    def value(v):
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, float):
            return repr(round_sig(v, DIGITS))
        return repr(v)

    lines = ["# The served model's corpus fit: written by tools/calibrate_corpus.py from served_design.csv",
             "# (every predictable run of served.toml simulated on its design); do not edit by hand.",
             "# [fit]: min_documents, the documents a class needs to be fitted on its own runs (chosen by leaving",
             "# one source out; else its pool);",
             "# [terms.\"POOL\"]: the terms fitted on a pool of runs (k_decode, k_prefill: kernel-time factors;",
             "# host_ms: host milliseconds per scheduler step; dp_host_factor: its factor where DP ranks step together;",
             "# request_ms: milliseconds each request pays outside the engine's steps);",
             "# [errors.\"CLASS\"]: 10th and 90th percentile of",
             "# held-out log errors log(predicted / measured); [summary.\"GROUP\"]: held-out |error| (%) over",
             "# output tokens/s and TPOT, and the kernels alone (before_*)."]
    lines += ["", "[fit]", *(f"{k} = {value(v)}" for k, v in cal["fit"].items())]
    for table in ("terms", "errors", "summary"):
        for key, row in cal[table].items():
            lines.append("")
            lines.append(f'[{table}."{key}"]')
            lines.extend(f"{k} = {value(v)}" for k, v in row.items())
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ what the book shows
METRIC_NAMES = {"output_tokens_per_s": "output tokens/s", "tpot_s": "TPOT", "ttft_s": "TTFT"}


def held_out_table(held: pd.DataFrame | None = None) -> pd.DataFrame:
    """The held-out errors by group: every point, then by vendor, model family, engine and metric. Columns: the
    group, points, median and 90th-percentile |error| (%) of the served model and of the kernels alone, and the
    share of points inside their 80 % range (%). Output tokens/s and TPOT only, except in the rows by metric."""
    held = stored_held_out() if held is None else held
    scored = held[held["metric"].isin(("output_tokens_per_s", "tpot_s"))]
    rows = []

    def add(name: str, d: pd.DataFrame) -> None:
        s, b = summary(d).iloc[0], summary(d, column="before_log_error").iloc[0]
        rows.append({"group": name, "points": int(s["points"]), "median |error| (%)": round(s["median_abs_err_pct"]),
                     "90th pct |error| (%)": round(s["p90_abs_err_pct"]),
                     "in 80 % range (%)": round(100 * d["covered"].mean()),
                     "kernels alone: median (%)": round(b["median_abs_err_pct"]),
                     "kernels alone: 90th pct (%)": round(b["p90_abs_err_pct"])})

    add("all (output tokens/s and TPOT)", scored)
    for col, label in (("vendor", "vendor"), ("model_family", "model"), ("engine", "engine")):
        for key, d in scored.groupby(col):
            add(f"{label}: {key}", d)
    for key, d in held.groupby("metric"):
        add(f"metric: {METRIC_NAMES[key]}", d)
    return pd.DataFrame(rows)


def _sig3(x: float) -> str:
    """A figure at three significant figures with thousands separators, never in e-notation."""
    from pdcalc.core.precision import round_sig

    v = round_sig(float(x), 3)
    return f"{v:,.{max(0, 2 - math.floor(math.log10(abs(v))))}f}" if v else "0"


def largest_misses(held: pd.DataFrame | None = None, n: int = 12) -> pd.DataFrame:
    """The ``n`` held-out points of output tokens/s and TPOT the served model misses most, with their range and
    the pool their terms came from."""
    held = stored_held_out() if held is None else held
    d = held[held["metric"].isin(("output_tokens_per_s", "tpot_s"))].copy()
    d["ratio"] = np.exp(d["log_error"])
    d = d.reindex(d["log_error"].abs().sort_values(ascending=False).index).head(n)
    scale = np.where(d["metric"] == "tpot_s", 1e3, 1.0)
    return pd.DataFrame({"run": d["id"], "figure": d["metric"].map({"output_tokens_per_s": "output tokens/s",
                                                                    "tpot_s": "TPOT (ms)"}),
                         "measured": d["measured"] * scale, "predicted": d["predicted"] * scale,
                         "80 % range": [f"{_sig3(lo)} to {_sig3(hi)}" for lo, hi in zip(d["low"] * scale, d["high"] * scale)],
                         "predicted / measured": d["ratio"], "terms from": d["pool"]}).reset_index(drop=True)


def key_numbers() -> dict:
    """What the book glues about the served corpus and the held-out errors."""
    from pdcalc.reality.served_runs import summary as corpus

    c = corpus()
    held = stored_held_out()
    s = stored()["summary"]
    out = {"served_range_pct": round(100 * (RANGE[1] - RANGE[0])), "served_q_lo": round(100 * RANGE[0]),
           "served_q_hi": round(100 * RANGE[1]), "served_min_docs": MIN_DOCUMENTS,
           "served_class_docs": stored()["fit"]["min_documents"],
           "served_class_choices": ", ".join(str(m) for m in MIN_SOURCES_CHOICES[:-1])
           + f" or {MIN_SOURCES_CHOICES[-1]}",
           "served_runs": c["runs"], "served_docs": c["sources"], "served_ascend": c["ascend"],
           "served_910b": c["ascend_910b"], "served_v4": c["v4"], "served_engines": c["engines"],
           "served_predicted": int(held["id"].nunique()), "served_points": int(s["all"]["points"]),
           "served_held_docs": int(held["source_id"].nunique())}
    for key, name in (("all", ""), ("vendor ascend", "_ascend"), ("vendor nvidia", "_nvidia"), ("model v4", "_v4"),
                      ("model v3", "_v3"), ("model v3.2", "_v32")):
        if key in s:
            for k in ("median_abs_err_pct", "p90_abs_err_pct", "coverage_pct", "before_median_abs_err_pct",
                      "before_p90_abs_err_pct"):
                out[f"served_{k}{name}"] = s[key][k]
    out.update(_v4_ascend_numbers(held))
    out.update(_window_pool_numbers(held))
    out.update(_low_latency_numbers(held))
    out.update(_delayer_numbers(held))
    return out


def _signed_pct(log_errors) -> list[str]:
    return [f"{100 * (math.exp(e) - 1):+.0f} %" for e in log_errors]


def _error_span(log_errors: pd.Series) -> str:
    """The least and the largest of some held-out log errors as signed percentages: "-24 % to +14 %" (one
    figure where they are the same)."""
    lo, hi = _signed_pct((log_errors.min(), log_errors.max()))
    return lo if lo == hi else f"{lo} to {hi}"


def _v4_ascend_numbers(held: pd.DataFrame) -> dict:
    """DeepSeek-V4 on Ascend, held out: the pools its documents were predicted with, and the errors of its
    disaggregated and of its co-located runs (output tokens/s), as the validation chapter words them."""
    from pdcalc.reality.served_runs import get

    rows = held[(held["vendor"] == "ascend") & (held["model_family"] == "v4")
                & (held["metric"] == "output_tokens_per_s")]
    if rows.empty:
        return {}
    split = rows["id"].map(lambda i: get(i).spec.disaggregated)
    out = {"served_v4_ascend_pools": ", ".join(sorted(rows["pool"].unique()))}
    for name, sel in (("pd", rows[split]), ("colocated", rows[~split])):
        if not sel.empty:
            out[f"served_v4_ascend_{name}"] = _error_span(sel["log_error"])
    return out


def _window_pool_numbers(held: pd.DataFrame) -> dict:
    """SGLang's DeepSeek-V4-Pro on the H200, held out: the requests its window pool lets run at once (the decode
    batch cap of runs it bounds) and the errors of their output tokens/s, as the validation chapter words them."""
    from pdcalc.perf.served import WINDOW_POOL
    from pdcalc.reality.served_runs import get

    rows = held[(held["engine"] == "sglang") & (held["metric"] == "output_tokens_per_s")]
    rows = rows[rows["id"].map(lambda i: (get(i).spec.model, get(i).spec.card) == ("deepseek-v4-pro", "h200"))]
    caps = [(t.decode.max_batch * t.decode.ranks) for t in (tables_of(get(i)) for i in rows["id"])
            if t.decode.cap == WINDOW_POOL]
    if not caps:
        return {}
    return {"served_window_runs": len(rows), "served_window_bound": len(caps),
            "served_window_running": f"{math.floor(min(caps))} to {math.floor(max(caps))}",
            "served_window_errors": _error_span(rows["log_error"])}


def _delayer_numbers(held: pd.DataFrame) -> dict:
    """The runs whose launch turns on SGLang's prefill delayer, held out: how many, and their TPOT and output errors."""
    from pdcalc.reality.served_runs import get

    rows = held[held["id"].map(lambda i: bool(getattr(get(i).spec.serve, "prefill_delay_passes", None)))]
    if rows.empty:
        return {}
    return {"served_delayer_runs": int(rows["id"].nunique()),
            **{f"served_delayer_{m}": _error_span(rows.loc[rows["metric"] == m, "log_error"])
               for m in ("tpot_s", "output_tokens_per_s")}}


#: The SGLang cookbook's DeepSeek-V4 benchmark table (a document of the served corpus).
SGLANG_V4_COOKBOOK = "sgl-project/sglang:docs_new/src/snippets/configs/deepseek-ai/deepseek-v4-benchmarks.jsx"


def _span_s(seconds: list[float]) -> str:
    """Seconds at two decimals: "0.32 to 0.48 s" (one figure where they round the same)."""
    lo, hi = f"{min(seconds):.2f}", f"{max(seconds):.2f}"
    return f"{lo} s" if lo == hi else f"{lo} to {hi} s"


def _low_latency_numbers(held: pd.DataFrame) -> dict:
    """The SGLang cookbook's DeepSeek-V4 runs of 16 concurrent requests, held out: their TPOT errors, the TPOT the
    same simulation gives with prefill costing nothing over the measured one (median), the measured TTFT at 16
    concurrent requests over that at one of the same cell (median), the single-request TTFTs of DeepSeek-V4-Flash
    on the cards whose prompt the kernels price longest and shortest (and how far apart), and the request time
    these runs were predicted with, as the validation chapter words them."""
    from dataclasses import replace

    from pdcalc.reality.served_runs import get, load

    cells = {replace(r.spec, workload=None): r for r in load()
             if r.source_id == SGLANG_V4_COOKBOOK and r.spec is not None and r.spec.workload.concurrency == 1}
    rows = held[(held["source_id"] == SGLANG_V4_COOKBOOK) & (held["metric"] == "tpot_s")]
    rows = rows[rows["id"].map(lambda i: get(i).spec.workload.concurrency == 16)]
    if rows.empty:
        return {}
    free, ttft = [], []
    for r in rows.itertuples():
        run = get(r.id)
        free_prefill = replace(ServedTerms.from_dict(r._asdict()), k_prefill=0.0)
        free.append(simulate(tables_of(run), free_prefill).mean_tpot_s / r.measured)
        single = cells.get(replace(run.spec, workload=None))
        if single is not None:
            ttft.append(observed(run)["ttft_s"] / observed(single)["ttft_s"])
    one = [(tables_of(r).prefill.prompt_s, observed(r)["ttft_s"], r.spec.card.upper()) for r in cells.values()
           if r.spec.model == "deepseek-v4-flash"]
    slow, fast = max(one)[0], min(one)[0]
    fast_ttft = [t for p, t, _ in one if p == fast]
    return {"served_ll16_tpot": _error_span(rows["log_error"]), "served_ll16_runs": len(rows),
            "served_ll16_noprefill": f"{100 * float(np.median(free)):.0f} %",
            "served_ll_ttft_ratio": f"{float(np.median(ttft)):.1f}" if ttft else "not measured",
            "served_ll1_runs": len(one), "served_ll1_prefill_ratio": f"{slow / fast:.1f}",
            "served_ll1_slow": ", ".join(sorted({c for p, _, c in one if p == slow})),
            "served_ll1_slow_ttft": _span_s([t for p, t, _ in one if p == slow]),
            "served_ll1_fast": ", ".join(sorted({c for p, _, c in one if p == fast})),
            "served_ll1_fast_ttft": _span_s(fast_ttft),
            "served_ll_request_ms": f"{float(np.median(rows['request_ms'])):.0f} ms"}
