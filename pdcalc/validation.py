"""How close to reality: pdcalc's predictions beside published measurements.

For every entry of the measurements registry (:mod:`pdcalc.measurements`) that pdcalc can predict,
:func:`predictions` computes the prediction under the entry's stated conditions; :func:`table` puts it
beside the measured value (both in SI units: bytes, tokens, tokens/s, bytes/s, seconds) with the ratio
predicted / measured, the pdcalc function used and the assumptions made where the source leaves a
condition open. Every other entry is listed by :func:`not_predicted` with the reason, so that no
measurement drops out silently (:func:`coverage`).

Quantities and the functions that predict them:

- weight memory per card: :func:`pdcalc.memory.card_weights`; one pipeline stage:
  :func:`stage_weights`;
- KV-cache memory per card: :func:`pdcalc.memory.budget`,

  .. math:: M_\\text{KV} = u\\,M_\\text{visible} - W - A - F

  with ``W`` from pdcalc and the activation peak ``A`` and non-torch memory ``F`` taken from the same
  log line (pdcalc does not predict them); :func:`kv_budget_table` also shows the overhead the
  measurement implies, ``u M - W - M_KV``;
- KV-cache bytes and capacity: :func:`pdcalc.kv_cache.kv_bytes` in the engine's layout, tokens =
  memory / bytes per token;
- throughput: :func:`predict_throughput` (:func:`pdcalc.throughput.step` with ``costs="published"``,
  the roofline of flat efficiencies beside it);
- KV transfer: :func:`pdcalc.transfer.fit_link`, :meth:`pdcalc.transfer.Link.seconds`.

Where a condition is open (a layout, whether the MTP draft is loaded) every candidate consistent with
the source is computed: ``predicted`` is the candidate closest to the measurement, ``low`` and
``high`` the range over all of them (:func:`weight_candidates` lists them). Every prediction carries a
tolerance :class:`Band`: a claim about how close the model comes, and why it is that wide.

Source: the registry entries' own ``quote``, ``source`` and conditions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cache

import pandas as pd

from pdcalc import measurements as reg
from pdcalc import costs, throughput, transfer
from pdcalc.errors import LayoutError, UnknownNameError
from pdcalc.hardware import get_card
from pdcalc.precision import MAX_SIG, tidy
from pdcalc.inventory import get_inventory
from pdcalc.kv_cache import kv_bytes
from pdcalc.memory import V4_ASCEND_W8A8, budget, card_weights, load_buffers, tensor_card_bytes
from pdcalc.parallel import place_experts
from pdcalc.quant import Rule, Scheme, get_scheme
from pdcalc.units import GiB

#: SI unit of each quantity in the tables (``ms`` values of the registry are converted to seconds).
SI_UNITS: dict[str, str] = {
    "weight_memory_per_card": "B", "kv_cache_memory_per_card": "B", "kv_cache_tokens_per_card": "tokens",
    "max_concurrency": "x", "kv_transfer_bandwidth": "B/s", "kv_transfer_time": "s",
    "prefill_throughput": "tokens/s", "decode_throughput": "tokens/s", "tpot": "s", "ttft": "s",
}

#: Short names of the quantities (chart legend).
GROUPS: dict[str, str] = {
    "weight_memory_per_card": "weights", "kv_cache_memory_per_card": "KV cache",
    "kv_cache_tokens_per_card": "KV cache", "max_concurrency": "KV cache",
    "prefill_throughput": "throughput", "decode_throughput": "throughput",
    "kv_transfer_bandwidth": "KV transfer", "kv_transfer_time": "KV transfer", "tpot": "latency", "ttft": "latency",
}

#: Registry model names that a pdcalc preset describes (DeepSeek-R1 shares DeepSeek-V3's architecture).
MODEL_PRESETS: dict[str, str] = {
    "DeepSeek-V3": "deepseek-v3", "DeepSeek-R1": "deepseek-v3", "DeepSeek-R1-0528": "deepseek-v3",
    "DeepSeek-V3/R1": "deepseek-v3", "DeepSeek-V4-Flash": "deepseek-v4-flash",
}


def measured_si(m: reg.Measurement) -> float:
    """The registry value in the unit of :data:`SI_UNITS` (``value_si``; milliseconds become seconds)."""
    return m.value_si * 1e-3 if m.unit == "ms" else m.value_si


# ------------------------------------------------------------------------------------------ bands
@dataclass(frozen=True)
class Band:
    """Tolerance of one check: predicted / measured must lie in ``[low, high]``."""

    low: float
    high: float
    why: str            # the claim, and why the band is this wide
    gap: bool = False   # a known gap: the band need not contain 1 (the model is off, for the reason given)

    def __post_init__(self):
        if not 0 < self.low <= self.high:
            raise LayoutError(f"a band must be 0 < low <= high, got [{self.low}, {self.high}]")
        if not self.gap and not self.low <= 1 <= self.high:
            raise LayoutError(f"a band must contain 1, got [{self.low}, {self.high}]")

    def contains(self, ratio: float) -> bool:
        return self.low <= ratio <= self.high


#: max-num-batched-tokens tried for the vllm-ascend V4-Flash log, which does not print it: vLLM's scheduler
#: setting sizes buffers allocated with the model (pdcalc.memory.load_buffers); 4,096 to 16,384 tokens.
V4_LOG_BATCHED_TOKENS = (4096, 8192, 16384)


def _loader_band_why() -> str:
    """Why the V4-Flash W8A8 weights are held to 3 %, with the two open amounts computed."""
    from pdcalc.model import load_config

    lo, hi = V4_LOG_BATCHED_TOKENS[0], V4_LOG_BATCHED_TOKENS[-1]
    spread = (sum(load_buffers("deepseek-v4-flash", max_num_batched_tokens=hi).values())
              - sum(load_buffers("deepseek-v4-flash", max_num_batched_tokens=lo).values()))
    cfg = load_config("deepseek-v4-flash")
    head = cfg.vocab_size * cfg.hidden_size * 2
    return ("Checkpoint dtypes from the quantization recipe and every allocation of the loader from its code "
            f"(w8a8-msmodelslim, pdcalc.memory.load_buffers); open: the run's max-num-batched-tokens, "
            f"{spread / GiB:.2f} GiB between {lo:,} and {hi:,} tokens, and whether the MTP draft's head is "
            f"deduplicated against the main one ({head / GiB:.2f} GiB): 3 %.")


#: The bands, by kind of check. Each is a claim about pdcalc, not a fit to the numbers.
BANDS: dict[str, Band] = {
    "weights-stated": Band(0.98, 1.02, (
        "Checkpoint and layout stated exactly: the tensor inventory times the scheme gives the bytes, and "
        "what the engine holds beyond it (quantization side tensors, padding, the MTP draft if loaded) is a "
        "few hundred MiB of ~44 GiB; every open candidate (MTP on or off) must be within 2 %.")),
    "weights-layout-open": Band(0.95, 1.05, (
        "The layout is stated for the thread, not for the comment that printed the number: the nearest "
        "consistent layout must be within 5 %, and the measurement must lie inside the range of consistent "
        "layouts (moving a pipeline-stage boundary moves one MoE layer, ~1.3 GiB of ~40 GiB).")),
    "weights-loader-open": Band(0.97, 1.03, _loader_band_why()),
    "kv-bytes": Band(0.95, 1.05, (
        "An MLA cache row is exact (576 values per layer per token), so tokens = memory / bytes per token "
        "leaves only how the engine rounds its pool (whole blocks, a layer for the MTP draft); the summary "
        "line quoted combines two log lines: 5 %.")),
    "kv-bytes-unit": Band(0.99, 1.09, (
        "Bytes per token are exact; the band spans both readings of the printed 'GB' (10**9 B as printed, "
        "2**30 B as SGLang's memory pool computes it: a factor 1.074) and the 2-decimal rounding of 0.65.")),
    "throughput": Band(1 / 3, 3.0, (
        "A throughput entry without a band of its own in THROUGHPUT_BANDS (a new measurement): a factor of 3 "
        "either way until one is recorded; tests/test_validation.py requires one.")),
    "transfer-in-sample": Band(0.9, 1.1, (
        "The link is fitted to the same Mooncake table (relative least squares over 9 prompt lengths): this "
        "checks the fit's residual at one point, 10 %.")),
    "transfer-carried": Band(0.5, 2.0, (
        "An efficiency fitted on one network (vLLM + Mooncake, 8 x 200 Gb/s) carried to another line rate: "
        "the Mooncake README's own two networks differ 1.8x in efficiency (87 % and 47.5 %), so a factor of 2.")),
}


_PF_OVERLAP = next(p for p in costs.overlap("h800", "prefill", mode="normal")
                   if p.table_id == "deepseek-profile-prefill-overlap")
_OVERLAP_GAP = ("the two-micro-batch overlap the run uses hides communication under the other micro-batch's "
                f"computation, which runs on the SMs DeepSeek's profile leaves it ({_PF_OVERLAP.compute_sms} of "
                f"{_PF_OVERLAP.sms} beside DeepEP's normal kernels, all in decode); in decode, communication slowed "
                "under overlap (LMSYS) is not sized by any published figure and not modelled")
_BEYOND = ("the step takes what DeepSeek's profiled H800 prefill step takes beyond its kernel costs (kernels "
           "outside the tables, communication slowed under overlap)")
_IN_SAMPLE = ("In sample: the post the prefill step's profiled rate is read from; shown, not scored.")
_PREFILL_SHARE = ("the H800's share of SMs held by prefill communication is carried to the card's compute units, "
                  "and " + _BEYOND)


def _tb(low: float, high: float, why: str) -> Band:
    """A throughput band: 10 % either side of what the published-cost model achieves, with the reason; a
    band that leaves out 1 is a known gap."""
    return Band(low, high, why, gap=not low <= 1 <= high)


#: The band of each throughput prediction: 10 % either side of the ratio the published-cost model reaches,
#: so that a change of the model moves a prediction out of its band; where the band leaves out 1 the model
#: is known to be off, for the reason given.
THROUGHPUT_BANDS: dict[str, Band] = {
    "deepseek-prod-h800-prefill-per-node": _tb(1.64, 2, (
        "A 24 h production average (load below capacity; LMSYS: DeepSeek's profile runs at roughly twice its rate) with "
        "prompt length and batch not stated: the profiled step the prefill factor comes from ran at the "
        "conditions assumed here, so what remains is the service's load.")),
    "deepseek-prod-h800-decode-per-node": _tb(1.03, 1.26, (
        f"Batch from the measured rate and per-user speed; MTP not stated (off); {_OVERLAP_GAP}.")),
    "cloudmatrix384-r1-prefill-per-npu": _tb(0.85, 1.03, (
        "Layout and batch assumed; INT8 GEMM shares carried from DeepGEMM's H800 FP8 table (no Ascend GEMM "
        f"figure); {_PREFILL_SHARE}.")),
    "cloudmatrix384-r1-decode-per-npu-tpot50": _tb(1.28, 1.56, (
        f"Batch from the TPOT limit; GEMM shares carried from the H800; MTP not stated (off); {_OVERLAP_GAP}.")),
    "lmsys-96xh100-prefill-per-node": _tb(1.07, 1.3, f"{_IN_SAMPLE} Batch per device assumed as the 4K run; {_PREFILL_SHARE}."),
    "lmsys-96xh100-prefill-per-node-1k": _tb(0.99, 1.21, f"{_IN_SAMPLE} '1K' as 1,024, batch as the 4K run; {_PREFILL_SHARE}."),
    "lmsys-96xh100-prefill-per-node-4k": _tb(1.05, 1.28, (
        f"{_IN_SAMPLE} Conditions stated; EPLB imbalance carried; {_PREFILL_SHARE}.")),
    "lmsys-96xh100-prefill-per-node-4k-perfect-eplb": _tb(0.96, 1.17, (
        f"{_IN_SAMPLE} DeepSeek's profiled conditions on the H100: the model gives the profiled rate itself.")),
    "lmsys-96xh100-decode-per-node": _tb(1.25, 1.53, f"Batch and KV length stated, no MTP; {_OVERLAP_GAP}."),
    "lmsys-h20-prefill-per-node": _tb(0.43, 0.53, (
        "Under-predicted: the H800's shares of peak carried to the H20 (a slower tensor core is easier to keep "
        "fed), FP8 attention left at BF16 (no published FP8 kernel figure), batch assumed; and "
        f"{_BEYOND}, carried from an overlapped EP32 step to a serial TP8 one.")),
    "lmsys-h20-decode-per-node": _tb(0.81, 0.99, "As the InferX Base row it matches (batch 48, MTP 1 step)."),
    "lmsys-h20-decode-per-gpu-tpot70": _tb(0.81, 0.99, (
        "Batch and MTP stated; BF16 attention where the run may use FP8 MLA; single-batch overlap left out.")),
    "lmsys-h20-decode-per-gpu-tpot50": _tb(0.84, 1.03, "As the 70 ms tier, at batch 32."),
    "lmsys-h20-decode-per-gpu-tpot30": _tb(1.07, 1.31, (
        "Batch 12 with 2 MTP steps: acceptance of the second draft carried from the report's first (85-90 %).")),
    "lmsys-h20-decode-per-gpu-ep16-bs8": _tb(0.79, 0.96, "Batch 8 stated; MTP not stated (off; on is the range)."),
    "lmsys-h20-decode-per-gpu-ep32-bs8": _tb(0.92, 1.13, "Batch 8 stated; MTP not stated (off; on is the range)."),
    "lmsys-h20-decode-per-gpu-ep32-bs32": _tb(0.94, 1.15, "Batch 32 stated; MTP not stated (off)."),
    "trtllm-h200-r1-fp8-max-throughput": _tb(1.41, 1.71, (
        "Aggregated serving: prefill interleaved with decode in chunks of the run's max_num_tokens, not modelled "
        "as such; "
        "imbalance without EPLB scaled from EP32 to EP8.")),
    "trtllm-h200-r1-fp8-min-latency-batch1": _tb(2.7, 3.28, (
        "One request: the step is set by per-kernel latency floors (thousands of small kernels, three "
        "sequential MTP drafts), which no published figure gives.")),
    "rtp-llm-h800-prefill-per-card": _tb(0.81, 1, (
        "Two 4K prompts per GPU under a TTFT target: a small step where kernels run below their large-M "
        f"ceilings; overlap not stated; {_BEYOND}.")),
    "rtp-llm-h800-decode-per-card": _tb(0.88, 1.07, "Concurrency and per-user speed stated; MTP and overlap not stated."),
    "sglang-ascend-a3-r1-w8a8-32card-pd-3500-1500-tpot50": _tb(2, 2.44, (
        "Batch from the measured TPOT and output rate (fewer sequences than the client allows): the run's TPOT "
        "is well above the model's, costs of SGLang on Ascend beyond the published kernels.")),
    "sglang-ascend-a3-r1-w8a8-32card-pd-6000-1600-tpot20": _tb(1.45, 1.77, (
        "Less than one sequence per die, with MTP steps: latency floors of small kernels, not published.")),
    "cann-recipes-a3-r1-prefill-per-card-microbatch": _tb(0.87, 1.06, (
        f"GEMM shares carried from the H800's FP8 to the 910C's INT8, as in the run without micro-batches, which "
        f"lands within 1 % of it; {_PREFILL_SHARE}.")),
    "cann-recipes-a3-r1-prefill-per-card-no-microbatch": _tb(0.86, 1.06, (
        "No overlap, conditions stated: GEMM shares carried from the H800's FP8 to the 910C's INT8 and AMLA's "
        f"'up to' attention figure; {_BEYOND}.")),
    "cann-recipes-a3-r1-w8a8c8-decode-per-chip": _tb(1.21, 1.48, (
        "Conditions and acceptance stated; GEMM shares carried from the H800 and AMLA's 'up to' figure.")),
}


# ------------------------------------------------------------------------------------------ weights
#: A what-if scheme: only the routed experts in int8 (per-channel scale and offset), everything else
#: BF16. Not a published checkpoint layout: tested against vllm-ascend issue #13439.
W8A8_EXPERTS_ONLY = Scheme(
    name="w8a8-experts-only",
    description="what-if: routed experts int8 with per-channel fp32 scale and offset, every other tensor "
                "BF16 (fp32/int32 where the reference fixes it)",
    source="hypothesis, not a published quantization description",
    rules=(Rule(("expert",), "int8", "channel", 2, "fp32"), Rule(None, None, fallback="bf16")),
)


def pp_layers(num_layers: int, pp: int, stage: int, split: str = "vllm") -> tuple[int, int]:
    """Layers ``[start, end)`` of pipeline stage ``stage`` of ``pp``.

    ``split="vllm"``: vLLM's ``get_pp_indices`` (``vllm/distributed/utils.py``): ``n // pp`` layers each,
    the remainder one by one to the stages before the last, from the back. ``split="last"``: the
    remainder to the last stage (earlier vLLM releases).

    .. math:: n_s = \\lfloor n / p \\rfloor + [\\text{stage } s \\text{ takes one of the } n \\bmod p]
    """
    for name, v, low in (("num_layers", num_layers, 1), ("pp", pp, 1), ("stage", stage, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise LayoutError(f"{name} must be an integer >= {low}, got {v!r}")
    if stage >= pp:
        raise LayoutError(f"stage {stage} does not exist with pp={pp}")
    parts = [num_layers // pp] * pp
    rem = num_layers % pp
    if split == "vllm":
        for i in range(2, rem + 2):
            parts[-i] += 1
    elif split == "last":
        parts[-1] += rem
    else:
        raise LayoutError(f"split must be 'vllm' or 'last', got {split!r}")
    start = sum(parts[:stage])
    return start, start + parts[stage]


def stage_weights(model, scheme="w8a8", *, ep: int = 1, tp: int = 1, mtp: bool = False, pp: int = 1,
                  stage: int = 0, split: str = "vllm") -> float:
    """Weight bytes on one card of pipeline stage ``stage``: its layers sharded as in
    :func:`pdcalc.memory.card_weights`, the embedding on the first stage, the final norm and the output
    head on the last.

    With ``pp = 1`` this is ``card_weights(...).total_bytes``. Routed experts split by TP without expert
    parallelism take the same bytes as ``ep = tp`` whenever each slice holds whole scale blocks (FP8:
    2048 / 8 = 256 rows, two 128-row blocks).

    .. math:: W_\\text{stage} = \\sum_{t \\in \\text{stage}} \\frac{W_t}{s_t}, \\qquad
       s_t = t_\\text{TP} \\;(\\text{TP-split}), \\; E / n_\\text{card} \\;(\\text{EP-split}), \\; 1

    Raises :class:`~pdcalc.errors.LayoutError` for MTP with ``pp > 1`` (where the draft sits is not
    modelled).
    """
    if pp == 1:
        return card_weights(model, scheme, ep=ep, tp=tp, mtp=mtp).total_bytes
    if mtp:
        raise LayoutError("the MTP draft with pipeline parallelism is not modelled")
    inv, sch = get_inventory(model), get_scheme(scheme)
    start, end = pp_layers(inv.num_hidden_layers, pp, stage, split)
    n_card = place_experts(inv.n_routed_experts, ep).max_experts_per_card
    total = 0.0
    for t in inv.tensors:
        if t.part != "main":
            continue
        if t.layer is None:             # embedding: first stage; final norm and head: last stage
            if stage != (0 if t.category == "embedding" else pp - 1):
                continue
        elif not start <= t.layer < end:
            continue
        total += tensor_card_bytes(t, sch, experts_per_card=n_card, tp=tp)
    return total


@dataclass(frozen=True, kw_only=True)
class WeightCase:
    """One candidate layout for a weight measurement."""

    label: str
    scheme: str | Scheme = "w8a8"
    ep: int = 1                     # EP group (cards); experts TP-split without EP: ep = tp
    tp: int = 1
    mtp: bool = False
    pp: int = 1
    stage: int = 0
    split: str = "vllm"
    consistent: bool = True         # consistent with the source (False: shown for comparison only)
    batched_tokens: int | None = None  # the engine's load buffers at this max-num-batched-tokens (None: none)

    def bytes(self, model: str, scheme=None) -> float:
        sch = self.scheme if (scheme is None or isinstance(self.scheme, Scheme)) else scheme
        w = stage_weights(model, sch, ep=self.ep, tp=self.tp, mtp=self.mtp, pp=self.pp, stage=self.stage,
                          split=self.split)
        if self.batched_tokens:
            w += sum(load_buffers(model, "vllm-ascend", max_num_batched_tokens=self.batched_tokens).values())
        return w


@dataclass(frozen=True, kw_only=True)
class _WeightSpec:
    model: str
    band: str
    cases: tuple[WeightCase, ...]
    assumptions: str


_WEIGHTS: dict[str, _WeightSpec] = {
    "vllm-ascend-2191-v3-w8a8-dp4tp4-weights-per-card": _WeightSpec(
        model="deepseek-v3", band="weights-stated",
        cases=(WeightCase(label="DP4 x TP4, EP16, MTP draft loaded", scheme="w8a8", ep=16, tp=4, mtp=True),
               WeightCase(label="DP4 x TP4, EP16, no MTP draft", scheme="w8a8", ep=16, tp=4, mtp=False)),
        assumptions=("Layout as stated: TP4, EP16 (= DP4 x TP4). Whether the MTP draft was loaded is not "
                     "stated: both tried.")),
    "vllm-13074-r1-h20-3e-weights-per-card": _WeightSpec(
        model="deepseek-v3", band="weights-layout-open",
        cases=tuple(WeightCase(label=f"TP8 x PP2, stage {s}, remainder layer to the "
                               f"{'stages before the last' if split == 'vllm' else 'last stage'}",
                               scheme="fp8", ep=8, tp=8, pp=2, stage=s, split=split)
                    for split in ("vllm", "last") for s in (0, 1))
        + (WeightCase(label="TP16, one stage (not the thread's layout)", scheme="fp8", ep=16, tp=16,
                      consistent=False),),
        assumptions=("TP8 x PP2 from the issue title; the quoted comment does not state its own layout nor the "
                     "stage of the printing worker: both stages and both ways to place the 61st layer tried. "
                     "Experts TP-split without EP (same bytes as EP8). No MTP draft (no speculative "
                     "decoding in the excerpt).")),
    "vllm-ascend-13439-v4flash-weights-per-card": _WeightSpec(
        model="deepseek-v4-flash", band="weights-loader-open",
        cases=tuple(WeightCase(label=f"DP8, EP8, MTP draft loaded, max-num-batched-tokens {t:,}", scheme=V4_ASCEND_W8A8,
                               ep=8, mtp=True, batched_tokens=t) for t in V4_LOG_BATCHED_TOKENS)
        + (WeightCase(label="DP8, EP8, MTP; checkpoint and loader only, no load buffers", scheme=V4_ASCEND_W8A8,
                      ep=8, mtp=True, consistent=False),
           WeightCase(label="DP8, EP8, MTP; every linear layer int8 (pdcalc's generic w8a8)", scheme="w8a8", ep=8,
                      mtp=True, consistent=False),
           WeightCase(label="DP8, EP8, no MTP draft", scheme=V4_ASCEND_W8A8, ep=8, batched_tokens=V4_LOG_BATCHED_TOKENS[0],
                      consistent=False),
           WeightCase(label="DP16, EP16 over both nodes, MTP", scheme=V4_ASCEND_W8A8, ep=16, mtp=True,
                      batched_tokens=V4_LOG_BATCHED_TOKENS[0], consistent=False),
           WeightCase(label="DP8, EP8, MTP; what-if: only routed experts int8", scheme=W8A8_EXPERTS_ONLY,
                      ep=8, mtp=True, consistent=False)),
        assumptions=("EP8, TP1 implied, not stated: worker labels carry no TP rank, the same log shows "
                     "EngineCore_DP7 (DP >= 8) and 'The number of redundant experts is 0', and each instance "
                     "of the 1P1D pair has one 8-NPU node (kvcache-ai/Mooncake issue #3267: '2 nodes x 8 NPUs "
                     "each'). MTP on: the checkpoint is w8a8-mtp and the Mooncake issue says 'W8A8, with "
                     "MTP'. Checkpoint as msModelSlim's V4-Flash recipe writes it, loaded as vllm-ascend does "
                     "(w8a8-msmodelslim), with the buffers vllm-ascend builds with the model "
                     "(pdcalc.memory.load_buffers); the run's max-num-batched-tokens is not in the log: "
                     "the range tried.")),
}


def weight_candidates(measurement_id: str, scheme: str | None = None) -> pd.DataFrame:
    """Every candidate layout of a weight measurement, its bytes and ratio to the measurement.

    Columns ``candidate, scheme, ep, tp, pp, stage, mtp, consistent, predicted_bytes, ratio, chosen``;
    ``consistent`` marks the candidates the source allows, ``chosen`` the one closest to the measurement
    among them. ``scheme`` overrides the cases' scheme (what-if schemes keep their own).
    """
    if measurement_id not in _WEIGHTS:
        raise UnknownNameError("weight measurement with candidates", measurement_id, _WEIGHTS)
    spec, m = _WEIGHTS[measurement_id], reg.get(measurement_id)
    rows = []
    for c in spec.cases:
        b = c.bytes(spec.model, scheme)
        sch = c.scheme if isinstance(c.scheme, Scheme) else get_scheme(scheme or c.scheme)
        rows.append({"candidate": c.label, "scheme": sch.name, "ep": c.ep, "tp": c.tp, "pp": c.pp, "stage": c.stage,
                     "mtp": c.mtp, "consistent": c.consistent, "predicted_bytes": b, "ratio": b / measured_si(m)})
    df = pd.DataFrame(rows)
    ok = df[df["consistent"]]
    best = (ok["ratio"].map(math.log).abs()).idxmin()
    df["chosen"] = df.index == best
    return df


# ------------------------------------------------------------------------------------------ predictions
@dataclass(frozen=True, kw_only=True)
class Prediction:
    """pdcalc's number for one registry entry, in the SI unit of :data:`SI_UNITS`."""

    id: str
    predicted: float
    low: float                  # range over the candidates consistent with the source
    high: float
    layout: str
    function: str               # the pdcalc function that computes it
    assumptions: str            # what is assumed where the source is silent
    band: Band
    before: float | None = None  # throughput: the roofline with flat efficiencies under the same conditions
    cost_sources: tuple = ()     # throughput: pdcalc.throughput.CostSource of every published figure used
    costs_from: str = ""         # throughput: the costs.toml tables used, and the cards carried from
    in_sample: bool = False      # set by the same source it is compared with (left out of the statistics)


