"""How planner results read: the two best options side by side, their memory per card and the JSON answer of
a :class:`pdcalc.plan.search.Plan` (:class:`PlanViews`), and the sentences and tables of a
:class:`pdcalc.plan.recommend.Recommendation` (:class:`RecommendationText`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pdcalc.core.units import GiB
from pdcalc.hardware.cards import get_card
from pdcalc.plan.labels import (AGG_KEYS, SPLIT_KEYS, TABLE_NAMES, PDSplit, aggregated_card_plan, aggregated_label,
                                card_plans, gib_parts, option_label)
from pdcalc.plan.workload import AGG_CONSTRAINTS, AGG_STAGES, CONSTRAINTS, MODES, STAGES


def closest(df: pd.DataFrame, order: tuple[str, ...], stages: dict) -> int:
    """Position of the option furthest along the constraints (``stages``: constraints of one stage count
    together), then with the least relative shortfall there, then on the fewest cards. Every row is taken
    to fail somewhere; a feasible row, if any, is furthest of all."""
    slack = df[[f"slack: {k}" for k in order]].to_numpy(dtype=float)
    slack = np.where(np.isnan(slack), -np.inf, slack)
    stage_of = np.array([stages[k] for k in order])
    fails = (slack < 0).any(axis=1)
    first = np.argmax(slack < 0, axis=1)
    stage = np.where(fails, stage_of[first], len(order))
    in_stage = stage_of[None, :] == stage[:, None]
    short = np.where(in_stage, slack, np.inf).min(axis=1)      # the worst slack of the failing stage
    short = np.where(fails, short, np.inf)
    return int(np.lexsort((df["cards"].to_numpy(), -short, -stage))[0])


class PlanViews:
    """The views of a :class:`pdcalc.plan.search.Plan` (its fields are read as attributes)."""

    def options(self) -> pd.DataFrame:
        """The best disaggregated split and the best co-located layout side by side, in the units a reader
        reads and rounded as shown (TTFT to 10 ms, TPOT to 0.1 ms, tokens/s to whole tokens; "unbounded"
        for a saturated prefill): the option, cards, TTFT (s), TPOT (ms), output tokens/s per card and in
        all, what limits it (the first constraint it fails, or the one closest to its limit) and whether it
        meets every target. A mode where nothing fits shows its closest option (its row says what it fails
        on)."""
        from pdcalc.core.precision import round_decimals

        def shown(x: float, decimals: int):
            x = float(x)
            if not math.isfinite(x):
                return "unbounded"
            return int(round(x)) if decimals == 0 else round_decimals(x, decimals)

        rows = []
        for mode, row in self.options_rows().items():
            if row is None:
                continue
            rows.append({"mode": mode, "option": option_label(row, mode), "cards": int(row["cards"]),
                         "TTFT (s)": shown(row["ttft_s"], 2), "TPOT (ms)": shown(1e3 * float(row["tpot_s"]), 1),
                         "output tokens/s per card": shown(row["tokens_per_s_per_card"], 0),
                         "output tokens/s": shown(row["output_tokens_per_s"], 0), "limited by": str(row["binding"]),
                         "meets every target": bool(row["feasible"])})
        return pd.DataFrame(rows, columns=["mode", "option", "cards", "TTFT (s)", "TPOT (ms)",
                                           "output tokens/s per card", "output tokens/s", "limited by",
                                           "meets every target"])
    def options_rows(self) -> dict:
        """Per mode, the best option, or when none meets the targets the closest one (``None``: nothing
        evaluated)."""
        out = {"disaggregated": self.best, "aggregated": self.best_aggregated}
        if out["disaggregated"] is None and not self.candidates.empty:
            out["disaggregated"] = self.candidates.iloc[closest(self.candidates, CONSTRAINTS, STAGES)]
        if out["aggregated"] is None and self.aggregated is not None and not self.aggregated.empty:
            out["aggregated"] = self.aggregated.iloc[closest(self.aggregated, AGG_CONSTRAINTS, AGG_STAGES)]
        return out
    def card_memory(self) -> dict:
        """Memory of one card of each kind of the two best options (:class:`pdcalc.layout.memory.MemoryPlan`):
        ``"P card"`` and ``"D card"`` of the best split, ``"co-located card"`` of the best aggregated
        layout; a mode where nothing fits is left out."""
        out = {}
        if self.best is not None:
            out["P card"], out["D card"] = card_plans(self.setup, self.workload, self.best)
        if self.best_aggregated is not None:
            out["co-located card"] = aggregated_card_plan(self.setup, self.workload, self.best_aggregated)
        return out
    def answer(self) -> dict:
        """The plan in "what to run" terms, JSON-ready (NaN and infinities as they are; the command line
        writes them as null): ``targets`` (:meth:`Targets.as_dict`), ``disaggregated`` and ``aggregated``
        (each: ``result`` "fits" or the one-line reason, the option, cards, TTFT, TPOT, output tokens/s per
        card and in all, ``binding``, ``meets_targets``, and ``memory_gib`` per card: weights, KV cache,
        activations and framework, headroom, usable; the co-located one also its chunk and the share of each
        step its prompts take; when nothing fits, the closest option), ``winner``, ``why``, ``frontier``
        (records of :func:`frontier`, ``[]`` without one)."""
        rows = self.options_rows()
        mem = self.card_memory()
        out = {"targets": self.targets.as_dict() if self.targets else None}
        for mode in MODES:
            row = rows[mode]
            reason = self.reason if mode == "disaggregated" else self.aggregated_reason
            if mode == "aggregated" and not self.setup.aggregated:
                out[mode] = {"result": "not evaluated"}
                continue
            o = {"result": reason or "fits"}
            if row is not None:
                o.update(option=option_label(row, mode), cards=int(row["cards"]), ttft_s=float(row["ttft_s"]),
                         tpot_s=float(row["tpot_s"]), tokens_per_s_per_card=float(row["tokens_per_s_per_card"]),
                         output_tokens_per_s=float(row["output_tokens_per_s"]), concurrency=float(row["concurrency"]),
                         binding=str(row["binding"]), meets_targets=bool(row["feasible"]))
                if mode == "disaggregated":
                    o.update({k: int(row[k]) for k in SPLIT_KEYS})
                    o.update(prefill_load=float(row["prefill_load"]), transfer_s=float(row["transfer_s"]))
                    cards = ("P card", "D card")
                else:
                    o.update({k: int(row[k]) for k in AGG_KEYS})
                    o.update(chunk_tokens=float(row["chunk_tokens"]), prefill_share=float(row["prefill_share"]),
                             prefill_load=float(row["prefill_load"]), decode_s=float(row["decode_s"]))
                    cards = ("co-located card",)
                o["memory_gib"] = {c: gib_parts(mem[c]) for c in cards if c in mem}
            out[mode] = o
        out["winner"], out["why"] = self.winner, self.why
        out["frontier_at_target"] = self.frontier_at_target()
        out["frontier"] = [] if self.frontier is None else self.frontier.to_dict("records")
        return out
    def memory(self) -> pd.DataFrame:
        """:meth:`card_memory` as a table in GiB to two decimals: weights, KV cache in use, activations and
        framework, headroom, and what ``utilization`` lets the engine fill; one column per card."""
        cols = {f"{name} (GiB)": gib_parts(mp, TABLE_NAMES) for name, mp in self.card_memory().items()}
        df = pd.DataFrame(cols).round(2)           # GiB to two decimals, as the engines print them
        df.index.name = "per card"
        return df.reset_index() if len(df.columns) else pd.DataFrame()


CONSTRAINT_TEXT = {"P memory": "the memory of a P card", "D memory": "the memory of a D card",
         "KV capacity": "the KV cache the D side holds", "prefill load": "the load on the prefill side",
         "TTFT": "the TTFT target", "TPOT": "the TPOT target", "memory": "the memory of a card"}


def colocated_why(label: str, limits: pd.DataFrame) -> str:
    """Why a co-located layout is recommended, with its tightest constraint (``limits``: tightest first)."""
    text = f"{label} gives the most output tokens per second per card of every split and co-located layout evaluated"
    if not len(limits):
        return text + "."
    first = limits.iloc[0]
    return text + f"; what limits it first is {first['what it is']}, {first['slack (%)']:.0f}% from its limit."


def ep_note(ep_row, answer_row, published) -> str:
    """The article's co-located layout made one EP group over its cards (``ep_row``, a co-located row), against
    the recommendation (``answer_row``): "" when there is no such row."""
    if ep_row is None:
        return ""
    r = ep_row
    text = (f" Made one expert-parallel group over its {int(r['cards']):,} cards (EP{int(r['cards'])}), as it must be "
            f"to fit, the article's {published.label} serves {r['tokens_per_s_per_card']:,.0f} output tokens/s per "
            f"card at a TPOT of {latency(r['tpot_s'])} and a TTFT of {latency(r['ttft_s'])}")
    if not bool(r["feasible"]):
        return text + f", and fails on {constraint_text(str(r['binding']))}."
    if answer_row is None:
        return text + "."
    return text + (f"; the recommendation serves {answer_row['tokens_per_s_per_card'] / r['tokens_per_s_per_card']:.2f} "
                   f"times that per card, the article's layout being held back by {constraint_text(str(r['binding']))}.")


def latency(seconds) -> str:
    """A latency as a reader reads it: ms below a second, else s; "unbounded" for a saturated prefill."""
    if seconds is None or not math.isfinite(float(seconds)):
        return "unbounded (prefill saturated)"
    x = float(seconds)
    if x >= 1:   # three significant figures in seconds, never an empty ".00"
        return f"{x:,.0f} s" if x >= 100 else f"{x:.1f} s" if x >= 10 else f"{x:.2f} s"
    return f"{1e3 * x:,.1f} ms" if x >= 1e-3 else f"{1e3 * x:.3g} ms"


def ranged(row, col: str, fmt=None) -> str:
    """A row's figure with its 80 % range where the plan gives one (``TPOT 32.0 ms, likely 28.0 ms to 45.0 ms``
    reads ``32.0 ms (likely 28.0 to 45.0 ms)``)."""
    fmt = fmt or latency
    text = fmt(row[col])
    lo, hi = row.get(f"{col}_low") if hasattr(row, "get") else None, row.get(f"{col}_high") if hasattr(row, "get") else None
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return text
    return f"{text} (likely {fmt(lo)} to {fmt(hi)})"


def constraint_text(constraint: str) -> str:
    return CONSTRAINT_TEXT.get(constraint, constraint)


def comparison_row(name: str, r, *, pd_split: bool) -> dict:
    return {"deployment": name, "cards used": int(r["cards"]), "TTFT (ms)": 1e3 * float(r["ttft_s"]),
            "TPOT (ms)": 1e3 * float(r["tpot_s"]), "output tokens/s": float(r["output_tokens_per_s"]),
            "tokens/s per card": float(r["tokens_per_s_per_card"]), "meets every constraint": bool(r["feasible"]),
            "limited by": str(r["binding"])}


class RecommendationText:
    """The sentences and tables of a :class:`pdcalc.plan.recommend.Recommendation` (its fields and properties are
    read as attributes)."""

    def why(self) -> str:
        """One sentence: why this split or co-located layout (or the shortfall when nothing fits)."""
        if self.colocated_wins:
            return colocated_why(aggregated_label(self.aggregated), self.limits())
        if not self.fits:
            return self.reason
        n = self.feasible
        among = ("is the only feasible split evaluated" if n == 1 else
                 f"gives the most output tokens per second per card of the {n:,} feasible splits evaluated")
        return (f"{self.label} {among}; what limits it first is {constraint_text(self.binding)}, "
                f"{self.slack:.0%} from its limit.")
    def targets_note(self) -> str:
        """The targets and where each comes from."""
        t = self.targets
        tpot = f"TPOT at most {latency(t.tpot_s)}" if t.tpot_s else "no TPOT target"
        ttft = f"TTFT at most {latency(t.ttft_s)}" if t.ttft_s else "no TTFT target"
        return f"{tpot[0].upper() + tpot[1:]}: {t.tpot_source}. {ttft[0].upper() + ttft[1:]}: {t.ttft_source}."
    def setting(self) -> str:
        """The model, checkpoint and cluster in words."""
        s = self.setup
        return f"{s.model}, {s.quant}{' with MTP' if s.mtp else ''}, on {s.cards:,} x {get_card(s.card).label}"
    def condition(self) -> str:
        """The workload and the targets in words."""
        w, t = self.workload, self.targets
        load = (f"{w.concurrency:,} sequences in flight" if w.concurrency is not None
                else f"{w.rate_per_s:g} requests per second")
        tpot = f"TPOT at most {latency(t.tpot_s)}" if t.tpot_s else "no TPOT target"
        ttft = f"TTFT at most {latency(t.ttft_s)}" if t.ttft_s else "no TTFT target"
        return f"{load} of {w.prompt_tokens:,} prompt and {w.output_tokens:,} output tokens, {tpot}, {ttft}"
    def headline(self) -> str:
        """The answer in one sentence: what to run (the P/D split, or the co-located layout when it wins), its
        throughput per card and latencies, the article's."""
        if not self.fits and not self.colocated_wins:
            return self.reason
        b, s = self.answer_row, self.setup
        used = (f"all {s.cards:,} cards" if int(b["cards"]) == s.cards
                else f"{int(b['cards']):,} of the {s.cards:,} cards")
        text = (f"run {self.answer_label} on {used}: "
                f"{ranged(b, 'tokens_per_s_per_card', lambda x: f'{float(x):,.0f}')} output tokens/s per card, "
                f"TPOT {ranged(b, 'tpot_s')}, TTFT {ranged(b, 'ttft_s')}")
        if self.colocated_wins and self.fits:
            text += (f" (the best P/D split, {self.label}, gives {self.best['tokens_per_s_per_card']:,.0f} per "
                     f"card)")
        a = self.published_row
        if a is not None:
            text += (f"; the article's {self.published.label} on {int(a['cards']):,} cards gives "
                     f"{a['tokens_per_s_per_card']:,.0f} per card under the same model"
                     + (f" but {self.published_issue}" if self.published_issue else ""))
        return text
    def trade_off(self) -> str:
        """What the recommendation runs (:attr:`answer_row`) against the published deployment, in one or two
        sentences."""
        a, b = self.published_row, self.answer_row
        if a is None:
            return ""
        if b is None:
            return (f"The article's {self.published.label} " + (self.published_issue or "meets every constraint here")
                    + f"; under the same model it serves {a['tokens_per_s_per_card']:,.0f} output tokens/s per card "
                    f"at a TPOT of {latency(a['tpot_s'])}.")
        ratio = b["tokens_per_s_per_card"] / a["tokens_per_s_per_card"]
        cards = int(a["cards"]) - int(b["cards"])
        what = "co-located layout" if self.colocated_wins else "split"
        text = (f"Per card the recommended {what} serves {ratio:.2f} times the article's output tokens/s "
                + (f"on {cards:,} fewer cards" if cards > 0 else f"on {-cards:,} more cards" if cards < 0
                   else "on as many cards")
                + f"; in all it serves {b['output_tokens_per_s'] / a['output_tokens_per_s']:.2f} times the "
                f"article's output tokens/s, at a TPOT of {latency(b['tpot_s'])} against {latency(a['tpot_s'])} and a "
                f"TTFT of {latency(b['ttft_s'])} against {latency(a['ttft_s'])}.")
        if self.published_issue:
            text += f" The article's deployment {self.published_issue}."
        return text + ep_note(self.published_with_ep, self.answer_row, self.published)
    def limit_note(self) -> str:
        """The tightest constraints in one sentence (the shortfall when nothing fits)."""
        if not self.fits:
            return self.reason
        lim = self.limits()
        first = lim.iloc[0]
        text = f"The tightest constraint is {first['what it is']}, {first['slack (%)']:.0f}% from its limit"
        if len(lim) > 1:
            nxt = lim.iloc[1]
            text += f", then {nxt['what it is']} ({nxt['slack (%)']:.0f}%)"
        return text + "; the table lists every constraint with its slack."
    def weights_note(self) -> str:
        """Where each side's weights come from (no final period)."""
        if self.colocated_wins:
            return (f"The co-located layout wins, so the card shown is one of its {int(self.aggregated['size'])}-card "
                    "instances: its weights, its rank's sequences' KV cache plus a prompt's, the larger overhead")
        if not self.fits:
            return "No card to show: nothing fits"
        parts = []
        for role in ("P", "D"):
            log = self.weights_logs.get(role)
            parts.append(f"{role} weights are the engine's logged {log.bytes / GiB:.2f} GiB per card "
                         f"(registry {log.id})" if log else f"{role} weights are pdcalc's (no log of that layout)")
        return "; ".join(parts)
    def launch_note(self) -> str:
        """What the launch settings (:meth:`script`) are, in Markdown: the co-located layout's flags when it wins,
        else both roles of the split."""
        if self.colocated_wins:
            return ("The co-located layout wins here, so prefill and decode share the cards and no KV moves. As the "
                    "engine's multi-node data-parallel tutorial runs it, each node of an instance starts one `vllm "
                    "serve` with its own DP ranks: the first serves the API, the others run `--headless` from their "
                    "`--data-parallel-start-rank`; `--enable-expert-parallel` makes the instance one EP group of DP x "
                    "TP cards, `--max-num-seqs` is its sequences in flight per DP rank and `--max-num-batched-tokens` "
                    "one token per sequence plus the MTP draft's, plus the prompt chunk the planner admits per step. "
                    "Export the variables named in the first lines on every node:")
        return ("As the engine's DeepSeek tutorial deploys a P/D split: each role's `run_dp_template.sh` (the "
                "tutorial's environment and one `vllm serve` per DP rank, P eager, D with its decode graph), one "
                "`launch_online_dp.py` line per node with its first DP rank, and the proxy in front that lists every "
                "rank. `--enable-expert-parallel` makes each instance one EP group of DP x TP cards, and the KV "
                "connector is the tutorial's, the P side producing and the D side consuming. The D side's "
                "`--max-num-seqs` is its sequences in flight per DP rank (within the rank's KV capacity) and its "
                "`--max-num-batched-tokens` one token per sequence plus the MTP draft's; the P side's token budget is "
                "the largest step whose activations fit what a P card books, so a long prompt is prefilled in chunks "
                "of it. Export the variables named in the first lines on every node:")


