"""Altair charts for the chapters (lowercase axis titles with units; the caption is the title).

Every chart is :data:`CHART_WIDTH` pixels wide, axes, legend and title included, so that it fits the
book's text column, and is styled by :func:`house_style` (label and title sizes). Altair is imported
lazily: the package itself needs only numpy and pandas.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pdcalc.book.report import CLASS_I
from pdcalc.core.precision import SIG, tidy
from pdcalc.model.inventory import get_inventory

#: Width of every chart in pixels, axes, legend and title included. The book's content column is 784 px
#: at a 1400 px window; vega-embed's actions button takes 38 px of it.
CHART_WIDTH = 720

#: Font sizes in pixels: axis and legend labels (and text marks), axis and legend titles (and facet
#: headers), chart titles.
LABEL_FONT_SIZE = 12
AXIS_TITLE_FONT_SIZE = 13
TITLE_FONT_SIZE = 14

#: Pixels a y axis takes to the left of a panel besides its labels: ticks, padding and the title.
_Y_AXIS_PX = 34
#: Pixels between panels side by side (the facets' ``spacing``), and around a chart (Vega's padding).
_SPACING_PX = 20
_PADDING_PX = 5

#: Most points the planner's chart draws (Altair embeds every point in the page).
PLAN_CHART_MAX_POINTS = 4000

#: Name of the Altair data transformer that rounds every chart's data (:func:`altair`).
ROUNDING_TRANSFORMER = "pdcalc-rounded"

#: Line dashes: the book draws the articles' numbers dashed and the real ones solid.
SOLID, DASHED = [1, 0], [6, 3]

CLASS_I_LABEL, CLASS_II_LABEL = "class I (EP-split)", "class II (replicated)"


def altair():
    """The ``altair`` module, with chart data rounded to :data:`pdcalc.core.precision.SIG` figures.

    Every DataFrame handed to a chart passes through :func:`pdcalc.core.precision.tidy` before Altair
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


