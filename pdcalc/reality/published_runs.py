"""The production throughputs DeepSeek and CloudMatrix384 publish, under the conditions a step needs,
and the model's step at those conditions (predicted vs published per card).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from pdcalc.perf.comm import DEFAULT_COMM_EFF
from pdcalc.perf.step import DEFAULT_MBU, DEFAULT_MFU, StepTime, step
from pdcalc.reality import measurements


# ------------------------------------------------------------------------------ published measurements
@dataclass(frozen=True)
class PublishedRun:
    """The conditions of one published throughput (an entry of :mod:`pdcalc.reality.measurements`) as the step
    model needs them; the measured value, its card and its source stay in that registry."""

    measurement: str             # id in pdcalc.reality.measurements
    phase: str
    quant: str                   # pdcalc.model.quant scheme of the served weights
    compute_dtype: str           # card peak used for the linear layers
    cards_per_unit: int          # cards in the measurement's scope (8 for "per node", 1 for "per NPU")
    tp: int                      # attention TP degree
    ep: int                      # EP group, cards (the deployment modelled is one group)
    context: int                 # prompt length (prefill) or average KV length (decode)
    prompt_tokens_per_card: float | None  # prefill: prompt tokens per card in one step
    tpot_s: float | None         # decode: seconds between two output tokens of one user (sets the batch)
    cache_hit: float             # share of input tokens served from a KV cache (not computed)
    conditions: str              # what is published, and what is assumed
    source: str                  # where the conditions come from


_DAY6 = ("deepseek-ai/open-infra-index 202502OpenSourceWeek/day_6_one_more_thing_deepseekV3R1_inference_system_"
         "overview.md")
_PROFILE = "deepseek-ai/profile-data README"
_CM384 = "arXiv 2506.12708 (Serving Large Language Models on Huawei CloudMatrix384), abstract"

#: Published DeepSeek-V3/R1 throughputs to test the model against. Where a condition is not published,
#: ``conditions`` says what is assumed.
PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        measurement="deepseek-prod-h800-prefill-per-node", phase="prefill", quant="fp8", compute_dtype="fp8",
        cards_per_unit=8, tp=1, ep=32, context=4096, prompt_tokens_per_card=16 * 1024, tpot_s=None,
        cache_hit=0.563,
        conditions="24 h average incl. on-disk KV cache hits (56.3 %); EP32 prefill units; batch of the profile "
                   "runs (16K tokens per GPU, 4K prompts) assumed",
        source=f"{_DAY6}; {_PROFILE}"),
    PublishedRun(
        measurement="deepseek-prod-h800-decode-per-node", phase="decode", quant="fp8", compute_dtype="fp8",
        cards_per_unit=8, tp=1, ep=144, context=4989, prompt_tokens_per_card=None,
        tpot_s=2 / (20 + 22), cache_hit=0.0,   # 20-22 tokens/s per user: the midpoint, 21
        conditions="EP144 decode units, average KV length 4,989, 20-22 tokens/s per user",
        source=_DAY6),
    PublishedRun(
        measurement="cloudmatrix384-r1-prefill-per-npu", phase="prefill", quant="w8a8", compute_dtype="bf16",
        cards_per_unit=1, tp=1, ep=16, context=4096, prompt_tokens_per_card=16 * 1024, tpot_s=None, cache_hit=0.0,
        conditions="DeepSeek-R1 INT8, 4K prompts, perfect-EPLB projection; EP group (16 NPUs = 32 dies) and batch "
                   "(16K tokens per NPU) assumed; the 910C preset has no INT8 peak, so INT8 matmuls run at its "
                   "BF16 peak",
        source=_CM384),
    PublishedRun(
        measurement="cloudmatrix384-r1-decode-per-npu-tpot50", phase="decode", quant="w8a8", compute_dtype="bf16",
        cards_per_unit=1, tp=1, ep=320 // 2, context=4096, prompt_tokens_per_card=None,   # EP320 dies, 2 per NPU
        tpot_s=0.050, cache_hit=0.0,
        conditions="DeepSeek-R1 INT8, 4K prompts, EP320 over dies (2 per NPU), TPOT < 50 ms (taken as 50 ms); the "
                   "910C preset has no INT8 peak, so INT8 matmuls run at its BF16 peak",
        source=_CM384),
)


def measured_per_card(run: PublishedRun) -> float:
    """The published throughput of ``run``, tokens/s per card."""
    return measurements.get(run.measurement).value_si / run.cards_per_unit


def predict(run: PublishedRun, model="deepseek-v3", **efficiencies) -> StepTime:
    """The model's step for the conditions of ``run``: one EP group of ``run.ep`` cards.

    Decode runs the batch the measurement implies (Little's law: sequences per card = tokens/s per card
    x seconds per output token); prefill runs ``prompt_tokens_per_card`` prompt tokens per card.
    """
    dp = run.ep // run.tp
    if run.phase == "decode":
        concurrency = measured_per_card(run) * run.tpot_s * run.ep
    else:
        concurrency = run.prompt_tokens_per_card * run.ep / run.context
    return step(model, measurements.get(run.measurement).card, tp=run.tp, dp=dp, ep=run.ep, context=run.context,
                concurrency=concurrency, phase=run.phase, quant=run.quant, compute_dtype=run.compute_dtype,
                **efficiencies)


def compare_published(model="deepseek-v3", *, mfu: float = DEFAULT_MFU, mbu: float = DEFAULT_MBU,
                      comm_eff: float = DEFAULT_COMM_EFF, overlap: bool = True,
                      costs: str | None = None, overlap_model: str | None = None) -> pd.DataFrame:
    """Predicted vs published throughput per card, one row per :data:`PUBLISHED_RUNS` entry.

    Prefill measurements that include KV-cache hits count input tokens that were never computed; the
    prediction is scaled the same way (computed tokens / (1 - hit rate)). Both production systems overlap
    communication with computation (two micro-batches), hence ``overlap=True``. DeepSeek-R1 shares
    DeepSeek-V3's architecture. ``costs`` picks the cost model of :func:`step` (the efficiencies apply to
    the roofline only, ``overlap_model`` to the published costs); every registry throughput under its own
    conditions is in :func:`pdcalc.reality.validation.table`.
    """
    rows = []
    for run in PUBLISHED_RUNS:
        m = measurements.get(run.measurement)
        st = predict(run, model, mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap, costs=costs,
                     overlap_model=overlap_model)
        predicted = st.tokens_per_s_per_card / (1 - run.cache_hit)
        measured = measured_per_card(run)
        per_seq = run.context if run.phase == "prefill" else 1
        rows.append({
            "measurement": run.measurement, "engine": m.engine, "phase": run.phase, "card": m.card,
            "quant": run.quant, "tp": run.tp, "ep": run.ep, "context": run.context,
            "sequences_per_card": st.tokens / st.cards / per_seq,
            "predicted_tokens_per_s_per_card": predicted, "measured_tokens_per_s_per_card": measured,
            "ratio": predicted / measured, "bound": st.bound, "step_ms": st.time_s / 1e-3,
            "conditions": run.conditions, "source": m.source,
        })
    return pd.DataFrame(rows)
