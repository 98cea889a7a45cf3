"""What to run: the P/D split to deploy for a model on a cluster, why, what it costs per card, how it
compares with a published deployment, and the vllm-ascend launch settings that realise it.

:func:`recommend` runs the planner (:func:`pdcalc.plan.search.plan`) under latency targets and takes its best
feasible split: the most output tokens per second per card that meets memory, KV capacity, the
prefill load limit, the TTFT target and the TPOT target. The planner's best co-located layout on the same
cards (:attr:`Recommendation.aggregated`) and which of the two wins (:meth:`Recommendation.mode_note`)
come with it. Beside it, a published deployment is evaluated
under the same model: a P/D split with :func:`pdcalc.plan.splits.evaluate_split`, a co-located layout (prefill
and decode on the same TP x DP replicas, as the V3 article deploys) with :func:`evaluate_colocated`.
Per card, the memory of a P and a D card (:func:`pdcalc.plan.labels.card_plans`) uses an engine's logged weights
where the registry has a log of that exact layout (:func:`pdcalc.reality.weights.logged_weights`) and
pdcalc's inventory otherwise. :class:`Launch` turns the split into the engine's flags for each role.

A deployment that does not fit, or that cannot be evaluated on the card, is a result:
:attr:`Recommendation.reason` starts with "nothing fits:" and names the shortfall.

Default targets (:func:`default_targets`) are published service levels: TPOT from the CloudMatrix384
paper's decode "<50 ms TPOT" (registry ``cloudmatrix384-r1-decode-per-npu-tpot50``), checked against
DeepSeek's own service speed of 20-22 tokens/s per user (``deepseek-prod-h800-decode-per-node``);
no TTFT target, since neither the registry nor the reference notes hold a published TTFT service level.

Source: the planner's model (:mod:`pdcalc.plan.search`, a roofline with assumed efficiencies,
:mod:`pdcalc.perf.step`), the vllm-ascend tutorial ``docs/source/tutorials/models/DeepSeek-V4-Flash.md``
for the flags (deployments.toml ``v4-flash-910b-pd``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from pdcalc.core.errors import PdcalcError
from pdcalc.core.units import GiB
from pdcalc.hardware.cards import get_card
from pdcalc.layout.deployment import get_deployment
from pdcalc.layout.memory import MemoryPlan, card_weights
from pdcalc.model.quant import V4_ASCEND_W8A8
from pdcalc.plan.labels import Colocated, PDSplit, aggregated_label, card_plans, split_label
from pdcalc.plan.launch import TUTORIAL, Launch, colocated_script, launch_script, launches
from pdcalc.plan.roles import seq_kv_bytes, timed_step, weights_log
from pdcalc.plan.search import Plan, plan
from pdcalc.plan.splits import evaluate_split
from pdcalc.plan.views import RecommendationTables, RecommendationText, constraint_text
from pdcalc.plan.workload import Setup, Targets, Workload, default_targets

#: Output tokens as a share of the context where a workload gives only the context: an assumption
#: (neither article gives an output length); the plan chapter's 8,192 of the V4 article's 32,768.
OUTPUT_SHARE = 0.25


# ------------------------------------------------------------------------------------------ targets
# Targets and default_targets live in pdcalc.plan.workload (the planner states its targets
# too) and are imported above: pdcalc.plan.workload.default_targets is the published service level.


# ------------------------------------------------------------------------------------------ published layouts
def _colocated_weights(setup: Setup, layout: Colocated) -> float:
    if layout.ep:
        return card_weights(setup.model, setup.quant, ep=layout.ep, tp=layout.tp, mtp=setup.mtp).total_bytes
    w = card_weights(setup.model, setup.quant, ep=1, tp=layout.tp, mtp=setup.mtp)
    return w.class_ii_bytes + w.class_i_bytes / layout.tp     # every expert, split tp ways (pdcalc.perf.step)


def evaluate_colocated(setup: Setup, work: Workload, layout: Colocated) -> pd.Series:
    """A co-located layout under the planner's model, in the planner's columns.

    Per replica of ``tp`` cards: weights (:func:`_colocated_weights`), the KV cache of its share of the
    sequences (whole on each TP card) and the D overhead against the usable memory; TPOT the decode step
    of the sequences at context ``prompt + output / 2``; TTFT the prefill of one prompt per replica under
    M/M/1 queueing at the load the request rate puts on the replicas (no KV transfer). Decode stalls while
    a replica prefills are not counted, which flatters co-location.
    """
    c = get_card(setup.card)
    base = c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes
    usable = setup.utilization * base
    w = _colocated_weights(setup, layout)
    def tpot_at(s):
        return float(timed_step(setup, tp=layout.tp, dp=layout.dp, ep=layout.ep,
                                context=work.prompt_tokens + work.output_tokens / 2, concurrency=max(s, 1.0),
                                phase="decode").time_s)

    if work.concurrency is not None:
        conc = float(work.concurrency)
        tpot = tpot_at(conc)
        rate = conc / (work.output_tokens * tpot)
    else:
        rate = work.rate_per_s
        conc = rate * work.output_tokens * tpot_at(1.0)
        for _ in range(60):                          # Little's law, as the planner
            conc = rate * work.output_tokens * tpot_at(conc)
        tpot = tpot_at(conc)
    pf = float(timed_step(setup, tp=layout.tp, dp=layout.dp, ep=layout.ep, context=work.prompt_tokens,
                          concurrency=layout.dp, phase="prefill").time_s)
    load = rate / (layout.dp / pf)
    ttft = (pf / (1 - load) if load < 1 else math.inf) + setup.request_s
    kv = conc / layout.dp * float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
    room = usable - w - setup.d_overhead_bytes
    slack = {"memory": (room - kv) / usable, "prefill load": 1 - load / setup.max_load,
             "TTFT": 1 - ttft / work.ttft_s if work.ttft_s else math.inf,
             "TPOT": 1 - tpot / work.tpot_s if work.tpot_s else math.inf}
    fails = [k for k, v in slack.items() if v < 0]
    out_tok = conc / tpot
    return pd.Series({
        "cards": layout.cards, "weights_gib": w / GiB, "kv_gib": kv / GiB, "room_gib": room / GiB,
        "concurrency": conc, "prefill_s": pf, "prefill_load": load, "ttft_s": ttft, "tpot_s": tpot,
        "output_tokens_per_s": out_tok, "tokens_per_s_per_card": out_tok / layout.cards,
        "feasible": not fails, "binding": fails[0] if fails else min(slack, key=slack.get),
        **{f"slack: {k}": v for k, v in slack.items()}})


# ------------------------------------------------------------------------------------------ the recommendation
@dataclass(frozen=True, eq=False)
class Recommendation(RecommendationText, RecommendationTables):
    """The result of :func:`recommend`.

    ``best``: the recommended split (a row of :attr:`Plan.candidates`), ``None`` when nothing fits;
    ``reason``: "" when something fits, else one line starting "nothing fits:";
    ``published`` / ``published_row`` / ``published_note``: the compared deployment, its evaluation
    under the same model (``None`` when it cannot be evaluated) and a line on how it was evaluated or why
    not; ``p_card`` / ``d_card``: memory of one card of each side; ``weights_logs``: per role, the
    :class:`pdcalc.reality.weights.LoggedWeights` that sized it, or ``None`` (pdcalc's inventory);
    ``launch``: the P and D settings."""

    setup: Setup
    workload: Workload
    targets: Targets
    plan: Plan | None
    best: pd.Series | None
    reason: str
    published: PDSplit | Colocated | None
    published_row: pd.Series | None
    published_note: str
    p_card: MemoryPlan | None = None
    d_card: MemoryPlan | None = None
    weights_logs: dict | None = None
    launch: tuple[Launch, Launch] | None = None

    @property
    def published_issue(self) -> str:
        """What the published deployment fails on under the same model ("" when it meets every constraint
        or was not evaluated)."""
        a = self.published_row
        if a is None or a["feasible"]:
            return ""
        if a["binding"] == "memory":
            short = -float(a["slack: memory"]) * self.setup.utilization * _base(self.setup)
            return f"does not fit: a card is short by {short / GiB:,.1f} GiB"
        return f"fails on {constraint_text(str(a['binding']))}"

    @property
    def fits(self) -> bool:
        return self.best is not None

    @property
    def aggregated(self) -> pd.Series | None:
        """The planner's best co-located layout on the same cards under the same targets (a row of
        :attr:`pdcalc.plan.search.Plan.aggregated`), ``None`` when none meets them or nothing was planned."""
        return None if self.plan is None else self.plan.best_aggregated

    def mode_note(self) -> str:
        """Disaggregate or not: which of the planner's two modes wins under the targets, and why (one
        sentence, :attr:`pdcalc.plan.search.Plan.why`); the reason when nothing could be planned."""
        if self.plan is None:
            return self.reason
        why = self.plan.why
        return why[0].upper() + why[1:] + "."

    @property
    def label(self) -> str:
        return split_label(self.best) if self.fits else "nothing fits"

    @property
    def feasible(self) -> int:
        """How many evaluated splits meet every constraint."""
        return 0 if self.plan is None else len(self.plan.ranked)

    @property
    def binding(self) -> str:
        return str(self.best["binding"]) if self.fits else ""

    @property
    def slack(self) -> float:
        """Relative slack of the binding constraint (0: at the limit)."""
        return float(self.best[f"slack: {self.binding}"]) if self.fits else math.nan

    @property
    def published_with_ep(self) -> pd.Series | None:
        """The article's co-located TP x DP made one expert-parallel group over its cards, as the planner's
        co-located option of that size and TP (same model and targets as the recommendation); ``None`` when the
        article's layout is a P/D split, already uses EP, or the planner did not evaluate that option."""
        pub = self.published
        if self.plan is None or self.plan.aggregated is None or not isinstance(pub, Colocated) or pub.ep is not None:
            return None
        a = self.plan.aggregated
        rows = a[(a["size"] == pub.cards) & (a["tp"] == pub.tp) & (a["instances"] == 1)]
        return rows.iloc[0] if len(rows) else None

    @property
    def colocated_wins(self) -> bool:
        """Whether the planner's best co-located layout beats every P/D split under the targets."""
        return self.plan is not None and self.plan.winner == "aggregated" and self.aggregated is not None

    @property
    def answer_row(self) -> pd.Series | None:
        """The row the recommendation runs: the co-located layout when it wins, else the best split."""
        return self.aggregated if self.colocated_wins else self.best

    @property
    def answer_label(self) -> str:
        return aggregated_label(self.aggregated) if self.colocated_wins else self.label

    def script(self, model_path: str = "$MODEL_PATH") -> str:
        """The launch settings as shell lines: the co-located layout's when it wins
        (:func:`colocated_script`), else both roles of the split (:func:`launch_script`); the reason when
        nothing fits."""
        if self.colocated_wins:
            per_node = self.launch[0].cards_per_node if self.launch else None
            return colocated_script(self.setup, self.workload, self.aggregated, model_path, per_node)
        return launch_script(*self.launch, model_path) if self.fits else f"# {self.reason}"


