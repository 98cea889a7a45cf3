"""The plan chapter's tables and sentences (pdcalc.report: splits_table, split_tradeoff, plan_card_memory_table,
weights_source, latency_targets)."""

import pandas as pd
import pytest

from pdcalc import report
from pdcalc.memory import memory_plan
from pdcalc.recommend import default_targets
from pdcalc.validation import LoggedWeights


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
    ttft_s, tpot_s, text = report.latency_targets()
    d = default_targets()
    assert (ttft_s, tpot_s) == (d.ttft_s, d.tpot_s) and ttft_s is None
    assert "](https://arxiv.org/abs/2506.12708)" in text and "No TTFT target" in text


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
    from pdcalc import throughput as tput

    pub = tput.compare_published("deepseek-v3")
    t = report.published_runs_table(pub)
    assert len(t) == len(pub) and t.columns[0] == "measurement"
    ratio = t["predicted (tokens/s per card)"] / t["measured (tokens/s per card)"]
    assert ratio.to_numpy() == pytest.approx(t["predicted / measured"].to_numpy(), abs=0.01)
    assert all(u and u.startswith("https://") for u in report.measurement_urls(t["measurement"]))


# ---- the validation chapter's tables
def test_validation_display_links_each_measurement_and_folds_the_quotes():
    from pdcalc import validation as V

    df = V.table()
    shown = V.show(df, "weight_memory_per_card")
    out = report.validation_display(shown, caption="weights", csv_name="w").data
    assert out.count("<details") == 1 and "quote" in out
    for mid, url in zip(shown.index, report.measurement_urls(shown.index)):
        assert f'href="{url}"' in out and mid in out


def test_candidates_brief_keeps_every_candidate_and_the_chosen_ones():
    from pdcalc import validation as V

    c = V.candidates_table()
    b = report.candidates_brief(c)
    assert len(b) == len(c) and b["chosen"].sum() == c["chosen"].sum()
    assert list(b.columns[:2]) == ["measurement", "candidate"]


def test_budgets_by_part_has_one_column_per_log():
    from pdcalc import validation as V

    kb = V.kv_budget_table()
    t = report.budgets_by_part(kb)
    assert list(t.columns) == ["part", *kb.index] and len(t) == kb.shape[1]


def test_articles_measured_in_gib():
    from pdcalc import validation as V

    arts = V.articles_vs_measurements(V.table())
    t = report.articles_measured_gib(arts)
    assert t["measured (GiB)"].to_numpy() == pytest.approx((arts["measured (GB)"] * 1e9 / 2**30).to_numpy(), abs=0.01)
    assert not any(c.endswith("(GB)") for c in t.columns)


def test_errata_brief_links_each_erratum_to_its_audit_row():
    from pdcalc import claims
    from pdcalc.errata import ERRATA

    out = report.errata_brief("validation").data
    homes = claims.pages()
    for e in ERRATA:
        assert f'href="{homes[e.claim_id]}.html#{claims.anchor(e.claim_id)}"' in out
    assert out.count("<tr") == len(ERRATA) + 1
