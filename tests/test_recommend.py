"""pdcalc.plan.recommend: the split to run, its memory, the published deployment beside it and its flags."""

import json
import math
import re
import shlex

import pytest

from pdcalc.audit import answers
from pdcalc.core.checks import InputError
from pdcalc.core.errors import UnknownNameError
from pdcalc.core.units import GiB
from pdcalc.layout.deployment import get_deployment
from pdcalc.layout.memory import card_weights
from pdcalc.model.quant import V4_ASCEND_W8A8
from pdcalc.perf import traffic as tput
from pdcalc.plan import labels as labels_mod
from pdcalc.plan import launch as launch_mod
from pdcalc.plan import recommend as R
from pdcalc.plan import views
from pdcalc.plan import workload as workload_mod
from pdcalc.plan.labels import card_plans
from pdcalc.plan.roles import sides, weights_log
from pdcalc.plan.splits import evaluate_split
from pdcalc.plan.workload import Setup, Workload
from pdcalc.reality import measurements as M
from pdcalc.reality import weights as V

V4 = "deepseek-v4-flash"
V3 = "deepseek-v3"
V4_LOG = "vllm-ascend-13439-v4flash-weights-per-card"
V3_LOG = "vllm-ascend-2191-v3-w8a8-dp4tp4-weights-per-card"


def _v4(**kw):
    args = {**answers.article_setup(V4), **answers.article_workload(V4), "costs": "roofline", "ttft_s": None, "tpot_s": 0.05,
            **kw}
    return answers.recommend_vs_article(V4, **args)


def _v3(**kw):
    args = {**answers.article_setup(V3), **answers.article_workload(V3), "costs": "roofline", "ttft_s": None, "tpot_s": 0.05,
            **kw}
    return answers.recommend_vs_article(V3, **args)


@pytest.fixture(scope="module")
def v4():
    return _v4()


@pytest.fixture(scope="module")
def v3():
    return _v3()


# ---------------------------------------------------------------------------------------------
# targets and article inputs
# ---------------------------------------------------------------------------------------------
def test_default_targets_are_the_published_service_level_read_from_its_quotes():
    from pdcalc.reality import service_levels

    t = workload_mod.default_targets()
    lv = service_levels.get()
    # read independently from the quoted lines of the source (all times in milliseconds, the p99 the limits hold at)
    assert "# All times are in milli seconds" in lv.quotes
    assert t.ttft_s == pytest.approx(lv.quoted("ttft_latency") / 1e3, rel=1e-12)
    assert t.tpot_s == pytest.approx(lv.quoted("tpot_latency") / 1e3, rel=1e-12)
    assert lv.percentile == lv.quoted("target_latency_percentile")
    assert lv.url.startswith("https://github.com/mlcommons/inference/blob/") and lv.model == "DeepSeek-R1"
    with pytest.raises(UnknownNameError, match="service level"):
        service_levels.get("nope")


def test_published_layouts_come_from_the_sources():
    dep = get_deployment(launch_mod.TUTORIAL)
    s = answers.v4_article_split()
    assert s.cards == dep["servers"] * dep["cards_per_server"]
    assert (s.p_instances, s.p_size, s.d_instances, s.d_size) == (
        dep["prefill_instances"], dep["prefill_dp"], dep["decode_instances"], dep["decode_dp"])
    assert launch_mod.KV_CONNECTOR in dep["source"]
    v3 = answers.v3_article_layout()
    assert v3.cards == 32 and v3.ep is None and v3.model == V3      # the article's TP=8 + DP=4 (§2.2.4)
    assert answers.published_for(V4) == s and answers.published_for(V3) == v3 and answers.published_for("other") is None