_DEFAULT = object()


def recommend(model="deepseek-v4-flash", quant: str = V4_ASCEND_W8A8, card="ascend-910b2", cards: int = 64, *,
              prompt_tokens: int, output_tokens: int, concurrency: int | None = None,
              rate_per_s: float | None = None, ttft_s=_DEFAULT, tpot_s=_DEFAULT, mtp: bool = True,
              utilization: float = 0.9, tp_options=(1,), measured_weights: bool = True,
              published=None, speculative_tokens: int | None = None, cards_per_node: int | None = None,
              **setup_kw) -> Recommendation:
    """The P/D split to run, why, its memory per card, the published deployment beside it and its flags.

    The defaults are the V4 article's deployment as the vllm-ascend tutorial runs it (deployments.toml
    ``v4-flash-910b-pd``): W8A8 with MTP on 64 x 910B2, ``--gpu-memory-utilization`` 0.9, TP 1.

    Parameters
    ----------
    model, quant, card, cards
        Model preset (or config.json), checkpoint scheme, card preset (or hardware TOML), cluster size.
    prompt_tokens, output_tokens, concurrency, rate_per_s
        The workload (:class:`pdcalc.plan.workload.Workload`: one of ``concurrency`` and ``rate_per_s``).
    ttft_s, tpot_s
        Latency targets in seconds; omitted: :func:`default_targets`; ``None``: no target.
    mtp, utilization, tp_options, **setup_kw
        :class:`pdcalc.plan.workload.Setup` fields.
    measured_weights
        Size a layout's weights from an engine's log where the registry has one for it.
    published
        The deployment to compare with (:class:`PDSplit` or :class:`Colocated`), or ``None``;
        :func:`pdcalc.audit.answers.recommend_vs_article` compares with the audited article's.
    speculative_tokens, cards_per_node
        MTP draft tokens per step and cards per node for the flags; omitted: the tutorial's (MTP only
        when ``mtp``).

    Returns
    -------
    Recommendation
        Invalid inputs raise :class:`pdcalc.core.checks.InputError`; a deployment that does not fit, or a card
        the model cannot be evaluated on, is a result (``reason``).
    """
    defaults = default_targets()
    targets = Targets(ttft_s=defaults.ttft_s if ttft_s is _DEFAULT else ttft_s,
                      tpot_s=defaults.tpot_s if tpot_s is _DEFAULT else tpot_s,
                      ttft_source=defaults.ttft_source if ttft_s is _DEFAULT else "given",
                      tpot_source=defaults.tpot_source if tpot_s is _DEFAULT else "given")
    work = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens, concurrency=concurrency,
                    rate_per_s=rate_per_s, ttft_s=targets.ttft_s, tpot_s=targets.tpot_s)
    tutorial = get_deployment(TUTORIAL)
    spec = (int(tutorial["mtp_speculative_tokens"]) if mtp else 0) if speculative_tokens is None else speculative_tokens
    setup = Setup(model=model, quant=quant, card=card, cards=cards, mtp=mtp, utilization=utilization,
                  tp_options=tuple(tp_options), measured_weights=measured_weights,
                  **{"draft_tokens": spec, **setup_kw})
    per_node = int(tutorial["cards_per_server"]) if cards_per_node is None else cards_per_node
    pub = published
    try:
        result = plan(setup, work, targets=targets)
    except PdcalcError as exc:          # e.g. a card without the FLOP/s of the checkpoint's compute dtype
        return Recommendation(setup, work, targets, None, None, f"nothing fits: it cannot be evaluated: {exc}",
                              pub, None, "not evaluated: the model cannot be evaluated on this card")
    pub_row, pub_note = evaluate_published(setup, work, pub)
    best = result.best
    if best is None:
        return Recommendation(setup, work, targets, result, None, result.reason, pub, pub_row, pub_note)
    p_card, d_card = card_plans(setup, work, best)
    logs = {"P": weights_log(setup, int(best["p_size"]), int(best["p_tp"])),
            "D": weights_log(setup, int(best["d_size"]), int(best["d_tp"]))}
    p_room = p_card.usable_bytes - p_card.parts["weights"] - p_card.parts["overhead"]
    launch = launches(setup, work, best, p_room, spec, per_node)
    return Recommendation(setup, work, targets, result, best, "", pub, pub_row, pub_note, p_card, d_card, logs, launch)


