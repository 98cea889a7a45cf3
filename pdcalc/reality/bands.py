"""What a prediction of a registry measurement is (:class:`Prediction`) and how far from the
measurement it may fall (:class:`Band`, per quantity and per throughput run, each with its reason).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdcalc.core.errors import LayoutError
from pdcalc.core.units import GiB
from pdcalc.layout.memory import load_buffers
from pdcalc.perf import costs
from pdcalc.reality import measurements as reg

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
#: setting sizes buffers allocated with the model (pdcalc.layout.memory.load_buffers); 4,096 to 16,384 tokens.
V4_LOG_BATCHED_TOKENS = (4096, 8192, 16384)


def _loader_band_why() -> str:
    """Why the V4-Flash W8A8 weights are held to 3 %, with the two open amounts computed."""
    from pdcalc.model.config import load_config

    lo, hi = V4_LOG_BATCHED_TOKENS[0], V4_LOG_BATCHED_TOKENS[-1]
    spread = (sum(load_buffers("deepseek-v4-flash", max_num_batched_tokens=hi).values())
              - sum(load_buffers("deepseek-v4-flash", max_num_batched_tokens=lo).values()))
    cfg = load_config("deepseek-v4-flash")
    head = cfg.vocab_size * cfg.hidden_size * 2
    return ("Checkpoint dtypes from the quantization recipe and every allocation of the loader from its code "
            f"(w8a8-msmodelslim, pdcalc.layout.memory.load_buffers); open: the run's max-num-batched-tokens, "
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
        "Bytes per token are exact; the band spans both readings of the printed 'GB' (10⁹ B as printed, "
        "2³⁰ B as SGLang's memory pool computes it: a factor 1.074) and the 2-decimal rounding of 0.65.")),
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
    cost_sources: tuple = ()     # throughput: pdcalc.perf.kernels.CostSource of every published figure used
    costs_from: str = ""         # throughput: the costs.toml tables used, and the cards carried from
    in_sample: bool = False      # set by the same source it is compared with (left out of the statistics)


#: The band shaded around 1 in :func:`ratio_chart`.
CHART_BAND = (0.9, 1.1)


# ------------------------------------------------------------------------------------------ not predicted
NO_PRESET = "pdcalc has no preset (config.json) for this model"
