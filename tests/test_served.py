"""The served model: the client simulation's arithmetic, the stored corpus fit against a fresh simulation and
refit, predictions with ranges, a user's own calibration, and the predict / calibrate / validate commands."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cli_harness import run_cli
from pdcalc.core.errors import ConfigError
from pdcalc.layout.served import client_lengths, spec_from_dict
from pdcalc.perf.scheduler import _Delayer, simulate
from pdcalc.perf.served import ServedTerms, chunk_s, served_tables
from pdcalc.reality import calibration as cal
from pdcalc.reality import own_run
from pdcalc.reality.predict import load_calibration, predict
from pdcalc.reality.served_runs import get

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "data" / "results"
DEEPSEEK_RESULT = RESULTS / "sglang" / "datacrunch_h200_deepseek_dp_mla_output.jsonl"
DEEPSEEK_SPEC = Path(__file__).resolve().parent / "data" / "served_specs" / "datacrunch_h200_deepseek_dp_mla.toml"
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
TERMS = ServedTerms(k_decode=1.7, k_prefill=2.3, host_s=0.004)


def spec(serve=None, workload=None, engine="vllm", **top):
    d = {"model": "deepseek-v3", "card": "h200", "engine": engine, "serve": serve or {"tp": 8},
         "workload": workload or {"prompt": 1000, "output": 200, "concurrency": 1, "num_prompts": 1}, **top}
    return spec_from_dict(d, "test")


# ------------------------------------------------------------------------------ the simulation
def test_one_request_is_one_prefill_then_decode_steps():
    t = served_tables(spec())
    r = simulate(t, TERMS)
    prefill = TERMS.k_prefill * float(chunk_s(t.prefill, 1000, mixed=False)) + TERMS.host_s
    step = TERMS.k_decode * float(np.interp(1, t.decode.batch, t.decode.decode_s)) + TERMS.host_s
    assert r.mean_ttft_s == pytest.approx(prefill, rel=1e-12)
    assert r.mean_tpot_s == pytest.approx(step, rel=1e-12)
    assert r.output_tokens_per_s == pytest.approx(200 / (prefill + 199 * step), rel=1e-12)


def test_the_dp_host_factor_applies_where_dp_ranks_step_together():
    """The host time of a role whose DP ranks step together is ``f`` times the host time per step, in the
    simulation and the steady state alike; a role of one DP rank pays the host time alone; the design reads a
    run of DP ranks at ``f h``."""
    f3 = replace(TERMS, dp_host_factor=3.0)
    tripled = replace(TERMS, host_s=3 * TERMS.host_s)
    w = {"prompt": 3000, "output": 300, "concurrency": 24, "num_prompts": 60, "min_length_ratio": 0.0}
    one = served_tables(spec(serve={"tp": 8}, engine="sglang", workload=w))
    many = served_tables(spec(serve={"tp": 2, "dp": 4, "ep": 8}, engine="sglang", workload=w))
    assert simulate(one, f3) == simulate(one, TERMS)
    assert simulate(many, f3) == simulate(many, tripled)
    assert simulate(many, f3) != simulate(many, TERMS)
    from pdcalc.perf.served import steady_state
    sa, sb = steady_state(many, f3), steady_state(many, tripled)
    assert float(sa.tpot_s[0]) == pytest.approx(float(sb.tpot_s[0]), rel=1e-12)
    assert float(steady_state(one, f3).tpot_s[0]) == pytest.approx(float(steady_state(one, TERMS).tpot_s[0]),
                                                                    rel=1e-12)
    # disaggregated: each role by its own DP
    pd_spec = spec_from_dict({"model": "deepseek-v3", "card": "h200", "engine": "sglang",
                              "prefill": {"tp": 8}, "decode": {"tp": 2, "dp": 4, "ep": 8},
                              "workload": {"prompt": 3000, "output": 300, "request_rate": 2.0, "num_prompts": 40}},
                             "test")
    assert (TERMS.host_for(1), f3.host_for(1), f3.host_for(4)) == (TERMS.host_s, TERMS.host_s, 3 * TERMS.host_s)
    assert cal.steps_together(pd_spec) and not cal.steps_together(one.spec)
    # the design read at f h is the fit grid's point at that host time
    rows = pd.DataFrame(cal.simulate_design(many, "x", homogeneous=True))
    ih = len(cal.RH_FIT) // 2
    f = cal.RH_FIT[ih + 1] / cal.RH_FIT[ih]
    base, scaled = cal.surrogate(rows), cal.surrogate(rows, f)
    nd = len(cal.RD_FIT)
    per_kd = len(cal.RP_FIT) * len(cal.RH_FIT) * nd
    for k in (0, len(cal.KD_FIT) // 2):
        for r in (0, len(cal.RP_FIT) - 1):
            for d in (0, nd - 1):
                i = k * per_kd + (r * len(cal.RH_FIT) + ih) * nd + d
                for m in cal.METRICS:
                    assert scaled[m][i] == pytest.approx(base[m][i + nd], rel=1e-5), (k, r, d, m)


def test_closed_loop_scales_with_the_kernel_factor():
    """What the stored design relies on: every time of a closed loop is k times longer when all terms are."""
    t = served_tables(spec(serve={"tp": 4, "dp": 2, "ep": 8}, engine="sglang",
                           workload={"prompt": 3000, "output": 300, "concurrency": 24, "num_prompts": 60,
                                     "min_length_ratio": 0.0}))
    base = replace(TERMS, request_s=0.05)
    a = simulate(t, base)
    b = simulate(t, ServedTerms(k_decode=3 * TERMS.k_decode, k_prefill=3 * TERMS.k_prefill, host_s=3 * TERMS.host_s,
                                request_s=3 * base.request_s))
    assert b.output_tokens_per_s == pytest.approx(a.output_tokens_per_s / 3, rel=1e-9)
    assert b.mean_tpot_s == pytest.approx(3 * a.mean_tpot_s, rel=1e-9)
    assert b.mean_ttft_s == pytest.approx(3 * a.mean_ttft_s, rel=1e-9)


def test_an_open_loop_with_one_slot_is_a_closed_loop_of_one():
    w = {"prompt": 2000, "output": 100, "concurrency": 1, "num_prompts": 8}
    a = simulate(served_tables(spec(workload=w)), TERMS)
    b = simulate(served_tables(spec(workload={**w, "request_rate": 50.0})), TERMS)
    assert b.mean_tpot_s == pytest.approx(a.mean_tpot_s, rel=1e-9)
    assert b.mean_ttft_s == pytest.approx(a.mean_ttft_s, rel=1e-9)


def test_a_request_time_adds_to_ttft_and_holds_the_closed_loop_slot():
    """A request reaching the engine ``request_s`` after the client sends it: one request at a time, its TTFT is
    that much longer, its TPOT the same, and the run ``num_prompts`` times that much longer; the steady state
    and the planner add it to TTFT too."""
    from pdcalc.perf.served import steady_state
    from pdcalc.plan.splits import evaluate_instances
    from pdcalc.plan.workload import Setup, Workload

    w = {"prompt": 2000, "output": 100, "concurrency": 1, "num_prompts": 8}
    t = served_tables(spec(workload=w))
    delayed = replace(TERMS, request_s=0.25)
    a, b = simulate(t, TERMS), simulate(t, delayed)
    assert b.mean_ttft_s == pytest.approx(a.mean_ttft_s + 0.25, rel=1e-9)
    assert b.mean_tpot_s == pytest.approx(a.mean_tpot_s, rel=1e-9)
    assert b.duration_s == pytest.approx(a.duration_s + w["num_prompts"] * 0.25, rel=1e-9)
    assert b.output_tokens_per_s < a.output_tokens_per_s
    sa, sb = steady_state(t, TERMS), steady_state(t, delayed)
    assert float(sb.ttft_s[0]) == pytest.approx(float(sa.ttft_s[0]) + 0.25, rel=1e-9)
    # disaggregated, an open loop: TTFT only
    pd_spec = spec_from_dict({"model": "deepseek-v3", "card": "h200", "engine": "sglang",
                              "prefill": {"tp": 8}, "decode": {"tp": 8},
                              "workload": {"prompt": 3000, "output": 300, "request_rate": 1.0, "num_prompts": 40}},
                             "test")
    sa, sb = steady_state(served_tables(pd_spec), TERMS), steady_state(served_tables(pd_spec), delayed)
    assert float(sb.ttft_s[0]) == pytest.approx(float(sa.ttft_s[0]) + 0.25, rel=1e-9)
    assert float(sb.tpot_s[0]) == pytest.approx(float(sa.tpot_s[0]), rel=1e-12)
    work = Workload(prompt_tokens=2000, output_tokens=500, rate_per_s=2.0, ttft_s=100.0, tpot_s=1.0)
    setups = [Setup(cards=16, model="deepseek-v3", card="h200", quant="fp8", engine="vllm", served_terms=x)
              for x in (TERMS, delayed)]
    r = [evaluate_instances(s_, work, instances=2, size=8) for s_ in setups]
    assert float(r[1]["ttft_s"]) == pytest.approx(float(r[0]["ttft_s"]) + 0.25, rel=1e-9)
    assert float(r[1]["tpot_s"]) == pytest.approx(float(r[0]["tpot_s"]), rel=1e-12)


def test_prefill_first_stalls_the_decode_batch():
    """Two 6,000-token prompts at once under an 8,192-token budget: the first prompt is done in step one, the
    second's rest takes step two. SGLang runs step two on its own, so the first sequence waits for it before it
    decodes with the second; vLLM decodes the first sequence's token in step two."""
    w = {"prompt": 6000, "output": 100, "concurrency": 2, "num_prompts": 2}
    t = served_tables(spec(workload=w, engine="sglang"))
    k, h = TERMS, TERMS.host_s

    def dec(b):
        return k.k_decode * float(np.interp(b, t.decode.batch, t.decode.decode_s))

    step2 = k.k_prefill * float(chunk_s(t.prefill, 12000 - t.prefill.budget, mixed=False)) + h
    s2 = dec(2) + h
    tpot_a, tpot_b = (step2 + 99 * s2) / 99, s2
    r = simulate(t, TERMS)
    assert r.mean_tpot_s == pytest.approx((tpot_a + tpot_b) / 2, rel=1e-12)
    mixed = simulate(served_tables(spec(workload=w, engine="vllm")), TERMS)
    assert mixed.mean_tpot_s < r.mean_tpot_s


