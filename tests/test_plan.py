import math

import numpy as np
import pytest

from pdcalc.checks import InputError
from pdcalc.errors import PdcalcError
from pdcalc.plan import CONSTRAINTS, MAX_CARDS, Setup, Workload, evaluate, evaluate_loop, plan, seq_kv_bytes, sides

V3 = dict(model="deepseek-v3", quant="w8a8", card="ascend-910b2", mtp=False, engine="vllm")


@pytest.fixture(scope="module")
def v3_case():
    setup = Setup(cards=64, **V3)
    work = Workload(prompt_tokens=2048, output_tokens=512, concurrency=80, ttft_s=2.0, tpot_s=0.05)
    p, d = sides(setup, work)
    return setup, work, p, d


def test_workload_and_setup_errors():
    with pytest.raises(InputError, match="exactly one.*neither"):
        Workload(prompt_tokens=10, output_tokens=10)
    with pytest.raises(InputError, match="exactly one.*both"):
        Workload(prompt_tokens=10, output_tokens=10, rate_per_s=1.0, concurrency=4)
    with pytest.raises(InputError, match=r"prompt_tokens: must be an integer >= 1, got 0"):
        Workload(prompt_tokens=0, output_tokens=10, concurrency=1)
    with pytest.raises(InputError, match=r"concurrency: must be an integer >= 1, got 0"):
        Workload(prompt_tokens=10, output_tokens=10, concurrency=0)
    with pytest.raises(InputError, match=r"tpot_s: must be a finite number > 0 \(seconds\), got -1"):
        Workload(prompt_tokens=10, output_tokens=10, concurrency=1, tpot_s=-1)
    with pytest.raises(InputError, match="cards: must be an integer in 2..65,536, got 1"):
        Setup(cards=1)
    with pytest.raises(InputError, match="cards"):
        Setup(cards=MAX_CARDS + 1)
    with pytest.raises(InputError, match=r"utilization: .*in \(0, 1\]"):
        Setup(utilization=1.5)
    with pytest.raises(InputError, match="bandwidth_bytes_per_s: must be a finite number > 0"):
        Setup(bandwidth_bytes_per_s=0)
    with pytest.raises(InputError, match=r"max_load: must be a finite number in \(0, 1\)"):
        Setup(max_load=1.0)


@pytest.mark.parametrize("bad", [math.inf, math.nan, -math.inf])
def test_non_finite_numbers_are_refused(bad):
    for kw in ({"rate_per_s": bad}, {"concurrency": 4, "ttft_s": bad}, {"concurrency": 4, "tpot_s": bad}):
        with pytest.raises(InputError, match="finite"):
            Workload(prompt_tokens=10, output_tokens=10, **kw)
    for name in ("bandwidth_bytes_per_s", "transfer_fixed_s", "p_overhead_bytes", "kv_bytes_per_token", "mfu",
                 "max_load"):
        with pytest.raises(InputError, match=f"{name}: .*finite"):
            Setup(**{name: bad})


def test_lists_of_integers():
    assert Setup(tp_options=[2, 1, 2]).tp_options == (2, 1)
    assert Setup(sizes=(8, 4, 8)).sizes == (8, 4)
    assert Setup(cards=64.0).cards == 64 and isinstance(Setup(cards=64.0).cards, int)
    for bad in ((0,), (1, 2.5), (True,), (), 2, "12"):
        with pytest.raises(InputError, match="tp_options"):
            Setup(tp_options=bad)
    with pytest.raises(InputError, match=r"sizes\[1\]: must be an integer >= 1, got 0"):
        Setup(sizes=(8, 0))
    with pytest.raises(InputError, match="use_all_cards: must be true or false"):
        Setup(use_all_cards=1)
    with pytest.raises(InputError, match="base"):
        Setup(base="hbm")
    assert isinstance(InputError("x", "y"), PdcalcError)


def test_vectorized_equals_loop(v3_case):
    setup, work, p, d = v3_case
    a, b = evaluate(setup, work, p, d), evaluate_loop(setup, work, p, d)
    assert len(a) == len(b) > 1000
    for col in ("ttft_s", "tpot_s", "output_tokens_per_s", "tokens_per_s_per_card"):
        np.testing.assert_allclose(a[col].to_numpy(), b[col].to_numpy(), rtol=1e-12)
    assert (a.feasible == b.feasible).all()
    assert (a.binding == b.binding).all()


def test_candidates_stay_in_the_cluster(v3_case):
    setup, work, p, d = v3_case
    df = evaluate(setup, work, p, d)
    assert (df.cards <= setup.cards).all()
    assert (df.cards == df.p_instances * df.p_size + df.d_instances * df.d_size).all()
    full = evaluate(Setup(cards=64, use_all_cards=True, **V3), work)
    assert (full.cards == 64).all() and len(full) < len(df)


def test_kv_capacity_is_whole_sequences(v3_case):
    setup, work, p, d = v3_case
    per_seq = float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
    for side in d:
        assert side.seqs_per_rank == (max(0, int(side.room_bytes // per_seq)) if side.room_bytes > 0 else 0)


def test_rate_mode_obeys_littles_law():
    setup = Setup(cards=64, **V3)
    work = Workload(prompt_tokens=1024, output_tokens=256, rate_per_s=2.0)
    df = evaluate(setup, work)
    ok = df[np.isfinite(df.tpot_s)]
    np.testing.assert_allclose(ok.concurrency, work.rate_per_s * work.output_tokens * ok.tpot_s, rtol=1e-6)


def test_binding_is_the_first_failing_constraint(v3_case):
    setup, work, p, d = v3_case
    df = evaluate(setup, work, p, d)
    for _, row in df.sample(200, random_state=0).iterrows():
        fails = [k for k in CONSTRAINTS if not row[f"slack: {k}"] >= 0]
        if fails:
            assert row.binding == fails[0] and not row.feasible
        else:
            assert row.feasible


def test_nothing_fits_is_a_result_with_the_shortfall():
    r = plan(Setup(cards=16, **{**V3, "quant": "bf16"}),
             Workload(prompt_tokens=2048, output_tokens=512, concurrency=80))
    assert r.best is None
    assert r.reason.startswith("nothing fits") and "short by" in r.reason and "GiB" in r.reason


def test_ranked_by_tokens_per_card(v3_case):
    setup, work, *_ = v3_case
    r = plan(setup, Workload(prompt_tokens=2048, output_tokens=512, concurrency=80, tpot_s=0.05))
    assert r.reason == "" and r.best is not None
    assert r.ranked.feasible.all()
    assert r.ranked.tokens_per_s_per_card.is_monotonic_decreasing
    assert math.isclose(r.best.output_tokens_per_s, work.concurrency / r.best.tpot_s, rel_tol=1e-12)
