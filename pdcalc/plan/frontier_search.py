"""The throughput-latency frontier: the best split at each TPOT level, searched in batches so that a
large cluster stays within memory.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from pdcalc.core.checks import integer
from pdcalc.plan.labels import option_label
from pdcalc.plan.roles import DecodeTable, Layouts, Side, decode_table, fewest_p, layouts, transfer_s, usable_bytes
from pdcalc.plan.splits import agg_arrays, agg_candidates, agg_table, binding_at, meets_targets, split_arrays
from pdcalc.plan.workload import (AGG_CONSTRAINTS, CONSTRAINTS, MAX_FRONTIER_POINTS, MODES, Setup, Targets, Workload,
                                  resolve_targets)

# ------------------------------------------------------------------------------------------ frontier
#: Columns of :func:`frontier`.
FRONTIER_COLUMNS = ("concurrency", "mode", "option", "cards", "tokens_per_s_per_card", "output_tokens_per_s",
                    "tpot_s", "ttft_s", "binding", "meets_targets", "pareto", "fastest_option",
                    "fastest_cards", "fastest_tokens_per_s_per_card", "fastest_tpot_s", "fastest_ttft_s")


def frontier_levels(setup: Setup, work: Workload, lay: Layouts, points: int | None = None) -> np.ndarray:
    """The concurrencies of the frontier: ``points`` (default :attr:`Setup.frontier_points`) spaced
    geometrically from 1 sequence to the most the cluster's memory holds (all cards but the smallest P
    instance as D instances, or all as co-located ones, whichever holds more), rounded to whole sequences,
    plus the workload's concurrency when it is within that range."""
    points = setup.frontier_points if points is None else integer("points", points, low=1, high=MAX_FRONTIER_POINTS)
    C = setup.cards
    held = [0]
    if lay.p:
        smallest = min(p.size for p in lay.p)
        held += [((C - smallest) // d.size) * d.dp * d.seqs_per_rank for d in lay.d]
    held += [(C // a.size) * a.dp * a.seqs_per_rank for a in lay.a]
    top = max(held)
    if top < 1 or points < 1:
        return np.array([1.0])
    lv = np.unique(np.geomspace(1, top, max(points, 1)).round())
    if work.concurrency is not None and work.concurrency <= top:
        lv = np.unique(np.append(lv, float(work.concurrency)))
    return lv


def _argbest(tpc: np.ndarray, ttft: np.ndarray, ok: np.ndarray) -> int | None:
    """Index of the most tokens/s per card among ``ok`` (then the shortest TTFT, then the first), as the
    planner ranks."""
    idx = np.flatnonzero(ok)
    if not idx.size:
        return None
    order = np.lexsort((np.nan_to_num(ttft[idx], nan=np.inf), -tpc[idx]))
    return int(idx[order[0]])


#: D entries the frontier's search takes first (each later batch four times the one before).
SEARCH_BATCH = 256


def _best_split(setup: Setup, work: Workload, p_sides: list[Side], d_sides: list[Side], dec: DecodeTable,
                xfer: np.ndarray, batch: int | None = None) -> dict | None:
    """The candidate (index arrays of one split) that :func:`plan` would rank first under ``work``, or
    ``None`` when none is feasible, found without evaluating every candidate: the D side alone bounds a
    split's output per card (its output over its D cards plus the smallest P instance that fits), so D
    entries are taken in order of that bound, paired with every P layout that fits, and the search stops
    once the best found beats every bound left. Ties are broken as the ranking breaks them (TTFT, then the
    candidates' order). ``batch``: the first batch of D entries (default :data:`SEARCH_BATCH`)."""
    if not p_sides or not d_sides:
        return None
    C = setup.cards
    usable = usable_bytes(setup)
    p_ok = np.flatnonzero(np.array([p.room_bytes / usable >= 0 for p in p_sides]))
    if not p_ok.size:
        return None
    p_size = np.array([p.size for p in p_sides], dtype=np.int64)
    counts = np.array([C // d.size for d in d_sides], dtype=np.int64)
    j = np.repeat(np.arange(len(d_sides)), counts)
    n_d = np.arange(j.size, dtype=np.int64) - dec.offset[j] + 1
    d_size = np.array([d.size for d in d_sides], dtype=np.int64)[j]
    d_room = np.array([d.room_bytes for d in d_sides], dtype=float)[j]
    cap = n_d * np.array([d.dp * d.seqs_per_rank for d in d_sides], dtype=float)[j]
    with np.errstate(divide="ignore", invalid="ignore"):
        ok_d = (d_room >= 0) & (dec.conc <= cap) & (dec.out_tok_s > 0) & (n_d * d_size + p_size[p_ok].min() <= C)
        if work.tpot_s:
            ok_d &= dec.tpot <= work.tpot_s
        bound = dec.out_tok_s / (n_d * d_size + p_size[p_ok].min())
    order = np.flatnonzero(ok_d)
    order = order[np.argsort(-bound[order], kind="stable")]
    best, best_key, pos, chunk = None, None, 0, batch or SEARCH_BATCH
    pps = np.array([p.prompts_per_s for p in p_sides], dtype=float)
    pf = np.array([p.prefill_s for p in p_sides], dtype=float)
    xf = np.asarray(xfer, dtype=float)
    while pos < order.size and (best_key is None or bound[order[pos]] >= -best_key[0]):
        e = order[pos:pos + chunk]
        pos, chunk = pos + chunk, chunk * 4
        pi = np.repeat(p_ok, e.size)
        ei = np.tile(e, p_ok.size)
        left = C - n_d[ei] * d_size[ei]
        n_max = left // p_size[pi]
        keep = (n_max >= 1) & ((left % p_size[pi] == 0) if setup.use_all_cards else True)
        pi, ei, left, n_max = pi[keep], ei[keep], left[keep], n_max[keep]
        if not pi.size:
            continue
        n_p = n_max if setup.use_all_cards else fewest_p(setup, work, pps[pi], pf[pi], xf[pi], dec.rate[ei], n_max)
        c = {"p": pi, "n_p": n_p.astype(np.int64), "d": j[ei], "n_d": n_d[ei]}
        cols, slack = split_arrays(setup, work, p_sides, d_sides, dec, xf, c)
        ok = np.flatnonzero(meets_targets(slack, CONSTRAINTS, pi.size))
        if not ok.size:
            continue
        tpc, ttft = cols["tokens_per_s_per_card"][ok], np.nan_to_num(cols["ttft_s"][ok], nan=np.inf)
        k = ok[np.lexsort((c["n_d"][ok], c["n_p"][ok], c["d"][ok], c["p"][ok], ttft, -tpc))[0]]
        key = (-float(cols["tokens_per_s_per_card"][k]), float(cols["ttft_s"][k]), int(c["p"][k]), int(c["d"][k]),
               int(c["n_p"][k]), int(c["n_d"][k]))
        if best_key is None or key < best_key:
            best_key, best = key, {name: v[k:k + 1] for name, v in c.items()}
    return best


def frontier(setup: Setup, work: Workload, *, targets: Targets | None = None, lay: Layouts | None = None,
             points: int | None = None) -> pd.DataFrame:
    """The throughput-latency frontier of both modes over concurrency (module docstring).

    One row per concurrency level of :func:`frontier_levels` and mode ("disaggregated", "aggregated"):
    ``option`` the best option at that concurrency that meets every target (as :func:`plan` would rank it
    there; a co-located one with the chunk the TPOT target leaves), or where none does, the best that meets
    every constraint but the TPOT target (a co-located one then takes whole prompts as its chunk), so that
    the curve runs past the target; with its ``cards``, ``tokens_per_s_per_card``, ``output_tokens_per_s``,
    ``tpot_s``, ``ttft_s``, ``binding`` (under every target) and ``meets_targets``; ``pareto``: on the
    frontier of its mode (no other level gives more tokens/s per card at a TPOT as short); ``fastest_*``:
    the best option at that concurrency whatever its TPOT (every constraint but the TPOT target), the most
    the mode can give there. Where no option qualifies, the option is "none" and its figures NaN. The step
    tables of ``lay`` (:func:`layouts`) are computed once and reused at every level."""
    tg = resolve_targets(work, targets)
    work = replace(work, ttft_s=tg.ttft_s, tpot_s=tg.tpot_s)
    lay = lay if lay is not None else layouts(setup, work)
    T = work.tpot_s
    xfer = transfer_s(setup, work, lay.p) if lay.p else np.zeros(0)
    ca = agg_candidates(setup, lay.a)
    rows = []
    for S in frontier_levels(setup, work, lay, points):
        w = replace(work, concurrency=int(S), rate_per_s=None)
        w0 = replace(w, tpot_s=None)
        # per mode: (columns of the curve's option, of the best within the targets, whether the curve's
        # option meets every target, its binding constraint under every target), each option a one-row array
        picks = {}
        if lay.p and lay.d:
            dec = decode_table(setup, w0, lay.d)
            one = []
            for ww in (w0, w):
                c = _best_split(setup, ww, lay.p, lay.d, dec, xfer)
                one.append(None if c is None else split_arrays(setup, w0, lay.p, lay.d, dec, xfer, c))
            point = one[1] if one[1] is not None else one[0]
            meets = binding = None
            if point is not None:
                cols, slack = point
                slack = {**slack, "TPOT": 1 - cols["tpot_s"] / T if T else slack["TPOT"]}
                meets, binding = bool(meets_targets(slack, CONSTRAINTS, 1)[0]), binding_at(slack, CONSTRAINTS, 0)
            picks["disaggregated"] = ((point[0], 0) if point else None, (one[0][0], 0) if one[0] else None,
                                      meets, binding)
        if lay.a:
            tab = agg_table(setup, w, lay.a)
            cols0, slack0 = agg_arrays(setup, w0, lay.a, tab, ca)
            cols_t, slack_t = agg_arrays(setup, w, lay.a, tab, ca)
            ok_t = meets_targets(slack_t, AGG_CONSTRAINTS, len(ca["a"]))
            ok_0 = meets_targets(slack0, AGG_CONSTRAINTS, len(ca["a"]))
            i0 = _argbest(cols0["tokens_per_s_per_card"], cols0["ttft_s"], ok_0)
            it = _argbest(cols_t["tokens_per_s_per_card"], cols_t["ttft_s"], ok_t)
            if it is not None:
                point, meets, binding = (cols_t, it), True, binding_at(slack_t, AGG_CONSTRAINTS, it)
            elif i0 is not None:      # past the target: TPOT on the mean step, judged under every target
                point, meets, binding = (cols0, i0), False, binding_at(slack_t, AGG_CONSTRAINTS, i0)
            else:
                point = meets = binding = None
            picks["aggregated"] = (point, (cols0, i0) if i0 is not None else None, meets, binding)
        for mode in MODES:
            if mode not in picks:
                continue
            curve, fastest, meets, binding = picks[mode]
            row = {"concurrency": int(S), "mode": mode}
            for prefix, pick in (("", curve), ("fastest_", fastest)):
                if pick is None:
                    row.update({f"{prefix}option": "none", f"{prefix}cards": np.nan,
                                f"{prefix}tokens_per_s_per_card": np.nan, f"{prefix}tpot_s": np.nan,
                                f"{prefix}ttft_s": np.nan})
                    continue
                cols, i = pick
                one = {k: v[i] for k, v in cols.items()}
                row.update({f"{prefix}option": option_label(one, mode), f"{prefix}cards": int(one["cards"]),
                            f"{prefix}tokens_per_s_per_card": float(one["tokens_per_s_per_card"]),
                            f"{prefix}tpot_s": float(one["tpot_s"]), f"{prefix}ttft_s": float(one["ttft_s"])})
                if not prefix:
                    row["output_tokens_per_s"] = float(one["output_tokens_per_s"])
            if curve is None:
                row.update(output_tokens_per_s=np.nan, binding="none", meets_targets=False)
            else:
                row.update(binding=binding, meets_targets=meets)
            rows.append(row)
    df = pd.DataFrame(rows, columns=[c for c in FRONTIER_COLUMNS if c != "pareto"])
    df.insert(FRONTIER_COLUMNS.index("pareto"), "pareto", _pareto(df))
    return df


def _pareto(df: pd.DataFrame) -> np.ndarray:
    """Whether each row is on its mode's frontier: no row of the same mode has more tokens/s per card at a
    TPOT as short or shorter."""
    out = np.zeros(len(df), dtype=bool)
    if df.empty:
        return out
    for mode in MODES:
        idx = np.flatnonzero((df["mode"] == mode).to_numpy() & np.isfinite(df["tpot_s"].to_numpy(dtype=float))
                             & np.isfinite(df["tokens_per_s_per_card"].to_numpy(dtype=float)))
        if not idx.size:
            continue
        tpot = df["tpot_s"].to_numpy(dtype=float)[idx]
        tpc = df["tokens_per_s_per_card"].to_numpy(dtype=float)[idx]
        order = np.lexsort((-tpc, tpot))          # shortest TPOT first, the most tokens first among equals
        best = -np.inf
        for j in order:
            if tpc[j] > best:
                out[idx[j]] = True
                best = tpc[j]
    return out


def frontier_at_target(front: pd.DataFrame | None) -> dict:
    """Per mode, the most output tokens/s per card that the frontier ``front`` (:func:`frontier`) reaches
    while meeting every target: ``{mode: {"tokens_per_s_per_card", "concurrency", "option", "cards",
    "tpot_s", "ttft_s"} or None}``."""
    out = {m: None for m in MODES}
    if front is None or front.empty:
        return out
    for mode in MODES:
        f = front[(front["mode"] == mode) & front["meets_targets"].astype(bool)]
        if f.empty:
            continue
        r = f.sort_values(["tokens_per_s_per_card", "concurrency"], ascending=[False, True], kind="stable").iloc[0]
        out[mode] = {"tokens_per_s_per_card": float(r["tokens_per_s_per_card"]),
                     "concurrency": int(r["concurrency"]), "option": str(r["option"]),
                     "cards": int(r["cards"]), "tpot_s": float(r["tpot_s"]), "ttft_s": float(r["ttft_s"])}
    return out
