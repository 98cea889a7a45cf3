"""Recomputations for the V4 article's KV cache and memory budgets (§6.1-6.5).

The article's memory model, rebuilt from its own inputs: weights from its own shapes at one byte per
parameter (:func:`pdcalc.audit.per_card.article_card`), a KV cache of a constant 44 KB per token
(:func:`pdcalc.model.kv_cache.article_kv_bytes`, 1 KB = 1000 B as its "4096 x 44KB = 180 MB" shows),
activations and framework overhead as it states them, against 64 GB x 0.9 = 57.6 GB.

Two figures are judged against what is true rather than against their own arithmetic: the 44 KB per
token itself, a stated assumption about the real model, against what vllm-ascend stores
(:func:`pdcalc.model.kv_cache.kv_bytes`); and the P card's KV peak, whose premise (one batch's tokens) leaves
out the prompt a P card keeps while it prefills it in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial

from pdcalc.audit.architecture import class_ii_why
from pdcalc.audit.per_card import (D_EP, P_EP, art_hbm_gb, art_ii_gb, article_card, article_usable_gb, card_why,
                                   class_ii_gb, experts_card, routed_card_gb, tutorial_deployment, weight_card_gb)
from pdcalc.audit.registry import printed_value, recomputes, registered_by
from pdcalc.core.units import GB, KB, MB
from pdcalc.layout.memory import MemoryPlan, memory_plan
from pdcalc.model.config import load_config
from pdcalc.model.kv_cache import article_kv_bytes, kv_bytes

V4 = "deepseek-v4-flash"


def kb_per_token() -> float:
    """The article's working KV figure, KB per token (§6.1 "保守估计", used in §6.2-7.2)."""
    return printed_value("v4-6.1-kv-conservative")


def article_kv_gb(seqs: int, tokens: int) -> float:
    """The article's KV cache for ``seqs`` sequences of ``tokens`` tokens, GB (44 KB x 1000 B per token)."""
    return seqs * article_kv_bytes(tokens, kb_per_token()) / GB


# ---- §6.1 the per-token figures ------------------------------------------------------------------
@cache
def _v4():
    return load_config(V4)


#: The engine of the article's deployment (vllm-ascend on Atlas 800I A2).
ENGINE = "vllm-ascend"


def real_kv_per_token_kb() -> float:
    """Bytes per added token of context as vllm-ascend stores DeepSeek-V4-Flash on 910B (the slope of
    :func:`pdcalc.model.kv_cache.kv_bytes`, MTP layer included), KB of 1000 B."""
    return kv_bytes(V4, 1, ENGINE).per_token_bytes_asymptotic / KB


def real_kv_average_kb(tokens: int) -> float:
    """The same cache averaged over a sequence of ``tokens`` tokens (windows and compressor states
    included), KB of 1000 B per token."""
    return kv_bytes(V4, tokens, ENGINE).per_token_bytes_average / KB


def article_contexts() -> dict[str, int]:
    """The contexts the article multiplies its 44 KB by, by where it does."""
    return {"§6.2's P batch": printed_value("v4-6.2-batched-tokens"), "§7.2's prompt": printed_value("v4-7.2-input-tokens"),
            "§6.3's scenario A": printed_value("v4-6.3-a-ctx"), "scenario B": printed_value("v4-6.3-b-ctx"),
            "scenario C": printed_value("v4-6.3-c-ctx"), "max-model-len": printed_value("v4-6.2-max-model-len")}


def _kv_token_why():
    c = _v4()
    fixed = kv_bytes(V4, 1, ENGINE).fixed_bytes
    ratios = c.compress_ratios[:c.num_hidden_layers]
    avgs = [f"{real_kv_average_kb(n):.2f} KB at {n:,} tokens ({where})" for where, n in article_contexts().items()]
    avgs = ", ".join(avgs[:-1]) + " and " + avgs[-1]
    ref = kv_bytes(V4, 1, "reference").per_token_bytes_asymptotic / KB
    return (f"vllm-ascend stores DeepSeek-V4-Flash on 910B with {real_kv_per_token_kb():.2f} KB per token of context "
            f"on top of {fixed / MB:.1f} MB per sequence for the sliding windows and compressor states; averaged "
            f"per token that is {avgs}. The reference implementation stores {ref:.2f} KB per token. "
            f"{kb_per_token():g} KB is {c.num_hidden_layers} layers x {_entry_kb() * KB:,.0f} B = "
            f"{c.num_hidden_layers * _entry_kb():.1f} KB, a raw BF16 entry for every token on every layer: it leaves "
            f"out the compression the same section describes ({sum(1 for r in ratios if r == 4)} layers keep one "
            f"entry per 4 tokens, {sum(1 for r in ratios if r == 128)} one per 128, and raw entries only for the "
            f"last {c.sliding_window} tokens).")