def house_style(chart, *, fit: bool = True, label_limit: int = 260):
    """``chart`` in the book's style: :data:`CHART_WIDTH` wide (``fit``: a single or layered view is
    stretched to it, axes and legend included; charts of several panels size their panels themselves),
    labels of :data:`LABEL_FONT_SIZE` px, axis titles of :data:`AXIS_TITLE_FONT_SIZE` px.

    The result is a top-level chart (configured): it cannot be layered or concatenated further.
    """
    alt = altair()
    if fit:
        chart = chart.properties(width=CHART_WIDTH, autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    return (chart
            .configure_axis(labelFontSize=LABEL_FONT_SIZE, titleFontSize=AXIS_TITLE_FONT_SIZE, labelLimit=label_limit)
            .configure_legend(labelFontSize=LABEL_FONT_SIZE, titleFontSize=AXIS_TITLE_FONT_SIZE, labelLimit=340,
                              symbolSize=120, symbolStrokeWidth=2.5)
            .configure_header(labelFontSize=AXIS_TITLE_FONT_SIZE, titleFontSize=AXIS_TITLE_FONT_SIZE)
            .configure_title(fontSize=TITLE_FONT_SIZE, subtitleFontSize=LABEL_FONT_SIZE, anchor="start", offset=10)
            .configure_text(fontSize=LABEL_FONT_SIZE))


def y_axis_px(values, *, log: bool = False) -> int:
    """Pixels a y axis of ``values`` (quantitative) takes left of its panel: its widest label, as Altair
    formats it (thousands separators; two decimals below 10) at the ends of a nice domain (a power of ten
    on a ``log`` scale), at :data:`LABEL_FONT_SIZE`, plus ticks and title."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    ends = [float(v.min()), float(v.max())] if len(v) else [0.0]

    def nice(x: float) -> float:
        if x == 0:
            return 0.0
        step = 10.0 ** math.floor(math.log10(abs(x)))
        return math.copysign(10.0 ** math.ceil(math.log10(abs(x))) if log else math.ceil(abs(x) / step) * step, x)

    def px(x: float) -> float:
        label = f"{x:,.0f}" if abs(x) >= 10 else f"{x:.2f}"
        return sum(0.56 * LABEL_FONT_SIZE if ch.isdigit() else 0.3 * LABEL_FONT_SIZE for ch in label)

    return int(max(px(nice(x)) for x in ends)) + _Y_AXIS_PX


def panel_width(panels: int, *, y_axes=None, reserved: int = 0) -> int:
    """Width of each of ``panels`` panels side by side so that the chart is at most :data:`CHART_WIDTH`
    wide: ``y_axes`` the pixels of each y axis drawn (:func:`y_axis_px`; default 90 px per panel), and
    ``reserved`` pixels more (a legend at the side)."""
    axes = [90] * panels if y_axes is None else list(y_axes)
    overhang = 16  # half the last x label, centred on the right edge of the last panel
    free = CHART_WIDTH - 2 * _PADDING_PX - overhang - reserved - sum(axes) - (panels - 1) * _SPACING_PX
    return int(free // panels)


def bottom_legend(columns: int = 2, **kw) -> dict:
    """A legend under the plot, so that the plot takes the column's whole width."""
    return {"orient": "bottom", "columns": columns, "labelLimit": 340, "symbolOpacity": 1, **kw}



def _panel_title(text: str):
    """The title of one panel of a chart of several, smaller than the chart's own and aligned with it."""
    return altair().TitleParams(text, fontSize=AXIS_TITLE_FONT_SIZE, anchor="start", frame="group")


def _ticks_125(hi: float, *, zero: bool = False) -> list:
    """Axis values 1, 2, 5, 10, 20, 50 ... up to the first one at or above ``hi`` (0 first if ``zero``)."""
    out = [0] if zero else []
    k = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** k
            out.append(v)
            if v >= hi:
                return out
        k += 1


def _dashes(order: list[str], dashed: set[str]) -> list:
    return [DASHED if s in dashed else SOLID for s in order]


CATEGORY_LABELS = {
    "routed_experts": "routed experts", "shared_experts": "shared experts", "dense_ffn": "dense FFN",
    "attention": "attention", "kv_compressor": "KV compressors", "indexer": "indexers", "router": "router",
    "hash_routing": "hash-routing table", "norms": "norms", "mhc": "mHC mixing", "embedding": "embedding",
    "lm_head": "LM head", "mtp_proj": "MTP projections", "non_expert": "'Dense' (as printed)",
    "all_experts": "experts (as printed)",
}


def parameters_frame(models: dict[str, str]) -> pd.DataFrame:
    """Long table ``model, category, class, params_b`` for :func:`parameter_chart` (main model).

    Class I is what the EP group splits: the tensors the inventory shards over ``ep`` (the routed experts
    of the official models, the experts as printed of the V3 article, whatever the category is called)
    and the categories of :data:`pdcalc.book.report.CLASS_I`. Everything else is class II (replicated).
    """
    rows = []
    for label, model in models.items():
        df = get_inventory(model).frame()
        df = df[df["part"] == "main"]
        split = (df["shard"] == "ep") | df["category"].isin(CLASS_I)
        df = df.assign(cls=np.where(split, CLASS_I_LABEL, CLASS_II_LABEL))
        sums = df.groupby(["category", "cls"], sort=False)["params"].sum()
        order = {c: i for i, c in enumerate(get_inventory(model).by_category().index)}
        for (cat, cls), n in sorted(sums.items(), key=lambda kv: order.get(kv[0][0], len(order))):
            if n > 0:
                rows.append({"model": label, "category": CATEGORY_LABELS.get(cat, cat), "class": cls,
                             "params_b": n / 1e9})
    return pd.DataFrame(rows)


def parameter_chart(models: dict[str, str], title: str):
    """Where the parameters go: class I vs class II per model, and class II by category."""
    alt = altair()

    df = parameters_frame(models)
    width = CHART_WIDTH - 150  # the category labels on the left
    legend = {"orient": "top", "direction": "horizontal", "title": None}
    split = (
        alt.Chart(df, title=_panel_title("class I vs class II"))
        .mark_bar()
        .encode(
            x=alt.X("sum(params_b):Q", title="parameters (billions)"),
            y=alt.Y("model:N", title=None),
            color=alt.Color("class:N", scale=alt.Scale(domain=[CLASS_I_LABEL, CLASS_II_LABEL], scheme="tableau10"),
                            legend=legend),
            order=alt.Order("class:N"),
            tooltip=["model", "class", alt.Tooltip("sum(params_b):Q", format=".3f", title="params (B)")],
        )
        .properties(width=width, height=alt.Step(26))
    )
    detail = (
        alt.Chart(df[df["class"] == CLASS_II_LABEL], title=_panel_title("class II by category"))
        .mark_bar()
        .encode(
            x=alt.X("params_b:Q", title="parameters (billions)"),
            y=alt.Y("category:N", title=None, sort="-x"),
            yOffset="model:N",
            color=alt.Color("model:N", scale=alt.Scale(scheme="set2"), legend=legend),
            tooltip=["model", "category", alt.Tooltip("params_b:Q", format=".4f", title="params (B)")],
        )
        .properties(width=width, height=alt.Step(10))
    )
    return house_style(alt.vconcat(split, detail, spacing=24).resolve_scale(color="independent")
                       .properties(title=title), fit=False, label_limit=150)


def memory_vs_ep_chart(rows: pd.DataFrame, usable_gib: float, marks: dict, title: str):
    """Weights per card against EP size, one line per model, the usable memory as a rule.

    ``rows`` has columns ``ep, model, weights_gib``; ``marks`` maps a label ("P", "D") to an EP size.
    """
    alt = altair()

    x = alt.X("ep:Q", title="EP group size (cards)", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=sorted(rows["ep"].unique().tolist()), format="d"))
    order = list(dict.fromkeys(rows["model"]))
    dashed = {m for m in order if m.startswith("article")}
    legend = bottom_legend(2, symbolType="stroke", symbolSize=500)
    color = alt.Color("model:N", title=None, scale=alt.Scale(domain=order), legend=legend)
    y = alt.Y("weights_gib:Q", title="weights per card (GiB)")
    lines = alt.Chart(rows).mark_line(strokeWidth=2.5).encode(
        x=x, y=y, color=color,
        strokeDash=alt.StrokeDash("model:N", title=None, legend=legend,
                                  scale=alt.Scale(domain=order, range=_dashes(order, dashed))))
    lines += alt.Chart(rows).mark_point(filled=True, size=50, opacity=1).encode(
        x=x, y=y, color=color, tooltip=["model", "ep", alt.Tooltip("weights_gib:Q", format=".2f")])
    usable = pd.DataFrame({"y": [usable_gib], "ep": [rows["ep"].max()]})
    rule = alt.Chart(usable).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    rule_text = alt.Chart(usable).transform_calculate(
        label="'usable memory: ' + format(datum.y, '.1f') + ' GiB'").mark_text(
        align="right", baseline="bottom", dy=-4, color="dimgray").encode(x="ep:Q", y="y:Q", text="label:N")
    mk = pd.DataFrame([{"ep": v, "label": f"{k} (EP {v})"} for k, v in marks.items()])
    marks_layer = alt.Chart(mk).mark_rule(color="black", opacity=0.4).encode(x="ep:Q") + alt.Chart(mk).mark_text(
        dx=5, align="left", baseline="top", fontWeight="bold").encode(x="ep:Q", y=alt.value(4), text="label:N")
    return house_style((lines + rule + rule_text + marks_layer).properties(height=300, title=title))


