import json
import re

import numpy as np
import pandas as pd
import pytest

from pdcalc.book import charts
from pdcalc.book.report import CLASS_I
from pdcalc.hardware.cards import get_card
from pdcalc.model.inventory import get_inventory
from pdcalc.reality import bands as V

PRESETS = ["deepseek-v3", "deepseek-v3-article", "deepseek-v4-flash", "deepseek-v4-flash-article"]


def _candidates(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    status = rng.choice(["feasible", "P memory", "KV capacity", "TTFT"], n)
    return pd.DataFrame({
        "p_instances": rng.integers(1, 100, n), "p_size": 8, "d_instances": rng.integers(1, 100, n), "d_size": 32,
        "cards": rng.integers(2, 65536, n), "feasible": status == "feasible",
        "binding": np.where(status == "feasible", "TPOT", status), "tokens_per_s_per_card": rng.random(n) * 2000,
        "ttft_s": rng.random(n), "tpot_s": rng.random(n) / 10})


def _small_plan() -> pd.DataFrame:
    """A 64-card plan: feasible splits, infeasible ones that run, and memory failures at 0 tokens/s."""
    df = _candidates(300).assign(cards=lambda d: d["cards"] % 63 + 2)
    memory = df.index % 3 == 0
    return df.assign(binding=np.where(memory, "D memory", df["binding"]), feasible=df["feasible"] & ~memory,
                     tokens_per_s_per_card=np.where(memory, 0.0, df["tokens_per_s_per_card"]))


def _points(chart) -> list[dict]:
    spec = chart.to_dict()
    return max(spec["datasets"].values(), key=len)


# ------------------------------------------------------------------------------------------ classes
@pytest.mark.parametrize("model", PRESETS)
def test_class_one_is_what_the_ep_group_splits(model):
    df = charts.parameters_frame({"m": model})
    inv = get_inventory(model).frame()
    main = inv[inv["part"] == "main"]
    ep = main.loc[main["shard"] == "ep", "params"].sum()
    class_one = df.loc[df["class"] == charts.CLASS_I_LABEL, "params_b"].sum() * 1e9
    assert ep > 0 and class_one == pytest.approx(ep, rel=1e-12)
    assert df["params_b"].sum() * 1e9 == pytest.approx(main["params"].sum(), rel=1e-12)
    for cat in CLASS_I:  # the V4 article's class I stays class I
        label = charts.CATEGORY_LABELS[cat]
        assert set(df.loc[df["category"] == label, "class"]) <= {charts.CLASS_I_LABEL}


def test_v3_article_experts_are_class_one():
    df = charts.parameters_frame({"article": "deepseek-v3-article"}).set_index("category")
    assert df.loc["experts (as printed)", "class"] == charts.CLASS_I_LABEL
    assert df.loc["'Dense' (as printed)", "class"] == charts.CLASS_II_LABEL
    # and the chart's class II panel shows only the article's dense part
    spec = charts.parameter_chart({"article": "deepseek-v3-article"}, "t").to_dict()
    detail = spec["datasets"][spec["vconcat"][1]["data"]["name"]]
    assert [r["category"] for r in detail] == ["'Dense' (as printed)"]


# ------------------------------------------------------------------------------------------ every chart
def _kv_rows():
    ctx = [1024, 4096, 32768, 131072]
    return pd.DataFrame([{"context_tokens": c, "series": s, "mb_per_seq": c * k / 1e3, "kind": kind}
                         for s, k, kind in (("vllm (real layout)", 10, "real"), ("article, 44 KB per token", 44, "article"))
                         for c in ctx])


def _dp_rows():
    return pd.DataFrame([{"side": "D", "dp": n, "model": m, "seqs_per_card": s, "chosen": n == 32}
                         for m, seqs in (("article", (0, 9, 20, 27, 30)), ("real", (0, 44, 100, 140, 160)))
                         for n, s in zip((4, 8, 16, 32, 64), seqs)])


def _dp_gb_rows():
    return pd.DataFrame([{"side": side, "dp": n, "model": m, "quantity": q, "gb": 300 / n + (5 if q == "x" else 0),
                          "chosen": n == 8}
                         for side in ("P", "D") for n in (2, 4, 8, 16, 32) for m in ("article", "real")
                         for q in ("weights", "room for KV")])


def _per_layer_rows():
    return pd.DataFrame([{"phase": ph, "tp": t, "part": p, "ms": t * (3 if p == "TP all-reduce" else 1) / 10}
                         for ph in ("decode", "prefill") for t in (4, 8, 16) for p in ("TP all-reduce", "compute")])


def _ratio_table():
    groups = list(dict.fromkeys(V.GROUPS))
    return pd.DataFrame([{"id": f"some-long-measurement-id-{i}-per-card", "group": V.GROUPS[groups[i % len(groups)]],
                          "ratio": 0.5 + i / 10, "ratio_low": 0.4 + i / 10, "ratio_high": 0.7 + i / 10, "layout": "x"}
                         for i in range(12)])


CHARTS = {
    "parameter_chart": lambda: charts.parameter_chart(
        {"article": "deepseek-v4-flash-article", "official": "deepseek-v4-flash"}, "where the parameters go"),
    "memory_vs_ep_chart": lambda: charts.memory_vs_ep_chart(
        pd.DataFrame([{"ep": n, "model": m, "weights_gib": 280 / n + k} for n in (1, 2, 4, 8, 16, 32, 64, 128, 256)
                      for m, k in (("article (1 B/param)", 0), ("official (w8a8, MTP)", 5))]),
        55.0, {"P": 8, "D": 32}, "weights per card vs EP group size"),
    "kv_context_chart": lambda: charts.kv_context_chart(_kv_rows(), "KV cache per sequence"),
    "memory_stack_chart": lambda: charts.memory_stack_chart(
        pd.DataFrame([{"plan": f"article recomputed: D, scenario {s}", "part": p, "gb": 10.0, "usable_gb": 57.6}
                      for s in "AB" for p in ("weights", "kv cache", "activations", "framework")]), "memory per card"),
    "capacity_chart": lambda: charts.capacity_chart(
        pd.DataFrame([{"context_tokens": c, "series": s, "sequences": int(k * 1e6 / c)}
                      for s, k in (("article (44 KB per token)", 0.8), ("real (vllm-ascend)", 6)) for c in
                      (1024, 8192, 32768, 135000)]), 30,
        pd.DataFrame({"context_tokens": [16384, 65536], "sequences": [30, 15], "label": ["A", "D"]}), "capacity"),
    "transfer_chart": lambda: charts.transfer_chart(
        pd.DataFrame([{"prompt_tokens": p, "series": s, "ms": p * k} for s, k in (("article: 44 KB/token", 2e-3),
                                                                                  ("real bytes", 3e-4))
                      for p in (256, 8192, 131072)]),
        pd.DataFrame({"prompt_tokens": [8192], "ms": [20.0], "label": "article, as printed"}), "KV transfer time"),
    "dp_sweep_chart": lambda: charts.dp_sweep_chart(_dp_rows(), "sequences per D card vs dp", target=30,
                                                    target_label="the article's 30 sequences per card"),
    "dp_sweep_chart (GB, two sides)": lambda: charts.dp_sweep_chart(_dp_gb_rows(), "weights and KV room vs dp"),
    "per_layer_chart": lambda: charts.per_layer_chart(_per_layer_rows(), "time per layer", card="ascend-910b2"),
    "roofline_chart": lambda: charts.roofline_chart(
        pd.DataFrame([{"seqs_per_card": s, "series": n, "tokens_per_s_per_card": s * k}
                      for n, k in (("model", 50), ("compute roof", 900), ("memory roof", 60)) for s in (1, 10, 200)]),
        "decode per card"),
    "throughput_cards_chart": lambda: charts.throughput_cards_chart(
        pd.DataFrame([{"phase": ph, "cards": n, "layout": lay, "tokens_per_s": n * 1000.0 * k, "fits": n > 8}
                      for ph in ("prefill", "decode") for n in (8, 16, 32, 64)
                      for lay, k in (("TP8 replicas", 1), ("TP1, EP all", 2))]), 50000, "tokens/s vs cards"),
    "plan_chart": lambda: charts.plan_chart(_small_plan(), _small_plan().head(1).assign(label="best"),
                                            "every P/D split"),
    "tp_chart": lambda: charts.tp_chart(
        pd.DataFrame([{"tp": t, "series": s, "ms": v} for t in (4, 8, 16)
                      for s, v in (("compute, 80 tokens", 0.07), ("all-reduce, 80 tokens", 0.02))]),
        "time per layer", card="ascend-910b2"),
    "ratio_chart": lambda: charts.ratio_chart(_ratio_table(), "predicted / measured per measurement"),
    "frontier_chart": lambda: charts.frontier_chart(_small_frontier(), 0.05, "output per card vs TPOT"),
}


def _small_frontier() -> pd.DataFrame:
    from pdcalc.plan.frontier_search import frontier
    from pdcalc.plan.workload import Setup, Workload

    return frontier(Setup(cards=32), Workload(prompt_tokens=2048, output_tokens=512, concurrency=256))


def test_every_chart_function_is_covered():
    funcs = {n for n in dir(charts) if n.endswith("_chart") and callable(getattr(charts, n))}
    assert funcs <= {k.split(" ")[0] for k in CHARTS}


@pytest.mark.parametrize("name", CHARTS)
def test_chart_fills_the_column_and_no_more(name):
    vlc = pytest.importorskip("vl_convert")
    svg = vlc.vegalite_to_svg(CHARTS[name]().to_dict())
    width = float(re.search(r'<svg[^>]*\swidth="([\d.]+)"', svg).group(1))
    assert 0.85 * charts.CHART_WIDTH <= width <= charts.CHART_WIDTH, width


@pytest.mark.parametrize("name", CHARTS)
def test_chart_text_is_legible(name):
    config = CHARTS[name]().to_dict()["config"]
    assert config["axis"]["labelFontSize"] >= 12 and 13 <= config["axis"]["titleFontSize"] <= 14
    assert config["legend"]["labelFontSize"] >= 12 and config["header"]["labelFontSize"] >= 12
    assert config["title"]["fontSize"] >= 13


# ------------------------------------------------------------------------------------------ plan
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


def _filters(spec) -> list[str]:
    return [t["filter"] for t in spec.get("transform", []) if "filter" in t]


def test_plan_chart_draws_feasible_splits_on_top_and_the_zeros_apart():
    df = _small_plan()
    spec = charts.plan_chart(df, df.head(1).assign(label="best"), "t").to_dict()
    main, strip = spec["vconcat"]
    layers = [(_filters(layer), layer["mark"]) for layer in main["layer"]]
    (i_inf, inf), = [(i, m) for i, (f, m) in enumerate(layers) if f == ["datum.layer == 'infeasible'"]]
    (i_ok, ok), = [(i, m) for i, (f, m) in enumerate(layers) if f == ["datum.layer == 'feasible'"]]
    assert i_ok > i_inf  # drawn later: on top
    assert ok["size"] > inf["size"] and ok["opacity"] == 1 > inf["opacity"] and inf["filled"] is False
    assert not any("cannot run" in f for f, _ in layers for f in f)
    assert _filters(strip) == ["datum.layer == 'cannot run'"]
    # the layer column: 0 tokens/s and infeasible exactly when "cannot run"
    pts = spec["datasets"][spec["data"]["name"]] if "data" in spec else _points(charts.plan_chart(
        df, df.head(1).assign(label="best"), "t"))
    for p in pts:
        assert (p["layer"] == "cannot run") == (p["status"] != "feasible" and p["tokens_per_s_per_card"] == 0)
        assert (p["layer"] == "feasible") == (p["status"] == "feasible")
    n_zero = int(((df["binding"] == "D memory") & ~df["feasible"] & (df["tokens_per_s_per_card"] == 0)).sum())
    assert strip["title"]["text"].startswith(f"{n_zero:,} splits cannot run")


def test_plan_chart_without_zeros_has_no_strip():
    df = _candidates(300)
    spec = charts.plan_chart(df, df.head(1).assign(label="best"), "t").to_dict()
    assert len(spec["vconcat"]) == 1


def test_plan_chart_labels_splits_at_one_point_once():
    df = _small_plan()
    best = df[df["feasible"]].head(1)
    marks = pd.concat([best.assign(label="best"), best.assign(label="the article's deployment")])
    spec = json.dumps(charts.plan_chart(df, marks, "t").to_dict())
    assert "best = the article's deployment" in spec


# ------------------------------------------------------------------------------------------ dp sweep
def test_dp_sweep_chart_plots_sequences_per_card():
    spec = charts.dp_sweep_chart(_dp_rows(), "t", target=30, target_label="the article's 30").to_dict()
    layers = spec["layer"]
    ys = {layer["encoding"]["y"]["field"] for layer in layers if "y" in layer["encoding"]
          and "field" in layer["encoding"]["y"]}
    assert ys == {"seqs_per_card"}
    assert spec["title"]["subtitle"] == "first dp that holds 30 sequences per card: article: dp 64, real: dp 8"
    # article dashed, real solid, in the legend too; distinct point shapes
    (line,) = [layer for layer in layers if layer["mark"]["type"] == "line"]
    dash = line["encoding"]["strokeDash"]
    assert dict(zip(dash["scale"]["domain"], dash["scale"]["range"])) == {"article": charts.DASHED, "real": charts.SOLID}
    assert dash["legend"]["symbolType"] == "stroke" and line["encoding"]["color"]["field"] == "model"
    shapes = {layer["mark"]["shape"] for layer in layers if layer["mark"]["type"] == "point"}
    assert len(shapes) == 2


def test_dp_sweep_chart_of_gb_keeps_two_sides():
    spec = charts.dp_sweep_chart(_dp_gb_rows(), "t").to_dict()
    assert spec["facet"]["column"]["field"] == "side"
    assert "gb" in json.dumps(spec["spec"])


# ------------------------------------------------------------------------------------------ servers
@pytest.mark.parametrize("fn", [charts.per_layer_chart, charts.tp_chart])
def test_tp_charts_shade_the_groups_that_span_servers(fn):
    card = get_card("ascend-910b2")
    rows = _per_layer_rows() if fn is charts.per_layer_chart else pd.DataFrame(
        [{"tp": t, "series": "s", "ms": 1.0} for t in (4, 8, 16)])
    spec = json.dumps(fn(rows, "t", card=card).to_dict())
    assert f"datum.tp > {card.cards_per_node}" in spec and "across servers" in spec
    assert f"{card.scale_out_bytes_per_s / 1e9:g} GB/s" in spec
    assert "across servers" not in json.dumps(fn(rows, "t").to_dict())


def test_capacity_chart_reads_a_few_and_many_sequences():
    spec = CHARTS["capacity_chart"]().to_dict()
    (y,) = [layer["encoding"]["y"] for layer in spec["layer"] if layer["encoding"].get("y", {}).get("field") == "sequences"
            and "scale" in layer["encoding"]["y"]]
    assert y["scale"]["type"] == "log" and {5, 10, 100, 1000} <= set(y["axis"]["values"])


def test_chart_data_is_rounded():
    df = pd.DataFrame({"x": [1.0, 2.0], "y": [0.3800165107965131, 12.345678901]})
    spec = charts.altair().Chart(df).mark_point().encode(x="x:Q", y="y:Q").to_dict()
    (values,) = spec["datasets"].values()
    assert [v["y"] for v in values] == [0.38, 12.35] and [v["x"] for v in values] == [1, 2]


def test_ratio_chart_reads_its_axis_at_the_top_and_the_bottom():
    """The validation chart is one row per measurement, taller than a screen: its ratio axis is drawn above
    the first row and below the last, with the same ticks, and no other layer draws an x axis of its own."""
    vlc = pytest.importorskip("vl_convert")
    spec = charts.ratio_chart(_ratio_table(), "predicted / measured per measurement").to_dict()
    vega = vlc.vegalite_to_vega(spec)
    x_axes = [a for a in vega["axes"] if a["orient"] in ("top", "bottom") and not a.get("grid")]
    assert sorted(a["orient"] for a in x_axes) == ["bottom", "top"]
    assert all(a["values"] == list(charts.RATIO_TICKS) for a in x_axes)
    svg = vlc.vegalite_to_svg(spec)
    labels = re.findall(r'role-axis-label[^>]*>.*?</g>', svg, re.S)
    assert len(labels) == 3  # top, bottom, and the measurement ids