def _kv_optimistic_why():
    long = printed_value("v4-6.1-ctx-1m")
    fixed = kv_bytes(V4, 1, ENGINE).fixed_bytes
    return (f"At long contexts, where the article expects compression to pay most, the cache tends to its slope: "
            f"vllm-ascend stores DeepSeek-V4-Flash on 910B with {real_kv_per_token_kb():.2f} KB per added token on top "
            f"of {fixed / MB:.1f} MB per sequence, {real_kv_average_kb(long):.2f} KB per token on average at the "
            f"{long:,} tokens of the technical report's comparison. Even the optimistic figure is "
            f"{printed_value('v4-6.1-kv-optimistic') / real_kv_per_token_kb():.1f}x what is stored.")


recomputes("v4-6.1-kv-conservative",
           method="kv_bytes(deepseek-v4-flash, vllm-ascend, 910B): bytes per added token of context, KB (1 KB = 1000 B)",
           why=_kv_token_why)(real_kv_per_token_kb)
recomputes("v4-6.1-kv-optimistic",
           method="kv_bytes(deepseek-v4-flash, vllm-ascend, 910B): bytes per added token of context, KB (1 KB = 1000 B)",
           why=_kv_optimistic_why)(real_kv_per_token_kb)

recomputes("v4-6.1-kv-latent-bytes", method="article: 512 dims x 2 B = 1,024 B, KB")(
    lambda: printed_value("v4-6.1-kv-latent-dim") * printed_value("v4-6.1-kv-bytes-elem") / KB)


def _rope_why():
    c = _v4()
    return (f"V4 has no separate RoPE part: the rotary dimensions are the last {c.qk_rope_head_dim} "
            f"(qk_rope_head_dim) of the {c.head_dim}-dim KV entry itself (reference model.py applies RoPE to "
            f"kv[..., -rd:]). Counted apart they would be {c.qk_rope_head_dim * 2} B, not a second 512 dims.")


recomputes("v4-6.1-rope-bytes", method="official config: qk_rope_head_dim x 2 B, KB", why=_rope_why)(
    lambda: _v4().qk_rope_head_dim * printed_value("v4-6.1-kv-bytes-elem") / KB)
recomputes("v4-6.1-rope-dim", method="official config.json: qk_rope_head_dim", why=_rope_why)(
    lambda: _v4().qk_rope_head_dim)
recomputes("v4-6.1-kv-latent-dim", method="official config.json: head_dim (one KV entry)")(lambda: _v4().head_dim)


def _entry_kb():
    return _v4().head_dim * printed_value("v4-6.1-kv-bytes-elem") / KB


def _layer_why():
    return (f"One uncompressed V4 KV entry is head_dim = {_v4().head_dim} values with RoPE inside, "
            f"{_entry_kb() * KB:,.0f} B in BF16 (~1 KB, not ~2 KB): " + _rope_why().split(": ", 1)[1])


recomputes("v4-6.1-kv-layer", method="official config: head_dim x 2 B per token per layer, KB", why=_layer_why)(
    _entry_kb)


def _upper_why():
    c = _v4()
    return (f"{c.num_hidden_layers} layers x {_entry_kb() * KB:,.0f} B = {c.num_hidden_layers * _entry_kb():.1f} "
            f"KB per token would be the bound for an uncompressed BF16 cache (the RoPE part is inside the entry), "
            f"not {printed_value('v4-6.1-kv-upper'):g} KB. By coincidence that bound is the article's own "
            f"'conservative estimate' of {kb_per_token():g} KB.")


recomputes("v4-6.1-kv-upper", method="official config: layers x head_dim x 2 B, KB", why=_upper_why)(
    lambda: _v4().num_hidden_layers * _entry_kb())


