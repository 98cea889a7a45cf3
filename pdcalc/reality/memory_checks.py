"""Predictions of the registry's KV-budget, KV-pool and KV-transfer measurements: the memory an engine
keeps for the cache after weights, activations and framework memory, the tokens a pool holds, and Mooncake's
transfer times and bandwidths.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cache

import pandas as pd

from pdcalc.core.units import GiB
from pdcalc.hardware.cards import get_card
from pdcalc.layout.memory import budget
from pdcalc.model.kv_cache import kv_bytes
from pdcalc.perf import transfer
from pdcalc.reality import measurements as reg
from pdcalc.reality.bands import BANDS, Band, Prediction, measured_si
from pdcalc.reality.weights import WEIGHT_SPECS, weights_prediction


@dataclass(frozen=True, kw_only=True)
class _BudgetSpec:
    weights: str                # the weight measurement of the same log line
    card: str                   # preset, or "h20-3e-as-logged"
    activation_gib: float       # printed in the same log line
    non_torch_gib: float
    logged: tuple[str, ...]     # the text that prints them (in the quotes of the two entries)


BUDGET_SPECS: dict[str, _BudgetSpec] = {
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


def kv_budget_prediction(mid: str, scheme) -> Prediction:
    spec, m = BUDGET_SPECS[mid], reg.get(mid)
    w = weights_prediction(spec.weights, scheme)
    w_meas = measured_si(reg.get(spec.weights))
    over = dict(activation_bytes=spec.activation_gib * GiB, overhead_bytes=spec.non_torch_gib * GiB)
    card, u = _card(spec.card), m.gpu_memory_utilization

    def kv(weights: float) -> float:
        return budget(card, weights, utilization=u, **over).kv_bytes

    wb = BANDS[WEIGHT_SPECS[spec.weights].band]
    meas = measured_si(m)
    band = Band(kv(wb.high * w_meas) / meas, kv(wb.low * w_meas) / meas,
                f"The weight band of the same log ({wb.low:g}-{wb.high:g} x the logged weights) carried through "
                "M_KV = u M - W - A - F: the KV budget is off by exactly what the weights are off.")
    return Prediction(id=mid, predicted=kv(w.predicted), low=kv(w.high), high=kv(w.low), layout=w.layout,
                      function="pdcalc.layout.memory.budget (weights: pdcalc.layout.memory.card_weights)",
                      assumptions=(f"Weights as predicted for {spec.weights}. Visible memory: {card.label} "
                                   f"({card.usable_base_bytes / GiB:.2f} GiB), utilization {u:g}. Activation "
                                   f"{spec.activation_gib:g} GiB and non-torch {spec.non_torch_gib:g} GiB taken "
                                   "from the same log line."), band=band)


#: Tokens in the ktransformers/SGLang MLA pool ("--max-total-tokens 10000"; the log's "#tokens: 10000").
KTRANSFORMERS_TOKENS = 10_000


def ktransformers_prediction(mid: str) -> Prediction:
    m = reg.get(mid)
    b = kv_bytes("deepseek-v3", KTRANSFORMERS_TOKENS, "reference", include_mtp=False).total_bytes
    return Prediction(id=mid, predicted=b, low=b, high=b, layout=f"TP{m.tp}; latent replicated on each rank",
                      function="pdcalc.model.kv_cache.kv_bytes (engine 'reference': one contiguous BF16 row per token)",
                      assumptions=("SGLang's MLA pool keeps one BF16 row of kv_lora_rank + rope = 576 values per "
                                   "layer and token, like the reference; 61 layers, no MTP draft. If the printed "
                                   f"'GB' is 2**30 B (SGLang memory_pool's GB constant) the ratio is "
                                   f"{b / (m.value * GiB):.3f}."), band=BANDS["kv-bytes-unit"])


def atlas_tokens_prediction(mid: str) -> Prediction:
    mem = measured_si(reg.get("vllm-atlas-145-r1-nvfp4-gb10-kv-available"))
    block = 64                                      # assumption v3-vllm-block-64 (pdcalc.model.kv_layout)
    vals = {}
    for mtp in (False, True):
        per_block = kv_bytes("deepseek-v3", block, "vllm", include_mtp=mtp, kv_cache_dtype="fp8").total_bytes
        vals[mtp] = math.floor(mem / per_block) * block
    meas = measured_si(reg.get(mid))
    best = min(vals, key=lambda k: abs(math.log(vals[k] / meas)))
    return Prediction(id=mid, predicted=float(vals[best]), low=float(min(vals.values())),
                      high=float(max(vals.values())), layout=f"TP8; {'61 + 1 (MTP)' if best else '61'} layers",
                      function="pdcalc.model.kv_cache.kv_bytes (engine 'vllm', kv_cache_dtype 'fp8')",
                      assumptions=("Memory: the 43.55 GiB of the same line. 576 B per layer and token (FP8 latent "
                                   "+ RoPE), 64-token blocks; with or without a cache layer for the MTP draft (not "
                                   "stated): both tried."), band=BANDS["kv-bytes"])


_TE_NETWORK = {"mooncake-te-8x400g-roce-bandwidth": "8 x 400 Gb/s RoCE",
               "mooncake-te-4x200g-roce-bandwidth": "4 x 200 Gb/s RoCE"}
_TE_BYTES = 40e9                                    # "With 40 GB of data"


def te_bandwidth_prediction(mid: str) -> Prediction:
    pts = transfer.bandwidth_points().set_index("network")
    rate = float(pts.loc[_TE_NETWORK[mid], "line_rate_bytes_per_s"])
    lnk = transfer.fit_link().scaled(rate)
    bw = _TE_BYTES / lnk.seconds(_TE_BYTES)
    return Prediction(id=mid, predicted=bw, low=bw, high=bw, layout=_TE_NETWORK[mid],
                      function="pdcalc.perf.transfer.fit_link().scaled(line rate); Link.seconds",
                      assumptions=(f"Fixed cost and efficiency ({lnk.efficiency:.1%}) of the link fitted to "
                                   f"Mooncake's vLLM PD table, carried to {rate / 1e9:g} GB/s of line rate; "
                                   "40 GB (10**9 B) per transfer."), band=BANDS["transfer-carried"])


def _mooncake_point(prompt_tokens: int = 32768):
    m = transfer.measurement()
    i = int(list(m.prompt_tokens).index(prompt_tokens))
    b = float(m.kv_bytes[i])
    return b, transfer.fit_link().seconds(b)


def mooncake_time_prediction(mid: str) -> Prediction:
    b, t = _mooncake_point()
    return Prediction(id=mid, predicted=t, low=t, high=t, layout="1P1D, TP8, 8 x RoCE",
                      function="pdcalc.perf.transfer.fit_link().seconds",
                      assumptions=(f"In sample: the link is fitted to the same table. {b / GiB:.2f} GiB per request "
                                   "(the printed 4.50 'GB' is GiB, pdcalc/data/transfer.toml)."),
                      band=BANDS["transfer-in-sample"])


def mooncake_bandwidth_prediction(mid: str) -> Prediction:
    b, t = _mooncake_point()
    m = reg.get(mid)
    return Prediction(id=mid, predicted=b / t, low=b / t, high=b / t, layout="1P1D, TP8, 8 x RoCE",
                      function="pdcalc.perf.transfer.fit_link().seconds",
                      assumptions=("In sample, as the transfer time. The printed 'GB/s' is GiB/s (4.50 GiB / "
                                   "31.65 ms); read so, the measurement is "
                                   f"{m.value * GiB / 1e9:.1f} GB/s and the ratio {b / t / (m.value * GiB):.3f}."),
                      band=BANDS["transfer-in-sample"])


def kv_budget_table(scheme: str | None = None) -> pd.DataFrame:
    """The KV budgets of the startup logs, part by part (GiB): what the log prints, what pdcalc puts in its
    place, and the overhead the measurement implies (``u M - W_pdcalc - M_KV``)."""
    rows = []
    for mid, spec in BUDGET_SPECS.items():
        m, mw = reg.get(mid), reg.get(spec.weights)
        card, u = _card(spec.card), m.gpu_memory_utilization
        w_pred = weights_prediction(spec.weights, scheme).predicted
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
