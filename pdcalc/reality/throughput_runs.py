"""The registry's throughput measurements under their own conditions: the layout, batch and cost
options each run implies (:func:`throughput_setup`), and the step model's prediction of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdcalc.core.errors import LayoutError
from pdcalc.hardware.cards import get_card
from pdcalc.perf import step as throughput
from pdcalc.reality import measurements as reg
from pdcalc.reality.bands import BANDS, MODEL_PRESETS, NO_PRESET, THROUGHPUT_BANDS, Band

#: Registry cards named in words that a preset describes, and why.
CARD_ALIASES: dict[str, tuple[str, str]] = {
    "NVIDIA H100": ("h100", "the registry names the card in words; the LMSYS cluster's 8-GPU nodes with NVLink "
                            "and one 400 Gb/s NIC per GPU are H100 SXM, the h100 preset"),
}

#: The output a throughput prediction uses of the step: "published" (after) and "roofline" (before).
THROUGHPUT_MODELS = ("published", "roofline")

_SGLANG_MTP = ("SGLang's --speculative-num-draft-tokens counts the verified token: with eagle top-k 1 it is the "
               "draft steps + 1 (sglang server_args), so draft steps = draft tokens - 1")


@dataclass(frozen=True, kw_only=True)
class _Open:
    """Conditions a throughput source leaves open, each assumed with its reason (``why``)."""

    why: str
    quant: str | None = None
    tp: int | None = None
    ep: int | None = None                    # EP ranks as the registry counts them
    prompt_tokens: int | None = None
    prefill_tokens_per_card: float | None = None
    mtp: bool | None = None
    mtp_steps: int | None = None
    mtp_acceptance: float | None = None
    mtp_acceptance_quote: str | None = None  # the entry's text that prints the acceptance
    eplb: bool | None = None
    redundant_experts: int = 0
    overlap: bool = False
    moe_tp: bool = False                     # MoE split over the instance's TP group (no all-to-all)
    batch_per_card: float | None = None      # decode sequences per card
    use_little: bool = False                 # decode batch from the measured rate x the per-user TPOT


_DAY6_OVERLAP = ("DeepSeek's overview (day 6) overlaps communication with computation through two micro-batches "
                 "in both phases")
_LMSYS_TBO = "LMSYS runs two-batch overlap (TBO) in both phases and EPLB with 32 redundant experts"

#: Open conditions of each predicted throughput measurement. A measurement absent here takes the generic
#: rules of :func:`throughput_setup` (no overlap, balanced routing unless stated, MTP off unless stated).
_OPEN: dict[str, _Open] = {
    "deepseek-prod-h800-prefill-per-node": _Open(
        quant="fp8", prompt_tokens=4096, prefill_tokens_per_card=16384, eplb=True, redundant_experts=32,
        overlap=True,
        why=(f"FP8 (the quantization field). Prompt length and batch of DeepSeek's profile runs (4K prompts, 16K "
             f"tokens per GPU). EPLB with 32 redundant experts (day 6: prefill holds 32 redundant experts). "
             f"{_DAY6_OVERLAP}.")),
    "deepseek-prod-h800-decode-per-node": _Open(
        quant="fp8", eplb=True, redundant_experts=32, overlap=True, use_little=True,
        why=(f"FP8. The batch per GPU from the measured rate and 21 tokens/s per user (the midpoint of 20-22, "
             f"Little's law). MTP not stated: off (on is the range). EPLB with 32 redundant experts. "
             f"{_DAY6_OVERLAP}.")),
    "cloudmatrix384-r1-prefill-per-npu": _Open(
        tp=1, ep=32, prompt_tokens=4096, prefill_tokens_per_card=16384, overlap=True,
        why=("The abstract states neither layout nor batch: EP32 over dies (16 NPUs), 4K prompts, 16K tokens per "
             "NPU assumed; perfect EPLB as the reference README says (balanced routing); microbatch pipelining "
             "as arXiv 2506.12708 describes for CloudMatrix-Infer.")),
    "cloudmatrix384-r1-decode-per-npu-tpot50": _Open(
        tp=1, ep=320, prompt_tokens=4096, eplb=True, redundant_experts=32, overlap=True, use_little=True,
        why=("EP320 over dies (160 NPUs) as the abstract names; 4K prompts; the batch per NPU from the measured "
             "rate and TPOT 50 ms (Little's law, the limit taken as reached); MTP not stated: off; EPLB with "
             "redundant experts; microbatch pipelining as arXiv 2506.12708 describes.")),
    "lmsys-96xh100-prefill-per-node": _Open(
        quant="fp8", tp=1, prefill_tokens_per_card=16384, eplb=True, redundant_experts=32, overlap=True,
        why=(f"DP attention (TP1); 16,384 tokens per device as the post's 4K run; {_LMSYS_TBO}.")),
    "lmsys-96xh100-prefill-per-node-1k": _Open(
        quant="fp8", tp=1, prompt_tokens=1024, prefill_tokens_per_card=16384, eplb=True, redundant_experts=32,
        overlap=True,
        why=(f"'1K' taken as 1,024 tokens; DP attention (TP1); 16,384 tokens per device as the 4K run; "
             f"{_LMSYS_TBO}.")),
    "lmsys-96xh100-prefill-per-node-4k": _Open(
        quant="fp8", tp=1, eplb=True, redundant_experts=32, overlap=True,
        why=f"DP attention (TP1); {_LMSYS_TBO} (default expert distribution)."),
    "lmsys-96xh100-prefill-per-node-4k-perfect-eplb": _Open(
        quant="fp8", tp=1, overlap=True, why="DP attention (TP1); two-batch overlap as the post's runs."),
    "lmsys-96xh100-decode-per-node": _Open(
        quant="fp8", tp=1, eplb=True, redundant_experts=32, overlap=True,
        why=f"DP attention (TP1); {_LMSYS_TBO}."),
    "lmsys-h20-prefill-per-node": _Open(
        quant="fp8", prefill_tokens_per_card=16384 / 8,
        why=("FP8 checkpoint (DeepSeek-R1's own) and BF16 attention (the base config; FP8 attention has no "
             "published kernel figure). Batch not stated: 4 prompts of 4,096 tokens per step on the 8-GPU "
             "instance. No overlap.")),
    "lmsys-h20-decode-per-node": _Open(
        quant="fp8", mtp_steps=1, eplb=True, batch_per_card=48,
        why=("The InferX Base row (notes): batch 48 per GPU, MTP 1 step. FP8 checkpoint, BF16 attention "
             "(FP8 MLA has no published kernel figure). EPLB ('Expert Affinity EPLB'), no redundant "
             "experts stated. Single-batch overlap (SBO) is not modelled: no overlap.")),
    "lmsys-h20-decode-per-gpu-tpot70": _Open(
        quant="fp8", eplb=True, why=("FP8 checkpoint, BF16 attention; EPLB without stated redundant experts; SBO not "
                                     f"modelled (no overlap). {_SGLANG_MTP}.")),
    "lmsys-h20-decode-per-gpu-tpot50": _Open(
        quant="fp8", eplb=True, why=("FP8 checkpoint, BF16 attention; EPLB without stated redundant experts; SBO not "
                                     f"modelled (no overlap). {_SGLANG_MTP}.")),
    "lmsys-h20-decode-per-gpu-tpot30": _Open(
        quant="fp8", eplb=True, why=("FP8 checkpoint, BF16 attention; EPLB without stated redundant experts; SBO not "
                                     f"modelled (no overlap). {_SGLANG_MTP}.")),
    "lmsys-h20-decode-per-gpu-ep16-bs8": _Open(
        quant="fp8", eplb=True,
        why=("FP8 checkpoint, BF16 attention; MTP not stated for this comparison: off (the post's decode base "
             "config has 1 step: on is the range); EPLB; no overlap.")),
    "lmsys-h20-decode-per-gpu-ep32-bs8": _Open(
        quant="fp8", eplb=True,
        why=("FP8 checkpoint, BF16 attention; MTP not stated for this comparison: off (the post's decode base "
             "config has 1 step: on is the range); EPLB; no overlap.")),
    "lmsys-h20-decode-per-gpu-ep32-bs32": _Open(
        quant="fp8", eplb=True,
        why=("FP8 checkpoint, BF16 attention; MTP not stated for this comparison: off (the post's decode base "
             "config has 1 step: on is the range); EPLB; no overlap.")),
    "trtllm-h200-r1-fp8-max-throughput": _Open(
        eplb=False,
        why=("Aggregated: each output token also pays its share of the prompts (1K in, 2K out), each prompt "
             "prefilled in a step of its own; no EPLB stated (none); no overlap; no MTP (stated).")),
    "trtllm-h200-r1-fp8-min-latency-batch1": _Open(
        moe_tp=True,
        why=("TP8 attention with the MoE split over the same 8 GPUs (TP2 x EP4 holds the same bytes per card as "
             "TP8): two all-reduces per layer, no all-to-all; MTP 3 draft tokens at the published acceptance; "
             "one request: no routing imbalance over a batch; aggregated serving, the 1K prompt's prefill is "
             "left out (1 step of 2,048).")),
    "rtp-llm-h800-prefill-per-card": _Open(
        quant="fp8", eplb=True, redundant_experts=32,
        why=("FP8 checkpoint (DeepSeek-V3's own); 2 prompts of 4K per GPU as stated; EPLB with redundant experts; "
             "overlap not stated: none.")),
    "rtp-llm-h800-decode-per-card": _Open(
        quant="fp8", eplb=True, redundant_experts=16,
        why=("FP8 checkpoint; 13,200 sequences over 144 GPUs; mean KV length prompt + half the output; EPLB with "
             "the 16 redundant experts the workload names; MTP and overlap not stated: off.")),
    "sglang-ascend-a3-r1-w8a8-32card-pd-3500-1500-tpot50": _Open(
        why=("Decode batch: the client concurrency (832) over the 16 decode cards; mean KV prompt + half the "
             "output; the 32-card rate is the decode cards' output over all 32 cards; no overlap stated; "
             f"routing balanced (no EPLB stated). {_SGLANG_MTP}.")),
    "sglang-ascend-a3-r1-w8a8-32card-pd-6000-1600-tpot20": _Open(
        why=("Decode batch: the client concurrency (32) over the 16 decode cards; attention TP2; mean KV prompt + "
             "half the output; the 32-card rate is the decode cards' output over all 32 cards; no overlap "
             f"stated; routing balanced. {_SGLANG_MTP}.")),
    "cann-recipes-a3-r1-prefill-per-card-microbatch": _Open(
        quant="w8a8", overlap=True,
        why=("W8A8 (the repository's prefill config is named ..._a8w8); uniform expert load as stated; "
             "micro-batch (two-batch) overlap as stated.")),
    "cann-recipes-a3-r1-prefill-per-card-no-microbatch": _Open(
        quant="w8a8", why="W8A8 (the prefill config's name); uniform expert load as stated; no micro-batch."),
    "cann-recipes-a3-r1-w8a8c8-decode-per-chip": _Open(
        mtp_acceptance=0.7, mtp_acceptance_quote="0.7 of 1 draft token accepted",
        why=("INT8 KV cache (C8); the run's own acceptance (0.7 of 1 draft token, notes); perfect EPLB; "
             "context 4,096 (LongBench inputs truncated; 100 new tokens at most); overlap not stated: none.")),
}


@dataclass(frozen=True, kw_only=True)
class ThroughputSetup:
    """Everything :func:`pdcalc.perf.step.step` needs to predict one throughput measurement."""

    id: str
    model: str
    card: str
    quant: str
    phase: str
    tp: int
    dp: int
    ep: int | None
    context: float
    concurrency: float             # sequences (decode) or prompts (prefill) over the tp x dp cards
    mtp_steps: int
    mtp_acceptance: float | None
    eplb: bool | None
    redundant_experts: int
    overlap: bool
    kv_bytes: float
    scale: float                   # tokens/s per card -> the measurement's value (scope, counting, cache hits)
    aggregated: tuple | None       # (prompt, output) tokens when prefill shares the cards
    little: bool                   # batch from the measured rate (Little's law)
    assumptions: str

    def layout(self) -> str:
        ep = f"EP{self.ep}" if self.ep else "MoE TP"
        return f"TP{self.tp} x DP{self.dp}, {ep}, {self.phase}, context {self.context:,.0f}"

    def step_kwargs(self, costs: str) -> dict:
        kw = dict(tp=self.tp, dp=self.dp, ep=self.ep, phase=self.phase, quant=self.quant, overlap=self.overlap,
                  kv_bytes=self.kv_bytes, costs=costs)
        if costs == "published":
            kw |= dict(mtp_steps=self.mtp_steps, mtp_acceptance=self.mtp_acceptance, eplb=self.eplb,
                       redundant_experts=self.redundant_experts)
        elif self.redundant_experts:
            kw |= dict(redundant_experts=self.redundant_experts)
        return kw


class NotPredictable(Exception):
    """A throughput measurement pdcalc cannot set up; the message says why."""


def _quant(text: str | None) -> str | None:
    t = (text or "").lower()
    if "nvfp4" in t or "w4a8" in t or "fp4" in t:
        raise NotPredictable(f"pdcalc has no quantization scheme for {text!r} (FP4 / W4A8 weights)")
    if "fp8" in t:
        return "fp8"
    if "int8" in t or "w8a8" in t:
        return "w8a8"
    return None


def _batch(m, o, phase: str, prompt, cards: int, phase_cards, notes: list) -> tuple[float, float, bool]:
    """The modelled step's context and sequences (prompts in prefill) for measurement ``m`` under the open
    conditions ``o``, and whether the decode batch comes from Little's law; assumptions appended to ``notes``."""
    little = False
    if phase == "prefill":
        context = float(prompt)
        if m.prefill_tokens_per_card:
            per_card = float(m.prefill_tokens_per_card)
        elif m.batch_per_card:
            per_card = m.batch_per_card * prompt
        elif o.prefill_tokens_per_card:
            per_card = float(o.prefill_tokens_per_card)
        else:
            raise NotPredictable("the prefill batch is not stated")
        concurrency = per_card * cards / prompt
    else:
        if m.context_tokens:
            context = float(m.context_tokens)
        elif m.output_tokens:
            context = prompt + m.output_tokens / 2
        else:
            context = float(prompt)
            notes.append("Output length not stated: KV length = the prompt.")
        if m.batch_per_card or o.batch_per_card:
            b = m.batch_per_card or o.batch_per_card
        elif m.tpot_ms and m.per_card:
            # the sequences decoding at once: the decode cards' output rate x the measured TPOT (Little's law);
            # a client's concurrency also counts requests queued or in prefill
            rate = m.per_card * (m.cards / m.decode_cards if m.cards_counted == "deployment" and m.decode_cards
                                 else 1)
            b = rate * m.tpot_ms * 1e-3
            little = True
            notes.append(f"Decode batch {b:.1f} per card: the decode cards' output rate x the measured TPOT "
                         f"(Little's law)" + (f"; the client's {m.concurrency:,} concurrent requests also count "
                                              "those queued or in prefill" if m.concurrency else "") + ".")
        elif m.concurrency and phase_cards:
            b = m.concurrency / (m.decode_cards or phase_cards)
        elif o.use_little or m.tokens_per_s_per_user or m.tpot_limit_ms:
            speed = m.tokens_per_s_per_user
            if isinstance(speed, tuple):
                speed = sum(speed) / 2
            tpot = 1 / speed if speed else m.tpot_limit_ms * 1e-3
            b = m.per_card * tpot
            little = True
        else:
            raise NotPredictable("the decode batch (or a TPOT to infer it) is not stated")
        concurrency = b * cards
    return context, concurrency, little