def kv_context_chart(rows: pd.DataFrame, title: str):
    """KV cache per sequence against context, log-log; ``rows``: ``context_tokens, series, mb_per_seq, kind``
    (kind "article" draws dashed)."""
    alt = altair()

    order = list(dict.fromkeys(rows["series"]))
    dashed = set(rows.loc[rows["kind"] == "article", "series"])
    return house_style(alt.Chart(rows).mark_line(strokeWidth=2.5).encode(
        x=alt.X("context_tokens:Q", title="context (tokens)", scale=alt.Scale(type="log", nice=False),
                axis=alt.Axis(format="~s")),
        y=alt.Y("mb_per_seq:Q", title="KV cache per sequence (MB)", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=None, scale=alt.Scale(domain=order), legend=bottom_legend(2)),
        strokeDash=alt.StrokeDash("series:N", title=None, legend=bottom_legend(2),
                                  scale=alt.Scale(domain=order, range=_dashes(order, dashed))),
        tooltip=["series", "context_tokens", alt.Tooltip("mb_per_seq:Q", format=",.1f", title="MB per sequence")],
    ).properties(height=320, title=title))


def memory_stack_chart(rows: pd.DataFrame, title: str):
    """Stacked per-card memory; ``rows``: ``plan, part, gb, usable_gb`` (one usable value per plan)."""
    alt = altair()

    order = {"weights": 0, "kv cache": 1, "activations": 2, "framework": 3}
    rows = rows.assign(order=rows["part"].map(order).fillna(9))
    bars = alt.Chart(rows).mark_bar().encode(
        x=alt.X("sum(gb):Q", title="memory per card (GB)"),
        y=alt.Y("plan:N", title=None, sort=None),
        color=alt.Color("part:N", title=None, sort=list(order), scale=alt.Scale(scheme="tableau10"),
                        legend=bottom_legend(4)),
        order=alt.Order("order:Q"),
        tooltip=["plan", "part", alt.Tooltip("gb:Q", format=".2f", title="GB")],
    )
    usable = rows.drop_duplicates("plan")[["plan", "usable_gb"]]
    ticks = alt.Chart(usable).mark_tick(color="black", thickness=3, size=26).encode(
        x="usable_gb:Q", y=alt.Y("plan:N", sort=None),
        tooltip=["plan", alt.Tooltip("usable_gb:Q", format=".2f", title="usable GB")])
    return house_style((bars + ticks).properties(height=alt.Step(30), title=title))


def capacity_chart(rows: pd.DataFrame, max_seqs: int, points: pd.DataFrame, title: str):
    """Sequences that fit on one card against context; ``rows``: ``context_tokens, series, sequences``;
    ``points``: ``context_tokens, sequences, label`` (scenarios); a rule at the scheduler's ``max_seqs``.

    Both axes are logarithmic (the y axis symmetric-log, so that a context where nothing fits still
    shows, at 0) with ticks at 1, 2, 5, 10 ...: a handful of sequences and a thousand read alike.
    """
    alt = altair()

    hi = max(rows["sequences"].max(), points["sequences"].max() if len(points) else 0, max_seqs, 1)
    zero = bool((rows["sequences"] < 1).any() or (len(points) and (points["sequences"] < 1).any()))
    ticks = _ticks_125(hi, zero=zero)
    if not zero:  # start at the tick below the fewest sequences drawn
        low = min(rows["sequences"].min(), points["sequences"].min() if len(points) else hi, max_seqs)
        ticks = [t for t in ticks if t >= max(t2 for t2 in ticks if t2 <= low)]
    x = alt.X("context_tokens:Q", title="context per sequence (tokens)", scale=alt.Scale(type="log", nice=False),
              axis=alt.Axis(format="~s"))
    scale = alt.Scale(type="symlog" if zero else "log", domain=[0 if zero else ticks[0], ticks[-1]], nice=False)
    y = alt.Y("sequences:Q", title="sequences that fit per card", scale=scale, axis=alt.Axis(values=ticks, format=",d"))
    order = list(dict.fromkeys(rows["series"]))
    dashed = {s for s in order if s.startswith("article")}
    lines = alt.Chart(rows).mark_line(strokeWidth=2.5).encode(
        x=x, y=y,
        color=alt.Color("series:N", title=None, scale=alt.Scale(domain=order), legend=bottom_legend(2)),
        strokeDash=alt.StrokeDash("series:N", title=None, legend=bottom_legend(2),
                                  scale=alt.Scale(domain=order, range=_dashes(order, dashed))),
        tooltip=["series", "context_tokens", "sequences"],
    )
    lim = pd.DataFrame({"y": [max_seqs], "x": [rows["context_tokens"].min()]})
    rule = alt.Chart(lim).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    rule_text = alt.Chart(lim).transform_calculate(label="'max-num-seqs ' + datum.y").mark_text(
        align="left", baseline="bottom", dx=4, dy=-4, color="dimgray").encode(x="x:Q", y="y:Q", text="label:N")
    pts = alt.Chart(points).mark_point(filled=True, size=80, color="black").encode(
        x="context_tokens:Q", y="sequences:Q", tooltip=["label", "context_tokens", "sequences"])
    text = alt.Chart(points).mark_text(dx=8, dy=-8, align="left", fontWeight="bold", fontSize=13).encode(
        x="context_tokens:Q", y="sequences:Q", text="label:N")
    return house_style((lines + rule + rule_text + pts + text).properties(height=320, title=title))