def test_article_workloads_keep_the_articles_context():
    from pdcalc.audit.registry import printed_value

    w4, w3 = answers.article_workload(V4), answers.article_workload(V3)
    assert w4["prompt_tokens"] + w4["output_tokens"] == printed_value("v4-6.3-b-ctx")
    assert w3["prompt_tokens"] + w3["output_tokens"] == printed_value("v3-1.2-target-context")
    assert w3["concurrency"] == printed_value("v3-1.2-target-concurrency")
    for w in (w4, w3):
        assert w["output_tokens"] == pytest.approx(R.OUTPUT_SHARE * (w["prompt_tokens"] + w["output_tokens"]), abs=1)


# ---------------------------------------------------------------------------------------------
# the recommendation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["v4", "v3"])
def test_recommendation_is_the_plans_best_feasible_split_and_meets_the_targets(case, request):
    rec = request.getfixturevalue(case)
    assert rec.fits and rec.reason == ""
    best = rec.best
    assert bool(best["feasible"])
    assert all(best[f"slack: {k}"] >= 0 for k in workload_mod.CONSTRAINTS)
    assert best["tpot_s"] <= rec.targets.tpot_s
    top = rec.plan.ranked.iloc[0]
    assert labels_mod.split_label(top) == rec.label and best["tokens_per_s_per_card"] == top["tokens_per_s_per_card"]
    feasible = rec.plan.candidates[rec.plan.candidates["feasible"]]
    assert best["tokens_per_s_per_card"] >= feasible["tokens_per_s_per_card"].max() - 1e-9
    assert rec.binding == min(workload_mod.CONSTRAINTS, key=lambda k: best[f"slack: {k}"])
    assert rec.slack == pytest.approx(min(best[f"slack: {k}"] for k in workload_mod.CONSTRAINTS))
    assert rec.limits()["slack (%)"].is_monotonic_increasing


def test_a_ttft_target_is_met_too():
    loose = _v4()
    target = 0.8 * float(loose.best["ttft_s"])             # tighter than what the loose plan gives
    rec = _v4(ttft_s=target)
    assert rec.fits and rec.best["ttft_s"] <= target and rec.targets.ttft_s == target
    assert rec.targets.ttft_source == "given"


def test_no_tpot_target_is_no_constraint():
    rec = _v4(tpot_s=None)
    assert rec.targets.tpot_s is None and math.isinf(rec.best["slack: TPOT"])
    assert rec.best["tokens_per_s_per_card"] >= _v4().best["tokens_per_s_per_card"] - 1e-9


def test_rate_workload_is_recommended_too():
    w = answers.article_workload(V4)
    rec = answers.recommend_vs_article(V4, prompt_tokens=w["prompt_tokens"], output_tokens=w["output_tokens"], rate_per_s=2.0,
                                       costs="roofline", ttft_s=None, tpot_s=0.05)
    assert rec.fits
    b = rec.best      # Little's law: sequences in flight = rate x output tokens x TPOT
    assert b["concurrency"] == pytest.approx(2.0 * w["output_tokens"] * b["tpot_s"], rel=1e-3)


def test_invalid_workload_raises_input_error():
    with pytest.raises(InputError):
        R.recommend(V4, prompt_tokens=0, output_tokens=10, concurrency=4)
    with pytest.raises(InputError):
        R.recommend(V4, prompt_tokens=10, output_tokens=10, concurrency=4, rate_per_s=1.0)


