import math
import re

import numpy as np
import pytest

from pdcalc.checks import InputError
from pdcalc.errors import LayoutError, PdcalcError
from pdcalc.plan import (CONSTRAINTS, MAX_CARDS, Setup, Workload, count_splits, evaluate, evaluate_loop, plan,
                         evaluate_split, seq_kv_bytes, sides)

V3 = dict(model="deepseek-v3", quant="w8a8", card="ascend-910b2", mtp=False, engine="vllm")
V4 = dict(model="deepseek-v4-flash", quant="w8a8", card="ascend-910b2", mtp=True, engine="vllm-ascend")
KEYS = ["p_instances", "p_size", "p_tp", "d_instances", "d_size", "d_tp", "cards"]


def full_grid(setup, p_sides, d_sides):
    """The whole split space, as the planner enumerated it before it kept one P side per D side: every
    (P layout, n_p, D layout, n_d) within the cluster (exactly filling it with use_all_cards)."""
    pi, npi, di, ndi = [], [], [], []
    for i, p in enumerate(p_sides):
        for j, d in enumerate(d_sides):
            for k in range(1, setup.cards // p.size + 1):
                left = setup.cards - k * p.size
                if left < d.size:
                    continue
                n_d = np.arange(1, left // d.size + 1)
                if setup.use_all_cards:
                    n_d = n_d[k * p.size + n_d * d.size == setup.cards]
                pi.append(np.full(n_d.size, i))
                npi.append(np.full(n_d.size, k))
                di.append(np.full(n_d.size, j))
                ndi.append(n_d)
    return {"p": np.concatenate(pi), "n_p": np.concatenate(npi), "d": np.concatenate(di), "n_d": np.concatenate(ndi)}


def ranked(df):
    ok = df[df["feasible"]]
    return ok.sort_values(["tokens_per_s_per_card", "ttft_s"], ascending=[False, True]).reset_index(drop=True)


@pytest.fixture(scope="module")
def v3_case():
    setup = Setup(cards=64, **V3)
    work = Workload(prompt_tokens=2048, output_tokens=512, concurrency=80, ttft_s=2.0, tpot_s=0.05)
    p, d = sides(setup, work)
    return setup, work, p, d


# ------------------------------------------------------------------ inputs

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


def test_card_without_the_compute_dtype_is_one_clear_error():
    w = Workload(prompt_tokens=10, output_tokens=10, concurrency=1)
    with pytest.raises(LayoutError) as exc:
        plan(Setup(cards=16, card="h800", quant="w8a8"), w)
    msg = str(exc.value)
    assert "h800" in msg and "int8" in msg and "w8a8" in msg and "\n" not in msg
    with pytest.raises(LayoutError, match="bf16.*attention"):
        plan(Setup(cards=16, card="ascend-910b3", quant="fp16-all"), w)
    with pytest.raises(LayoutError, match="has no fp8 FLOP/s"):
        plan(Setup(cards=16, card="ascend-910b2", quant="fp8", model="deepseek-v3", engine="vllm", mtp=False), w)


# ------------------------------------------------------------------ the evaluation

def test_vectorized_equals_loop(v3_case):
    setup, work, p, d = v3_case
    a, b = evaluate(setup, work, p, d), evaluate_loop(setup, work, p, d)
    assert len(a) == len(b) > 300
    for col in ("p_instances", "d_instances", "cards"):
        assert (a[col].to_numpy() == b[col].to_numpy()).all()
    for col in ("ttft_s", "tpot_s", "output_tokens_per_s", "tokens_per_s_per_card"):
        np.testing.assert_allclose(a[col].to_numpy(), b[col].to_numpy(), rtol=1e-12)
    assert (a.feasible == b.feasible).all()
    assert (a.binding == b.binding).all()


def test_vectorized_equals_loop_on_the_whole_grid():
    setup = Setup(cards=32, tp_options=(1, 2), **V3)
    work = Workload(prompt_tokens=2048, output_tokens=512, rate_per_s=1.5, ttft_s=1.0)
    p, d = sides(setup, work)
    grid = full_grid(setup, p, d)
    a, b = evaluate(setup, work, p, d, candidates=grid), evaluate_loop(setup, work, p, d, candidates=grid)
    assert len(a) == len(b) == count_splits(setup, p, d)
    for col in ("ttft_s", "tpot_s", "tokens_per_s_per_card"):
        np.testing.assert_allclose(a[col].to_numpy(), b[col].to_numpy(), rtol=1e-12)
    assert (a.feasible == b.feasible).all() and (a.binding == b.binding).all()


def test_candidates_stay_in_the_cluster(v3_case):
    setup, work, p, d = v3_case
    df = evaluate(setup, work, p, d)
    assert (df.cards <= setup.cards).all()
    assert (df.cards == df.p_instances * df.p_size + df.d_instances * df.d_size).all()
    full = evaluate(Setup(cards=64, use_all_cards=True, **V3), work)
    assert (full.cards == 64).all() and len(full) < len(df)


def test_one_p_side_per_d_side_the_smallest_that_meets_load_and_ttft(v3_case):
    """Each (P layout, D layout, n_d) once; its n_p is the smallest meeting load and TTFT, or, when none
    does, all the P instances the cluster leaves."""
    setup = Setup(cards=64, **V3)
    work = Workload(prompt_tokens=2048, output_tokens=512, rate_per_s=5.0, ttft_s=1.0)
    p, d = sides(setup, work)
    df = evaluate(setup, work, p, d)
    assert not df.duplicated(["p_size", "p_tp", "d_size", "d_tp", "d_instances"]).any()
    n_max = (setup.cards - df.d_instances * df.d_size) // df.p_size
    meets = (df["slack: prefill load"] >= 0) & (df["slack: TTFT"] >= 0)
    assert (df.p_instances[~meets] == n_max[~meets]).all()
    assert meets.any() and (~meets).any()
    # one fewer P instance would fail load or TTFT
    fewer = df[meets & (df.p_instances > 1)]
    idx = {(s.size, s.tp): i for i, s in enumerate(p)}, {(s.size, s.tp): i for i, s in enumerate(d)}
    c = {"p": np.array([idx[0][k] for k in zip(fewer.p_size, fewer.p_tp)]), "n_p": fewer.p_instances.to_numpy() - 1,
         "d": np.array([idx[1][k] for k in zip(fewer.d_size, fewer.d_tp)]), "n_d": fewer.d_instances.to_numpy()}
    less = evaluate(setup, work, p, d, candidates=c)
    assert len(less) > 100
    assert ((less["slack: prefill load"] < 0) | (less["slack: TTFT"] < 0)).all()


CASES = [(model, cards, mode, targets, tp)
         for model in ("v4", "v3") for cards in (16, 32, 64)
         for mode in ({"concurrency": 256}, {"rate_per_s": 2.0})
         for targets in ({}, {"ttft_s": 1.5, "tpot_s": 0.03})
         for tp in ((1,), (1, 2))]


@pytest.mark.parametrize("model,cards,mode,targets,tp", CASES)
def test_best_plan_is_that_of_the_whole_split_space(model, cards, mode, targets, tp):
    setup = Setup(cards=cards, tp_options=tp, **(V4 if model == "v4" else V3))
    work = Workload(prompt_tokens=4096, output_tokens=1024, **mode, **targets)
    r = plan(setup, work)
    p, d = sides(setup, work)
    full = evaluate(setup, work, p, d, candidates=full_grid(setup, p, d))
    assert r.splits == len(full) and r.evaluated == len(r.candidates) < len(full)
    best = ranked(full)
    assert (r.best is None) == best.empty
    if r.best is None:
        assert r.reason.startswith("nothing fits: ") and "\n" not in r.reason
        # as close as the closest of the whole space: same failing constraints and shortfall
        from pdcalc.plan import _nothing_fits
        assert r.reason.split(" fails on ")[1] == _nothing_fits(full, setup, work).split(" fails on ")[1]
    else:
        assert r.reason == ""
        assert [int(r.best[k]) for k in KEYS] == [int(best.iloc[0][k]) for k in KEYS]
        for k in ("tokens_per_s_per_card", "ttft_s", "tpot_s"):
            assert r.best[k] == best.iloc[0][k]


def test_all_cards_evaluates_the_whole_space():
    setup = Setup(cards=64, use_all_cards=True, **V3)
    work = Workload(prompt_tokens=2048, output_tokens=512, concurrency=80)
    r = plan(setup, work)
    p, d = sides(setup, work)
    assert r.splits == r.evaluated == len(full_grid(setup, p, d)["p"])
    assert (r.candidates.cards == 64).all()


def test_split_count_is_arithmetic(v3_case):
    setup, work, p, d = v3_case
    assert count_splits(setup, p, d) == len(full_grid(setup, p, d)["p"])


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


def test_ranked_by_tokens_per_card(v3_case):
    setup, work, *_ = v3_case
    r = plan(setup, Workload(prompt_tokens=2048, output_tokens=512, concurrency=80, tpot_s=0.05))
    assert r.reason == "" and r.best is not None
    assert r.ranked.feasible.all()
    assert r.ranked.tokens_per_s_per_card.is_monotonic_decreasing
    assert math.isclose(r.best.output_tokens_per_s, work.concurrency / r.best.tpot_s, rel_tol=1e-12)


def test_large_cluster_is_linear():
    """Evaluated splits grow with the cluster, not with its square (no timing asserted)."""
    work = Workload(prompt_tokens=24576, output_tokens=8192, concurrency=122880)
    r = plan(Setup(cards=8192), work)
    assert r.splits > 10**8 > 10**6 > r.evaluated
    assert r.best is not None and r.best.cards <= 8192


# ------------------------------------------------------------------ nothing fits

def one_line(r):
    assert r.best is None and r.reason.startswith("nothing fits: ") and "\n" not in r.reason
    return r.reason


def test_nothing_fits_is_a_result_with_the_shortfall():
    r = plan(Setup(cards=16, **{**V3, "quant": "bf16"}), Workload(prompt_tokens=2048, output_tokens=512, concurrency=80))
    msg = one_line(r)
    # the closest is the largest instance on both sides, not a one-card side far short
    assert "1 x P8 + 1 x D8" in msg
    assert "P memory and D memory" in msg and "a P card is short by" in msg and "a D card by" in msg and "GiB" in msg


def test_nothing_fits_says_the_latency_and_capacity_shortfalls():
    w = dict(prompt_tokens=4096, output_tokens=1024)
    msg = one_line(plan(Setup(cards=64, **V3), Workload(**w, concurrency=256, ttft_s=1.5)))
    assert "fails on TTFT: TTFT" in msg and "ms against a target of 1,500.0 ms" in msg
    msg = one_line(plan(Setup(cards=16, **V4), Workload(**w, concurrency=256, tpot_s=0.03)))
    assert "fails on TPOT: TPOT" in msg and "against a target of 30.0 ms" in msg
    msg = one_line(plan(Setup(cards=32, tp_options=(1, 2), **V3), Workload(**w, concurrency=256)))
    m = re.search(r"fails on KV capacity: the D side holds ([\d,]+) of the 256 sequences in flight, ([\d,]+) short$", msg)
    assert m and int(m[1].replace(",", "")) + int(m[2].replace(",", "")) == 256
    msg = one_line(plan(Setup(cards=16, **V4), Workload(prompt_tokens=16384, output_tokens=64, rate_per_s=5.0)))
    assert re.search(r"fails on prefill load: prefill runs at [\d,]+% of its capacity with \d+ P instances? "
                     r"\(max 80%\)$", msg)


def test_no_layout_at_all_is_a_result():
    w = Workload(prompt_tokens=2048, output_tokens=512, concurrency=80)
    msg = one_line(plan(Setup(cards=64, sizes=(512,), **V3), w))
    assert "no instance size" in msg and "512" in msg
    msg = one_line(plan(Setup(cards=64, tp_options=(3,), **V3), w))
    assert "TP 3" in msg and "attention heads" in msg
    msg = one_line(plan(Setup(cards=64, tp_options=(16,), **V4), w))
    assert "output groups" in msg
    msg = one_line(plan(Setup(cards=40, sizes=(32,), **V3), w))
    assert "at least 64 cards" in msg
    r = plan(Setup(cards=40, sizes=(32,), **V3), w)
    assert r.splits == r.evaluated == 0 and r.candidates.empty


def test_one_split_outside_the_candidates(v3_case):
    setup, work, p, d = v3_case
    full = evaluate(setup, work, p, d, candidates=full_grid(setup, p, d))
    r = plan(setup, work)
    extra = full.merge(r.candidates[KEYS], on=KEYS, how="left", indicator=True).query("_merge == 'left_only'")
    row = extra.iloc[len(extra) // 2]
    one = evaluate_split(setup, work, **{k: int(row[k]) for k in KEYS if k != "cards"})
    for k in ("ttft_s", "tpot_s", "tokens_per_s_per_card", "binding", "feasible"):
        assert one[k] == row[k]
    with pytest.raises(LayoutError, match="needs 96 cards"):
        evaluate_split(setup, work, p_instances=2, p_size=32, d_instances=1, d_size=32)
    with pytest.raises(LayoutError, match="no D layout of 3 cards"):
        evaluate_split(setup, work, p_instances=1, p_size=8, d_instances=1, d_size=3)


def test_card_plans_of_a_split_add_up(v3_case):
    from pdcalc.hardware import get_card
    from pdcalc.memory import card_weights
    from pdcalc.plan import card_plans, seq_kv_bytes

    setup, work, *_ = v3_case
    best = plan(setup, work).best
    p_card, d_card = card_plans(setup, work, best)
    base = get_card(setup.card).usable_base_bytes
    for mp, role in ((p_card, "p"), (d_card, "d")):
        size, tp = int(best[f"{role}_size"]), int(best[f"{role}_tp"])
        assert mp.usable_bytes == pytest.approx(setup.utilization * base, rel=1e-12)
        assert mp.parts["weights"] == card_weights(setup.model, setup.quant, ep=size, tp=tp, mtp=setup.mtp).total_bytes
        assert mp.total_bytes == pytest.approx(sum(mp.parts.values()), rel=1e-12)
    assert p_card.parts["kv_cache"] == pytest.approx(float(seq_kv_bytes(setup, work.prompt_tokens)), rel=1e-12)
    per_rank = float(best["concurrency"]) / (int(best["d_instances"]) * int(best["d_size"]) // int(best["d_tp"]))
    ctx = work.prompt_tokens + work.output_tokens
    assert d_card.parts["kv_cache"] == pytest.approx(per_rank * float(seq_kv_bytes(setup, ctx)), rel=1e-12)
    assert p_card.fits and d_card.fits  # the best split is feasible, so both of its cards fit


def test_split_label(v3_case):
    from pdcalc.plan import split_label

    setup, work, *_ = v3_case
    best = plan(setup, work).best
    label = split_label(best)
    assert label.startswith(f"{int(best.p_instances)} x P{int(best.p_size)} + {int(best.d_instances)} x D")
    row = best.copy()
    row["p_tp"], row["d_tp"] = 2, 1
    assert split_label(row).endswith(", P TP 2")
    assert split_label(None) == "none"