def _weights(mid: str, scheme) -> Prediction:
    spec = _WEIGHTS[mid]
    df = weight_candidates(mid, scheme)
    ok, best = df[df["consistent"]], df[df["chosen"]].iloc[0]
    fn = "pdcalc.validation.stage_weights (pipeline stage)" if best["pp"] > 1 else "pdcalc.memory.card_weights"
    return Prediction(id=mid, predicted=float(best["predicted_bytes"]), low=float(ok["predicted_bytes"].min()),
                      high=float(ok["predicted_bytes"].max()), layout=best["candidate"], function=fn,
                      assumptions=f"{spec.assumptions} Scheme {best['scheme']}.", band=BANDS[spec.band])


@dataclass(frozen=True, kw_only=True)
class _BudgetSpec:
    weights: str                # the weight measurement of the same log line
    card: str                   # preset, or "h20-3e-as-logged"
    activation_gib: float       # printed in the same log line
    non_torch_gib: float
    logged: tuple[str, ...]     # the text that prints them (in the quotes of the two entries)


_BUDGETS: dict[str, _BudgetSpec] = {
    "vllm-ascend-13439-v4flash-kv-cache-per-card": _BudgetSpec(
        weights="vllm-ascend-13439-v4flash-weights-per-card", card="ascend-910b2", activation_gib=0.21,
        non_torch_gib=0.22, logged=("0.21 GiB for peak activation", "0.22 GiB for non-torch memory")),
    "vllm-13074-r1-h20-3e-kv-cache-per-card": _BudgetSpec(
        weights="vllm-13074-r1-h20-3e-weights-per-card", card="h20-3e-as-logged", activation_gib=0.24,
        non_torch_gib=2.53, logged=("non_torch_memory takes 2.53GiB", "activation peak memory takes 0.24GiB")),
}

#: Visible memory of the H20-3e as its vLLM log prints it (vllm-project/vllm issue #13074, turn 2:
#: "total_gpu_memory (139.72GiB)"); the h20 preset is the 96 GB part.
H20_3E_VISIBLE_GIB = 139.72


@cache
def _card(name: str):
    if name == "h20-3e-as-logged":
        return dataclasses.replace(
            get_card("h20"), name=name, label="NVIDIA H20-3e (memory as logged)",
            hbm_bytes=H20_3E_VISIBLE_GIB * GiB, hbm_visible_bytes=None,
            source="vllm-project/vllm issue #13074: total_gpu_memory (139.72GiB); other fields from the h20 preset")
    return get_card(name)


def _kv_budget(mid: str, scheme) -> Prediction:
    spec, m = _BUDGETS[mid], reg.get(mid)
    w = _weights(spec.weights, scheme)
    w_meas = measured_si(reg.get(spec.weights))
    over = dict(activation_bytes=spec.activation_gib * GiB, overhead_bytes=spec.non_torch_gib * GiB)
    card, u = _card(spec.card), m.gpu_memory_utilization

    def kv(weights: float) -> float:
        return budget(card, weights, utilization=u, **over).kv_bytes

    wb = BANDS[_WEIGHTS[spec.weights].band]
    meas = measured_si(m)
    band = Band(kv(wb.high * w_meas) / meas, kv(wb.low * w_meas) / meas,
                f"The weight band of the same log ({wb.low:g}-{wb.high:g} x the logged weights) carried through "
                "M_KV = u M - W - A - F: the KV budget is off by exactly what the weights are off.")
    return Prediction(id=mid, predicted=kv(w.predicted), low=kv(w.high), high=kv(w.low), layout=w.layout,
                      function="pdcalc.memory.budget (weights: pdcalc.memory.card_weights)",
                      assumptions=(f"Weights as predicted for {spec.weights}. Visible memory: {card.label} "
                                   f"({card.usable_base_bytes / GiB:.2f} GiB), utilization {u:g}. Activation "
                                   f"{spec.activation_gib:g} GiB and non-torch {spec.non_torch_gib:g} GiB taken "
                                   "from the same log line."), band=band)


#: Tokens in the ktransformers/SGLang MLA pool ("--max-total-tokens 10000"; the log's "#tokens: 10000").
KTRANSFORMERS_TOKENS = 10_000

#: The band shaded around 1 in :func:`ratio_chart`.
CHART_BAND = (0.9, 1.1)


def _ktransformers(mid: str) -> Prediction:
    m = reg.get(mid)
    b = kv_bytes("deepseek-v3", KTRANSFORMERS_TOKENS, "reference", include_mtp=False).total_bytes
    return Prediction(id=mid, predicted=b, low=b, high=b, layout=f"TP{m.tp}; latent replicated on each rank",
                      function="pdcalc.kv_cache.kv_bytes (engine 'reference': one contiguous BF16 row per token)",
                      assumptions=("SGLang's MLA pool keeps one BF16 row of kv_lora_rank + rope = 576 values per "
                                   "layer and token, like the reference; 61 layers, no MTP draft. If the printed "
                                   f"'GB' is 2**30 B (SGLang memory_pool's GB constant) the ratio is "
                                   f"{b / (m.value * GiB):.3f}."), band=BANDS["kv-bytes-unit"])


def _atlas_tokens(mid: str) -> Prediction:
    mem = measured_si(reg.get("vllm-atlas-145-r1-nvfp4-gb10-kv-available"))
    block = 64                                      # assumption v3-vllm-block-64 (pdcalc.kv_cache)
    vals = {}
    for mtp in (False, True):
        per_block = kv_bytes("deepseek-v3", block, "vllm", include_mtp=mtp, kv_cache_dtype="fp8").total_bytes
        vals[mtp] = math.floor(mem / per_block) * block
    meas = measured_si(reg.get(mid))
    best = min(vals, key=lambda k: abs(math.log(vals[k] / meas)))
    return Prediction(id=mid, predicted=float(vals[best]), low=float(min(vals.values())),
                      high=float(max(vals.values())), layout=f"TP8; {'61 + 1 (MTP)' if best else '61'} layers",
                      function="pdcalc.kv_cache.kv_bytes (engine 'vllm', kv_cache_dtype 'fp8')",
                      assumptions=("Memory: the 43.55 GiB of the same line. 576 B per layer and token (FP8 latent "
                                   "+ RoPE), 64-token blocks; with or without a cache layer for the MTP draft (not "
                                   "stated): both tried."), band=BANDS["kv-bytes"])


_TE_NETWORK = {"mooncake-te-8x400g-roce-bandwidth": "8 x 400 Gb/s RoCE",
               "mooncake-te-4x200g-roce-bandwidth": "4 x 200 Gb/s RoCE"}
_TE_BYTES = 40e9                                    # "With 40 GB of data"


def _te_bandwidth(mid: str) -> Prediction:
    pts = transfer.bandwidth_points().set_index("network")
    rate = float(pts.loc[_TE_NETWORK[mid], "line_rate_bytes_per_s"])
    lnk = transfer.fit_link().scaled(rate)
    bw = _TE_BYTES / lnk.seconds(_TE_BYTES)
    return Prediction(id=mid, predicted=bw, low=bw, high=bw, layout=_TE_NETWORK[mid],
                      function="pdcalc.transfer.fit_link().scaled(line rate); Link.seconds",
                      assumptions=(f"Fixed cost and efficiency ({lnk.efficiency:.1%}) of the link fitted to "
                                   f"Mooncake's vLLM PD table, carried to {rate / 1e9:g} GB/s of line rate; "
                                   "40 GB (10**9 B) per transfer."), band=BANDS["transfer-carried"])


def _mooncake_point(prompt_tokens: int = 32768):
    m = transfer.measurement()
    i = int(list(m.prompt_tokens).index(prompt_tokens))
    b = float(m.kv_bytes[i])
    return b, transfer.fit_link().seconds(b)


def _mooncake_time(mid: str) -> Prediction:
    b, t = _mooncake_point()
    return Prediction(id=mid, predicted=t, low=t, high=t, layout="1P1D, TP8, 8 x RoCE",
                      function="pdcalc.transfer.fit_link().seconds",
                      assumptions=(f"In sample: the link is fitted to the same table. {b / GiB:.2f} GiB per request "
                                   "(the printed 4.50 'GB' is GiB, pdcalc/data/transfer.toml)."),
                      band=BANDS["transfer-in-sample"])


def _mooncake_bandwidth(mid: str) -> Prediction:
    b, t = _mooncake_point()
    m = reg.get(mid)
    return Prediction(id=mid, predicted=b / t, low=b / t, high=b / t, layout="1P1D, TP8, 8 x RoCE",
                      function="pdcalc.transfer.fit_link().seconds",
                      assumptions=("In sample, as the transfer time. The printed 'GB/s' is GiB/s (4.50 GiB / "
                                   "31.65 ms); read so, the measurement is "
                                   f"{m.value * GiB / 1e9:.1f} GB/s and the ratio {b / t / (m.value * GiB):.3f}."),
                      band=BANDS["transfer-in-sample"])


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
    """Everything :func:`pdcalc.throughput.step` needs to predict one throughput measurement."""

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


def throughput_setup(mid: str) -> ThroughputSetup:
    """The conditions of throughput measurement ``mid`` as the step model needs them: the registry's
    stated fields first, then the open conditions of :data:`_OPEN` (each with its reason), then these
    rules: decode KV length = prompt + half the output; the decode batch from ``batch_per_card``, the
    client ``concurrency`` over the decode cards, or the measured rate times the per-user TPOT (Little's
    law); no overlap, balanced routing and MTP off unless stated. The model is one EP group (or the
    measured instance without EP). Raises :class:`NotPredictable` with the reason otherwise.
    """
    from pdcalc.hardware import card_names

    m = reg.get(mid)
    o = _OPEN.get(mid, _Open(why=""))
    notes = [o.why] if o.why else []
    model = MODEL_PRESETS.get(m.model or "")
    if model is None:
        raise NotPredictable(f"{m.model}: {_NO_PRESET}")
    card = m.card if m.card in card_names() else CARD_ALIASES.get(m.card, (None, ""))[0]
    if card is None:
        raise NotPredictable(f"the card ({m.card}) is not a card preset")
    if m.card in CARD_ALIASES:
        notes.append(f"Card {card}: {CARD_ALIASES[m.card][1]}.")
    quant = _quant(m.quantization) or o.quant
    phase = "prefill" if m.quantity == "prefill_throughput" else "decode"
    rpc = throughput.RANKS_PER_CARD.get(card, 1)
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
    # the registry counts ranks; a card of several dies (RANKS_PER_CARD) holds as many ranks
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
    return ThroughputSetup(id=mid, model=model, card=card, quant=quant, phase=phase, tp=tp_cards, dp=dp, ep=ep,
                           context=context, concurrency=concurrency, mtp_steps=steps,
                           mtp_acceptance=o.mtp_acceptance, eplb=eplb, redundant_experts=o.redundant_experts if ep
                           else 0, overlap=o.overlap, kv_bytes=kv, scale=scale, aggregated=aggregated,
                           little=little, assumptions=" ".join(n for n in notes if n))


def predict_throughput(setup: ThroughputSetup, costs: str = "published", **overrides):
    """The measurement's value as the step model predicts it under ``setup`` (tokens/s per the measurement's
    scope), and the decode or prefill :class:`~pdcalc.throughput.StepTime` behind it.

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


def _throughput_band(mid: str) -> Band:
    if mid in THROUGHPUT_BANDS:
        return THROUGHPUT_BANDS[mid]
    return BANDS["throughput"]


def _throughput_predictions(*, mfu: float = throughput.DEFAULT_MFU, mbu: float = throughput.DEFAULT_MBU,
                            comm_eff: float = throughput.DEFAULT_COMM_EFF, overlap: bool = True,
                            overlap_model: str = throughput.DEFAULT_OVERLAP_MODEL,
                            beyond: bool = True) -> list[Prediction]:
    out = []
    for m in reg.load():
        if not m.is_throughput:
            continue
        try:
            setup = throughput_setup(m.id)
        except NotPredictable:
            continue
        if not overlap:
            setup = dataclasses.replace(setup, overlap=False)
        after, st = predict_throughput(setup, "published", overlap_model=overlap_model, beyond=beyond)
        before, _ = predict_throughput(setup, "roofline", mfu=mfu, mbu=mbu, comm_eff=comm_eff)
        cands = [after]
        if not setup.mtp_steps and setup.phase == "decode" and m.mtp is None:
            cands.append(predict_throughput(setup, "published", mtp_steps=1, overlap_model=overlap_model,
                                            beyond=beyond)[0])
        if setup.overlap:
            cands.append(predict_throughput(setup, "published", overlap=False, beyond=beyond)[0])
            cands.append(predict_throughput(setup, "published", overlap_model="ideal", beyond=beyond)[0])
        carried = sorted({s.measured_on for s in st.cost_sources if s.carried and s.measured_on != "none"})
        tables = sorted({t for s in st.cost_sources for t in s.tables})
        own = beyond and source_document(m.id) == calibration_document(setup.phase)
        out.append(Prediction(
            id=m.id, predicted=after, low=min(cands), high=max(cands), layout=setup.layout(),
            function="pdcalc.validation.predict_throughput (pdcalc.throughput.step, costs='published')",
            assumptions=(setup.assumptions or "As stated.") + (
                " Where the source leaves MTP open, MTP on is the range's other end." if len(cands) > 1
                and not setup.mtp_steps and m.mtp is None else "") + (
                " The serial kernel sum (no overlap) is the range's low end, the ideal overlap (the computation "
                "keeps every SM) its high end." if setup.overlap else "") + (
                " In sample: the prefill step's profiled ratio is read from the same post, and not counted in the "
                "errors." if own else ""),
            band=_throughput_band(m.id), before=before, cost_sources=st.cost_sources,
            costs_from=", ".join(tables) + (f"; carried from {', '.join(carried)}" if carried else ""),
            in_sample=own))
    return out


_SINGLE = {
    "sglang-ktransformers-1804-v3-bf16-kv-10000-tokens": _ktransformers,
    "vllm-atlas-145-r1-nvfp4-gb10-kv-tokens": _atlas_tokens,
    "mooncake-te-8x400g-roce-bandwidth": _te_bandwidth,
    "mooncake-te-4x200g-roce-bandwidth": _te_bandwidth,
    "mooncake-vllm-pd-h800-qwen3-8b-32k-transfer-time": _mooncake_time,
    "mooncake-vllm-pd-h800-qwen3-8b-peak-bandwidth": _mooncake_bandwidth,
}


def band_assumptions() -> dict:
    """The arguments of :func:`predictions` under which every band holds (``tests/test_validation.py``):
    its defaults. With others (a what-if), a prediction outside its band is a result, not a defect."""
    import inspect

    return {k: p.default for k, p in inspect.signature(predictions).parameters.items()}


def predictions(*, mfu: float = throughput.DEFAULT_MFU, mbu: float = throughput.DEFAULT_MBU,
                comm_eff: float = throughput.DEFAULT_COMM_EFF, overlap: bool = True,
                scheme: str | None = None, overlap_model: str = throughput.DEFAULT_OVERLAP_MODEL,
                beyond: bool = True) -> list[Prediction]:
    """pdcalc's prediction for every registry entry it can predict, in registry order.

    Throughput entries are predicted by the published-cost step model (:func:`predict_throughput`), with
    the roofline of flat efficiencies under the same conditions beside it (``Prediction.before``).

    Parameters
    ----------
    mfu, mbu, comm_eff
        The roofline's efficiencies (the ``before`` of each throughput prediction).
    overlap
        Whether a run's stated two-micro-batch overlap is modelled (``False``: every run serial).
    overlap_model
        How it is modelled (:data:`pdcalc.throughput.OVERLAP_MODELS`): ``"published"``, the computation on
        the SMs DeepSeek's profile leaves it; ``"ideal"``, computation and communication never slow each other.
    scheme : str, optional
        Quantization scheme for every weight prediction (and the KV budgets built on them) instead of
        each checkpoint's own (``w8a8``, ``fp8``); what-if candidates keep theirs.
    beyond
        Whether each prefill step takes what DeepSeek's profiled prefill step takes beyond its kernels
        (:func:`pdcalc.throughput.beyond_kernels`); ``False``: the published kernel costs alone.
    """
    if scheme is not None:
        get_scheme(scheme)
    found: dict[str, Prediction] = {}
    for mid in _WEIGHTS:
        found[mid] = _weights(mid, scheme)
    for mid in _BUDGETS:
        found[mid] = _kv_budget(mid, scheme)
    for mid, fn in _SINGLE.items():
        found[mid] = fn(mid)
    for p in _throughput_predictions(mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap,
                                     overlap_model=overlap_model, beyond=beyond):
        found[p.id] = p
    return [found[i] for i in reg.ids() if i in found]


# ------------------------------------------------------------------------------------------ not predicted
_NO_PRESET = "pdcalc has no preset (config.json) for this model"

_STATIC_NOT_PREDICTED: dict[str, str] = {
    "vllm-ascend-16983-v4pro-w4a8-a3-weights-per-card": (
        f"DeepSeek-V4-Pro: {_NO_PRESET}, nor a W4A8 scheme; the TP size is not printed in the excerpt."),
    "sglang-inferencex-2128-v4pro-fp8-h200-tp8-weights": f"DeepSeek-V4-Pro: {_NO_PRESET}.",
    "vllm-recipes-762-v4flash0731-b200-dp8-max-concurrency": (
        f"DeepSeek-V4-Flash-0731: {_NO_PRESET}; vllm-project/vllm issue #51454 gives it 304B parameters, "
        "not the 284B of the DeepSeek-V4-Flash preset."),
    "vllm-recipes-762-v4flash0731-b200-tp8-max-concurrency": (
        f"DeepSeek-V4-Flash-0731: {_NO_PRESET} (304B per vllm-project/vllm issue #51454)."),
    "vllm-44376-v4flash-gh200-tp2-kv-available": (
        "The memory the runtime sees on the GH200 ('96 GB each' is the reporter's), the activation and graph "
        "overhead and the checkpoint are not in the excerpt. The same line's '6.66 GiB KV cache is needed' for "
        "one 30000-token request is the engine's pre-check, which the issue reports as miscomputed."),
    "vllm-atlas-145-r1-nvfp4-gb10-kv-available": (
        "gpu_memory_utilization is not stated, the GB10's unified memory (shared with the CPU) is not a card "
        "preset, and pdcalc has no NVFP4 scheme for the weights."),
    "mooncake-vllm-pd-h800-qwen3-8b-32k-ttft": (
        f"TTFT is mostly Qwen3-8B's prefill: {_NO_PRESET} (pdcalc's step model covers MLA models only)."),
}


def _throughput_reasons() -> dict[str, str]:
    """Why each throughput entry that :func:`throughput_setup` cannot set up is not predicted."""
    out = {}
    for m in reg.load():
        if m.is_throughput:
            try:
                throughput_setup(m.id)
            except NotPredictable as exc:
                out[m.id] = f"Not predicted: {exc}."
    return out


def not_predicted_reasons() -> dict[str, str]:
    """Reasons of every entry pdcalc does not predict: the fixed ones and the throughput set-ups that fail."""
    return {**_STATIC_NOT_PREDICTED, **_throughput_reasons()}


def not_predicted(*, predicted_ids=None) -> pd.DataFrame:
    """Registry entries pdcalc does not predict, with the reason (``None`` when no reason is recorded).

    Columns ``id, quantity, model, engine, reason``.
    """
    done = set(predicted_ids) if predicted_ids is not None else {p.id for p in predictions()}
    reasons = not_predicted_reasons()
    rows = [{"id": m.id, "quantity": m.quantity, "model": m.model, "engine": m.engine,
             "reason": reasons.get(m.id)} for m in reg.load() if m.id not in done]
    return pd.DataFrame(rows, columns=["id", "quantity", "model", "engine", "reason"])


def coverage() -> dict[str, list[str]]:
    """Ids by fate: ``predicted``, ``not_predicted`` (with a reason), ``missing`` (neither)."""
    pred = [p.id for p in predictions()]
    nope = not_predicted(predicted_ids=pred)
    return {"predicted": pred, "not_predicted": nope.loc[nope["reason"].notna(), "id"].tolist(),
            "missing": nope.loc[nope["reason"].isna(), "id"].tolist()}


# ------------------------------------------------------------------------------------------ tables
def table(**kwargs) -> pd.DataFrame:
    """Predicted beside measured, one row per prediction (keyword arguments as :func:`predictions`).

    Columns ``id, quantity, group, model, card, engine, layout, unit, measured, predicted, low, high,
    ratio, ratio_low, ratio_high, band_low, band_high, within_band, function, assumptions, band_why, quote,
    source, before, ratio_before, costs_from``; values in ``unit`` (:data:`SI_UNITS`). ``before`` (throughput
    only) is the roofline with flat efficiencies under the same conditions.
    """
    rows = []
    for p in predictions(**kwargs):
        m = reg.get(p.id)
        meas = measured_si(m)
        rows.append({
            "id": p.id, "quantity": m.quantity, "group": GROUPS[m.quantity], "model": m.model, "card": m.card,
            "engine": m.engine, "layout": p.layout, "unit": SI_UNITS[m.quantity], "measured": meas,
            "predicted": p.predicted, "low": p.low, "high": p.high, "ratio": p.predicted / meas,
            "ratio_low": p.low / meas, "ratio_high": p.high / meas, "band_low": p.band.low, "band_high": p.band.high,
            "within_band": p.band.contains(p.predicted / meas), "function": p.function,
            "assumptions": p.assumptions, "band_why": p.band.why, "quote": m.quote, "source": m.source,
            "before": p.before, "ratio_before": None if p.before is None else p.before / meas,
            "costs_from": p.costs_from, "in_sample": p.in_sample,
        })
    return pd.DataFrame(rows)


#: Display units for :func:`show`: column suffix and divisor from the SI unit.
DISPLAY: dict[str, tuple[str, float]] = {
    "B": ("GiB", GiB), "tokens": ("tokens", 1.0), "tokens/s": ("tokens/s", 1.0), "B/s": ("GB/s", 1e9),
    "s": ("ms", 1e-3),
}


def show(df: pd.DataFrame, quantities, digits: int = 3) -> pd.DataFrame:
    """Rows of :func:`table` for ``quantities``, measured and predicted in a display unit (GiB for memory,
    GB/s for bandwidth, ms for time), with the ratio, the band and the source (quote and locator)."""
    sub = df[df["quantity"].isin([quantities] if isinstance(quantities, str) else list(quantities))]
    units = sub["unit"].unique()
    if len(units) != 1:
        raise LayoutError(f"show() needs rows of one unit, got {list(units)}")
    name, div = DISPLAY[units[0]]
    out = pd.DataFrame({
        "measurement": sub["id"], "layout": sub["layout"],
        f"measured ({name})": (sub["measured"] / div).round(digits),
        f"predicted ({name})": (sub["predicted"] / div).round(digits),
        "predicted / measured": sub["ratio"].round(3),
        "band": [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(sub["band_low"], sub["band_high"])],
        "quote": sub["quote"], "source": sub["source"],
    })
    return tidy(out.set_index("measurement"), MAX_SIG)


def kv_budget_table(scheme: str | None = None) -> pd.DataFrame:
    """The KV budgets of the startup logs, part by part (GiB): what the log prints, what pdcalc puts in its
    place, and the overhead the measurement implies (``u M - W_pdcalc - M_KV``)."""
    rows = []
    for mid, spec in _BUDGETS.items():
        m, mw = reg.get(mid), reg.get(spec.weights)
        card, u = _card(spec.card), m.gpu_memory_utilization
        w_pred = _weights(spec.weights, scheme).predicted
        logged_over = (spec.activation_gib + spec.non_torch_gib) * GiB
        usable = u * card.usable_base_bytes
        check = budget(card, measured_si(mw), utilization=u, activation_bytes=spec.activation_gib * GiB,
                       overhead_bytes=spec.non_torch_gib * GiB).kv_bytes
        rows.append({
            "measurement": mid, "visible (GiB)": card.usable_base_bytes / GiB, "utilization": u,
            "usable (GiB)": usable / GiB, "weights, logged (GiB)": measured_si(mw) / GiB,
            "weights, pdcalc (GiB)": w_pred / GiB, "activation + non-torch, logged (GiB)": logged_over / GiB,
            "KV, measured (GiB)": measured_si(m) / GiB, "KV from logged weights (GiB)": check / GiB,
            "KV, pdcalc (GiB)": (usable - w_pred - logged_over) / GiB,
            "overhead implied by pdcalc weights (GiB)": (usable - w_pred - measured_si(m)) / GiB,
        })
    return pd.DataFrame(rows).set_index("measurement")


# ------------------------------------------------------------------------------------------ chapter helpers
def candidates_table(scheme: str | None = None) -> pd.DataFrame:
    """:func:`weight_candidates` of every weight measurement with open conditions, weights in GiB."""
    parts = {mid: weight_candidates(mid, scheme) for mid in _WEIGHTS}
    df = pd.concat(parts, names=["measurement", "#"])
    df["predicted (GiB)"] = df.pop("predicted_bytes") / GiB
    return df.droplevel("#").set_index("candidate", append=True)


def bands_table() -> pd.DataFrame:
    """The tolerance bands: ``kind, low, high, why``."""
    return pd.DataFrame([{"kind": k, "low": b.low, "high": b.high, "why": b.why} for k, b in BANDS.items()]
                        ).set_index("kind")


def v4_weight_steps() -> pd.DataFrame:
    """From pdcalc's generic ``w8a8`` to the V4-Flash W8A8 checkpoint as vllm-ascend loads it, step by step,
    on the logged layout (EP8, TP1, MTP draft; buffers at the closest max-num-batched-tokens tried): GiB per
    card after each step and its ratio to the log. Each step is a rule of :data:`pdcalc.quant.SCHEMES`
    ``w8a8-msmodelslim`` or :func:`pdcalc.memory.load_buffers`."""
    import dataclasses

    mid = "vllm-ascend-13439-v4flash-weights-per-card"
    meas = measured_si(reg.get(mid))
    chosen = weight_candidates(mid).query("chosen").iloc[0]
    tokens = next(c.batched_tokens for c in _WEIGHTS[mid].cases if c.label == chosen["candidate"])
    v4 = _WEIGHTS[mid].model
    sch = get_scheme(V4_ASCEND_W8A8)
    no_copies = dataclasses.replace(sch, mtp_vocab_copies=False)
    steps = [("every linear layer int8, fp32 scale and offset per row (pdcalc's generic w8a8)",
              card_weights(v4, "w8a8", ep=8, mtp=True).total_bytes),
             ("the recipe's BF16 layers (wo_a, wo_b, router, MTP projections), the loader's scales and router copy",
              card_weights(v4, no_copies, ep=8, mtp=True).total_bytes),
             ("the MTP draft's own BF16 embedding and head", card_weights(v4, sch, ep=8, mtp=True).total_bytes)]
    buffers = load_buffers(v4, "vllm-ascend", max_num_batched_tokens=tokens)
    steps.append((f"buffers built with the model (RoPE tables; max-num-batched-tokens {tokens:,})",
                  steps[-1][1] + sum(buffers.values())))
    return pd.DataFrame([{"step": k, "weights (GiB)": b / GiB, "/ logged": b / meas} for k, b in steps])


def key_numbers(df: pd.DataFrame, scheme: str | None = None) -> dict:
    """The numbers the chapter's prose quotes, by name (floats, ints and short strings, ready to glue).

    ``df`` is :func:`table` for the same parameters.
    """
    r = df.set_index("id")
    ratio = r["ratio"].astype(float)
    out: dict = {"n_pred": len(df), "n_all": len(reg.ids()), "n_not": len(reg.ids()) - len(df)}
    v3 = weight_candidates("vllm-ascend-2191-v3-w8a8-dp4tp4-weights-per-card", scheme)
    on, off = v3[v3["mtp"]].iloc[0], v3[~v3["mtp"]].iloc[0]
    out |= {"v3_on": on["ratio"], "v3_off": off["ratio"], "v3_err_pct": 100 * abs(on["ratio"] - 1),
            "v3_off_gap_gib": (measured_si(reg.get("vllm-ascend-2191-v3-w8a8-dp4tp4-weights-per-card"))
                               - off["predicted_bytes"]) / GiB,
            "v3_mtp_gib": (on["predicted_bytes"] - off["predicted_bytes"]) / GiB}
    rid = "vllm-13074-r1-h20-3e-weights-per-card"
    out |= {"r1": ratio[rid], "r1_low": r.loc[rid, "ratio_low"], "r1_high": r.loc[rid, "ratio_high"],
            "r1_layout": r.loc[rid, "layout"]}
    vid = "vllm-ascend-13439-v4flash-weights-per-card"
    v4 = weight_candidates(vid, scheme)
    meas = measured_si(reg.get(vid))
    ok = v4[v4["consistent"]]
    steps = v4_weight_steps()
    out |= {"v4": ratio[vid], "v4_low": ok["ratio"].min(), "v4_high": ok["ratio"].max(),
            "v4_diff_gib": (r.loc[vid, "predicted"] - meas) / GiB, "v4_pct": 100 * abs(1 - ratio[vid]),
            "v4_worst_pct": 100 * (ok["ratio"] - 1).abs().max(),
            "v4_generic": steps["/ logged"].iloc[0], "v4_generic_pct": 100 * (1 - steps["/ logged"].iloc[0]),
            "v4_whatif": v4.loc[v4["scheme"] == W8A8_EXPERTS_ONLY.name, "ratio"].iloc[0],
            "v4_ep16": v4.loc[(v4["ep"] == 16), "ratio"].iloc[0],
            "band_loader_pct": 100 * (BANDS["weights-loader-open"].high - 1)}
    kb = kv_budget_table(scheme)
    k4, k1 = kb.loc["vllm-ascend-13439-v4flash-kv-cache-per-card"], kb.loc["vllm-13074-r1-h20-3e-kv-cache-per-card"]
    out |= {"v4_kv": ratio["vllm-ascend-13439-v4flash-kv-cache-per-card"],
            "v4_implied_gib": k4["overhead implied by pdcalc weights (GiB)"],
            "v4_logged_gib": k4["activation + non-torch, logged (GiB)"],
            "r1_kv": ratio["vllm-13074-r1-h20-3e-kv-cache-per-card"],
            "r1_implied_gib": k1["overhead implied by pdcalc weights (GiB)"],
            "r1_logged_gib": k1["activation + non-torch, logged (GiB)"],
            "budget_err_gib": (kb["KV from logged weights (GiB)"] - kb["KV, measured (GiB)"]).abs().max()}
    kid = "sglang-ktransformers-1804-v3-bf16-kv-10000-tokens"
    out |= {"kt": ratio[kid], "kt_gib": r.loc[kid, "predicted"] / (reg.get(kid).value * GiB),
            "atlas": ratio["vllm-atlas-145-r1-nvfp4-gb10-kv-tokens"],
            "atlas_low": r.loc["vllm-atlas-145-r1-nvfp4-gb10-kv-tokens", "ratio_low"],
            "atlas_high": r.loc["vllm-atlas-145-r1-nvfp4-gb10-kv-tokens", "ratio_high"]}
    out["kv_err_pct"] = 100 * max(abs(out["atlas_low"] - 1), abs(out["atlas_high"] - 1), abs(out["kt_gib"] - 1))
    out |= throughput_summary(df)
    bw = measured_si(reg.get("mooncake-vllm-pd-h800-qwen3-8b-peak-bandwidth"))
    pts = transfer.bandwidth_points()
    out |= {"moon_t": ratio["mooncake-vllm-pd-h800-qwen3-8b-32k-transfer-time"],
            "moon_bw": ratio["mooncake-vllm-pd-h800-qwen3-8b-peak-bandwidth"],
            "moon_bw_gib": r.loc["mooncake-vllm-pd-h800-qwen3-8b-peak-bandwidth", "predicted"] / (bw / 1e9 * GiB),
            "te8": ratio["mooncake-te-8x400g-roce-bandwidth"], "te4": ratio["mooncake-te-4x200g-roce-bandwidth"],
            "eff_fit_pct": 100 * transfer.fit_link().efficiency,
            "eff_te4_pct": 100 * float(pts["efficiency"].iloc[0]), "eff_te8_pct": 100 * float(pts["efficiency"].iloc[1])}
    return {k: (v if isinstance(v, str) else int(v) if isinstance(v, (int,)) and not isinstance(v, bool)
                else float(v)) for k, v in out.items()}


def _abs_err_pct(ratios) -> pd.Series:
    return 100 * (pd.Series(ratios, dtype=float) - 1).abs()


def _out_of_sample(df: pd.DataFrame) -> pd.DataFrame:
    """The throughput rows of ``df`` that no figure of their own source set (``in_sample`` False)."""
    thr = df[df["group"] == "throughput"]
    return thr[~thr["in_sample"].astype(bool)] if "in_sample" in thr else thr


def throughput_summary(df: pd.DataFrame) -> dict:
    """Errors of the throughput predictions of :func:`table` ``df`` that are out of sample (those a figure
    of their own source sets are counted, ``thr_n_in_sample``, not scored), before (the roofline with flat
    efficiencies) and after (the published-cost model), and of the published-cost model with every run
    serial (no overlap), with the ideal overlap (the computation keeps every SM) and with the kernels alone
    (no profiled step): medians and worst of ``|predicted / measured - 1|`` in %, how many predictions, how
    many within 15 % and beyond 35 %, the worst measurement, and how many runs state an overlap. Also the
    gain of cann-recipes' micro-batch prefill over the same run without micro-batches, predicted (published
    and ideal overlap) and measured: a check, not an input. And the errors once each prediction is divided
    by one factor per phase taken from the other source documents (:func:`cross_validated`):
    ``thr_med_cv``, ``thr_worst_cv``, ...."""
    every = df[df["group"] == "throughput"]
    thr = _out_of_sample(df)
    ids = list(thr["id"])
    after, before = _abs_err_pct(thr["ratio"]), _abs_err_pct(thr["ratio_before"])

    def ratios(**kw):
        return {p.id: p.predicted / measured_si(reg.get(p.id)) for p in _throughput_predictions(**kw)}

    serial, ideal, kernels = ratios(overlap=False), ratios(overlap_model="ideal"), ratios(beyond=False)
    ker = _abs_err_pct([kernels[i] for i in ids])
    ser = _abs_err_pct([serial[i] for i in ids])
    ide = _abs_err_pct([ideal[i] for i in ids])
    stated = [i for i in ids if throughput_setup(i).overlap]
    ser_ov = _abs_err_pct([serial[i] for i in stated])
    ide_ov = _abs_err_pct([ideal[i] for i in stated])
    aft_ov = _abs_err_pct(thr.set_index("id").loc[stated, "ratio"])
    worst = ids[int(after.to_numpy().argmax())]
    cvd = cross_validated(df)
    scored = cvd.dropna(subset=["cross-validated"])
    cv_err = _abs_err_pct(scored["cross-validated"])
    cv = {"thr_med_cv": cv_err.median(), "thr_worst_cv": cv_err.max(),
          "thr_worst_cv_id": scored["measurement"].iloc[int(cv_err.to_numpy().argmax())],
          "thr_within15_cv": int((cv_err <= 15).sum()), "thr_beyond35_cv": int((cv_err > 35).sum()),
          "thr_cv_n": len(scored), "thr_sources": int(cvd["source"].nunique())}
    k_pf, _ = throughput.beyond_kernels("prefill")
    cv |= {"thr_med_kernels": ker.median(), "thr_worst_kernels": ker.max(),
           "thr_within15_kernels": int((ker <= 15).sum()), "thr_beyond35_kernels": int((ker > 35).sum()),
           "beyond_prefill": k_pf}
    mb, nomb = "cann-recipes-a3-r1-prefill-per-card-microbatch", "cann-recipes-a3-r1-prefill-per-card-no-microbatch"
    gain = {}
    if {mb, nomb} <= set(ids):
        meas = measured_si(reg.get(mb)) / measured_si(reg.get(nomb))
        pred = thr.set_index("id")["predicted"]
        gain = {"mb_gain_measured": meas, "mb_gain_after": pred[mb] / pred[nomb],
                "mb_gain_ideal": ideal[mb] / ideal[nomb] * meas}
    return {"thr_n": len(thr), "thr_n_all": len(every), "thr_n_in_sample": len(every) - len(thr),
            "thr_med_before": before.median(), "thr_worst_before": before.max(),
            "thr_med_after": after.median(), "thr_worst_after": after.max(), "thr_worst_id": worst,
            "thr_within15": int((after <= 15).sum()), "thr_beyond35": int((after > 35).sum()),
            "thr_med_serial": ser.median(), "thr_worst_serial": ser.max(),
            "thr_within15_serial": int((ser <= 15).sum()), "thr_n_overlap": len(stated),
            "thr_med_overlap_serial": ser_ov.median() if len(stated) else 0.0,
            "thr_med_overlap_after": aft_ov.median() if len(stated) else 0.0,
            "thr_worst_overlap_after": aft_ov.max() if len(stated) else 0.0,
            "thr_med_ideal": ide.median(), "thr_worst_ideal": ide.max(),
            "thr_med_overlap_ideal": ide_ov.median() if len(stated) else 0.0,
            "thr_worst_overlap_ideal": ide_ov.max() if len(stated) else 0.0} | gain | cv


def throughput_misses(df: pd.DataFrame, pct: float = 35) -> pd.DataFrame:
    """The out-of-sample throughput predictions of :func:`table` ``df`` that miss by more than ``pct`` %,
    worst first, each with the reason its band gives. Columns ``measurement, after / measured, why``."""
    thr = _out_of_sample(df)
    err = _abs_err_pct(thr["ratio"]).to_numpy()
    out = pd.DataFrame({"measurement": thr["id"].to_numpy(), "after / measured": thr["ratio"].to_numpy(float),
                        "why": thr["band_why"].to_numpy(), "err": err})
    return out[out["err"] > pct].sort_values("err", ascending=False).drop(columns="err").reset_index(drop=True)


def source_document(mid: str) -> str:
    """The document a measurement was published in: its registry URL without the fragment."""
    m = reg.get(mid)
    return (m.url or m.source).split("#")[0]


def calibration_document(phase: str) -> str | None:
    """The document the profiled step of ``phase`` (:func:`pdcalc.throughput.beyond_kernels`) takes its
    rate from, or ``None``: a measurement of that phase from the same document is in sample."""
    p = throughput._profiled_steps().get(phase)
    return None if p is None else (p.url or p.source).split("#")[0]


def short_source(url: str) -> str:
    """A source document as a table shows it: the host and the last part of the path."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    last = [part for part in u.path.split("/") if part]
    if u.netloc.endswith("arxiv.org") and last:
        return f"arXiv {last[-1]}"
    return f"{u.netloc.removeprefix('www.')} {last[-1] if last else ''}".strip()