# ---------------------------------------------------------------------------------------------
# launch settings
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["v4", "v3"])
def test_launch_settings_multiply_out_to_the_split(case, request):
    rec = request.getfixturevalue(case)
    p, d = rec.launch
    b = rec.best
    assert p.cards + d.cards == int(b["cards"])
    assert (p.instances, p.expert_parallel_size, p.tensor_parallel_size) == (b["p_instances"], b["p_size"], b["p_tp"])
    assert (d.instances, d.expert_parallel_size, d.tensor_parallel_size) == (b["d_instances"], b["d_size"], b["d_tp"])
    assert (p.kv_role, d.kv_role) == ("kv_producer", "kv_consumer")
    # D: every sequence in flight has a slot, and no rank is promised more than its KV capacity
    ranks = d.instances * d.data_parallel_size
    assert d.max_num_seqs * ranks >= b["concurrency"] - 1e-9
    assert d.max_num_seqs <= b["kv_capacity_seqs"] / ranks
    assert d.max_num_batched_tokens == d.max_num_seqs * (1 + d.speculative_tokens)
    # P: the step whose activations the P card books (prompts prefilled in chunks of it); context = prompt + output
    assert p.max_num_batched_tokens == launch_mod.p_step_tokens(rec.setup)
    assert p.activation_bytes <= rec.setup.p_overhead_bytes
    assert p.max_model_len == d.max_model_len == rec.workload.prompt_tokens + rec.workload.output_tokens
    assert p.gpu_memory_utilization == d.gpu_memory_utilization == rec.setup.utilization
    assert p.nodes_per_instance * p.cards_per_node >= p.expert_parallel_size


def test_launch_script_is_copyable_and_says_what_the_settings_say(v4):
    text = v4.script()
    assert text.isascii() and "\u2013" not in text
    p, d = v4.launch
    serves = text.split("vllm serve")[1:]
    assert len(serves) == 2                    # one run_dp_template.sh per role
    for x, block in zip((p, d), serves):
        assert f"--dp-size {x.data_parallel_size} --tp-size {x.tensor_parallel_size} " in text
        assert "--enable-expert-parallel" in block and f"--max-num-seqs {x.max_num_seqs} " in block
        quoted = re.search(r"--kv-transfer-config ('.+?}}}')", block, re.S).group(1)
        kv = json.loads(shlex.split(quoted)[0])
        assert kv["kv_connector"] == launch_mod.KV_CONNECTOR and kv["kv_role"] == x.kv_role
        assert kv["kv_connector_extra_config"]["decode"]["dp_size"] == d.data_parallel_size
    assert ("--speculative-config" in text) == v4.setup.mtp


def test_v4_flags_reproduce_the_tutorials_for_the_tutorials_split():
    """The same rules on the tutorial's own split give its D --max-num-batched-tokens and MTP tokens."""
    dep = get_deployment(launch_mod.TUTORIAL)
    w = answers.article_workload(V4)
    setup = Setup(model=V4, cards=64, measured_weights=True)
    work = Workload(prompt_tokens=w["prompt_tokens"], output_tokens=w["output_tokens"], concurrency=w["concurrency"])
    row = evaluate_split(setup, work, p_instances=4, p_size=8, d_instances=1, d_size=32)
    p_card, _ = card_plans(setup, work, row)
    room = p_card.usable_bytes - p_card.parts["weights"] - p_card.parts["overhead"]
    _, d = launch_mod.launches(setup, work, row, room, dep["mtp_speculative_tokens"], dep["cards_per_server"])
    assert d.max_num_seqs == dep["decode_max_num_seqs"] and d.data_parallel_size == dep["decode_dp"]
    assert d.max_num_batched_tokens == dep["decode_max_num_batched_tokens"]


# ---------------------------------------------------------------------------------------------
# memory, measured weights
# ---------------------------------------------------------------------------------------------
def test_plan_sizes_a_layout_from_its_log_only_when_asked():
    work = Workload(**answers.article_workload(V4))
    measured = Setup(model=V4, cards=64, measured_weights=True)
    plain = Setup(model=V4, cards=64)
    log = V.logged_weights(V4, V4_ASCEND_W8A8, ep=8, mtp=True)
    for (pm, dm), (pp, dp_) in [(sides(measured, work), sides(plain, work))]:
        for a, b in zip(pm + dm, pp + dp_):
            want = log.bytes if a.size == 8 and a.tp == 1 else card_weights(V4, V4_ASCEND_W8A8, ep=a.size, tp=a.tp,
                                                                              mtp=True).total_bytes
            assert a.weights_bytes == pytest.approx(want, rel=1e-12)
            assert b.weights_bytes == pytest.approx(card_weights(V4, V4_ASCEND_W8A8, ep=b.size, tp=b.tp, mtp=True).total_bytes)
    assert weights_log(plain, 8, 1) is None and weights_log(measured, 8, 1).id == V4_LOG
    assert weights_log(measured, 16, 1) is None
    with pytest.raises(InputError):
        Setup(measured_weights="yes")


