import numpy as np
import pandas as pd

from pdcalc import charts


def _candidates(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    status = rng.choice(["feasible", "P memory", "KV capacity", "TTFT"], n)
    return pd.DataFrame({
        "p_instances": rng.integers(1, 100, n), "p_size": 8, "d_instances": rng.integers(1, 100, n), "d_size": 32,
        "cards": rng.integers(2, 65536, n), "feasible": status == "feasible",
        "binding": np.where(status == "feasible", "TPOT", status), "tokens_per_s_per_card": rng.random(n) * 2000,
        "ttft_s": rng.random(n), "tpot_s": rng.random(n) / 10})


def _points(chart) -> list[dict]:
    spec = chart.to_dict()
    return max(spec["datasets"].values(), key=len)


def test_plan_chart_keeps_every_point_of_a_small_plan():
    df = _candidates(500)
    pts = _points(charts.plan_chart(df, df.head(1).assign(label="best"), "t"))
    keyed = df.assign(tpc=df.tokens_per_s_per_card.round(1), status=df.binding.where(~df.feasible, "feasible"))
    assert len(pts) == len(keyed.drop_duplicates(["cards", "tpc", "status"]))


def test_plan_chart_of_a_large_plan_stays_drawable_and_keeps_the_best():
    df = _candidates(200_000)
    chart = charts.plan_chart(df, df.head(1).assign(label="best"), "t")
    pts = _points(chart)
    assert len(pts) <= charts.PLAN_CHART_MAX_POINTS and "best split per range" in chart.to_dict()["title"]
    best = df[df.feasible].tokens_per_s_per_card.max()
    assert max(p["tokens_per_s_per_card"] for p in pts if p["status"] == "feasible") == float(f"{best:.4g}")


def test_chart_data_is_rounded():
    df = pd.DataFrame({"x": [1.0, 2.0], "y": [0.3800165107965131, 12.345678901]})
    spec = charts.altair().Chart(df).mark_point().encode(x="x:Q", y="y:Q").to_dict()
    (values,) = spec["datasets"].values()
    assert [v["y"] for v in values] == [0.38, 12.35] and [v["x"] for v in values] == [1, 2]