def test_dp_ranks_step_together():
    """Three requests on an instance of two DP ranks: one rank decodes two sequences, the other one; the steps
    span both ranks, so the lone sequence advances at the two-sequence step, not its own."""
    t = served_tables(spec(serve={"tp": 4, "dp": 2, "ep": 8},
                           workload={"prompt": 100, "output": 50, "concurrency": 3, "num_prompts": 3}))

    def dec(b):
        return TERMS.k_decode * float(np.interp(b, t.decode.batch, t.decode.decode_s)) + TERMS.host_s

    r = simulate(t, TERMS)
    assert r.mean_tpot_s == pytest.approx(dec(2), rel=1e-12)
    assert dec(2) > dec(1)


def test_lengths_drawn_as_sglang_draws_them():
    w = {"prompt": 1000, "output": 1000, "concurrency": 8, "num_prompts": 400, "min_length_ratio": 0.0}
    s = spec(workload=w)
    assert s.workload.mean_output == 500
    t = served_tables(s)
    r = simulate(t, TERMS)
    fixed = simulate(served_tables(spec(workload={**w, "min_length_ratio": 1.0})), TERMS)
    # half the tokens per request: the run is shorter and emits about half the tokens
    assert 0.3 < r.duration_s / fixed.duration_s < 0.7
    # every request is one the client drew, in the order it sent them: the tokens emitted are theirs
    drawn = client_lengths(s.workload, 400)
    assert r.output_tokens_per_s * r.duration_s == pytest.approx(sum(o for _, o in drawn), rel=1e-9)
    other = simulate(served_tables(spec(workload={**w, "seed": 7})), TERMS)
    assert other.output_tokens_per_s * other.duration_s == pytest.approx(
        sum(o for _, o in client_lengths(spec(workload={**w, "seed": 7}).workload, 400)), rel=1e-9)