def evaluate_published(setup: Setup, work: Workload, pub) -> tuple[pd.Series | None, str]:
    """The published deployment evaluated under ``setup``, and a line on how (or why not)."""
    if pub is None:
        return None, "no published deployment to compare with"
    if str(setup.model) != pub.model:
        return None, f"not compared: the article deploys {pub.model}, not {setup.model}"
    if pub.cards > setup.cards:
        return None, (f"not compared: the article's {pub.label} needs {pub.cards:,} cards, the cluster has "
                      f"{setup.cards:,}")
    try:
        if isinstance(pub, PDSplit):
            row = evaluate_split(setup, work, p_instances=pub.p_instances, p_size=pub.p_size, p_tp=pub.p_tp,
                                 d_instances=pub.d_instances, d_size=pub.d_size, d_tp=pub.d_tp)
            return row, "evaluated with the planner's model (pdcalc.plan.splits.evaluate_split)"
        row = evaluate_colocated(setup, work, pub)
    except PdcalcError as exc:
        return None, f"not compared: {exc}"
    return row, ("evaluated with the same step model by pdcalc.plan.recommend.evaluate_colocated: its replicas hold "
                 "every expert, which the planner's co-located instances (one expert-parallel group each) do not cover, and "
                 "it leaves out the stalls prefill causes in decode, which the planner's co-located instances count")


def _base(setup: Setup) -> float:
    c = get_card(setup.card)
    return c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes
