"""The articles' most consequential mistakes, most consequential first: the number as printed, the
number its own inputs give, the number the official model and the serving engine give, and what the
correction changes in the article's conclusion.

Every number is computed (the claims registry, the audit modules, :mod:`pdcalc.layout.memory`,
:mod:`pdcalc.model.kv_layout`, :mod:`pdcalc.perf.step`); the ranking is an editorial judgement that follows
the registry's severities (:data:`pdcalc.audit.registry.SEVERITIES`): every entry is an erratum of the
registry, and a ``major`` mistake (it changes which layout the article recommends, or whether it fits)
ranks above a ``moderate`` one (it changes a sizing figure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from pdcalc.audit.claims import get_claim
from pdcalc.audit.registry import printed_value
from pdcalc.core.units import GB, MB, GiB
from pdcalc.model.quant import V4_ASCEND_W8A8


@dataclass(frozen=True)
class Erratum:
    """One mistake: the claim it sits in, and functions that compute the rest."""

    claim_id: str
    kind: str                         # "arithmetic": the number fails its own inputs; "premise": the arithmetic
                                      # holds, an assumption is wrong; "input": a stated figure that is wrong
                                      # (all three are errata of the registry, judged against what is true)
    corrected: Callable[[], str]      # what the article's own inputs give (text with its unit)
    real: Callable[[], str]           # what the official model / engine give
    changes: Callable[[], str]        # what it changes in the conclusion


def _v3_memory_corrected():
    from pdcalc.audit.v3_memory import per_card_all_weights_gib

    return f"{per_card_all_weights_gib():.1f} GiB per card once the experts are counted"


def _v3_memory_real():
    from pdcalc.perf.traffic import weight_bytes_per_card

    tp = printed_value("v3-2.3.3-tp8")
    return (f"{weight_bytes_per_card('deepseek-v3', 'w8a8', tp=tp) / GiB:.1f} GiB of W8A8 weights per card at "
            f"TP{tp} without EP; {weight_bytes_per_card('deepseek-v3', 'w8a8', tp=tp, ep=32) / GiB:.1f} GiB "
            f"with EP32")


def _v3_memory_changes():
    from pdcalc.hardware.cards import get_card

    hbm = get_card("ascend-910b2").hbm_bytes / GiB
    return (f"The recommended TP8 x DP4 cannot load the model on {hbm:.0f} GiB cards: the experts must be spread "
            f"over all cards (expert parallelism), which changes the layout the article recommends.")


def _v3_comm_corrected():
    from pdcalc.audit import v3_tables as v3_deploy

    return f"{v3_deploy.matched_comm_share(8):.1f}% communication at TP8 with the same tokens on both sides"


def v3_tp8_comm_share(phase: str = "prefill") -> float:
    """The book's one definition of the V3 TP8 communication figure: the all-reduce's share of a layer's time,
    all-reduce / (all-reduce + compute), %, for the same tokens on both sides (pdcalc's step model, 910B2, HCCS,
    the article's target context and concurrency); the article's own basis is in pdcalc.audit.v3_tp."""
    from pdcalc.perf.step import layer_times

    compute, ar = layer_times("deepseek-v3", "ascend-910b2", tp=8, context=printed_value("v3-1.2-target-context"),
                              concurrency=printed_value("v3-1.2-target-concurrency"), phase=phase)
    return 100 * ar / (ar + compute)


def _v3_comm_real():
    return (f"the all-reduce is {v3_tp8_comm_share('prefill'):.0f}% of a layer's time in prefill and "
            f"{v3_tp8_comm_share('decode'):.0f}% in decode at TP8 (HCCS, same tokens)")


def v4_kv_phrase(context: int | None = None) -> str:
    """The book's one statement of DeepSeek-V4-Flash's real KV cache (vllm-ascend, 910B): the slope per token plus
    the fixed part per sequence, and the average per token at ``context`` (default: the article's scenario B)."""
    from pdcalc.core.units import KB, MB
    from pdcalc.model.kv_cache import kv_bytes

    n = printed_value("v4-6.3-b-ctx") if context is None else context
    r = kv_bytes("deepseek-v4-flash", n, "vllm-ascend")
    return (f"{r.per_token_bytes_asymptotic / KB:.2f} KB per token plus {r.fixed_bytes / MB:.1f} MB per sequence "
            f"({r.per_token_bytes_average / KB:.2f} KB per token on average at {n:,} tokens; vllm-ascend, 910B)")


def _v4_kv_real():
    return v4_kv_phrase()


def _v4_kv_changes():
    from pdcalc.audit import budgets
    from pdcalc.layout.memory import ep_sweep
    from pdcalc.model.kv_cache import article_kv_bytes, kv_bytes, sequences_that_fit

    ctx = printed_value("v4-6.2-max-model-len")
    seqs = printed_value("v4-6.2-d-seqs")
    d_ep = printed_value("v4-6.5-d-dp")
    n_art = int(budgets.d_plan("A").room_bytes() // article_kv_bytes(ctx, budgets.kb_per_token()))
    overhead = (printed_value("v4-6.3-d-act") + printed_value("v4-6.3-d-framework")) * GB
    sizes = [2 ** k for k in range(1, d_ep.bit_length())]
    sw = ep_sweep("deepseek-v4-flash", V4_ASCEND_W8A8, "ascend-910b2", sizes, activation_bytes=overhead)
    fit = {int(r.ep): sequences_that_fit(max(r.kv_room_bytes, 0.0), ctx, "deepseek-v4-flash") for r in sw.itertuples()}
    smallest = min((ep for ep, n in fit.items() if n >= seqs), default=d_ep)
    n = printed_value("v4-7.2-input-tokens")
    transfer = kv_bytes("deepseek-v4-flash", n, "vllm-ascend").total_bytes
    smaller = (f"a D instance of {smallest} cards instead of {d_ep} would hold them" if smallest < d_ep else
               f"no smaller D instance than its {d_ep} cards would hold them")
    return (f"A D card holds {fit[d_ep]} sequences of {ctx:,} tokens, not {n_art}: the scheduler's max-num-seqs "
            f"({seqs}), not memory, limits decode, and {smaller}. A prompt of {n:,} tokens moves {transfer / MB:.1f} MB from P to D, not "
            f"{printed_value('v4-7.2-kv-transfer'):g} MB.")


def _v4_scenario_b_changes():
    from pdcalc.audit import budgets

    return (f"The 'close to the limit' long-context scenario is over the {budgets.article_usable_gb():.1f} GB "
            f"budget by {-budgets.d_plan('B').free_bytes / GB:.2f} GB on its own inputs: vLLM would not run it.")


def _v4_scenario_b_real():
    from pdcalc.audit import budgets
    from pdcalc.layout.memory import card_plan
    from pdcalc.model.kv_cache import kv_bytes

    s = budgets.scenarios()["B"]
    kv = s.seqs * kv_bytes("deepseek-v4-flash", s.context_tokens, "vllm-ascend").total_bytes
    d = card_plan("D", "deepseek-v4-flash", V4_ASCEND_W8A8, "ascend-910b2", ep=32, kv_cache_bytes=kv,
                  activation_bytes=printed_value("v4-6.3-d-act") * GB,
                  framework_bytes=printed_value("v4-6.3-d-framework") * GB)
    return f"{d.total_bytes / GB:.2f} GB with the real weights and cache: {d.verdict(GB, 'GB')}"


def _v4_class_ii_real():
    from pdcalc.layout.memory import card_weights

    w = card_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=8, mtp=True)
    return f"{w.class_ii_bytes / GB:.2f} GB per card (W8A8, MTP module loaded)"


def _v4_class_ii_changes():
    from pdcalc.layout.memory import budget, card_weights
    from pdcalc.reality.weights import logged_weights

    w = card_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=8, mtp=True)
    over = dict(activation_bytes=printed_value("v4-6.2-p-act") * GB, overhead_bytes=printed_value("v4-6.2-p-framework") * GB)
    b = budget("ascend-910b2", w.total_bytes, **over)
    log = logged_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=8, mtp=True)
    logged = budget("ascend-910b2", log.bytes, **over)
    return (f"Every card carries more replicated weight: with pdcalc's weights a P card has {b.kv_bytes / GiB:.1f} GiB "
            f"to spare, and with the {log.bytes / GiB:.1f} GiB the engine logged for this layout "
            f"{logged.kv_bytes / GiB:.1f} GiB, not the article's {printed_value('v4-6.2-p-free')} GB "
            f"({printed_value('v4-6.2-p-free') * GB / GiB:.1f} GiB).")