# ---- §6.2 P card -----------------------------------------------------------------------------------
def p_kv_gb() -> float:
    """P-card peak KV: max-num-batched-tokens x 44 KB, GB."""
    return article_kv_gb(1, printed_value("v4-6.2-batched-tokens"))


def article_parts(side: str, kv_gb: float, ep: int | None = None) -> dict:
    """The article's parts of one card's memory, GB: weights (own shapes, EP group ``ep``, default the
    side's), KV, activations, framework."""
    side_ep, sec = (P_EP, "6.2-p") if side == "p" else (D_EP, "6.3-d")
    return {"weights": article_card(ep or side_ep).total_bytes / GB, "kv_cache": kv_gb,
            "activations": printed_value(f"v4-{sec}-act"), "framework": printed_value(f"v4-{sec}-framework")}


def article_plan(side: str, kv_gb: float, label: str = "", ep: int | None = None) -> MemoryPlan:
    """The article's memory plan of a P (``side="p"``) or D card with ``kv_gb`` of KV cache, in bytes;
    percentages are of its 64 GB."""
    parts = {k: v * GB for k, v in article_parts(side, kv_gb, ep).items()}
    return memory_plan(label or side.upper(), usable_bytes=article_usable_gb() * GB,
                       capacity_bytes=printed_value("v4-6.2-card-hbm") * GB, **parts)


def p_plan() -> MemoryPlan:
    return article_plan("p", p_kv_gb(), "P")


def sum_why(plan_fn, printed_parts: tuple[str, ...], what: str):
    def why():
        plan = plan_fn()
        parts = " + ".join(f"{v / GB:.2f}" for v in plan.parts.values())
        printed = sum(printed_value(i) for i in printed_parts)
        return (f"Its printed parts add up ({printed:.1f}); recomputed from its own inputs the {what} is {parts} = "
                f"{plan.total_bytes / GB:.2f} GB: the weights carry the {art_ii_gb():g} GB class-II error"
                + ".")
    return why


recomputes("v4-6.2-usable-mem", "v4-6.3-usable-mem", method="the article's 64 x 0.9 (its own inputs)")(
    article_usable_gb)
recomputes("v4-6.2-p-weight-card", "v4-6.4-p-weight-card", "v4-6.5-p-weight-card",
           method="card_weights(article, 1 B, ep=8).total_bytes, GB", why=card_why("p"))(
    partial(weight_card_gb, P_EP))
recomputes("v4-6.3-d-weight-card", "v4-6.4-d-weight-card", "v4-6.5-d-weight-card",
           method="card_weights(article, 1 B, ep=32).total_bytes, GB", why=card_why("d"))(
    partial(weight_card_gb, D_EP))
recomputes("v4-6.2-p-experts-card", method="place_experts(256, 8): experts on the fullest card")(
    partial(experts_card, P_EP))
recomputes("v4-6.3-d-experts-card", "v4-6.5-d-experts-card",
           method="place_experts(256, 32): experts on the fullest card")(
    partial(experts_card, D_EP))
recomputes("v4-6.2-p-routed-card", "v4-6.4-p-routed-card", method="card_weights(article, 1 B, ep=8).class_i_bytes, GB")(
    partial(routed_card_gb, P_EP))
recomputes("v4-6.3-d-routed-card", "v4-6.4-d-routed-card",
           method="card_weights(article, 1 B, ep=32).class_i_bytes, GB")(partial(routed_card_gb, D_EP))
recomputes("v4-6.2-nonsplit-bytes", "v4-6.3-nonsplit-bytes", "v4-6.4-p-nonsplit", "v4-6.4-d-nonsplit",
           method="article shapes: class-II bytes per card (1 B per parameter), GB", why=class_ii_why)(
    class_ii_gb)
recomputes("v4-6.4-routed-ratio", method="P / D routed-expert bytes per card")(
    lambda: routed_card_gb(P_EP) / routed_card_gb(D_EP))
recomputes("v4-6.4-nonsplit-ratio", method="P / D class-II bytes per card (replicated)")(
    lambda: article_card(P_EP).class_ii_bytes / article_card(D_EP).class_ii_bytes)
