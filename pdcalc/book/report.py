"""Tables the chapters show, built from the inventory and the quantization schemes.

Chapters call these instead of re-deriving anything: every number in a table comes from
:mod:`pdcalc.model.inventory` and :mod:`pdcalc.model.quant`.
"""

from __future__ import annotations

import pandas as pd

from pdcalc.book.cells import powers_html, powers_text, readable, ratio_text, sig_text  # noqa: F401 (report's API)
from pdcalc.model.inventory import CATEGORIES, get_inventory
from pdcalc.model.quant import bytes_by_category, get_scheme

#: The V4 article's two classes: class I is split over the EP group, class II is replicated on every card.
CLASS_I = ("routed_experts",)


def category_table(models: dict[str, tuple[str, str]], *, part: str = "main", unit: float = 1e9) -> pd.DataFrame:
    """Parameters and weight bytes per category, one column pair per model.

    ``models`` maps a column label to ``(model, scheme)``; counts are in units of ``unit`` parameters
    (default billions) and bytes in GB (10^9 B).
    """
    cols = {}
    for label, (model, scheme) in models.items():
        inv = get_inventory(model)
        cols[f"{label} params (B)"] = inv.by_category(part=part) / unit
        cols[f"{label} weights (GB)"] = bytes_by_category(model, scheme, part=part) / 1e9
    df = pd.DataFrame(cols).reindex([c for c in CATEGORIES if any(c in s.index for s in cols.values())])
    df = df.fillna(0.0)
    df.loc["total"] = df.sum()
    df.index.name = "category"
    return df


def class_split(model: str, scheme: str, *, part: str = "main") -> pd.Series:
    """Weight bytes of class I (EP-split routed experts) and class II (replicated), in bytes."""
    b = bytes_by_category(model, scheme, part=part)
    one = sum(b.get(c, 0.0) for c in CLASS_I)
    return pd.Series({"class I (routed experts, EP-split)": one, "class II (replicated)": b.sum() - one})


def layer_table(model: str, layer: int) -> pd.DataFrame:
    """Every tensor of one block: short name, shape, instances and parameters."""
    inv = get_inventory(model)
    rows = []
    for t in inv.tensors:
        if t.layer != layer:
            continue
        short = t.name.split(f".{layer}.", 1)[-1] if f".{layer}." in t.name else t.name
        rows.append({"tensor": short, "category": t.category, "shape": " x ".join(map(str, t.shape)),
                     "instances": t.count, "params": t.params})
    return pd.DataFrame(rows)


def layer_kinds(model: str) -> pd.DataFrame:
    """How many main-model layers of each kind and their parameters: V4 by compression ratio and routing,
    the MLA types by attention (with or without an indexer) and FFN (dense or routed)."""
    inv = get_inventory(model)
    cfg = inv.config
    df = inv.frame()
    main = df[(df.part == "main") & df.layer.notna()]
    per_layer = main.groupby("layer")["params"].sum()
    rows = []
    for i in range(cfg.num_hidden_layers):
        if cfg.mla:
            kind = "MLA + indexer" if cfg.sparse else "MLA"
            routing = "learned" if cfg.is_moe_layer(i) else "none (dense FFN)"
            rows.append({"attention": kind, "routing": routing, "params per layer": int(per_layer[i])})
            continue
        r = cfg.compress_ratio(i)
        kind = "sliding window only" if r == 0 else f"compressed {r}:1" + (" + indexer" if r == 4 else "")
        routing = "hash" if i < cfg.num_hash_layers else "learned"
        rows.append({"attention": kind, "routing": routing, "params per layer": int(per_layer[i])})
    out = pd.DataFrame(rows).groupby(["attention", "routing", "params per layer"]).size().rename("layers")
    return out.reset_index()


def scheme_table(model: str, scheme: str) -> pd.DataFrame:
    """Per category: the dtype(s) the scheme stores and the bytes, main model and MTP."""
    from pdcalc.model.quant import dtype_table

    df = dtype_table(model, get_scheme(scheme))
    df["GB"] = df["bytes"] / 1e9
    return df.drop(columns=["bytes"])


def placement_table(n_experts: int, ep: int, redundant: int = 0) -> pd.DataFrame:
    """Experts held by each card of an EP group (first ~ last, count)."""
    from pdcalc.layout.parallel import place_experts

    p = place_experts(n_experts, ep, redundant)
    return pd.DataFrame({"card": range(ep), "experts": p.ranges(), "count": p.experts_per_card}).set_index("card")


def card_weights_table(columns: dict) -> pd.DataFrame:
    """Per-category weight GB per card; ``columns`` maps a label to a :class:`~pdcalc.layout.memory.CardWeights`."""
    df = pd.DataFrame({k: pd.Series(w.by_category) / 1e9 for k, w in columns.items()}).fillna(0.0)
    df = df.reindex([c for c in CATEGORIES if c in df.index])
    df.loc["total"] = df.sum()
    df.index.name = "category (GB per card)"
    return df