def transfer_chart(rows: pd.DataFrame, measured: pd.DataFrame, title: str):
    """Transfer time against prompt length, log-log; ``rows``: ``prompt_tokens, series, ms``;
    ``measured``: ``prompt_tokens, ms, label`` drawn as points (series starting "article" draw dashed)."""
    alt = altair()

    order = list(dict.fromkeys(rows["series"]))
    dashed = {s for s in order if s.startswith("article")}
    lines = alt.Chart(rows).mark_line(strokeWidth=2.5).encode(
        x=alt.X("prompt_tokens:Q", title="prompt (tokens)", scale=alt.Scale(type="log", nice=False),
                axis=alt.Axis(format="~s")),
        y=alt.Y("ms:Q", title="KV transfer time (ms)", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=None, scale=alt.Scale(domain=order), legend=bottom_legend(2)),
        strokeDash=alt.StrokeDash("series:N", title=None, legend=bottom_legend(2),
                                  scale=alt.Scale(domain=order, range=_dashes(order, dashed))),
        tooltip=["series", "prompt_tokens", alt.Tooltip("ms:Q", format=",.2f")],
    )
    pts = alt.Chart(measured).mark_point(filled=True, size=80, color="black").encode(
        x="prompt_tokens:Q", y="ms:Q", shape=alt.Shape("label:N", title=None, legend=bottom_legend(2)),
        tooltip=["label", "prompt_tokens", alt.Tooltip("ms:Q", format=",.2f")])
    return house_style((lines + pts).properties(height=320, title=title))


#: Colours and point shapes of the article's numbers and of the real ones (dashed and solid lines).
_MODEL_STYLE = {"article": ("#e45756", "square", DASHED), "real": ("#4c78a8", "circle", SOLID)}


def dp_sweep_chart(rows: pd.DataFrame, title: str, *, target: float | None = None, target_label: str | None = None,
                   y_title: str | None = None):
    """The dp-size sweep, one panel per side (P, D) present in ``rows``, the article's model dashed with
    squares, the real one solid with circles; the article's dp on each side drawn as a band.

    Two kinds of ``rows``:

    - ``side, dp, model, seqs_per_card, chosen``: sequences that fit per card (symmetric-log axis, so
      that a few and hundreds read alike); ``target`` draws a rule at the sequences the article needs
      per card, labelled ``target_label``, and the subtitle names the first dp that reaches it;
    - ``side, dp, quantity, model, gb, chosen``: GB per card of each quantity (one colour each).
    """
    alt = altair()

    seqs = "seqs_per_card" in rows.columns
    sides = [s for s in ("P", "D") if s in set(rows["side"])] or list(dict.fromkeys(rows["side"]))
    models = [m for m in _MODEL_STYLE if m in set(rows["model"])] + sorted(set(rows["model"]) - set(_MODEL_STYLE))
    style = [_MODEL_STYLE.get(m, ("gray", "triangle", SOLID)) for m in models]
    # the legend shows each model's line (dashed or solid); the points' shapes (one layer per model, so that
    # the legend keeps line symbols) tell them apart in the plot too
    dash = alt.StrokeDash("model:N", title=None, legend=bottom_legend(4, symbolType="stroke", symbolSize=500),
                          scale=alt.Scale(domain=models, range=[s[2] for s in style]))
    x = alt.X("dp:Q", title="dp = EP group size (cards)", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=sorted(rows["dp"].unique().tolist()), format="d"))
    subtitle = None
    if seqs:
        hi = max(rows["seqs_per_card"].max(), target or 0, 1)
        ticks = _ticks_125(hi, zero=True)
        y = alt.Y("seqs_per_card:Q", title=y_title or "sequences that fit per card",
                  scale=alt.Scale(type="symlog", domain=[0, ticks[-1]], nice=False),
                  axis=alt.Axis(values=ticks, format=",d"))
        color = alt.Color("model:N", title=None, legend=bottom_legend(4, symbolType="stroke", symbolSize=500),
                          scale=alt.Scale(domain=models, range=[s[0] for s in style]))
        tooltip = ["side", "model", "dp", alt.Tooltip("seqs_per_card:Q", title="sequences per card")]
        if target is not None:
            first = []
            for m in models:
                ok = rows[(rows["model"] == m) & (rows["seqs_per_card"] >= target)]
                first.append(f"{m}: dp {int(ok['dp'].min())}" if len(ok) else f"{m}: no dp swept")
            subtitle = f"first dp that holds {target:g} sequences per card: " + ", ".join(first)
    else:
        y = alt.Y("gb:Q", title=y_title or "GB per card")
        color = alt.Color("quantity:N", title=None, legend=bottom_legend(4))
        tooltip = ["side", "model", "quantity", "dp", alt.Tooltip("gb:Q", format=".2f")]
    detail = "quantity:N" if not seqs else alt.Undefined
    lines = alt.Chart().mark_line(strokeWidth=2.5).encode(x=x, y=y, color=color, strokeDash=dash, detail=detail)
    points = [alt.Chart().transform_filter(alt.FieldEqualPredicate(field="model", equal=m)).mark_point(
        shape=st[1], size=80, filled=True, opacity=1).encode(x=x, y=y, color=color, tooltip=tooltip)
        for m, st in zip(models, style)]
    chosen = alt.Chart().transform_filter("datum.chosen").transform_aggregate(groupby=["side", "dp"]).mark_rule(
        color="black", opacity=0.15, strokeWidth=14).encode(x="dp:Q")
    layers = [chosen]
    if seqs and target is not None:
        layers += [alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(y=alt.datum(target)),
                   alt.Chart().transform_aggregate(dp="max(dp)").mark_text(
                       align="right", baseline="bottom", dy=-4, color="dimgray").encode(
                       x="dp:Q", y=alt.datum(target), text=alt.datum(target_label or f"{target:g} sequences"))]
    else:
        layers.append(alt.Chart().mark_rule(color="gray").encode(y=alt.datum(0)))
    layers += [lines, *points]
    head = alt.TitleParams(title, subtitle=subtitle) if subtitle else title
    if len(sides) == 1:
        chart = alt.layer(*layers, data=rows).properties(height=300, title=head)
        return house_style(chart)
    value = rows["seqs_per_card" if seqs else "gb"]
    width = panel_width(len(sides), y_axes=[y_axis_px(value)])  # the y axis is shared: drawn once
    chart = alt.layer(*layers, data=rows).properties(width=width, height=260).facet(
        column=alt.Column("side:N", title=None, sort=sides), spacing=_SPACING_PX).properties(title=head)
    return house_style(chart, fit=False)