def _printed_totals(run):
    """What a bench_serving result block quoted in a run's notes prints: requests, input and output tokens."""
    import re

    m = re.search(r"Successful requests: (\d+); Total input tokens: (\d+); Total generated tokens: (\d+)",
                  run.notes or "")
    return tuple(map(int, m.groups())) if m else None


def test_the_clients_draws_are_the_lengths_it_printed():
    """The corpus's bench_serving runs of random lengths that print their token totals: the client's seed
    draws exactly the prompt tokens printed, and the output tokens within the one per request by which SGLang
    0.5.6 (which drew outputs from 0) differs from the draws of :func:`client_lengths`."""
    from pdcalc.reality.served_runs import load

    checked = 0
    for r in load():
        if r.spec is None or r.spec.workload.min_length_ratio >= 1 or _printed_totals(r) is None:
            continue
        n, prompt_tokens, output_tokens = _printed_totals(r)
        drawn = client_lengths(r.spec.workload, n)
        assert sum(p for p, _ in drawn) == prompt_tokens, r.id
        assert 0 <= sum(o for _, o in drawn) - output_tokens <= n, r.id
        checked += 1
    assert checked >= 9


def test_the_client_seed_is_checked():
    for bad in (-1, 2**32, 1.5, "42"):
        with pytest.raises(ConfigError, match=r"\[workload\] seed"):
            spec(workload={"prompt": 100, "output": 10, "concurrency": 1, "seed": bad})


def test_a_v4_recipe_in_a_spec_of_another_model_is_refused():
    with pytest.raises(ConfigError, match=r"quant.*w4a8-msmodelslim.*use w4a8"):
        spec(card="ascend-910c-die", engine="vllm-ascend", quant="w4a8-msmodelslim")


def test_min_length_ratio_is_checked():
    with pytest.raises(ConfigError, match=r"\[workload\] min_length_ratio"):
        spec(workload={"prompt": 10, "output": 10, "concurrency": 1, "min_length_ratio": 1.5})