def test_measured_weights_change_the_p_card_by_the_logs_difference():
    measured, plain = _v4(measured_weights=True), _v4(measured_weights=False)
    art = answers.v4_article_split()
    work = measured.workload
    rows = [evaluate_split(r.setup, work, p_instances=art.p_instances, p_size=art.p_size, d_instances=art.d_instances,
                           d_size=art.d_size) for r in (measured, plain)]
    (pm, dm), (pp, dp_) = (card_plans(r.setup, work, row) for r, row in zip((measured, plain), rows))
    log = V.logged_weights(V4, V4_ASCEND_W8A8, ep=art.p_size, mtp=True)
    assert pm.parts["weights"] == pytest.approx(log.bytes)
    assert pm.parts["weights"] - pp.parts["weights"] == pytest.approx(pp.free_bytes - pm.free_bytes)
    assert dm.parts == dp_.parts                                      # no log of the D32 layout
    # the recommendation says where its weights come from
    assert measured.weights_logs["P"] is not None and measured.weights_logs["P"].id == V4_LOG
    assert measured.p_card.parts["weights"] == pytest.approx(log.bytes)
    assert "registry " + V4_LOG in measured.weights_note()
    assert plain.weights_logs == {"P": None, "D": None} and "pdcalc's" in plain.weights_note()


@pytest.mark.parametrize("case", ["v4", "v3"])
def test_recommended_cards_fit_and_memory_parts_add_up(case, request):
    rec = request.getfixturevalue(case)
    for c in (rec.p_card, rec.d_card):
        assert c.fits and c.free_bytes == pytest.approx(c.usable_bytes - sum(c.parts.values()))
    mem = rec.memory().set_index("per card")
    cards = ((("co-located card (GiB)", labels_mod.aggregated_card_plan(rec.setup, rec.workload, rec.aggregated)),)
             if rec.colocated_wins else (("P card (GiB)", rec.p_card), ("D card (GiB)", rec.d_card)))
    assert list(mem.columns) == [col for col, _ in cards]
    for col, c in cards:
        parts = mem.loc[["weights", "KV cache in use", "activations and framework", "headroom"], col].sum()
        assert parts == pytest.approx(c.usable_bytes / GiB, abs=0.02)     # four parts rounded to 0.01 GiB


# ---------------------------------------------------------------------------------------------
# the published deployments beside it
# ---------------------------------------------------------------------------------------------
def test_v4_article_split_is_evaluated_with_the_planners_model(v4):
    art = v4.published_row
    assert art is not None and int(art["cards"]) == answers.v4_article_split().cards
    table = v4.comparison()
    alt = v4.aggregated
    assert alt is not None and bool(alt["feasible"])
    assert list(table["deployment"]) == ["recommended: " + v4.label,
                                         "co-located alternative: " + labels_mod.aggregated_label(alt),
                                         "article: " + answers.v4_article_split().label]
    assert table["cards used"].tolist() == [int(v4.best["cards"]), int(alt["cards"]), int(art["cards"])]
    assert table["tokens/s per card"].iloc[0] >= table["tokens/s per card"].iloc[2] or not art["feasible"]