def cluster_map(deployment: dict, model: str, scheme: str, *, mtp: bool = True) -> pd.DataFrame:
    """Every card of a PD deployment: server, role, EP rank, experts held, weight GiB."""
    from pdcalc.layout.memory import card_weights
    from pdcalc.layout.parallel import place_experts

    rows, card = [], 0
    per_server = deployment["cards_per_server"]
    n_experts = get_inventory(model).n_routed_experts
    for role, n_inst, dp, tp in (("P", deployment["prefill_instances"], deployment["prefill_dp"], deployment["prefill_tp"]),
                                 ("D", deployment["decode_instances"], deployment["decode_dp"], deployment["decode_tp"])):
        ep = dp * tp
        placement = place_experts(n_experts, ep)
        w = card_weights(model, scheme, ep=ep, tp=tp, mtp=mtp)
        for inst in range(n_inst):
            for rank in range(ep):
                first, last = placement.first_last(rank)
                rows.append({"card": card, "server": card // per_server, "role": f"{role}{inst}", "ep_rank": rank,
                             "experts": f"{first} ~ {last}", "weights_gib": w.total_bytes / 2**30})
                card += 1
    return pd.DataFrame(rows).set_index("card")


def kv_layout_table(engine: str, model: str, *, include_mtp: bool = True, block_size: int | None = None) -> pd.DataFrame:
    """Every cache of every layer kind as ``engine`` stores it: entry bytes, tokens per entry, window,
    page, and per sequence the fixed bytes and the bytes per context token, summed over the layers."""
    from pdcalc.model.kv_layout import engine_layout

    lay = engine_layout(engine, model, block_size=block_size)
    rows = []
    for k in lay.kinds(include_mtp):
        for c in k.caches:
            rows.append({"layers": f"{k.key} x {k.n_layers}", "cache": c.name, "entry B": c.entry_bytes,
                         "tokens per entry": c.tokens_per_entry,
                         "window tokens": c.window_tokens or "",
                         "page": f"{c.block_tokens} tok / {c.page_bytes:,.0f} B" if c.paged else "contiguous",
                         "fixed B per seq": k.n_layers * c.fixed_bytes,
                         "B per token": k.n_layers * c.per_token_bytes})
    df = pd.DataFrame(rows)
    df.loc[len(df)] = {"layers": "all", "cache": "total", "entry B": None, "tokens per entry": None,
                       "window tokens": "", "page": "", "fixed B per seq": df["fixed B per seq"].sum(),
                       "B per token": df["B per token"].sum()}
    return df.set_index(["layers", "cache"])


def plans_table(plans, unit: float = 1e9, unit_name: str = "GB") -> pd.DataFrame:
    """Memory plans side by side: one column per plan, parts, total, usable, free (two decimals) and the
    verdict."""
    cols = {}
    for p in plans:
        s = {k.replace("_", " "): v / unit for k, v in p.parts.items()}
        s.update({"total": p.total_bytes / unit, "usable": p.usable_bytes / unit, "free": p.free_bytes / unit})
        cols[p.label] = {k: f"{v:,.2f}" for k, v in s.items()}
    df = pd.DataFrame(cols)
    df.index.name = f"{unit_name} per card"
    df.loc["verdict"] = [p.verdict(unit, unit_name) for p in plans]
    return df


def pd_memory_table(p_weights, d_weights, p_plan, d_plans: dict, unit: float = 1e9) -> pd.DataFrame:
    """The P vs D comparison of the V4 article's §6.4 (P vs D 显存占用对比表), rebuilt: weights by class,
    KV, activations, framework, totals for each D plan, in ``unit`` per card, with the P/D ratio.

    ``p_weights``/``d_weights`` are :class:`~pdcalc.layout.memory.CardWeights`; ``p_plan`` a
    :class:`~pdcalc.layout.memory.MemoryPlan`; ``d_plans`` maps a label (e.g. "scenario A") to a D plan.
    """
    first = next(iter(d_plans.values()))
    rows = {
        "class I (routed experts)": (p_weights.class_i_bytes, d_weights.class_i_bytes),
        "class II (replicated)": (p_weights.class_ii_bytes, d_weights.class_ii_bytes),
        "weights": (p_weights.total_bytes, d_weights.total_bytes),
    }
    for label, d in d_plans.items():
        rows[f"KV cache ({label})"] = (p_plan.parts["kv_cache"], d.parts["kv_cache"])
    rows["activations"] = (p_plan.parts["activations"], first.parts["activations"])
    rows["framework"] = (p_plan.parts["framework"], first.parts["framework"])
    for label, d in d_plans.items():
        rows[f"total ({label})"] = (p_plan.total_bytes, d.total_bytes)
    df = pd.DataFrame(rows, index=["P", "D"]).T / unit
    df["P/D"] = df["P"] / df["D"]
    for label, d in d_plans.items():
        df.loc[f"share of capacity ({label}), %"] = [100 * p_plan.total_bytes / p_plan.capacity_bytes,
                                                     100 * d.total_bytes / d.capacity_bytes, float("nan")]
    df.index.name = "per card"
    return df


# ---------------------------------------------------------------------------------------------
# the planner's results as a reader reads them (plan chapter)
# ---------------------------------------------------------------------------------------------
#: Columns of :func:`splits_table`, the ranking key first.
SPLIT_COLUMNS = ("split", "output tokens/s per card", "cards", "TTFT (s)", "TPOT (ms)", "output tokens/s",
                 "KV capacity (sequences)", "tightest constraint")