def cross_validated(df: pd.DataFrame) -> pd.DataFrame:
    """What one engine factor per phase would do, estimated out of sample: each out-of-sample throughput
    prediction of :func:`table` ``df`` divided by the median, over every *other* source document of the same
    phase, of that document's median predicted/measured (leave one source out, so no measurement, nor any
    other from its own document, sets the factor it is divided by). A phase with no other document gives
    no factor (NaN). In-sample rows neither take nor give a factor.

    A check of the hypothesis that real engines run slower than the published kernels by a factor common to
    a phase, not a calibration of pdcalc: no prediction elsewhere uses these factors.

    Columns ``measurement, phase, source, after / measured, factor (other sources), cross-validated``.
    """
    thr = _out_of_sample(df)
    d = pd.DataFrame({"measurement": thr["id"].to_numpy(),
                      "phase": thr["quantity"].map({"prefill_throughput": "prefill",
                                                    "decode_throughput": "decode"}).to_numpy(),
                      "source": [source_document(i) for i in thr["id"]],
                      "after / measured": thr["ratio"].to_numpy(float)})
    per_source = d.groupby(["phase", "source"])["after / measured"].median()
    factor = []
    for ph, src in zip(d["phase"], d["source"]):
        others = per_source[ph].drop(src)
        factor.append(float(others.median()) if len(others) else float("nan"))
    d["factor (other sources)"] = factor
    d["cross-validated"] = d["after / measured"] / d["factor (other sources)"]
    return d


