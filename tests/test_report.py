import pandas as pd
import pytest

from pdcalc.book import report
from pdcalc.layout.memory import card_weights, memory_plan
from pdcalc.model.kv_layout import engine_layout
from pdcalc.model.quant import V4_ASCEND_W8A8
from pdcalc.plan.workload import default_targets
from pdcalc.reality.weights import LoggedWeights


@pytest.mark.parametrize("engine", ["reference", "vllm", "vllm-ascend"])
def test_kv_layout_table_totals_are_the_layout_totals(engine):
    df = report.kv_layout_table(engine, "deepseek-v4-flash")
    lay = engine_layout(engine, "deepseek-v4-flash")
    total = df.loc[("all", "total")]
    assert total["fixed B per seq"] == pytest.approx(lay.fixed_bytes(True), rel=1e-12)
    assert total["B per token"] == pytest.approx(lay.per_token_bytes(True), rel=1e-12)


def test_pd_memory_table_rows_add_up():
    pw, dw = card_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=8), card_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=32)
    p = memory_plan("P", usable_bytes=60e9, capacity_bytes=64e9, weights=pw.total_bytes, kv_cache=1e9,
                    activations=2e9, framework=1.5e9)
    d = memory_plan("D", usable_bytes=60e9, capacity_bytes=64e9, weights=dw.total_bytes, kv_cache=20e9,
                    activations=2e9, framework=2e9)
    t = report.pd_memory_table(pw, dw, p, {"A": d})
    for side in ("P", "D"):
        parts = t.loc[["weights", "KV cache (A)", "activations", "framework"], side].sum()
        assert parts == pytest.approx(t.loc["total (A)", side], rel=1e-12)
        assert t.loc["class I (routed experts)", side] + t.loc["class II (replicated)", side] == pytest.approx(
            t.loc["weights", side], rel=1e-12)
    assert t.loc["class I (routed experts)", "P/D"] == pytest.approx(4.0, rel=1e-12)   # 32 vs 8 experts per card


def test_plans_table_shows_the_verdict():
    d = memory_plan("D", usable_bytes=57.6e9, capacity_bytes=64e9, weights=61e9)
    t = report.plans_table([d])
    assert t.loc["verdict", "D"] == "does not fit, short by 3.40 GB"
    assert t.loc["free", "D"] == "-3.40"


# ---------------------------------------------------------------------------------------------
# presentation helpers of the DeepSeek-V4-Flash chapters
# ---------------------------------------------------------------------------------------------
import math  # noqa: E402

import numpy as np  # noqa: E402

from pdcalc.layout.deployment import get_deployment  # noqa: E402
from pdcalc.layout.memory import budget  # noqa: E402
from pdcalc.reality.weights import logged_weights  # noqa: E402

V4 = "deepseek-v4-flash"


@pytest.mark.parametrize("x", [277.746811, 0.000712704, 1.0849, 12345.6, 6218.5, 0.25, 3.0, -0.0123456, 1e-9, 9.99996])
def test_sig_text_keeps_four_significant_figures_without_exponent(x):
    (text,) = report.sig_text([x])
    assert "e" not in text.lower()
    assert float(text.replace(",", "")) == pytest.approx(float(f"{x:.4g}"), rel=1e-12)
    assert not (("." in text) and text.endswith("0"))          # no trailing zeros after the point


def test_sig_text_integers_exact_and_missing_empty():
    assert report.sig_text([277025390592, 12, None, float("nan"), np.inf]) == ["277,025,390,592", "12", "", "", ""]


def test_sig_table_writes_every_row_and_each_float_by_its_own_figures():
    df = pd.DataFrame({"category": [f"c{i}" for i in range(40)], "GB": [277.7468 / 10**(i % 8) for i in range(40)]})
    h = report.sig_table(df, caption="t", csv_name="t").data
    assert h.count("<tr") == 41 and "e+" not in h and "e-" not in h
    assert ">277.7<" in h and ">0.00002777<" in h and "277.700000" not in h


def test_fold_wraps_a_table_in_a_closed_dropdown():
    from pdcalc.book.display import table

    inner = table(pd.DataFrame({"a": [1, 2]}), caption="x")
    h = report.fold(inner, "two rows <a>").data
    assert h.startswith("<details") and "open" not in h.split(">")[0]
    assert "<summary>two rows &lt;a&gt;</summary>" in h and inner.data in h


