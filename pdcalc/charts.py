"""Altair charts for the chapters (lowercase axis titles with units; the caption is the title).

Altair is imported lazily: the package itself needs only numpy and pandas.
"""

from __future__ import annotations

import pandas as pd

from pdcalc.inventory import get_inventory
from pdcalc.report import CLASS_I

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
    import altair as alt

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
    import altair as alt

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
