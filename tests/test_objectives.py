"""The two objectives of a plan: a fixed cluster (the most output within every target, copies where they pay) and
a fixed load (the fewest cards that serve it, and what the rest can do)."""

from __future__ import annotations

import json

import pytest

from cli_harness import run_cli
from pdcalc.plan import objectives as O
from pdcalc.plan.search import plan
from pdcalc.plan.workload import Setup, Workload


@pytest.fixture(scope="module")
def v3():
    setup = Setup(model="deepseek-v3", quant="w8a8", card="ascend-910b2", cards=32, mtp=False, tp_options=(1, 2, 4, 8),
                  frontier_points=8)
    return plan(setup, Workload(prompt_tokens=1536, output_tokens=512, concurrency=80))


def test_fixed_cluster_is_the_best_copies_of_any_option_within_the_targets(v3):
    a = O.fixed_cluster(v3)
    f = v3.frontier[v3.frontier["meets_targets"].astype(bool)]
    totals = [(32 // int(r.cards)) * r.output_tokens_per_s for r in f.itertuples()]
    assert a is not None and a.output_tokens_per_s == pytest.approx(max(totals), rel=1e-12)
    assert a.cards <= 32 and a.cards == a.replicas * a.cards_each
    assert a.tokens_per_s_per_card == pytest.approx(a.output_tokens_per_s / a.cards)


def test_fixed_load_is_the_fewest_cards_that_meet_the_targets(v3):
    a = O.fixed_load(v3)
    cards = [int(c) for df in (v3.ranked, v3.aggregated_ranked) for c in df["cards"]]
    assert a is not None and a.cards == min(cards) and a.concurrency == 80
    assert a.rest and (str(32 - a.cards) in a.rest or a.rest == "no card is left")


def test_nothing_within_the_targets_is_an_answer_too():
    setup = Setup(model="deepseek-v3", quant="w8a8", card="ascend-910b2", cards=16, mtp=False, frontier_points=4)
    p = plan(setup, Workload(prompt_tokens=1536, output_tokens=512, concurrency=80, tpot_s=1e-4))
    assert O.answers(p) == {"fixed cluster": None, "fixed load": None}
    t = O.answers_table(p)
    assert list(t["layout"]) == ["nothing meets the targets"] * 2


def test_plan_json_names_each_answers_objective():
    out = run_cli("plan", "--model", "deepseek-v3", "--card", "ascend-910b2", "--cards", "32", "--prompt", "1536",
                  "--output", "512", "--concurrency", "80", "--tp", "1", "2", "4", "8", "--frontier-points", "8",
                  "--json")
    assert out.code == 0, out.err
    d = json.loads(out.out)["objectives"]
    assert set(d) == set(O.OBJECTIVES)
    for name, a in d.items():
        assert a["objective"] == name and a["cards"] <= 32


@pytest.fixture(scope="module")
def long_prompts():
    """DeepSeek-V4-Flash on 910B2 with the V4 article's long prompts: one prompt takes longer than the default TTFT."""
    from pdcalc.audit.answers import article_cases

    return article_cases()["v4"].plan


def test_an_out_of_reach_ttft_is_said_with_the_fastest_one_prompt_ttft(long_prompts):
    from dataclasses import replace

    from pdcalc.plan.workload import Targets

    p = long_prompts
    far = O.out_of_reach(p)
    assert O.fixed_cluster(p) is None and far is not None and far.fastest_s > p.targets.ttft_s
    # the fastest really is the fastest: one prompt at a time, nothing meets a target just under it, something just over
    one = replace(p.workload, concurrency=1, rate_per_s=None)
    quick = replace(p.setup, frontier_points=0)

    def feasible(ttft_s):
        q = plan(quick, one, targets=Targets(ttft_s=ttft_s, tpot_s=p.targets.tpot_s, ttft_source="t", tpot_source="t"))
        return len(q.ranked) + len(q.aggregated_ranked)

    assert feasible(far.fastest_s * 0.999) == 0 and feasible(far.fastest_s * 1.001) > 0
    # the answers then come under TTFT_ROOM times it (rounded up), meet it, and say the missed target
    assert O.TTFT_ROOM * far.fastest_s <= far.ttft_s <= 1.1 * O.TTFT_ROOM * far.fastest_s
    a = O.fixed_cluster(far.plan)
    assert a is not None and a.ttft_s <= far.ttft_s
    text = O.short_answer(p)
    assert O.seconds_text(p.targets.ttft_s) in text and O.seconds_text(far.ttft_s) in text and a.layout in text
    table = O.answers_table(p)
    assert table.loc[0, "objective"] == f"fixed cluster, TTFT at most {O.seconds_text(far.ttft_s)}"


def test_a_reachable_ttft_is_answered_as_given(v3):
    assert O.out_of_reach(v3) is None
    a = O.fixed_cluster(v3)
    assert O.short_answer(v3).startswith(f"run {a.layout} ({a.cards:,} cards)")


def test_the_headline_is_one_short_line_over_the_table(v3, long_prompts):
    a, b = O.fixed_cluster(v3), O.fixed_load(v3)
    more = "" if (a.layout, a.cards) == (b.layout, b.cards) else f"; for the given load, {b.layout} on {b.cards:,} cards"
    assert O.headline(v3) == f"run {a.layout} on {a.cards:,} cards" + more
    far = O.out_of_reach(long_prompts)
    line = O.headline(long_prompts)
    assert O.seconds_text(far.fastest_s) in line and O.seconds_text(far.ttft_s) in line and len(line) <= 160


def test_every_answer_figure_carries_its_likely_range(v3):
    """Under the served model each predicted figure of the answers is shown with its 80 % range, the point inside
    it; the roofline, a bound, carries none."""
    from dataclasses import replace

    from pdcalc.plan.search import range_factors

    assert v3.setup.costs == "served" and range_factors(v3.setup)
    t = O.answers_table(v3)
    ranged = [c for c in t.columns if c.endswith(", likely")]
    assert len(ranged) == 4
    for col in ranged:
        for cell in t[col]:
            point, rest = cell.split(" (")
            lo, hi = rest.rstrip(")").split(" to ")
            num = [float(x.replace(",", "")) for x in (lo, point, hi)]
            assert num[0] <= num[1] <= num[2], (col, cell)
    bound = plan(replace(v3.setup, costs="roofline"), v3.workload)
    assert not any(c.endswith(", likely") for c in O.answers_table(bound).columns)


def test_the_plan_chapters_tables_show_the_range_under_the_served_model(v3):
    from pdcalc.book import report

    df = report.splits_table(v3.ranked, 3)
    served = report.splits_display(df, caption="c", csv_name="c", setup=v3.setup).data
    assert "in brackets: the likely, 80 % range" in served and served.count(" to ") >= 4 * len(df)
    plain = report.splits_display(df, caption="c", csv_name="c").data
    assert "in brackets" not in plain


def test_the_command_lines_answers_carry_their_ranges(v3):
    from dataclasses import replace

    answered = [ln for ln in O.answer_lines(v3) if ": run " in ln]
    assert answered and all(ln.count("(likely ") == 4 for ln in answered)
    bound = plan(replace(v3.setup, costs="roofline"), v3.workload)
    assert not any("likely" in ln for ln in O.answer_lines(bound))