# ------------------------------------------------------------------------------ the stored fit
def test_stored_design_is_what_the_simulation_gives():
    """A sample of the stored design re-simulated: stale when the corpus, the step or the simulation changed
    (then run tools/calibrate_corpus.py). The sample holds a run whose launch enables SGLang's prefill delayer."""
    design = cal.stored_design()
    ids = sorted(design["id"].unique())
    delayed = next(r.id for r in cal.predictable_runs() if r.spec.serve and r.spec.serve.prefill_delay_passes)
    for rid in (ids[0], ids[len(ids) // 3], ids[2 * len(ids) // 3], ids[-1], delayed):
        rows = design[design["id"] == rid]
        row = rows.iloc[len(rows) // 2]
        t = cal.tables_of(get(rid))
        got = simulate(t, cal.relative_terms(row.kd, row.rp, row.rh, row.rd))
        for m, v in zip(cal.METRICS, (got.output_tokens_per_s, got.mean_tpot_s, got.mean_ttft_s)):
            assert v == pytest.approx(row[m], rel=1e-5), (rid, m)


def test_stored_design_covers_every_predictable_run():
    design = cal.stored_design()
    runs = cal.predictable_runs()
    assert sorted(design["id"].unique()) == sorted(r.id for r in runs)
    for r in runs:
        n = (len(cal.RP_DESIGN) * len(cal.RH_DESIGN) * len(cal.RD_DESIGN)
             * (1 if cal.homogeneous(r) else len(cal.KD_DESIGN)))
        assert (design["id"] == r.id).sum() == n


@pytest.fixture(scope="module")
def refit():
    runs = cal.predictable_runs()
    return runs, cal.make_points(runs, cal.stored_design())


def test_stored_terms_are_the_refit(refit):
    runs, pts = refit
    stored = cal.stored()["terms"]
    fresh, need = cal.corpus_fits(pts)
    assert cal.stored()["fit"]["min_documents"] == need == cal.choose_min_sources(pts)
    assert set(stored) == set(fresh)
    assert all(row["documents"] >= need for row in fresh.values())
    for key, row in fresh.items():
        for k in ("k_decode", "k_prefill", "host_ms", "dp_host_factor", "request_ms", "runs", "documents"):
            assert stored[key][k] == pytest.approx(row[k], rel=1e-5), (key, k)


def test_held_out_terms_leave_the_document_out(refit):
    """Each stored held-out prediction's terms are those fitted without its document, and its prediction is the
    simulation at them (a sample re-simulated)."""
    runs, pts = refit
    held = cal.stored_held_out()
    by_id = {r.id: r for r in runs}
    sources = sorted(held["source_id"].unique())
    for src in sources:
        train = [p for p in pts if p.source_id != src]
        rows = held[held["source_id"] == src]
        rid = rows.iloc[0]["id"]
        need = int(rows.iloc[0]["min_documents"])
        if src in sources[:: max(1, len(sources) // 3)]:     # a sample: the choice is made inside the training set
            assert need == cal.choose_min_sources(train), src
        terms, _, key = cal.fit(train, cal.term_class(by_id[rid]), min_sources=need)
        assert rows.iloc[0]["pool"] == key
        assert (rows.iloc[0]["k_decode"], rows.iloc[0]["k_prefill"]) == pytest.approx(
            (terms.k_decode, terms.k_prefill), rel=1e-5)
        assert rows.iloc[0]["host_ms"] == pytest.approx(terms.host_s * 1e3, rel=1e-5, abs=1e-9)
        assert rows.iloc[0]["dp_host_factor"] == pytest.approx(terms.dp_host_factor, rel=1e-5)
        assert rows.iloc[0]["request_ms"] == pytest.approx(terms.request_s * 1e3, rel=1e-5, abs=1e-9)
    for _, row in held.iloc[:: max(1, len(held) // 3)].iterrows():
        t = cal.tables_of(by_id[row["id"]])
        sim = simulate(t, ServedTerms.from_dict(row))
        got = {"output_tokens_per_s": sim.output_tokens_per_s, "tpot_s": sim.mean_tpot_s,
               "ttft_s": sim.mean_ttft_s}[row["metric"]]
        assert got == pytest.approx(row["predicted"], rel=1e-4)


def test_the_documents_a_class_needs_are_chosen_without_the_held_out_document(refit):
    """Whatever a held-out document measured, the choice of how many documents a class needs and the terms its
    runs are predicted with stay the same (its errors replaced by others that the whole corpus's choice does
    see); the choice has the least inner loss of the choices, and a class with fewer documents than the choice
    is fitted on its pool."""
    from dataclasses import replace

    runs, pts = refit
    src = sorted({p.source_id for p in pts})[0]
    poisoned = [replace(p, errors={m: e + 5.0 for m, e in p.errors.items()}) if p.source_id == src else p
                for p in pts]
    clean, dirty = cal._Pools(pts), cal._Pools(poisoned)
    left = frozenset({src})
    need = clean.min_sources(left)
    assert dirty.min_sources(left) == need
    for p in (q for q in pts if q.source_id == src):
        assert dirty.index(left, p.cls, need) == clean.index(left, p.cls, need)
    assert dirty.inner_loss(frozenset(), need) != clean.inner_loss(frozenset(), need)   # the poison is seen
    loss = {m: clean.inner_loss(frozenset(), m) for m in cal.MIN_SOURCES_CHOICES}
    whole = cal.choose_min_sources(pts)
    assert loss[whole] == min(loss.values())
    by_doc: dict = {}
    for p in pts:
        by_doc.setdefault(p.cls, set()).add(p.source_id)
    thin = next(c for c, docs in sorted(by_doc.items()) if len(docs) < whole)
    _, _, key = cal.fit(pts, thin, min_sources=whole)
    assert key != "/".join(thin)
    with pytest.raises(ValueError, match="min_sources"):
        cal.fit(pts, thin, min_sources=1)


def test_every_source_is_held_out_whole():
    held = cal.stored_held_out()
    runs = cal.predictable_runs()
    assert set(held["id"]) == {r.id for r in runs}
    assert set(held["source_id"]) == {r.source_id for r in runs}


def test_stored_summary_and_coverage_are_the_held_out_tables():
    held = cal.stored_held_out()
    scored = held[held["metric"].isin(("output_tokens_per_s", "tpot_s"))]
    s = cal.summary(scored).iloc[0]
    stored = cal.stored()["summary"]["all"]
    assert stored["points"] == len(scored)
    assert stored["median_abs_err_pct"] == pytest.approx(s["median_abs_err_pct"], abs=0.06)
    assert stored["p90_abs_err_pct"] == pytest.approx(s["p90_abs_err_pct"], abs=0.06)
    assert stored["coverage_pct"] == pytest.approx(100 * scored["covered"].mean(), abs=0.06)
    inside = (held["low"] <= held["measured"]) & (held["measured"] <= held["high"])
    assert (inside == held["covered"]).all()


def test_a_points_range_leaves_its_document_out():
    held = cal.stored_held_out()
    row = held.iloc[0]
    lo, hi, _ = cal.interval(held, row["predicted"], row["vendor"], row["metric"], row["model_family"],
                             exclude_source=row["source_id"])
    assert (lo, hi) == pytest.approx((row["low"], row["high"]), rel=1e-5)
    lo_in, hi_in, _ = cal.interval(held, row["predicted"], row["vendor"], row["metric"], row["model_family"])
    assert (lo_in, hi_in) != pytest.approx((lo, hi), rel=1e-9)


def test_the_served_model_beats_the_kernels_alone_out_of_sample():
    s = cal.stored()["summary"]["all"]
    assert s["median_abs_err_pct"] < s["before_median_abs_err_pct"]
    assert s["p90_abs_err_pct"] < s["before_p90_abs_err_pct"]


# ------------------------------------------------------------------------------ predictions
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_predict_with_ranges(path):
    from pdcalc.layout.served import load_spec

    s = load_spec(path)
    p = predict(s)
    assert p.fits
    for r in (p.output_tokens_per_s, p.tpot_ms, p.ttft_ms):
        assert r.low < r.value < r.high
    assert p.output_tokens_per_s_per_card.value == pytest.approx(p.output_tokens_per_s.value / s.cards)
    assert p.bound_output_tokens_per_s > p.output_tokens_per_s.value   # the kernels alone are a bound


def test_a_deployment_that_does_not_fit_is_a_result():
    p = predict(spec(model="deepseek-v3", card="h100", serve={"tp": 8}))
    assert not p.fits and p.short_gib > 0 and p.tpot_ms is None
    d = p.as_dict()
    assert d["fits"] is False and d["output_tokens_per_s"] is None


def test_calibration_recovers_known_terms():
    """A run simulated at known terms, read back as if measured: the calibration predicts it within the grid's
    resolution, and moves a corpus prediction that was off."""
    s = spec(serve={"tp": 8}, workload={"prompt": 2000, "output": 500, "concurrency": 16, "num_prompts": 64})
    truth = ServedTerms(k_decode=2.0, k_prefill=3.0, host_s=0.006, request_s=0.08)
    r = simulate(served_tables(s), truth)
    measured = {"output_tokens_per_s": r.output_tokens_per_s, "tpot_s": r.mean_tpot_s, "ttft_s": r.mean_ttft_s}
    c = own_run.calibrate_run(s, measured, ServedTerms(), label="known")
    for m, v in measured.items():
        assert c.after[m] == pytest.approx(v, rel=0.05), m
        assert abs(math.log(c.before[m] / v)) > abs(math.log(c.after[m] / v))


# ------------------------------------------------------------------------------ commands
def test_predict_json_contract():
    out = run_cli("predict", EXAMPLES[0], "--json")
    assert out.code == 0, out.err
    d = json.loads(out.out)
    for k in ("output_tokens_per_s", "output_tokens_per_s_per_card", "tpot_ms", "ttft_ms"):
        assert set(d[k]) == {"value", "low", "high"} and d[k]["low"] <= d[k]["value"] <= d[k]["high"]
    assert isinstance(d["binds"], str) and d["cost_sources"]
    assert d["bound"]["output_tokens_per_s"] > d["output_tokens_per_s"]["value"]


def test_calibrate_on_a_real_result_and_predict_with_it(tmp_path):
    out_file = tmp_path / "cal.toml"
    out = run_cli("calibrate", DEEPSEEK_RESULT, "--spec", DEEPSEEK_SPEC, "-o", out_file, "--json")
    assert out.code == 0, out.err
    d = json.loads(out.out)
    measured = d["measured"]["output_tokens_per_s"]
    assert measured == pytest.approx(12412.394674113431)          # the file's output_throughput
    assert abs(d["after"]["output_tokens_per_s"] / measured - 1) < abs(d["before"]["output_tokens_per_s"] / measured - 1)
    terms = load_calibration(out_file)
    assert terms.k_decode == pytest.approx(d["terms"]["k_decode"])
    p = run_cli("predict", DEEPSEEK_SPEC, "--calibration", out_file, "--json")
    assert p.code == 0, p.err
    pd_ = json.loads(p.out)
    assert pd_["output_tokens_per_s"]["value"] == pytest.approx(d["after"]["output_tokens_per_s"], rel=1e-9)
    assert "calibration_moves_pct" in pd_


def test_plan_with_a_calibration_shows_what_it_moves(tmp_path):
    """`plan --calibration`: each answer under your terms and the corpus's, and the calibrated answer's figures
    against the same layout planned at the corpus's terms."""
    from dataclasses import replace as dc_replace

    from pdcalc.plan.search import plan
    from pdcalc.plan.workload import Setup, Workload

    f = tmp_path / "c.toml"
    f.write_text("[terms]\nk_decode = 1.2\nk_prefill = 3\nhost_ms = 10\ndp_host_factor = 2\n")
    args = ("--card", "ascend-910b2", "--cards", "64", "--prompt", "3500", "--output", "1500", "--concurrency", "256",
            "--ttft-ms", "30000")
    out = run_cli("plan", *args, "--calibration", f, "--json")
    assert out.code == 0, out.err
    d = json.loads(out.out)
    m = d["calibration_moves"]
    assert m["corpus_terms"]["from"].startswith("served corpus")
    corpus = plan(dc_replace(Setup(model="deepseek-v4-flash", card="ascend-910b2", cards=64), frontier_points=0),
                  Workload(prompt_tokens=3500, output_tokens=1500, concurrency=256, ttft_s=30.0))
    ref = corpus.answer()
    for mode in ("disaggregated", "aggregated"):
        assert m[mode]["option"] == d[mode]["option"] and m[mode]["corpus_option"] == ref[mode]["option"]
    agg = corpus.aggregated
    same = agg[(agg["instances"] == d["aggregated"]["instances"]) & (agg["size"] == d["aggregated"]["size"])
               & (agg["tp"] == d["aggregated"]["tp"])].iloc[0]
    assert m["aggregated"]["tpot_moves_pct"] == pytest.approx(100 * (d["aggregated"]["tpot_s"] / same["tpot_s"] - 1))
    assert m["aggregated"]["tpot_moves_pct"] != 0
    assert m["winner"] == {"calibrated": d["winner"], "corpus": ref["winner"]}
    text = run_cli("plan", *args, "--calibration", f)
    assert "with the corpus's terms" in text.out
    assert "calibration_moves" not in json.loads(run_cli("plan", *args, "--json").out)


def test_calibrate_refuses_a_result_of_another_workload(tmp_path):
    out = run_cli("calibrate", RESULTS / "sglang" / "TonyLi15_agg_n100_in512_out128_c32.jsonl", "--spec",
                  DEEPSEEK_SPEC, "-o", tmp_path / "x.toml")
    assert out.code == 2 and "mean prompt tokens" in out.err and len(out.err.strip().splitlines()) == 1


@pytest.mark.parametrize("body, field", [("", "[terms]"), ("[terms]\nk_decode = 2\nk_prefill = 1\n", "host_ms"),
                                         ("[terms]\nk_decode = -1\nk_prefill = 1\nhost_ms = 1\n", "k_decode"),
                                         ("[terms]\nk_decode = 1\nk_prefill = 1\nhost_ms = 1\ndp_host_factor = 0.5\n",
                                          "dp_host_factor"),
                                         ("[terms]\nk_decode = 1\nk_prefill = 1\nhost_ms = 1\nrequest_ms = -5\n",
                                          "request_ms")])
def test_a_bad_calibration_file_is_one_line(tmp_path, body, field):
    f = tmp_path / "c.toml"
    f.write_text(body)
    out = run_cli("predict", EXAMPLES[0], "--calibration", f)
    assert out.code == 2 and field in out.err and len(out.err.strip().splitlines()) == 1


def test_a_calibration_file_without_the_dp_host_factor_reads_as_one(tmp_path):
    """A file written before the factor existed: its host time is every role's, DP ranks or not."""
    f = tmp_path / "c.toml"
    f.write_text("[terms]\nk_decode = 1.5\nk_prefill = 2\nhost_ms = 4\n")
    t = load_calibration(f)
    assert (t.k_decode, t.k_prefill, t.host_s, t.dp_host_factor) == (1.5, 2.0, 0.004, 1.0)
    assert t.host_for(8) == t.host_s
    f.write_text("[terms]\nk_decode = 1.5\nk_prefill = 2\nhost_ms = 4\ndp_host_factor = 2.5\n")
    assert load_calibration(f).host_for(8) == pytest.approx(0.01)
    assert load_calibration(f).request_s == 0.0             # nor a request time: none
    f.write_text("[terms]\nk_decode = 1.5\nk_prefill = 2\nhost_ms = 4\nrequest_ms = 120\n")
    assert load_calibration(f).request_s == pytest.approx(0.12)


def test_validate_lists_every_held_out_prediction():
    out = run_cli("validate", "--json")
    assert out.code == 0, out.err
    d = json.loads(out.out)
    held = cal.stored_held_out()
    assert len(d["predictions"]) == len(held)
    assert all(r["held_out"] for r in d["predictions"])
    assert set(d["predictions"][0]) >= {"id", "measured", "predicted", "low", "high", "held_out", "source"}
    assert d["summary"]["all"] == cal.stored()["summary"]["all"]


# ------------------------------------------------------------------------------ the planner
def test_the_planner_steps_with_the_served_model_by_default():
    from pdcalc.perf.step import step
    from pdcalc.plan.roles import timed_step
    from pdcalc.plan.workload import Setup

    s = Setup(model="deepseek-v3", card="h800", cards=16, mtp=True, draft_tokens=2, dataset="gsm8k")
    assert s.costs == "served" and s.served_class == ("nvidia", "vllm", "v3")
    t = s.terms
    assert t.label.startswith("served corpus")
    kw = dict(tp=1, dp=16, ep=16, context=3000, concurrency=np.array([16.0, 256.0]))
    got = timed_step(s, phase="decode", **kw).time_s
    ref = step("deepseek-v3", "h800", costs="published", quant=s.quant, mtp_steps=2, mtp_acceptance=s.acceptance,
               phase="decode", mfu=s.mfu, mbu=s.mbu, comm_eff=s.comm_eff, **kw).time_s
    h = t.host_s * t.dp_host_factor                               # DP 16: the ranks step together
    assert got == pytest.approx((t.k_decode * np.asarray(ref) + h) / s.emitted, rel=1e-12)
    assert 1 < s.emitted < 3
    pf = timed_step(s, phase="prefill", tp=1, dp=16, ep=16, context=20000, concurrency=16).time_s
    ref = step("deepseek-v3", "h800", costs="published", quant=s.quant, phase="prefill", tp=1, dp=16, ep=16,
               context=20000, concurrency=16, mfu=s.mfu, mbu=s.mbu, comm_eff=s.comm_eff).time_s
    assert pf == pytest.approx(t.k_prefill * float(ref) + 3 * h, rel=1e-12)   # three 8,192-token chunks
    # a P side pays one host step per chunk of the step its launch books (--max-num-batched-tokens)
    from pdcalc.plan.roles import _step, p_step_tokens

    chunk = p_step_tokens(s)
    side = _step(s, 1, 16, context=20000, concurrency=16, phase="prefill").time_s
    assert chunk < 8192
    assert side == pytest.approx(t.k_prefill * float(ref) + math.ceil(20000 / chunk) * h, rel=1e-12)


def test_planner_rows_carry_ranges_under_the_served_model_only():
    from pdcalc.plan.search import plan
    from pdcalc.plan.workload import Setup, Workload

    w = Workload(prompt_tokens=2000, output_tokens=500, concurrency=64, tpot_s=0.2)
    served = plan(Setup(model="deepseek-v3", card="h800", cards=32, frontier_points=0), w)
    roof = plan(Setup(model="deepseek-v3", card="h800", cards=32, frontier_points=0, costs="roofline"), w)
    assert len(served.ranked) and len(roof.ranked)
    b = served.ranked.iloc[0]
    for col in ("tpot_s", "ttft_s", "tokens_per_s_per_card", "output_tokens_per_s"):
        assert b[f"{col}_low"] < b[col] < b[f"{col}_high"]
    assert not any(c.endswith(("_low", "_high")) for c in roof.ranked.columns)


@pytest.mark.parametrize("workload,chunky", [
    ({"prompt": 3500, "output": 1500, "concurrency": 1024, "num_prompts": 10_000_000}, False),
    ({"prompt": 16_000_000, "output": 1500, "concurrency": 16, "num_prompts": 4096}, True),
])
def test_the_simulation_is_bounded_however_large_the_run(workload, chunky):
    """A run of millions of prompts on an instance that cannot be scaled below one rank, or prompts far over the
    token budget, simulate at most MAX_SIMULATED requests and MAX_STEPS prompt chunks."""
    from pdcalc.layout.served import spec_from_dict
    from pdcalc.perf import scheduler
    from pdcalc.perf.served import served_tables

    spec = spec_from_dict({"model": "deepseek-v4-flash", "card": "ascend-910c-die", "engine": "vllm-ascend",
                           "prefill": {"instances": 1, "tp": 4, "dp": 4, "ep": 16, "max_num_batched_tokens": 16384},
                           "decode": {"instances": 1, "tp": 1, "dp": 16, "ep": 16, "max_num_seqs": 60},
                           "workload": workload})
    t = served_tables(spec)
    report = scheduler.simulate(t)
    chunks = -(-workload["prompt"] // t.prefill.budget)
    assert 0 < report.completed <= scheduler.MAX_SIMULATED
    assert report.completed * chunks <= scheduler.MAX_STEPS
    assert (chunks > 1) == chunky and report.output_tokens_per_s > 0


def test_engine_limits_follow_each_engines_own_defaults():
    """Where a spec leaves the limits unset, each engine's default applies as its code sets it (the constants are
    the ones its quoted code names), divided over SGLang's DP-attention ranks; a stated limit always wins."""
    from pdcalc.layout.served import spec_from_dict
    from pdcalc.perf import engine_limits as el

    def limits(engine, card, model, role, **extra):
        spec = spec_from_dict({"model": model, "card": card, "engine": engine, "serve": role,
                               "workload": {"prompt": 1024, "output": 256, "concurrency": 8}, **extra})
        return el.engine_limits(spec, spec.serve, fallback_seqs=7, fallback_budget=9)

    assert f"max_running_requests={el.SGLANG_V4_RUNNING}" in el.SOURCES["sglang-v4"]
    assert all(str(v) in el.SOURCES["vllm"] for v in (*el.VLLM_LARGE, *el.VLLM_SMALL))
    assert str(el.SGLANG_CHUNK[-1][1]) in el.SOURCES["sglang-chunk"] and str(el.SGLANG_CHUNK_LARGEST) in el.SOURCES["sglang-chunk"]
    v4 = limits("sglang", "b200", "deepseek-v4-flash", {"tp": 1, "dp": 4, "ep": 4})
    assert v4.max_seqs * 4 == el.SGLANG_V4_RUNNING and v4.budget * 4 == el.SGLANG_CHUNK_LARGEST
    v3 = limits("sglang", "h200", "deepseek-v3", {"tp": 8, "dp": 1})
    assert v3.max_seqs is None and v3.budget == el.SGLANG_CHUNK[-1][1]
    assert (limits("vllm", "h200", "deepseek-v3", {"tp": 8, "dp": 1}).max_seqs,
            limits("vllm", "h200", "deepseek-v3", {"tp": 8, "dp": 1}).budget) == el.VLLM_LARGE
    small = limits("vllm-ascend", "ascend-910c-die", "deepseek-v3", {"tp": 16, "dp": 2})
    assert (small.max_seqs, small.budget) == el.VLLM_SMALL
    stated = limits("vllm-ascend", "ascend-910c-die", "deepseek-v3",
                    {"tp": 16, "dp": 2, "max_num_seqs": 3, "max_num_batched_tokens": 5})
    assert (stated.max_seqs, stated.budget, stated.seqs_from) == (3, 5, "the spec")
    other = limits("trtllm", "h200", "deepseek-v3", {"tp": 8, "dp": 1})
    assert (other.max_seqs, other.budget) == (7, 9)


def test_temperature_is_checked_and_picks_figures_sampled_alike():
    """A workload's sampling temperature is checked, and MTP acceptance is read from figures sampled as the client
    samples (greedy or not), where any are left."""
    from pdcalc.perf.speculative import acceptance_figures, dataset_acceptance

    with pytest.raises(ConfigError, match=r"\[workload\] temperature"):
        spec(workload={"prompt": 10, "output": 10, "concurrency": 1, "temperature": -0.5})
    figs = {f.id: f for f in acceptance_figures()}
    assert any(f.sampled for f in figs.values()) and any(not f.sampled for f in figs.values())
    for temperature in (0.0, 1.0):
        _, ids = dataset_acceptance("random", temperature=temperature)
        assert ids and all(figs[i].sampled == bool(temperature) for i in ids)
    greedy = spec(workload={"prompt": 100, "output": 100, "concurrency": 1}, mtp={"draft_tokens": 2})
    assert greedy.workload.temperature == 0.0


def test_memory_utilization_sets_the_kv_room_as_each_engine_reads_it():
    """A role's memory_utilization is checked; under vLLM the stated share holds activations and framework too,
    under SGLang (--mem-fraction-static) the KV pool is the share less the weights alone; unset, vLLM takes pdcalc's
    default share and overhead, SGLang its own fraction."""
    from pdcalc.hardware.cards import get_card
    from pdcalc.layout.memory import card_weights
    from pdcalc.model.kv_cache import kv_bytes
    from pdcalc.perf import served as sv

    for bad in (0, 1.5, "0.9", float("nan")):
        with pytest.raises(ConfigError, match=r"\[serve\] memory_utilization"):
            spec(serve={"tp": 8, "memory_utilization": bad})

    def seqs(engine, **role):
        s = spec_from_dict({"model": "deepseek-v3", "card": "h200", "engine": engine, "quant": "fp8",
                            "serve": {"tp": 8, **role},
                            "workload": {"prompt": 2000, "output": 1000, "concurrency": 8}})
        return served_tables(s).decode.kv_seqs

    base = get_card("h200").usable_base_bytes
    w = card_weights("deepseek-v3", "fp8", ep=None, tp=8, mtp=False).total_bytes
    seq = kv_bytes("deepseek-v3", 3000, "vllm", include_mtp=False).total_bytes
    assert seqs("vllm") == pytest.approx((sv.UTILIZATION * base - w - sv.OVERHEAD_BYTES) / seq, rel=1e-12)
    assert seqs("vllm", memory_utilization=0.8) == pytest.approx((0.8 * base - w - sv.OVERHEAD_BYTES) / seq,
                                                                 rel=1e-12)
    assert "sglang" in sv.FRACTION_ENGINES
    assert seqs("sglang", memory_utilization=0.8) == pytest.approx((0.8 * base - w) / seq, rel=1e-12)
    # unset, SGLang sets its own fraction from its reserve (pdcalc.perf.engine_limits.sglang_mem_fraction)
    from pdcalc.perf.engine_limits import sglang_mem_fraction
    s = spec_from_dict({"model": "deepseek-v3", "card": "h200", "engine": "sglang", "quant": "fp8", "serve": {"tp": 8},
                        "workload": {"prompt": 2000, "output": 1000, "concurrency": 8}})
    fraction = sglang_mem_fraction(s, "serve", s.serve)
    assert seqs("sglang") == pytest.approx((fraction * base - w) / seq, rel=1e-12)
    assert fraction != sv.UTILIZATION


def test_prefill_delayer_rules():
    """SGLang's PrefillDelayer._negotiate_should_allow_prefill_pure, pass by pass, on an instance of two ranks of
    at most four running requests each, whose ranks have prefilled at most three requests in one step so far:
    - some ranks, not all, have prompts waiting ("mixed"): held for up to the launch's passes;
    - every rank has ("all"): held while the fullest rank has fewer free slots than that largest prefill batch,
      with no limit on passes, except the first time that happens;
    - nobody decodes, or nobody waits: nothing is held."""
    d = _Delayer(30)
    d.prefilled(3)
    d.prefilled(2)
    lanes = [SimpleNamespace(batch=[1, 2, 3]), SimpleNamespace(batch=[1])]
    assert d.held(lanes, [(3, 0.0), (1, 500.0)], 4) == 29
    d.delayed = 29
    assert d.held(lanes, [(3, 0.0), (1, 500.0)], 4) == 0 and d.delayed == 0
    both = [(3, 100.0), (1, 500.0)]
    assert d.held(lanes, both, 4) == 0 and d.skipped_first
    assert d.held(lanes, both, 4) == math.inf
    lanes[0].batch = [1]
    assert d.held(lanes, both, 4) == 0
    assert d.held(lanes, [(1, 0.0), (1, 0.0)], 4) == 0
    idle = [SimpleNamespace(batch=[]), SimpleNamespace(batch=[])]
    assert d.held(idle, [(0, 0.0), (0, 500.0)], 4) == 0


def test_prefill_delayer_holds_prompts_until_every_dp_rank_has_some():
    """SGLang's --enable-prefill-delayer is checked (co-located SGLang with DP attention only); one pass holds
    no prompt here (the ranks never run short of free request slots), and holding waiting prompts until the DP
    ranks prefill together stalls the decode batch less often: more output, shorter TPOT (over six waves of
    requests, so that no one draw of lengths decides it)."""
    work = {"prompt": 4000, "output": 300, "concurrency": 96, "num_prompts": 576, "min_length_ratio": 0.0}
    serve = {"tp": 1, "dp": 8, "ep": 8}
    for engine, role, where in (("vllm", "serve", r"\[serve\] prefill_delay_passes"),
                                ("sglang", "decode", r"\[decode\] prefill_delay_passes")):
        roles = ({"serve": {**serve, "prefill_delay_passes": 30}} if role == "serve" else
                 {"prefill": serve, "decode": {**serve, "prefill_delay_passes": 30}})
        with pytest.raises(ConfigError, match=where):
            spec_from_dict({"model": "deepseek-v3", "card": "h200", "engine": engine, **roles, "workload": work}, "t")
    for bad in ({"tp": 8, "prefill_delay_passes": 30}, {**serve, "prefill_delay_passes": 0},
                {**serve, "prefill_delay_passes": 2.5}):
        with pytest.raises(ConfigError, match=r"\[serve\] prefill_delay_passes"):
            spec(serve=bad, engine="sglang", workload=work)

    def run(**role):
        return simulate(served_tables(spec(serve={**serve, **role}, engine="sglang", workload=work)), TERMS)

    off, one, held = run(), run(prefill_delay_passes=1), run(prefill_delay_passes=30)
    assert one == off
    assert held.output_tokens_per_s > 1.2 * off.output_tokens_per_s
    assert held.mean_tpot_s < off.mean_tpot_s / 1.2
