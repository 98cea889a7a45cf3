"""Altair charts for the chapters (lowercase axis titles with units; the caption is the title).

Altair is imported lazily: the package itself needs only numpy and pandas.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pdcalc.inventory import get_inventory
from pdcalc.precision import SIG, tidy
from pdcalc.report import CLASS_I

#: Most points the planner's chart draws (Altair embeds every point in the page).
PLAN_CHART_MAX_POINTS = 4000

#: Name of the Altair data transformer that rounds every chart's data (:func:`altair`).
ROUNDING_TRANSFORMER = "pdcalc-rounded"


def altair():
    """The ``altair`` module, with chart data rounded to :data:`pdcalc.precision.SIG` figures.

    Every DataFrame handed to a chart passes through :func:`pdcalc.precision.tidy` before Altair
    serialises it into the chart spec, so the committed spec (and the hashed name of its dataset) is
    the same on every machine. The transformer wraps the one that was active, and stays enabled in
    the process (a chapter's own charts are rounded too).
    """
    import altair as alt

    if alt.data_transformers.active != ROUNDING_TRANSFORMER:
        base = alt.data_transformers.get()

        def rounded(data, *args, **kwargs):
            if isinstance(data, pd.DataFrame):
                data = tidy(data, SIG)
            return base(data, *args, **kwargs)

        alt.data_transformers.register(ROUNDING_TRANSFORMER, rounded)
        alt.data_transformers.enable(ROUNDING_TRANSFORMER)
    return alt

#: Legends under the plot, so that a chart fits the book's text column.
_BOTTOM = {"orient": "bottom", "columns": 2, "labelLimit": 260}

CATEGORY_LABELS = {
    "routed_experts": "routed experts", "shared_experts": "shared experts", "dense_ffn": "dense FFN",
    "attention": "attention", "kv_compressor": "KV compressors", "indexer": "indexers", "router": "router",
    "hash_routing": "hash-routing table", "norms": "norms", "mhc": "mHC mixing", "embedding": "embedding",
    "lm_head": "LM head", "mtp_proj": "MTP projections", "non_expert": "'Dense' (as printed)",
    "all_experts": "experts (as printed)",
}


def parameters_frame(models: dict[str, str]) -> pd.DataFrame:
    """Long table ``model, category, class, params_b`` for :func:`parameter_chart`."""
    rows = []
    for label, model in models.items():
        for cat, n in get_inventory(model).by_category().items():
            rows.append({"model": label, "category": CATEGORY_LABELS.get(cat, cat),
                         "class": "class I (EP-split)" if cat in CLASS_I else "class II (replicated)",
                         "params_b": n / 1e9})
    return pd.DataFrame(rows)


def parameter_chart(models: dict[str, str], title: str):
    """Where the parameters go: class I vs class II per model, and class II by category."""
    alt = altair()

    df = parameters_frame(models)
    split = (
        alt.Chart(df, title="class I vs class II")
        .mark_bar()
        .encode(
            x=alt.X("sum(params_b):Q", title="parameters (billions)"),
            y=alt.Y("model:N", title=None),
            color=alt.Color("class:N", title="class", scale=alt.Scale(scheme="tableau10")),
            tooltip=["model", "class", alt.Tooltip("sum(params_b):Q", format=".3f", title="params (B)")],
        )
        .properties(width=420, height=70)
    )
    detail = (
        alt.Chart(df[df["class"] != "class I (EP-split)"], title="class II by category")
        .mark_bar()
        .encode(
            x=alt.X("params_b:Q", title="parameters (billions)"),
            y=alt.Y("category:N", title=None, sort="-x"),
            yOffset="model:N",
            color=alt.Color("model:N", title="model", scale=alt.Scale(scheme="set2")),
            tooltip=["model", "category", alt.Tooltip("params_b:Q", format=".4f", title="params (B)")],
        )
        .properties(width=420, height=alt.Step(9))
    )
    return (alt.vconcat(split, detail).resolve_scale(color="independent")
            .properties(title=title).configure_axis(labelLimit=200))


def memory_vs_ep_chart(rows: pd.DataFrame, usable_gib: float, marks: dict, title: str):
    """Weights per card against EP size, one line per model, the usable memory as a rule.

    ``rows`` has columns ``ep, model, weights_gib``; ``marks`` maps a label ("P", "D") to an EP size.
    """
    alt = altair()

    base = alt.Chart(rows)
    lines = base.mark_line(point=True).encode(
        x=alt.X("ep:Q", title="EP group size (cards)", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("weights_gib:Q", title="weights per card (GiB)"),
        color=alt.Color("model:N", title="model"),
        tooltip=["model", "ep", alt.Tooltip("weights_gib:Q", format=".2f")],
    )
    rule = alt.Chart(pd.DataFrame({"y": [usable_gib], "label": ["usable memory"]})).mark_rule(
        strokeDash=[4, 4], color="gray").encode(y="y:Q")
    mk = pd.DataFrame([{"ep": v, "label": k} for k, v in marks.items()])
    marks_layer = alt.Chart(mk).mark_rule(color="black", opacity=0.4).encode(x="ep:Q") + alt.Chart(mk).mark_text(
        dy=-140, dx=6, align="left").encode(x="ep:Q", text="label:N")
    return (lines + rule + marks_layer).properties(width=440, height=300, title=title)


def kv_context_chart(rows: pd.DataFrame, title: str):
    """KV cache per sequence against context, log-log; ``rows``: ``context_tokens, series, mb_per_seq, kind``
    (kind "article" draws dashed)."""
    alt = altair()

    return alt.Chart(rows).mark_line().encode(
        x=alt.X("context_tokens:Q", title="context (tokens)", scale=alt.Scale(type="log", nice=False)),
        y=alt.Y("mb_per_seq:Q", title="KV cache per sequence (MB)", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=None, legend=_BOTTOM),
        strokeDash=alt.StrokeDash("kind:N", title=None, legend=None,
                                  scale=alt.Scale(domain=["real", "article"], range=[[1, 0], [6, 3]])),
        tooltip=["series", "context_tokens", alt.Tooltip("mb_per_seq:Q", format=",.1f", title="MB per sequence")],
    ).properties(width=380, height=280, title=title)


def memory_stack_chart(rows: pd.DataFrame, title: str):
    """Stacked per-card memory; ``rows``: ``plan, part, gb, usable_gb`` (one usable value per plan)."""
    alt = altair()

    order = {"weights": 0, "kv cache": 1, "activations": 2, "framework": 3}
    rows = rows.assign(order=rows["part"].map(order).fillna(9))
    bars = alt.Chart(rows).mark_bar().encode(
        x=alt.X("sum(gb):Q", title="memory per card (GB)"),
        y=alt.Y("plan:N", title=None, sort=None),
        color=alt.Color("part:N", title=None, sort=list(order), scale=alt.Scale(scheme="tableau10"), legend=_BOTTOM),
        order=alt.Order("order:Q"),
        tooltip=["plan", "part", alt.Tooltip("gb:Q", format=".2f", title="GB")],
    )
    usable = rows.drop_duplicates("plan")[["plan", "usable_gb"]]
    ticks = alt.Chart(usable).mark_tick(color="black", thickness=2, size=22).encode(
        x="usable_gb:Q", y=alt.Y("plan:N", sort=None),
        tooltip=["plan", alt.Tooltip("usable_gb:Q", format=".2f", title="usable GB")])
    return (bars + ticks).properties(width=300, height=alt.Step(26), title=title).configure_axis(labelLimit=260)


def capacity_chart(rows: pd.DataFrame, max_seqs: int, points: pd.DataFrame, title: str):
    """Sequences that fit on one card against context; ``rows``: ``context_tokens, series, sequences``;
    ``points``: ``context_tokens, sequences, label`` (scenarios); a rule at the scheduler's ``max_seqs``."""
    alt = altair()

    lines = alt.Chart(rows).mark_line().encode(
        x=alt.X("context_tokens:Q", title="context per sequence (tokens)", scale=alt.Scale(type="log", nice=False)),
        y=alt.Y("sequences:Q", title="sequences that fit per card", scale=alt.Scale(type="symlog")),
        color=alt.Color("series:N", title=None, legend=_BOTTOM),
        tooltip=["series", "context_tokens", "sequences"],
    )
    rule = alt.Chart(pd.DataFrame({"y": [max_seqs]})).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    pts = alt.Chart(points).mark_point(filled=True, size=60, color="black").encode(
        x="context_tokens:Q", y="sequences:Q", tooltip=["label", "context_tokens", "sequences"])
    text = alt.Chart(points).mark_text(dx=7, dy=-7, align="left").encode(
        x="context_tokens:Q", y="sequences:Q", text="label:N")
    return (lines + rule + pts + text).properties(width=380, height=280, title=title)


def transfer_chart(rows: pd.DataFrame, measured: pd.DataFrame, title: str):
    """Transfer time against prompt length, log-log; ``rows``: ``prompt_tokens, series, ms``;
    ``measured``: ``prompt_tokens, ms, label`` drawn as points."""
    alt = altair()

    lines = alt.Chart(rows).mark_line().encode(
        x=alt.X("prompt_tokens:Q", title="prompt (tokens)", scale=alt.Scale(type="log", nice=False)),
        y=alt.Y("ms:Q", title="KV transfer time (ms)", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=None, legend=_BOTTOM),
        tooltip=["series", "prompt_tokens", alt.Tooltip("ms:Q", format=",.2f")],
    )
    pts = alt.Chart(measured).mark_point(filled=True, size=45, color="black").encode(
        x="prompt_tokens:Q", y="ms:Q", shape=alt.Shape("label:N", title=None, legend=_BOTTOM),
        tooltip=["label", "prompt_tokens", alt.Tooltip("ms:Q", format=",.2f")])
    return (lines + pts).properties(width=380, height=280, title=title)


def dp_sweep_chart(rows: pd.DataFrame, title: str):
    """The dp-size sweep: per side (P, D), GB per card against dp for each quantity; ``rows``:
    ``side, dp, quantity, model, gb, chosen`` (``chosen``: the article's dp on that side, drawn as a band)."""
    alt = altair()

    lines = alt.Chart().mark_line(point=True).encode(
        x=alt.X("dp:Q", title="dp = EP group size (cards)", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("gb:Q", title="GB per card"),
        color=alt.Color("quantity:N", title=None, legend=_BOTTOM),
        strokeDash=alt.StrokeDash("model:N", title=None, legend=_BOTTOM,
                                  scale=alt.Scale(domain=["real", "article"], range=[[1, 0], [6, 3]])),
        tooltip=["side", "model", "quantity", "dp", alt.Tooltip("gb:Q", format=".2f")],
    )
    zero = alt.Chart().mark_rule(color="gray").encode(y=alt.datum(0))
    chosen = alt.Chart().mark_rule(color="black", opacity=0.12, strokeWidth=10).encode(x="dp:Q").transform_filter(
        "datum.chosen")
    return alt.layer(chosen, zero, lines, data=rows).properties(width=210, height=240).facet(
        column=alt.Column("side:N", title=None, sort=["P", "D"])).properties(title=title)


def per_layer_chart(rows: pd.DataFrame, title: str):
    """Per-layer time by part for each TP degree, one panel per phase; ``rows``: ``phase, tp, part, ms``."""
    alt = altair()

    bars = alt.Chart().mark_bar().encode(
        x=alt.X("tp:O", title="TP degree"),
        y=alt.Y("ms:Q", title="time per layer (ms)"),
        color=alt.Color("part:N", title=None, legend=_BOTTOM),
        xOffset="part:N",
        tooltip=["phase", "tp", "part", alt.Tooltip("ms:Q", format=",.4f")],
    ).properties(width=170, height=220)
    return alt.layer(bars, data=rows).facet(column=alt.Column("phase:N", title=None)).resolve_scale(
        y="independent").properties(title=title)


def roofline_chart(rows: pd.DataFrame, title: str):
    """Decode tokens/s per card against sequences per card, with the compute and memory roofs;
    ``rows``: ``seqs_per_card, series, tokens_per_s_per_card`` (series "model" drawn solid)."""
    alt = altair()

    return alt.Chart(rows).mark_line().encode(
        x=alt.X("seqs_per_card:Q", title="sequences per card (decode batch)", scale=alt.Scale(type="log", nice=False)),
        y=alt.Y("tokens_per_s_per_card:Q", title="decode tokens/s per card", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=None, legend=_BOTTOM),
        strokeDash=alt.condition("datum.series == 'model'", alt.value([1, 0]), alt.value([5, 3])),
        tooltip=["series", alt.Tooltip("seqs_per_card:Q", format=",.1f"),
                 alt.Tooltip("tokens_per_s_per_card:Q", format=",.0f")],
    ).properties(width=380, height=280, title=title)


def throughput_cards_chart(rows: pd.DataFrame, target: float, title: str):
    """Tokens/s against cards per layout family, one panel per phase; ``rows``: ``phase, cards, layout,
    tokens_per_s, fits``; filled points fit in memory; a rule at ``target`` on the prefill panel."""
    alt = altair()

    base = alt.Chart().encode(
        x=alt.X("cards:Q", title="cards"),
        y=alt.Y("tokens_per_s:Q", title="tokens/s (deployment)", scale=alt.Scale(type="log")),
        color=alt.Color("layout:N", title=None, legend=_BOTTOM),
        tooltip=["phase", "layout", "cards", alt.Tooltip("tokens_per_s:Q", format=",.0f"), "fits"],
    )
    lines = base.mark_line()
    pts = base.mark_point(size=50).encode(
        fill=alt.condition("datum.fits", alt.Color("layout:N", legend=None), alt.value("white")))
    rule = alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(y=alt.datum(target))
    return alt.layer(lines, pts, rule, data=rows).properties(width=190, height=240).facet(
        column=alt.Column("phase:N", title=None, sort=["prefill", "decode"])).resolve_scale(
        y="independent").properties(title=title)


def plan_chart(rows: pd.DataFrame, marks: pd.DataFrame, title: str):
    """The planner's candidates: output tokens/s per card against cards used, coloured by the constraint
    that binds (feasible ones apart); ``marks``: ``cards, tokens_per_s_per_card, label`` drawn as rings."""
    alt = altair()

    rows = rows.assign(status=rows["binding"].where(~rows["feasible"], "feasible"),
                       tpc=rows["tokens_per_s_per_card"].round(1))
    # one point per (cards, tokens/s per card, status): splits that differ only in the P side overlap
    rows = rows.sort_values("ttft_s").drop_duplicates(["cards", "tpc", "status"])[
        ["p_instances", "p_size", "d_instances", "d_size", "cards", "status", "tokens_per_s_per_card", "ttft_s", "tpot_s"]]
    if len(rows) > PLAN_CHART_MAX_POINTS:  # a large cluster: the best split per bin of cluster sizes and status
        bins = np.unique(np.geomspace(1, rows["cards"].max() + 1, PLAN_CHART_MAX_POINTS // 8).round())
        rows = (rows.assign(bin=np.searchsorted(bins, rows["cards"]))
                .sort_values("tokens_per_s_per_card", ascending=False).drop_duplicates(["bin", "status"])
                .drop(columns="bin"))
        title = f"{title} (best split per range of cluster sizes)"
    rows = rows.assign(feasible_first=(rows["status"] == "feasible").astype(int))
    pts = alt.Chart(rows).mark_circle(size=28, opacity=0.6).encode(
        x=alt.X("cards:Q", title="cards used"),
        y=alt.Y("tokens_per_s_per_card:Q", title="output tokens/s per card"),
        color=alt.Color("status:N", title=None, legend=_BOTTOM, scale=alt.Scale(
            domain=["feasible", "P memory", "D memory", "KV capacity", "prefill load", "TTFT", "TPOT"],
            range=["#1b7837", "#fdae61", "#abd9e9", "#f46d43", "#c2a5cf", "#74add1", "#878787"])),
        order=alt.Order("feasible_first:Q"),
        tooltip=["p_instances", "p_size", "d_instances", "d_size", "cards", "status",
                 alt.Tooltip("tokens_per_s_per_card:Q", format=",.0f"), alt.Tooltip("ttft_s:Q", format=".2f"),
                 alt.Tooltip("tpot_s:Q", format=".4f")],
    )
    ring = alt.Chart(marks).mark_point(size=260, shape="circle", filled=False, color="black", strokeWidth=2).encode(
        x="cards:Q", y="tokens_per_s_per_card:Q", tooltip=["label"])
    text = alt.Chart(marks).mark_text(dx=-12, dy=-14, align="right").encode(
        x="cards:Q", y="tokens_per_s_per_card:Q", text="label:N")
    return (pts + ring + text).properties(width=380, height=280, title=title)


def tp_chart(rows: pd.DataFrame, title: str):
    """Time per layer of the TP all-reduce and of the compute for each TP degree, for two token counts;
    ``rows``: ``tp, series, ms`` (log scale: the series span four orders of magnitude; the bars start at the
    power of ten below the smallest value). Bars of one colour pair cover the same tokens."""
    import math

    alt = altair()

    order = list(dict.fromkeys(rows["series"]))
    lo = 10.0 ** math.floor(math.log10(rows["ms"].min()))
    hi = 10.0 ** math.ceil(math.log10(rows["ms"].max()))
    return alt.Chart(rows).mark_bar().encode(
        x=alt.X("tp:O", title="TP degree"),
        xOffset=alt.XOffset("series:N", sort=order),
        y=alt.Y("ms:Q", title="time per layer (ms, log scale)", scale=alt.Scale(type="log", domain=[lo, hi])),
        y2=alt.datum(lo),
        color=alt.Color("series:N", title=None, sort=order, scale=alt.Scale(scheme="paired"), legend=_BOTTOM),
        tooltip=["series", "tp", alt.Tooltip("ms:Q", format=",.4f")],
    ).properties(width=380, height=260, title=title)