def _split_values(r) -> dict:
    """One planner row (a row of :attr:`pdcalc.plan.search.Plan.candidates`) in the units a page shows, rounded as
    shown: tokens/s to whole tokens, TTFT to 10 ms (s, 2 decimals), TPOT to 0.1 ms."""
    from pdcalc.core.precision import round_decimals
    from pdcalc.plan.labels import split_label

    return {"split": split_label(r),
            "output tokens/s per card": round_decimals(float(r["tokens_per_s_per_card"]), 0),
            "cards": int(r["cards"]),
            "TTFT (s)": round_decimals(float(r["ttft_s"]), 2),
            "TPOT (ms)": round_decimals(1e3 * float(r["tpot_s"]), 1),
            "output tokens/s": round_decimals(float(r["output_tokens_per_s"]), 0),
            "KV capacity (sequences)": int(r["kv_capacity_seqs"]),
            "tightest constraint": str(r["binding"])}


def splits_table(rows: pd.DataFrame, n: int | None = None, *, names: list[str] | None = None,
                 columns: tuple[str, ...] = SPLIT_COLUMNS) -> pd.DataFrame:
    """The first ``n`` planner rows (:attr:`pdcalc.plan.search.Plan.ranked`, ``candidates`` or rows of
    :func:`pdcalc.plan.splits.evaluate_split` stacked) with the ranking key first: the split as people write it,
    output tokens/s per card, cards, TTFT (s), TPOT (ms), output tokens/s, the D side's KV capacity in
    sequences and the tightest constraint (for a split that does not run, the first that fails).
    ``names`` puts a first column ``plan`` naming each row; ``columns`` keeps those of
    :data:`SPLIT_COLUMNS` listed."""
    r = rows if n is None else rows.head(n)
    df = pd.DataFrame([_split_values(x) for _, x in r.iterrows()], columns=list(SPLIT_COLUMNS))[list(columns)]
    if names is not None:
        df.insert(0, "plan", list(names))
    return df


#: The columns of :func:`splits_table` a served plan gives a likely range: the planner's column and the format.
RANGED_SPLIT_COLUMNS = {"output tokens/s per card": ("tokens_per_s_per_card", ",.0f"), "TTFT (s)": ("ttft_s", ".2f"),
                        "TPOT (ms)": ("tpot_s", ".1f"), "output tokens/s": ("output_tokens_per_s", ",.0f")}


def splits_display(df: pd.DataFrame, *, caption: str, csv_name: str, setup=None):
    """:func:`pdcalc.book.display.table` of a :func:`splits_table`, each split label kept on one line; under the
    served model of ``setup``, each figure with its likely range in brackets
    (:func:`pdcalc.plan.search.range_factors`; the CSV keeps the figures)."""
    import html

    from pdcalc.book.display import table
    from pdcalc.plan.search import range_factors

    cells = {"split": [f'<span style="white-space:nowrap">{html.escape(str(v))}</span>' for v in df["split"]]} \
        if "split" in df else {}
    factors = range_factors(setup) if setup is not None else {}
    for col, (key, fmt) in RANGED_SPLIT_COLUMNS.items():
        if col in df and key in factors:
            lo, hi = factors[key]
            cells[col] = [f"{format(v, fmt)}<br><small>({format(v * lo, fmt)} to {format(v * hi, fmt)})</small>"
                          for v in df[col]]
    if factors:
        caption += " (served model; in brackets: the likely, 80 % range)"
    return table(df, caption=caption, csv_name=csv_name, cell_html=cells or None)


def real_model_text(article_best, whole, freed, sequences: int, other_name: str | None) -> str:
    """The plan chapter's paragraph on the real model (planner rows, ``None`` where no split meets the targets):
    the split it gives the whole cluster against the article's model's (``article_best``), then the split it
    serves the same ``sequences`` with once freed from using every card; where neither exists, that nothing meets
    the targets, and ``other_name`` (the row shown instead, if any)."""
    from pdcalc.plan.labels import split_label

    if whole is None or freed is None:
        return ("Under the real model no split meets the targets: the tables above name the closest and what it "
                "fails on." + (f" {other_name[:1].upper() + other_name[1:]}, under the same model:"
                               if other_name else ""))
    same = article_best is not None and split_label(whole) == split_label(article_best)
    held = f" where the article's model held {article_best.kv_capacity_seqs:,.0f}" if article_best is not None else ""
    return (f"Using the whole cluster, the real model leads to {'the same split' if same else 'another split'}, "
            f"{split_label(whole)}, for its own reasons: its D instance holds {whole.kv_capacity_seqs:,.0f} sequences "
            f"of that context{held}. Freed from using every card, the planner serves the same {sequences:,} "
            f"sequences with {split_label(freed)} on {int(freed.cards):,} cards, {freed.tokens_per_s_per_card:,.0f} "
            f"output tokens/s per card against {whole.tokens_per_s_per_card:,.0f} when all cards are used. "
            "The two side by side:")