def _server_band(alt, rows: pd.DataFrame, card, field: str = "tp"):
    """For TP degrees on an ordinal x axis: a layer that shades those larger than a server of ``card``,
    the x axis labels that say which stay inside a server, and a subtitle that says why; ``([], None,
    None)`` without ``card``, no shade and no subtitle when every degree fits in a server."""
    if card is None:
        return [], None, None
    from pdcalc.hardware.cards import get_card

    c = get_card(card) if isinstance(card, str) else card
    n = int(c.cards_per_node)
    band = alt.Chart().transform_filter(f"datum.{field} > {n}").transform_aggregate(
        groupby=[field]).mark_rect(color="#f2b447", opacity=0.2).encode(x=f"{field}:O")
    labels = f"[datum.value, datum.value > {n} ? 'across servers' : 'in one server']"
    if not (rows[field] > n).any():
        return [], labels, None
    note = (f"shaded: a TP group larger than one server ({n} cards) all-reduces between servers, at "
            f"{c.scale_out_bytes_per_s / 1e9:g} GB/s per card instead of {c.intra_node_bytes_per_s / 1e9:g} GB/s "
            "inside one")
    return [band], labels, note


def per_layer_chart(rows: pd.DataFrame, title: str, *, card=None):
    """Per-layer time by part for each TP degree, one panel per phase; ``rows``: ``phase, tp, part, ms``.

    ``card`` (a :class:`pdcalc.hardware.cards.Card` or a preset name): shade the TP degrees above its
    ``cards_per_node``, where a TP group spans servers and its all-reduce leaves the in-server links.
    """
    alt = altair()

    shade, labels, note = _server_band(alt, rows, card)
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("tp:O", title="TP degree", axis=alt.Axis(labelAngle=0, labelExpr=labels or alt.Undefined)),
        y=alt.Y("ms:Q", title="time per layer (ms)"),
        color=alt.Color("part:N", title=None, legend=bottom_legend(4)),
        xOffset="part:N",
        tooltip=["phase", "tp", "part", alt.Tooltip("ms:Q", format=",.4f")],
    )
    phases = list(dict.fromkeys(rows["phase"]))
    axes = [y_axis_px(rows.loc[rows["phase"] == p, "ms"]) for p in phases]
    width = panel_width(len(phases), y_axes=axes)
    chart = alt.layer(*shade, bars, data=rows).properties(width=width, height=260).facet(
        column=alt.Column("phase:N", title=None, sort=phases), spacing=_SPACING_PX).resolve_scale(y="independent")
    head = alt.TitleParams(title, subtitle=_wrap(note)) if note else title
    return house_style(chart.properties(title=head), fit=False)


def _wrap(text: str, width: int = 100) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width)


def roofline_chart(rows: pd.DataFrame, title: str):
    """Decode tokens/s per card against sequences per card, with the compute and memory roofs;
    ``rows``: ``seqs_per_card, series, tokens_per_s_per_card`` (series "model" drawn solid, roofs dashed)."""
    alt = altair()

    order = list(dict.fromkeys(rows["series"]))
    return house_style(alt.Chart(rows).mark_line(strokeWidth=2.5).encode(
        x=alt.X("seqs_per_card:Q", title="sequences per card (decode batch)", scale=alt.Scale(type="log", nice=False)),
        y=alt.Y("tokens_per_s_per_card:Q", title="decode tokens/s per card", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=None, scale=alt.Scale(domain=order), legend=bottom_legend(3)),
        strokeDash=alt.StrokeDash("series:N", title=None, legend=bottom_legend(3),
                                  scale=alt.Scale(domain=order, range=_dashes(order, set(order) - {"model"}))),
        tooltip=["series", alt.Tooltip("seqs_per_card:Q", format=",.1f"),
                 alt.Tooltip("tokens_per_s_per_card:Q", format=",.0f")],
    ).properties(height=320, title=title))


def throughput_cards_chart(rows: pd.DataFrame, target: float, title: str):
    """Tokens/s against cards per layout family, one panel per phase; ``rows``: ``phase, cards, layout,
    tokens_per_s, fits``; filled points fit in memory, hollow ones do not; a rule at ``target`` (the
    aggregate tokens/s asked) on every panel."""
    alt = altair()

    base = alt.Chart().encode(
        x=alt.X("cards:Q", title="cards"),
        y=alt.Y("tokens_per_s:Q", title="tokens/s (deployment)", scale=alt.Scale(type="log")),
        color=alt.Color("layout:N", title=None, legend=bottom_legend(3, symbolType="stroke", symbolSize=500)),
        tooltip=["phase", "layout", "cards", alt.Tooltip("tokens_per_s:Q", format=",.0f"), "fits"],
    )
    lines = base.mark_line(strokeWidth=2.5)
    pts = base.mark_point(size=70, strokeWidth=2).encode(
        fill=alt.condition("datum.fits", alt.Color("layout:N", legend=None), alt.value("white")))
    rule = alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(y=alt.datum(target))
    label = alt.Chart().transform_aggregate(cards="max(cards)").mark_text(
        align="right", baseline="top", dy=4, color="dimgray").encode(
        x="cards:Q", y=alt.datum(target), text=alt.datum("target"))
    phases = [p for p in ("prefill", "decode") if p in set(rows["phase"])]
    axes = [y_axis_px([*rows.loc[rows["phase"] == p, "tokens_per_s"], target], log=True) for p in phases]
    chart = alt.layer(lines, pts, rule, label, data=rows).properties(
        width=panel_width(len(phases), y_axes=axes), height=260).facet(
        column=alt.Column("phase:N", title=None, sort=phases), spacing=_SPACING_PX).resolve_scale(y="independent")
    return house_style(chart.properties(
        title=alt.TitleParams(title, subtitle="filled: fits in memory; hollow: does not")), fit=False)