def throughput_table(df: pd.DataFrame) -> pd.DataFrame:
    """The throughput rows of :func:`table` as the chapter shows them: measurement, card, phase, measured,
    the roofline's prediction and ratio (before) and the published-cost model's (after) (tokens/s per the
    measurement's scope; the cost tables of each are in :func:`throughput_conditions`)."""
    thr = df[df["group"] == "throughput"]
    phase = thr["quantity"].map({"prefill_throughput": "prefill", "decode_throughput": "decode"})
    cards = [throughput_setup(i).card for i in thr["id"]]
    return pd.DataFrame({
        "measurement": thr["id"].to_numpy(), "card": cards, "phase": phase.to_numpy(),
        "measured (tokens/s)": thr["measured"].to_numpy(float), "before (tokens/s)": thr["before"].to_numpy(float),
        "before / measured": thr["ratio_before"].to_numpy(float), "after (tokens/s)": thr["predicted"].to_numpy(float),
        "after / measured": thr["ratio"].to_numpy(float)})


_CARRIED_HOW = {"GEMM": "as shares of the measured card's peak in its dtype and of its HBM bandwidth",
                "beyond": "the profiled step's time over its kernel sum, as the same ratio of the card's prefill step",
                "MLA": "as a share of the measured card's peak (compute) or HBM bandwidth (memory)",
                "MoE": "latency kept, bandwidth scaled by the cards' per-rank link bandwidth",
                "TP": "latency kept, bandwidth scaled by the cards' link bandwidth",
                "expert-load": "the published max/mean, taken for every card and EP size",
                "two-micro-batch": "the H800's share of SMs held by communication, as the same share of the "
                                   "card's compute units"}