def _v4_p_kv_corrected():
    from pdcalc.audit import budgets
    from pdcalc.model.kv_cache import article_kv_bytes

    ctx = printed_value("v4-6.2-max-model-len")
    kb = budgets.kb_per_token()
    return f"{article_kv_bytes(ctx, kb) / GB:.2f} GB for one {ctx:,}-token prompt at {kb:g} KB/token"


def _v4_p_kv_real():
    from pdcalc.model.kv_cache import kv_bytes

    ctx = printed_value("v4-6.2-max-model-len")
    return f"{kv_bytes('deepseek-v4-flash', ctx, 'vllm-ascend').total_bytes / GB:.2f} GB for the same prompt"


def _v3_hbm_corrected():
    from pdcalc.hardware.cards import get_card

    n = round(get_card("ascend-910b2").hbm_bytes / GiB)
    return f"{n} GB of 10^9 bytes converted to GiB gives {n * GB / GiB:.1f}; the card has {n} GiB"


def _v3_hbm_real():
    from pdcalc.hardware.cards import get_card

    c = get_card("ascend-910b2")
    return f"{c.hbm_bytes / GiB:.0f} GiB installed, {c.usable_base_bytes / GiB:.2f} GiB visible to the runtime"


def _v3_latency_corrected():
    users = printed_value("v3-2.2.8-concurrency")
    return (f"{1e3 * users / get_claim('v3-2.2.7-expected-throughput-32').recomputed:.2f} ms between two tokens of "
            f"a user at the article's own 32-card throughput")


