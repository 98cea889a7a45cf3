"""Per-card weights the engines log, read as layouts: every layout a log is consistent with, the
weights pdcalc gives for each, and the logged figure of an exact layout (:func:`logged_weights`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import pandas as pd

from pdcalc.core.errors import LayoutError, UnknownNameError
from pdcalc.core.units import GiB
from pdcalc.layout.memory import card_weights, load_buffers, tensor_card_bytes
from pdcalc.layout.parallel import place_experts
from pdcalc.model.inventory import get_inventory
from pdcalc.model.quant import V4_ASCEND_W8A8, Rule, Scheme, get_scheme
from pdcalc.reality import measurements as reg
from pdcalc.reality.bands import BANDS, MODEL_PRESETS, V4_LOG_BATCHED_TOKENS, Prediction, measured_si

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
    :func:`pdcalc.layout.memory.card_weights`, the embedding on the first stage, the final norm and the output
    head on the last.

    With ``pp = 1`` this is ``card_weights(...).total_bytes``. Routed experts split by TP without expert
    parallelism take the same bytes as ``ep = tp`` whenever each slice holds whole scale blocks (FP8:
    2048 / 8 = 256 rows, two 128-row blocks).

    .. math:: W_\\text{stage} = \\sum_{t \\in \\text{stage}} \\frac{W_t}{s_t}, \\qquad
       s_t = t_\\text{TP} \\;(\\text{TP-split}), \\; E / n_\\text{card} \\;(\\text{EP-split}), \\; 1

    Raises :class:`~pdcalc.core.errors.LayoutError` for MTP with ``pp > 1`` (where the draft sits is not
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


WEIGHT_SPECS: dict[str, _WeightSpec] = {
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
                     "(pdcalc.layout.memory.load_buffers); the run's max-num-batched-tokens is not in the log: "
                     "the range tried.")),
}


def weight_candidates(measurement_id: str, scheme: str | None = None) -> pd.DataFrame:
    """Every candidate layout of a weight measurement, its bytes and ratio to the measurement.

    Columns ``candidate, scheme, ep, tp, pp, stage, mtp, consistent, predicted_bytes, ratio, chosen``;
    ``consistent`` marks the candidates the source allows, ``chosen`` the one closest to the measurement
    among them. ``scheme`` overrides the cases' scheme (what-if schemes keep their own).
    """
    if measurement_id not in WEIGHT_SPECS:
        raise UnknownNameError("weight measurement with candidates", measurement_id, WEIGHT_SPECS)
    spec, m = WEIGHT_SPECS[measurement_id], reg.get(measurement_id)
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


def weights_prediction(mid: str, scheme) -> Prediction:
    spec = WEIGHT_SPECS[mid]
    df = weight_candidates(mid, scheme)
    ok, best = df[df["consistent"]], df[df["chosen"]].iloc[0]
    fn = ("pdcalc.reality.weights.stage_weights (pipeline stage)" if best["pp"] > 1
          else "pdcalc.layout.memory.card_weights")
    return Prediction(id=mid, predicted=float(best["predicted_bytes"]), low=float(ok["predicted_bytes"].min()),
                      high=float(ok["predicted_bytes"].max()), layout=best["candidate"], function=fn,
                      assumptions=f"{spec.assumptions} Scheme {best['scheme']}.", band=BANDS[spec.band])


# ------------------------------------------------------------------------------------------ chapter helpers
def candidates_table(scheme: str | None = None) -> pd.DataFrame:
    """:func:`weight_candidates` of every weight measurement with open conditions, weights in GiB."""
    parts = {mid: weight_candidates(mid, scheme) for mid in WEIGHT_SPECS}
    df = pd.concat(parts, names=["measurement", "#"])
    df["predicted (GiB)"] = df.pop("predicted_bytes") / GiB
    return df.droplevel("#").set_index("candidate", append=True)


def v4_weight_steps() -> pd.DataFrame:
    """From pdcalc's generic ``w8a8`` to the V4-Flash W8A8 checkpoint as vllm-ascend loads it, step by step,
    on the logged layout (EP8, TP1, MTP draft; buffers at the closest max-num-batched-tokens tried): GiB per
    card after each step and its ratio to the log. Each step is a rule of :data:`pdcalc.model.quant.SCHEMES`
    ``w8a8-msmodelslim`` or :func:`pdcalc.layout.memory.load_buffers`."""
    import dataclasses

    mid = "vllm-ascend-13439-v4flash-weights-per-card"
    meas = measured_si(reg.get(mid))
    chosen = weight_candidates(mid).query("chosen").iloc[0]
    tokens = next(c.batched_tokens for c in WEIGHT_SPECS[mid].cases if c.label == chosen["candidate"])
    v4 = WEIGHT_SPECS[mid].model
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


# -------------------------------------------------------------------------------- logged weights
@dataclass(frozen=True)
class LoggedWeights:
    """A weight figure an engine logged for one card of an exact layout (see :func:`logged_weights`)."""

    bytes: float            # per card, in bytes (``unit_means`` applied)
    id: str                 # the registry entry
    source: str             # where the log line is (the entry's ``source``)
    url: str | None         # the entry's ``url``
    layout: str             # the layout the log is read as (pdcalc.reality.validation's candidate label)


def logged_weights(model, quant: str, *, ep: int, tp: int = 1, mtp: bool = True) -> LoggedWeights | None:
    """The registry's logged per-card weights of ``model`` in ``quant`` on an EP ``ep`` x TP ``tp`` layout.

    A log applies to a layout only where :mod:`pdcalc.reality.validation` reads the entry as that layout: one of
    its candidate layouts *consistent with the source* (:func:`pdcalc.weight_candidates`,
    ``consistent``) has the same model preset (:data:`pdcalc.MODEL_PRESETS`), scheme, EP
    group, TP degree and MTP draft, and a single pipeline stage. Where the source leaves the MTP draft
    open, both readings are consistent and either matches. Nothing is extrapolated to other layouts.

    Parameters
    ----------
    model : str
        A model preset name (``deepseek-v4-flash``, ``deepseek-v3``); a config file matches nothing.
    quant : str
        The :mod:`pdcalc.model.quant` scheme of the checkpoint (``w8a8``).
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
