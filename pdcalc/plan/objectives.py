"""The two questions an operator asks of a plan, answered side by side.

- **A fixed cluster**: the most output tokens/s the whole cluster gives within every target. Any option of the
  frontier (:func:`pdcalc.plan.frontier_search.frontier`, both modes, every concurrency) that meets the targets
  is copied as often as the cluster holds it, each copy at the option's own concurrency:

  .. math:: \\max_{o \\,\\text{meets targets}} \\Bigl\\lfloor \\frac{N}{c_o} \\Bigr\\rfloor\\, X_o

  with ``N`` the cluster's cards, ``c_o`` and ``X_o`` the option's cards and output tokens/s.
- **A fixed load**: the fewest cards that serve the workload as given (its concurrency or rate) within every
  target, the most output per card breaking a tie, from the ranked P/D splits and co-located layouts; and what the
  cards it leaves can then do, answered as a fixed cluster of those cards.

Each answer names its objective; under the served model its figures carry the plan's 80 % ranges
(:func:`pdcalc.plan.search.range_factors`).

When not one prompt reaches the TTFT target on any layout (a long prompt on a slow card), "nothing meets the
targets" answers nothing. :func:`out_of_reach` then says how fast the fastest layout serves one prompt on an idle
cluster, and gives both answers again under a TTFT target of :data:`TTFT_ROOM` times that: room for a prompt to
wait about one prefill in the queue. The missed target stays in the answer's words.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import pandas as pd

from pdcalc.core.precision import round_sig
from pdcalc.plan.labels import option_label
from pdcalc.plan.search import Plan, plan, range_factors
from pdcalc.plan.workload import Targets

OBJECTIVES = ("fixed cluster", "fixed load")
#: The TTFT target an out-of-reach answer is given under, in units of the fastest TTFT of one prompt.
TTFT_ROOM = 2.0


@dataclass(frozen=True)
class Answer:
    """One objective's answer: ``replicas`` copies of ``option`` (``cards_each`` cards each)."""

    objective: str
    mode: str                     # "disaggregated" or "aggregated"
    option: str
    replicas: int
    cards_each: int
    concurrency: int              # sequences in flight over every copy
    output_tokens_per_s: float    # over every copy
    tpot_s: float
    ttft_s: float
    binds: str
    rest: str = ""                # fixed load: what the cluster's other cards can do

    @property
    def cards(self) -> int:
        return self.replicas * self.cards_each

    @property
    def tokens_per_s_per_card(self) -> float:
        return self.output_tokens_per_s / self.cards

    @property
    def layout(self) -> str:
        return self.option if self.replicas == 1 else f"{self.replicas} copies of {self.option}"

    def as_dict(self) -> dict:
        return {**asdict(self), "cards": self.cards, "tokens_per_s_per_card": self.tokens_per_s_per_card,
                "layout": self.layout}


