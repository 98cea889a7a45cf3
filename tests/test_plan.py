import math
import re

import numpy as np
import pytest

from pdcalc.core.checks import InputError
from pdcalc.core.errors import LayoutError, PdcalcError
from pdcalc.plan.roles import seq_kv_bytes, sides
from pdcalc.plan.search import plan
from pdcalc.plan.splits import count_splits, evaluate, evaluate_loop, evaluate_split
from pdcalc.plan.workload import CONSTRAINTS, MAX_CARDS, Setup, Workload

#: The planner's mechanics are checked under the roofline (a step model with no fitted terms); the served
#: default has its own tests.
V3 = dict(model="deepseek-v3", quant="w8a8", card="ascend-910b2", mtp=False, engine="vllm", costs="roofline")
#: The latency targets those mechanics are checked under (a TPOT limit, no TTFT limit to speak of), given
#: explicitly so that a change of the published default does not change the scenarios.
LOOSE = dict(tpot_s=0.05, ttft_s=1e4)
V4 = dict(model="deepseek-v4-flash", quant="w8a8", card="ascend-910b2", mtp=True, engine="vllm-ascend",
          costs="roofline")
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


def test_card_without_the_compute_dtype_is_one_clear_error(tmp_path):
    w = Workload(prompt_tokens=10, output_tokens=10, concurrency=1)
    with pytest.raises(LayoutError) as exc:
        plan(Setup(cards=16, card="h800", quant="w8a8"), w)
    msg = str(exc.value)
    assert "h800" in msg and "int8" in msg and "w8a8" in msg and "\n" not in msg
    card = tmp_path / "no-bf16.toml"      # a card with FP16 and INT8 peaks but none for BF16 attention
    card.write_text('family = "ascend"\nlabel = "no bf16"\nhbm_bytes = 68719476736\nhbm_visible_bytes = 65455301591\n'
                    'hbm_bandwidth_bytes_per_s = 1.6e12\nflops_per_s = { fp16 = 376e12, int8 = 752e12 }\n'
                    'intra_node_bytes_per_s = 196e9\nscale_out_bytes_per_s = 25e9\ncards_per_node = 8\n')
    with pytest.raises(LayoutError, match="bf16.*attention"):
        plan(Setup(cards=16, card=str(card), quant="fp16-all"), w)
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
    work = r.workload                      # the targets the plan applied (the published TPOT where none given)
    assert work.tpot_s == targets.get("tpot_s", r.targets.tpot_s) and work.ttft_s == targets.get("ttft_s", r.targets.ttft_s)
    p, d = sides(setup, work)
    full = evaluate(setup, work, p, d, candidates=full_grid(setup, p, d))
    assert r.splits == len(full) and r.evaluated == len(r.candidates) < len(full)
    best = ranked(full)
    assert (r.best is None) == best.empty
    if r.best is None:
        assert r.reason.startswith("nothing fits: ") and "\n" not in r.reason
        # as close as the closest of the whole space: same failing constraints and shortfall
        from pdcalc.plan.search import _nothing_fits
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
    work = Workload(prompt_tokens=24576, output_tokens=8192, concurrency=122880, **LOOSE)
    r = plan(Setup(cards=8192, costs="roofline"), work)
    assert r.splits > 10**8 > 10**6 > r.evaluated
    assert r.best is not None and r.best.cards <= 8192
    # the co-located side too: every layout at every number of instances, cards // size of them
    assert r.aggregated_evaluated == sum(8192 // s for s in set(r.aggregated["size"])) < 10**5
    assert r.best_aggregated is not None and r.best_aggregated.cards <= 8192 and len(r.frontier) > 0


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
    from pdcalc.hardware.cards import get_card
    from pdcalc.layout.memory import card_weights
    from pdcalc.plan.labels import card_plans
    from pdcalc.plan.roles import seq_kv_bytes

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
    from pdcalc.plan.labels import split_label

    setup, work, *_ = v3_case
    best = plan(setup, work).best
    label = split_label(best)
    assert label.startswith(f"{int(best.p_instances)} x P{int(best.p_size)} + {int(best.d_instances)} x D")
    row = best.copy()
    row["p_tp"], row["d_tp"] = 2, 1
    assert split_label(row).endswith(", P TP 2")
    assert split_label(None) == "none"


# ------------------------------------------------------------------ targets

def test_targets_are_always_stated_with_their_sources():
    from pdcalc.plan.workload import default_targets
    from pdcalc.reality import service_levels

    w = Workload(prompt_tokens=2048, output_tokens=512, concurrency=80)
    r = plan(Setup(cards=64, frontier_points=0, **V3), w)
    published = default_targets()
    lv = service_levels.get()
    t = r.targets
    assert t.tpot_s == published.tpot_s == r.workload.tpot_s and t.tpot_source == published.tpot_source
    assert t.ttft_s == published.ttft_s == r.workload.ttft_s and t.ttft_source == published.ttft_source
    assert lv.name in t.tpot_source and lv.source in t.ttft_source and "99th percentile" in t.tpot_source
    assert t.as_dict()["TTFT"] == {"seconds": lv.ttft_s, "stated": t.stated("TTFT"), "source": published.ttft_source}
    given = plan(Setup(cards=64, frontier_points=0, **V3), Workload(prompt_tokens=2048, output_tokens=512,
                                                                     concurrency=80, ttft_s=3.0, tpot_s=0.07))
    assert (given.targets.ttft_s, given.targets.tpot_s) == (3.0, 0.07)
    assert given.targets.ttft_source == given.targets.tpot_source == "given"
    assert given.targets.stated("TTFT") == "3,000.0 ms" and given.targets.stated("TPOT") == "70.0 ms"
    # explicit targets (e.g. "no TPOT target") are applied as given
    none = Targets(ttft_s=None, tpot_s=None, ttft_source="none set", tpot_source="none set")
    free = plan(Setup(cards=64, frontier_points=0, **V3), w, targets=none)
    assert free.workload.tpot_s is None and math.isinf(free.best["slack: TPOT"]) and free.targets is none
    with pytest.raises(InputError, match="targets"):
        plan(Setup(cards=32, **V3), w, targets={"tpot_s": 0.05})


# ------------------------------------------------------------------ per-role TP

def test_per_role_tp_degrees_are_honoured():
    setup = Setup(cards=32, p_tp_options=(2,), d_tp_options=(4, 1, 4), frontier_points=0, **V3)
    assert setup.p_tps == (2,) and setup.d_tps == (4, 1) and setup.a_tps == (2, 4, 1)
    assert Setup(tp_options=(2, 1)).p_tps == Setup(tp_options=(2, 1)).d_tps == (2, 1)
    r = plan(setup, Workload(prompt_tokens=2048, output_tokens=512, concurrency=80, tpot_s=0.05))
    assert set(r.candidates.p_tp) == {2} and set(r.candidates.d_tp) == {1, 4}
    assert set(r.aggregated.tp) == {1, 2, 4}
    p, d = sides(setup, r.workload)
    assert {s.tp for s in p} == {2} and {s.tp for s in d} == {1, 4}
    assert r.splits == len(full_grid(setup, p, d)["p"]) == count_splits(setup, p, d)
    for bad in ((0,), (1, 2.5), "2", ()):
        with pytest.raises(InputError, match="p_tp_options"):
            Setup(p_tp_options=bad)
    with pytest.raises(InputError, match=r"d_tp_options\[0\]"):
        Setup(d_tp_options=(0,))
    msg = one_line(plan(Setup(cards=32, d_tp_options=(3,), frontier_points=0, **V3),
                        Workload(prompt_tokens=2048, output_tokens=512, concurrency=80)))
    assert "on the D side" in msg and "TP 3" in msg and "attention heads" in msg


# ------------------------------------------------------------------ aggregated (co-located)

from dataclasses import replace  # noqa: E402

from pdcalc.perf import step as tput  # noqa: E402
from pdcalc.plan.frontier_search import frontier_levels
from pdcalc.plan.labels import aggregated_card_plan, aggregated_label
from pdcalc.plan.roles import layouts
from pdcalc.plan.splits import evaluate_aggregated, evaluate_instances
from pdcalc.plan.workload import AGG_CONSTRAINTS, Targets

W4 = dict(prompt_tokens=8192, output_tokens=2048)


@pytest.mark.parametrize("mode", [{"concurrency": 256}, {"rate_per_s": 1.5}])
def test_aggregated_with_free_prefill_is_the_decode_side_alone(mode):
    """With the prefill cost set to zero, a co-located instance is a D instance: same TPOT and output at
    n = n_d, under the same step model (and with the real prefill cost, its steps are slower)."""
    setup = Setup(cards=64, **V4)
    work = Workload(**W4, **mode, tpot_s=0.05)
    lay = layouts(setup, work)
    free = [replace(a, prefill_s=0.0) for a in lay.a]
    agg = evaluate_aggregated(setup, work, free)
    dis = evaluate(setup, work, lay.p, lay.d)
    both = agg.merge(dis, left_on=["size", "tp", "instances"], right_on=["d_size", "d_tp", "d_instances"])
    both = both[np.isfinite(both.tpot_s_y)]
    assert len(both) > 20
    np.testing.assert_allclose(both.tpot_s_x, both.tpot_s_y, rtol=1e-9)
    np.testing.assert_allclose(both.output_tokens_per_s_x, both.output_tokens_per_s_y, rtol=1e-9)
    np.testing.assert_allclose(both.concurrency_x, both.concurrency_y, rtol=1e-9)
    assert (both.prefill_share == 0).all()
    real = evaluate_aggregated(setup, work, lay.a)
    ok = np.isfinite(real.tpot_s) & np.isfinite(agg.tpot_s)
    assert (real.tpot_s[ok] > agg.tpot_s[ok]).all()


def test_an_aggregated_option_recomputed_from_the_step_model():
    setup = Setup(cards=64, **V4)
    base = Workload(**W4, concurrency=1, tpot_s=0.05, ttft_s=60.0)
    a = next(x for x in layouts(setup, base).a if x.size == 16 and x.tp == 1)
    n, per_instance = 2, float(a.batch[len(a.batch) // 3])        # a batch of the step grid: no interpolation
    S = int(n * per_instance)
    row = evaluate_instances(setup, replace(base, concurrency=S), instances=n, size=16)
    P, L, T = base.prompt_tokens, base.output_tokens, base.tpot_s
    kw = dict(quant=setup.quant, mfu=setup.mfu, mbu=setup.mbu, comm_eff=setup.comm_eff)
    tdec = float(tput.step(setup.model, setup.card, tp=1, dp=16, ep=16, context=P + L / 2, concurrency=per_instance,
                           phase="decode", **kw).time_s)
    tpf = float(tput.step(setup.model, setup.card, tp=1, dp=16, ep=16, context=P, concurrency=16, phase="prefill",
                          **kw).time_s)
    per_rank = S / (n * 16)
    tau = tdec + per_rank / L * tpf                       # each step carries S_r / L_out prompts' worth of prefill
    b = min(P, P * (T - tdec) / tpf)                      # the chunk a step can carry within the TPOT target
    rho = per_rank * P / L / b
    ttft = (P * tdec / b + tpf) / (1 - rho)
    assert row["tpot_s"] == pytest.approx(tau, rel=1e-9) and row["decode_s"] == pytest.approx(tdec, rel=1e-9)
    assert row["chunk_tokens"] == pytest.approx(b, rel=1e-9) and row["prefill_load"] == pytest.approx(rho, rel=1e-9)
    assert row["ttft_s"] == pytest.approx(ttft, rel=1e-9)
    assert row["prefill_share"] == pytest.approx(per_rank / L * tpf / tau, rel=1e-9)
    assert row["tokens_per_s_per_card"] == pytest.approx(S / tau / (n * 16), rel=1e-9)
    assert tdec + b / P * tpf <= T + 1e-12                # even a step carrying a full chunk meets the target
    mp = aggregated_card_plan(setup, replace(base, concurrency=S), row)
    kv = per_rank * float(seq_kv_bytes(setup, P + L)) + float(seq_kv_bytes(setup, P))
    assert mp.parts["kv_cache"] == pytest.approx(kv, rel=1e-12) and mp.parts["overhead"] == setup.a_overhead_bytes
    assert aggregated_label(row) == "2 x 16 co-located"


def test_aggregated_rate_mode_obeys_littles_law_and_no_tpot_target_takes_whole_prompts():
    setup = Setup(cards=64, **V4)
    work = Workload(**W4, rate_per_s=1.0)
    df = evaluate_aggregated(setup, work)
    ok = df[np.isfinite(df.tpot_s)]
    assert len(ok) > 10
    np.testing.assert_allclose(ok.concurrency, work.rate_per_s * work.output_tokens * ok.tpot_s, rtol=1e-6)
    assert (df.chunk_tokens == work.prompt_tokens).all()           # no TPOT target: a whole prompt per step
    fast = evaluate_aggregated(setup, Workload(**W4, rate_per_s=40.0))
    sat = fast[fast.prefill_share >= 1]                            # a rate the prompts alone saturate
    assert len(sat) and not np.isfinite(sat.tpot_s).any() and not sat.feasible.any()
    assert set(sat.binding) <= {"memory", "prefill load"}
    served = np.isfinite(fast.decode_s)                             # layouts that hold a sequence
    assert (np.isfinite(fast.tpot_s[served]) == (fast.prefill_share[served] < 1)).all()


def test_aggregated_binding_and_feasibility_follow_the_slacks():
    setup = Setup(cards=64, tp_options=(1, 2), **V3)
    df = evaluate_aggregated(setup, Workload(prompt_tokens=2048, output_tokens=512, concurrency=200, tpot_s=0.08,
                                             ttft_s=30.0))
    assert len(df) == sum(64 // s.size for s in layouts(setup, Workload(prompt_tokens=2048, output_tokens=512,
                                                                         concurrency=1)).a)
    for _, row in df.iterrows():
        fails = [k for k in AGG_CONSTRAINTS if not row[f"slack: {k}"] >= 0]
        assert row.feasible == (not fails)
        assert row.binding == (fails[0] if fails else min(AGG_CONSTRAINTS, key=lambda k: row[f"slack: {k}"]))
    assert df.feasible.any() and (~df.feasible).any()
    assert (df.chunk_tokens <= 2048).all() and (df.cards <= 64).all()
    full = evaluate_aggregated(Setup(cards=64, use_all_cards=True, **V3),
                               Workload(prompt_tokens=2048, output_tokens=512, concurrency=400))
    assert (full.cards == 64).all() and len(full) > 0


# ------------------------------------------------------------------ which mode wins

@pytest.mark.parametrize("cards,work", [(64, dict(prompt_tokens=24576, output_tokens=8192, concurrency=960)),
                                        (16, dict(prompt_tokens=3072, output_tokens=1024, concurrency=256)),
                                        (32, dict(prompt_tokens=4096, output_tokens=1024, rate_per_s=2.0))])
def test_the_winner_is_the_mode_with_more_tokens_per_card(cards, work):
    r = plan(Setup(cards=cards, frontier_points=0, **V4), Workload(**work, **LOOSE))
    d, a = r.best, r.best_aggregated
    assert d is not None and a is not None
    winner = "disaggregated" if d.tokens_per_s_per_card > a.tokens_per_s_per_card else "aggregated"
    assert r.winner == winner and r.why.startswith(f"{winner} wins: ")
    assert split_label_of(d) in r.why and aggregated_label(a) in r.why and "\n" not in r.why
    ratio = max(d.tokens_per_s_per_card, a.tokens_per_s_per_card) / min(d.tokens_per_s_per_card,
                                                                         a.tokens_per_s_per_card)
    assert f"{ratio:.2f} times" in r.why
    a_rank = r.aggregated_ranked
    assert a_rank.feasible.all() and a_rank.tokens_per_s_per_card.is_monotonic_decreasing
    opts = r.options()
    assert list(opts["mode"]) == ["disaggregated", "aggregated"] and opts["meets every target"].all()
    mem = r.memory()
    assert list(mem.columns) == ["per card", "P card (GiB)", "D card (GiB)", "co-located card (GiB)"]
    for mp in r.card_memory().values():
        assert mp.fits


def split_label_of(row):
    from pdcalc.plan.labels import split_label
    return split_label(row)


def test_the_article_case_has_both_winners_somewhere():
    """Neither mode is built to win: on the article's cluster and long prompts the split wins, with short
    prompts on a small cluster co-location does (the comparison can fail either way)."""
    long = plan(Setup(cards=64, frontier_points=0, **V4), Workload(prompt_tokens=24576, output_tokens=8192,
                                                                    concurrency=960, **LOOSE))
    short = plan(Setup(cards=16, frontier_points=0, **V4), Workload(prompt_tokens=3072, output_tokens=1024,
                                                                     concurrency=256, **LOOSE))
    assert {long.winner, short.winner} == {"disaggregated", "aggregated"}


# ------------------------------------------------------------------ nothing fits, in every mode

@pytest.mark.parametrize("load", [{"concurrency": 4096}, {"rate_per_s": 50.0}])
@pytest.mark.parametrize("aggregated", [True, False])
@pytest.mark.parametrize("targets", [{}, {"ttft_s": 1.0, "tpot_s": 0.02}])
def test_nothing_fits_is_a_result_in_every_mode(load, aggregated, targets):
    r = plan(Setup(cards=8, aggregated=aggregated, frontier_points=4, **V4),
             Workload(prompt_tokens=16384, output_tokens=1024, **load, **targets))
    assert one_line(r)
    if aggregated:
        assert r.best_aggregated is None and "\n" not in r.aggregated_reason
        assert r.aggregated_reason.startswith("nothing fits: the closest co-located layout, ")
        assert r.why.startswith("neither meets the targets: disaggregated, ") and "co-located, the closest" in r.why
        assert not r.options()["meets every target"].any() and len(r.options()) == 2
    else:
        assert r.aggregated is None and r.why.startswith("co-located layouts were not evaluated")
    assert r.winner == "neither" and r.memory().empty
    ans = r.answer()
    assert ans["disaggregated"]["result"] == r.reason and ans["winner"] == "neither"
    assert isinstance(r.frontier, pd.DataFrame) and len(r.frontier) >= 1


def test_aggregated_shortfalls_are_named():
    w = dict(prompt_tokens=2048, output_tokens=512, concurrency=80)
    msg = plan(Setup(cards=16, frontier_points=0, **{**V3, "quant": "bf16"}), Workload(**w)).aggregated_reason
    assert "fails on memory: a card is short by" in msg and "GiB" in msg
    msg = plan(Setup(cards=64, frontier_points=0, **V3), Workload(**w, tpot_s=1e-4)).aggregated_reason
    assert "fails on TPOT: TPOT" in msg and "against a target of 0.1 ms" in msg
    msg = plan(Setup(cards=64, frontier_points=0, **V3), Workload(**w, ttft_s=0.05)).aggregated_reason
    assert "fails on TTFT: TTFT" in msg and "against a target of 50.0 ms" in msg   # 0.05 s, given
    msg = plan(Setup(cards=64, sizes=(128,), frontier_points=0, **V3), Workload(**w)).aggregated_reason
    assert msg.startswith("nothing fits: no co-located instance size tried (128)")


# ------------------------------------------------------------------ the frontier

import pandas as pd  # noqa: E402


@pytest.fixture(scope="module")
def v4_front():
    setup = Setup(cards=64, frontier_points=12, **V4)
    work = Workload(prompt_tokens=24576, output_tokens=8192, concurrency=960, **LOOSE)
    return setup, plan(setup, work)


def test_frontier_levels_span_one_sequence_to_what_memory_holds(v4_front):
    setup, r = v4_front
    lay = layouts(setup, r.workload)
    lv = frontier_levels(setup, r.workload, lay)
    assert lv[0] == 1 and 960 in lv and len(lv) <= setup.frontier_points + 1
    held = max([((64 - min(p.size for p in lay.p)) // d.size) * d.dp * d.seqs_per_rank for d in lay.d]
               + [(64 // a.size) * a.dp * a.seqs_per_rank for a in lay.a])
    assert lv[-1] == held
    grid = np.geomspace(1, held, setup.frontier_points)         # geometric, rounded to whole sequences
    assert np.array_equal(np.setdiff1d(lv, [960]), np.unique(grid.round()))
    assert np.diff(np.log(grid)) == pytest.approx(np.log(held) / (setup.frontier_points - 1))
    f = r.frontier
    from pdcalc.plan.frontier_search import FRONTIER_COLUMNS

    assert list(f.columns) == list(FRONTIER_COLUMNS)
    assert sorted(set(f["mode"])) == ["aggregated", "disaggregated"] and len(f) == 2 * len(lv)


def test_frontier_pareto_points_are_monotone(v4_front):
    _, r = v4_front
    for mode in ("disaggregated", "aggregated"):
        p = r.frontier[(r.frontier["mode"] == mode) & r.frontier["pareto"]].sort_values("tpot_s")
        assert len(p) >= 3
        assert p["tokens_per_s_per_card"].is_monotonic_increasing and p["tpot_s"].is_monotonic_increasing
        assert p["tokens_per_s_per_card"].diff().dropna().gt(0).all()
        others = r.frontier[(r.frontier["mode"] == mode) & ~r.frontier["pareto"]].dropna(subset=["tpot_s"])
        for _, o in others.iterrows():                         # every other point is dominated by a Pareto one
            assert ((p["tpot_s"] <= o["tpot_s"]) & (p["tokens_per_s_per_card"] >= o["tokens_per_s_per_card"])).any()


def test_frontier_points_meet_the_targets_until_none_does_and_never_beat_the_fastest(v4_front):
    _, r = v4_front
    f = r.frontier.dropna(subset=["tokens_per_s_per_card"])
    assert len(f) > 5 and f["meets_targets"].any() and (~f["meets_targets"]).any()
    assert (f["tokens_per_s_per_card"] <= f["fastest_tokens_per_s_per_card"] + 1e-9).all()
    meets = f[f["meets_targets"]]
    assert (meets["tpot_s"] <= r.targets.tpot_s).all()
    past = f[~f["meets_targets"]]                      # past the target: the fastest option, judged under every target
    assert (past["option"] == past["fastest_option"]).all() and (past["binding"] != "").all()
    assert past["binding"].isin(["TPOT", "prefill load", "TTFT", "KV capacity"]).all()
    for mode in ("disaggregated", "aggregated"):     # a mode meets the targets up to some concurrency, not beyond
        m = r.frontier[r.frontier["mode"] == mode]
        last = m.loc[m["meets_targets"], "concurrency"].max()
        assert not m.loc[m["concurrency"] > last, "meets_targets"].any()


@pytest.mark.parametrize("model,cards,tp,ttft", [("v4", 64, (1,), None), ("v3", 32, (1, 2), 2.0),
                                                 ("v3", 64, (1, 2, 4), None), ("v4", 2048, (1,), None),
                                                 ("v3", 1024, (1, 2), 2.0)])
def test_frontier_search_finds_what_ranking_every_split_finds(model, cards, tp, ttft):
    """Each level's split comes from a pruned search (the D side bounds the output per card); it is the
    one the planner's ranking of every evaluated split puts first. The large clusters have more D entries
    than the search's first batch, and batches of one make where it stops matter everywhere."""
    from pdcalc.plan.frontier_search import _best_split
    from pdcalc.plan.roles import decode_table as _decode_table
    from pdcalc.plan.roles import transfer_s as _transfer

    setup = Setup(cards=cards, tp_options=tp, **(V4 if model == "v4" else V3))
    work = Workload(prompt_tokens=4096, output_tokens=1024, concurrency=1, ttft_s=ttft, tpot_s=0.05)
    lay = layouts(setup, work)
    checked = 0
    for S in frontier_levels(setup, work, lay, 10):
        for w in (replace(work, concurrency=int(S)), replace(work, concurrency=int(S), tpot_s=None)):
            dec = _decode_table(setup, w, lay.d)
            best = ranked(evaluate(setup, w, lay.p, lay.d))
            for batch in (None, 1):            # batches of one: the search stops as early as its bound lets it
                found = _best_split(setup, w, lay.p, lay.d, dec, _transfer(setup, w, lay.p), batch=batch)
                assert (found is None) == best.empty
                if found is not None:
                    one = evaluate(setup, w, lay.p, lay.d, candidates=found).iloc[0]
                    assert [int(one[k]) for k in KEYS] == [int(best.iloc[0][k]) for k in KEYS]
                    checked += 1
    assert checked >= 8


def test_one_options_tpot_and_tokens_per_card_rise_with_concurrency():
    """Where the frontier must be monotone: for one option, more sequences in flight lengthen each step
    and raise the output per card (the step's time grows less than in proportion to its batch)."""
    setup = Setup(cards=64, **V4)
    levels = [8, 32, 128, 512]
    agg = [evaluate_instances(setup, Workload(**W4, concurrency=S), instances=2, size=16) for S in levels]
    dis = [evaluate_split(setup, Workload(**W4, concurrency=S), p_instances=1, p_size=8, d_instances=2, d_size=16)
           for S in levels]
    for rows in (agg, dis):
        tpot = [float(r["tpot_s"]) for r in rows]
        tpc = [float(r["tokens_per_s_per_card"]) for r in rows]
        assert tpot == sorted(tpot) and tpc == sorted(tpc) and tpot[0] < tpot[-1]


def test_the_frontier_reuses_the_step_tables(monkeypatch):
    """The step model is called per layout, not per frontier level."""
    import functools

    calls = []
    real = tput.step

    @functools.wraps(real)                # the planner reads step's signature for its defaults
    def counting(*a, **k):
        calls.append(k.get("phase"))
        return real(*a, **k)

    monkeypatch.setattr(tput, "step", counting)
    work = Workload(prompt_tokens=2048, output_tokens=512, concurrency=80)
    plan(Setup(cards=64, frontier_points=0, **V3), work)
    without = len(calls)
    calls.clear()
    plan(Setup(cards=64, frontier_points=24, **V3), work)
    assert len(calls) == without > 0


# ------------------------------------------------------------------ the frontier chart

def test_frontier_chart_fills_the_column_draws_both_modes_the_target_and_the_best(v4_front):
    import re as _re

    from pdcalc.book import charts

    _, r = v4_front
    chart = charts.frontier_chart(r.frontier, r.targets.tpot_s, "output per card against TPOT")
    spec = chart.to_dict()
    cfg = spec["config"]
    assert cfg["axis"]["labelFontSize"] >= 12 and cfg["axis"]["titleFontSize"] >= 13 and cfg["title"]["fontSize"] >= 13
    data = [row for rows in spec["datasets"].values() for row in rows]
    series = {row.get("series") for row in data if "series" in row}
    assert series == {"disaggregated (P/D split)", "co-located (aggregated)"}
    assert {"tpot_ms": 1e3 * r.targets.tpot_s, "label": "TPOT target 50 ms"} in data
    rings = [row for row in data if set(row) == {"tpot_ms", "tokens_per_s_per_card", "label", "mode"}]
    top = r.frontier_at_target()
    assert sorted(row["label"] for row in rings) == sorted(f"{top[m]['tokens_per_s_per_card']:,.0f}" for m in top)
    vlc = pytest.importorskip("vl_convert")
    svg = vlc.vegalite_to_svg(spec)
    width = float(_re.search(r'<svg[^>]*\swidth="([\d.]+)"', svg).group(1))
    assert 0.85 * charts.CHART_WIDTH <= width <= charts.CHART_WIDTH
    # without a TPOT target there is no rule, and a mode with nothing that runs is left out
    none = charts.frontier_chart(r.frontier[r.frontier["mode"] == "aggregated"], None, "t").to_dict()
    rows = [row for rows in none["datasets"].values() for row in rows]
    assert not any("TPOT target" in str(row.get("label")) for row in rows)
    assert {row.get("series") for row in rows if "series" in row} == {"co-located (aggregated)"}


def test_a_tie_in_output_per_card_is_broken_by_ttft():
    """Given a rate, both modes serve the same output; on as many cards the shorter TTFT wins."""
    r = plan(Setup(cards=64, d_tp_options=(1, 2), frontier_points=0, **V4),
             Workload(prompt_tokens=4096, output_tokens=1024, rate_per_s=5.0, ttft_s=3.0, tpot_s=0.05))
    d, a = r.best, r.best_aggregated
    assert d.tokens_per_s_per_card == pytest.approx(a.tokens_per_s_per_card, rel=1e-9)
    winner = "disaggregated" if d.ttft_s <= a.ttft_s else "aggregated"
    assert r.winner == winner and "both serve" in r.why and "has the shorter TTFT" in r.why