class RecommendationTables:
    """The tables of a :class:`pdcalc.plan.recommend.Recommendation`: the deployments compared, the memory of
    a P and a D card, every constraint with its slack."""

    def comparison(self) -> pd.DataFrame:
        """The recommended and the published deployment side by side, in the units a reader reads."""
        rows = []
        split = comparison_row(("best P/D split: " if self.colocated_wins else "recommended: ") + self.label,
                               self.best, pd_split=True) if self.fits else None
        if self.aggregated is not None:
            co = comparison_row(("recommended: " if self.colocated_wins else "co-located alternative: ")
                                + aggregated_label(self.aggregated), self.aggregated, pd_split=False)
            rows += [co, split] if self.colocated_wins else [split, co]
        elif split is not None:
            rows.append(split)
        rows = [r for r in rows if r is not None]
        if self.published_row is not None:
            rows.append(comparison_row(f"article: {self.published.label}", self.published_row,
                             pd_split=isinstance(self.published, PDSplit)))
        if self.published_with_ep is not None:
            r = self.published_with_ep
            rows.append(comparison_row(f"article with EP{int(r['cards'])}: {aggregated_label(r)}", r, pd_split=False))
        df = pd.DataFrame(rows, columns=["deployment", "cards used", "TTFT (ms)", "TPOT (ms)", "output tokens/s",
                                         "tokens/s per card", "meets every constraint", "limited by"])
        for col in ("TTFT (ms)", "TPOT (ms)"):
            if not np.isfinite(df[col].to_numpy(dtype=float)).all():
                df[col] = [v if math.isfinite(v) else "unbounded (prefill saturated)" for v in df[col]]
        return df

    def memory(self) -> pd.DataFrame:
        """One P card and one D card of the recommended split, or one card of the co-located layout when that wins,
        in GiB (empty when nothing fits)."""
        if not self.fits and not self.colocated_wins:
            return pd.DataFrame()
        names = {"weights": "weights", "kv_cache": "KV cache in use", "overhead": "activations and framework"}
        rows = {}
        cards = ((("co-located card (GiB)", aggregated_card_plan(self.setup, self.workload, self.aggregated)),)
                 if self.colocated_wins else (("P card (GiB)", self.p_card), ("D card (GiB)", self.d_card)))
        for col, plan_ in cards:
            vals = {names[k]: v / GiB for k, v in plan_.parts.items()}
            vals["headroom"] = plan_.free_bytes / GiB
            vals["usable (utilization x visible memory)"] = plan_.usable_bytes / GiB
            rows[col] = vals
        df = pd.DataFrame(rows).round(2)           # GiB to two decimals, as the engines print them
        df.index.name = "per card"
        return df.reset_index()

    def limits(self) -> pd.DataFrame:
        """Every constraint of the recommendation (the split, or the co-located layout when that wins) with its
        relative slack, the tightest first."""
        if not self.fits and not self.colocated_wins:
            return pd.DataFrame()
        row, names = (self.aggregated, AGG_CONSTRAINTS) if self.colocated_wins else (self.best, CONSTRAINTS)
        rows = [{"constraint": k, "slack (%)": round(100 * float(row[f"slack: {k}"]), 1),
                 "what it is": constraint_text(k)} for k in names if math.isfinite(float(row[f"slack: {k}"]))]
        return pd.DataFrame(rows).sort_values("slack (%)", kind="stable").reset_index(drop=True)
