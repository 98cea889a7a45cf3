"""Plan a deployment of a cluster: every way to cut it into prefill (P) and decode (D) instances, the
co-located (aggregated) alternative on the same cards, the best of each under latency targets, which one
wins and why, and the throughput-latency frontier of both.

**Disaggregated.** A candidate is ``n_p`` prefill instances of ``s_p`` cards (TP degree ``t_p`` from
``p_tp_options``, EP group = the instance, ``s_p / t_p`` DP ranks) and ``n_d`` decode instances of ``s_d``
cards (TP from ``d_tp_options``), with ``n_p s_p + n_d s_d`` at most the cluster. For each candidate:

- **memory**: per card, weights (:func:`pdcalc.layout.memory.card_weights`, MTP included when loaded; with
  ``measured_weights``, an engine's logged figure where one exists for the exact layout, :func:`weights_log`),
  activations and framework overhead against ``utilization`` x the card's memory; what is left on a D card
  holds KV cache, sequences of ``prompt + output`` tokens (:func:`pdcalc.model.kv_cache.kv_bytes`, or a constant
  per-token figure), the cache of a DP rank kept whole on each of its TP cards;
- **prefill**: one prompt per DP rank per step (:func:`pdcalc.perf.step.step`), so an instance serves
  ``dp / t_pf`` prompts per second; at load ``rho`` = request rate / P capacity the time to first token is

  .. math:: \\text{TTFT} = \\frac{t_\\text{pf}}{1 - \\rho} + t_\\text{x}

  (queueing of an M/M/1 server, an assumption) with ``t_x`` the KV transfer exposed after a layer-wise
  send (:func:`pdcalc.perf.transfer.exposed_seconds`);
- **decode**: the sequences in flight ``S`` share the D instances; the time per output token is the decode
  step at ``S / n_d`` sequences per instance. Given a request rate ``R``, Little's law closes the loop:

  .. math:: S = R \\, L_\\text{out} \\, \\text{TPOT}(S / n_d)

  solved by fixed-point iteration; given a concurrency, ``S`` is that concurrency and ``R = S /
  (L_\\text{out} \\, \\text{TPOT})``.

Feasible candidates meet memory, KV capacity, prefill load ``rho <= max_load`` and the TTFT and TPOT
targets; they are ranked by output tokens per second per card, then by TTFT. The *binding* constraint of a
candidate is the first one it fails, in the order of :data:`CONSTRAINTS` (memory before capacity before
latency); for a feasible candidate, the one with the least relative slack.

**Aggregated (co-located).** ``n`` instances of ``s`` cards (TP degree from ``p_tp_options`` or
``d_tp_options``, EP group = the instance, ``dp = s / t`` ranks) serve prefill and decode on the same cards,
as vLLM's chunked prefill does: every step of a DP rank carries one decode token for each of its ``S_r = S /
(n \\, dp)`` running sequences plus a chunk of prompt tokens. Both parts come from the same step model and
the same per-layout tables as the disaggregated side: ``t_dec(S / n)`` the decode step of the D table,
``t_pf`` the prefill step of one prompt of ``L_in`` tokens per rank of the P table. Assumptions:

- a chunk of ``c`` prompt tokens costs its share of a whole prompt's prefill, ``(c / L_in) \\, t_pf``
  (linear in tokens, attention averaged over the prompt), *added* to the decode step: the decode tokens'
  weight reads are not hidden under the chunk's compute, which errs against co-location by at most the
  smaller of the two parts;
- in steady state each step admits as many prompt tokens as finish (Little's law): each step a share
  ``1 / L_out`` of the running sequences completes, so a rank prefills on average

  .. math:: \\bar c = \\frac{S_r \\, L_\\text{in}}{L_\\text{out}} = \\frac{R \\, L_\\text{in} \\, \\tau}{n \\, dp}

  prompt tokens per step, and the mean step, which is the TPOT, is

  .. math:: \\tau = t_\\text{dec}(S / n) + \\frac{S_r}{L_\\text{out}} \\, t_\\text{pf}
     = \\frac{t_\\text{dec}(S / n)}{1 - u}, \\qquad u = \\frac{R \\, t_\\text{pf}}{n \\, dp}

  ``u`` being the share of each step spent on prompts (given a rate, ``S = R L_out tau`` is solved by
  fixed-point iteration as on the disaggregated side; ``u >= 1`` cannot be served);
- a step may carry at most a chunk budget ``b`` of prompt tokens per rank (vLLM's
  ``--max-num-batched-tokens`` less the decode tokens): the largest chunk with which a step still meets the
  TPOT target, at most one whole prompt,

  .. math:: b = \\min\\left(L_\\text{in},\\; L_\\text{in} \\, \\frac{\\text{TPOT}_\\text{target} -
     t_\\text{dec}}{t_\\text{pf}}\\right)

  (``b = L_in`` without a TPOT target), so that no step, even one carrying a full chunk, exceeds the target;
- prompts are prefilled one at a time per rank, in ``L_in / b`` steps of ``t_dec + (b / L_in) t_pf``; at
  load ``rho = c_bar / b`` the M/M/1 queueing of the disaggregated side gives

  .. math:: \\text{TTFT} = \\frac{L_\\text{in} \\, t_\\text{dec} / b + t_\\text{pf}}{1 - \\rho}

  (no KV transfer);
- memory per card: the weights of the layout, the larger of the P and D overheads (the card runs both), and
  the KV cache of its rank's ``S_r`` sequences of ``L_in + L_out`` tokens plus the prompt being prefilled.

Its constraints, in the order that names the binding one (:data:`AGG_CONSTRAINTS`): memory, KV capacity,
TPOT (the mean step), prefill load ``rho <= max_load`` (the prompts arriving against the chunk room the TPOT
target leaves), TTFT. For every layout every ``n`` that fits the cluster is evaluated (``O(cards)`` per
layout). With the prefill cost set to zero the aggregated option is the D side alone: same TPOT and output
at ``n = n_d`` (a test checks it).

**Which wins.** :func:`plan` returns the best disaggregated split and the best aggregated layout under the
same targets: the one with more output tokens per second per card wins (:attr:`Plan.winner`; on a tie, as
when both serve a request rate on as many cards, the shorter TTFT, then TPOT), and
:attr:`Plan.why` says by how much and what holds the other back; when only one meets the targets it wins,
when neither does the result says why for each. The targets are always stated (:attr:`Plan.targets`):
without a TPOT or TTFT target from the caller, the published service level of
:func:`default_targets` (also :func:`pdcalc.plan.workload.default_targets`) with its source (none for TTFT,
since none is published).

**The frontier** (:func:`frontier`, :attr:`Plan.frontier`): at each concurrency of a geometric grid from 1
sequence to what the cluster's memory holds (plus the workload's own concurrency), the best disaggregated
split and the best aggregated layout that meet every target, or past the last concurrency where one does,
the best that meets every constraint but the TPOT target (so that the curve runs past the target), with
their output tokens/s per card, TPOT and TTFT, and beside them the most each mode gives there whatever its
TPOT. The per-layout step tables are computed once and reused at every level; the disaggregated split of a
level is found by a pruned search (:func:`_best_split`) that returns what ranking every split would.

**Which splits are evaluated.** For a fixed P layout, D layout and ``n_d``, everything but the cards used
and the P side's load and TTFT is independent of ``n_p``: the sequences, the TPOT, the output tokens/s and
(given a concurrency) the request rate depend on the D side only. Load and TTFT fall as ``n_p`` grows, so
feasibility in ``n_p`` is a threshold, while tokens/s per card falls as ``n_p`` grows. Among the splits
sharing the D side, the smallest ``n_p`` that meets the load limit and the TTFT target therefore ranks
first and every larger one is dominated. The planner evaluates, for each pair of layouts, each ``n_d``
once, with

.. math:: n_p = \\left\\lceil \\frac{R}{\\mu_p \\, \\min\\left(\\rho_\\max,\\; 1 - t_\\text{pf} /
   (\\text{TTFT}_\\text{target} - t_\\text{x})\\right)} \\right\\rceil

(``mu_p`` the prompts per second of one P instance; the second term only with a TTFT target), corrected by
one step either way where rounding puts it across the threshold (checked with the same slack formulas as
the evaluation), and clamped to the P instances the cluster has left: when none meets the load and TTFT,
the largest that fits, which is the closest. With ``use_all_cards``, ``n_p`` is fixed by ``n_d`` (and an
aggregated layout must fill the cluster). This is ``O(cards)`` splits per pair of layouts, against
``O(cards**2)`` for the whole split space, whose size :func:`count_splits` gives arithmetically
(:attr:`Plan.splits`). The best plan, the feasible/infeasible verdict and the closest candidate when nothing
fits are those of the whole space; the ranked table lists one row per D side instead of every dominated P
side.

The evaluation is vectorized: the per-layout quantities (weights, prefill time, the decode step time over
a grid of batch sizes) are computed once per distinct layout, the decode side once per ``(D layout,
n_d)``, then every candidate is evaluated with numpy array arithmetic. :func:`evaluate_loop` does the same
one candidate at a time in plain Python (for the benchmark and as a cross-check).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import pandas as pd

from pdcalc.core.units import GiB
from pdcalc.model.inventory import get_inventory
from pdcalc.plan.frontier_search import frontier, frontier_at_target
from pdcalc.plan.labels import AGG_KEYS, SPLIT_KEYS, aggregated_label, option_label, split_label
from pdcalc.plan.roles import Side, instance_sizes, layout_tp_problem, layouts, seq_kv_bytes, tried_sizes, usable_bytes
from pdcalc.plan.splits import count_splits, evaluate, evaluate_aggregated, evaluate_loop
from pdcalc.plan.views import PlanViews, closest
from pdcalc.plan.workload import (AGG_CONSTRAINTS, AGG_STAGES, CONSTRAINTS, STAGES, Setup, Targets, Workload,
                                  latency_text, resolve_targets)


@dataclass(frozen=True)
class Plan(PlanViews):
    """The result of :func:`plan`.

    Disaggregated: ``candidates``: the evaluated splits, one row per (P layout, D layout, ``n_d``) with the
    smallest P side that meets load and TTFT (module docstring); ``ranked``: the feasible ones, best first;
    ``reason``: "" when something fits, else one line starting "nothing fits:" with the closest split and
    its shortfall; ``splits``: how many (P layout, ``n_p``, D layout, ``n_d``) splits the cluster admits in
    all (:func:`count_splits`); ``evaluated``: how many were evaluated (the rows of ``candidates``).

    Aggregated (co-located): ``aggregated``: every layout at every number of instances
    (:func:`evaluate_aggregated`); ``aggregated_ranked``: the feasible ones, best first;
    ``aggregated_reason``: "" or one "nothing fits:" line with the closest layout and its shortfall.

    ``workload``: the workload as evaluated, its targets those of ``targets`` (value and source of each,
    :func:`resolve_targets`); ``winner``: "disaggregated", "aggregated" or "neither"; ``why``: one sentence
    saying why; ``frontier``: :func:`frontier` (``None`` when :attr:`Setup.frontier_points` is 0);
    ``seconds``: wall time of the whole plan, frontier included."""

    setup: Setup
    workload: Workload
    candidates: pd.DataFrame
    ranked: pd.DataFrame
    reason: str             # "" when something fits
    seconds: float          # wall time of the evaluation
    splits: int = 0         # size of the whole split space
    evaluated: int = 0      # splits evaluated (len(candidates))
    targets: Targets | None = None
    aggregated: pd.DataFrame | None = None
    aggregated_ranked: pd.DataFrame | None = None
    aggregated_reason: str = ""
    winner: str = ""
    why: str = ""
    frontier: pd.DataFrame | None = None

    @property
    def best(self):
        """The best disaggregated split (a row of ``candidates``), ``None`` when none meets the targets."""
        return None if self.ranked.empty else self.ranked.iloc[0]

    @property
    def best_aggregated(self):
        """The best co-located option (a row of ``aggregated``), ``None`` when none meets the targets."""
        r = self.aggregated_ranked
        return None if r is None or r.empty else r.iloc[0]

    @property
    def aggregated_evaluated(self) -> int:
        return 0 if self.aggregated is None else len(self.aggregated)

    def frontier_at_target(self) -> dict:
        """Per mode, the most output tokens/s per card on the frontier that meets every target (TPOT
        included), with its concurrency and option: ``{mode: {"tokens_per_s_per_card", "concurrency",
        "option", "tpot_s", "ttft_s"}}``; ``None`` for a mode with no such point (or no frontier)."""
        return frontier_at_target(self.frontier)


def _no_candidates(setup: Setup, p_sides: list[Side], d_sides: list[Side] | None = None) -> str:
    """Why there is no split at all (one line)."""
    tried = tried_sizes(setup)
    n_exp = get_inventory(setup.model).n_routed_experts
    sizes = instance_sizes(setup, n_exp)
    if not sizes:
        return (f"nothing fits: no instance size tried ({', '.join(map(str, tried))}) can be used: an instance "
                f"has 1..{min(setup.cards - 1, n_exp):,} cards (at most one per routed expert of the "
                f"{n_exp}, and at least one card left to the other side of the {setup.cards:,})")
    d_sides = p_sides if d_sides is None else d_sides
    for role, found, tps in (("P", p_sides, setup.p_tps), ("D", d_sides, setup.d_tps)):
        if found:
            continue
        why = []
        for t in tps:
            problem = layout_tp_problem(setup, t)
            why.append(f"TP {t}: {problem}" if problem else
                       f"TP {t} divides none of the instance sizes {', '.join(map(str, sizes))}")
        side = "" if setup.p_tps == setup.d_tps else f" on the {role} side"
        return f"nothing fits: no TP degree tried{side} suits the model and an instance size; " + "; ".join(why)
    need = min(s.size for s in p_sides) + min(s.size for s in d_sides)
    if setup.use_all_cards:
        return (f"nothing fits: no split of instance sizes {', '.join(map(str, sizes))} uses exactly "
                f"{setup.cards:,} cards")
    return f"nothing fits: one P and one D instance need at least {need:,} cards, the cluster has {setup.cards:,}"


def _failing(row, order: tuple[str, ...], stages: dict) -> list[str]:
    """The constraints of the first failing stage that ``row`` fails."""
    slack = {k: float(row[f"slack: {k}"]) for k in order}
    slack = {k: (-math.inf if math.isnan(v) else v) for k, v in slack.items()}
    first = next((k for k in order if slack[k] < 0), None)
    if first is None:
        return []
    return [k for k in order if stages[k] == stages[first] and slack[k] < 0]


def _kv_short(setup: Setup, work: Workload, row, *, room: float, card: str, one: str, holder: str) -> str:
    """How the KV cache falls short, for :func:`_nothing_fits` and :func:`_agg_nothing_fits`: a card that holds
    not even ``one`` sequence of the workload's context (``room`` GiB), or the sequences ``holder`` (subject
    and verb) keeps."""
    cap, conc = float(row["kv_capacity_seqs"]), float(row["concurrency"])
    if cap == 0 or not math.isfinite(conc):
        ctx = work.prompt_tokens + work.output_tokens
        per_seq = float(seq_kv_bytes(setup, ctx))
        return (f"{card} has {room:,.2f} GiB for KV cache, less than {one} of {ctx:,} tokens "
                f"({per_seq / GiB:,.2f} GiB)")
    need = math.ceil(conc - 1e-9)
    return f"{holder} {cap:,.0f} of the {need:,} sequences in flight, {need - cap:,.0f} short"


def _nothing_fits(df: pd.DataFrame, setup: Setup, work: Workload) -> str:
    """The closest split and its shortfall (one line): the split furthest along the constraints (P and D
    memory taken together), then the least relative shortfall there, then the fewest cards."""
    best = closest(df, CONSTRAINTS, STAGES)
    row = df.iloc[best]
    failing = _failing(row, CONSTRAINTS, STAGES)
    usable = usable_bytes(setup)
    parts = []
    for k in failing:
        if k in ("P memory", "D memory"):
            side = k[0]
            lead = f"a {side} card is short by" if not parts else f"a {side} card by"
            parts.append(f"{lead} {-row[f'slack: {k}'] * usable / GiB:,.2f} GiB")
        elif k == "KV capacity":
            parts.append(_kv_short(setup, work, row, room=row["d_kv_room_gib"], card="a D card",
                                   one="one sequence", holder="the D side holds"))
        elif k == "prefill load":
            parts.append(f"prefill runs at {100 * row['prefill_load']:,.0f}% of its capacity with "
                         f"{row['p_instances']:,} P instance{'s' if row['p_instances'] > 1 else ''} (max "
                         f"{100 * setup.max_load:.0f}%)")
        elif k == "TTFT":
            parts.append(f"TTFT {latency_text(row['ttft_s'])} against a target of {latency_text(work.ttft_s)}")
        else:
            parts.append(f"TPOT {latency_text(row['tpot_s'])} against a target of {latency_text(work.tpot_s)}")
    return (f"nothing fits: the closest split, {row['p_instances']:,} x P{row['p_size']} + {row['d_instances']:,} x "
            f"D{row['d_size']} (TP {row['p_tp']}/{row['d_tp']}, {row['cards']:,} cards), fails on "
            f"{' and '.join(failing)}: {' and '.join(parts) if len(parts) < 3 else '; '.join(parts)}")


def plan(setup: Setup, work: Workload, *, vectorized: bool = True, targets: Targets | None = None) -> Plan:
    """Evaluate the disaggregated splits and the co-located layouts under the same targets, rank the
    feasible ones, say which mode wins and why, and trace the frontier (module docstring).

    ``targets``: the latency targets to apply with their sources; ``None``: the workload's, and where it
    has none the published service level (:func:`resolve_targets`). A deployment that does not fit is a
    result (:attr:`Plan.reason`, :attr:`Plan.aggregated_reason`, :attr:`Plan.winner` "neither"); a card
    without the FLOP/s of the compute dtype raises :class:`pdcalc.core.errors.LayoutError` before anything is
    evaluated."""
    t0 = time.perf_counter()
    check_plan_size(setup)
    check_card_dtypes(setup)
    tg = resolve_targets(work, targets)
    work = replace(work, ttft_s=tg.ttft_s, tpot_s=tg.tpot_s)
    lay = layouts(setup, work)
    p_sides, d_sides = lay.p, lay.d
    df = (evaluate if vectorized else evaluate_loop)(setup, work, p_sides, d_sides)
    ok = df[df["feasible"]] if not df.empty else df
    ranked = ok.sort_values(["tokens_per_s_per_card", "ttft_s"], ascending=[False, True],
                            kind="stable").reset_index(drop=True)
    if len(ranked):
        reason = ""
    elif df.empty:
        reason = _no_candidates(setup, p_sides, d_sides)
    else:
        reason = _nothing_fits(df, setup, work)
    agg = agg_ranked = None
    agg_reason = ""
    if setup.aggregated:
        agg = evaluate_aggregated(setup, work, lay.a)
        agg_ranked = agg[agg["feasible"]].sort_values(["tokens_per_s_per_card", "ttft_s"], ascending=[False, True],
                                                      kind="stable").reset_index(drop=True)
        if agg_ranked.empty:
            agg_reason = _no_agg_candidates(setup, lay.a) if agg.empty else _agg_nothing_fits(agg, setup, work)
    ranked = with_ranges(ranked, setup)
    if agg_ranked is not None:
        agg_ranked = with_ranges(agg_ranked, setup)
    result = Plan(setup, work, df, ranked, reason, 0.0, splits=count_splits(setup, p_sides, d_sides),
                  evaluated=len(df), targets=tg, aggregated=agg, aggregated_ranked=agg_ranked,
                  aggregated_reason=agg_reason)
    winner, why = _winner(result)
    front = frontier(setup, work, targets=tg, lay=lay) if setup.frontier_points else None
    return replace(result, winner=winner, why=why, frontier=front, seconds=time.perf_counter() - t0)


def calibration_moves(own: Plan, corpus: Plan) -> dict:
    """How far a user's calibration moves a plan from the one the corpus's terms give: per mode, the answer under
    each, and the calibrated answer's TTFT, TPOT and output tokens/s against the same layout under the corpus's
    terms (``None`` where that plan did not evaluate the layout: a split it takes with another number of P
    instances); and the winner under each. Percentages are ``100 (calibrated / corpus - 1)``."""
    a, b = own.answer(), corpus.answer()
    out = {"corpus_terms": corpus.setup.terms.as_dict()}
    for mode, table, keys in (("disaggregated", corpus.candidates, SPLIT_KEYS),
                              ("aggregated", corpus.aggregated, AGG_KEYS)):
        x, y = a.get(mode, {}), b.get(mode, {})
        row = {"option": x.get("option"), "corpus_option": y.get("option"),
               "ttft_moves_pct": None, "tpot_moves_pct": None, "output_moves_pct": None}
        if x.get("option") and table is not None and not table.empty:
            same = table
            for k in keys:
                same = same[same[k] == x[k]]
            if len(same):
                r = same.iloc[0]
                for name, col in (("ttft_moves_pct", "ttft_s"), ("tpot_moves_pct", "tpot_s"),
                                  ("output_moves_pct", "output_tokens_per_s")):
                    ref = float(r[col])
                    row[name] = 100 * (x[col] / ref - 1) if ref > 0 and math.isfinite(ref) else None
        out[mode] = row
    out["winner"] = {"calibrated": a.get("winner"), "corpus": b.get("winner")}
    return out


#: Most candidates :func:`plan` evaluates (the disaggregated splits plus the co-located ``(layout, n)``), and
#: most frontier entries (levels x the D and co-located ``(layout, n)`` each level steps through). Every row
#: costs memory and time in the plan's tables, so together these keep any accepted plan to seconds and well
#: under 1 GiB: near the bounds ``pdcalc plan`` peaks at about 0.35 GiB and takes under 10 s on one core,
#: where 65,536 cards with seven TP degrees and 256 frontier points took 3 GiB and over two minutes.
MAX_EVALUATED = 500_000
MAX_FRONTIER_WORK = 8_000_000


def plan_size(setup: Setup) -> dict[str, int]:
    """What :func:`plan` will evaluate, counted from the setup alone (no step is computed): ``evaluated``, the
    disaggregated splits (one per P layout, D layout and ``n_d``) plus the co-located ``(layout, n)``;
    ``per_level``, the D and co-located ``(layout, n)`` each frontier level steps through; ``frontier``, that
    times :attr:`Setup.frontier_points`. The layouts are those :func:`pdcalc.plan.roles.layouts` builds."""
    from pdcalc.plan.roles import instance_sizes

    n_experts = get_inventory(setup.model).n_routed_experts
    C = setup.cards
    split, whole = instance_sizes(setup, n_experts), instance_sizes(setup, n_experts, whole=True)
    good = {t: not layout_tp_problem(setup, t) for t in set(setup.p_tps) | set(setup.d_tps)}

    def sizes(candidates, tps):
        return [s for s in candidates for t in tps if s % t == 0 and good[t]]

    p, d = sizes(split, setup.p_tps), sizes(split, setup.d_tps)
    a = sizes(whole, setup.a_tps) if setup.aggregated else []
    agg = sum(C // s for s in a)
    splits = sum(max((C - sp) // sd, 0) for sp in p for sd in d)
    per_level = sum(C // s for s in d) + agg
    return {"evaluated": splits + agg, "per_level": per_level, "frontier": per_level * setup.frontier_points}


def check_plan_size(setup: Setup) -> None:
    """Refuse, with one line naming the flags (and the chapter parameters) to change, a plan larger than
    :data:`MAX_EVALUATED` candidates or :data:`MAX_FRONTIER_WORK` frontier entries (:func:`plan_size`)."""
    from pdcalc.core.checks import InputError

    size = plan_size(setup)
    tps = ", ".join(map(str, setup.a_tps))
    if size["evaluated"] > MAX_EVALUATED:
        raise InputError("--cards", f"{setup.cards:,} cards with TP degrees {tps} (--tp, --p-tp, --d-tp; the chapter "
                         f"parameters cards and tp_options) make {size['evaluated']:,} candidates to evaluate (P/D "
                         f"splits and co-located layouts); at most {MAX_EVALUATED:,}: give fewer cards or TP degrees")
    if size["frontier"] > MAX_FRONTIER_WORK:
        most = MAX_FRONTIER_WORK // max(size["per_level"], 1)
        raise InputError("--frontier-points", f"{setup.frontier_points} levels x {size['per_level']:,} layouts per "
                         f"level ({setup.cards:,} cards, TP degrees {tps}) is {size['frontier']:,} frontier entries; "
                         f"at most {MAX_FRONTIER_WORK:,}: with these cards and TP degrees, at most {most} points "
                         f"(--frontier-points; 0: no frontier)")


def check_card_dtypes(setup: Setup) -> None:
    """Raise :class:`pdcalc.core.errors.LayoutError` (one line, naming the card as given and the flags or
    chapter parameters to change) when the card lacks the peak FLOP/s of the dtype the step's linear layers
    run in (the scheme's compute dtype) or its attention runs in. ``step_kwargs`` that set them are left to
    the step itself."""
    import inspect

    from pdcalc.core.errors import LayoutError
    from pdcalc.hardware.cards import get_card
    from pdcalc.model.quant import SCHEMES, get_scheme
    from pdcalc.perf.inputs import COMPUTE_DTYPE
    from pdcalc.perf.step import step

    kw = setup.step_kwargs
    if kw.get("peak_flops_per_s") is not None or kw.get("compute_dtype") or "attn_dtype" in kw:
        return
    c, scheme = get_card(setup.card), get_scheme(setup.quant).name
    attn = inspect.signature(step).parameters["attn_dtype"].default
    needs = {d: w for d, w in ((COMPUTE_DTYPE.get(scheme), f"the compute dtype of scheme {scheme!r}"),
                               (attn, "the attention dtype")) if d is not None}
    missing = [d for d in needs if d not in c.flops_per_s]
    if not missing:
        return
    fits = [s for s in SCHEMES if COMPUTE_DTYPE.get(s) in c.flops_per_s] if attn in c.flops_per_s else []
    how = (f"choose a scheme it can run (--quant, or the chapter parameter quant: {', '.join(fits)})" if fits else
           "choose another card (--card)")
    raise LayoutError(f"card {c.shown!r} has no {' or '.join(missing)} FLOP/s "
                      f"({'; '.join(needs[d] for d in missing)}); its flops_per_s lists "
                      f"{', '.join(sorted(c.flops_per_s))}: {how}")


#: Columns given an 80 % range under the served model, with the metric whose held-out errors give it.
RANGED = {"tpot_s": "tpot_s", "ttft_s": "ttft_s", "output_tokens_per_s": "output_tokens_per_s",
          "tokens_per_s_per_card": "output_tokens_per_s"}


def range_factors(setup: Setup) -> dict[str, tuple[float, float]]:
    """Per ranged column, the factors from a served prediction to the low and high ends of its 80 % range (the
    10th to 90th percentile of its class's held-out errors, :mod:`pdcalc.reality.calibration`); empty for the
    published costs and the roofline, which carry none."""
    if setup.costs != "served":
        return {}
    from pdcalc.reality.predict import stored_range

    vendor, _, family = setup.served_class
    out = {}
    for col, metric in RANGED.items():
        q10, q90, _ = stored_range(vendor, metric, family)
        out[col] = (math.exp(-q90), math.exp(-q10))
    return out


def with_ranges(df: pd.DataFrame, setup: Setup) -> pd.DataFrame:
    """``df`` with ``<column>_low`` and ``<column>_high`` beside each ranged column (served model only)."""
    f = range_factors(setup)
    if not f or df.empty:
        return df
    return df.assign(**{f"{c}_{end}": df[c] * f[c][i] for c in f if c in df for i, end in enumerate(("low", "high"))})


def _no_agg_candidates(setup: Setup, a_sides: list[Side]) -> str:
    """Why there is no co-located layout at all (one line)."""
    n_exp = get_inventory(setup.model).n_routed_experts
    sizes = instance_sizes(setup, n_exp, whole=True)
    if not sizes:
        return (f"nothing fits: no co-located instance size tried ({', '.join(map(str, tried_sizes(setup)))}) can "
                f"spread the {n_exp} routed experts within {setup.cards:,} cards")
    if setup.use_all_cards and a_sides:
        return f"nothing fits: no co-located instance size tried divides the {setup.cards:,} cards"
    why = []
    for t in setup.a_tps:
        problem = layout_tp_problem(setup, t)
        why.append(f"TP {t}: {problem}" if problem else
                   f"TP {t} divides none of the instance sizes {', '.join(map(str, sizes))}")
    return "nothing fits: no TP degree tried suits the model and a co-located instance size; " + "; ".join(why)


def _agg_nothing_fits(df: pd.DataFrame, setup: Setup, work: Workload) -> str:
    """The closest co-located option and its shortfall (one line), chosen as :func:`_nothing_fits` does."""
    row = df.iloc[closest(df, AGG_CONSTRAINTS, AGG_STAGES)]
    failing = _failing(row, AGG_CONSTRAINTS, AGG_STAGES)
    parts = []
    for k in failing:
        if k == "memory":
            parts.append(f"a card is short by {-row['slack: memory'] * usable_bytes(setup) / GiB:,.2f} GiB")
        elif k == "KV capacity":
            parts.append(_kv_short(setup, work, row, room=row["kv_room_gib"], card="a card",
                                   one="one prompt in prefill and one sequence", holder="the instances hold"))
        elif k == "TPOT":
            parts.append(f"TPOT {latency_text(row['tpot_s'])} against a target of {latency_text(work.tpot_s)}"
                         + (f", prompt chunks taking {row['prefill_share']:.0%} of every step"
                            if math.isfinite(row["tpot_s"]) and row["prefill_share"] > 0 else ""))
        elif k == "prefill load":
            b = float(row["chunk_tokens"])
            if b >= work.prompt_tokens:
                parts.append(f"prompts arrive at {_pct(row['prefill_load'])} of one prompt per rank and step "
                             f"(max {100 * setup.max_load:.0f}%)")
            elif b > 0:
                parts.append(f"prompts need {_pct(row['prefill_load'])} of the {b:,.0f}-token chunk the TPOT target "
                             f"leaves in a step (max {100 * setup.max_load:.0f}%)")
            else:
                parts.append(f"the decode step alone ({latency_text(row['decode_s'])}) leaves no room for prompt "
                             f"chunks within the TPOT target")
        else:
            parts.append(f"TTFT {latency_text(row['ttft_s'])} against a target of {latency_text(work.ttft_s)}")
    return (f"nothing fits: the closest co-located layout, {aggregated_label(row)} ({int(row['cards']):,} cards), "
            f"fails on {' and '.join(failing)}: {'; '.join(parts)}")


def _pct(x: float) -> str:
    return f"{100 * x:,.0f}%" if math.isfinite(x) else "more than all"


def _winner(p: Plan) -> tuple[str, str]:
    """Which mode wins under the targets, and one sentence saying why."""
    d, a = p.best, p.best_aggregated
    if not p.setup.aggregated:
        return ("disaggregated" if d is not None else "neither",
                ("co-located layouts were not evaluated" + (f"; {p.reason}" if d is None else "")))

    def limit(row, order) -> str:
        k = str(row["binding"])
        return f"{_WHAT.get(k, k)} ({float(row[f'slack: {k}']):.0%} from its limit)"

    def chunks(row) -> str:
        return f"; its prompt chunks take {float(row['prefill_share']):.0%} of every step"

    if d is not None and a is not None:
        dt, at = float(d["tokens_per_s_per_card"]), float(a["tokens_per_s_per_card"])
        if math.isclose(dt, at, rel_tol=1e-9):     # e.g. a rate both serve on as many cards: TTFT, then TPOT decide
            keys = [(float(r["ttft_s"]), float(r["tpot_s"])) for r in (d, a)]
            mode = "disaggregated" if keys[0] <= keys[1] else "aggregated"
            win, lose = (d, a) if mode == "disaggregated" else (a, d)
            on = "TTFT" if keys[0][0] != keys[1][0] else "TPOT"
            col = "ttft_s" if on == "TTFT" else "tpot_s"
            return mode, (f"{mode} wins: {split_label(d)} and {aggregated_label(a)} both serve {dt:,.0f} output tokens/s "
                          f"per card under the same targets, and {option_label(win, mode)} has the shorter {on}, "
                          f"{latency_text(float(win[col]))} against {latency_text(float(lose[col]))}")
        if dt > at:
            return "disaggregated", (
                f"disaggregated wins: {split_label(d)} serves {dt:,.0f} output tokens/s per card, {dt / at:.2f} "
                f"times the best co-located layout, {aggregated_label(a)} ({at:,.0f}), under the same targets; what "
                f"holds the co-located layout back first is {limit(a, AGG_CONSTRAINTS)}{chunks(a)}")
        return "aggregated", (
            f"aggregated wins: {aggregated_label(a)} serves {at:,.0f} output tokens/s per card, {at / dt:.2f} times "
            f"the best disaggregated split, {split_label(d)} ({dt:,.0f}), under the same targets{chunks(a)}; what "
            f"holds the split back first is {limit(d, CONSTRAINTS)}")
    if d is not None:
        return "disaggregated", (f"disaggregated wins: {split_label(d)} serves {float(d['tokens_per_s_per_card']):,.0f} "
                                 f"output tokens/s per card and no co-located layout meets the targets "
                                 f"({_strip(p.aggregated_reason)})")
    if a is not None:
        return "aggregated", (f"aggregated wins: {aggregated_label(a)} serves {float(a['tokens_per_s_per_card']):,.0f} "
                              f"output tokens/s per card{chunks(a)}, and no disaggregated split meets the targets "
                              f"({_strip(p.reason)})")
    return "neither", (f"neither meets the targets: disaggregated, {_strip(p.reason)}; co-located, "
                       f"{_strip(p.aggregated_reason)}")


def _strip(reason: str) -> str:
    return reason.removeprefix("nothing fits: ")


#: A constraint in words.
_WHAT = {"P memory": "the memory of a P card", "D memory": "the memory of a D card",
         "KV capacity": "the KV cache the cards hold", "prefill load": "the load on prefill",
         "TTFT": "the TTFT target", "TPOT": "the TPOT target", "memory": "the memory of a card"}
