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
