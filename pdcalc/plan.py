"""Plan a prefill/decode (PD) disaggregated deployment: the ways to cut a cluster into P and D instances,
evaluated at once, and the best one under latency targets.

A candidate is ``n_p`` prefill instances of ``s_p`` cards (TP degree ``t_p``, EP group = the instance,
``s_p / t_p`` DP ranks) and ``n_d`` decode instances of ``s_d`` cards, with ``n_p s_p + n_d s_d`` at most
the cluster. For each candidate:

- **memory**: per card, weights (:func:`pdcalc.memory.card_weights`, MTP included when loaded; with
  ``measured_weights``, an engine's logged figure where one exists for the exact layout, :func:`weights_log`),
  activations and framework overhead against ``utilization`` x the card's memory; what is left on a D card
  holds KV cache, sequences of ``prompt + output`` tokens (:func:`pdcalc.kv_cache.kv_bytes`, or a constant
  per-token figure), the cache of a DP rank kept whole on each of its TP cards;
- **prefill**: one prompt per DP rank per step (:func:`pdcalc.throughput.step`), so an instance serves
  ``dp / t_pf`` prompts per second; at load ``rho`` = request rate / P capacity the time to first token is

  .. math:: \\text{TTFT} = \\frac{t_\\text{pf}}{1 - \\rho} + t_\\text{x}

  (queueing of an M/M/1 server, an assumption) with ``t_x`` the KV transfer exposed after a layer-wise
  send (:func:`pdcalc.transfer.exposed_seconds`);
- **decode**: the sequences in flight ``S`` share the D instances; the time per output token is the decode
  step at ``S / n_d`` sequences per instance. Given a request rate ``R``, Little's law closes the loop:

  .. math:: S = R \\, L_\\text{out} \\, \\text{TPOT}(S / n_d)

  solved by fixed-point iteration; given a concurrency, ``S`` is that concurrency and ``R = S /
  (L_\\text{out} \\, \\text{TPOT})``.

Feasible candidates meet memory, KV capacity, prefill load ``rho <= max_load`` and the TTFT and TPOT
targets; they are ranked by output tokens per second per card, then by TTFT. The *binding* constraint of a
candidate is the first one it fails, in the order of :data:`CONSTRAINTS` (memory before capacity before
latency); for a feasible candidate, the one with the least relative slack.

**Which splits are evaluated.** For a fixed P layout, D layout and ``n_d``, everything but the cards used
and the P side's load and TTFT is independent of ``n_p``: the sequences, the TPOT, the output tokens/s and
(given a concurrency) the request rate depend on the D side only. Load and TTFT fall as ``n_p`` grows, so
feasibility in ``n_p`` is a threshold, while tokens/s per card falls as ``n_p`` grows. Among the splits
sharing the D side, the smallest ``n_p`` that meets the load limit and the TTFT target therefore ranks
first and every larger one is dominated. The planner evaluates, for each pair of layouts, each ``n_d``
once, with

.. math:: n_p = \\left\\lceil \\frac{R}{\\mu_p \\, \\min\\left(\\rho_\\max,\\; 1 - t_\\text{pf} /
   (\\text{TTFT}_\\text{target} - t_\\text{x})\\right)} \\right\\rceil

(``mu_p`` the prompts per second of one P instance; the second term only with a TTFT target), corrected by
one step either way where rounding puts it across the threshold (checked with the same slack formulas as
the evaluation), and clamped to the P instances the cluster has left: when none meets the load and TTFT,
the largest that fits, which is the closest. With ``use_all_cards``, ``n_p`` is fixed by ``n_d``. This is
``O(cards)`` splits per pair of layouts, against ``O(cards**2)`` for the whole split space, whose size
:func:`count_splits` gives arithmetically (:attr:`Plan.splits`). The best plan, the feasible/infeasible
verdict and the closest candidate when nothing fits are those of the whole space; the ranked table lists
one row per D side instead of every dominated P side.

The evaluation is vectorized: the per-layout quantities (weights, prefill time, the decode step time over
a grid of batch sizes) are computed once per distinct layout, the decode side once per ``(D layout,
n_d)``, then every candidate is evaluated with numpy array arithmetic. :func:`evaluate_loop` does the same
one candidate at a time in plain Python (for the benchmark and as a cross-check).
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pdcalc import throughput as tput
from pdcalc.checks import InputError, boolean, fraction, integer, number, show, text, tp_problem
from pdcalc.errors import LayoutError
from pdcalc.hardware import get_card
from pdcalc.inventory import get_inventory
from pdcalc.kv_cache import kv_bytes
from pdcalc.memory import card_weights
from pdcalc.model import load_config
from pdcalc.parallel import place_experts
from pdcalc.quant import get_scheme
from pdcalc.transfer import exposed_seconds, link

CONSTRAINTS = ("P memory", "D memory", "KV capacity", "prefill load", "TTFT", "TPOT")

#: Largest cluster :class:`Setup` accepts (the planner is linear in it; this only stops a typo running away).
MAX_CARDS = 65_536

#: Most batch sizes per layout the decode step may be computed at (:attr:`Setup.decode_grid`).
MAX_DECODE_GRID = 4_096

# closeness when nothing fits: P and D memory are one stage (a split is as close as its worse side)
_STAGE = {"P memory": 0, "D memory": 0, "KV capacity": 1, "prefill load": 2, "TTFT": 3, "TPOT": 4}


def _positive_ints(name: str, value, *, allow_none: bool = False) -> tuple[int, ...] | None:
    """A non-empty sequence of integers >= 1 as a tuple, duplicates removed, order kept."""
    if value is None and allow_none:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray) or len(value) == 0:
        raise InputError(name, f"must be a non-empty list of integers >= 1, got {show(value)}")
    return tuple(dict.fromkeys(integer(f"{name}[{i}]", v, low=1) for i, v in enumerate(value)))


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What the deployment must serve. Invalid values raise :class:`pdcalc.checks.InputError`."""

    prompt_tokens: int                   # tokens per prompt
    output_tokens: int                   # tokens generated per request
    rate_per_s: float | None = None      # requests per second (or give concurrency)
    concurrency: int | None = None       # sequences decoding at once (or give rate_per_s)
    ttft_s: float | None = None          # target time to first token; None: no target
    tpot_s: float | None = None          # target time per output token; None: no target

    def __post_init__(self):
        put = object.__setattr__
        for name in ("prompt_tokens", "output_tokens"):
            put(self, name, integer(name, getattr(self, name), low=1))
        if (self.rate_per_s is None) == (self.concurrency is None):
            raise InputError("rate_per_s", "give exactly one of rate_per_s (requests per second) and concurrency "
                                            "(sequences decoding at once), got "
                                            + ("neither" if self.rate_per_s is None else "both"))
        if self.rate_per_s is not None:
            put(self, "rate_per_s", number("rate_per_s", self.rate_per_s, low=0, low_open=True,
                                           unit="requests per second"))
        if self.concurrency is not None:
            put(self, "concurrency", integer("concurrency", self.concurrency, low=1))
        for name in ("ttft_s", "tpot_s"):
            if getattr(self, name) is not None:
                put(self, name, number(name, getattr(self, name), low=0, low_open=True, unit="seconds"))