def split_tradeoff(best, other, other_name: str) -> str:
    """One or two sentences: the planner's ``best`` split against ``other`` (planner rows), named
    ``other_name``: output per card, then what the best split gives up (or gains) in TTFT, TPOT, total
    output and cards. The figures are those of :func:`splits_table`."""
    a, b = _split_values(best), _split_values(other)
    if a["split"] == b["split"]:
        return (f"The most output per card, {a['output tokens/s per card']:,.0f} tokens/s, is {other_name} itself: "
                f"{a['split']} on {a['cards']:,} cards, at a TTFT of {a['TTFT (s)']:.2f} s and a TPOT of "
                f"{a['TPOT (ms)']:.1f} ms.")
    ratio = best["tokens_per_s_per_card"] / other["tokens_per_s_per_card"]
    head = (f"{a['split']} on {a['cards']:,} cards serves {a['output tokens/s per card']:,.0f} output tokens/s per "
            f"card, {ratio:.2f} times {other_name} ({b['split']} on {b['cards']:,} cards, "
            f"{b['output tokens/s per card']:,.0f})")
    worse, better = [], []
    for key, what, fmt, low_good in (("TTFT (s)", "a TTFT of {} s", ".2f", True),
                                     ("TPOT (ms)", "a TPOT of {} ms", ".1f", True),
                                     ("output tokens/s", "{} output tokens/s in all", ",.0f", False)):
        x, y = a[key], b[key]
        if x == y:
            continue
        text = f"{what.format(format(x, fmt))} against {what.format(format(y, fmt)).split(' of ')[-1]}" \
            if " of " in what else f"{format(x, fmt)} against {format(y, fmt)} output tokens/s in all"
        if (x > y) == low_good:
            worse.append(text)
        else:
            better.append(text)
    out = head
    if worse:
        out += "; it pays with " + ", ".join(worse[:-1]) + (" and " if len(worse) > 1 else "") + worse[-1]
    if better:
        out += ("; it also gives " if worse else "; it gives ") + ", ".join(better[:-1]) + (
            " and " if len(better) > 1 else "") + better[-1]
    return out + "."


#: A memory part as a page names it.
_PART_NAMES = {"kv_cache": "KV cache", "overhead": "activations and framework"}


def plan_card_memory_table(plans: dict, unit: float = 2**30, unit_name: str = "GiB") -> pd.DataFrame:
    """Memory plans (:class:`pdcalc.layout.memory.MemoryPlan`) side by side, one column per name of ``plans``:
    each part, the total, what the engine may use and what is left (negative: over budget), in
    ``unit_name`` per card, two decimals. The verdict is each plan's
    :meth:`~pdcalc.layout.memory.MemoryPlan.verdict`."""
    from pdcalc.core.precision import round_decimals

    cols = {}
    for name, p in plans.items():
        s = {_PART_NAMES.get(k, k.replace("_", " ")): v for k, v in p.parts.items()}
        s.update({"total": p.total_bytes, "usable": p.usable_bytes, "left": p.free_bytes})
        cols[name] = {k: round_decimals(v / unit, 2) for k, v in s.items()}
    df = pd.DataFrame(cols)
    df.index.name = f"{unit_name} per card"
    return df


def weights_source(logs: dict) -> str:
    """Markdown: where each side's weights come from, ``logs`` mapping a side ("P", "D") to the
    :class:`pdcalc.reality.weights.LoggedWeights` that sizes it or ``None`` (pdcalc's tensor inventory).
    A log is named with its layout and linked to its source."""
    parts = []
    for side, log in logs.items():
        if log is None:
            parts.append(f"{side} weights come from pdcalc's tensor inventory (no engine log of that layout)")
            continue
        where = f"[{log.source.split(' (')[0]}]({log.url})" if log.url else log.source
        parts.append(f"{side} weights are the {log.bytes / 2**30:.1f} GiB per card an engine logged for that "
                     f"layout ({log.layout}; {where})")
    return "; ".join(parts)


def latency_targets(ttft_ms: float | None = None, tpot_ms: float | None = None) -> tuple:
    """The latency targets a planning page applies and a Markdown sentence saying where they come from:
    ``(ttft_s, tpot_s, sentence)``. ``None`` takes the published service level of
    :func:`pdcalc.plan.workload.default_targets` (linked to its source); a number is a target set by the
    reader (ms)."""
    from pdcalc.plan.workload import default_targets
    from pdcalc.reality import service_levels

    d, lv = default_targets(), service_levels.get()
    ttft_s = d.ttft_s if ttft_ms is None else ttft_ms / 1e3
    tpot_s = d.tpot_s if tpot_ms is None else tpot_ms / 1e3
    link = f"[{lv.source}]({lv.url})"
    parts = []
    for which, given, value, source in (("TPOT", tpot_ms, tpot_s, d.tpot_source), ("TTFT", ttft_ms, ttft_s,
                                                                                   d.ttft_source)):
        if given is not None:
            parts.append(f"{which} at most {given:g} ms, as set in the parameters cell")
        elif value is not None:
            parts.append(source.replace(lv.source, link, 1))
        else:
            parts.append(f"no {which} target")
    return ttft_s, tpot_s, ". ".join(p[0].upper() + p[1:] for p in parts) + "."


# ---------------------------------------------------------------------------------------------
# presentation helpers of the DeepSeek-V4-Flash chapters (architecture, per_card, kv_memory,
# transfer, pd_split): tables a reader reads, built from the functions above
# ---------------------------------------------------------------------------------------------
def sig_table(df: pd.DataFrame, *, caption: str | None = None, csv_name: str | None = None, sig: int = 4,
              index: bool = False):
    """:func:`pdcalc.book.display.table` with every float column written value by value at ``sig``
    significant figures (:func:`sig_text`): for columns whose values span orders of magnitude."""
    from pdcalc.book.display import table

    shown = df.reset_index() if index else df
    cells = {c: sig_text(shown[c], sig) for c in shown.columns if pd.api.types.is_float_dtype(shown[c].dtype)}
    return table(shown, caption=caption, csv_name=csv_name, sig=sig, cell_html=cells)


