"""Every split of the cluster into P and D instances evaluated at once (numpy arrays): memory, KV
capacity, prefill load, TTFT and TPOT, with the slack of each constraint; the co-located alternative the
same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from pdcalc.core.checks import integer
from pdcalc.core.errors import LayoutError
from pdcalc.core.units import GiB
from pdcalc.perf.transfer import exposed_seconds, link
from pdcalc.plan.roles import (DecodeTable, Side, decode_table, fewest_p, layouts, main_layers, p_slack, seq_kv_bytes,
                               sides, tpot_at, transfer_s, usable_bytes)
from pdcalc.plan.workload import AGG_CONSTRAINTS, CONSTRAINTS, Setup, Workload


def _empty_candidates() -> dict[str, np.ndarray]:
    return {k: np.zeros(0, dtype=np.int64) for k in ("p", "n_p", "d", "n_d")}


def _candidates(setup: Setup, work: Workload, p_sides: list[Side], d_sides: list[Side],
                dec: DecodeTable | None = None, xfer: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Index arrays of the evaluated splits: each (P layout, D layout, n_d) within the cluster once, with
    the smallest ``n_p`` meeting load and TTFT (the largest that fits when none does); with
    ``use_all_cards``, the ``n_p`` that fills the cluster. Ordered by P layout, D layout, ``n_p``, ``n_d``.
    The P side of every pair of layouts is sized at once (:func:`_fewest_p` over one flat array)."""
    if not p_sides or not d_sides:
        return _empty_candidates()
    dec = dec if dec is not None else decode_table(setup, work, d_sides)
    xfer = xfer if xfer is not None else transfer_s(setup, work, p_sides)
    C = setup.cards
    p_size = np.array([p.size for p in p_sides], dtype=np.int64)
    d_size = np.array([d.size for d in d_sides], dtype=np.int64)
    counts = np.maximum((C - p_size[:, None]) // d_size[None, :], 0)          # n_d = 1..count per pair
    total = int(counts.sum())
    if not total:
        return _empty_candidates()
    flat = counts.ravel()
    pair = np.repeat(np.arange(flat.size), flat)
    start = np.repeat(np.cumsum(flat) - flat, flat)
    pi, di = pair // len(d_sides), pair % len(d_sides)
    n_d = np.arange(total, dtype=np.int64) - start + 1
    left = C - n_d * d_size[di]
    n_max = left // p_size[pi]
    if setup.use_all_cards:
        keep = left % p_size[pi] == 0
        pi, di, n_d, n_p = pi[keep], di[keep], n_d[keep], n_max[keep]
    else:
        pps = np.array([p.prompts_per_s for p in p_sides], dtype=float)
        pf = np.array([p.prefill_s for p in p_sides], dtype=float)
        n_p = fewest_p(setup, work, pps[pi], pf[pi], np.asarray(xfer, dtype=float)[pi], dec.rate[dec.at(di, n_d)],
                        n_max)
    c = {"p": pi.astype(np.int64), "n_p": n_p.astype(np.int64), "d": di.astype(np.int64), "n_d": n_d}
    order = np.lexsort((c["n_d"], c["n_p"], c["d"], c["p"]))
    return {k: v[order] for k, v in c.items()}


def count_splits(setup: Setup, p_sides: list[Side], d_sides: list[Side]) -> int:
    """Size of the whole split space: every (P layout, ``n_p``, D layout, ``n_d``) with ``n_p, n_d >= 1``
    within the cluster (exactly filling it with ``use_all_cards``), counted arithmetically."""
    C, total = setup.cards, 0
    for p in p_sides:
        for d in d_sides:
            n_p = np.arange(1, (C - d.size) // p.size + 1, dtype=np.int64)
            left = C - n_p * p.size
            total += int(np.count_nonzero(left % d.size == 0) if setup.use_all_cards else (left // d.size).sum())
    return total


def split_arrays(setup: Setup, work: Workload, p_sides: list[Side], d_sides: list[Side], dec: DecodeTable,
                  xfer_p: np.ndarray, c: dict) -> tuple[dict, dict]:
    """The columns of :func:`evaluate` as arrays, and the slack of each constraint, for the candidates ``c``."""
    n = len(c["p"])
    P = {k: np.array([getattr(s, k) for s in p_sides], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "prefill_s", "prompts_per_s")}
    D = {k: np.array([getattr(s, k) for s in d_sides], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "seqs_per_rank")}
    p, d = np.asarray(c["p"], dtype=np.int64), np.asarray(c["d"], dtype=np.int64)
    n_p, n_d = np.asarray(c["n_p"], dtype=float), np.asarray(c["n_d"], dtype=float)
    if not p_sides or not d_sides:        # no layout to index: every array is empty
        P = {k: np.zeros(1) for k in P}
        D = {k: np.ones(1) for k in D}
    d_dp = D["size"][d] // D["tp"][d]
    cap_seqs = n_d * d_dp * D["seqs_per_rank"][d]
    at = dec.at(d, c["n_d"]) if n else np.zeros(0, dtype=np.int64)
    conc, tpot, out_tok_s, rate = dec.conc[at], dec.tpot[at], dec.out_tok_s[at], dec.rate[at]
    xfer = xfer_p[p] if n else np.zeros(0)
    load, ttft, s_load, s_ttft = p_slack(setup, work, n_p, P["prompts_per_s"][p], P["prefill_s"][p], xfer, rate)
    cards_used = n_p * P["size"][p] + n_d * D["size"][d]
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = {
            "P memory": P["room_bytes"][p] / usable_bytes(setup),
            "D memory": D["room_bytes"][d] / usable_bytes(setup),
            "KV capacity": 1 - conc / np.maximum(cap_seqs, 1e-9),
            "prefill load": s_load,
            "TTFT": s_ttft,
            "TPOT": 1 - tpot / work.tpot_s if work.tpot_s else np.full(n, np.inf),
        }
    cols = {
        "p_instances": np.asarray(c["n_p"], dtype=np.int64), "p_size": P["size"][p].astype(np.int64),
        "p_tp": P["tp"][p].astype(np.int64), "d_instances": np.asarray(c["n_d"], dtype=np.int64),
        "d_size": D["size"][d].astype(np.int64), "d_tp": D["tp"][d].astype(np.int64),
        "cards": cards_used.astype(np.int64),
        "p_weights_gib": P["weights_bytes"][p] / GiB, "d_weights_gib": D["weights_bytes"][d] / GiB,
        "d_kv_room_gib": D["room_bytes"][d] / GiB, "kv_capacity_seqs": cap_seqs, "concurrency": conc,
        "prefill_s": P["prefill_s"][p], "prefill_load": load, "transfer_s": xfer,
        "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": out_tok_s,
        "tokens_per_s_per_card": out_tok_s / cards_used,
    }
    return cols, slack


def _verdicts(slack: dict, order: tuple[str, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Feasible (every slack >= 0) and the binding constraint: the first that fails in ``order``, else the
    one with the least slack."""
    if not n:
        return np.zeros(0, dtype=bool), np.array([], dtype=object)
    slack_m = np.vstack([np.nan_to_num(np.asarray(slack[k], dtype=float), nan=-np.inf) for k in order])
    feasible = np.all(slack_m >= 0, axis=0)
    failing = slack_m < 0
    first_fail = np.where(failing.any(axis=0), np.argmax(failing, axis=0), np.argmin(slack_m, axis=0))
    return feasible, np.asarray(order, dtype=object)[first_fail]


def meets_targets(slack: dict, order: tuple[str, ...], n: int) -> np.ndarray:
    """Feasible: every slack >= 0 (NaN fails), as :func:`_verdicts` without the binding constraint."""
    out = np.ones(n, dtype=bool)
    for k in order:
        out &= np.asarray(slack[k], dtype=float) >= 0
    return out


def binding_at(slack: dict, order: tuple[str, ...], i: int) -> str:
    """The binding constraint of option ``i`` (:func:`_verdicts` for one option)."""
    v = {k: float(np.asarray(slack[k], dtype=float)[i]) for k in order}
    v = {k: (-math.inf if math.isnan(x) else x) for k, x in v.items()}
    return next((k for k in order if v[k] < 0), min(order, key=lambda k: v[k]))


def evaluate(setup: Setup, work: Workload, p_sides=None, d_sides=None, *, candidates=None) -> pd.DataFrame:
    """The planner's candidates (module docstring), evaluated with numpy arrays; one row per candidate.

    ``candidates``: index arrays ``p, n_p, d, n_d`` (positions in ``p_sides`` and ``d_sides``) of other
    splits to evaluate instead, e.g. the whole split space."""
    if p_sides is None:
        p_sides, d_sides = sides(setup, work)
    dec = decode_table(setup, work, d_sides)
    xfer_p = transfer_s(setup, work, p_sides)
    c = candidates if candidates is not None else _candidates(setup, work, p_sides, d_sides, dec, xfer_p)
    cols, slack = split_arrays(setup, work, p_sides, d_sides, dec, xfer_p, c)
    feasible, binding = _verdicts(slack, CONSTRAINTS, len(c["p"]))
    df = pd.DataFrame({**cols, "feasible": feasible, "binding": binding})
    for k in CONSTRAINTS:
        df[f"slack: {k}"] = slack[k]
    return df


# ------------------------------------------------------------------------------------------ aggregated
@dataclass(frozen=True)
class _Agg:
    """The co-located side at every ``n`` of every layout, concatenated: layout ``j``'s ``n`` is at
    ``offset[j] + n - 1``. ``tdec`` the decode step alone, ``tau`` the mean step with its prompt chunks
    (the TPOT), ``share`` the part of each step spent on prompts."""

    offset: np.ndarray
    conc: np.ndarray
    tdec: np.ndarray
    tau: np.ndarray
    rate: np.ndarray
    share: np.ndarray
    saturated: np.ndarray     # given a rate: the prompts alone would fill every step (u >= 1)

    def at(self, a, n) -> np.ndarray:
        return self.offset[a] + np.asarray(n, dtype=np.int64) - 1


def agg_table(setup: Setup, work: Workload, a_sides: list[Side]) -> _Agg:
    """Sequences in flight, decode step, mean step, request rate and prefill share at each ``n = 1 ..
    cards // size`` of each co-located layout (module docstring)."""
    counts = [setup.cards // a.size for a in a_sides]
    offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if counts else np.zeros(0, np.int64)
    L = float(work.output_tokens)
    parts = {k: [np.zeros(0)] for k in ("conc", "tdec", "tau", "sat")}
    for side, k in zip(a_sides, counts):
        n = np.arange(1, k + 1, dtype=float)
        ranks = n * side.dp
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if work.concurrency is not None:
                c = np.full(k, float(work.concurrency))
                tdec = tpot_at(side, c / n)
                tau = tdec + c / ranks / L * side.prefill_s
                ok = np.ones(k, dtype=bool)
            else:
                u = work.rate_per_s * side.prefill_s / ranks
                ok = u < 1
                keep = np.where(ok, 1 - u, 1.0)
                c = work.rate_per_s * L * tpot_at(side, np.ones(k)) / keep
                for _ in range(60):
                    c = work.rate_per_s * L * tpot_at(side, np.maximum(c / n, 1.0)) / keep
                tdec = tpot_at(side, np.maximum(c / n, 1.0))
                tau = np.where(ok, tdec / keep, np.inf)
                c = np.where(ok, c, np.inf)
        parts["conc"].append(c)
        parts["tdec"].append(tdec)
        parts["tau"].append(tau)
        parts["sat"].append(~ok)
    conc, tdec, tau, sat = (np.concatenate(parts[k]) for k in ("conc", "tdec", "tau", "sat"))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(np.isfinite(tau) & np.isfinite(conc), conc / tau, 0.0)
    if work.concurrency is not None:
        rate = out / L
    else:
        rate = np.full(out.size, work.rate_per_s)
    ranks = np.concatenate([np.arange(1, k + 1, dtype=float) * a.dp for a, k in zip(a_sides, counts)]) \
        if counts else np.zeros(0)
    pf = np.concatenate([np.full(k, a.prefill_s) for a, k in zip(a_sides, counts)]) if counts else np.zeros(0)
    return _Agg(offset, conc, tdec, tau, rate, rate * pf / np.maximum(ranks, 1), sat.astype(bool))


def agg_candidates(setup: Setup, a_sides: list[Side]) -> dict[str, np.ndarray]:
    """Index arrays of the co-located options: each layout at every ``n`` that fits the cluster (the ``n``
    that fills it, with ``use_all_cards``)."""
    ai, ni = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for j, a in enumerate(a_sides):
        n = np.arange(1, setup.cards // a.size + 1, dtype=np.int64)
        if setup.use_all_cards:
            n = n[n * a.size == setup.cards]
        ai.append(np.full(n.size, j, dtype=np.int64))
        ni.append(n)
    return {"a": np.concatenate(ai), "n": np.concatenate(ni)}


def agg_arrays(setup: Setup, work: Workload, a_sides: list[Side], tab: _Agg, c: dict) -> tuple[dict, dict]:
    """The columns of :func:`evaluate_aggregated` as arrays, and the slack of each constraint."""
    m = len(c["a"])
    A = {k: np.array([getattr(s, k) for s in a_sides] or [1.0], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "prefill_s", "seqs_per_rank")}
    a, n = np.asarray(c["a"], dtype=np.int64), np.asarray(c["n"], dtype=float)
    at = tab.at(a, c["n"]) if m else np.zeros(0, dtype=np.int64)
    conc, tdec, tau, share, saturated = tab.conc[at], tab.tdec[at], tab.tau[at], tab.share[at], tab.saturated[at]
    size, tpf = A["size"][a], A["prefill_s"][a]
    ranks = n * (size // A["tp"][a])
    L_in, L = float(work.prompt_tokens), float(work.output_tokens)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cbar = np.where(saturated, np.inf, conc / ranks * L_in / L)
        if work.tpot_s:
            room = work.tpot_s - tdec
            b = np.where(tpf > 0, L_in * room / tpf, np.where(room >= 0, np.inf, 0.0))
            b = np.clip(np.nan_to_num(b, nan=0.0), 0.0, L_in)
        else:
            b = np.full(m, L_in)
        rho = np.where(b > 0, cbar / b, np.inf)
        service = np.where(b > 0, L_in * tdec / b + tpf, np.inf)
        ttft = np.where(rho < 1, service / (1 - rho), np.inf) + setup.request_s
        out = np.where(np.isfinite(tau) & np.isfinite(conc), conc / tau, 0.0)
        cards = n * size
        cap = ranks * A["seqs_per_rank"][a]
        slack = {
            "memory": A["room_bytes"][a] / usable_bytes(setup),
            # a rate the prefill alone saturates has no steady sequences: it fails on TPOT and load instead
            "KV capacity": np.where(saturated, 1.0, 1 - conc / np.maximum(cap, 1e-9)),
            "TPOT": 1 - tau / work.tpot_s if work.tpot_s else np.full(m, np.inf),
            "prefill load": 1 - rho / setup.max_load,
            "TTFT": 1 - ttft / work.ttft_s if work.ttft_s else np.full(m, np.inf),
        }
    cols = {
        "instances": np.asarray(c["n"], dtype=np.int64), "size": size.astype(np.int64),
        "tp": A["tp"][a].astype(np.int64), "cards": cards.astype(np.int64),
        "weights_gib": A["weights_bytes"][a] / GiB, "kv_room_gib": A["room_bytes"][a] / GiB,
        "kv_capacity_seqs": cap, "concurrency": conc, "decode_s": tdec, "prefill_s": tpf,
        "prefill_share": share, "chunk_tokens": b, "mean_chunk_tokens": cbar, "prefill_load": rho,
        "ttft_s": ttft, "tpot_s": tau, "output_tokens_per_s": out, "tokens_per_s_per_card": out / cards,
    }
    return cols, slack


def evaluate_aggregated(setup: Setup, work: Workload, a_sides=None, *, candidates=None) -> pd.DataFrame:
    """The co-located options (module docstring), evaluated with numpy arrays; one row per layout and
    number of instances. ``candidates``: index arrays ``a, n`` (positions in ``a_sides``, instances)."""
    if a_sides is None:
        a_sides = layouts(replace(setup, aggregated=True), work).a
    tab = agg_table(setup, work, a_sides)
    c = candidates if candidates is not None else agg_candidates(setup, a_sides)
    cols, slack = agg_arrays(setup, work, a_sides, tab, c)
    feasible, binding = _verdicts(slack, AGG_CONSTRAINTS, len(c["a"]))
    df = pd.DataFrame({**cols, "feasible": feasible, "binding": binding})
    for k in AGG_CONSTRAINTS:
        df[f"slack: {k}"] = slack[k]
    return df


def evaluate_instances(setup: Setup, work: Workload, *, instances: int, size: int, tp: int = 1,
                       a_sides=None) -> pd.Series:
    """One co-located option, evaluated as :func:`evaluate_aggregated` does (a row of the same columns)."""
    if a_sides is None:
        a_sides = layouts(replace(setup, aggregated=True), work).a
    vals = {name: integer(name, v, low=1) for name, v in (("instances", instances), ("size", size), ("tp", tp))}
    where = [i for i, s in enumerate(a_sides) if (s.size, s.tp) == (vals["size"], vals["tp"])]
    if not where:
        raise LayoutError(f"no co-located layout of {vals['size']} cards with TP {vals['tp']} among those planned "
                          f"({', '.join(f'{s.size}/TP {s.tp}' for s in a_sides) or 'none'})")
    if vals["instances"] * vals["size"] > setup.cards:
        raise LayoutError(f"{vals['instances']:,} instances of {vals['size']} cards need "
                          f"{vals['instances'] * vals['size']:,} cards, the cluster has {setup.cards:,}")
    c = {"a": np.array([where[0]]), "n": np.array([vals["instances"]])}
    return evaluate_aggregated(setup, work, a_sides, candidates=c).iloc[0]


def evaluate_split(setup: Setup, work: Workload, *, p_instances: int, p_size: int, d_instances: int, d_size: int,
                   p_tp: int = 1, d_tp: int = 1, p_sides=None, d_sides=None) -> pd.Series:
    """One split, evaluated as :func:`evaluate` does (a row of the same columns), whether or not the
    planner keeps it among its candidates (e.g. a deployment with more P instances than it needs)."""
    if p_sides is None:
        p_sides, d_sides = sides(setup, work)
    vals = {name: integer(name, v, low=1) for name, v in (("p_instances", p_instances), ("p_size", p_size),
                                                           ("d_instances", d_instances), ("d_size", d_size),
                                                           ("p_tp", p_tp), ("d_tp", d_tp))}
    idx = []
    for role, found in (("p", p_sides), ("d", d_sides)):
        key = (vals[f"{role}_size"], vals[f"{role}_tp"])
        where = [i for i, s in enumerate(found) if (s.size, s.tp) == key]
        if not where:
            raise LayoutError(f"no {role.upper()} layout of {key[0]} cards with TP {key[1]} among those planned "
                              f"({', '.join(f'{s.size}/TP {s.tp}' for s in found) or 'none'})")
        idx.append(where[0])
    cards = vals["p_instances"] * vals["p_size"] + vals["d_instances"] * vals["d_size"]
    if cards > setup.cards:
        raise LayoutError(f"the split needs {cards:,} cards, the cluster has {setup.cards:,}")
    c = {"p": np.array([idx[0]]), "n_p": np.array([vals["p_instances"]]), "d": np.array([idx[1]]),
         "n_d": np.array([vals["d_instances"]])}
    return evaluate(setup, work, p_sides, d_sides, candidates=c).iloc[0]


def evaluate_loop(setup: Setup, work: Workload, p_sides=None, d_sides=None, *, candidates=None) -> pd.DataFrame:
    """The same evaluation as :func:`evaluate` (same candidates), one candidate at a time in plain Python."""
    if p_sides is None:
        p_sides, d_sides = sides(setup, work)
    c = candidates if candidates is not None else _candidates(setup, work, p_sides, d_sides)
    usable = usable_bytes(setup)
    lnk = link(setup.bandwidth_bytes_per_s, setup.transfer_fixed_s)
    xfer_bytes = float(seq_kv_bytes(setup, work.prompt_tokens))
    layers = main_layers(setup)
    rows = []
    for i in range(len(c["p"])):
        p, d = p_sides[int(c["p"][i])], d_sides[int(c["d"][i])]
        n_p, n_d = int(c["n_p"][i]), int(c["n_d"][i])
        cap = n_d * d.dp * d.seqs_per_rank

        def tp_at(x):
            return float(tpot_at(d, np.array([x]))[0])

        if work.concurrency is not None:
            conc = float(work.concurrency)
            tpot = tp_at(conc / n_d)
        else:
            s = work.rate_per_s * work.output_tokens * tp_at(1.0)
            for _ in range(60):
                s = work.rate_per_s * work.output_tokens * tp_at(max(s / n_d, 1.0))
            conc, tpot = s, tp_at(max(s / n_d, 1.0))
        out = conc / tpot if math.isfinite(tpot) and math.isfinite(conc) else 0.0
        rate = out / work.output_tokens if work.concurrency is not None else work.rate_per_s
        load = rate / (n_p * p.prompts_per_s)
        xfer = float(exposed_seconds(lnk, xfer_bytes, p.prefill_s, layers))
        ttft = (p.prefill_s / (1 - load) if load < 1 else math.inf) + xfer + setup.request_s
        cards = n_p * p.size + n_d * d.size
        slack = {"P memory": p.room_bytes / usable, "D memory": d.room_bytes / usable,
                 "KV capacity": 1 - conc / max(cap, 1e-9), "prefill load": 1 - load / setup.max_load,
                 "TTFT": 1 - ttft / work.ttft_s if work.ttft_s else math.inf,
                 "TPOT": 1 - tpot / work.tpot_s if work.tpot_s else math.inf}
        clean = {k: (v if not math.isnan(v) else -math.inf) for k, v in slack.items()}
        fails = [k for k in CONSTRAINTS if clean[k] < 0]
        worst = fails[0] if fails else min(CONSTRAINTS, key=lambda k: clean[k])
        rows.append({"p_instances": n_p, "p_size": p.size, "p_tp": p.tp, "d_instances": n_d, "d_size": d.size,
                     "d_tp": d.tp, "cards": cards, "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": out,
                     "tokens_per_s_per_card": out / cards,
                     "feasible": all(v >= 0 for v in slack.values()), "binding": worst})
    return pd.DataFrame(rows)