@dataclass(frozen=True, kw_only=True)
class Setup:
    """Model, hardware and engine assumptions of a plan. Invalid values raise
    :class:`pdcalc.checks.InputError`; names (model, card, scheme, engine) are resolved when planning."""

    model: str | Path = "deepseek-v4-flash"   # preset or config.json
    quant: str = "w8a8"                       # weights as stored (pdcalc.quant)
    weights_model: str | Path | None = None   # inventory that sizes the weights (e.g. an article preset); None: model
    weights_quant: str | None = None          # scheme for weights_model; None: quant
    card: str | Path = "ascend-910b2"         # card preset or hardware TOML
    cards: int = 64                           # cluster size, 2..MAX_CARDS
    mtp: bool = True                          # MTP module loaded (weights)
    utilization: float = 0.9                  # gpu-memory-utilization
    base: str = "visible"                     # memory utilisation applies to: "visible" or "installed"
    engine: str = "vllm-ascend"               # KV layout (pdcalc.kv_cache.ENGINES)
    kv_bytes_per_token: float | None = None   # constant KV bytes per token instead of the engine layout
    p_overhead_bytes: float = 3.5e9           # activations + framework per P card
    d_overhead_bytes: float = 4.0e9           # activations + framework per D card
    bandwidth_bytes_per_s: float = 18e9       # effective P -> D transfer bandwidth per request
    transfer_fixed_s: float = 0.0             # fixed cost per transfer
    tp_options: tuple[int, ...] = (1,)        # TP degrees tried on both sides (those the model allows)
    sizes: tuple[int, ...] | None = None      # instance sizes (cards) tried; None: powers of two up to cards
    mfu: float = tput.DEFAULT_MFU
    mbu: float = tput.DEFAULT_MBU
    comm_eff: float = tput.DEFAULT_COMM_EFF
    max_load: float = 0.8                     # highest prefill utilisation accepted, in (0, 1)
    use_all_cards: bool = False               # only splits that use the whole cluster
    decode_grid: int = 48                     # batch sizes the decode step is computed at per layout
    step_kwargs: dict = field(default_factory=dict)  # extra keyword arguments for throughput.step
    measured_weights: bool = False            # size weights from a logged figure where one matches the layout

    def __post_init__(self):
        put = object.__setattr__
        put(self, "cards", integer("cards", self.cards, low=2, high=MAX_CARDS))
        put(self, "mtp", boolean("mtp", self.mtp))
        put(self, "use_all_cards", boolean("use_all_cards", self.use_all_cards))
        put(self, "measured_weights", boolean("measured_weights", self.measured_weights))
        for name in ("utilization", "mfu", "mbu", "comm_eff"):
            put(self, name, fraction(name, getattr(self, name)))
        if text("base", self.base) not in ("visible", "installed"):
            raise InputError("base", f"must be 'visible' or 'installed', got {show(self.base)}")
        load = number("max_load", self.max_load, low=0, high=1, low_open=True)
        if load == 1:
            raise InputError("max_load", "must be a finite number in (0, 1) (a prefill utilisation below 1), got 1")
        put(self, "max_load", load)
        put(self, "p_overhead_bytes", number("p_overhead_bytes", self.p_overhead_bytes, low=0, unit="bytes"))
        put(self, "d_overhead_bytes", number("d_overhead_bytes", self.d_overhead_bytes, low=0, unit="bytes"))
        put(self, "transfer_fixed_s", number("transfer_fixed_s", self.transfer_fixed_s, low=0, unit="seconds"))
        put(self, "bandwidth_bytes_per_s", number("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, low=0,
                                                  low_open=True, unit="bytes per second"))
        if self.kv_bytes_per_token is not None:
            put(self, "kv_bytes_per_token", number("kv_bytes_per_token", self.kv_bytes_per_token, low=0,
                                                   low_open=True, unit="bytes"))
        put(self, "tp_options", _positive_ints("tp_options", self.tp_options))
        put(self, "sizes", _positive_ints("sizes", self.sizes, allow_none=True))
        put(self, "decode_grid", integer("decode_grid", self.decode_grid, low=2, high=MAX_DECODE_GRID))
        if not isinstance(self.step_kwargs, dict):
            raise InputError("step_kwargs", f"must be a dict of keyword arguments, got {show(self.step_kwargs)}")


