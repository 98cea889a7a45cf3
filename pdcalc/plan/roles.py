"""The two sides of a P/D split: every P and D instance size the cluster allows, its weights and KV
room per card, and its step times (prefill per prompt, decode per batch).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from pdcalc.core.checks import tp_problem
from pdcalc.core.errors import LayoutError
from pdcalc.hardware.cards import get_card
from pdcalc.layout.memory import ACTIVATION_BYTES, P_OVERHEAD_BYTES, card_weights, step_tokens
from pdcalc.layout.parallel import place_experts
from pdcalc.model.config import load_config
from pdcalc.model.inventory import get_inventory
from pdcalc.model.kv_cache import kv_bytes
from pdcalc.model.quant import get_scheme
from pdcalc.perf import step as tput
from pdcalc.perf.inputs import COMPUTE_DTYPE
from pdcalc.perf.served import DEFAULT_TOKEN_BUDGET
from pdcalc.perf.traffic import kv_step_kwargs
from pdcalc.perf.transfer import exposed_seconds, link
from pdcalc.plan.workload import Setup, Workload


@dataclass(frozen=True)
class Side:
    """One instance layout of one side: its per-card and per-instance figures."""

    role: str                # "P", "D" or "A" (co-located)
    size: int                # cards per instance = EP group
    tp: int
    weights_bytes: float     # per card
    room_bytes: float        # usable - weights - overhead (negative: does not fit)
    prefill_s: float = math.nan          # P, A: one prompt per DP rank
    prompts_per_s: float = math.nan      # P, A: per instance
    seqs_per_rank: int = 0               # D: KV capacity per DP rank; A: beside one prompt in prefill
    batch: np.ndarray | None = None      # D, A: sequences per instance of the step grid
    tpot: np.ndarray | None = None       # D, A: decode step time at each batch

    @property
    def dp(self) -> int:
        return self.size // self.tp


def tried_sizes(setup: Setup) -> tuple[int, ...]:
    return setup.sizes or tuple(2 ** k for k in range(int(math.log2(setup.cards)) + 1))


def instance_sizes(setup: Setup, n_experts: int, *, whole: bool = False) -> list[int]:
    """Instance sizes tried that leave a card for the other side (``whole``: that fit the cluster, for a
    co-located instance) and can spread the routed experts."""
    out = []
    for s in tried_sizes(setup):
        if s > setup.cards - (0 if whole else 1):
            continue
        try:
            place_experts(n_experts, s)
        except LayoutError:
            continue
        out.append(int(s))
    return sorted(set(out))


def layout_tp_problem(setup: Setup, t: int) -> str | None:
    cfg = load_config(setup.model)
    return tp_problem(t, heads=cfg.num_attention_heads, o_groups=getattr(cfg, "o_groups", None),
                      index_heads=getattr(cfg, "index_n_heads", None))


def usable_bytes(setup: Setup) -> float:
    c = get_card(setup.card)
    return setup.utilization * (c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes)


def weights_log(setup: Setup, size: int, tp: int):
    """The logged per-card weights that size a layout of ``size`` cards with TP ``tp`` under ``setup``
    (:func:`pdcalc.reality.weights.logged_weights` of the weights model and scheme), or ``None``: with
    ``measured_weights`` off, or where no log matches that exact layout."""
    if not setup.measured_weights:
        return None
    from pdcalc.reality.weights import logged_weights

    return logged_weights(setup.weights_model or setup.model, setup.weights_quant or setup.quant, ep=size, tp=tp,
                          mtp=setup.mtp)


def layout_weights(setup: Setup, size: int, tp: int) -> float:
    """Weight bytes on one card of a layout of ``size`` cards with TP ``tp``: the logged figure where
    :func:`weights_log` finds one, else :func:`pdcalc.layout.memory.card_weights` (MTP included when loaded)."""
    log = weights_log(setup, size, tp)
    if log is not None:
        return log.bytes
    model, quant = setup.weights_model or setup.model, setup.weights_quant or setup.quant
    if isinstance(model, str) and isinstance(quant, str):     # a preset: the same layout is sized once
        return _preset_weights(model, quant, size, tp, setup.mtp)
    return card_weights(model, quant, ep=size, tp=tp, mtp=setup.mtp).total_bytes


@cache
def _preset_weights(model: str, quant: str, ep: int, tp: int, mtp: bool) -> float:
    return card_weights(model, quant, ep=ep, tp=tp, mtp=mtp).total_bytes


def seq_kv_bytes(setup: Setup, context) -> np.ndarray | float:
    """KV bytes of one sequence at ``context`` tokens under ``setup`` (engine layout or constant)."""
    if setup.kv_bytes_per_token is not None:
        return np.asarray(context, dtype=float) * setup.kv_bytes_per_token
    return kv_bytes(setup.model, context, setup.engine, include_mtp=setup.mtp,
                    kv_cache_dtype=setup.kv_cache_dtype).total_bytes


def _kv_step_kwargs(setup: Setup) -> dict:
    """The step's KV cache as the plan sizes it (:func:`pdcalc.perf.traffic.kv_step_kwargs`)."""
    return kv_step_kwargs(setup.model, setup.engine, setup.kv_cache_dtype)


