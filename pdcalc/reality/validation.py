"""How close to reality: pdcalc's predictions beside published measurements.

For every entry of the measurements registry (:mod:`pdcalc.reality.measurements`) that pdcalc can predict,
:func:`predictions` computes the prediction under the entry's stated conditions; :func:`table` puts it
beside the measured value (both in SI units: bytes, tokens, tokens/s, bytes/s, seconds) with the ratio
predicted / measured, the pdcalc function used and the assumptions made where the source leaves a
condition open. Every other entry is listed by :func:`not_predicted` with the reason, so that no
measurement drops out silently (:func:`coverage`).

Quantities and the functions that predict them:

- weight memory per card: :func:`pdcalc.layout.memory.card_weights`; one pipeline stage:
  :func:`stage_weights`;
- KV-cache memory per card: :func:`pdcalc.layout.memory.budget`,

  .. math:: M_\\text{KV} = u\\,M_\\text{visible} - W - A - F

  with ``W`` from pdcalc and the activation peak ``A`` and non-torch memory ``F`` taken from the same
  log line (pdcalc does not predict them); :func:`kv_budget_table` also shows the overhead the
  measurement implies, ``u M - W - M_KV``;
- KV-cache bytes and capacity: :func:`pdcalc.model.kv_cache.kv_bytes` in the engine's layout, tokens =
  memory / bytes per token;
- throughput: :func:`predict_throughput` (:func:`pdcalc.perf.step.step` with ``costs="published"``,
  the roofline of flat efficiencies beside it);
- KV transfer: :func:`pdcalc.perf.transfer.fit_link`, :meth:`pdcalc.perf.transfer.Link.seconds`.

Where a condition is open (a layout, whether the MTP draft is loaded) every candidate consistent with
the source is computed: ``predicted`` is the candidate closest to the measurement, ``low`` and
``high`` the range over all of them (:func:`weight_candidates` lists them). Every prediction carries a
tolerance :class:`Band`: a claim about how close the model comes, and why it is that wide.

Source: the registry entries' own ``quote``, ``source`` and conditions.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from pdcalc.core.errors import LayoutError
from pdcalc.core.precision import MAX_SIG, tidy
from pdcalc.core.units import GiB
from pdcalc.hardware.cards import get_card
from pdcalc.model.quant import get_scheme
from pdcalc.perf import step as throughput
from pdcalc.perf import transfer
from pdcalc.perf.comm import DEFAULT_COMM_EFF
from pdcalc.perf.inputs import DEFAULT_MBU, DEFAULT_MFU
from pdcalc.perf.schedule import DEFAULT_OVERLAP_MODEL, profiled_steps
from pdcalc.reality import measurements as reg
from pdcalc.reality.bands import BANDS, GROUPS, NO_PRESET, SI_UNITS, Prediction, measured_si
from pdcalc.reality.memory_checks import (BUDGET_SPECS, atlas_tokens_prediction, ktransformers_prediction,
                                          kv_budget_prediction, kv_budget_table, mooncake_bandwidth_prediction,
                                          mooncake_time_prediction, te_bandwidth_prediction)
from pdcalc.reality.throughput_runs import NotPredictable, predict_throughput, throughput_band, throughput_setup
from pdcalc.reality.weights import (W8A8_EXPERTS_ONLY, WEIGHT_SPECS, v4_weight_steps, weight_candidates,
                                    weights_prediction)


def _throughput_predictions(*, mfu: float = DEFAULT_MFU, mbu: float = DEFAULT_MBU,
                            comm_eff: float = DEFAULT_COMM_EFF, overlap: bool = True,
                            overlap_model: str = DEFAULT_OVERLAP_MODEL,
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
            function="pdcalc.reality.throughput_runs.predict_throughput (pdcalc.perf.step.step, costs='published')",
            assumptions=(setup.assumptions or "As stated.") + (
                " Where the source leaves MTP open, MTP on is the range's other end." if len(cands) > 1
                and not setup.mtp_steps and m.mtp is None else "") + (
                " The serial kernel sum (no overlap) is the range's low end, the ideal overlap (the computation "
                "keeps every SM) its high end." if setup.overlap else "") + (
                " In sample: the prefill step's profiled ratio is read from the same post, and not counted in the "
                "errors." if own else ""),
            band=throughput_band(m.id), before=before, cost_sources=st.cost_sources,
            costs_from=", ".join(tables) + (f"; carried from {', '.join(carried)}" if carried else ""),
            in_sample=own))
    return out


_SINGLE = {
    "sglang-ktransformers-1804-v3-bf16-kv-10000-tokens": ktransformers_prediction,
    "vllm-atlas-145-r1-nvfp4-gb10-kv-tokens": atlas_tokens_prediction,
    "mooncake-te-8x400g-roce-bandwidth": te_bandwidth_prediction,
    "mooncake-te-4x200g-roce-bandwidth": te_bandwidth_prediction,
    "mooncake-vllm-pd-h800-qwen3-8b-32k-transfer-time": mooncake_time_prediction,
    "mooncake-vllm-pd-h800-qwen3-8b-peak-bandwidth": mooncake_bandwidth_prediction,
}


def band_assumptions() -> dict:
    """The arguments of :func:`predictions` under which every band holds (``tests/test_validation.py``):
    its defaults. With others (a what-if), a prediction outside its band is a result, not a defect."""
    import inspect

    return {k: p.default for k, p in inspect.signature(predictions).parameters.items()}


def predictions(*, mfu: float = DEFAULT_MFU, mbu: float = DEFAULT_MBU,
                comm_eff: float = DEFAULT_COMM_EFF, overlap: bool = True,
                scheme: str | None = None, overlap_model: str = DEFAULT_OVERLAP_MODEL,
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
        How it is modelled (:data:`pdcalc.perf.inputs.OVERLAP_MODELS`): ``"published"``, the computation on
        the SMs DeepSeek's profile leaves it; ``"ideal"``, computation and communication never slow each other.
    scheme : str, optional
        Quantization scheme for every weight prediction (and the KV budgets built on them) instead of
        each checkpoint's own (``w8a8``, ``fp8``); what-if candidates keep theirs.
    beyond
        Whether each prefill step takes what DeepSeek's profiled prefill step takes beyond its kernels
        (:func:`pdcalc.perf.step.beyond_kernels`); ``False``: the published kernel costs alone.
    """
    if scheme is not None:
        get_scheme(scheme)
    found: dict[str, Prediction] = {}
    for mid in WEIGHT_SPECS:
        found[mid] = weights_prediction(mid, scheme)
    for mid in BUDGET_SPECS:
        found[mid] = kv_budget_prediction(mid, scheme)
    for mid, fn in _SINGLE.items():
        found[mid] = fn(mid)
    for p in _throughput_predictions(mfu=mfu, mbu=mbu, comm_eff=comm_eff, overlap=overlap,
                                     overlap_model=overlap_model, beyond=beyond):
        found[p.id] = p
    return [found[i] for i in reg.ids() if i in found]