def fold(obj, summary: str):
    """An HTML output (``IPython.display.HTML``, e.g. a :func:`pdcalc.book.display.table`) folded into a
    closed dropdown whose one-line ``summary`` says what it holds."""
    import html

    from IPython.display import HTML

    body = obj.data if hasattr(obj, "data") else str(obj)
    return HTML(f'<details class="pdcalc-fold"><summary>{html.escape(summary)}</summary>{body}</details>')


def pretty_category(name: str) -> str:
    """A category of :data:`pdcalc.model.inventory.CATEGORIES` as prose (``routed_experts`` -> ``routed experts``,
    ``mhc`` -> ``mHC``, ``lm_head`` -> ``output head``)."""
    return {"mhc": "mHC", "lm_head": "output head", "mtp_proj": "MTP projections"}.get(name, name.replace("_", " "))


def placement_grid(n_experts: int, ep: int, redundant: int = 0, per_row: int = 8) -> pd.DataFrame:
    """The experts each card of an EP group holds (:func:`placement_table`), ``per_row`` cards to a row:
    the row's first card plus the column's offset is the card; a cell reads ``first ~ last``."""
    from pdcalc.layout.parallel import place_experts

    p = place_experts(n_experts, ep, redundant)
    ranges = p.ranges()
    width = min(per_row, ep)
    rows = []
    for start in range(0, ep, width):
        row = {"cards": f"{start}–{min(start + width, ep) - 1}" if width > 1 else f"{start}"}
        for k in range(width):
            row[f"+{k}"] = ranges[start + k] if start + k < ep else ""
        rows.append(row)
    return pd.DataFrame(rows)


def cluster_summary(deployment: dict, model: str, scheme: str, *, mtp: bool = True) -> pd.DataFrame:
    """:func:`cluster_map` one row per server: its cards, instance, EP ranks, experts per card and the
    experts of each layer the server's cards hold together (``first ~ last``), and the weights per card in GiB, with the engine's log beside pdcalc's
    prediction where the registry has one for that layout (:func:`pdcalc.reality.weights.logged_weights`)."""
    from pdcalc.reality.weights import logged_weights

    m = cluster_map(deployment, model, scheme, mtp=mtp).reset_index()
    ep = {"P": deployment["prefill_dp"] * deployment["prefill_tp"], "D": deployment["decode_dp"] * deployment["decode_tp"]}
    rows = []
    for server, g in m.groupby("server", sort=True):
        role = g["role"].iloc[0]
        n = int(g["experts"].iloc[0].split("~")[1]) - int(g["experts"].iloc[0].split("~")[0]) + 1
        log = logged_weights(model, scheme, ep=ep[role[0]], tp=deployment[f"{'prefill' if role[0] == 'P' else 'decode'}_tp"],
                             mtp=mtp)
        rows.append({"server": int(server), "cards": f"{g['card'].min()}–{g['card'].max()}",
                     "instance": ", ".join(dict.fromkeys(g["role"])),
                     "EP ranks": f"{g['ep_rank'].min()}–{g['ep_rank'].max()}",
                     "experts per card": n,
                     "experts of each layer on the server": f"{g['experts'].iloc[0].split('~')[0].strip()} ~ "
                                                            f"{g['experts'].iloc[-1].split('~')[1].strip()}",
                     "weights per card, pdcalc (GiB)": float(g["weights_gib"].iloc[0]),
                     "weights per card, engine log (GiB)": log.bytes / 2**30 if log else float("nan")})
    return pd.DataFrame(rows)


def card_memory_table(cards: dict, *, unit: float = 2**30, unit_name: str = "GiB") -> pd.DataFrame:
    """Per card: weights by category, their total, the usable memory and what is left after the weights.

    ``cards`` maps a column label to ``(weights, budget)``: ``weights`` a
    :class:`~pdcalc.layout.memory.CardWeights` (every category shown) or a number of bytes (an engine's logged
    total: only the total, usable and left rows), ``budget`` the :class:`~pdcalc.layout.memory.Budget` of that
    card with those weights. Values in ``unit``.
    """
    cats = [c for c in CATEGORIES if any(not isinstance(w, (int, float)) and w.by_category.get(c)
                                         for w, _ in cards.values())]
    cols = {}
    for label, (w, b) in cards.items():
        detailed = not isinstance(w, (int, float))
        total = w.total_bytes if detailed else float(w)
        col = {f"{pretty_category(c)}": (w.by_category.get(c, 0.0) / unit if detailed else float("nan")) for c in cats}
        col["weights, total"] = total / unit
        col[f"usable ({b.utilization:g} x visible memory)"] = b.usable_bytes / unit
        col["left after weights"] = (b.usable_bytes - total) / unit
        cols[label] = col
    df = pd.DataFrame(cols)
    df.index.name = f"per card ({unit_name})"
    return df