@dataclass(frozen=True)
class Side:
    """One instance layout of one side: its per-card and per-instance figures."""

    role: str                # "P" or "D"
    size: int                # cards per instance = EP group
    tp: int
    weights_bytes: float     # per card
    room_bytes: float        # usable - weights - overhead (negative: does not fit)
    prefill_s: float = math.nan          # P: one prompt per DP rank
    prompts_per_s: float = math.nan      # P: per instance
    seqs_per_rank: int = 0               # D: KV capacity per DP rank
    batch: np.ndarray | None = None      # D: sequences per instance of the step grid
    tpot: np.ndarray | None = None       # D: step time at each batch

    @property
    def dp(self) -> int:
        return self.size // self.tp


def _tried_sizes(setup: Setup) -> tuple[int, ...]:
    return setup.sizes or tuple(2 ** k for k in range(int(math.log2(setup.cards)) + 1))


def _sizes(setup: Setup, n_experts: int) -> list[int]:
    """Instance sizes tried that leave a card for the other side and can spread the routed experts."""
    out = []
    for s in _tried_sizes(setup):
        if s > setup.cards - 1:
            continue
        try:
            place_experts(n_experts, s)
        except LayoutError:
            continue
        out.append(int(s))
    return sorted(set(out))


def _tp_problem(setup: Setup, t: int) -> str | None:
    cfg = load_config(setup.model)
    return tp_problem(t, heads=cfg.num_attention_heads, o_groups=getattr(cfg, "o_groups", None),
                      index_heads=getattr(cfg, "index_n_heads", None))


def _usable(setup: Setup) -> float:
    c = get_card(setup.card)
    return setup.utilization * (c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes)


def weights_log(setup: Setup, size: int, tp: int):
    """The logged per-card weights that size a layout of ``size`` cards with TP ``tp`` under ``setup``
    (:func:`pdcalc.validation.logged_weights` of the weights model and scheme), or ``None``: with
    ``measured_weights`` off, or where no log matches that exact layout."""
    if not setup.measured_weights:
        return None
    from pdcalc.validation import logged_weights

    return logged_weights(setup.weights_model or setup.model, setup.weights_quant or setup.quant, ep=size, tp=tp,
                          mtp=setup.mtp)


def layout_weights(setup: Setup, size: int, tp: int) -> float:
    """Weight bytes on one card of a layout of ``size`` cards with TP ``tp``: the logged figure where
    :func:`weights_log` finds one, else :func:`pdcalc.memory.card_weights` (MTP included when loaded)."""
    log = weights_log(setup, size, tp)
    if log is not None:
        return log.bytes
    return card_weights(setup.weights_model or setup.model, setup.weights_quant or setup.quant, ep=size, tp=tp,
                        mtp=setup.mtp).total_bytes


def seq_kv_bytes(setup: Setup, context) -> np.ndarray | float:
    """KV bytes of one sequence at ``context`` tokens under ``setup`` (engine layout or constant)."""
    if setup.kv_bytes_per_token is not None:
        return np.asarray(context, dtype=float) * setup.kv_bytes_per_token
    return kv_bytes(setup.model, context, setup.engine, include_mtp=setup.mtp).total_bytes


def _step(setup: Setup, side_tp: int, size: int, *, context, concurrency, phase):
    return tput.step(setup.model, setup.card, tp=side_tp, dp=size // side_tp, ep=size, context=context,
                     concurrency=concurrency, phase=phase, quant=setup.quant, mfu=setup.mfu, mbu=setup.mbu,
                     comm_eff=setup.comm_eff, **setup.step_kwargs)


def _check_compute(setup: Setup) -> None:
    """Raise :class:`pdcalc.errors.LayoutError` (one line) when the card lacks the peak FLOP/s of the
    dtype the step runs its linear layers in (the quantization scheme's compute dtype, or
    ``step_kwargs['compute_dtype']``) or its attention in (``step_kwargs['attn_dtype']``)."""
    c = get_card(setup.card)
    kw = setup.step_kwargs
    known = ", ".join(sorted(c.flops_per_s))
    scheme = get_scheme(setup.quant).name
    if kw.get("peak_flops_per_s") is None:
        dtype = kw.get("compute_dtype") or tput.COMPUTE_DTYPE.get(scheme)
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