_STATIC_NOT_PREDICTED: dict[str, str] = {
    "vllm-ascend-16983-v4pro-w4a8-a3-weights-per-card": (
        "pdcalc has no W4A8 scheme for DeepSeek-V4-Pro's weights, and the TP size is not printed in the excerpt."),
    "sglang-inferencex-2128-v4pro-fp8-h200-tp8-weights": (
        "The log's 'quant=fp8' build for Hopper (container lmsysorg/sglang:deepseek-v4-hopper) does not say how it "
        "stores the released checkpoint's FP4 routed experts, which Hopper cannot multiply in FP4, nor which "
        "checkpoint it loaded: neither pdcalc's fp8-fp4 (the checkpoint as released) nor fp8 (every expert FP8, "
        "more than eight H200 hold) is known to be its layout."),
    "vllm-recipes-762-v4flash0731-b200-dp8-max-concurrency": (
        f"DeepSeek-V4-Flash-0731: {NO_PRESET}; vllm-project/vllm issue #51454 gives it 304B parameters, "
        "not the 284B of the DeepSeek-V4-Flash preset."),
    "vllm-recipes-762-v4flash0731-b200-tp8-max-concurrency": (
        f"DeepSeek-V4-Flash-0731: {NO_PRESET} (304B per vllm-project/vllm issue #51454)."),
    "vllm-44376-v4flash-gh200-tp2-kv-available": (
        "The memory the runtime sees on the GH200 ('96 GB each' is the reporter's), the activation and graph "
        "overhead and the checkpoint are not in the excerpt. The same line's '6.66 GiB KV cache is needed' for "
        "one 30000-token request is the engine's pre-check, which the issue reports as miscomputed."),
    "vllm-atlas-145-r1-nvfp4-gb10-kv-available": (
        "gpu_memory_utilization is not stated, the GB10's unified memory (shared with the CPU) is not a card "
        "preset, and pdcalc has no NVFP4 scheme for the weights."),
    "mooncake-vllm-pd-h800-qwen3-8b-32k-ttft": (
        f"TTFT is mostly Qwen3-8B's prefill: {NO_PRESET} (pdcalc's step model covers MLA models only)."),
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


def bands_table() -> pd.DataFrame:
    """The tolerance bands: ``kind, low, high, why``."""
    return pd.DataFrame([{"kind": k, "low": b.low, "high": b.high, "why": b.why} for k, b in BANDS.items()]
                        ).set_index("kind")


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
    """The document the profiled step of ``phase`` (:func:`pdcalc.perf.step.beyond_kernels`) takes its
    rate from, or ``None``: a measurement of that phase from the same document is in sample."""
    p = profiled_steps().get(phase)
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
    from pdcalc.hardware.cards import card_names

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