@pytest.mark.parametrize("ep", [1, 3, 8, 12, 32, 64])
def test_placement_grid_lists_every_card_once_and_every_expert(ep):
    g = report.placement_grid(256, ep)
    cells = [c for row in g.drop(columns="cards").itertuples(index=False) for c in row if c]
    assert len(cells) == ep
    experts = [e for c in cells for e in range(int(c.split("~")[0]), int(c.split("~")[1]) + 1)]
    assert experts == list(range(256))
    assert len(g) == math.ceil(ep / min(8, ep))


def test_cluster_summary_one_row_per_server_and_the_log_only_where_it_applies():
    dep = get_deployment("v4-flash-910b-pd")
    s = report.cluster_summary(dep, V4, V4_ASCEND_W8A8)
    full = report.cluster_map(dep, V4, V4_ASCEND_W8A8)
    assert list(s["server"]) == list(range(dep["servers"]))
    assert s["cards"].map(lambda c: int(c.split("–")[1]) - int(c.split("–")[0]) + 1).sum() == len(full)
    log = logged_weights(V4, V4_ASCEND_W8A8, ep=dep["prefill_dp"] * dep["prefill_tp"], mtp=True)
    p = s["instance"].str.startswith("P")
    assert (s.loc[p, "weights per card, engine log (GiB)"] == log.bytes / 2**30).all()
    assert s.loc[~p, "weights per card, engine log (GiB)"].isna().all()     # no log of the D layout
    for _, row in s.iterrows():
        cards = full[full["server"] == row["server"]]
        assert row["weights per card, pdcalc (GiB)"] == pytest.approx(cards["weights_gib"].iloc[0], rel=1e-12)


def test_card_memory_table_parts_add_up_and_a_logged_column_has_only_totals():
    w = card_weights(V4, V4_ASCEND_W8A8, ep=8, mtp=True)
    log = logged_weights(V4, V4_ASCEND_W8A8, ep=8, mtp=True)
    t = report.card_memory_table({"P": (w, budget("ascend-910b2", w.total_bytes)),
                                  "P, log": (log.bytes, budget("ascend-910b2", log.bytes))})
    cats = t.index[: list(t.index).index("weights, total")]
    assert t.loc[cats, "P"].sum() == pytest.approx(t.loc["weights, total", "P"], rel=1e-12)
    assert t.loc[cats, "P, log"].isna().all()
    for col in t.columns:
        usable = next(v for k, v in t[col].items() if k.startswith("usable"))
        assert t.loc["left after weights", col] == pytest.approx(usable - t.loc["weights, total", col], rel=1e-12)
    assert t.loc["weights, total", "P, log"] == pytest.approx(log.bytes / 2**30, rel=1e-12)


def test_pd_memory_table_logged_swaps_the_weights_and_keeps_the_rest():
    pw, dw = card_weights(V4, V4_ASCEND_W8A8, ep=8, mtp=True), card_weights(V4, V4_ASCEND_W8A8, ep=32, mtp=True)
    p = memory_plan("P", usable_bytes=58e9, capacity_bytes=65e9, weights=pw.total_bytes, kv_cache=1e9,
                    activations=2e9, framework=1.5e9)
    d = memory_plan("D", usable_bytes=58e9, capacity_bytes=65e9, weights=dw.total_bytes, kv_cache=20e9,
                    activations=2e9, framework=2e9)
    plain = report.pd_memory_table(pw, dw, p, {"A": d}, unit=2**30)
    assert report.pd_memory_table_logged(pw, dw, p, {"A": d}, None, unit=2**30).equals(plain)
    t = report.pd_memory_table_logged(pw, dw, p, {"A": d}, 50e9, unit=2**30, label="logged")
    col = t["logged"]
    parts = col[["weights", "KV cache (A)", "activations", "framework"]].sum()
    assert col["total (A)"] == pytest.approx(parts, rel=1e-12)
    assert col[["class I (routed experts)", "class II (replicated)"]].isna().all()
    assert col["share of capacity (A), %"] == pytest.approx(100 * col["total (A)"] * 2**30 / 65e9, rel=1e-12)
    assert t.drop(columns="logged").equals(plain)


