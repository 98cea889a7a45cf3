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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from pdcalc.plan.labels import option_label
from pdcalc.plan.search import Plan, range_factors

OBJECTIVES = ("fixed cluster", "fixed load")


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


def answers_table(p: Plan) -> pd.DataFrame:
    """The two answers as a small table: objective, layout, cards, TTFT, TPOT and output per card (each with its
    likely range under the served model), output in all, what binds."""
    f = range_factors(p.setup)

    def ranged(x: float, key: str) -> str:
        if not f:
            return _fmt(x)
        lo, hi = f[key]
        return f"{_fmt(x)} ({_fmt(x * lo)} to {_fmt(x * hi)})"

    out = []
    for name, a in answers(p).items():
        if a is None:
            out.append({"objective": name, "layout": "nothing meets the targets", "binds": _failing(p, name)})
            continue
        out.append({"objective": name, "layout": a.layout, "cards": a.cards, "TTFT (s)": _fmt(a.ttft_s),
                    "TPOT (ms)" + (", likely" if f else ""): ranged(1e3 * a.tpot_s, "tpot_s"),
                    "tokens/s per card" + (", likely" if f else ""): ranged(a.tokens_per_s_per_card,
                                                                            "tokens_per_s_per_card"),
                    "tokens/s in all": round(a.output_tokens_per_s), "binds": a.binds})
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


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}" if math.isfinite(x) else "unbounded"
