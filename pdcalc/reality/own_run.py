"""A user's own benchmark run: the served terms fitted on it (``pdcalc calibrate``), checked against its spec,
written as a calibration file, and how far they move the spec's predictions at other loads. The corpus's fit
(:mod:`pdcalc.reality.calibration`) is the prior; the surrogate and the design are its."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pdcalc.core.precision import round_sig
from pdcalc.perf.scheduler import simulate
from pdcalc.perf.served import ServedTerms, served_tables
from pdcalc.reality.calibration import (DIGITS, H0, METRIC_WEIGHT, METRICS, client_report, fit_axes,
                                        relative_terms, simulate_design, spec_homogeneous, steps_together, surrogate)

#: Weight of the corpus terms in a one-run calibration: a tie-breaker, so that what one run cannot tell apart
#: (its prefill factor when it printed no TTFT, say) stays at the corpus's value.
PRIOR_WEIGHT = 0.002
#: Offset of the request time's search coordinate (seconds): ``log(delta / k_d + D0)`` is searched.
D0 = 1e-2


@dataclass(frozen=True)
class OwnCalibration:
    """Terms fitted on one measured run, with what it measured and the predictions before and after."""

    terms: ServedTerms
    prior: ServedTerms
    measured: dict
    before: dict          # metric -> predicted at the corpus terms
    after: dict           # metric -> predicted at the fitted terms


def calibrate_run(spec, measured: dict[str, float], prior: ServedTerms, *, label: str) -> OwnCalibration:
    """Terms fitted on one run of ``spec`` that measured ``measured`` (metric -> value in SI units, of
    :data:`METRICS`): the grid point of least weighted absolute log error, the distance from ``prior`` (the
    corpus's terms) weighted by :data:`PRIOR_WEIGHT` breaking ties, refined on the simulation itself. The DP host
    factor stays the corpus's: one run cannot tell it from the host time (nor, without a TTFT, the request time
    from the prefill factor: the prior keeps it where the run cannot tell)."""
    t = served_tables(spec)
    f = prior.dp_host_factor if steps_together(spec) else 1.0
    rows = pd.DataFrame(simulate_design(t, label, homogeneous=spec_homogeneous(spec)))
    s = surrogate(rows, f)
    obj = sum(METRIC_WEIGHT[m] * np.abs(s[m] - math.log(v)) for m, v in measured.items())
    kd, rp, rh, rd = fit_axes()
    p_rp, p_rh = prior.k_prefill / prior.k_decode, prior.host_s / prior.k_decode
    p_rd = prior.request_s / prior.k_decode
    obj = obj + PRIOR_WEIGHT * (np.abs(np.log(kd / prior.k_decode)) + np.abs(np.log(rp / p_rp))
                                + np.abs(np.log((rh + H0) / (p_rh + H0))) + np.abs(np.log((rd + D0) / (p_rd + D0))))
    i = int(np.argmin(obj))

    def terms_at(x) -> ServedTerms:             # x: log k_d, log k_p / k_d, log(h / k_d + H0), log(delta / k_d + D0)
        return relative_terms(math.exp(x[0]), math.exp(x[1]), max(math.exp(x[2]) - H0, 0.0),
                              max(math.exp(x[3]) - D0, 0.0), dp_host_factor=prior.dp_host_factor)

    x_prior = [math.log(prior.k_decode), math.log(p_rp), math.log(p_rh + H0), math.log(p_rd + D0)]

    def loss(x) -> float:
        got = dict(zip(METRICS, client_report(t, terms_at(x))))
        return (sum(METRIC_WEIGHT[m] * abs(math.log(got[m] / v)) for m, v in measured.items())
                + PRIOR_WEIGHT * sum(abs(a - b) for a, b in zip(x, x_prior)))

    x = [math.log(kd[i]), math.log(rp[i]), math.log(rh[i] + H0), math.log(rd[i] + D0)]
    g = terms_at(_pattern_search(loss, x, step=0.16, last=0.01))
    terms = ServedTerms(k_decode=round_sig(g.k_decode, DIGITS), k_prefill=round_sig(g.k_prefill, DIGITS),
                        host_s=round_sig(g.host_s * 1e3, DIGITS) / 1e3, dp_host_factor=prior.dp_host_factor,
                        request_s=round_sig(g.request_s * 1e3, DIGITS) / 1e3, label=f"calibrated on {label}")
    before = dict(zip(METRICS, client_report(t, prior)))
    after = dict(zip(METRICS, client_report(t, terms)))
    return OwnCalibration(terms=terms, prior=prior, measured=dict(measured), before=before, after=after)


def result_metrics(res, spec, source: str) -> dict[str, float]:
    """What a client's result file measured (SI units, :data:`METRICS`), after checking that it is a run of
    ``spec``'s workload: the same concurrency and number of prompts where both state them, and mean lengths
    within :data:`LENGTH_TOLERANCE` of the spec's."""
    from pdcalc.core.errors import ConfigError

    w = spec.workload
    if res.concurrency is not None and w.concurrency is not None and res.concurrency != w.concurrency:
        raise ConfigError(source, "max_concurrency", f"{res.concurrency} in the result, {w.concurrency} in the spec's "
                          "[workload] concurrency: give the spec of the run that wrote it")
    if res.num_prompts is not None and w.num_prompts is not None and res.num_prompts != w.num_prompts:
        raise ConfigError(source, "num_prompts", f"{res.num_prompts} in the result, {w.num_prompts} in the spec's "
                          "[workload] num_prompts")
    for got, want, what in ((res.mean_input_tokens, w.mean_prompt, "prompt"),
                            (res.mean_output_tokens, w.mean_output, "output")):
        if got is not None and abs(got / want - 1) > LENGTH_TOLERANCE:
            raise ConfigError(source, f"mean {what} tokens", f"{got:,.0f} per request in the result, {want:,.0f} in "
                              f"the spec ([workload] {what}, min_length_ratio)")
    out = {}
    if res.output_tokens_per_s is not None:
        out["output_tokens_per_s"] = res.output_tokens_per_s
    if res.mean_tpot_ms is not None:
        out["tpot_s"] = res.mean_tpot_ms / 1e3
    if res.mean_ttft_ms is not None:
        out["ttft_s"] = res.mean_ttft_ms / 1e3
    return {k: v for k, v in out.items() if v > 0}