#: Colours of the planner's statuses: feasible dark and saturated, the constraints that fail pale.
_PLAN_STATUS = {"feasible": "#1b7837", "P memory": "#fdae61", "D memory": "#74add1", "KV capacity": "#f46d43",
                "prefill load": "#9e7cc1", "TTFT": "#d6604d", "TPOT": "#878787"}


def plan_chart(rows: pd.DataFrame, marks: pd.DataFrame, title: str):
    """The planner's candidates: output tokens/s per card against cards used, coloured by the constraint
    that binds; ``marks``: ``cards, tokens_per_s_per_card, label`` drawn as labelled rings.

    Feasible splits are drawn large, solid and on top; infeasible ones small and hollow beneath them.
    Splits that cannot run at all (0 tokens/s: the weights or the cache do not fit) are left out of the
    main plot and shown in a strip under it, by the constraint that fails, with their count.
    """
    alt = altair()

    rows = rows.assign(status=rows["binding"].where(~rows["feasible"].astype(bool), "feasible"),
                       tpc=rows["tokens_per_s_per_card"].round(1))
    n_zero = int(((rows["status"] != "feasible") & (rows["tokens_per_s_per_card"] <= 0)).sum())
    # one point per (cards, tokens/s per card, status): splits that differ only in the P side overlap
    rows = rows.sort_values("ttft_s").drop_duplicates(["cards", "tpc", "status"])[
        ["p_instances", "p_size", "d_instances", "d_size", "cards", "status", "tokens_per_s_per_card", "ttft_s", "tpot_s"]]
    if len(rows) > PLAN_CHART_MAX_POINTS:  # a large cluster: the best split per bin of cluster sizes and status
        bins = np.unique(np.geomspace(1, rows["cards"].max() + 1, PLAN_CHART_MAX_POINTS // 8).round())
        rows = (rows.assign(bin=np.searchsorted(bins, rows["cards"]))
                .sort_values("tokens_per_s_per_card", ascending=False).drop_duplicates(["bin", "status"])
                .drop(columns="bin"))
        title = f"{title} (best split per range of cluster sizes)"
    feasible = rows["status"] == "feasible"
    rows = rows.assign(layer=np.where(feasible, "feasible",
                                      np.where(rows["tokens_per_s_per_card"] > 0, "infeasible", "cannot run")))
    statuses = [s for s in _PLAN_STATUS if s in set(rows["status"])] + sorted(set(rows["status"]) - set(_PLAN_STATUS))
    color = alt.Color("status:N", title=None, legend=bottom_legend(4), scale=alt.Scale(
        domain=statuses, range=[_PLAN_STATUS.get(s, "#bbbbbb") for s in statuses]))
    x_scale = alt.Scale(domain=[0, int(rows["cards"].max())], nice=False)
    x = alt.X("cards:Q", title="cards used", scale=x_scale)
    tooltip = ["p_instances", "p_size", "d_instances", "d_size", "cards", "status",
               alt.Tooltip("tokens_per_s_per_card:Q", format=",.0f"), alt.Tooltip("ttft_s:Q", format=".2f"),
               alt.Tooltip("tpot_s:Q", format=".4f")]
    y = alt.Y("tokens_per_s_per_card:Q", title="output tokens/s per card")
    # with the strip under it, the main plot leaves the x axis title to the strip
    x_main = alt.X("cards:Q", title=None, scale=x_scale) if n_zero else x
    base = alt.Chart().encode(x=x_main, y=y, color=color, tooltip=tooltip)
    below = base.transform_filter("datum.layer == 'infeasible'").mark_point(
        size=45, filled=False, strokeWidth=1.5, opacity=0.55)
    above = base.transform_filter("datum.layer == 'feasible'").mark_circle(
        size=110, opacity=1, stroke="white", strokeWidth=1)
    width = CHART_WIDTH - 100
    main = alt.layer(below, above, *_plan_marks(alt, marks, rows), data=rows).properties(width=width, height=320)
    strip = (alt.Chart(rows, title=alt.TitleParams(
                f"{n_zero:,} splits cannot run (0 tokens/s), by the constraint that fails first",
                fontSize=AXIS_TITLE_FONT_SIZE, fontWeight="normal"))
             .transform_filter("datum.layer == 'cannot run'")
             .mark_tick(thickness=2, size=14, opacity=0.8)
             .encode(x=x, y=alt.Y("status:N", title=None, sort=statuses), color=color, tooltip=tooltip)
             .properties(width=width, height=alt.Step(20)))
    parts = [main, strip] if n_zero else [main]
    return house_style(alt.vconcat(*parts, spacing=14).resolve_scale(x="shared", color="shared")
                       .properties(title=title), fit=False)


def _plan_marks(alt, marks: pd.DataFrame, rows: pd.DataFrame) -> list:
    """Rings and labels of the marked splits; splits at the same point share one label."""
    if marks is None or marks.empty:
        return []
    mk = marks.assign(cards=marks["cards"].astype(float),
                      tokens_per_s_per_card=marks["tokens_per_s_per_card"].astype(float))
    mk = (mk.groupby(["cards", "tokens_per_s_per_card"], sort=False)["label"].agg(" = ".join).reset_index())
    mid = (rows["cards"].min() + rows["cards"].max()) / 2
    mk = mk.assign(right=mk["cards"] > mid)
    enc = {"x": "cards:Q", "y": "tokens_per_s_per_card:Q"}
    ring = alt.Chart(mk).mark_point(size=380, shape="circle", filled=False, color="black", strokeWidth=2.5).encode(
        **enc, tooltip=["label"])
    out = [ring]
    for right, align, dx in ((True, "right", -16), (False, "left", 16)):
        sub = mk[mk["right"] == right]
        if sub.empty:
            continue
        for stroke in ("white", None):  # a white halo under the label, so that points do not hide it
            props = {"stroke": stroke, "strokeWidth": 4} if stroke else {}
            out.append(alt.Chart(sub).mark_text(align=align, dx=dx, dy=-12, fontSize=13, fontWeight="bold",
                                                **props).encode(**enc, text="label:N"))
    return out


def tp_chart(rows: pd.DataFrame, title: str, *, card=None):
    """Time per layer of the TP all-reduce and of the compute for each TP degree, for two token counts;
    ``rows``: ``tp, series, ms`` (log scale: the series span four orders of magnitude; the bars start at the
    power of ten below the smallest value). Bars of one colour pair cover the same tokens.

    ``card`` (a :class:`pdcalc.hardware.cards.Card` or a preset name): shade the TP degrees above its
    ``cards_per_node``, where a TP group spans servers.
    """
    alt = altair()

    order = list(dict.fromkeys(rows["series"]))
    lo = 10.0 ** math.floor(math.log10(rows["ms"].min()))
    hi = 10.0 ** math.ceil(math.log10(rows["ms"].max()))
    shade, labels, note = _server_band(alt, rows, card)
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("tp:O", title="TP degree", axis=alt.Axis(labelAngle=0, labelExpr=labels or alt.Undefined)),
        xOffset=alt.XOffset("series:N", sort=order),
        y=alt.Y("ms:Q", title="time per layer (ms, log scale)", scale=alt.Scale(type="log", domain=[lo, hi])),
        y2=alt.datum(lo),
        color=alt.Color("series:N", title=None, sort=order, scale=alt.Scale(scheme="paired"), legend=bottom_legend(2)),
        tooltip=["series", "tp", alt.Tooltip("ms:Q", format=",.4f")],
    )
    head = alt.TitleParams(title, subtitle=_wrap(note)) if note else title
    return house_style(alt.layer(*shade, bars, data=rows).properties(height=300, title=head))


def ratio_chart(df: pd.DataFrame, title: str, band: tuple[float, float] | None = None):
    """Predicted / measured per measurement on a log scale: a point at the prediction, a bar over the range
    of candidates, a shaded band around 1 (``band``; default :data:`pdcalc.reality.bands.CHART_BAND`), one colour
    per quantity. Throughput rows also show the roofline with flat efficiencies (``ratio_before``) as an
    open diamond joined to the published-cost prediction by a dotted line: before and after. ``df``:
    :func:`pdcalc.reality.validation.table`.

    The chart is one row per measurement, taller than a screen: the ratio axis is drawn at the top and at
    the bottom (:data:`RATIO_TICKS`), so that a reader at either end can read a point's ratio. As wide as the
    book's column (:data:`pdcalc.book.charts.CHART_WIDTH`, the measurement ids included)."""
    from pdcalc.reality.bands import CHART_BAND, GROUPS

    alt = altair()
    band = band or CHART_BAND

    cols = ["id", "group", "ratio", "ratio_low", "ratio_high", "layout"]
    rows = df[cols + (["ratio_before"] if "ratio_before" in df else [])].copy()
    if "ratio_before" not in rows:
        rows["ratio_before"] = np.nan
    rows["ratio_before"] = rows["ratio_before"].astype(float)
    rank = {g: i for i, g in enumerate(dict.fromkeys(GROUPS.values()))}
    order = list(rows.assign(r=rows["group"].map(rank)).sort_values("r", kind="stable")["id"])
    scale = alt.Scale(type="log", domain=[0.25, 4], clamp=True)

    def x(field: str, **kw):  # every layer on the one scale; only the two axis layers draw an axis
        return alt.X(field, scale=scale, **({"axis": None} | kw))

    y = alt.Y("id:N", title=None, sort=order)
    color = alt.Color("group:N", title=None, legend=bottom_legend(4))
    shade = alt.Chart(pd.DataFrame({"lo": [band[0]], "hi": [band[1]]})).mark_rect(
        color="lightgray", opacity=0.6).encode(x=x("lo:Q"), x2="hi:Q")
    one = alt.Chart(pd.DataFrame({"x": [1.0]})).mark_rule(color="gray").encode(x=x("x:Q"))
    top = alt.Chart(pd.DataFrame({"x": list(RATIO_TICKS)})).mark_rule(opacity=0).encode(
        x=x("x:Q", title="predicted / measured (log scale)",
            axis=alt.Axis(orient="top", values=list(RATIO_TICKS), format="~g")))
    rng = alt.Chart(rows).mark_rule(strokeWidth=5, opacity=0.45).encode(
        x=x("ratio_low:Q"), x2="ratio_high:Q", y=y, color=color)
    pts = alt.Chart(rows).mark_point(filled=True, size=80, opacity=1).encode(
        x=x("ratio:Q", title="predicted / measured (log scale)",
            axis=alt.Axis(orient="bottom", values=list(RATIO_TICKS), format="~g")), y=y, color=color,
        tooltip=["id", "layout", alt.Tooltip("ratio:Q", format=".3f"), alt.Tooltip("ratio_low:Q", format=".3f"),
                 alt.Tooltip("ratio_high:Q", format=".3f")])
    layers = [shade, one, top, rng, pts]
    before = rows[rows["ratio_before"].notna()]
    if len(before):
        link = alt.Chart(before).mark_rule(strokeDash=[2, 2], opacity=0.7).encode(
            x=x("ratio_before:Q"), x2="ratio:Q", y=y, color=color)
        mark = alt.Chart(before).mark_point(shape="diamond", filled=False, size=70, opacity=1).encode(
            x=x("ratio_before:Q"), y=y, color=color,
            tooltip=["id", alt.Tooltip("ratio_before:Q", title="before (roofline)", format=".3f"),
                     alt.Tooltip("ratio:Q", title="after (published costs)", format=".3f")])
        layers = [shade, one, top, link, rng, mark, pts]
    chart = alt.layer(*layers).resolve_axis(x="independent").properties(height=alt.Step(22), title=title)
    return house_style(chart, label_limit=320)


#: Ticks of the ratio axis of :func:`ratio_chart` (drawn at its top and bottom).
RATIO_TICKS = (0.25, 0.5, 0.8, 1, 1.25, 2, 4)


#: Height of the frontier chart's plot, pixels.
_FRONTIER_HEIGHT = 340

#: Colours, point shapes and names of the planner's two modes on the frontier chart.
_FRONTIER_MODES = {"disaggregated": ("#1b7837", "circle", "disaggregated (P/D split)"),
                   "aggregated": ("#8e5cc4", "square", "co-located (aggregated)")}


def frontier_chart(rows: pd.DataFrame, target_tpot_s: float | None, title: str):
    """The throughput-latency frontier (:func:`pdcalc.plan.frontier_search.frontier`): output tokens/s per card against
    TPOT (log axis, ms), one line per mode through its point at each concurrency (the best option within
    every target, or past the last concurrency where one is, the best whatever its TPOT), in order of
    concurrency; a point is filled where it meets every target and hollow where it does not; the TPOT target
    is a dashed rule, and each mode's most output per card within every target is ringed and labelled.
    Levels where nothing runs are left out."""
    alt = altair()

    df = rows.dropna(subset=["tpot_s", "tokens_per_s_per_card"])
    df = df.assign(tpot_ms=1e3 * df["tpot_s"].astype(float), series=df["mode"].map(
        lambda m: _FRONTIER_MODES.get(m, ("gray", "triangle", m))[2]),
        meets=df["meets_targets"].astype(bool))[["concurrency", "mode", "series", "option", "cards", "tpot_ms",
                                                  "tokens_per_s_per_card", "ttft_s", "meets", "binding"]]
    modes = [m for m in _FRONTIER_MODES if m in set(df["mode"])]
    names = [_FRONTIER_MODES[m][2] for m in modes]
    colors = [_FRONTIER_MODES[m][0] for m in modes]
    lo = min([df["tpot_ms"].min()] + ([1e3 * target_tpot_s] if target_tpot_s else [])) if len(df) else 1.0
    hi = max([df["tpot_ms"].max()] + ([1e3 * target_tpot_s] if target_tpot_s else [])) if len(df) else 100.0
    ticks = [t for t in _ticks_125(hi) if t >= max([t2 for t2 in _ticks_125(hi) if t2 <= lo] or [1])]
    x = alt.X("tpot_ms:Q", title="TPOT (ms)", scale=alt.Scale(type="log", domain=[ticks[0], ticks[-1]], nice=False),
              axis=alt.Axis(values=ticks, format=",d"))
    y = alt.Y("tokens_per_s_per_card:Q", title="output tokens/s per card", scale=alt.Scale(zero=True))
    color = alt.Color("series:N", title=None, scale=alt.Scale(domain=names, range=colors),
                      legend=bottom_legend(2, symbolType="stroke", symbolSize=500))
    tooltip = ["series", "concurrency", "option", "cards", alt.Tooltip("tpot_ms:Q", format=",.1f", title="TPOT (ms)"),
               alt.Tooltip("tokens_per_s_per_card:Q", format=",.0f", title="tokens/s per card"),
               alt.Tooltip("ttft_s:Q", format=",.2f", title="TTFT (s)"), "meets", "binding"]
    base = alt.Chart(df).encode(x=x, y=y, color=color)
    lines = base.mark_line(strokeWidth=2.5).encode(order="concurrency:Q", detail="series:N")
    points = [base.transform_filter(alt.FieldEqualPredicate(field="mode", equal=m)).mark_point(
        shape=_FRONTIER_MODES[m][1], size=70, strokeWidth=2).encode(
        fill=alt.condition("datum.meets", color, alt.value("white")), tooltip=tooltip) for m in modes]
    layers = [lines, *points]
    if target_tpot_s:
        t = pd.DataFrame({"tpot_ms": [1e3 * target_tpot_s], "label": [f"TPOT target {1e3 * target_tpot_s:g} ms"]})
        layers += [alt.Chart(t).mark_rule(strokeDash=[5, 4], color="dimgray", strokeWidth=1.5).encode(x="tpot_ms:Q"),
                   alt.Chart(t).mark_text(align="left", baseline="bottom", dx=6, dy=-6, color="dimgray").encode(
                       x="tpot_ms:Q", y=alt.value(_FRONTIER_HEIGHT), text="label:N")]
    best = []
    for m in modes:
        f = df[(df["mode"] == m) & df["meets"]]
        if len(f):
            r = f.loc[f["tokens_per_s_per_card"].astype(float).idxmax()]
            best.append({"tpot_ms": float(r["tpot_ms"]), "tokens_per_s_per_card": float(r["tokens_per_s_per_card"]),
                         "label": f"{float(r['tokens_per_s_per_card']):,.0f}", "mode": m})
    if best:
        mk = pd.DataFrame(best)
        enc = {"x": "tpot_ms:Q", "y": "tokens_per_s_per_card:Q"}
        layers.append(alt.Chart(mk).mark_point(size=420, shape="circle", filled=False, color="black",
                                               strokeWidth=2.5).encode(**enc, tooltip=["mode", "label"]))
        for stroke in ("white", None):  # a white halo under the label, so that lines do not hide it
            props = {"stroke": stroke, "strokeWidth": 4} if stroke else {}
            layers.append(alt.Chart(mk).mark_text(align="right", dx=-14, dy=-12, fontSize=13, fontWeight="bold",
                                                  **props).encode(**enc, text="label:N"))
    subtitle = ("filled: meets every target; hollow: does not; ringed: the most output per card within every "
                "target")
    return house_style(alt.layer(*layers).properties(height=_FRONTIER_HEIGHT,
                                                     title=alt.TitleParams(title, subtitle=subtitle)))