def p_step_tokens(setup: Setup) -> int:
    """P's ``--max-num-batched-tokens``: the largest step whose activations fit what the plan books on a P card
    (its ``p_overhead_bytes`` less the article's framework share): the tutorial's 4,096 under the article's figures,
    a prompt then prefilled in chunks of that many tokens."""
    framework = P_OVERHEAD_BYTES - ACTIVATION_BYTES
    return step_tokens(setup.p_overhead_bytes - framework)


def _step(setup: Setup, side_tp: int, size: int, *, context, concurrency, phase):
    """An instance layout's step; its prefill, which the P and the co-located sides of that layout share, takes
    a prompt in chunks of the P launch's step (:func:`p_step_tokens`), each paying the host time of a step."""
    chunk = p_step_tokens(setup) if phase == "prefill" else None
    return timed_step(setup, tp=side_tp, dp=size // side_tp, ep=size, context=context, concurrency=concurrency,
                      phase=phase, chunk_tokens=chunk)


@dataclass(frozen=True)
class Timed:
    """A step's time under the served model (the figure the planner reads)."""

    time_s: np.ndarray | float


def timed_step(setup: Setup, *, tp: int, dp: int, ep: int | None, context, concurrency, phase: str,
               chunk_tokens: int | None = None):
    """One step of ``setup``'s model on a TP x DP (x EP) layout under the plan's cost model (:attr:`Setup.costs`):
    ``served`` (the default), the published kernel costs times the served terms' factor of the phase plus their
    host time per scheduler step (a prompt's chunks of ``chunk_tokens`` each pay it; ``None``: the engines'
    default token budget; ``dp_host_factor`` times it where ``dp`` ranks step together), a decode step divided by
    the tokens a sequence advances with MTP; ``published`` or ``roofline`` as :func:`pdcalc.perf.step.step`
    computes them (the roofline: the hardware's bound)."""
    kw = {**_kv_step_kwargs(setup), **setup.step_kwargs}
    kw.pop("costs", None)
    common = dict(tp=tp, dp=dp, ep=ep, context=context, concurrency=concurrency, phase=phase, quant=setup.quant,
                  mfu=setup.mfu, mbu=setup.mbu, comm_eff=setup.comm_eff)
    if setup.costs != "served":
        return tput.step(setup.model, setup.card, costs=setup.costs, **common, **kw)
    mtp = setup.draft_tokens if phase == "decode" else 0
    st = tput.step(setup.model, setup.card, costs="published", mtp_steps=mtp,
                   mtp_acceptance=setup.acceptance if mtp else None, **common, **kw)
    terms = setup.terms
    if phase == "decode":
        return Timed((terms.k_decode * np.asarray(st.time_s, dtype=float) + terms.host_for(dp)) / setup.emitted)
    chunks = np.ceil(np.asarray(context, dtype=float) / (chunk_tokens or DEFAULT_TOKEN_BUDGET))
    return Timed(terms.k_prefill * np.asarray(st.time_s, dtype=float) + terms.host_for(dp) * chunks)


def _check_compute(setup: Setup) -> None:
    """Raise :class:`pdcalc.core.errors.LayoutError` (one line) when the card lacks the peak FLOP/s of the
    dtype the step runs its linear layers in (the quantization scheme's compute dtype, or
    ``step_kwargs['compute_dtype']``) or its attention in (``step_kwargs['attn_dtype']``)."""
    c = get_card(setup.card)
    kw = setup.step_kwargs
    known = ", ".join(sorted(c.flops_per_s))
    scheme = get_scheme(setup.quant).name
    if kw.get("peak_flops_per_s") is None:
        dtype = kw.get("compute_dtype") or COMPUTE_DTYPE.get(scheme)
        if dtype is None:
            raise LayoutError(f"no compute dtype known for quantization scheme {scheme!r}; pass "
                              f"step_kwargs={{'compute_dtype': ...}}")
        if dtype not in c.flops_per_s:
            how = ("step_kwargs compute_dtype" if kw.get("compute_dtype") else
                   f"the compute dtype of quantization scheme {scheme!r}")
            raise LayoutError(f"card {c.name!r} has no {dtype} FLOP/s ({how}); it lists {known}: choose another "
                              f"scheme or pass step_kwargs compute_dtype or peak_flops_per_s")
    attn = kw.get("attn_dtype", inspect.signature(tput.step).parameters["attn_dtype"].default)
    if attn not in c.flops_per_s:
        raise LayoutError(f"card {c.name!r} has no {attn} FLOP/s (the attention dtype, step_kwargs attn_dtype; "
                          f"scheme {scheme!r}); it lists {known}")