#: How far a result's mean lengths may be from its spec's (a client's random lengths, EOS before the cap).
LENGTH_TOLERANCE = 0.25


def calibration_file(c: OwnCalibration, *, spec_path: str, result_path: str) -> str:
    """A calibration as ``pdcalc calibrate -o`` writes it (``pdcalc predict --calibration`` reads it)."""
    def num(x: float) -> str:
        return repr(round_sig(float(x), DIGITS))

    def fields(terms: ServedTerms) -> list[str]:
        return [f"{k} = {num(v)}" for k, v in terms.as_dict().items() if k != "from"]

    lines = ["# Served terms fitted on one measured run (pdcalc calibrate).", "[terms]", *fields(c.terms), "",
             "[run]", f"id = {json_str(result_path)}", f"spec = {json_str(spec_path)}", "", "[prior]",
             f"from = {json_str(c.prior.label)}", *fields(c.prior), ""]
    for title, d in (("measured", c.measured), ("predicted_before", c.before), ("predicted_after", c.after)):
        lines.append(f"[{title}]")
        lines.extend(f"{k} = {num(v)}" for k, v in d.items() if k in c.measured)
        lines.append("")
    return "\n".join(lines)


def json_str(s: str) -> str:
    """``s`` as a TOML basic string."""
    import json

    return json.dumps(str(s), ensure_ascii=False)


def _pattern_search(f, x, *, step: float, last: float) -> list[float]:
    """A compass search: move one coordinate by ``step`` while ``f`` falls, halving the step down to ``last``
    (the one-run calibration refined on the simulation itself, from the grid's best point)."""
    x, best = list(x), f(x)
    while step >= last:
        moved = False
        for i in range(len(x)):
            for d in (step, -step):
                y = list(x)
                y[i] += d
                v = f(y)
                if v < best - 1e-12:
                    x, best, moved = y, v, True
                    break
        if not moved:
            step /= 2
    return x


def other_loads(spec, prior: ServedTerms, terms: ServedTerms) -> list[dict]:
    """How far ``terms`` move ``spec``'s predictions from ``prior``'s at a quarter, half, twice and four times its
    load (concurrency, request rate, or prompts sent at once): one row per load, the moves in %."""
    from dataclasses import replace

    w = spec.workload
    out = []
    for f in (0.25, 0.5, 2.0, 4.0):
        if w.concurrency:
            c = max(1, round(w.concurrency * f))
            work = replace(w, concurrency=c, num_prompts=max(c, round((w.num_prompts or 4 * w.concurrency) * f)))
            load = f"concurrency {c:,}"
        elif w.request_rate == math.inf:
            n = max(1, round(w.num_prompts * f))
            work = replace(w, num_prompts=n)
            load = f"{n:,} prompts at once"
        else:
            work = replace(w, request_rate=w.request_rate * f)
            load = f"{w.request_rate * f:.3g} requests/s"
        t = served_tables(replace(spec, workload=work))
        a, b = simulate(t, prior), simulate(t, terms)
        out.append({"load": load, "output_moves_pct": 100 * (b.output_tokens_per_s / a.output_tokens_per_s - 1),
                    "tpot_moves_pct": 100 * (b.mean_tpot_s / a.mean_tpot_s - 1)})
    return out