def _best_copies(front: pd.DataFrame, cards: int) -> pd.Series | None:
    """The frontier row whose copies give ``cards`` cards the most output within every target."""
    if front is None or front.empty:
        return None
    f = front[front["meets_targets"].astype(bool) & (front["cards"] <= cards)].copy()
    if f.empty:
        return None
    f["replicas"] = (cards // f["cards"]).astype(int)
    f["total"] = f["replicas"] * f["output_tokens_per_s"]
    f = f.sort_values(["total", "ttft_s"], ascending=[False, True], kind="stable")
    return f.iloc[0]


def fixed_cluster(p: Plan, cards: int | None = None) -> Answer | None:
    """The most output tokens/s ``cards`` (default: the cluster's) give within every target, copying a frontier
    option where copies pay; None when nothing on the frontier meets the targets."""
    n = p.setup.cards if cards is None else int(cards)
    r = _best_copies(p.frontier, n)
    if r is None:
        return None
    reps = int(r["replicas"])
    return Answer(objective="fixed cluster", mode=str(r["mode"]), option=str(r["option"]), replicas=reps,
                  cards_each=int(r["cards"]), concurrency=reps * int(r["concurrency"]),
                  output_tokens_per_s=reps * float(r["output_tokens_per_s"]), tpot_s=float(r["tpot_s"]),
                  ttft_s=float(r["ttft_s"]), binds=str(r["binding"]))


def fixed_load(p: Plan) -> Answer | None:
    """The fewest cards that serve the plan's workload within every target (the most output per card breaking a
    tie), and what the cluster's other cards can do; None when nothing meets the targets at that load."""
    rows = []
    for mode, df in (("disaggregated", p.ranked), ("aggregated", p.aggregated_ranked)):
        if df is not None and len(df):
            rows += [(int(r["cards"]), -float(r["tokens_per_s_per_card"]), mode, r) for _, r in df.iterrows()]
    if not rows:
        return None
    cards, _, mode, r = min(rows, key=lambda x: (x[0], x[1]))
    left = p.setup.cards - cards
    more = fixed_cluster(p, left) if left > 0 else None
    rest = ("no card is left" if left <= 0 else
            f"the other {left:,} cards give nothing more within the targets" if more is None else
            f"the other {left:,} cards can run {more.layout} for {more.output_tokens_per_s:,.0f} output tokens/s more")
    conc = p.workload.concurrency if p.workload.concurrency is not None else round(float(r["concurrency"]))
    return Answer(objective="fixed load", mode=mode, option=option_label(r, mode), replicas=1, cards_each=cards,
                  concurrency=int(conc), output_tokens_per_s=float(r["output_tokens_per_s"]),
                  tpot_s=float(r["tpot_s"]), ttft_s=float(r["ttft_s"]), binds=str(r["binding"]), rest=rest)


def answers(p: Plan) -> dict[str, Answer | None]:
    """Both objectives' answers, by objective."""
    return {"fixed cluster": fixed_cluster(p), "fixed load": fixed_load(p)}


@dataclass(frozen=True)
class OutOfReach:
    """The TTFT target is out of reach: the fastest TTFT of one prompt, where, and the plan under a TTFT target of
    :data:`TTFT_ROOM` times it (``plan``; the TPOT target kept)."""

    target_s: float
    fastest_s: float
    fastest_option: str
    plan: Plan

    @property
    def ttft_s(self) -> float:
        return self.plan.targets.ttft_s

    def sentence(self) -> str:
        return (f"no layout serves one prompt within the TTFT target of {seconds_text(self.target_s)}: the fastest, "
                f"{self.fastest_option}, takes {seconds_text(self.fastest_s)} on an idle cluster; under a TTFT target "
                f"of {seconds_text(self.ttft_s)} ({TTFT_ROOM:g} times that)")


def out_of_reach(p: Plan) -> OutOfReach | None:
    """None unless the plan has a TTFT target that no layout meets even for one prompt at a time; else the
    fastest TTFT of one prompt (every other target and limit met, one sequence in flight) and the plan
    re-run under a TTFT target of :data:`TTFT_ROOM` times it, rounded up to two significant figures."""
    tg = p.targets
    if tg.ttft_s is None or fixed_cluster(p) is not None:
        return None
    one = plan(replace(p.setup, frontier_points=0), replace(p.workload, concurrency=1, rate_per_s=None), targets=tg)
    rows = []
    for mode, df in (("disaggregated", one.candidates), ("aggregated", one.aggregated)):
        if df is None or df.empty:
            continue
        others = [c for c in df.columns if c.startswith("slack: ") and c != "slack: TTFT"]
        ok = df[(df[others] >= 0).all(axis=1) & df["ttft_s"].map(math.isfinite)]
        rows += [(float(r["ttft_s"]), option_label(r, mode)) for _, r in ok.iterrows()]
    if not rows:
        return None
    fastest, option = min(rows)
    if fastest <= tg.ttft_s:
        return None
    room = TTFT_ROOM * fastest
    step = 10 ** (math.floor(math.log10(room)) - 1)
    room = math.ceil(room / step) * step
    source = (f"{TTFT_ROOM:g} x the fastest TTFT of one prompt ({seconds_text(fastest)}, {option}): "
              f"{tg.stated('TTFT')} ({tg.short_source('TTFT')}) is out of reach")
    relaxed = plan(p.setup, p.workload, targets=Targets(ttft_s=room, tpot_s=tg.tpot_s, ttft_source=source,
                                                          tpot_source=tg.tpot_source))
    return OutOfReach(target_s=tg.ttft_s, fastest_s=fastest, fastest_option=option, plan=relaxed)


def answers_table(p: Plan) -> pd.DataFrame:
    """The two answers as a small table: objective, layout, cards, TTFT, TPOT, output per card and in all (each
    with its likely range under the served model), what binds."""
    f = range_factors(p.setup)

    def ranged(x: float, key: str) -> str:
        return f"{_fmt(x)} ({_span(x, f[key])})" if f else _fmt(x)

    out = []
    goals = answers(p)
    far = out_of_reach(p) if goals["fixed cluster"] is None else None
    far_goals = answers(far.plan) if far is not None else {}
    for name, a in goals.items():
        if a is None and far_goals.get(name) is not None:
            a, name = far_goals[name], f"{name}, TTFT at most {seconds_text(far.ttft_s)}"
        if a is None:
            out.append({"objective": name, "layout": "nothing meets the targets", "binds": _failing(p, name)})
            continue
        likely = ", likely" if f else ""
        out.append({"objective": name, "layout": a.layout, "cards": a.cards,
                    "TTFT (s)" + likely: ranged(a.ttft_s, "ttft_s"),
                    "TPOT (ms)" + likely: ranged(1e3 * a.tpot_s, "tpot_s"),
                    "tokens/s per card" + likely: ranged(a.tokens_per_s_per_card, "tokens_per_s_per_card"),
                    "tokens/s in all" + likely: ranged(a.output_tokens_per_s, "output_tokens_per_s"),
                    "binds": a.binds})
    return pd.DataFrame(out)


def _failing(p: Plan, objective: str) -> str:
    """What the closest option fails on when nothing meets the targets."""
    import re

    if objective == "fixed cluster" and p.frontier is not None and not p.frontier.empty:
        f = p.frontier.dropna(subset=["tokens_per_s_per_card"])
        if len(f):
            return str(f.sort_values("tokens_per_s_per_card", ascending=False).iloc[0]["binding"])
    m = re.search(r"fails on ([^:]+):", p.reason or "")
    return m.group(1) if m else ""


def answer_lines(p: Plan) -> list[str]:
    """Both answers as ``pdcalc plan`` prints them, one line each, with the out-of-reach TTFT where it applies;
    under the served model each figure with its likely (80 %) range."""
    f = range_factors(p.setup)
    goals = answers(p)
    far = out_of_reach(p) if goals["fixed cluster"] is None else None
    lines = []
    if far is not None:
        lines.append(f"{far.sentence()[:1].upper()}{far.sentence()[1:]}:")
        goals = {k: a if a is not None else answers(far.plan)[k] for k, a in goals.items()}
    for name, a in goals.items():
        if a is None:
            fails = _failing(far.plan if far is not None else p, name)
            lines.append(f"{name}: nothing meets the targets" + (f" (the closest fails on {fails})" if fails else ""))
            continue
        lines.append(f"{name}: run {a.layout} on {a.cards:,} cards, "
                     f"{_likely(a.output_tokens_per_s, f, 'output_tokens_per_s', ' output tokens/s')}, "
                     f"{_likely(a.tokens_per_s_per_card, f, 'tokens_per_s_per_card', ' per card')}, at "
                     f"{a.concurrency:,} sequences, TPOT {_likely(a.tpot_s * 1e3, f, 'tpot_s', ' ms')}, TTFT "
                     f"{_likely(a.ttft_s, f, 'ttft_s', ' s')}, binds {a.binds}" + (f"; {a.rest}" if a.rest else ""))
    return lines


def short_answer(p: Plan, load_name: str = "the given load") -> str:
    """Both answers in one short sentence (the details are in :func:`answers_table`): what to run on the whole
    cluster and, where it differs, for the given load on the fewest cards; or why nothing meets the targets."""
    goals = answers(p)
    lead = ""
    far = out_of_reach(p) if goals["fixed cluster"] is None else None
    if far is not None:
        lead = (f"no layout serves one prompt within {seconds_text(far.target_s)} (the fastest takes "
                f"{seconds_text(far.fastest_s)}); with TTFT at most {seconds_text(far.ttft_s)}, ")
        goals = {k: a if a is not None else answers(far.plan)[k] for k, a in goals.items()}
    whole, load = goals["fixed cluster"], goals["fixed load"]
    if whole is None:
        return f"nothing meets the targets (the closest fails on {_failing(p, 'fixed cluster')})"
    text = (f"{lead}run {whole.layout} ({whole.cards:,} cards): {whole.output_tokens_per_s:,.0f} output tokens/s, "
            f"TPOT {_fmt(1e3 * whole.tpot_s)} ms, TTFT {seconds_text(whole.ttft_s)}")
    if load is None:
        return text + f"; {load_name} fits on no layout (the closest fails on {_failing(far.plan if far else p, 'fixed load')})"
    if (load.layout, load.cards) != (whole.layout, whole.cards):
        return text + f"; {load_name} needs only {load.cards:,} cards ({load.layout})"
    return text + f"; {load_name} needs all of it"


def headline(p: Plan, load_name: str = "the given load") -> str:
    """One short line over :func:`answers_table`: what to run, or why the table's answers hold another TTFT."""
    goals = answers(p)
    whole, load = goals["fixed cluster"], goals["fixed load"]
    if whole is None:
        far = out_of_reach(p)
        if far is None:
            return f"nothing meets the targets (the closest fails on {_failing(p, 'fixed cluster')})"
        return (f"no layout serves one prompt within the TTFT target of {seconds_text(far.target_s)} (the fastest "
                f"takes {seconds_text(far.fastest_s)}), so the answers below hold TTFT to {seconds_text(far.ttft_s)}")
    text = f"run {whole.layout} on {whole.cards:,} cards"
    if load is not None and (load.layout, load.cards) != (whole.layout, whole.cards):
        text += f"; for {load_name}, {load.layout} on {load.cards:,} cards"
    return text


def out_of_reach_dict(p: Plan) -> dict | None:
    """:func:`out_of_reach` for ``pdcalc plan --json``: the missed target, the fastest TTFT of one prompt and where,
    the TTFT target the answers are then given under, and those answers."""
    far = out_of_reach(p)
    if far is None:
        return None
    return {"ttft_target_s": far.target_s, "fastest_ttft_s": far.fastest_s, "fastest_option": far.fastest_option,
            "answered_under_ttft_s": far.ttft_s, "why": far.plan.targets.ttft_source,
            "objectives": {k: (None if a is None else a.as_dict()) for k, a in answers(far.plan).items()}}


def _span(x: float, factors: tuple[float, float]) -> str:
    """The likely range of a figure ``x`` from its low and high factors: "43.1 to 174"."""
    return f"{_fmt(x * factors[0])} to {_fmt(x * factors[1])}"


def _likely(x: float, factors: dict, key: str, unit: str) -> str:
    """A figure with its unit and, where ``factors`` give one, its likely range: "55.3 ms (likely 43.1 to 174)"."""
    return f"{_fmt(x)}{unit} (likely {_span(x, factors[key])})" if key in factors else f"{_fmt(x)}{unit}"


def seconds_text(x: float) -> str:
    """A time in seconds as the answers print it: "44 s", "1.78 s"."""
    return f"{_fmt(x)} s"


def _fmt(x: float) -> str:
    """A predicted figure at three significant figures (whole numbers from 100 up), thousands separated."""
    if not math.isfinite(x):
        return "unbounded"
    return f"{round_sig(x, 3):,.0f}" if abs(x) >= 100 else f"{x:,.3g}"