def test_dp_sweep_table_the_log_at_its_layout_and_capacity_grows_with_dp():
    common = dict(model=V4, quant=V4_ASCEND_W8A8, card="ascend-910b2", engine="vllm-ascend", mtp=True, utilization=0.9,
                  activation_bytes=2e9, framework_bytes=1.5e9, context=32768, p_cards=32)
    p = report.dp_sweep_table("P", [4, 8, 16], **common)
    assert p["logged weights (GiB)"].notna().tolist() == [False, True, False]
    assert p["instances"].tolist() == [8, 4, 2]
    assert (np.diff(p["real weights (GiB)"]) < 0).all() and (np.diff(p["article weights (GB)"]) < 0).all()
    d = report.dp_sweep_table("D", [8, 16, 32, 64], **common)
    assert "logged weights (GiB)" not in d.columns
    assert (np.diff(d["real seqs at context"]) >= 0).all() and (np.diff(d["article seqs at context"]) >= 0).all()


def test_cluster_summary_experts_of_a_server_are_its_cards_ranges_joined():
    s = report.cluster_summary(get_deployment("v4-flash-910b-pd"), V4, V4_ASCEND_W8A8)
    full = report.cluster_map(get_deployment("v4-flash-910b-pd"), V4, V4_ASCEND_W8A8)
    for _, row in s.iterrows():
        held = full[full["server"] == row["server"]]["experts"]
        lo, hi = (int(x) for x in row["experts of each layer on the server"].split("~"))
        assert (lo, hi) == (int(held.iloc[0].split("~")[0]), int(held.iloc[-1].split("~")[1]))
        assert hi - lo + 1 == row["experts per card"] * len(held)     # contiguous blocks, no overlap


# ---- the plan, v3_throughput and validation chapters' tables and sentences

def _row(p_n, p_size, d_n, d_size, *, tpc, ttft, tpot, binding="P memory"):
    cards = p_n * p_size + d_n * d_size
    return pd.Series({"p_instances": p_n, "p_size": p_size, "p_tp": 1, "d_instances": d_n, "d_size": d_size,
                      "d_tp": 1, "cards": cards, "tokens_per_s_per_card": tpc, "output_tokens_per_s": tpc * cards,
                      "ttft_s": ttft, "tpot_s": tpot, "kv_capacity_seqs": 1904.0, "binding": binding})


SMALL = _row(2, 8, 1, 16, tpc=1022.4, ttft=6.665, tpot=0.02934)
WHOLE = _row(4, 8, 1, 32, tpc=765.0, ttft=4.698, tpot=0.01961)


def test_splits_table_leads_with_the_ranking_key_and_rounds_as_shown():
    df = report.splits_table(pd.DataFrame([SMALL, WHOLE]), 1)
    assert list(df.columns) == list(report.SPLIT_COLUMNS)
    assert df.columns[1] == "output tokens/s per card" and len(df) == 1
    row = df.iloc[0]
    assert row["split"] == "2 x P8 + 1 x D16" and row["cards"] == 32
    assert row["TTFT (s)"] == 6.67 and row["TPOT (ms)"] == 29.3 and row["output tokens/s per card"] == 1022


def test_splits_table_names_and_columns():
    df = report.splits_table(pd.DataFrame([SMALL, WHOLE]), names=["a", "b"], columns=report.SPLIT_COLUMNS[:3])
    assert list(df.columns) == ["plan", *report.SPLIT_COLUMNS[:3]] and list(df["plan"]) == ["a", "b"]


def test_split_tradeoff_states_what_the_smaller_split_gives_up():
    text = report.split_tradeoff(SMALL, WHOLE, "the article's deployment")
    assert "2 x P8 + 1 x D16 on 32 cards" in text and "4 x P8 + 1 x D32 on 64 cards" in text
    assert "pays with a TTFT of 6.67 s against 4.70 s" in text and "TPOT of 29.3 ms against 19.6 ms" in text
    assert "1.34 times the article's deployment" in text


def test_split_tradeoff_of_a_split_with_itself():
    assert "is the article's deployment itself" in report.split_tradeoff(WHOLE, WHOLE, "the article's deployment")


def test_split_tradeoff_of_a_split_better_on_every_count_pays_nothing():
    better = _row(2, 8, 1, 16, tpc=2000.0, ttft=1.0, tpot=0.01)
    assert "pays" not in report.split_tradeoff(better, WHOLE, "x")