def test_the_co_located_alternative_is_the_plans_and_the_mode_note_says_which_wins(v4, v3):
    for rec in (v4, v3):
        alt, plan = rec.aggregated, rec.plan
        assert alt is not None and alt["tokens_per_s_per_card"] == plan.best_aggregated["tokens_per_s_per_card"]
        assert rec.targets.tpot_s == plan.targets.tpot_s and rec.targets.tpot_source == plan.targets.tpot_source
        note = rec.mode_note()
        winner = "disaggregated" if rec.best["tokens_per_s_per_card"] > alt["tokens_per_s_per_card"] else "aggregated"
        assert plan.winner == winner and note.startswith(winner.capitalize() + " wins: ") and note.endswith(".")
        assert labels_mod.aggregated_label(alt) in note and rec.label in note
    small = _v4(cards=8)           # nothing fits either way: the note gives both shortfalls
    note = small.mode_note()
    assert small.plan.winner == "neither" and note.startswith("Neither meets the targets: disaggregated, ")
    assert "co-located, the closest co-located layout, " in note and small.aggregated is None


def test_v3_uses_the_log_where_the_layout_matches_and_compares_the_colocated_article(v3):
    b = v3.best
    for role in ("P", "D"):
        size, tp = int(b[f"{role.lower()}_size"]), int(b[f"{role.lower()}_tp"])
        log = V.logged_weights(V3, "w8a8", ep=size, tp=tp, mtp=False)
        assert (v3.weights_logs[role] is None) == (log is None)
        if log is not None:
            assert log.id == V3_LOG
    art = v3.published_row
    layout = answers.v3_article_layout()
    assert int(art["cards"]) == layout.cards
    # TP=8 replicas holding every expert do not fit a 910B2: the shortfall follows from the weights
    w = tput.weight_bytes_per_card(V3, "w8a8", tp=layout.tp, ep=None)
    assert art["weights_gib"] == pytest.approx(w / GiB, rel=1e-9)
    assert not art["feasible"] and art["binding"] == "memory" and "does not fit: a card is short by" in v3.published_issue
    assert art["tokens_per_s_per_card"] == pytest.approx(art["output_tokens_per_s"] / layout.cards)


def test_colocated_meets_memory_when_the_experts_are_spread():
    w = answers.article_workload(V3)
    setup = Setup(model=V3, cards=32, mtp=False)
    work = Workload(**w)
    spread = R.Colocated(label="TP8 x DP4, EP32", model=V3, source="test", tp=8, dp=4, ep=32)
    row = R.evaluate_colocated(setup, work, spread)
    assert row["slack: memory"] > R.evaluate_colocated(setup, work, answers.v3_article_layout())["slack: memory"]
    assert row["weights_gib"] == pytest.approx(card_weights(V3, "w8a8", ep=32, tp=8).total_bytes / GiB)


# ---------------------------------------------------------------------------------------------
# nothing fits is a result
# ---------------------------------------------------------------------------------------------
def test_nothing_fits_on_8_cards_is_a_result_with_the_shortfall():
    rec = _v4(cards=8)
    assert not rec.fits and rec.reason.startswith("nothing fits:") and "short by" in rec.reason
    assert rec.label == "nothing fits" and rec.why() == rec.reason
    assert rec.published_row is None and "64 cards" in rec.published_note
    assert rec.comparison().empty and rec.memory().empty and rec.limits().empty
    assert rec.script().startswith("# nothing fits:")


def test_a_card_without_the_checkpoints_flops_is_a_result():
    rec = _v4(card="h800")
    assert not rec.fits and rec.reason.startswith("nothing fits:") and "int8" in rec.reason


def test_an_unreachable_tpot_target_is_a_result():
    rec = _v4(tpot_s=1e-4)
    assert not rec.fits and "TPOT" in rec.reason
    assert rec.published_row is not None and not rec.published_row["feasible"]