def throughput_conditions(df: pd.DataFrame) -> pd.DataFrame:
    """Per throughput row of ``df``: the layout modelled, what was assumed where the source is silent, the
    cost tables the prediction took its costs from, the band the test holds it to and why that band."""
    thr = df[df["group"] == "throughput"]
    return pd.DataFrame({
        "measurement": thr["id"].to_numpy(), "layout": thr["layout"].to_numpy(),
        "assumptions": thr["assumptions"].to_numpy(), "costs from": thr["costs_from"].to_numpy(),
        "band": [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(thr["band_low"], thr["band_high"])],
        "why this band": thr["band_why"].to_numpy()})


def carried_costs(df: pd.DataFrame) -> pd.DataFrame:
    """Every cost the throughput predictions of ``df`` carried from another card or dtype: the component,
    the card it is applied to, the card (and dtype) it was measured on, how it was carried, and how many
    predictions use it."""
    rows: dict = {}
    ids = set(df["id"])
    for p in predictions():
        if p.id not in ids:
            continue
        card = throughput_setup(p.id).card if p.cost_sources else None
        for s in p.cost_sources:
            if not s.carried or s.measured_on == "none":
                continue
            key = (s.component, card, s.measured_on)
            rows[key] = rows.get(key, 0) + 1
    return pd.DataFrame([{"cost": c, "applied to": a, "measured on": m,
                          "how": _CARRIED_HOW.get(c.split(" ")[0], ""), "predictions": n}
                         for (c, a, m), n in sorted(rows.items())])


#: Components of a published-cost step, in the order the per-card table shows them.
_COMPONENTS = ("GEMM (dense)", "GEMM (grouped contiguous)", "GEMM (grouped masked)", "MLA attention, compute",
               "MLA attention, memory", "MoE dispatch (normal)", "MoE dispatch (low latency)", "TP all-reduce")


def card_cost_sources(cards=None) -> pd.DataFrame:
    """Where each card preset takes each published cost from: one row per card, one column per component
    (:data:`_COMPONENTS`), each cell the card and dtype measured and ``(carried)`` where it is not the card
    itself. Read off DeepSeek-V3 prefill and decode steps on 32 cards with TP2 (every component appears;
    the EP group crosses servers)."""
    from pdcalc.hardware import card_names

    rows = []
    for card in cards or card_names():
        c = get_card(card)
        quant = "fp8" if "fp8" in c.flops_per_s else "w8a8"
        found: dict = {}
        for phase in ("prefill", "decode"):
            st = throughput.step("deepseek-v3", card, tp=2, dp=16, ep=32, context=2048, concurrency=64,
                                 phase=phase, quant=quant, costs="published")
            for s in st.cost_sources:
                if s.component in _COMPONENTS:
                    found[s.component] = f"{s.measured_on}{' (carried)' if s.carried else ''}"
        rows.append({"card": card, **{k: found.get(k, "") for k in _COMPONENTS}})
    return pd.DataFrame(rows)


def error_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per group of :func:`table`: how many predictions, the lowest and highest ratio, the worst error
    (the largest ``|ratio - 1|``, in %) and the widest band the tests hold the group to."""
    g = df.groupby("group")
    out = pd.DataFrame({
        "predictions": g.size(),
        "lowest ratio": g["ratio"].min(),
        "highest ratio": g["ratio"].max(),
        "worst error (%)": g["ratio"].apply(lambda r: 100 * (r - 1).abs().max()),
        "band held in tests": g.apply(lambda x: f"{x['band_low'].min():.2f} to {x['band_high'].max():.2f}",
                                      include_groups=False),
    })
    return out


#: The articles' own predictions of a measured quantity: (label, claim id, bytes per printed unit,
#: multiplier to the measured quantity, measurement id).
_ARTICLE_CASES = (
    ("V4 article: weights on a P card (EP8, W8A8)", "v4-6.2-p-weight-card", 1e9, 1,
     "vllm-ascend-13439-v4flash-weights-per-card"),
    (f"V3 article: MLA cache of {KTRANSFORMERS_TOKENS:,} tokens, BF16 (its per-token figure x "
     f"{KTRANSFORMERS_TOKENS:,})", "v3-2.3.1-kv-mla-per-token", 2**20, KTRANSFORMERS_TOKENS,
     "sglang-ktransformers-1804-v3-bf16-kv-10000-tokens"),
)


def articles_vs_measurements(df: pd.DataFrame) -> pd.DataFrame:
    """Where an article predicts a measured quantity: its number, pdcalc's, the measurement, both ratios."""
    from pdcalc.claims import get_claim

    r = df.set_index("id")
    rows = []
    for label, cid, unit_bytes, times, mid in _ARTICLE_CASES:
        c = get_claim(cid)
        art = float(c.value) * unit_bytes * times
        meas, pred = float(r.loc[mid, "measured"]), float(r.loc[mid, "predicted"])
        rows.append({"quantity": label, "article prints": c.printed, "article (GB)": art / 1e9,
                     "pdcalc (GB)": pred / 1e9, "measured (GB)": meas / 1e9, "article / measured": art / meas,
                     "pdcalc / measured": pred / meas, "measurement": mid})
    return pd.DataFrame(rows).set_index("quantity")


# -------------------------------------------------------------------------------- logged weights
@dataclass(frozen=True)
class LoggedWeights:
    """A weight figure an engine logged for one card of an exact layout (see :func:`logged_weights`)."""

    bytes: float            # per card, in bytes (``unit_means`` applied)
    id: str                 # the registry entry
    source: str             # where the log line is (the entry's ``source``)
    url: str | None         # the entry's ``url``
    layout: str             # the layout the log is read as (pdcalc.validation's candidate label)


def logged_weights(model, quant: str, *, ep: int, tp: int = 1, mtp: bool = True) -> LoggedWeights | None:
    """The registry's logged per-card weights of ``model`` in ``quant`` on an EP ``ep`` x TP ``tp`` layout.

    A log applies to a layout only where :mod:`pdcalc.validation` reads the entry as that layout: one of
    its candidate layouts *consistent with the source* (:func:`pdcalc.weight_candidates`,
    ``consistent``) has the same model preset (:data:`pdcalc.MODEL_PRESETS`), scheme, EP
    group, TP degree and MTP draft, and a single pipeline stage. Where the source leaves the MTP draft
    open, both readings are consistent and either matches. Nothing is extrapolated to other layouts.

    Parameters
    ----------
    model : str
        A model preset name (``deepseek-v4-flash``, ``deepseek-v3``); a config file matches nothing.
    quant : str
        The :mod:`pdcalc.quant` scheme of the checkpoint (``w8a8``).
    ep, tp : int
        Cards in the EP group (the instance) and the TP degree.
    mtp : bool
        Whether the MTP draft is loaded.

    Returns
    -------
    LoggedWeights or None
        The first matching entry in registry order, or ``None`` when no log exists for that layout.

    Examples
    --------
    >>> w = logged_weights("deepseek-v4-flash", "w8a8", ep=8, mtp=True)
    >>> w.id, w.bytes == 47.4 * 2**30
    ('vllm-ascend-13439-v4flash-weights-per-card', True)
    >>> logged_weights("deepseek-v4-flash", "w8a8", ep=16) is None
    True
    """
    if not isinstance(model, str) or not isinstance(quant, str):
        return None
    return _logged_weights(model, quant, int(ep), int(tp), bool(mtp))


@cache
def _logged_weights(model: str, quant: str, ep: int, tp: int, mtp: bool) -> LoggedWeights | None:
    for m in reg.load():
        if m.quantity != "weight_memory_per_card" or MODEL_PRESETS.get(m.model) != model:
            continue
        try:
            cases = weight_candidates(m.id)
        except UnknownNameError:          # no layout reading of this entry
            continue
        hit = cases[cases["consistent"] & (cases["scheme"] == quant) & (cases["ep"] == ep) & (cases["tp"] == tp)
                    & (cases["pp"] == 1) & (cases["mtp"] == mtp)]
        if len(hit):
            return LoggedWeights(bytes=reg.to_bytes(m), id=m.id, source=m.source, url=m.url,
                                 layout=str(hit["candidate"].iloc[0]))
    return None
