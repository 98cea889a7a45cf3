import pytest

from pdcalc import report
from pdcalc.kv_cache import engine_layout
from pdcalc.memory import card_weights, memory_plan


@pytest.mark.parametrize("engine", ["reference", "vllm", "vllm-ascend"])
def test_kv_layout_table_totals_are_the_layout_totals(engine):
    df = report.kv_layout_table(engine, "deepseek-v4-flash")
    lay = engine_layout(engine, "deepseek-v4-flash")
    total = df.loc[("all", "total")]
    assert total["fixed B per seq"] == pytest.approx(lay.fixed_bytes(True), rel=1e-12)
    assert total["B per token"] == pytest.approx(lay.per_token_bytes(True), rel=1e-12)


def test_pd_memory_table_rows_add_up():
    pw, dw = card_weights("deepseek-v4-flash", "w8a8", ep=8), card_weights("deepseek-v4-flash", "w8a8", ep=32)
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
import pandas as pd  # noqa: E402

from pdcalc.deployment import get_deployment  # noqa: E402
from pdcalc.memory import budget  # noqa: E402
from pdcalc.validation import logged_weights  # noqa: E402

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
    from pdcalc.display import table

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
    s = report.cluster_summary(dep, V4, "w8a8")
    full = report.cluster_map(dep, V4, "w8a8")
    assert list(s["server"]) == list(range(dep["servers"]))
    assert s["cards"].map(lambda c: int(c.split("–")[1]) - int(c.split("–")[0]) + 1).sum() == len(full)
    log = logged_weights(V4, "w8a8", ep=dep["prefill_dp"] * dep["prefill_tp"], mtp=True)
    p = s["instance"].str.startswith("P")
    assert (s.loc[p, "weights per card, engine log (GiB)"] == log.bytes / 2**30).all()
    assert s.loc[~p, "weights per card, engine log (GiB)"].isna().all()     # no log of the D layout
    for _, row in s.iterrows():
        cards = full[full["server"] == row["server"]]
        assert row["weights per card, pdcalc (GiB)"] == pytest.approx(cards["weights_gib"].iloc[0], rel=1e-12)


def test_card_memory_table_parts_add_up_and_a_logged_column_has_only_totals():
    w = card_weights(V4, "w8a8", ep=8, mtp=True)
    log = logged_weights(V4, "w8a8", ep=8, mtp=True)
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
    pw, dw = card_weights(V4, "w8a8", ep=8, mtp=True), card_weights(V4, "w8a8", ep=32, mtp=True)
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
    common = dict(model=V4, quant="w8a8", card="ascend-910b2", engine="vllm-ascend", mtp=True, utilization=0.9,
                  activation_bytes=2e9, framework_bytes=1.5e9, context=32768, p_cards=32)
    p = report.dp_sweep_table("P", [4, 8, 16], **common)
    assert p["logged weights (GiB)"].notna().tolist() == [False, True, False]
    assert p["instances"].tolist() == [8, 4, 2]
    assert (np.diff(p["real weights (GiB)"]) < 0).all() and (np.diff(p["article weights (GB)"]) < 0).all()
    d = report.dp_sweep_table("D", [8, 16, 32, 64], **common)
    assert "logged weights (GiB)" not in d.columns
    assert (np.diff(d["real seqs at context"]) >= 0).all() and (np.diff(d["article seqs at context"]) >= 0).all()


def test_cluster_summary_experts_of_a_server_are_its_cards_ranges_joined():
    s = report.cluster_summary(get_deployment("v4-flash-910b-pd"), V4, "w8a8")
    full = report.cluster_map(get_deployment("v4-flash-910b-pd"), V4, "w8a8")
    for _, row in s.iterrows():
        held = full[full["server"] == row["server"]]["experts"]
        lo, hi = (int(x) for x in row["experts of each layer on the server"].split("~"))
        assert (lo, hi) == (int(held.iloc[0].split("~")[0]), int(held.iloc[-1].split("~")[1]))
        assert hi - lo + 1 == row["experts per card"] * len(held)     # contiguous blocks, no overlap