def sides(setup: Setup, work: Workload) -> tuple[list[Side], list[Side]]:
    """Every P and D instance layout, with the figures the candidates share. Sizes that cannot spread the
    routed experts and TP degrees the model's attention cannot be split by are left out."""
    _check_compute(setup)
    inv = get_inventory(setup.model)
    usable = _usable(setup)
    ctx = work.prompt_tokens + work.output_tokens
    per_seq = float(seq_kv_bytes(setup, ctx))
    p_out, d_out = [], []
    for size in _sizes(setup, inv.n_routed_experts):
        for t in setup.tp_options:
            if size % t or _tp_problem(setup, t):
                continue
            w = layout_weights(setup, size, t)
            dp = size // t
            pf = _step(setup, t, size, context=work.prompt_tokens, concurrency=dp, phase="prefill")
            p_out.append(Side("P", size, t, w, usable - w - setup.p_overhead_bytes, prefill_s=float(pf.time_s),
                              prompts_per_s=dp / float(pf.time_s)))
            room = usable - w - setup.d_overhead_bytes
            cap = max(0, int(room // per_seq)) if room > 0 else 0
            if cap:
                batch = np.unique(np.geomspace(1, cap * dp, setup.decode_grid).round()).astype(float)
                dc = _step(setup, t, size, context=work.prompt_tokens + work.output_tokens / 2,
                           concurrency=batch, phase="decode")
                tpot = np.asarray(dc.time_s, dtype=float)
            else:
                batch, tpot = np.array([1.0]), np.array([np.inf])
            d_out.append(Side("D", size, t, w, room, seqs_per_rank=cap, batch=batch, tpot=tpot))
    return p_out, d_out


def _tpot_at(d: Side, per_instance):
    """Decode step time at ``per_instance`` sequences (interpolated on the layout's grid, log-log)."""
    x = np.clip(per_instance, d.batch[0], d.batch[-1])
    if d.batch.size == 1:
        return np.full(np.shape(x), d.tpot[0])
    return np.exp(np.interp(np.log(x), np.log(d.batch), np.log(d.tpot)))


@dataclass(frozen=True)
class _Decode:
    """The decode side at every ``n_d`` of every D layout, concatenated: layout ``j``'s ``n_d`` is at
    ``offset[j] + n_d - 1``."""

    offset: np.ndarray
    conc: np.ndarray
    tpot: np.ndarray
    out_tok_s: np.ndarray
    rate: np.ndarray

    def at(self, d, n_d) -> np.ndarray:
        return self.offset[d] + np.asarray(n_d, dtype=np.int64) - 1


def _decode_table(setup: Setup, work: Workload, d_sides: list[Side]) -> _Decode:
    """Sequences in flight, TPOT, output tokens/s and request rate at each ``n_d = 1 .. cards // size``."""
    counts = [setup.cards // d.size for d in d_sides]
    offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if counts else np.zeros(0, np.int64)
    conc, tpot = [np.zeros(0)], [np.zeros(0)]
    for side, k in zip(d_sides, counts):
        n_d = np.arange(1, k + 1, dtype=float)
        if work.concurrency is not None:
            c = np.full(k, float(work.concurrency))
            t = _tpot_at(side, c / n_d)
        else:
            s = work.rate_per_s * work.output_tokens * _tpot_at(side, np.ones(k))
            for _ in range(60):
                s = work.rate_per_s * work.output_tokens * _tpot_at(side, np.maximum(s / n_d, 1.0))
            c, t = s, _tpot_at(side, np.maximum(s / n_d, 1.0))
        conc.append(c)
        tpot.append(t)
    conc, tpot = np.concatenate(conc), np.concatenate(tpot)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(np.isfinite(tpot) & np.isfinite(conc), conc / tpot, 0.0)
    rate = out / work.output_tokens if work.concurrency is not None else np.full(out.size, work.rate_per_s)
    return _Decode(offset, conc, tpot, out, rate)


def _transfer(setup: Setup, work: Workload, p_sides: list[Side]) -> np.ndarray:
    """Exposed KV transfer time of each P layout."""
    lnk = link(setup.bandwidth_bytes_per_s, setup.transfer_fixed_s)
    pf = np.array([p.prefill_s for p in p_sides], dtype=float)
    return np.atleast_1d(np.asarray(exposed_seconds(lnk, float(seq_kv_bytes(setup, work.prompt_tokens)), pf,
                                                    _main_layers(setup)), dtype=float))


def _p_slack(setup: Setup, work: Workload, n_p, prompts_per_s, prefill_s, xfer, rate):
    """Prefill load, TTFT and their slacks, the formulas of :func:`evaluate`."""
    with np.errstate(divide="ignore", invalid="ignore"):
        load = rate / (n_p * prompts_per_s)
        ttft = np.where(load < 1, prefill_s / (1 - load), np.inf) + xfer
        s_load = 1 - load / setup.max_load
        s_ttft = 1 - ttft / work.ttft_s if work.ttft_s else np.full(np.shape(load), np.inf)
    return load, ttft, s_load, s_ttft


def _p_ok(setup, work, n_p, p: Side, xfer, rate) -> np.ndarray:
    _, _, s_load, s_ttft = _p_slack(setup, work, n_p.astype(float), p.prompts_per_s, p.prefill_s, xfer, rate)
    return (np.nan_to_num(s_load, nan=-np.inf) >= 0) & (np.nan_to_num(s_ttft, nan=-np.inf) >= 0)


def _smallest_p(setup: Setup, work: Workload, p: Side, xfer: float, rate: np.ndarray,
                n_max: np.ndarray) -> np.ndarray:
    """For each request rate, the fewest P instances meeting the load limit and the TTFT target, or
    ``n_max`` (all the cluster leaves) when none up to it does."""
    lim = setup.max_load
    if work.ttft_s:
        room = work.ttft_s - xfer
        lim = min(lim, 1 - p.prefill_s / room) if room > 0 else 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        need = rate / (p.prompts_per_s * lim) if lim > 0 else np.full(rate.shape, np.inf)
    need = np.where(np.isnan(need), np.inf, need)
    n = np.clip(np.ceil(need), 1, n_max + 1).astype(np.int64)
    for _ in range(64):                       # rounding put it one too high
        down = (n > 1) & _p_ok(setup, work, n - 1, p, xfer, rate)
        if not down.any():
            break
        n -= down
    for _ in range(64):                       # ... or one too low
        up = (n <= n_max) & ~_p_ok(setup, work, n, p, xfer, rate)
        if not up.any():
            break
        n += up
    return np.minimum(n, n_max)


def _empty_candidates() -> dict[str, np.ndarray]:
    return {k: np.zeros(0, dtype=np.int64) for k in ("p", "n_p", "d", "n_d")}


def _candidates(setup: Setup, work: Workload, p_sides: list[Side], d_sides: list[Side],
                dec: _Decode | None = None, xfer: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Index arrays of the evaluated splits: each (P layout, D layout, n_d) within the cluster once, with
    the smallest ``n_p`` meeting load and TTFT (the largest that fits when none does); with
    ``use_all_cards``, the ``n_p`` that fills the cluster. Ordered by P layout, D layout, ``n_p``, ``n_d``."""
    if not p_sides or not d_sides:
        return _empty_candidates()
    dec = dec if dec is not None else _decode_table(setup, work, d_sides)
    xfer = xfer if xfer is not None else _transfer(setup, work, p_sides)
    C = setup.cards
    pi, npi, di, ndi = [], [], [], []
    for i, p in enumerate(p_sides):
        for j, d in enumerate(d_sides):
            n_d = np.arange(1, (C - p.size) // d.size + 1, dtype=np.int64)
            if not n_d.size:
                continue
            left = C - n_d * d.size
            n_max = left // p.size
            if setup.use_all_cards:
                keep = left % p.size == 0
                n_d, n_p = n_d[keep], n_max[keep]
            else:
                n_p = _smallest_p(setup, work, p, float(xfer[i]), dec.rate[dec.at(j, n_d)], n_max)
            pi.append(np.full(n_d.size, i, dtype=np.int64))
            di.append(np.full(n_d.size, j, dtype=np.int64))
            npi.append(n_p)
            ndi.append(n_d)
    if not pi:
        return _empty_candidates()
    c = {"p": np.concatenate(pi), "n_p": np.concatenate(npi), "d": np.concatenate(di), "n_d": np.concatenate(ndi)}
    order = np.lexsort((c["n_d"], c["n_p"], c["d"], c["p"]))
    return {k: v[order] for k, v in c.items()}


def count_splits(setup: Setup, p_sides: list[Side], d_sides: list[Side]) -> int:
    """Size of the whole split space: every (P layout, ``n_p``, D layout, ``n_d``) with ``n_p, n_d >= 1``
    within the cluster (exactly filling it with ``use_all_cards``), counted arithmetically."""
    C, total = setup.cards, 0
    for p in p_sides:
        for d in d_sides:
            n_p = np.arange(1, (C - d.size) // p.size + 1, dtype=np.int64)
            left = C - n_p * p.size
            total += int(np.count_nonzero(left % d.size == 0) if setup.use_all_cards else (left // d.size).sum())
    return total


def evaluate(setup: Setup, work: Workload, p_sides=None, d_sides=None, *, candidates=None) -> pd.DataFrame:
    """The planner's candidates (module docstring), evaluated with numpy arrays; one row per candidate.

    ``candidates``: index arrays ``p, n_p, d, n_d`` (positions in ``p_sides`` and ``d_sides``) of other
    splits to evaluate instead, e.g. the whole split space."""
    if p_sides is None:
        p_sides, d_sides = sides(setup, work)
    dec = _decode_table(setup, work, d_sides)
    xfer_p = _transfer(setup, work, p_sides)
    c = candidates if candidates is not None else _candidates(setup, work, p_sides, d_sides, dec, xfer_p)
    n = len(c["p"])
    P = {k: np.array([getattr(s, k) for s in p_sides], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "prefill_s", "prompts_per_s")}
    D = {k: np.array([getattr(s, k) for s in d_sides], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "seqs_per_rank")}
    p, d = np.asarray(c["p"], dtype=np.int64), np.asarray(c["d"], dtype=np.int64)
    n_p, n_d = np.asarray(c["n_p"], dtype=float), np.asarray(c["n_d"], dtype=float)
    d_dp = D["size"][d] // D["tp"][d]
    cap_seqs = n_d * d_dp * D["seqs_per_rank"][d]
    at = dec.at(d, c["n_d"]) if n else np.zeros(0, dtype=np.int64)
    conc, tpot, out_tok_s, rate = dec.conc[at], dec.tpot[at], dec.out_tok_s[at], dec.rate[at]
    xfer = xfer_p[p] if n else np.zeros(0)
    load, ttft, s_load, s_ttft = _p_slack(setup, work, n_p, P["prompts_per_s"][p], P["prefill_s"][p], xfer, rate)
    cards_used = n_p * P["size"][p] + n_d * D["size"][d]
    slack = {
        "P memory": P["room_bytes"][p] / _usable(setup),
        "D memory": D["room_bytes"][d] / _usable(setup),
        "KV capacity": 1 - conc / np.maximum(cap_seqs, 1e-9),
        "prefill load": s_load,
        "TTFT": s_ttft,
        "TPOT": 1 - tpot / work.tpot_s if work.tpot_s else np.full(n, np.inf),
    }
    slack_m = np.vstack([np.nan_to_num(np.asarray(slack[k], dtype=float), nan=-np.inf) for k in CONSTRAINTS])
    feasible = np.all(slack_m >= 0, axis=0)
    failing = slack_m < 0
    first_fail = np.where(failing.any(axis=0), np.argmax(failing, axis=0), np.argmin(slack_m, axis=0))
    binding = np.asarray(CONSTRAINTS, dtype=object)[first_fail] if n else np.array([], dtype=object)
    df = pd.DataFrame({
        "p_instances": np.asarray(c["n_p"], dtype=np.int64), "p_size": P["size"][p].astype(np.int64),
        "p_tp": P["tp"][p].astype(np.int64), "d_instances": np.asarray(c["n_d"], dtype=np.int64),
        "d_size": D["size"][d].astype(np.int64), "d_tp": D["tp"][d].astype(np.int64),
        "cards": cards_used.astype(np.int64),
        "p_weights_gib": P["weights_bytes"][p] / 2**30, "d_weights_gib": D["weights_bytes"][d] / 2**30,
        "d_kv_room_gib": D["room_bytes"][d] / 2**30, "kv_capacity_seqs": cap_seqs, "concurrency": conc,
        "prefill_s": P["prefill_s"][p], "prefill_load": load, "transfer_s": xfer,
        "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": out_tok_s,
        "tokens_per_s_per_card": out_tok_s / cards_used, "feasible": feasible, "binding": binding,
    })
    for k in CONSTRAINTS:
        df[f"slack: {k}"] = slack[k]
    return df


def evaluate_split(setup: Setup, work: Workload, *, p_instances: int, p_size: int, d_instances: int, d_size: int,
                   p_tp: int = 1, d_tp: int = 1, p_sides=None, d_sides=None) -> pd.Series:
    """One split, evaluated as :func:`evaluate` does (a row of the same columns), whether or not the
    planner keeps it among its candidates (e.g. a deployment with more P instances than it needs)."""
    if p_sides is None:
        p_sides, d_sides = sides(setup, work)
    vals = {name: integer(name, v, low=1) for name, v in (("p_instances", p_instances), ("p_size", p_size),
                                                           ("d_instances", d_instances), ("d_size", d_size),
                                                           ("p_tp", p_tp), ("d_tp", d_tp))}
    idx = []
    for role, found in (("p", p_sides), ("d", d_sides)):
        key = (vals[f"{role}_size"], vals[f"{role}_tp"])
        where = [i for i, s in enumerate(found) if (s.size, s.tp) == key]
        if not where:
            raise LayoutError(f"no {role.upper()} layout of {key[0]} cards with TP {key[1]} among those planned "
                              f"({', '.join(f'{s.size}/TP {s.tp}' for s in found) or 'none'})")
        idx.append(where[0])
    cards = vals["p_instances"] * vals["p_size"] + vals["d_instances"] * vals["d_size"]
    if cards > setup.cards:
        raise LayoutError(f"the split needs {cards:,} cards, the cluster has {setup.cards:,}")
    c = {"p": np.array([idx[0]]), "n_p": np.array([vals["p_instances"]]), "d": np.array([idx[1]]),
         "n_d": np.array([vals["d_instances"]])}
    return evaluate(setup, work, p_sides, d_sides, candidates=c).iloc[0]


def _main_layers(setup: Setup) -> int:
    """Main-model layers, over which a layer-wise KV send is spread."""
    return load_config(setup.model).num_hidden_layers


def evaluate_loop(setup: Setup, work: Workload, p_sides=None, d_sides=None, *, candidates=None) -> pd.DataFrame:
    """The same evaluation as :func:`evaluate` (same candidates), one candidate at a time in plain Python."""
    if p_sides is None:
        p_sides, d_sides = sides(setup, work)
    c = candidates if candidates is not None else _candidates(setup, work, p_sides, d_sides)
    usable = _usable(setup)
    lnk = link(setup.bandwidth_bytes_per_s, setup.transfer_fixed_s)
    xfer_bytes = float(seq_kv_bytes(setup, work.prompt_tokens))
    layers = _main_layers(setup)
    rows = []
    for i in range(len(c["p"])):
        p, d = p_sides[int(c["p"][i])], d_sides[int(c["d"][i])]
        n_p, n_d = int(c["n_p"][i]), int(c["n_d"][i])
        cap = n_d * d.dp * d.seqs_per_rank

        def tp_at(x):
            return float(_tpot_at(d, np.array([x]))[0])

        if work.concurrency is not None:
            conc = float(work.concurrency)
            tpot = tp_at(conc / n_d)
        else:
            s = work.rate_per_s * work.output_tokens * tp_at(1.0)
            for _ in range(60):
                s = work.rate_per_s * work.output_tokens * tp_at(max(s / n_d, 1.0))
            conc, tpot = s, tp_at(max(s / n_d, 1.0))
        out = conc / tpot if math.isfinite(tpot) and math.isfinite(conc) else 0.0
        rate = out / work.output_tokens if work.concurrency is not None else work.rate_per_s
        load = rate / (n_p * p.prompts_per_s)
        xfer = float(exposed_seconds(lnk, xfer_bytes, p.prefill_s, layers))
        ttft = (p.prefill_s / (1 - load) if load < 1 else math.inf) + xfer
        cards = n_p * p.size + n_d * d.size
        slack = {"P memory": p.room_bytes / usable, "D memory": d.room_bytes / usable,
                 "KV capacity": 1 - conc / max(cap, 1e-9), "prefill load": 1 - load / setup.max_load,
                 "TTFT": 1 - ttft / work.ttft_s if work.ttft_s else math.inf,
                 "TPOT": 1 - tpot / work.tpot_s if work.tpot_s else math.inf}
        clean = {k: (v if not math.isnan(v) else -math.inf) for k, v in slack.items()}
        fails = [k for k in CONSTRAINTS if clean[k] < 0]
        worst = fails[0] if fails else min(CONSTRAINTS, key=lambda k: clean[k])
        rows.append({"p_instances": n_p, "p_size": p.size, "p_tp": p.tp, "d_instances": n_d, "d_size": d.size,
                     "d_tp": d.tp, "cards": cards, "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": out,
                     "tokens_per_s_per_card": out / cards,
                     "feasible": all(v >= 0 for v in slack.values()), "binding": worst})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Plan:
    """The result of :func:`plan`.

    ``candidates``: the evaluated splits, one row per (P layout, D layout, ``n_d``) with the smallest P side
    that meets load and TTFT (module docstring); ``ranked``: the feasible ones, best first; ``reason``: ""
    when something fits, else one line starting "nothing fits:" with the closest split and its shortfall;
    ``seconds``: wall time of the evaluation; ``splits``: how many (P layout, ``n_p``, D layout, ``n_d``)
    splits the cluster admits in all (:func:`count_splits`); ``evaluated``: how many were evaluated (the
    rows of ``candidates``)."""

    setup: Setup
    workload: Workload
    candidates: pd.DataFrame
    ranked: pd.DataFrame
    reason: str             # "" when something fits
    seconds: float          # wall time of the evaluation
    splits: int = 0         # size of the whole split space
    evaluated: int = 0      # splits evaluated (len(candidates))

    @property
    def best(self):
        return None if self.ranked.empty else self.ranked.iloc[0]


def _no_candidates(setup: Setup, p_sides: list[Side]) -> str:
    """Why there is no split at all (one line)."""
    tried = _tried_sizes(setup)
    n_exp = get_inventory(setup.model).n_routed_experts
    sizes = _sizes(setup, n_exp)
    if not sizes:
        return (f"nothing fits: no instance size tried ({', '.join(map(str, tried))}) can be used: an instance "
                f"has 1..{min(setup.cards - 1, n_exp):,} cards (at most one per routed expert of the "
                f"{n_exp}, and at least one card left to the other side of the {setup.cards:,})")
    if not p_sides:
        why = []
        for t in setup.tp_options:
            problem = _tp_problem(setup, t)
            why.append(f"TP {t}: {problem}" if problem else
                       f"TP {t} divides none of the instance sizes {', '.join(map(str, sizes))}")
        return "nothing fits: no TP degree tried suits the model and an instance size; " + "; ".join(why)
    smallest = min(s.size for s in p_sides)
    if setup.use_all_cards:
        return (f"nothing fits: no split of instance sizes {', '.join(map(str, sizes))} uses exactly "
                f"{setup.cards:,} cards")
    return f"nothing fits: one P and one D instance need at least {2 * smallest:,} cards, the cluster has {setup.cards:,}"


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:,.1f} ms" if math.isfinite(seconds) else "unbounded (prefill saturated)"


def _nothing_fits(df: pd.DataFrame, setup: Setup, work: Workload) -> str:
    """The closest split and its shortfall (one line): the split furthest along the constraints (P and D
    memory taken together), then the least relative shortfall there, then the fewest cards."""
    slack = df[[f"slack: {k}" for k in CONSTRAINTS]].to_numpy(dtype=float)
    slack = np.where(np.isnan(slack), -np.inf, slack)
    stage_of = np.array([_STAGE[k] for k in CONSTRAINTS])
    first = np.argmax(slack < 0, axis=1)                       # every row fails somewhere
    stage = stage_of[first]
    in_stage = stage_of[None, :] == stage[:, None]
    short = np.where(in_stage, slack, np.inf).min(axis=1)      # the worst slack of the failing stage
    best = int(np.lexsort((df["cards"].to_numpy(), -short, -stage))[0])
    row = df.iloc[best]
    failing = [k for i, k in enumerate(CONSTRAINTS) if stage_of[i] == stage[best] and slack[best, i] < 0]
    gib = 2**30
    usable = _usable(setup)
    parts = []
    for k in failing:
        if k in ("P memory", "D memory"):
            side = k[0]
            lead = f"a {side} card is short by" if not parts else f"a {side} card by"
            parts.append(f"{lead} {-row[f'slack: {k}'] * usable / gib:,.2f} GiB")
        elif k == "KV capacity":
            cap, conc = float(row["kv_capacity_seqs"]), float(row["concurrency"])
            if cap == 0 or not math.isfinite(conc):
                per_seq = float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
                parts.append(f"a D card has {row['d_kv_room_gib']:,.2f} GiB for KV cache, less than one sequence "
                             f"of {work.prompt_tokens + work.output_tokens:,} tokens ({per_seq / gib:,.2f} GiB)")
            else:
                need = math.ceil(conc - 1e-9)
                parts.append(f"the D side holds {cap:,.0f} of the {need:,} sequences in flight, {need - cap:,.0f} "
                             f"short")
        elif k == "prefill load":
            parts.append(f"prefill runs at {100 * row['prefill_load']:,.0f}% of its capacity with "
                         f"{row['p_instances']:,} P instance{'s' if row['p_instances'] > 1 else ''} (max "
                         f"{100 * setup.max_load:.0f}%)")
        elif k == "TTFT":
            parts.append(f"TTFT {_ms(row['ttft_s'])} against a target of {_ms(work.ttft_s)}")
        else:
            parts.append(f"TPOT {_ms(row['tpot_s'])} against a target of {_ms(work.tpot_s)}")
    return (f"nothing fits: the closest split, {row['p_instances']:,} x P{row['p_size']} + {row['d_instances']:,} x "
            f"D{row['d_size']} (TP {row['p_tp']}/{row['d_tp']}, {row['cards']:,} cards), fails on "
            f"{' and '.join(failing)}: {' and '.join(parts) if len(parts) < 3 else '; '.join(parts)}")


def plan(setup: Setup, work: Workload, *, vectorized: bool = True) -> Plan:
    """Evaluate the candidates and rank the feasible ones (module docstring). A deployment that does not
    fit is a result (:attr:`Plan.reason`); a card without the FLOP/s of the compute dtype raises
    :class:`pdcalc.errors.LayoutError` before anything is evaluated."""
    t0 = time.perf_counter()
    p_sides, d_sides = sides(setup, work)
    df = (evaluate if vectorized else evaluate_loop)(setup, work, p_sides, d_sides)
    secs = time.perf_counter() - t0
    ok = df[df["feasible"]] if not df.empty else df
    ranked = ok.sort_values(["tokens_per_s_per_card", "ttft_s"], ascending=[False, True],
                            kind="stable").reset_index(drop=True)
    if len(ranked):
        reason = ""
    elif df.empty:
        reason = _no_candidates(setup, p_sides)
    else:
        reason = _nothing_fits(df, setup, work)
    return Plan(setup, work, df, ranked, reason, secs, splits=count_splits(setup, p_sides, d_sides),
                evaluated=len(df))


def split_label(row) -> str:
    """A split as people write it, ``"4 x P8 + 1 x D32"`` (TP degrees added when above 1); ``"none"`` for
    ``None`` (no plan)."""
    if row is None:
        return "none"
    tp = "".join(f", {r.upper()} TP {int(row[f'{r}_tp'])}" for r in ("p", "d") if int(row[f"{r}_tp"]) > 1)
    return (f"{int(row['p_instances'])} x P{int(row['p_size'])} + {int(row['d_instances'])} x D{int(row['d_size'])}"
            + tp)


def card_plans(setup: Setup, work: Workload, row) -> tuple:
    """Memory of one P card and one D card of a candidate (a row of :attr:`Plan.candidates`): weights,
    KV cache in use (one prompt per P rank; the D instance's share of the sequences per D rank) and the
    overhead, as :class:`pdcalc.memory.MemoryPlan` objects."""
    from pdcalc.memory import memory_plan

    c = get_card(setup.card)
    base = c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes
    out = []
    for role in ("p", "d"):
        size, tp = int(row[f"{role}_size"]), int(row[f"{role}_tp"])
        w = layout_weights(setup, size, tp)
        if role == "p":
            kv = float(seq_kv_bytes(setup, work.prompt_tokens))
            over = setup.p_overhead_bytes
        else:
            per_rank = float(row["concurrency"]) / (int(row["d_instances"]) * (size // tp))
            kv = per_rank * float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
            over = setup.d_overhead_bytes
        out.append(memory_plan(f"{role.upper()} card ({row[f'{role}_instances']} x {size} cards, tp {tp})",
                               usable_bytes=setup.utilization * base, capacity_bytes=base, weights=w, kv_cache=kv,
                               overhead=over))
    return tuple(out)