@dataclass(frozen=True)
class Layouts:
    """Every instance layout of each role: ``p`` and ``d`` for the disaggregated sides, ``a`` for
    co-located instances (empty when :attr:`Setup.aggregated` is off)."""

    p: list[Side]
    d: list[Side]
    a: list[Side]


def layouts(setup: Setup, work: Workload) -> Layouts:
    """Every P, D and co-located instance layout, with the figures the candidates share. Sizes that cannot
    spread the routed experts and TP degrees the model's attention cannot be split by are left out. Each
    ``(size, tp)`` is stepped once (prefill of one prompt per rank, decode over a grid of batches) and its
    tables serve every role that tries it."""
    _check_compute(setup)
    inv = get_inventory(setup.model)
    usable = usable_bytes(setup)
    per_seq = float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
    prompt_kv = float(seq_kv_bytes(setup, work.prompt_tokens))
    tables: dict = {}

    def table(size: int, t: int):
        if (size, t) not in tables:
            w = layout_weights(setup, size, t)
            dp = size // t
            pf = float(_step(setup, t, size, context=work.prompt_tokens, concurrency=dp, phase="prefill").time_s)
            room = usable - w - setup.d_overhead_bytes
            cap = max(0, int(room // per_seq)) if room > 0 else 0
            if cap:
                batch = np.unique(np.geomspace(1, cap * dp, setup.decode_grid).round()).astype(float)
                dc = _step(setup, t, size, context=work.prompt_tokens + work.output_tokens / 2,
                           concurrency=batch, phase="decode")
                tpot = np.asarray(dc.time_s, dtype=float)
            else:
                batch, tpot = np.array([1.0]), np.array([np.inf])
            tables[size, t] = (w, pf, room, cap, batch, tpot)
        return tables[size, t]

    out = {"P": [], "D": [], "A": []}
    roles = (("P", setup.p_tps), ("D", setup.d_tps)) + ((("A", setup.a_tps),) if setup.aggregated else ())
    split_sizes = set(instance_sizes(setup, inv.n_routed_experts))
    for size in instance_sizes(setup, inv.n_routed_experts, whole=True):
        for role, tps in roles:
            if role != "A" and size not in split_sizes:
                continue
            for t in tps:
                if size % t or layout_tp_problem(setup, t):
                    continue
                w, pf, room, cap, batch, tpot = table(size, t)
                dp = size // t
                if role == "P":
                    out[role].append(Side("P", size, t, w, usable - w - setup.p_overhead_bytes, prefill_s=pf,
                                          prompts_per_s=dp / pf))
                elif role == "D":
                    out[role].append(Side("D", size, t, w, room, seqs_per_rank=cap, batch=batch, tpot=tpot))
                else:
                    a_room = usable - w - setup.a_overhead_bytes
                    a_cap = max(0, int((a_room - prompt_kv) // per_seq)) if a_room - prompt_kv > 0 else 0
                    out[role].append(Side("A", size, t, w, a_room, prefill_s=pf, prompts_per_s=dp / pf,
                                          seqs_per_rank=a_cap, batch=batch, tpot=tpot))
    return Layouts(out["P"], out["D"], out["A"])


def sides(setup: Setup, work: Workload) -> tuple[list[Side], list[Side]]:
    """Every P and D instance layout (:func:`layouts` without the co-located ones)."""
    lay = layouts(replace(setup, aggregated=False), work)
    return lay.p, lay.d


def tpot_at(d: Side, per_instance):
    """Decode step time at ``per_instance`` sequences (interpolated on the layout's grid, log-log)."""
    x = np.clip(per_instance, d.batch[0], d.batch[-1])
    if d.batch.size == 1:
        return np.full(np.shape(x), d.tpot[0])
    return np.exp(np.interp(np.log(x), np.log(d.batch), np.log(d.tpot)))


@dataclass(frozen=True)
class DecodeTable:
    """The decode side at every ``n_d`` of every D layout, concatenated: layout ``j``'s ``n_d`` is at
    ``offset[j] + n_d - 1``."""

    offset: np.ndarray
    conc: np.ndarray
    tpot: np.ndarray
    out_tok_s: np.ndarray
    rate: np.ndarray

    def at(self, d, n_d) -> np.ndarray:
        return self.offset[d] + np.asarray(n_d, dtype=np.int64) - 1


def decode_table(setup: Setup, work: Workload, d_sides: list[Side]) -> DecodeTable:
    """Sequences in flight, TPOT, output tokens/s and request rate at each ``n_d = 1 .. cards // size``."""
    counts = [setup.cards // d.size for d in d_sides]
    offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if counts else np.zeros(0, np.int64)
    conc, tpot = [np.zeros(0)], [np.zeros(0)]
    for side, k in zip(d_sides, counts):
        n_d = np.arange(1, k + 1, dtype=float)
        if work.concurrency is not None:
            c = np.full(k, float(work.concurrency))
            t = tpot_at(side, c / n_d)
        else:
            s = work.rate_per_s * work.output_tokens * tpot_at(side, np.ones(k))
            for _ in range(60):
                s = work.rate_per_s * work.output_tokens * tpot_at(side, np.maximum(s / n_d, 1.0))
            c, t = s, tpot_at(side, np.maximum(s / n_d, 1.0))
        conc.append(c)
        tpot.append(t)
    conc, tpot = np.concatenate(conc), np.concatenate(tpot)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(np.isfinite(tpot) & np.isfinite(conc), conc / tpot, 0.0)
    rate = out / work.output_tokens if work.concurrency is not None else np.full(out.size, work.rate_per_s)
    return DecodeTable(offset, conc, tpot, out, rate)


def transfer_s(setup: Setup, work: Workload, p_sides: list[Side]) -> np.ndarray:
    """Exposed KV transfer time of each P layout."""
    lnk = link(setup.bandwidth_bytes_per_s, setup.transfer_fixed_s)
    pf = np.array([p.prefill_s for p in p_sides], dtype=float)
    return np.atleast_1d(np.asarray(exposed_seconds(lnk, float(seq_kv_bytes(setup, work.prompt_tokens)), pf,
                                                    main_layers(setup)), dtype=float))


def p_slack(setup: Setup, work: Workload, n_p, prompts_per_s, prefill_s, xfer, rate):
    """Prefill load, TTFT and their slacks, the formulas of :func:`evaluate`."""
    with np.errstate(divide="ignore", invalid="ignore"):
        load = rate / (n_p * prompts_per_s)
        ttft = np.where(load < 1, prefill_s / (1 - load), np.inf) + xfer + setup.request_s
        s_load = 1 - load / setup.max_load
        s_ttft = 1 - ttft / work.ttft_s if work.ttft_s else np.full(np.shape(load), np.inf)
    return load, ttft, s_load, s_ttft


def _p_ok(setup, work, n_p, prompts_per_s, prefill_s, xfer, rate) -> np.ndarray:
    _, _, s_load, s_ttft = p_slack(setup, work, n_p.astype(float), prompts_per_s, prefill_s, xfer, rate)
    return (s_load >= 0) & (s_ttft >= 0)          # NaN compares false: it fails, as in the evaluation


def fewest_p(setup: Setup, work: Workload, prompts_per_s, prefill_s, xfer, rate: np.ndarray,
              n_max: np.ndarray) -> np.ndarray:
    """For each candidate (arrays of one shape: its P layout's prompts per second, prefill time and
    exposed transfer, its request rate, the P instances the cluster leaves), the fewest P instances
    meeting the load limit and the TTFT target, or ``n_max`` when none up to it does."""
    lim = np.full(np.shape(rate), setup.max_load)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if work.ttft_s:
            room = work.ttft_s - xfer - setup.request_s
            lim = np.where(room > 0, np.minimum(lim, 1 - prefill_s / np.where(room > 0, room, 1.0)), 0.0)
        need = np.where(lim > 0, rate / (prompts_per_s * np.where(lim > 0, lim, 1.0)), np.inf)
    need = np.where(np.isnan(need), np.inf, need)
    n = np.clip(np.ceil(need), 1, n_max + 1).astype(np.int64)
    for _ in range(64):                       # rounding put it one too high
        down = (n > 1) & _p_ok(setup, work, n - 1, prompts_per_s, prefill_s, xfer, rate)
        if not down.any():
            break
        n -= down
    for _ in range(64):                       # ... or one too low
        up = (n <= n_max) & ~_p_ok(setup, work, n, prompts_per_s, prefill_s, xfer, rate)
        if not up.any():
            break
        n += up
    return np.minimum(n, n_max)


def _smallest_p(setup: Setup, work: Workload, p: Side, xfer: float, rate: np.ndarray,
                n_max: np.ndarray) -> np.ndarray:
    """For each request rate, the fewest P instances of layout ``p`` meeting the load limit and the TTFT
    target, or ``n_max`` (all the cluster leaves) when none up to it does (:func:`_fewest_p`)."""
    shape = np.shape(rate)
    return fewest_p(setup, work, np.full(shape, p.prompts_per_s), np.full(shape, p.prefill_s),
                     np.full(shape, float(xfer)), np.asarray(rate, dtype=float), np.asarray(n_max))


def main_layers(setup: Setup) -> int:
    """Main-model layers, over which a layer-wise KV send is spread."""
    return load_config(setup.model).num_hidden_layers