recomputes("v4-6.4-weight-ratio", method="P / D total weight per card (article shapes)",
           why=lambda: f"With the article's own class II the ratio is "
                       f"{article_card(P_EP).total_bytes / article_card(D_EP).total_bytes:.2f}, not "
                       f"{printed_value('v4-6.4-weight-ratio'):g}.")(
    lambda: weight_card_gb(P_EP) / weight_card_gb(D_EP))

def p_prompt_kv_gb() -> float:
    """A P card's KV cache while it prefills one prompt of max-model-len tokens, at the article's
    44 KB per token, GB: chunked prefill processes max-num-batched-tokens at a time, and each chunk
    attends to the cache of every chunk before it, so the whole prompt's cache is resident by the last."""
    return article_kv_gb(1, printed_value("v4-6.2-max-model-len"))


def _p_kv_why():
    n, ctx = printed_value("v4-6.2-batched-tokens"), printed_value("v4-6.2-max-model-len")
    real = kv_bytes(V4, ctx, ENGINE).total_bytes / GB
    return (f"{n:,} x {kb_per_token():g} KB = {p_kv_gb():.2f} GB is one batch's tokens, but a P card keeps a "
            f"prompt's whole cache while it prefills it {n:,} tokens at a time: every chunk attends to all the "
            f"tokens before it, so the prompt's cache stays resident until its last chunk. One prompt of max-model-len "
            f"{ctx:,} tokens needs {p_prompt_kv_gb():.2f} GB at {kb_per_token():g} KB/token, {real:.2f} GB as "
            f"vllm-ascend stores DeepSeek-V4-Flash.")


recomputes("v4-6.2-p-kv", method="article's 44 KB x one max-model-len prompt (resident during chunked prefill), GB",
           why=_p_kv_why)(p_prompt_kv_gb)
recomputes("v4-6.2-p-kv-mb", method="article's 44 KB x one max-model-len prompt (resident during chunked prefill), MB",
           why=_p_kv_why)(lambda: p_prompt_kv_gb() * GB / MB)
recomputes("v4-6.2-d-kv-max", method="article: max-num-seqs 30 x max-model-len 135,000 x 44 KB, GB")(
    lambda: article_kv_gb(printed_value("v4-6.2-d-seqs"), printed_value("v4-6.2-max-model-len")))
recomputes("v4-6.2-p-used", "v4-6.4-p-total", method="article parts: weights (own shapes) + KV + 2.0 + 1.5, GB",
           why=sum_why(p_plan, ("v4-6.2-p-weight-card", "v4-6.2-p-kv", "v4-6.2-p-act", "v4-6.2-p-framework"),
                        "P total"))(lambda: p_plan().total_bytes / GB)
recomputes("v4-6.2-p-free", method="article: 57.6 - P total, GB",
           why=lambda: f"{article_usable_gb():g} - {p_plan().total_bytes / GB:.2f} = {p_plan().free_bytes / GB:.2f} GB: "
                       f"the P total carries the {art_ii_gb():g} GB class-II error.")(lambda: p_plan().free_bytes / GB)


# ---- §6.3 D card scenarios ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    """One D-card scenario of §6.3: concurrent sequences x context tokens (as the article states them)."""

    name: str
    seqs: int
    context_tokens: int
    printed_kv_id: str