def pd_memory_table_logged(p_weights, d_weights, p_plan, d_plans: dict, logged_bytes: float | None,
                           unit: float = 2**30, label: str = "P, engine-logged weights") -> pd.DataFrame:
    """:func:`pd_memory_table` with one more column where an engine's log of the P card's weights exists:
    the same P card with the logged weights in place of pdcalc's (class I and II unknown, left empty;
    totals and shares follow)."""
    df = pd_memory_table(p_weights, d_weights, p_plan, d_plans, unit)
    if logged_bytes is None:
        return df
    delta = (logged_bytes - p_weights.total_bytes) / unit
    col = pd.Series(float("nan"), index=df.index)
    for row in df.index:
        if row.startswith(("class I", "class II")):
            continue
        if row == "weights":
            col[row] = logged_bytes / unit
        elif row.startswith("total"):
            col[row] = df.loc[row, "P"] + delta
        elif row.startswith("share of capacity"):
            col[row] = df.loc[row, "P"] + 100 * delta * unit / p_plan.capacity_bytes
        else:
            col[row] = df.loc[row, "P"]
    df.insert(1, label, col)
    return df


def dp_sweep_table(side: str, sizes, *, model: str, quant: str, card, engine: str, mtp: bool, utilization: float,
                   activation_bytes: float, framework_bytes: float, context: int, p_cards: int) -> pd.DataFrame:
    """The V4 article's dp-size decision tree (§8.3) as a sweep: for each dp size of ``side`` ("P" or "D"),
    experts per card, the article's weights and KV room (its shapes at 1 B per parameter, GB as it prints
    them) and the real ones (``model`` in ``quant``, GiB); on P the instances the ``p_cards`` cards make and
    the engine's logged weights where a log of that layout exists; on D the sequences of ``context`` tokens
    whose cache fits per card, by the article's 44 KB per token and by ``engine``'s layout."""
    from pdcalc.audit import budgets
    from pdcalc.audit.per_card import article_card
    from pdcalc.layout.memory import budget, ep_sweep
    from pdcalc.model.kv_cache import article_kv_bytes, sequences_that_fit
    from pdcalc.reality.weights import logged_weights

    s = side.lower()
    real = ep_sweep(model, quant, card, sizes, mtp=mtp, utilization=utilization, activation_bytes=activation_bytes,
                    framework_bytes=framework_bytes)
    rows = []
    for n, r in zip(sizes, real.itertuples()):
        art_room = budgets.article_plan(s, 0.0, ep=n).room_bytes()
        row = {"dp": int(n), "experts per card": int(r.experts_per_card),
               "article weights (GB)": article_card(n).total_bytes / 1e9, "article KV room (GB)": art_room / 1e9,
               "real weights (GiB)": r.weights_bytes / 2**30, "real KV room (GiB)": r.kv_room_bytes / 2**30}
        if s == "p":
            log = logged_weights(model, quant, ep=int(n), mtp=mtp)
            b = (budget(card, log.bytes, utilization=utilization, activation_bytes=activation_bytes,
                        overhead_bytes=framework_bytes) if log else None)
            row["logged weights (GiB)"] = log.bytes / 2**30 if log else float("nan")
            row["KV room with logged weights (GiB)"] = b.kv_bytes / 2**30 if b else float("nan")
            row["instances"] = p_cards // int(n)
        else:
            row["article seqs at context"] = max(0, int(art_room // article_kv_bytes(context, budgets.kb_per_token())))
            row["real seqs at context"] = int(sequences_that_fit(max(0.0, r.kv_room_bytes), context, model, engine))
        rows.append(row)
    df = pd.DataFrame(rows)
    if s == "p" and df["logged weights (GiB)"].isna().all():
        df = df.drop(columns=["logged weights (GiB)", "KV room with logged weights (GiB)"])
    return df


# ---------------------------------------------------------------------------------------------
# tables with links, and the throughput model against published runs (v3_throughput, validation)
# ---------------------------------------------------------------------------------------------
def linked_table(df: pd.DataFrame, *, caption: str, csv_name: str, links: dict | None = None,
                 nowrap: tuple = (), index: bool = False, readable_numbers: bool = False, prose: tuple = (),
                 breakable: tuple = (), **kw):
    """:func:`pdcalc.book.display.table` whose cells in the columns of ``links`` link to a URL (``links`` maps a
    column to one URL or ``None`` per row; the CSV keeps the text), and whose ``nowrap`` columns keep
    each cell on one line. ``readable_numbers`` writes every float column value by value (:func:`readable`;
    ``sig``, ``ratios``, ``ratio_sig`` and ``ratio_decimals`` are passed on to it); ``prose`` columns show a power
    written ``10**9`` as 10<sup>9</sup> (:func:`powers_html`); ``breakable`` columns may wrap after an
    underscore (a file name such as ``day_6_one_more_thing_..._overview.md`` that would otherwise widen the
    table past the column). Other keywords go to ``table`` (``wide``, ``quotes``)."""
    import html

    from pdcalc.book.display import table

    shown = df.reset_index() if index else df
    how = {k: kw.pop(k) for k in ("ratios", "ratio_sig", "ratio_decimals") if k in kw}
    if "sig" in kw:
        how["sig"] = kw["sig"]
    if readable_numbers:
        kw["texts"] = readable(shown, **how) | kw.get("texts", {})
    cells = {}
    for col in prose:
        cells[col] = [powers_html(html.escape("" if v is None else str(v))) for v in shown[col]]
        kw["texts"] = kw.get("texts", {}) | {col: [powers_text("" if v is None else str(v)) for v in shown[col]]}
    for col in breakable:
        cells[col] = [html.escape("" if v is None else str(v)).replace("_", "_<wbr>") for v in shown[col]]
    for col in set(links or {}) | set(nowrap):
        texts = [html.escape("" if v is None or (isinstance(v, float) and v != v) else str(v)) for v in shown[col]]
        urls = (links or {}).get(col) or [None] * len(texts)
        style = ' style="white-space:nowrap"' if col in nowrap else ""
        cells[col] = [f'<a href="{html.escape(u)}"{style}>{t}</a>' if u else f"<span{style}>{t}</span>"
                      for t, u in zip(texts, urls)]
    return table(shown, caption=caption, csv_name=csv_name, cell_html=cells, **kw)


def measurement_urls(ids) -> list:
    """The source URL of each measurement id of the registry (``None`` where it has none)."""
    from pdcalc.reality import measurements

    return [measurements.get(i).url for i in ids]


def published_runs_table(pub: pd.DataFrame) -> pd.DataFrame:
    """:func:`pdcalc.reality.published_runs.compare_published` as a page shows it: the measurement, its phase and card,
    predicted and measured output in tokens/s per card (whole tokens), their ratio (two decimals), what
    bounds the predicted step and the conditions each row assumes."""
    from pdcalc.core.precision import round_decimals

    return pd.DataFrame({
        "measurement": pub["measurement"].to_numpy(), "phase": pub["phase"].to_numpy(),
        "card": pub["card"].to_numpy(),
        "predicted (tokens/s per card)": round_decimals(pub["predicted_tokens_per_s_per_card"].to_numpy(float), 0),
        "measured (tokens/s per card)": round_decimals(pub["measured_tokens_per_s_per_card"].to_numpy(float), 0),
        "predicted / measured": round_decimals(pub["ratio"].to_numpy(float), 2),
        "bound": pub["bound"].astype(str).to_numpy(), "conditions": pub["conditions"].to_numpy()})


# ---------------------------------------------------------------------------------------------
# the validation chapter: predictions beside measurements, errata in brief
# ---------------------------------------------------------------------------------------------
def validation_display(shown: pd.DataFrame, *, caption: str, csv_name: str):
    """:func:`pdcalc.reality.validation.show` rows as a page shows them: a table that fits the column (the
    measurement linked to its source, the layout, measured, predicted, their ratio and the band it is
    held to) and, folded under it, each measurement's quote and locator."""
    from IPython.display import HTML

    s = shown.reset_index()
    value_cols = [c for c in s.columns if c.startswith(("measured (", "predicted ("))]
    main = s[["measurement", "layout", *value_cols, "predicted / measured", "band"]]
    urls = measurement_urls(main["measurement"])
    quotes = s[["measurement", "quote", "source"]]
    # the ratio at three places: the bands it is held to are a few percent wide
    body = linked_table(main, caption=caption, csv_name=csv_name, links={"measurement": urls}, nowrap=("band",),
                        readable_numbers=True, ratio_decimals=3).data
    folded = fold(linked_table(quotes, caption=f"{caption}: what each source says", csv_name=f"{csv_name}-quotes",
                               links={"measurement": urls}, quotes=("quote",)),
                  f"the quote{'s' if len(quotes) > 1 else ''} and where to find {'them' if len(quotes) > 1 else 'it'}")
    return HTML(body + folded.data)


def candidates_brief(candidates: pd.DataFrame) -> pd.DataFrame:
    """:func:`pdcalc.reality.weights.candidates_table` with the columns a reader compares: measurement,
    candidate layout, predicted GiB, predicted / measured (three decimals), whether the source allows it
    and whether it is the one chosen."""
    from pdcalc.core.precision import round_decimals

    c = candidates.reset_index()
    return pd.DataFrame({"measurement": c["measurement"], "candidate": c["candidate"],
                         "predicted (GiB)": round_decimals(c["predicted (GiB)"].to_numpy(float), 2),
                         "predicted / measured": round_decimals(c["ratio"].to_numpy(float), 3),
                         "the source allows it": c["consistent"].astype(bool), "chosen": c["chosen"].astype(bool)})


def budgets_by_part(budgets: pd.DataFrame) -> pd.DataFrame:
    """:func:`pdcalc.reality.memory_checks.kv_budget_table` turned to one row per part (GiB, two decimals; the
    utilization as a fraction), one column per startup log."""
    from pdcalc.core.precision import round_decimals

    t = budgets.T
    t.index.name = "part"
    return t.map(lambda v: round_decimals(float(v), 2)).reset_index()


def articles_measured_gib(arts: pd.DataFrame) -> pd.DataFrame:
    """:func:`pdcalc.audit.vs_measurements.articles_vs_measurements` in GiB, the unit the engines report (what the
    article prints kept as printed, in its own unit), ratios to two decimals."""
    from pdcalc.core.precision import round_decimals

    a = arts.reset_index()
    out = pd.DataFrame({"quantity": a["quantity"], "article prints": a["article prints"]})
    for col in ("article", "pdcalc", "measured"):
        out[f"{col} (GiB)"] = round_decimals((a[f"{col} (GB)"] * 1e9 / 2**30).to_numpy(float), 2)
    out["article / measured"] = round_decimals(a["article / measured"].to_numpy(float), 2)
    out["pdcalc / measured"] = round_decimals(a["pdcalc / measured"].to_numpy(float), 2)
    out["measurement"] = a["measurement"]
    return out


def errata_brief(page: str | None = None):
    """The errata of :func:`pdcalc.audit.errata.errata_table` in a table that fits the column: rank, severity
    (coloured), where (article and section), the quantity linked to the row of the audit that judges it
    (:func:`pdcalc.audit.claims.pages`, :func:`pdcalc.audit.claims.anchor`), what the article prints, what the
    official model and engine give, and what it changes. ``page``: the page it is shown on (a link to a
    row of that page stays on it)."""
    import html

    from IPython.display import HTML

    from pdcalc.audit import claims
    from pdcalc.audit.errata import errata_table
    from pdcalc.book.display import table, verdict_badge

    t = errata_table().reset_index()
    homes = claims.pages()
    df = pd.DataFrame({"#": t["rank"], "severity": t["severity"],
                       "where": [f"{a.upper()} §{s}" for a, s in zip(t["article"], t["section"])],
                       "quantity": t["quantity"], "the article prints": t["printed"],
                       "official model / engine": t["official model / engine"], "what it changes": t["what it changes"]})
    links = []
    for cid, q in zip(t["id"], t["quantity"]):
        home = homes.get(cid)
        href = (f"#{claims.anchor(cid)}" if home == page else f"{home}.html#{claims.anchor(cid)}") if home else None
        links.append(f'<a href="{href}">{html.escape(q)}</a>' if href else html.escape(q))
    cells = {"severity": [verdict_badge("erratum", s).replace("erratum · ", "") for s in t["severity"]],
             "quantity": links,
             "where": [f'<span style="white-space:nowrap">{html.escape(w)}</span>' for w in df["where"]]}
    return HTML(table(df, caption="the articles' most consequential errata, most severe first",
                      csv_name="errata", cell_html=cells).data)


def served_misses(n: int = 12):
    """:func:`pdcalc.reality.calibration.largest_misses` as a page shows it: measured and predicted at four
    significant figures each, the 80 % range written out at three (``2,340 to 6,370``, never ``2.34e+03``), the
    ratio at three."""
    from pdcalc.book.display import figure_text, table
    from pdcalc.reality.calibration import largest_misses, stored_held_out

    held = stored_held_out()
    df = largest_misses(held, n)
    scale = {"output_tokens_per_s": ("output tokens/s", 1.0), "tpot_s": ("TPOT (ms)", 1e3)}
    ranges = {(r.id, scale[r.metric][0]): f"{figure_text(r.low * scale[r.metric][1], 3)} to "
                                         f"{figure_text(r.high * scale[r.metric][1], 3)}"
              for r in held.itertuples() if r.metric in scale}
    df["80 % range"] = [ranges[(run, fig)] for run, fig in zip(df["run"], df["figure"])]
    return table(df, caption="the held-out points the served model misses most (output tokens/s and TPOT)",
                 csv_name="validation-served-misses", texts=readable(df, ratios=("predicted / measured",)))


def best_of(ranked, n: int) -> str:
    """How a caption names the first ``n`` rows of a ranking it shows: "the five best splits", "the 3 splits that
    fit", "the only split that fits"."""
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    k = len(ranked)
    if k == 1:
        return "the only split that fits"
    if k <= n:
        return f"the {words.get(k, f'{k:,}')} splits that fit"
    return f"the {words.get(n, f'{n:,}')} best splits"


def served_validation() -> dict:
    """``pdcalc validate``: every held-out prediction of the served corpus with its range and source, and the
    held-out summary; as ``{"json": ..., "lines": [...]}`` (text lines for a terminal)."""
    from pdcalc.book.display import figure_text
    from pdcalc.reality.calibration import stored, stored_held_out

    rows = [{"id": r.id, "metric": r.metric, "measured": r.measured, "predicted": r.predicted, "low": r.low,
             "high": r.high, "held_out": True, "covered": bool(r.covered), "source": r.source_id,
             "terms_from": r.pool} for r in stored_held_out().itertuples()]
    summ = stored()["summary"]
    units = {"output_tokens_per_s": ("tokens/s", 1.0), "tpot_s": ("ms", 1e3), "ttft_s": ("ms", 1e3)}

    def f3(x: float) -> str:
        return figure_text(float(x), 3)

    lines = [f"{'run':<64} {'metric':<6} {'measured':>10} {'predicted':>10} {'80 % range':>21}  in"]
    for r in rows:
        unit, k = units[r["metric"]]
        lines.append(f"{r['id'][:64]:<64} {r['metric'].split('_')[0]:<6} {f3(r['measured'] * k):>10} "
                     f"{f3(r['predicted'] * k):>10} {f3(r['low'] * k):>10}-{f3(r['high'] * k):<10} "
                     f"{'yes' if r['covered'] else 'no'}  {unit}")
    lines.append("held out (leave one source out), over output tokens/s and TPOT:")
    for key, x in summ.items():
        lines.append(f"  {key:<12} {x['points']:>4} points: median |error| {x['median_abs_err_pct']:.0f} %, 90th "
                     f"percentile {x['p90_abs_err_pct']:.0f} %, 80 % ranges cover {x['coverage_pct']:.0f} % (kernels "
                     f"alone: {x['before_median_abs_err_pct']:.0f} %, {x['before_p90_abs_err_pct']:.0f} %)")
    return {"json": {"predictions": rows, "summary": summ,
                     "held_out_means": "each run predicted at terms fitted without its source document; its range "
                                       "from other documents' held-out errors"}, "lines": lines}
