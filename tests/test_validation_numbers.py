"""What the validation chapter states about SGLang's DeepSeek-V4 runs, recomputed from the held-out table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pdcalc.perf.scheduler import simulate
from pdcalc.perf.served import WINDOW_POOL, ServedTerms
from pdcalc.reality import calibration as cal
from pdcalc.reality.served_runs import get


def _held():
    return cal.stored_held_out()


def test_the_window_pool_caps_every_v4_pro_run_on_the_h200():
    held = _held()
    k = cal._window_pool_numbers(held)
    rows = held[(held["engine"] == "sglang") & (held["metric"] == "output_tokens_per_s")]
    rows = rows[rows["id"].map(lambda i: (get(i).spec.model, get(i).spec.card) == ("deepseek-v4-pro", "h200"))]
    assert k["served_window_runs"] == len(rows) > 0
    caps = []
    for i in rows["id"]:
        t = cal.tables_of(get(i))
        assert t.decode.cap == WINDOW_POOL
        caps.append(math.floor(t.decode.max_batch * t.decode.ranks))
    assert k["served_window_running"] == f"{min(caps)} to {max(caps)}"
    lo, hi = (100 * (math.exp(e) - 1) for e in (rows["log_error"].min(), rows["log_error"].max()))
    assert k["served_window_errors"] == f"{lo:+.0f} % to {hi:+.0f} %"


def test_free_prefill_shortens_the_low_latency_tpot():
    """The chapter's claim that prefill, not the decode step, makes these TPOTs long: with the prefill factor at
    zero the simulated TPOT of every run falls, and its median over the measured one is what is glued."""
    held = _held()
    k = cal._low_latency_numbers(held)
    rows = held[(held["source_id"] == cal.SGLANG_V4_COOKBOOK) & (held["metric"] == "tpot_s")]
    rows = rows[rows["id"].map(lambda i: get(i).spec.workload.concurrency == 16)]
    assert k["served_ll16_runs"] == len(rows) > 0
    free = []
    for r in rows.itertuples():
        t = cal.tables_of(get(r.id))
        base = dict(k_decode=r.k_decode, host_s=r.host_ms / 1e3, dp_host_factor=r.dp_host_factor,
                    request_s=r.request_ms / 1e3)
        with_prefill = simulate(t, ServedTerms(k_prefill=r.k_prefill, **base)).mean_tpot_s
        without = simulate(t, ServedTerms(k_prefill=0.0, **base)).mean_tpot_s
        assert without < with_prefill
        assert abs(math.log(with_prefill / r.predicted)) < 0.01       # the held-out prediction, re-simulated
        free.append(without / r.measured)
    assert k["served_ll16_noprefill"] == f"{100 * float(np.median(free)):.0f} %"


def test_a_lone_requests_ttft_does_not_follow_its_prefill():
    """The chapter's evidence for a time outside the engine's steps: of the cookbook's single-request runs of
    DeepSeek-V4-Flash, the one whose prompt the kernels price longest got its first token sooner than those they
    price shortest; and the request time glued is the one the held-out runs were predicted with."""
    from pdcalc.reality.served_runs import load

    held = _held()
    k = cal._low_latency_numbers(held)
    one = [r for r in load() if r.source_id == cal.SGLANG_V4_COOKBOOK and r.spec is not None
           and r.spec.workload.concurrency == 1 and r.spec.model == "deepseek-v4-flash"]
    assert k["served_ll1_runs"] == len(one) > 1
    by_prefill = sorted((cal.tables_of(r).prefill.prompt_s, r.metric("ttft_ms_mean").value / 1e3, r.spec.card)
                        for r in one)
    slow, fast = by_prefill[-1], by_prefill[0]
    assert float(k["served_ll1_prefill_ratio"]) == pytest.approx(slow[0] / fast[0], abs=0.05) and slow[0] > 2 * fast[0]
    assert k["served_ll1_slow"] == slow[2].upper() and k["served_ll1_slow_ttft"] == f"{slow[1]:.2f} s"
    fast_ttft = [t for p, t, _ in by_prefill if p == fast[0]]
    assert k["served_ll1_fast_ttft"] == f"{min(fast_ttft):.2f} to {max(fast_ttft):.2f} s"
    assert slow[1] < min(fast_ttft)
    rows = held[(held["source_id"] == cal.SGLANG_V4_COOKBOOK) & (held["metric"] == "tpot_s")]
    rows = rows[rows["id"].map(lambda i: get(i).spec.workload.concurrency == 16)]
    assert k["served_ll_request_ms"] == f"{float(np.median(rows['request_ms'])):.0f} ms"


def test_the_delayer_runs_errors():
    """The runs whose launch turns on SGLang's prefill delayer: every one is a co-located SGLang run of DP ranks,
    and the glued spans are their held-out errors."""
    held = _held()
    k = cal._delayer_numbers(held)
    ids = {r.id for r in cal.predictable_runs() if r.spec.serve and r.spec.serve.prefill_delay_passes}
    assert k["served_delayer_runs"] == len(ids) > 0
    for m in ("tpot_s", "output_tokens_per_s"):
        errs = held[held["id"].isin(ids) & (held["metric"] == m)]["log_error"]
        lo, hi = (100 * (math.exp(e) - 1) for e in (errs.min(), errs.max()))
        assert k[f"served_delayer_{m}"] == f"{lo:+.0f} % to {hi:+.0f} %"
    for i in ids:
        assert get(i).spec.engine == "sglang" and get(i).spec.serve.dp > 1