def throughput_setup(mid: str) -> ThroughputSetup:
    """The conditions of throughput measurement ``mid`` as the step model needs them: the registry's
    stated fields first, then the open conditions of :data:`_OPEN` (each with its reason), then these
    rules: decode KV length = prompt + half the output; the decode batch from ``batch_per_card``, the
    client ``concurrency`` over the decode cards, or the measured rate times the per-user TPOT (Little's
    law); no overlap, balanced routing and MTP off unless stated. The model is one EP group (or the
    measured instance without EP). Raises :class:`NotPredictable` with the reason otherwise.
    """
    from pdcalc.hardware.cards import card_names

    m = reg.get(mid)
    o = _OPEN.get(mid, _Open(why=""))
    notes = [o.why] if o.why else []
    model = MODEL_PRESETS.get(m.model or "")
    if model is None:
        raise NotPredictable(f"{m.model}: {NO_PRESET}")
    card = m.card if m.card in card_names() else CARD_ALIASES.get(m.card, (None, ""))[0]
    if card is None:
        raise NotPredictable(f"the card ({m.card}) is not a card preset")
    if m.card in CARD_ALIASES:
        notes.append(f"Card {card}: {CARD_ALIASES[m.card][1]}.")
    quant = _quant(m.quantization) or o.quant
    phase = "prefill" if m.quantity == "prefill_throughput" else "decode"
    rpc = get_card(card).ranks
    tp = m.tp if m.tp is not None else o.tp
    gaps = [what for what, missing in (
        ("the checkpoint's quantization", quant is None), ("the attention TP size", tp is None),
        ("the prompt length", (m.prompt_tokens or o.prompt_tokens or m.context_tokens) is None),
        ("the batch" + (" (or a TPOT to infer it)" if phase == "decode" else ""),
         not (m.batch_per_card or o.batch_per_card or m.concurrency or m.prefill_tokens_per_card
              or o.prefill_tokens_per_card or (phase == "decode" and (m.tokens_per_s_per_user or m.tpot_limit_ms
                                                                      or o.use_little))))) if missing]
    if gaps:
        raise NotPredictable(f"{', '.join(gaps)} {'is' if len(gaps) == 1 else 'are'} not stated and no "
                             "assumption is recorded")
    ep_ranks = o.ep if o.ep is not None else m.ep
    phase_cards = (m.decode_cards if phase == "decode" else m.prefill_cards) or m.cards
    # the registry counts ranks; a card of several dies (Card.ranks) holds as many ranks
    per = rpc if rpc > 1 and ep_ranks and (not phase_cards or ep_ranks > phase_cards) else 1
    ep = None if (o.moe_tp or not ep_ranks or ep_ranks == 1) else ep_ranks // per
    tp_cards = max(1, tp // per) if per > 1 else tp
    cards = ep if ep else (phase_cards or tp_cards)
    if cards % tp_cards:
        raise NotPredictable(f"TP{tp_cards} does not divide the {cards} cards modelled")
    dp = cards // tp_cards
    prompt = m.prompt_tokens or o.prompt_tokens or m.context_tokens
    mtp = m.mtp if m.mtp is not None else bool(o.mtp)
    steps = 0
    if mtp:
        if o.mtp_steps is not None:
            steps = o.mtp_steps
        elif m.mtp_draft_tokens is not None:
            steps = m.mtp_draft_tokens - 1 if m.engine == "sglang" else m.mtp_draft_tokens
        else:
            steps = 1
    if o.mtp_acceptance_quote is not None and o.mtp_acceptance_quote not in (m.notes or ""):
        raise LayoutError(f"{mid}: the acceptance assumed is not in the entry's notes")
    eplb = None if m.perfect_eplb else (o.eplb if o.eplb is not None else (True if m.perfect_eplb is False else None))
    kv = 1.0 if (m.kv_cache_dtype or "").lower() in ("int8", "fp8") else 2.0
    scale = float(m.scope_cards or 1)
    if m.cache_hit:
        scale /= (1 - m.cache_hit)
    aggregated = None
    if m.serving == "aggregated" and m.cards_counted == "deployment" and m.concurrency != 1:
        if not (m.prompt_tokens and m.output_tokens):
            raise NotPredictable("aggregated serving without stated prompt and output lengths")
        aggregated = (m.prompt_tokens, m.output_tokens)
    elif m.serving == "disaggregated" and m.cards_counted == "deployment":
        if not (m.decode_cards and m.cards):
            raise NotPredictable("a deployment-counted rate without the decode cards")
        scale *= m.decode_cards / m.cards
        notes.append(f"Per card of the deployment: the {m.decode_cards} decode cards' output over all {m.cards}.")
    context, concurrency, little = _batch(m, o, phase, prompt, cards, phase_cards, notes)
    return ThroughputSetup(id=mid, model=model, card=card, quant=quant, phase=phase, tp=tp_cards, dp=dp, ep=ep,
                           context=context, concurrency=concurrency, mtp_steps=steps,
                           mtp_acceptance=o.mtp_acceptance, eplb=eplb, redundant_experts=o.redundant_experts if ep
                           else 0, overlap=o.overlap, kv_bytes=kv, scale=scale, aggregated=aggregated,
                           little=little, assumptions=" ".join(n for n in notes if n))


def predict_throughput(setup: ThroughputSetup, costs: str = "published", **overrides):
    """The measurement's value as the step model predicts it under ``setup`` (tokens/s per the measurement's
    scope), and the decode or prefill :class:`~pdcalc.perf.step.StepTime` behind it.

    Aggregated serving (prefill and decode on the same cards) adds each output token's share of the
    prompts' prefill, each prompt in a step of its own on one DP rank:

    .. math:: \\frac{1}{X} = \\frac{1}{X_\\text{decode}} + \\frac{P}{O}\\,\\frac{1}{X_\\text{prefill}}
    """
    kw = setup.step_kwargs(costs) | overrides
    st = throughput.step(setup.model, setup.card, context=setup.context, concurrency=setup.concurrency, **kw)
    x = float(st.tokens_per_s_per_card)
    if setup.aggregated:
        prompt, out = setup.aggregated
        pkw = kw | dict(phase="prefill", mtp_steps=0) if costs == "published" else kw | dict(phase="prefill")
        pf = throughput.step(setup.model, setup.card, context=prompt, concurrency=setup.dp, **pkw)
        x = 1 / (1 / x + prompt / out / float(pf.tokens_per_s_per_card))
    return x * setup.scale, st


def throughput_band(mid: str) -> Band:
    if mid in THROUGHPUT_BANDS:
        return THROUGHPUT_BANDS[mid]
    return BANDS["throughput"]
