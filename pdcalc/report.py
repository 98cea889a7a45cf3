"""Tables the chapters show, built from the inventory and the quantization schemes.

Chapters call these instead of re-deriving anything: every number in a table comes from
:mod:`pdcalc.inventory` and :mod:`pdcalc.quant`.
"""

from __future__ import annotations

import pandas as pd

from pdcalc.inventory import CATEGORIES, get_inventory
from pdcalc.quant import bytes_by_category, get_scheme

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
    """V4: how many main-model layers of each kind (compression ratio, routing) and their parameters."""
    inv = get_inventory(model)
    cfg = inv.config
    df = inv.frame()
    main = df[(df.part == "main") & df.layer.notna()]
    per_layer = main.groupby("layer")["params"].sum()
    rows = []
    for i in range(cfg.num_hidden_layers):
        r = cfg.compress_ratio(i)
        kind = "sliding window only" if r == 0 else f"compressed {r}:1" + (" + indexer" if r == 4 else "")
        routing = "hash" if i < cfg.num_hash_layers else "learned"
        rows.append({"attention": kind, "routing": routing, "params per layer": int(per_layer[i])})
    out = pd.DataFrame(rows).groupby(["attention", "routing", "params per layer"]).size().rename("layers")
    return out.reset_index()


def scheme_table(model: str, scheme: str) -> pd.DataFrame:
    """Per category: the dtype(s) the scheme stores and the bytes, main model and MTP."""
    from pdcalc.quant import dtype_table

    df = dtype_table(model, get_scheme(scheme))
    df["GB"] = df["bytes"] / 1e9
    return df.drop(columns=["bytes"])


def placement_table(n_experts: int, ep: int, redundant: int = 0) -> pd.DataFrame:
    """Experts held by each card of an EP group (first ~ last, count)."""
    from pdcalc.parallel import place_experts

    p = place_experts(n_experts, ep, redundant)
    return pd.DataFrame({"card": range(ep), "experts": p.ranges(), "count": p.experts_per_card}).set_index("card")


def card_weights_table(columns: dict) -> pd.DataFrame:
    """Per-category weight GB per card; ``columns`` maps a label to a :class:`~pdcalc.memory.CardWeights`."""
    df = pd.DataFrame({k: pd.Series(w.by_category) / 1e9 for k, w in columns.items()}).fillna(0.0)
    df = df.reindex([c for c in CATEGORIES if c in df.index])
    df.loc["total"] = df.sum()
    df.index.name = "category (GB per card)"
    return df


def cluster_map(deployment: dict, model: str, scheme: str, *, mtp: bool = True) -> pd.DataFrame:
    """Every card of a PD deployment: server, role, EP rank, experts held, weight GiB."""
    from pdcalc.memory import card_weights
    from pdcalc.parallel import place_experts

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
                held = placement.cards[rank]
                rows.append({"card": card, "server": card // per_server, "role": f"{role}{inst}", "ep_rank": rank,
                             "experts": f"{held[0]} ~ {held[-1]}", "weights_gib": w.total_bytes / 2**30})
                card += 1
    return pd.DataFrame(rows).set_index("card")