def test_plan_card_memory_table_parts_add_up():
    p = memory_plan("P", usable_bytes=55 * 2**30, capacity_bytes=61 * 2**30, weights=47.4 * 2**30, kv_cache=2**29,
                    overhead=3.5e9)
    d = memory_plan("D", usable_bytes=55 * 2**30, capacity_bytes=61 * 2**30, weights=60 * 2**30, kv_cache=0.0)
    t = report.plan_card_memory_table({"P card": p, "D card": d})
    for col, plan in (("P card", p), ("D card", d)):
        parts = t.loc[[report._PART_NAMES.get(k, k.replace("_", " ")) for k in plan.parts], col].sum()
        assert parts == pytest.approx(t.loc["total", col], abs=0.02)
        assert t.loc["usable", col] - t.loc["total", col] == pytest.approx(t.loc["left", col], abs=0.02)
    assert t.loc["left", "D card"] < 0                  # over budget shows negative
    assert "KV cache" in t.index and "activations and framework" in t.index


def test_splits_display_keeps_each_split_on_one_line():
    out = report.splits_display(report.splits_table(pd.DataFrame([SMALL, WHOLE])), caption="c", csv_name="c").data
    assert out.count('<span style="white-space:nowrap">') == 2 and "4 x P8 + 1 x D32" in out


def test_weights_source_links_the_log_and_names_the_inventory():
    log = LoggedWeights(bytes=47.4 * 2**30, id="x", source="owner/repo issue #1 (comment)",
                        url="https://github.com/owner/repo/issues/1", layout="DP8, EP8")
    text = report.weights_source({"P": log, "D": None})
    assert "[owner/repo issue #1](https://github.com/owner/repo/issues/1)" in text and "47.4 GiB" in text
    assert "D weights come from pdcalc's tensor inventory" in text


def test_latency_targets_default_to_the_published_service_level():
    from pdcalc.reality import service_levels

    ttft_s, tpot_s, text = report.latency_targets()
    d = default_targets()
    assert (ttft_s, tpot_s) == (d.ttft_s, d.tpot_s) and ttft_s is not None
    assert f"]({service_levels.get().url})" in text and text.count("99th percentile") == 2


def test_latency_targets_given_by_the_reader():
    ttft_s, tpot_s, text = report.latency_targets(2000, 30)
    assert (ttft_s, tpot_s) == (2.0, 0.03) and text.count("as set in the parameters cell") == 2


def test_linked_table_links_cells_and_keeps_the_text_in_the_csv():
    import base64
    import re

    df = pd.DataFrame({"measurement": ["a-b", "c"], "x": [1.5, 2.25]})
    out = report.linked_table(df, caption="t", csv_name="t", links={"measurement": ["https://e.org/1", None]},
                              nowrap=("measurement",)).data
    assert '<a href="https://e.org/1" style="white-space:nowrap">a-b</a>' in out
    assert '<span style="white-space:nowrap">c</span>' in out
    csv = base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", out).group(1)).decode()
    assert csv.splitlines()[1].startswith("a-b,") and "href" not in csv


def test_published_runs_table_keeps_every_run_with_its_ratio():
    from pdcalc.reality import published_runs as tput

    pub = tput.compare_published("deepseek-v3")
    t = report.published_runs_table(pub)
    assert len(t) == len(pub) and t.columns[0] == "measurement"
    ratio = t["predicted (tokens/s per card)"] / t["measured (tokens/s per card)"]
    assert ratio.to_numpy() == pytest.approx(t["predicted / measured"].to_numpy(), abs=0.01)
    assert all(u and u.startswith("https://") for u in report.measurement_urls(t["measurement"]))


# ---- the validation chapter's tables
def test_validation_display_links_each_measurement_and_folds_the_quotes():
    from pdcalc.reality import validation as V

    df = V.table()
    shown = V.show(df, "weight_memory_per_card")
    out = report.validation_display(shown, caption="weights", csv_name="w").data
    assert out.count("<details") == 1 and "quote" in out
    for mid, url in zip(shown.index, report.measurement_urls(shown.index)):
        assert f'href="{url}"' in out and mid in out


def test_candidates_brief_keeps_every_candidate_and_the_chosen_ones():
    from pdcalc.reality import weights as weights_mod

    c = weights_mod.candidates_table()
    b = report.candidates_brief(c)
    assert len(b) == len(c) and b["chosen"].sum() == c["chosen"].sum()
    assert list(b.columns[:2]) == ["measurement", "candidate"]