def _v3_latency_real():
    from pdcalc.perf.step import step

    st = step("deepseek-v3", "ascend-910b2", tp=8, dp=4, ep=32, context=printed_value("v3-1.2-target-context"),
              concurrency=printed_value("v3-1.2-target-concurrency"), phase="decode")
    return f"{1e3 * float(st.time_s):.1f} ms per decode step (TP8 x DP4, EP32; memory-bound)"


ERRATA: tuple[Erratum, ...] = (
    Erratum("v3-2.3.3-per-card-total", "premise", _v3_memory_corrected, _v3_memory_real, _v3_memory_changes),
    Erratum("v4-6.1-kv-conservative", "input",
            lambda: "an estimate, not derived: no per-token figure follows from its own inputs", _v4_kv_real,
            _v4_kv_changes),
    Erratum("v4-6.3-b-total", "arithmetic", lambda: f"{get_claim('v4-6.3-b-total').recomputed:.2f} GB", _v4_scenario_b_real,
            _v4_scenario_b_changes),
    Erratum("v3-2.2.2-tp8-overhead-pct", "arithmetic", _v3_comm_corrected, _v3_comm_real,
            lambda: "The case against large TP rests on comparing a few tokens of compute with the communication "
                    "of a whole batch; on one basis TP8's all-reduce is a fraction of its compute, to be weighed, "
                    "not a reason on its own."),
    Erratum("v4-5.2.7-nonsplit-bytes", "arithmetic", lambda: f"{get_claim('v4-5.2.7-nonsplit-bytes').recomputed:.2f} GB",
            _v4_class_ii_real, _v4_class_ii_changes),
    Erratum("v4-6.2-p-kv", "premise", _v4_p_kv_corrected, _v4_p_kv_real,
            lambda: "A P card keeps a whole prompt's cache while it is prefilled in chunks, not one batch's: "
                    "long prompts need headroom on P."),
    Erratum("v3-2.2.8-latency-target-32", "input", _v3_latency_corrected, _v3_latency_real,
            lambda: "The latency target and the throughput target cannot both hold: decode is memory-bound."),
    Erratum("v3-1.2-hbm-per-card", "input", _v3_hbm_corrected, _v3_hbm_real,
            lambda: "Every per-card budget of the V3 article starts from the wrong capacity."),
)


def errata_table() -> pd.DataFrame:
    """The errata, most consequential first: ``article, id, section, quantity, severity, mistake, printed,
    own inputs give, official model and engine give, what it changes`` (severity from the registry)."""
    rows = []
    for rank, e in enumerate(ERRATA, 1):
        c = get_claim(e.claim_id)
        rows.append({"rank": rank, "article": c.article, "id": c.id, "section": c.section, "quantity": c.quantity,
                     "severity": c.severity, "mistake": e.kind, "printed": c.printed,
                     "its own inputs give": e.corrected(), "official model / engine": e.real(),
                     "what it changes": e.changes()})
    return pd.DataFrame(rows).set_index("rank")
