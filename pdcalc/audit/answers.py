"""What to run instead of each article's deployment: the article's layout and workload as the planner
takes them, and the recommendation for each article's own setting.
"""

from __future__ import annotations

import math

from pdcalc.audit.registry import printed_value
from pdcalc.core.checks import InputError
from pdcalc.layout.deployment import get_deployment
from pdcalc.plan.labels import Colocated, PDSplit, split_label
from pdcalc.plan.launch import TUTORIAL
from pdcalc.plan.recommend import OUTPUT_SHARE, Recommendation, recommend


def v4_article_split() -> PDSplit:
    """The V4 article's "4 x 1P + 1 x 4D" on 64 cards, as the vllm-ascend tutorial launches it."""
    d = get_deployment(TUTORIAL)
    row = {"p_instances": d["prefill_instances"], "p_size": d["prefill_dp"] * d["prefill_tp"], "p_tp": d["prefill_tp"],
           "d_instances": d["decode_instances"], "d_size": d["decode_dp"] * d["decode_tp"], "d_tp": d["decode_tp"]}
    return PDSplit(label=split_label(row), model=d["model"], source=f"{d['label']}; {d['source']}", **row)


def v3_article_layout() -> Colocated:
    """The V3 article's TP=8 x DP=4 on 32 cards (§2.2.4, §2.2.7): replicas without expert parallelism."""
    tp, dp = int(printed_value("v3-2.2.4-tp8")), int(printed_value("v3-2.2.7-dp4"))
    return Colocated(label=f"TP{tp} x DP{dp}, co-located", model="deepseek-v3", tp=tp, dp=dp,
                     source=f"V3 article §2.2.4 and §2.2.7 (TP={tp} + DP={dp}, {tp * dp} cards, experts in every "
                            "replica)")


def published_for(model) -> PDSplit | Colocated | None:
    """The audited article's deployment of ``model`` (V4-Flash: the V4 article's split; V3: the V3
    article's layout), or ``None`` for another model."""
    return {"deepseek-v4-flash": v4_article_split, "deepseek-v3": v3_article_layout}.get(str(model), lambda: None)()


def article_workload(model) -> dict:
    """The workload the audited article sizes its deployment for: ``prompt_tokens``, ``output_tokens``,
    ``concurrency``. V4: scenario B's context (§6.3) and the tutorial's D ``--max-num-seqs`` per DP rank x
    its D ``--data-parallel-size``; V3: the target's context and concurrency (§1.2). The output is
    :data:`OUTPUT_SHARE` of the context (an assumption)."""
    if str(model) == "deepseek-v3":
        ctx, conc = int(printed_value("v3-1.2-target-context")), int(printed_value("v3-1.2-target-concurrency"))
    else:
        d = get_deployment(TUTORIAL)
        ctx, conc = int(printed_value("v4-6.3-b-ctx")), int(d["decode_max_num_seqs"] * d["decode_dp"])
    out = int(round(OUTPUT_SHARE * ctx))
    return {"prompt_tokens": ctx - out, "output_tokens": out, "concurrency": conc}


def article_setup(model) -> dict:
    """How the audited article runs ``model``, as :func:`recommend` arguments: ``cards``, ``quant``,
    ``mtp``, ``tp_options``. V4-Flash: the tutorial's 64 cards, W8A8 checkpoint with MTP, TP 1 on both
    sides. V3: the article's 32 cards, no MTP (the article loads none), TP degrees up to its TP=8; W8A8
    (the Ascend checkpoint, as the V3 throughput chapter), since the article's BF16 weights do not fit."""
    if str(model) == "deepseek-v3":
        layout = v3_article_layout()
        return {"cards": layout.cards, "quant": "w8a8", "mtp": False,
                "tp_options": tuple(2 ** k for k in range(int(math.log2(layout.tp)) + 1))}
    d = get_deployment(TUTORIAL)
    return {"cards": int(d["servers"] * d["cards_per_server"]), "quant": d["quant"],
            "mtp": d["mtp_speculative_tokens"] > 0, "tp_options": tuple(sorted({d["prefill_tp"], d["decode_tp"]}))}


def workload(*, context: int | None = None, output_tokens: int, concurrency: int | None = None,
             rate_per_s: float | None = None) -> dict:
    """:func:`recommend` workload arguments from a chapter's inputs: ``context`` (prompt + output tokens;
    ``None``: the V4 article's scenario B) and a concurrency or a rate (neither: the tutorial's D
    sequences, as :func:`article_workload`)."""
    art = article_workload("deepseek-v4-flash")
    ctx = art["prompt_tokens"] + art["output_tokens"] if context is None else context
    if isinstance(ctx, int) and isinstance(output_tokens, int) and output_tokens >= ctx:
        raise InputError("output_tokens", f"must be smaller than the context, {ctx:,} tokens"
                         + (" (the V4 article's scenario B)" if context is None else "")
                         + f", got {output_tokens:,}: the prompt is the rest of the context")
    load = {"rate_per_s": rate_per_s} if rate_per_s is not None else {
        "concurrency": art["concurrency"] if concurrency is None else concurrency}
    return {"prompt_tokens": ctx - output_tokens, "output_tokens": output_tokens, **load}


def recommend_vs_article(model="deepseek-v4-flash", *args, **kwargs) -> Recommendation:
    """:func:`pdcalc.plan.recommend.recommend`, compared with the audited article's deployment of ``model``
    (:func:`published_for`) unless ``published`` is given."""
    kwargs.setdefault("published", published_for(model))
    return recommend(model, *args, **kwargs)


def article_cases() -> dict[str, "Recommendation"]:
    """The recommendation for each article's own setting, under the defaults of the "what to run" chapter:
    DeepSeek-V4-Flash on the V4 article's cluster and workload (``"v4"``), DeepSeek-V3 on the V3 article's
    (``"v3"``)."""
    v4 = recommend_vs_article("deepseek-v4-flash", **article_workload("deepseek-v4-flash"))
    v3 = recommend_vs_article("deepseek-v3", **article_setup("deepseek-v3"), **article_workload("deepseek-v3"))
    return {"v4": v4, "v3": v3}


def under_the_bound(rec: Recommendation, **kwargs) -> Recommendation:
    """The same recommendation timed by the roofline, the hardware's bound (``kwargs``: what ``rec`` was given,
    as :func:`recommend_vs_article` takes it)."""
    return recommend_vs_article(rec.setup.model, **{**kwargs, "costs": "roofline"})


def verdict_change(served: Recommendation, bound: Recommendation) -> str:
    """Whether the answer depends on the step model, in a sentence: the served model (the default) against the
    roofline, the hardware's bound."""
    def answer(r: Recommendation) -> str | None:
        return r.answer_label if (r.fits or r.colocated_wins) else None

    a, b = answer(served), answer(bound)
    if a is not None and a == b:
        row, brow = served.answer_row, bound.answer_row
        return (f"The roofline, the hardware's bound, picks the same {a}: at its kernels' full speed with no host "
                f"time it would give {brow['tokens_per_s_per_card']:,.0f} output tokens/s per card, against the "
                f"served model's {row['tokens_per_s_per_card']:,.0f}.")
    before = bound.headline()
    return (f"The verdict changes with the step model. Timed by the roofline, the hardware's bound (this page's "
            f"step model before the served one), the answer was: {before}. Timed as benchmark clients measure "
            f"served deployments, " + (f"the answer is {a}." if a is not None else
                                       "nothing on these cards meets the targets at this load."))