def test_budgets_by_part_has_one_column_per_log():
    from pdcalc.reality import memory_checks

    kb = memory_checks.kv_budget_table()
    t = report.budgets_by_part(kb)
    assert list(t.columns) == ["part", *kb.index] and len(t) == kb.shape[1]


def test_articles_measured_in_gib():
    from pdcalc.audit import vs_measurements
    from pdcalc.reality import validation as V

    arts = vs_measurements.articles_vs_measurements(V.table())
    t = report.articles_measured_gib(arts)
    assert t["measured (GiB)"].to_numpy() == pytest.approx((arts["measured (GB)"] * 1e9 / 2**30).to_numpy(), abs=0.01)
    assert not any(c.endswith("(GB)") for c in t.columns)


def test_errata_brief_links_each_erratum_to_its_audit_row():
    from pdcalc.audit import claims
    from pdcalc.audit.errata import ERRATA

    out = report.errata_brief("validation").data
    homes = claims.pages()
    for e in ERRATA:
        assert f'href="{homes[e.claim_id]}.html#{claims.anchor(e.claim_id)}"' in out
    assert out.count("<tr") == len(ERRATA) + 1


# ---- numbers at the precision each quantity deserves (pdcalc.book.cells, through report)
def test_readable_writes_each_value_at_its_own_precision_and_ratios_at_three_figures():
    df = pd.DataFrame({"measured (tokens/s)": [73700.0, 36.906, 1436.1584, 158.0669], "card": ["a", "b", "c", "d"],
                       "after / measured": [1.2239, 0.93534, 2.0, 0.051034], "factor": [0.9297, 1.0, 1.5, 0.25],
                       "count": [1, 2, 3, 4]})
    texts = report.readable(df, ratios=("factor",))
    assert set(texts) == {"measured (tokens/s)", "after / measured", "factor"}  # float columns only
    assert texts["measured (tokens/s)"] == ["73,700", "36.91", "1,436", "158.1"]  # not 73,700.00 beside 36.91
    assert texts["after / measured"] == ["1.22", "0.935", "2.00", "0.0510"]
    assert texts["factor"] == ["0.930", "1.00", "1.50", "0.250"]
    assert report.readable(df, ratio_decimals=3)["after / measured"] == ["1.224", "0.935", "2.000", "0.051"]
    assert report.ratio_text([None, float("nan"), 0.0]) == ["", "", "0"]


def test_powers_in_a_sources_text_become_superscripts():
    assert report.powers_html("10**9 B as printed, 2**30 B as SGLang's") == \
        "10<sup>9</sup> B as printed, 2<sup>30</sup> B as SGLang's"
    assert report.powers_text("bytes / 2**30") == "bytes / 2^30" and report.powers_text("a ** b") == "a ** b"


def test_linked_table_readable_numbers_prose_quotes_and_breakable_columns():
    import base64
    import re

    df = pd.DataFrame({"source": ["day_6_one_more_thing.md"], "measured (tokens/s)": [73700.0],
                       "why": ["10**9 B"], "quote": ["took 21.00GiB"], "after / measured": [1.2239]})
    out = report.linked_table(df, caption="t", csv_name="t", readable_numbers=True, prose=("why",),
                              quotes=("quote",), breakable=("source",)).data
    cells = re.findall(r"<td[^>]*>(.*?)</td>", out)
    assert cells == ["day_<wbr>6_<wbr>one_<wbr>more_<wbr>thing.md", "73,700", "10<sup>9</sup> B",
                     '<span class="pdcalc-quote">took 21.00GiB</span>', "1.22"]
    csv = base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", out).group(1)).decode()
    assert csv.splitlines()[1] == 'day_6_one_more_thing.md,"73,700",10^9 B,took 21.00GiB,1.22'
    assert ".00" not in out.replace("21.00GiB", "")


def test_served_misses_write_ranges_out_without_exponents():
    import re

    out = report.served_misses().data
    assert not re.search(r"\de[+-]\d", out)
    ranges = re.findall(r"<td[^>]*>([\d,.]+ to [\d,.]+)</td>", out)
    assert len(ranges) == 12 and not re.search(r"\d{2}\.00\b", out)