def scenarios() -> dict[str, Scenario]:
    """Scenarios A-D of §6.3, inputs read from the registry; D halves C's concurrency ("减半并发")."""
    c_seqs = printed_value("v4-6.3-c-seqs")
    return {
        "A": Scenario("A", printed_value("v4-6.3-a-seqs"), printed_value("v4-6.3-a-ctx"), "v4-6.3-a-kv"),
        "B": Scenario("B", printed_value("v4-6.3-b-seqs"), printed_value("v4-6.3-b-ctx"), "v4-6.3-b-kv"),
        "C": Scenario("C", c_seqs, printed_value("v4-6.3-c-ctx"), "v4-6.3-c-kv"),
        "D": Scenario("D", c_seqs // 2, printed_value("v4-6.3-d-ctx"), "v4-6.3-d-kv"),
    }


def scenario_kv_gb(name: str) -> float:
    s = scenarios()[name]
    return article_kv_gb(s.seqs, s.context_tokens)


def d_plan(name: str) -> MemoryPlan:
    """The article's D-card plan in scenario ``name`` (A-D)."""
    return article_plan("d", scenario_kv_gb(name), f"D, scenario {name}")


def kv_why(name: str, claim_id: str | None = None):
    def why():
        s = scenarios()[name]
        k = s.context_tokens // 1024
        printed = printed_value(claim_id or s.printed_kv_id)
        as_1000 = article_kv_gb(s.seqs, k * 1000)
        return (f"Unit slip: {s.seqs} x {s.context_tokens:,} x {kb_per_token():g} KB = {scenario_kv_gb(name):.2f} GB; the printed "
                f"{printed} GB follows {s.seqs} x {k * 1000:,} x {kb_per_token():g} KB = {as_1000:.2f} GB, i.e. {k}K read as "
                f"{k * 1000:,} tokens while the formula prints {s.context_tokens:,}.")
    return why


for _n in "ABCD":
    recomputes(scenarios()[_n].printed_kv_id, method=f"article: scenario {_n} seqs x context x 44 KB, GB",
               why=kv_why(_n))((lambda n: lambda: scenario_kv_gb(n))(_n))
recomputes("v4-6.3-d-seqs-d", method="scenario C's 30 sequences halved")(lambda: scenarios()["D"].seqs)


def total_why(name: str):
    def why():
        p = d_plan(name)
        parts = " + ".join(f"{v / GB:.2f}" for v in p.parts.values())
        over = (f" Over the {p.usable_bytes / GB:.1f} GB that utilisation {printed_value('v4-6.2-mem-util'):g} allows by {-p.free_bytes / GB:.2f} GB."
                if not p.fits else "")
        return (f"From its own inputs: {parts} = {p.total_bytes / GB:.2f} GB; the weights carry the {art_ii_gb():g} GB "
                f"class-II error and the printed KV reads 'K' as 1000 tokens." + over)
    return why


recomputes("v4-6.3-a-total", "v4-6.4-d-total-a", method="article: D weights + scenario A KV + 2.0 + 2.0, GB",
           why=total_why("A"))(lambda: d_plan("A").total_bytes / GB)
recomputes("v4-6.3-b-total", "v4-6.4-d-total-b", method="article: D weights + scenario B KV + 2.0 + 2.0, GB",
           why=total_why("B"))(lambda: d_plan("B").total_bytes / GB)
recomputes("v4-6.3-dd-total", method="article: D weights + scenario D KV + 2.0 + 2.0, GB", why=total_why("D"))(
    lambda: d_plan("D").total_bytes / GB)


# ---- §6.4 ratios ------------------------------------------------------------------------------------
def range_why():
    return (f"Scenario B is {scenario_kv_gb('B'):.2f} GB on its own inputs: 32K was computed as 32,000 tokens "
            f"while the formula prints 32,768.")


recomputes("v4-6.4-d-kv-range", method="article: scenarios A ~ B KV per D card, GB", why=range_why)(
    lambda: (scenario_kv_gb("A"), scenario_kv_gb("B")))
recomputes("v4-6.4-kv-ratio", method="article: P KV / D KV (scenario B)",
           why=lambda: f"{p_kv_gb():.3f} / {scenario_kv_gb('B'):.2f} = {p_kv_gb() / scenario_kv_gb('B'):.4f}; "
                       f"against scenario A, the 'typical' case of the totals row, it is "
                       f"{p_kv_gb() / scenario_kv_gb('A'):.4f}.")(lambda: p_kv_gb() / scenario_kv_gb("B"))
recomputes("v4-6.4-act-ratio", method="article: P / D activations (its inputs)")(
    lambda: printed_value("v4-6.4-p-act") / printed_value("v4-6.4-d-act"))
recomputes("v4-6.4-framework-ratio", method="article: P / D framework overhead (its inputs)")(
    lambda: printed_value("v4-6.4-p-framework") / printed_value("v4-6.4-d-framework"))


def _ratio_why(name):
    return lambda: (f"{p_plan().total_bytes / GB:.2f} / {d_plan(name).total_bytes / GB:.2f} = "
                    f"{p_plan().total_bytes / d_plan(name).total_bytes:.3f} from the recomputed totals.")


recomputes("v4-6.4-total-ratio-a", method="article: P total / D total (scenario A)", why=_ratio_why("A"))(
    lambda: p_plan().total_bytes / d_plan("A").total_bytes)
recomputes("v4-6.4-total-ratio-b", method="article: P total / D total (scenario B)", why=_ratio_why("B"))(
    lambda: p_plan().total_bytes / d_plan("B").total_bytes)


def util_why():
    return (f"Percent of {art_hbm_gb():g} GB, not of the {article_usable_gb():g} GB budget: P {p_plan().total_bytes / GB:.2f} GB is "
            f"{100 * p_plan().total_bytes / p_plan().capacity_bytes:.1f}%, D scenario B "
            f"{d_plan('B').total_bytes / GB:.2f} GB is {100 * d_plan('B').total_bytes / d_plan('B').capacity_bytes:.1f}% "
            f"of {art_hbm_gb():g} GB but {100 * d_plan('B').total_bytes / d_plan('B').usable_bytes:.1f}% of what the engine may use.")


recomputes("v4-6.4-p-util", method="article: P total / 64 GB, %", why=util_why)(
    lambda: 100 * p_plan().total_bytes / p_plan().capacity_bytes)
recomputes("v4-6.4-d-util", method="article: D totals (scenarios A ~ B) / 64 GB, %", why=util_why)(
    lambda: tuple(100 * d_plan(n).total_bytes / d_plan(n).capacity_bytes for n in "AB"))


# ---- §6.5 the percentage bars --------------------------------------------------------------------
_P_PCT = {"weight": "weights", "kv": "kv_cache", "act": "activations", "framework": "framework", "free": "free"}


def _pct_why(side, key):
    def why():
        plan = p_plan() if side == "p" else d_plan("B")
        share = 100 * plan.shares()[_P_PCT[key]]
        if key == "free" and side == "d":
            return (f"Scenario B needs {plan.total_bytes / GB:.2f} GB, more than the {plan.usable_bytes / GB:.1f} GB "
                    f"that utilisation {printed_value('v4-6.2-mem-util'):g} allows: nothing is free ({share:.1f}% of "
                    f"{art_hbm_gb():g} GB). The printed {printed_value('v4-6.5-d-free-pct'):g}% is {art_hbm_gb():g} GB "
                    f"minus the total, i.e. the 10% the engine keeps back counted as free; P's 21% is taken "
                    f"against {article_usable_gb():g} GB instead.")
        return f"{share:.1f}% of {art_hbm_gb():g} GB from the recomputed parts (weights carry the class-II error)."
    return why


#: The bars whose recomputation differs from the print (the others match: their parts are inputs).
_PCT_EXPLAINED = {("p", "weight"), ("p", "free"), ("d", "weight"), ("d", "kv"), ("d", "free")}
for _side in "pd":
    for _key in _P_PCT:
        recomputes(f"v4-6.5-{_side}-{_key}-pct",
                   method=f"article: {'P' if _side == 'p' else 'D scenario B'} {_P_PCT[_key]} / 64 GB, %",
                   why=_pct_why(_side, _key) if (_side, _key) in _PCT_EXPLAINED else "")(
            (lambda s, k: lambda: 100 * (p_plan() if s == "p" else d_plan("B")).shares()[_P_PCT[k]])(_side, _key))


def d_overhead_gb() -> float:
    return printed_value("v4-6.3-d-act") + printed_value("v4-6.3-d-framework")


def d_kv_space_gb() -> float:
    """§6.5 "释放43GB给KV Cache": 57.6 GB minus the D weights (activations and framework not subtracted)."""
    return article_usable_gb() - article_card(D_EP).total_bytes / GB


recomputes("v4-6.5-d-kv-space", method="article: 57.6 - D weights (own shapes), GB",
           why=lambda: f"{article_usable_gb():g} - {article_card(D_EP).total_bytes / GB:.2f} = {d_kv_space_gb():.2f} GB; the "
                       f"activations and framework ({d_overhead_gb():.1f} GB by §6.3) are not subtracted, which "
                       f"leaves {d_kv_space_gb() - d_overhead_gb():.2f} GB for KV.")(d_kv_space_gb)
recomputes("v4-6.5-p-instances", method="published deployment: prefill instances")(
    lambda: tutorial_deployment()["prefill_instances"])


#: The article sections this chapter covers (exact section names, per article).
SECTIONS = {"v4": ("6.1", "6.2", "6.3", "6.4", "6.5")}
#: The claims this module recomputes.
CLAIM_IDS = registered_by(__name__)