# ---------------------------------------------------------------------------------------------
# what the chapter shows
# ---------------------------------------------------------------------------------------------
def test_workload_defaults_are_the_v4_articles():
    art = answers.article_workload(V4)
    w = answers.workload(output_tokens=art["output_tokens"])
    assert w == art
    w = answers.workload(context=4096, output_tokens=1024, rate_per_s=3.0)
    assert w == {"prompt_tokens": 3072, "output_tokens": 1024, "rate_per_s": 3.0}
    ctx = art["prompt_tokens"] + art["output_tokens"]
    with pytest.raises(InputError, match=f"^output_tokens: must be smaller than the context, {ctx:,} tokens"):
        answers.workload(output_tokens=ctx)


def test_sentences_follow_the_result(v4, v3):
    b = v4.best
    head = v4.headline()
    assert head.startswith("run " + v4.label) and f"{b['tokens_per_s_per_card']:,.0f}" in head
    assert f"{v4.published_row['tokens_per_s_per_card']:,.0f}" in head
    assert "times the article's" in v4.trade_off() and v4.published_issue == ""
    assert v3.published_issue in v3.headline() and v3.published_issue in v3.trade_off()
    assert f"{v4.targets.tpot_s * 1e3:,.1f} ms" in v4.condition() and "no TTFT target" in v4.condition()
    assert v4.limit_note().startswith("The tightest constraint is " + views.constraint_text(v4.binding))
    small = _v4(cards=8)
    assert small.headline() == small.reason == small.limit_note() and small.trade_off() == ""
    assert small.weights_note() == "No card to show: nothing fits"


def test_memory_and_limits_tables_show_what_a_reader_reads(v4):
    mem = v4.memory()
    assert list(mem.columns) == ["per card", "P card (GiB)", "D card (GiB)"]
    assert (mem[["P card (GiB)", "D card (GiB)"]] == mem[["P card (GiB)", "D card (GiB)"]].round(2)).all().all()
    lim = v4.limits()
    assert set(lim["constraint"]) <= set(workload_mod.CONSTRAINTS) and lim["slack (%)"].iloc[0] == pytest.approx(
        100 * v4.slack, abs=0.05)


def test_when_colocation_wins_the_answer_and_the_flags_are_the_colocated_layout():
    from pdcalc.plan.labels import aggregated_label

    cases = answers.article_cases()
    for rec in cases.values():
        assert rec.colocated_wins == (rec.plan.winner == "aggregated")
        script = rec.script()
        if rec.colocated_wins:
            assert rec.headline().startswith(f"run {aggregated_label(rec.aggregated)}")
            assert f"the best P/D split, {rec.label}" in rec.headline()
            assert "--data-parallel-size" in script and "--kv-transfer-config" not in script
            assert "co-located" in rec.launch_note()
        elif rec.fits:
            assert rec.headline().startswith(f"run {rec.label}")
            assert "--kv-transfer-config" in script and "--headless" not in script
        else:                              # nothing meets the targets: the result says which constraint fails
            assert rec.headline() == rec.reason and rec.reason.startswith("nothing fits")


def test_the_article_layout_made_feasible_with_ep_is_compared_under_the_planners_model(v3):
    """The V3 article's TP x DP holds every expert per replica and does not fit; one EP group over its cards is the
    planner's co-located option of that size and TP, shown beside the recommendation with the reason it loses."""
    pub = v3.published
    r = v3.published_with_ep
    assert pub.ep is None and r is not None
    assert (int(r["size"]), int(r["tp"]), int(r["instances"])) == (pub.cards, pub.tp, 1)
    table = v3.comparison().set_index("deployment")
    row = table.loc[f"article with EP{pub.cards}: {labels_mod.aggregated_label(r)}"]
    assert row["tokens/s per card"] == pytest.approx(float(r["tokens_per_s_per_card"]))
    assert f"EP{pub.cards}" in v3.trade_off()
    assert v3.colocated_wins and v3.fits    # this fixture's winner: the table names it, and the split it beats
    assert list(table.index[:2]) == ["recommended: " + labels_mod.aggregated_label(v3.aggregated),
                                     "best P/D split: " + v3.label]
