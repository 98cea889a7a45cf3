"""Plan a deployment of a cluster: every way to cut it into prefill (P) and decode (D) instances, the
co-located (aggregated) alternative on the same cards, the best of each under latency targets, which one
wins and why, and the throughput-latency frontier of both.

**Disaggregated.** A candidate is ``n_p`` prefill instances of ``s_p`` cards (TP degree ``t_p`` from
``p_tp_options``, EP group = the instance, ``s_p / t_p`` DP ranks) and ``n_d`` decode instances of ``s_d``
cards (TP from ``d_tp_options``), with ``n_p s_p + n_d s_d`` at most the cluster. For each candidate:

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

**Aggregated (co-located).** ``n`` instances of ``s`` cards (TP degree from ``p_tp_options`` or
``d_tp_options``, EP group = the instance, ``dp = s / t`` ranks) serve prefill and decode on the same cards,
as vLLM's chunked prefill does: every step of a DP rank carries one decode token for each of its ``S_r = S /
(n \\, dp)`` running sequences plus a chunk of prompt tokens. Both parts come from the same step model and
the same per-layout tables as the disaggregated side: ``t_dec(S / n)`` the decode step of the D table,
``t_pf`` the prefill step of one prompt of ``L_in`` tokens per rank of the P table. Assumptions:

- a chunk of ``c`` prompt tokens costs its share of a whole prompt's prefill, ``(c / L_in) \\, t_pf``
  (linear in tokens, attention averaged over the prompt), *added* to the decode step: the decode tokens'
  weight reads are not hidden under the chunk's compute, which errs against co-location by at most the
  smaller of the two parts;
- in steady state each step admits as many prompt tokens as finish (Little's law): each step a share
  ``1 / L_out`` of the running sequences completes, so a rank prefills on average

  .. math:: \\bar c = \\frac{S_r \\, L_\\text{in}}{L_\\text{out}} = \\frac{R \\, L_\\text{in} \\, \\tau}{n \\, dp}

  prompt tokens per step, and the mean step, which is the TPOT, is

  .. math:: \\tau = t_\\text{dec}(S / n) + \\frac{S_r}{L_\\text{out}} \\, t_\\text{pf}
     = \\frac{t_\\text{dec}(S / n)}{1 - u}, \\qquad u = \\frac{R \\, t_\\text{pf}}{n \\, dp}

  ``u`` being the share of each step spent on prompts (given a rate, ``S = R L_out tau`` is solved by
  fixed-point iteration as on the disaggregated side; ``u >= 1`` cannot be served);
- a step may carry at most a chunk budget ``b`` of prompt tokens per rank (vLLM's
  ``--max-num-batched-tokens`` less the decode tokens): the largest chunk with which a step still meets the
  TPOT target, at most one whole prompt,

  .. math:: b = \\min\\left(L_\\text{in},\\; L_\\text{in} \\, \\frac{\\text{TPOT}_\\text{target} -
     t_\\text{dec}}{t_\\text{pf}}\\right)

  (``b = L_in`` without a TPOT target), so that no step, even one carrying a full chunk, exceeds the target;
- prompts are prefilled one at a time per rank, in ``L_in / b`` steps of ``t_dec + (b / L_in) t_pf``; at
  load ``rho = c_bar / b`` the M/M/1 queueing of the disaggregated side gives

  .. math:: \\text{TTFT} = \\frac{L_\\text{in} \\, t_\\text{dec} / b + t_\\text{pf}}{1 - \\rho}

  (no KV transfer);
- memory per card: the weights of the layout, the larger of the P and D overheads (the card runs both), and
  the KV cache of its rank's ``S_r`` sequences of ``L_in + L_out`` tokens plus the prompt being prefilled.

Its constraints, in the order that names the binding one (:data:`AGG_CONSTRAINTS`): memory, KV capacity,
TPOT (the mean step), prefill load ``rho <= max_load`` (the prompts arriving against the chunk room the TPOT
target leaves), TTFT. For every layout every ``n`` that fits the cluster is evaluated (``O(cards)`` per
layout). With the prefill cost set to zero the aggregated option is the D side alone: same TPOT and output
at ``n = n_d`` (a test checks it).

**Which wins.** :func:`plan` returns the best disaggregated split and the best aggregated layout under the
same targets: the one with more output tokens per second per card wins (:attr:`Plan.winner`; on a tie, as
when both serve a request rate on as many cards, the shorter TTFT, then TPOT), and
:attr:`Plan.why` says by how much and what holds the other back; when only one meets the targets it wins,
when neither does the result says why for each. The targets are always stated (:attr:`Plan.targets`):
without a TPOT or TTFT target from the caller, the published service level of
:func:`default_targets` (also :func:`pdcalc.recommend.default_targets`) with its source (none for TTFT,
since none is published).

**The frontier** (:func:`frontier`, :attr:`Plan.frontier`): at each concurrency of a geometric grid from 1
sequence to what the cluster's memory holds (plus the workload's own concurrency), the best disaggregated
split and the best aggregated layout that meet every target, or past the last concurrency where one does,
the best that meets every constraint but the TPOT target (so that the curve runs past the target), with
their output tokens/s per card, TPOT and TTFT, and beside them the most each mode gives there whatever its
TPOT. The per-layout step tables are computed once and reused at every level; the disaggregated split of a
level is found by a pruned search (:func:`_best_split`) that returns what ranking every split would.

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
the largest that fits, which is the closest. With ``use_all_cards``, ``n_p`` is fixed by ``n_d`` (and an
aggregated layout must fill the cluster). This is ``O(cards)`` splits per pair of layouts, against
``O(cards**2)`` for the whole split space, whose size :func:`count_splits` gives arithmetically
(:attr:`Plan.splits`). The best plan, the feasible/infeasible verdict and the closest candidate when nothing
fits are those of the whole space; the ranked table lists one row per D side instead of every dominated P
side.

The evaluation is vectorized: the per-layout quantities (weights, prefill time, the decode step time over
a grid of batch sizes) are computed once per distinct layout, the decode side once per ``(D layout,
n_d)``, then every candidate is evaluated with numpy array arithmetic. :func:`evaluate_loop` does the same
one candidate at a time in plain Python (for the benchmark and as a cross-check).
"""

from __future__ import annotations

import inspect
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from pdcalc import measurements
from pdcalc import throughput as tput
from pdcalc.checks import InputError, boolean, fraction, integer, number, show, text, tp_problem
from pdcalc.errors import LayoutError, PdcalcError
from pdcalc.hardware import get_card
from pdcalc.inventory import get_inventory
from pdcalc.kv_cache import kv_bytes
from pdcalc.memory import card_weights
from pdcalc.model import load_config
from pdcalc.parallel import place_experts
from pdcalc.quant import get_scheme
from pdcalc.transfer import exposed_seconds, link
from pdcalc.units import GiB

CONSTRAINTS = ("P memory", "D memory", "KV capacity", "prefill load", "TTFT", "TPOT")

#: Constraints of an aggregated (co-located) layout, in the order that names the binding one: the mean step
#: (TPOT) before the prefill load, since prompts only get the room the TPOT target leaves in a step.
AGG_CONSTRAINTS = ("memory", "KV capacity", "TPOT", "prefill load", "TTFT")

#: The two ways to run a cluster that :func:`plan` compares.
MODES = ("disaggregated", "aggregated")

#: Most concurrency levels of the frontier (:attr:`Setup.frontier_points`).
MAX_FRONTIER_POINTS = 256

#: Largest cluster :class:`Setup` accepts (the planner is linear in it; this only stops a typo running away).
MAX_CARDS = 65_536

#: Most batch sizes per layout the decode step may be computed at (:attr:`Setup.decode_grid`).
MAX_DECODE_GRID = 4_096

# closeness when nothing fits: P and D memory are one stage (a split is as close as its worse side)
_STAGE = {"P memory": 0, "D memory": 0, "KV capacity": 1, "prefill load": 2, "TTFT": 3, "TPOT": 4}
_AGG_STAGE = {k: i for i, k in enumerate(AGG_CONSTRAINTS)}


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
    quant: str | None = None                  # weights as stored (pdcalc.quant); None: quant.default_scheme_on
    weights_model: str | Path | None = None   # inventory that sizes the weights (e.g. an article preset); None: model
    weights_quant: str | None = None          # scheme for weights_model; None: quant
    card: str | Path = "ascend-910b2"         # card preset or hardware TOML
    cards: int = 64                           # cluster size, 2..MAX_CARDS
    mtp: bool = True                          # MTP module loaded (weights)
    utilization: float = 0.9                  # gpu-memory-utilization
    base: str = "visible"                     # memory utilisation applies to: "visible" or "installed"
    engine: str | None = None                 # KV layout (pdcalc.kv_cache.ENGINES); None: the card's family's
                                              # engine (pdcalc.kv_cache.default_engine: vLLM on NVIDIA, vllm-ascend on Ascend)
    kv_cache_dtype: str | None = None         # the engine's KV cache format (kv_cache.kv_bytes); None: its default
    kv_bytes_per_token: float | None = None   # constant KV bytes per token instead of the engine layout
    p_overhead_bytes: float = 3.5e9           # activations + framework per P card
    d_overhead_bytes: float = 4.0e9           # activations + framework per D card
    bandwidth_bytes_per_s: float = 18e9       # effective P -> D transfer bandwidth per request
    transfer_fixed_s: float = 0.0             # fixed cost per transfer
    tp_options: tuple[int, ...] = (1,)        # TP degrees tried on both sides (those the model allows)
    p_tp_options: tuple[int, ...] | None = None  # TP degrees tried on the P side; None: tp_options
    d_tp_options: tuple[int, ...] | None = None  # TP degrees tried on the D side; None: tp_options
    sizes: tuple[int, ...] | None = None      # instance sizes (cards) tried; None: powers of two up to cards
    mfu: float = tput.DEFAULT_MFU
    mbu: float = tput.DEFAULT_MBU
    comm_eff: float = tput.DEFAULT_COMM_EFF
    max_load: float = 0.8                     # highest prefill utilisation accepted, in (0, 1)
    use_all_cards: bool = False               # only splits that use the whole cluster
    decode_grid: int = 48                     # batch sizes the decode step is computed at per layout
    step_kwargs: dict = field(default_factory=dict)  # extra keyword arguments for throughput.step
    measured_weights: bool = False            # size weights from a logged figure where one matches the layout
    aggregated: bool = True                   # also evaluate co-located (aggregated) layouts
    frontier_points: int = 16                 # concurrency levels of the frontier; 0: no frontier

    def __post_init__(self):
        put = object.__setattr__
        if self.quant is None:
            from pdcalc.quant import default_scheme_on

            try:
                put(self, "quant", default_scheme_on(self.model, self.card))
            except PdcalcError:  # a bad model name: reported when planning, with the other names
                put(self, "quant", "w8a8")
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
        put(self, "p_tp_options", _positive_ints("p_tp_options", self.p_tp_options, allow_none=True))
        put(self, "d_tp_options", _positive_ints("d_tp_options", self.d_tp_options, allow_none=True))
        put(self, "aggregated", boolean("aggregated", self.aggregated))
        if self.engine is None:
            from pdcalc.kv_cache import default_engine

            put(self, "engine", default_engine(self.card))
        put(self, "frontier_points", integer("frontier_points", self.frontier_points, low=0,
                                             high=MAX_FRONTIER_POINTS))
        put(self, "sizes", _positive_ints("sizes", self.sizes, allow_none=True))
        put(self, "decode_grid", integer("decode_grid", self.decode_grid, low=2, high=MAX_DECODE_GRID))
        if not isinstance(self.step_kwargs, dict):
            raise InputError("step_kwargs", f"must be a dict of keyword arguments, got {show(self.step_kwargs)}")

    @property
    def p_tps(self) -> tuple[int, ...]:
        """TP degrees tried on the P side."""
        return self.p_tp_options or self.tp_options

    @property
    def d_tps(self) -> tuple[int, ...]:
        """TP degrees tried on the D side."""
        return self.d_tp_options or self.tp_options

    @property
    def a_tps(self) -> tuple[int, ...]:
        """TP degrees tried for a co-located instance: those of either side."""
        return tuple(dict.fromkeys(self.p_tps + self.d_tps))

    @property
    def a_overhead_bytes(self) -> float:
        """Activations + framework on a co-located card: the larger of the P and D figures (it runs both)."""
        return max(self.p_overhead_bytes, self.d_overhead_bytes)


@dataclass(frozen=True)
class Targets:
    """Latency targets and where each comes from (``None``: no target, stated "none")."""

    ttft_s: float | None
    tpot_s: float | None
    ttft_source: str
    tpot_source: str

    def stated(self, which: str) -> str:
        """A target as a reader reads it: ``"50 ms"``, ``"1.5 s"`` or ``"none"`` (``which``: "TTFT" or "TPOT")."""
        v = {"TTFT": self.ttft_s, "TPOT": self.tpot_s}[which]
        return "none" if v is None else _ms(v)

    def as_dict(self) -> dict:
        """``{"TPOT": {"seconds", "stated", "source"}, "TTFT": {...}}``."""
        return {k: {"seconds": v, "stated": self.stated(k), "source": src}
                for k, v, src in (("TPOT", self.tpot_s, self.tpot_source), ("TTFT", self.ttft_s, self.ttft_source))}


#: Registry entries the default targets come from.
TPOT_SLO_ID = "cloudmatrix384-r1-decode-per-npu-tpot50"
USER_SPEED_ID = "deepseek-prod-h800-decode-per-node"


def _number_before(pattern: str, text: str | None, what: str) -> float:
    m = re.search(pattern, text or "")
    if not m:
        raise LayoutError(f"the registry no longer states {what} in the expected form: {text!r}")
    return float(m.group(1))


def default_targets() -> Targets:
    """The published service levels used as default targets.

    TPOT: CloudMatrix384 decodes DeepSeek-R1 "(<50 ms TPOT)" (its ``workload`` field), and DeepSeek's
    own service decodes at "20-22 tokens/s per user", one token every :math:`1/20` s at the slower end;
    the stricter of the two. TTFT: none published, so none.
    """
    cm = measurements.get(TPOT_SLO_ID)
    ds = measurements.get(USER_SPEED_ID)
    cm_s = _number_before(r"TPOT\s*<\s*(\d+(?:\.\d+)?)\s*ms", cm.workload, "a TPOT bound") / 1e3
    speed = re.search(r"(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*tokens/s per user", ds.workload or "")
    if not speed:
        raise LayoutError(f"the registry no longer states a per-user speed in the expected form: {ds.workload!r}")
    slow, fast = float(speed.group(1)), float(speed.group(2))
    ds_s = 1 / slow
    tpot = min(cm_s, ds_s)
    tpot_src = (f"CloudMatrix384 serves DeepSeek-R1 decode at TPOT < {cm_s * 1e3:g} ms (arXiv 2506.12708, "
                f"abstract; registry {cm.id}), and DeepSeek's own service decodes at {slow:g}-{fast:g} tokens/s "
                f"per user, one token every {ds_s * 1e3:g} ms at the slower end (open-infra-index, day 6; "
                f"registry {ds.id})")
    ttft_src = ("neither the measurements registry nor the reference notes hold a published TTFT service level "
                "(the registry's only TTFT is a measurement of Qwen3-8B at concurrency 1), so the prefill side is "
                "held only by the planner's load limit")
    return Targets(ttft_s=None, tpot_s=tpot, ttft_source=ttft_src, tpot_source=tpot_src)


def resolve_targets(work: "Workload", targets: Targets | None = None) -> Targets:
    """The targets a plan applies: ``targets`` as given, else the workload's where it has one (source
    "given") and the published service level of :func:`default_targets` where it has none
    (its source; for TTFT none is published, so none)."""
    if targets is not None:
        if not isinstance(targets, Targets):
            raise InputError("targets", f"must be a pdcalc.plan.Targets or None, got {show(targets)}")
        return targets
    d = default_targets()
    return Targets(ttft_s=work.ttft_s if work.ttft_s is not None else d.ttft_s,
                   tpot_s=work.tpot_s if work.tpot_s is not None else d.tpot_s,
                   ttft_source="given" if work.ttft_s is not None else d.ttft_source,
                   tpot_source="given" if work.tpot_s is not None else d.tpot_source)


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


def _tried_sizes(setup: Setup) -> tuple[int, ...]:
    return setup.sizes or tuple(2 ** k for k in range(int(math.log2(setup.cards)) + 1))


def _sizes(setup: Setup, n_experts: int, *, whole: bool = False) -> list[int]:
    """Instance sizes tried that leave a card for the other side (``whole``: that fit the cluster, for a
    co-located instance) and can spread the routed experts."""
    out = []
    for s in _tried_sizes(setup):
        if s > setup.cards - (0 if whole else 1):
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
    """The step's KV cache as the plan sizes it (:func:`pdcalc.throughput.kv_step_kwargs`)."""
    return tput.kv_step_kwargs(setup.model, setup.engine, setup.kv_cache_dtype)


def _step(setup: Setup, side_tp: int, size: int, *, context, concurrency, phase):
    return tput.step(setup.model, setup.card, tp=side_tp, dp=size // side_tp, ep=size, context=context,
                     concurrency=concurrency, phase=phase, quant=setup.quant, mfu=setup.mfu, mbu=setup.mbu,
                     comm_eff=setup.comm_eff, **{**_kv_step_kwargs(setup), **setup.step_kwargs})


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
    usable = _usable(setup)
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
    split_sizes = set(_sizes(setup, inv.n_routed_experts))
    for size in _sizes(setup, inv.n_routed_experts, whole=True):
        for role, tps in roles:
            if role != "A" and size not in split_sizes:
                continue
            for t in tps:
                if size % t or _tp_problem(setup, t):
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


def _p_ok(setup, work, n_p, prompts_per_s, prefill_s, xfer, rate) -> np.ndarray:
    _, _, s_load, s_ttft = _p_slack(setup, work, n_p.astype(float), prompts_per_s, prefill_s, xfer, rate)
    return (s_load >= 0) & (s_ttft >= 0)          # NaN compares false: it fails, as in the evaluation


def _fewest_p(setup: Setup, work: Workload, prompts_per_s, prefill_s, xfer, rate: np.ndarray,
              n_max: np.ndarray) -> np.ndarray:
    """For each candidate (arrays of one shape: its P layout's prompts per second, prefill time and
    exposed transfer, its request rate, the P instances the cluster leaves), the fewest P instances
    meeting the load limit and the TTFT target, or ``n_max`` when none up to it does."""
    lim = np.full(np.shape(rate), setup.max_load)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if work.ttft_s:
            room = work.ttft_s - xfer
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
    return _fewest_p(setup, work, np.full(shape, p.prompts_per_s), np.full(shape, p.prefill_s),
                     np.full(shape, float(xfer)), np.asarray(rate, dtype=float), np.asarray(n_max))


def _empty_candidates() -> dict[str, np.ndarray]:
    return {k: np.zeros(0, dtype=np.int64) for k in ("p", "n_p", "d", "n_d")}


def _candidates(setup: Setup, work: Workload, p_sides: list[Side], d_sides: list[Side],
                dec: _Decode | None = None, xfer: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Index arrays of the evaluated splits: each (P layout, D layout, n_d) within the cluster once, with
    the smallest ``n_p`` meeting load and TTFT (the largest that fits when none does); with
    ``use_all_cards``, the ``n_p`` that fills the cluster. Ordered by P layout, D layout, ``n_p``, ``n_d``.
    The P side of every pair of layouts is sized at once (:func:`_fewest_p` over one flat array)."""
    if not p_sides or not d_sides:
        return _empty_candidates()
    dec = dec if dec is not None else _decode_table(setup, work, d_sides)
    xfer = xfer if xfer is not None else _transfer(setup, work, p_sides)
    C = setup.cards
    p_size = np.array([p.size for p in p_sides], dtype=np.int64)
    d_size = np.array([d.size for d in d_sides], dtype=np.int64)
    counts = np.maximum((C - p_size[:, None]) // d_size[None, :], 0)          # n_d = 1..count per pair
    total = int(counts.sum())
    if not total:
        return _empty_candidates()
    flat = counts.ravel()
    pair = np.repeat(np.arange(flat.size), flat)
    start = np.repeat(np.cumsum(flat) - flat, flat)
    pi, di = pair // len(d_sides), pair % len(d_sides)
    n_d = np.arange(total, dtype=np.int64) - start + 1
    left = C - n_d * d_size[di]
    n_max = left // p_size[pi]
    if setup.use_all_cards:
        keep = left % p_size[pi] == 0
        pi, di, n_d, n_p = pi[keep], di[keep], n_d[keep], n_max[keep]
    else:
        pps = np.array([p.prompts_per_s for p in p_sides], dtype=float)
        pf = np.array([p.prefill_s for p in p_sides], dtype=float)
        n_p = _fewest_p(setup, work, pps[pi], pf[pi], np.asarray(xfer, dtype=float)[pi], dec.rate[dec.at(di, n_d)],
                        n_max)
    c = {"p": pi.astype(np.int64), "n_p": n_p.astype(np.int64), "d": di.astype(np.int64), "n_d": n_d}
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


def _split_arrays(setup: Setup, work: Workload, p_sides: list[Side], d_sides: list[Side], dec: _Decode,
                  xfer_p: np.ndarray, c: dict) -> tuple[dict, dict]:
    """The columns of :func:`evaluate` as arrays, and the slack of each constraint, for the candidates ``c``."""
    n = len(c["p"])
    P = {k: np.array([getattr(s, k) for s in p_sides], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "prefill_s", "prompts_per_s")}
    D = {k: np.array([getattr(s, k) for s in d_sides], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "seqs_per_rank")}
    p, d = np.asarray(c["p"], dtype=np.int64), np.asarray(c["d"], dtype=np.int64)
    n_p, n_d = np.asarray(c["n_p"], dtype=float), np.asarray(c["n_d"], dtype=float)
    if not p_sides or not d_sides:        # no layout to index: every array is empty
        P = {k: np.zeros(1) for k in P}
        D = {k: np.ones(1) for k in D}
    d_dp = D["size"][d] // D["tp"][d]
    cap_seqs = n_d * d_dp * D["seqs_per_rank"][d]
    at = dec.at(d, c["n_d"]) if n else np.zeros(0, dtype=np.int64)
    conc, tpot, out_tok_s, rate = dec.conc[at], dec.tpot[at], dec.out_tok_s[at], dec.rate[at]
    xfer = xfer_p[p] if n else np.zeros(0)
    load, ttft, s_load, s_ttft = _p_slack(setup, work, n_p, P["prompts_per_s"][p], P["prefill_s"][p], xfer, rate)
    cards_used = n_p * P["size"][p] + n_d * D["size"][d]
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = {
            "P memory": P["room_bytes"][p] / _usable(setup),
            "D memory": D["room_bytes"][d] / _usable(setup),
            "KV capacity": 1 - conc / np.maximum(cap_seqs, 1e-9),
            "prefill load": s_load,
            "TTFT": s_ttft,
            "TPOT": 1 - tpot / work.tpot_s if work.tpot_s else np.full(n, np.inf),
        }
    cols = {
        "p_instances": np.asarray(c["n_p"], dtype=np.int64), "p_size": P["size"][p].astype(np.int64),
        "p_tp": P["tp"][p].astype(np.int64), "d_instances": np.asarray(c["n_d"], dtype=np.int64),
        "d_size": D["size"][d].astype(np.int64), "d_tp": D["tp"][d].astype(np.int64),
        "cards": cards_used.astype(np.int64),
        "p_weights_gib": P["weights_bytes"][p] / GiB, "d_weights_gib": D["weights_bytes"][d] / GiB,
        "d_kv_room_gib": D["room_bytes"][d] / GiB, "kv_capacity_seqs": cap_seqs, "concurrency": conc,
        "prefill_s": P["prefill_s"][p], "prefill_load": load, "transfer_s": xfer,
        "ttft_s": ttft, "tpot_s": tpot, "output_tokens_per_s": out_tok_s,
        "tokens_per_s_per_card": out_tok_s / cards_used,
    }
    return cols, slack


def _verdicts(slack: dict, order: tuple[str, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Feasible (every slack >= 0) and the binding constraint: the first that fails in ``order``, else the
    one with the least slack."""
    if not n:
        return np.zeros(0, dtype=bool), np.array([], dtype=object)
    slack_m = np.vstack([np.nan_to_num(np.asarray(slack[k], dtype=float), nan=-np.inf) for k in order])
    feasible = np.all(slack_m >= 0, axis=0)
    failing = slack_m < 0
    first_fail = np.where(failing.any(axis=0), np.argmax(failing, axis=0), np.argmin(slack_m, axis=0))
    return feasible, np.asarray(order, dtype=object)[first_fail]


def _ok(slack: dict, order: tuple[str, ...], n: int) -> np.ndarray:
    """Feasible: every slack >= 0 (NaN fails), as :func:`_verdicts` without the binding constraint."""
    out = np.ones(n, dtype=bool)
    for k in order:
        out &= np.asarray(slack[k], dtype=float) >= 0
    return out


def _binding_at(slack: dict, order: tuple[str, ...], i: int) -> str:
    """The binding constraint of option ``i`` (:func:`_verdicts` for one option)."""
    v = {k: float(np.asarray(slack[k], dtype=float)[i]) for k in order}
    v = {k: (-math.inf if math.isnan(x) else x) for k, x in v.items()}
    return next((k for k in order if v[k] < 0), min(order, key=lambda k: v[k]))


def evaluate(setup: Setup, work: Workload, p_sides=None, d_sides=None, *, candidates=None) -> pd.DataFrame:
    """The planner's candidates (module docstring), evaluated with numpy arrays; one row per candidate.

    ``candidates``: index arrays ``p, n_p, d, n_d`` (positions in ``p_sides`` and ``d_sides``) of other
    splits to evaluate instead, e.g. the whole split space."""
    if p_sides is None:
        p_sides, d_sides = sides(setup, work)
    dec = _decode_table(setup, work, d_sides)
    xfer_p = _transfer(setup, work, p_sides)
    c = candidates if candidates is not None else _candidates(setup, work, p_sides, d_sides, dec, xfer_p)
    cols, slack = _split_arrays(setup, work, p_sides, d_sides, dec, xfer_p, c)
    feasible, binding = _verdicts(slack, CONSTRAINTS, len(c["p"]))
    df = pd.DataFrame({**cols, "feasible": feasible, "binding": binding})
    for k in CONSTRAINTS:
        df[f"slack: {k}"] = slack[k]
    return df


# ------------------------------------------------------------------------------------------ aggregated
@dataclass(frozen=True)
class _Agg:
    """The co-located side at every ``n`` of every layout, concatenated: layout ``j``'s ``n`` is at
    ``offset[j] + n - 1``. ``tdec`` the decode step alone, ``tau`` the mean step with its prompt chunks
    (the TPOT), ``share`` the part of each step spent on prompts."""

    offset: np.ndarray
    conc: np.ndarray
    tdec: np.ndarray
    tau: np.ndarray
    rate: np.ndarray
    share: np.ndarray
    saturated: np.ndarray     # given a rate: the prompts alone would fill every step (u >= 1)

    def at(self, a, n) -> np.ndarray:
        return self.offset[a] + np.asarray(n, dtype=np.int64) - 1


def _agg_table(setup: Setup, work: Workload, a_sides: list[Side]) -> _Agg:
    """Sequences in flight, decode step, mean step, request rate and prefill share at each ``n = 1 ..
    cards // size`` of each co-located layout (module docstring)."""
    counts = [setup.cards // a.size for a in a_sides]
    offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if counts else np.zeros(0, np.int64)
    L = float(work.output_tokens)
    parts = {k: [np.zeros(0)] for k in ("conc", "tdec", "tau", "sat")}
    for side, k in zip(a_sides, counts):
        n = np.arange(1, k + 1, dtype=float)
        ranks = n * side.dp
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if work.concurrency is not None:
                c = np.full(k, float(work.concurrency))
                tdec = _tpot_at(side, c / n)
                tau = tdec + c / ranks / L * side.prefill_s
                ok = np.ones(k, dtype=bool)
            else:
                u = work.rate_per_s * side.prefill_s / ranks
                ok = u < 1
                keep = np.where(ok, 1 - u, 1.0)
                c = work.rate_per_s * L * _tpot_at(side, np.ones(k)) / keep
                for _ in range(60):
                    c = work.rate_per_s * L * _tpot_at(side, np.maximum(c / n, 1.0)) / keep
                tdec = _tpot_at(side, np.maximum(c / n, 1.0))
                tau = np.where(ok, tdec / keep, np.inf)
                c = np.where(ok, c, np.inf)
        parts["conc"].append(c)
        parts["tdec"].append(tdec)
        parts["tau"].append(tau)
        parts["sat"].append(~ok)
    conc, tdec, tau, sat = (np.concatenate(parts[k]) for k in ("conc", "tdec", "tau", "sat"))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(np.isfinite(tau) & np.isfinite(conc), conc / tau, 0.0)
    if work.concurrency is not None:
        rate = out / L
    else:
        rate = np.full(out.size, work.rate_per_s)
    ranks = np.concatenate([np.arange(1, k + 1, dtype=float) * a.dp for a, k in zip(a_sides, counts)]) \
        if counts else np.zeros(0)
    pf = np.concatenate([np.full(k, a.prefill_s) for a, k in zip(a_sides, counts)]) if counts else np.zeros(0)
    return _Agg(offset, conc, tdec, tau, rate, rate * pf / np.maximum(ranks, 1), sat.astype(bool))


def _agg_candidates(setup: Setup, a_sides: list[Side]) -> dict[str, np.ndarray]:
    """Index arrays of the co-located options: each layout at every ``n`` that fits the cluster (the ``n``
    that fills it, with ``use_all_cards``)."""
    ai, ni = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for j, a in enumerate(a_sides):
        n = np.arange(1, setup.cards // a.size + 1, dtype=np.int64)
        if setup.use_all_cards:
            n = n[n * a.size == setup.cards]
        ai.append(np.full(n.size, j, dtype=np.int64))
        ni.append(n)
    return {"a": np.concatenate(ai), "n": np.concatenate(ni)}


def _agg_arrays(setup: Setup, work: Workload, a_sides: list[Side], tab: _Agg, c: dict) -> tuple[dict, dict]:
    """The columns of :func:`evaluate_aggregated` as arrays, and the slack of each constraint."""
    m = len(c["a"])
    A = {k: np.array([getattr(s, k) for s in a_sides] or [1.0], dtype=float) for k in
         ("size", "tp", "weights_bytes", "room_bytes", "prefill_s", "seqs_per_rank")}
    a, n = np.asarray(c["a"], dtype=np.int64), np.asarray(c["n"], dtype=float)
    at = tab.at(a, c["n"]) if m else np.zeros(0, dtype=np.int64)
    conc, tdec, tau, share, saturated = tab.conc[at], tab.tdec[at], tab.tau[at], tab.share[at], tab.saturated[at]
    size, tpf = A["size"][a], A["prefill_s"][a]
    ranks = n * (size // A["tp"][a])
    L_in, L = float(work.prompt_tokens), float(work.output_tokens)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cbar = np.where(saturated, np.inf, conc / ranks * L_in / L)
        if work.tpot_s:
            room = work.tpot_s - tdec
            b = np.where(tpf > 0, L_in * room / tpf, np.where(room >= 0, np.inf, 0.0))
            b = np.clip(np.nan_to_num(b, nan=0.0), 0.0, L_in)
        else:
            b = np.full(m, L_in)
        rho = np.where(b > 0, cbar / b, np.inf)
        service = np.where(b > 0, L_in * tdec / b + tpf, np.inf)
        ttft = np.where(rho < 1, service / (1 - rho), np.inf)
        out = np.where(np.isfinite(tau) & np.isfinite(conc), conc / tau, 0.0)
        cards = n * size
        cap = ranks * A["seqs_per_rank"][a]
        slack = {
            "memory": A["room_bytes"][a] / _usable(setup),
            # a rate the prefill alone saturates has no steady sequences: it fails on TPOT and load instead
            "KV capacity": np.where(saturated, 1.0, 1 - conc / np.maximum(cap, 1e-9)),
            "TPOT": 1 - tau / work.tpot_s if work.tpot_s else np.full(m, np.inf),
            "prefill load": 1 - rho / setup.max_load,
            "TTFT": 1 - ttft / work.ttft_s if work.ttft_s else np.full(m, np.inf),
        }
    cols = {
        "instances": np.asarray(c["n"], dtype=np.int64), "size": size.astype(np.int64),
        "tp": A["tp"][a].astype(np.int64), "cards": cards.astype(np.int64),
        "weights_gib": A["weights_bytes"][a] / GiB, "kv_room_gib": A["room_bytes"][a] / GiB,
        "kv_capacity_seqs": cap, "concurrency": conc, "decode_s": tdec, "prefill_s": tpf,
        "prefill_share": share, "chunk_tokens": b, "mean_chunk_tokens": cbar, "prefill_load": rho,
        "ttft_s": ttft, "tpot_s": tau, "output_tokens_per_s": out, "tokens_per_s_per_card": out / cards,
    }
    return cols, slack


def evaluate_aggregated(setup: Setup, work: Workload, a_sides=None, *, candidates=None) -> pd.DataFrame:
    """The co-located options (module docstring), evaluated with numpy arrays; one row per layout and
    number of instances. ``candidates``: index arrays ``a, n`` (positions in ``a_sides``, instances)."""
    if a_sides is None:
        a_sides = layouts(replace(setup, aggregated=True), work).a
    tab = _agg_table(setup, work, a_sides)
    c = candidates if candidates is not None else _agg_candidates(setup, a_sides)
    cols, slack = _agg_arrays(setup, work, a_sides, tab, c)
    feasible, binding = _verdicts(slack, AGG_CONSTRAINTS, len(c["a"]))
    df = pd.DataFrame({**cols, "feasible": feasible, "binding": binding})
    for k in AGG_CONSTRAINTS:
        df[f"slack: {k}"] = slack[k]
    return df


def evaluate_instances(setup: Setup, work: Workload, *, instances: int, size: int, tp: int = 1,
                       a_sides=None) -> pd.Series:
    """One co-located option, evaluated as :func:`evaluate_aggregated` does (a row of the same columns)."""
    if a_sides is None:
        a_sides = layouts(replace(setup, aggregated=True), work).a
    vals = {name: integer(name, v, low=1) for name, v in (("instances", instances), ("size", size), ("tp", tp))}
    where = [i for i, s in enumerate(a_sides) if (s.size, s.tp) == (vals["size"], vals["tp"])]
    if not where:
        raise LayoutError(f"no co-located layout of {vals['size']} cards with TP {vals['tp']} among those planned "
                          f"({', '.join(f'{s.size}/TP {s.tp}' for s in a_sides) or 'none'})")
    if vals["instances"] * vals["size"] > setup.cards:
        raise LayoutError(f"{vals['instances']:,} instances of {vals['size']} cards need "
                          f"{vals['instances'] * vals['size']:,} cards, the cluster has {setup.cards:,}")
    c = {"a": np.array([where[0]]), "n": np.array([vals["instances"]])}
    return evaluate_aggregated(setup, work, a_sides, candidates=c).iloc[0]


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

    Disaggregated: ``candidates``: the evaluated splits, one row per (P layout, D layout, ``n_d``) with the
    smallest P side that meets load and TTFT (module docstring); ``ranked``: the feasible ones, best first;
    ``reason``: "" when something fits, else one line starting "nothing fits:" with the closest split and
    its shortfall; ``splits``: how many (P layout, ``n_p``, D layout, ``n_d``) splits the cluster admits in
    all (:func:`count_splits`); ``evaluated``: how many were evaluated (the rows of ``candidates``).

    Aggregated (co-located): ``aggregated``: every layout at every number of instances
    (:func:`evaluate_aggregated`); ``aggregated_ranked``: the feasible ones, best first;
    ``aggregated_reason``: "" or one "nothing fits:" line with the closest layout and its shortfall.

    ``workload``: the workload as evaluated, its targets those of ``targets`` (value and source of each,
    :func:`resolve_targets`); ``winner``: "disaggregated", "aggregated" or "neither"; ``why``: one sentence
    saying why; ``frontier``: :func:`frontier` (``None`` when :attr:`Setup.frontier_points` is 0);
    ``seconds``: wall time of the whole plan, frontier included."""

    setup: Setup
    workload: Workload
    candidates: pd.DataFrame
    ranked: pd.DataFrame
    reason: str             # "" when something fits
    seconds: float          # wall time of the evaluation
    splits: int = 0         # size of the whole split space
    evaluated: int = 0      # splits evaluated (len(candidates))
    targets: Targets | None = None
    aggregated: pd.DataFrame | None = None
    aggregated_ranked: pd.DataFrame | None = None
    aggregated_reason: str = ""
    winner: str = ""
    why: str = ""
    frontier: pd.DataFrame | None = None

    @property
    def best(self):
        """The best disaggregated split (a row of ``candidates``), ``None`` when none meets the targets."""
        return None if self.ranked.empty else self.ranked.iloc[0]

    @property
    def best_aggregated(self):
        """The best co-located option (a row of ``aggregated``), ``None`` when none meets the targets."""
        r = self.aggregated_ranked
        return None if r is None or r.empty else r.iloc[0]

    @property
    def aggregated_evaluated(self) -> int:
        return 0 if self.aggregated is None else len(self.aggregated)

    def frontier_at_target(self) -> dict:
        """Per mode, the most output tokens/s per card on the frontier that meets every target (TPOT
        included), with its concurrency and option: ``{mode: {"tokens_per_s_per_card", "concurrency",
        "option", "tpot_s", "ttft_s"}}``; ``None`` for a mode with no such point (or no frontier)."""
        return frontier_at_target(self.frontier)

    def options(self) -> pd.DataFrame:
        """The best disaggregated split and the best co-located layout side by side, in the units a reader
        reads and rounded as shown (TTFT to 10 ms, TPOT to 0.1 ms, tokens/s to whole tokens; "unbounded"
        for a saturated prefill): the option, cards, TTFT (s), TPOT (ms), output tokens/s per card and in
        all, what limits it (the first constraint it fails, or the one closest to its limit) and whether it
        meets every target. A mode where nothing fits shows its closest option (its row says what it fails
        on)."""
        from pdcalc.precision import round_decimals

        def shown(x: float, decimals: int):
            x = float(x)
            if not math.isfinite(x):
                return "unbounded"
            return int(round(x)) if decimals == 0 else round_decimals(x, decimals)

        rows = []
        for mode, row in self._options_rows().items():
            if row is None:
                continue
            rows.append({"mode": mode, "option": option_label(row, mode), "cards": int(row["cards"]),
                         "TTFT (s)": shown(row["ttft_s"], 2), "TPOT (ms)": shown(1e3 * float(row["tpot_s"]), 1),
                         "output tokens/s per card": shown(row["tokens_per_s_per_card"], 0),
                         "output tokens/s": shown(row["output_tokens_per_s"], 0), "limited by": str(row["binding"]),
                         "meets every target": bool(row["feasible"])})
        return pd.DataFrame(rows, columns=["mode", "option", "cards", "TTFT (s)", "TPOT (ms)",
                                           "output tokens/s per card", "output tokens/s", "limited by",
                                           "meets every target"])

    def _options_rows(self) -> dict:
        """Per mode, the best option, or when none meets the targets the closest one (``None``: nothing
        evaluated)."""
        out = {"disaggregated": self.best, "aggregated": self.best_aggregated}
        if out["disaggregated"] is None and not self.candidates.empty:
            out["disaggregated"] = self.candidates.iloc[_closest(self.candidates, CONSTRAINTS, _STAGE)]
        if out["aggregated"] is None and self.aggregated is not None and not self.aggregated.empty:
            out["aggregated"] = self.aggregated.iloc[_closest(self.aggregated, AGG_CONSTRAINTS, _AGG_STAGE)]
        return out

    def card_memory(self) -> dict:
        """Memory of one card of each kind of the two best options (:class:`pdcalc.memory.MemoryPlan`):
        ``"P card"`` and ``"D card"`` of the best split, ``"co-located card"`` of the best aggregated
        layout; a mode where nothing fits is left out."""
        out = {}
        if self.best is not None:
            out["P card"], out["D card"] = card_plans(self.setup, self.workload, self.best)
        if self.best_aggregated is not None:
            out["co-located card"] = aggregated_card_plan(self.setup, self.workload, self.best_aggregated)
        return out

    def answer(self) -> dict:
        """The plan in "what to run" terms, JSON-ready (NaN and infinities as they are; the command line
        writes them as null): ``targets`` (:meth:`Targets.as_dict`), ``disaggregated`` and ``aggregated``
        (each: ``result`` "fits" or the one-line reason, the option, cards, TTFT, TPOT, output tokens/s per
        card and in all, ``binding``, ``meets_targets``, and ``memory_gib`` per card: weights, KV cache,
        activations and framework, headroom, usable; the co-located one also its chunk and the share of each
        step its prompts take; when nothing fits, the closest option), ``winner``, ``why``, ``frontier``
        (records of :func:`frontier`, ``[]`` without one)."""
        rows = self._options_rows()
        mem = self.card_memory()
        out = {"targets": self.targets.as_dict() if self.targets else None}
        for mode in MODES:
            row = rows[mode]
            reason = self.reason if mode == "disaggregated" else self.aggregated_reason
            if mode == "aggregated" and not self.setup.aggregated:
                out[mode] = {"result": "not evaluated"}
                continue
            o = {"result": reason or "fits"}
            if row is not None:
                o.update(option=option_label(row, mode), cards=int(row["cards"]), ttft_s=float(row["ttft_s"]),
                         tpot_s=float(row["tpot_s"]), tokens_per_s_per_card=float(row["tokens_per_s_per_card"]),
                         output_tokens_per_s=float(row["output_tokens_per_s"]), concurrency=float(row["concurrency"]),
                         binding=str(row["binding"]), meets_targets=bool(row["feasible"]))
                if mode == "disaggregated":
                    o.update({k: int(row[k]) for k in ("p_instances", "p_size", "p_tp", "d_instances", "d_size",
                                                       "d_tp")})
                    o.update(prefill_load=float(row["prefill_load"]), transfer_s=float(row["transfer_s"]))
                    cards = ("P card", "D card")
                else:
                    o.update({k: int(row[k]) for k in ("instances", "size", "tp")})
                    o.update(chunk_tokens=float(row["chunk_tokens"]), prefill_share=float(row["prefill_share"]),
                             prefill_load=float(row["prefill_load"]), decode_s=float(row["decode_s"]))
                    cards = ("co-located card",)
                o["memory_gib"] = {c: _gib_parts(mem[c]) for c in cards if c in mem}
            out[mode] = o
        out["winner"], out["why"] = self.winner, self.why
        out["frontier_at_target"] = self.frontier_at_target()
        out["frontier"] = [] if self.frontier is None else self.frontier.to_dict("records")
        return out

    def memory(self) -> pd.DataFrame:
        """:meth:`card_memory` as a table in GiB to two decimals: weights, KV cache in use, activations and
        framework, headroom, and what ``utilization`` lets the engine fill; one column per card."""
        cols = {f"{name} (GiB)": _gib_parts(mp, _TABLE_NAMES) for name, mp in self.card_memory().items()}
        df = pd.DataFrame(cols).round(2)           # GiB to two decimals, as the engines print them
        df.index.name = "per card"
        return df.reset_index() if len(df.columns) else pd.DataFrame()


def _no_candidates(setup: Setup, p_sides: list[Side], d_sides: list[Side] | None = None) -> str:
    """Why there is no split at all (one line)."""
    tried = _tried_sizes(setup)
    n_exp = get_inventory(setup.model).n_routed_experts
    sizes = _sizes(setup, n_exp)
    if not sizes:
        return (f"nothing fits: no instance size tried ({', '.join(map(str, tried))}) can be used: an instance "
                f"has 1..{min(setup.cards - 1, n_exp):,} cards (at most one per routed expert of the "
                f"{n_exp}, and at least one card left to the other side of the {setup.cards:,})")
    d_sides = p_sides if d_sides is None else d_sides
    for role, found, tps in (("P", p_sides, setup.p_tps), ("D", d_sides, setup.d_tps)):
        if found:
            continue
        why = []
        for t in tps:
            problem = _tp_problem(setup, t)
            why.append(f"TP {t}: {problem}" if problem else
                       f"TP {t} divides none of the instance sizes {', '.join(map(str, sizes))}")
        side = "" if setup.p_tps == setup.d_tps else f" on the {role} side"
        return f"nothing fits: no TP degree tried{side} suits the model and an instance size; " + "; ".join(why)
    need = min(s.size for s in p_sides) + min(s.size for s in d_sides)
    if setup.use_all_cards:
        return (f"nothing fits: no split of instance sizes {', '.join(map(str, sizes))} uses exactly "
                f"{setup.cards:,} cards")
    return f"nothing fits: one P and one D instance need at least {need:,} cards, the cluster has {setup.cards:,}"


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:,.1f} ms" if math.isfinite(seconds) else "unbounded (prefill saturated)"


def _closest(df: pd.DataFrame, order: tuple[str, ...], stages: dict) -> int:
    """Position of the option furthest along the constraints (``stages``: constraints of one stage count
    together), then with the least relative shortfall there, then on the fewest cards. Every row is taken
    to fail somewhere; a feasible row, if any, is furthest of all."""
    slack = df[[f"slack: {k}" for k in order]].to_numpy(dtype=float)
    slack = np.where(np.isnan(slack), -np.inf, slack)
    stage_of = np.array([stages[k] for k in order])
    fails = (slack < 0).any(axis=1)
    first = np.argmax(slack < 0, axis=1)
    stage = np.where(fails, stage_of[first], len(order))
    in_stage = stage_of[None, :] == stage[:, None]
    short = np.where(in_stage, slack, np.inf).min(axis=1)      # the worst slack of the failing stage
    short = np.where(fails, short, np.inf)
    return int(np.lexsort((df["cards"].to_numpy(), -short, -stage))[0])


def _failing(row, order: tuple[str, ...], stages: dict) -> list[str]:
    """The constraints of the first failing stage that ``row`` fails."""
    slack = {k: float(row[f"slack: {k}"]) for k in order}
    slack = {k: (-math.inf if math.isnan(v) else v) for k, v in slack.items()}
    first = next((k for k in order if slack[k] < 0), None)
    if first is None:
        return []
    return [k for k in order if stages[k] == stages[first] and slack[k] < 0]


def _kv_short(setup: Setup, work: Workload, row, *, room: float, card: str, one: str, holder: str) -> str:
    """How the KV cache falls short, for :func:`_nothing_fits` and :func:`_agg_nothing_fits`: a card that holds
    not even ``one`` sequence of the workload's context (``room`` GiB), or the sequences ``holder`` (subject
    and verb) keeps."""
    cap, conc = float(row["kv_capacity_seqs"]), float(row["concurrency"])
    if cap == 0 or not math.isfinite(conc):
        ctx = work.prompt_tokens + work.output_tokens
        per_seq = float(seq_kv_bytes(setup, ctx))
        return (f"{card} has {room:,.2f} GiB for KV cache, less than {one} of {ctx:,} tokens "
                f"({per_seq / GiB:,.2f} GiB)")
    need = math.ceil(conc - 1e-9)
    return f"{holder} {cap:,.0f} of the {need:,} sequences in flight, {need - cap:,.0f} short"


def _nothing_fits(df: pd.DataFrame, setup: Setup, work: Workload) -> str:
    """The closest split and its shortfall (one line): the split furthest along the constraints (P and D
    memory taken together), then the least relative shortfall there, then the fewest cards."""
    best = _closest(df, CONSTRAINTS, _STAGE)
    row = df.iloc[best]
    failing = _failing(row, CONSTRAINTS, _STAGE)
    usable = _usable(setup)
    parts = []
    for k in failing:
        if k in ("P memory", "D memory"):
            side = k[0]
            lead = f"a {side} card is short by" if not parts else f"a {side} card by"
            parts.append(f"{lead} {-row[f'slack: {k}'] * usable / GiB:,.2f} GiB")
        elif k == "KV capacity":
            parts.append(_kv_short(setup, work, row, room=row["d_kv_room_gib"], card="a D card",
                                   one="one sequence", holder="the D side holds"))
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


def plan(setup: Setup, work: Workload, *, vectorized: bool = True, targets: Targets | None = None) -> Plan:
    """Evaluate the disaggregated splits and the co-located layouts under the same targets, rank the
    feasible ones, say which mode wins and why, and trace the frontier (module docstring).

    ``targets``: the latency targets to apply with their sources; ``None``: the workload's, and where it
    has none the published service level (:func:`resolve_targets`). A deployment that does not fit is a
    result (:attr:`Plan.reason`, :attr:`Plan.aggregated_reason`, :attr:`Plan.winner` "neither"); a card
    without the FLOP/s of the compute dtype raises :class:`pdcalc.errors.LayoutError` before anything is
    evaluated."""
    t0 = time.perf_counter()
    tg = resolve_targets(work, targets)
    work = replace(work, ttft_s=tg.ttft_s, tpot_s=tg.tpot_s)
    lay = layouts(setup, work)
    p_sides, d_sides = lay.p, lay.d
    df = (evaluate if vectorized else evaluate_loop)(setup, work, p_sides, d_sides)
    ok = df[df["feasible"]] if not df.empty else df
    ranked = ok.sort_values(["tokens_per_s_per_card", "ttft_s"], ascending=[False, True],
                            kind="stable").reset_index(drop=True)
    if len(ranked):
        reason = ""
    elif df.empty:
        reason = _no_candidates(setup, p_sides, d_sides)
    else:
        reason = _nothing_fits(df, setup, work)
    agg = agg_ranked = None
    agg_reason = ""
    if setup.aggregated:
        agg = evaluate_aggregated(setup, work, lay.a)
        agg_ranked = agg[agg["feasible"]].sort_values(["tokens_per_s_per_card", "ttft_s"], ascending=[False, True],
                                                      kind="stable").reset_index(drop=True)
        if agg_ranked.empty:
            agg_reason = _no_agg_candidates(setup, lay.a) if agg.empty else _agg_nothing_fits(agg, setup, work)
    result = Plan(setup, work, df, ranked, reason, 0.0, splits=count_splits(setup, p_sides, d_sides),
                  evaluated=len(df), targets=tg, aggregated=agg, aggregated_ranked=agg_ranked,
                  aggregated_reason=agg_reason)
    winner, why = _winner(result)
    front = frontier(setup, work, targets=tg, lay=lay) if setup.frontier_points else None
    return replace(result, winner=winner, why=why, frontier=front, seconds=time.perf_counter() - t0)


def _no_agg_candidates(setup: Setup, a_sides: list[Side]) -> str:
    """Why there is no co-located layout at all (one line)."""
    n_exp = get_inventory(setup.model).n_routed_experts
    sizes = _sizes(setup, n_exp, whole=True)
    if not sizes:
        return (f"nothing fits: no co-located instance size tried ({', '.join(map(str, _tried_sizes(setup)))}) can "
                f"spread the {n_exp} routed experts within {setup.cards:,} cards")
    if setup.use_all_cards and a_sides:
        return f"nothing fits: no co-located instance size tried divides the {setup.cards:,} cards"
    why = []
    for t in setup.a_tps:
        problem = _tp_problem(setup, t)
        why.append(f"TP {t}: {problem}" if problem else
                   f"TP {t} divides none of the instance sizes {', '.join(map(str, sizes))}")
    return "nothing fits: no TP degree tried suits the model and a co-located instance size; " + "; ".join(why)


def _agg_nothing_fits(df: pd.DataFrame, setup: Setup, work: Workload) -> str:
    """The closest co-located option and its shortfall (one line), chosen as :func:`_nothing_fits` does."""
    row = df.iloc[_closest(df, AGG_CONSTRAINTS, _AGG_STAGE)]
    failing = _failing(row, AGG_CONSTRAINTS, _AGG_STAGE)
    parts = []
    for k in failing:
        if k == "memory":
            parts.append(f"a card is short by {-row['slack: memory'] * _usable(setup) / GiB:,.2f} GiB")
        elif k == "KV capacity":
            parts.append(_kv_short(setup, work, row, room=row["kv_room_gib"], card="a card",
                                   one="one prompt in prefill and one sequence", holder="the instances hold"))
        elif k == "TPOT":
            parts.append(f"TPOT {_ms(row['tpot_s'])} against a target of {_ms(work.tpot_s)}"
                         + (f", prompt chunks taking {row['prefill_share']:.0%} of every step"
                            if math.isfinite(row["tpot_s"]) and row["prefill_share"] > 0 else ""))
        elif k == "prefill load":
            b = float(row["chunk_tokens"])
            if b >= work.prompt_tokens:
                parts.append(f"prompts arrive at {_pct(row['prefill_load'])} of one prompt per rank and step "
                             f"(max {100 * setup.max_load:.0f}%)")
            elif b > 0:
                parts.append(f"prompts need {_pct(row['prefill_load'])} of the {b:,.0f}-token chunk the TPOT target "
                             f"leaves in a step (max {100 * setup.max_load:.0f}%)")
            else:
                parts.append(f"the decode step alone ({_ms(row['decode_s'])}) leaves no room for prompt chunks "
                             f"within the TPOT target")
        else:
            parts.append(f"TTFT {_ms(row['ttft_s'])} against a target of {_ms(work.ttft_s)}")
    return (f"nothing fits: the closest co-located layout, {aggregated_label(row)} ({int(row['cards']):,} cards), "
            f"fails on {' and '.join(failing)}: {'; '.join(parts)}")


def _pct(x: float) -> str:
    return f"{100 * x:,.0f}%" if math.isfinite(x) else "more than all"


def _winner(p: Plan) -> tuple[str, str]:
    """Which mode wins under the targets, and one sentence saying why."""
    d, a = p.best, p.best_aggregated
    if not p.setup.aggregated:
        return ("disaggregated" if d is not None else "neither",
                ("co-located layouts were not evaluated" + (f"; {p.reason}" if d is None else "")))

    def limit(row, order) -> str:
        k = str(row["binding"])
        return f"{_WHAT.get(k, k)} ({float(row[f'slack: {k}']):.0%} from its limit)"

    def chunks(row) -> str:
        return f"; its prompt chunks take {float(row['prefill_share']):.0%} of every step"

    if d is not None and a is not None:
        dt, at = float(d["tokens_per_s_per_card"]), float(a["tokens_per_s_per_card"])
        if math.isclose(dt, at, rel_tol=1e-9):     # e.g. a rate both serve on as many cards: TTFT, then TPOT decide
            keys = [(float(r["ttft_s"]), float(r["tpot_s"])) for r in (d, a)]
            mode = "disaggregated" if keys[0] <= keys[1] else "aggregated"
            win, lose = (d, a) if mode == "disaggregated" else (a, d)
            on = "TTFT" if keys[0][0] != keys[1][0] else "TPOT"
            col = "ttft_s" if on == "TTFT" else "tpot_s"
            return mode, (f"{mode} wins: {split_label(d)} and {aggregated_label(a)} both serve {dt:,.0f} output tokens/s "
                          f"per card under the same targets, and {option_label(win, mode)} has the shorter {on}, "
                          f"{_ms(float(win[col]))} against {_ms(float(lose[col]))}")
        if dt > at:
            return "disaggregated", (
                f"disaggregated wins: {split_label(d)} serves {dt:,.0f} output tokens/s per card, {dt / at:.2f} "
                f"times the best co-located layout, {aggregated_label(a)} ({at:,.0f}), under the same targets; what "
                f"holds the co-located layout back first is {limit(a, AGG_CONSTRAINTS)}{chunks(a)}")
        return "aggregated", (
            f"aggregated wins: {aggregated_label(a)} serves {at:,.0f} output tokens/s per card, {at / dt:.2f} times "
            f"the best disaggregated split, {split_label(d)} ({dt:,.0f}), under the same targets{chunks(a)}; what "
            f"holds the split back first is {limit(d, CONSTRAINTS)}")
    if d is not None:
        return "disaggregated", (f"disaggregated wins: {split_label(d)} serves {float(d['tokens_per_s_per_card']):,.0f} "
                                 f"output tokens/s per card and no co-located layout meets the targets "
                                 f"({_strip(p.aggregated_reason)})")
    if a is not None:
        return "aggregated", (f"aggregated wins: {aggregated_label(a)} serves {float(a['tokens_per_s_per_card']):,.0f} "
                              f"output tokens/s per card{chunks(a)}, and no disaggregated split meets the targets "
                              f"({_strip(p.reason)})")
    return "neither", (f"neither meets the targets: disaggregated, {_strip(p.reason)}; co-located, "
                       f"{_strip(p.aggregated_reason)}")


def _strip(reason: str) -> str:
    return reason.removeprefix("nothing fits: ")


#: A constraint in words.
_WHAT = {"P memory": "the memory of a P card", "D memory": "the memory of a D card",
         "KV capacity": "the KV cache the cards hold", "prefill load": "the load on prefill",
         "TTFT": "the TTFT target", "TPOT": "the TPOT target", "memory": "the memory of a card"}


# ------------------------------------------------------------------------------------------ frontier
#: Columns of :func:`frontier`.
FRONTIER_COLUMNS = ("concurrency", "mode", "option", "cards", "tokens_per_s_per_card", "output_tokens_per_s",
                    "tpot_s", "ttft_s", "binding", "meets_targets", "pareto", "fastest_option",
                    "fastest_cards", "fastest_tokens_per_s_per_card", "fastest_tpot_s", "fastest_ttft_s")


def frontier_levels(setup: Setup, work: Workload, lay: Layouts, points: int | None = None) -> np.ndarray:
    """The concurrencies of the frontier: ``points`` (default :attr:`Setup.frontier_points`) spaced
    geometrically from 1 sequence to the most the cluster's memory holds (all cards but the smallest P
    instance as D instances, or all as co-located ones, whichever holds more), rounded to whole sequences,
    plus the workload's concurrency when it is within that range."""
    points = setup.frontier_points if points is None else integer("points", points, low=1, high=MAX_FRONTIER_POINTS)
    C = setup.cards
    held = [0]
    if lay.p:
        smallest = min(p.size for p in lay.p)
        held += [((C - smallest) // d.size) * d.dp * d.seqs_per_rank for d in lay.d]
    held += [(C // a.size) * a.dp * a.seqs_per_rank for a in lay.a]
    top = max(held)
    if top < 1 or points < 1:
        return np.array([1.0])
    lv = np.unique(np.geomspace(1, top, max(points, 1)).round())
    if work.concurrency is not None and work.concurrency <= top:
        lv = np.unique(np.append(lv, float(work.concurrency)))
    return lv


def _argbest(tpc: np.ndarray, ttft: np.ndarray, ok: np.ndarray) -> int | None:
    """Index of the most tokens/s per card among ``ok`` (then the shortest TTFT, then the first), as the
    planner ranks."""
    idx = np.flatnonzero(ok)
    if not idx.size:
        return None
    order = np.lexsort((np.nan_to_num(ttft[idx], nan=np.inf), -tpc[idx]))
    return int(idx[order[0]])


#: D entries the frontier's search takes first (each later batch four times the one before).
SEARCH_BATCH = 256


def _best_split(setup: Setup, work: Workload, p_sides: list[Side], d_sides: list[Side], dec: _Decode,
                xfer: np.ndarray, batch: int | None = None) -> dict | None:
    """The candidate (index arrays of one split) that :func:`plan` would rank first under ``work``, or
    ``None`` when none is feasible, found without evaluating every candidate: the D side alone bounds a
    split's output per card (its output over its D cards plus the smallest P instance that fits), so D
    entries are taken in order of that bound, paired with every P layout that fits, and the search stops
    once the best found beats every bound left. Ties are broken as the ranking breaks them (TTFT, then the
    candidates' order). ``batch``: the first batch of D entries (default :data:`SEARCH_BATCH`)."""
    if not p_sides or not d_sides:
        return None
    C = setup.cards
    usable = _usable(setup)
    p_ok = np.flatnonzero(np.array([p.room_bytes / usable >= 0 for p in p_sides]))
    if not p_ok.size:
        return None
    p_size = np.array([p.size for p in p_sides], dtype=np.int64)
    counts = np.array([C // d.size for d in d_sides], dtype=np.int64)
    j = np.repeat(np.arange(len(d_sides)), counts)
    n_d = np.arange(j.size, dtype=np.int64) - dec.offset[j] + 1
    d_size = np.array([d.size for d in d_sides], dtype=np.int64)[j]
    d_room = np.array([d.room_bytes for d in d_sides], dtype=float)[j]
    cap = n_d * np.array([d.dp * d.seqs_per_rank for d in d_sides], dtype=float)[j]
    with np.errstate(divide="ignore", invalid="ignore"):
        ok_d = (d_room >= 0) & (dec.conc <= cap) & (dec.out_tok_s > 0) & (n_d * d_size + p_size[p_ok].min() <= C)
        if work.tpot_s:
            ok_d &= dec.tpot <= work.tpot_s
        bound = dec.out_tok_s / (n_d * d_size + p_size[p_ok].min())
    order = np.flatnonzero(ok_d)
    order = order[np.argsort(-bound[order], kind="stable")]
    best, best_key, pos, chunk = None, None, 0, batch or SEARCH_BATCH
    pps = np.array([p.prompts_per_s for p in p_sides], dtype=float)
    pf = np.array([p.prefill_s for p in p_sides], dtype=float)
    xf = np.asarray(xfer, dtype=float)
    while pos < order.size and (best_key is None or bound[order[pos]] >= -best_key[0]):
        e = order[pos:pos + chunk]
        pos, chunk = pos + chunk, chunk * 4
        pi = np.repeat(p_ok, e.size)
        ei = np.tile(e, p_ok.size)
        left = C - n_d[ei] * d_size[ei]
        n_max = left // p_size[pi]
        keep = (n_max >= 1) & ((left % p_size[pi] == 0) if setup.use_all_cards else True)
        pi, ei, left, n_max = pi[keep], ei[keep], left[keep], n_max[keep]
        if not pi.size:
            continue
        n_p = n_max if setup.use_all_cards else _fewest_p(setup, work, pps[pi], pf[pi], xf[pi], dec.rate[ei], n_max)
        c = {"p": pi, "n_p": n_p.astype(np.int64), "d": j[ei], "n_d": n_d[ei]}
        cols, slack = _split_arrays(setup, work, p_sides, d_sides, dec, xf, c)
        ok = np.flatnonzero(_ok(slack, CONSTRAINTS, pi.size))
        if not ok.size:
            continue
        tpc, ttft = cols["tokens_per_s_per_card"][ok], np.nan_to_num(cols["ttft_s"][ok], nan=np.inf)
        k = ok[np.lexsort((c["n_d"][ok], c["n_p"][ok], c["d"][ok], c["p"][ok], ttft, -tpc))[0]]
        key = (-float(cols["tokens_per_s_per_card"][k]), float(cols["ttft_s"][k]), int(c["p"][k]), int(c["d"][k]),
               int(c["n_p"][k]), int(c["n_d"][k]))
        if best_key is None or key < best_key:
            best_key, best = key, {name: v[k:k + 1] for name, v in c.items()}
    return best


def frontier(setup: Setup, work: Workload, *, targets: Targets | None = None, lay: Layouts | None = None,
             points: int | None = None) -> pd.DataFrame:
    """The throughput-latency frontier of both modes over concurrency (module docstring).

    One row per concurrency level of :func:`frontier_levels` and mode ("disaggregated", "aggregated"):
    ``option`` the best option at that concurrency that meets every target (as :func:`plan` would rank it
    there; a co-located one with the chunk the TPOT target leaves), or where none does, the best that meets
    every constraint but the TPOT target (a co-located one then takes whole prompts as its chunk), so that
    the curve runs past the target; with its ``cards``, ``tokens_per_s_per_card``, ``output_tokens_per_s``,
    ``tpot_s``, ``ttft_s``, ``binding`` (under every target) and ``meets_targets``; ``pareto``: on the
    frontier of its mode (no other level gives more tokens/s per card at a TPOT as short); ``fastest_*``:
    the best option at that concurrency whatever its TPOT (every constraint but the TPOT target), the most
    the mode can give there. Where no option qualifies, the option is "none" and its figures NaN. The step
    tables of ``lay`` (:func:`layouts`) are computed once and reused at every level."""
    tg = resolve_targets(work, targets)
    work = replace(work, ttft_s=tg.ttft_s, tpot_s=tg.tpot_s)
    lay = lay if lay is not None else layouts(setup, work)
    T = work.tpot_s
    xfer = _transfer(setup, work, lay.p) if lay.p else np.zeros(0)
    ca = _agg_candidates(setup, lay.a)
    rows = []
    for S in frontier_levels(setup, work, lay, points):
        w = replace(work, concurrency=int(S), rate_per_s=None)
        w0 = replace(w, tpot_s=None)
        # per mode: (columns of the curve's option, of the best within the targets, whether the curve's
        # option meets every target, its binding constraint under every target), each option a one-row array
        picks = {}
        if lay.p and lay.d:
            dec = _decode_table(setup, w0, lay.d)
            one = []
            for ww in (w0, w):
                c = _best_split(setup, ww, lay.p, lay.d, dec, xfer)
                one.append(None if c is None else _split_arrays(setup, w0, lay.p, lay.d, dec, xfer, c))
            point = one[1] if one[1] is not None else one[0]
            meets = binding = None
            if point is not None:
                cols, slack = point
                slack = {**slack, "TPOT": 1 - cols["tpot_s"] / T if T else slack["TPOT"]}
                meets, binding = bool(_ok(slack, CONSTRAINTS, 1)[0]), _binding_at(slack, CONSTRAINTS, 0)
            picks["disaggregated"] = ((point[0], 0) if point else None, (one[0][0], 0) if one[0] else None,
                                      meets, binding)
        if lay.a:
            tab = _agg_table(setup, w, lay.a)
            cols0, slack0 = _agg_arrays(setup, w0, lay.a, tab, ca)
            cols_t, slack_t = _agg_arrays(setup, w, lay.a, tab, ca)
            ok_t = _ok(slack_t, AGG_CONSTRAINTS, len(ca["a"]))
            i0 = _argbest(cols0["tokens_per_s_per_card"], cols0["ttft_s"], _ok(slack0, AGG_CONSTRAINTS, len(ca["a"])))
            it = _argbest(cols_t["tokens_per_s_per_card"], cols_t["ttft_s"], ok_t)
            if it is not None:
                point, meets, binding = (cols_t, it), True, _binding_at(slack_t, AGG_CONSTRAINTS, it)
            elif i0 is not None:      # past the target: TPOT on the mean step, judged under every target
                point, meets, binding = (cols0, i0), False, _binding_at(slack_t, AGG_CONSTRAINTS, i0)
            else:
                point = meets = binding = None
            picks["aggregated"] = (point, (cols0, i0) if i0 is not None else None, meets, binding)
        for mode in MODES:
            if mode not in picks:
                continue
            curve, fastest, meets, binding = picks[mode]
            row = {"concurrency": int(S), "mode": mode}
            for prefix, pick in (("", curve), ("fastest_", fastest)):
                if pick is None:
                    row.update({f"{prefix}option": "none", f"{prefix}cards": np.nan,
                                f"{prefix}tokens_per_s_per_card": np.nan, f"{prefix}tpot_s": np.nan,
                                f"{prefix}ttft_s": np.nan})
                    continue
                cols, i = pick
                one = {k: v[i] for k, v in cols.items()}
                row.update({f"{prefix}option": option_label(one, mode), f"{prefix}cards": int(one["cards"]),
                            f"{prefix}tokens_per_s_per_card": float(one["tokens_per_s_per_card"]),
                            f"{prefix}tpot_s": float(one["tpot_s"]), f"{prefix}ttft_s": float(one["ttft_s"])})
                if not prefix:
                    row["output_tokens_per_s"] = float(one["output_tokens_per_s"])
            if curve is None:
                row.update(output_tokens_per_s=np.nan, binding="none", meets_targets=False)
            else:
                row.update(binding=binding, meets_targets=meets)
            rows.append(row)
    df = pd.DataFrame(rows, columns=[c for c in FRONTIER_COLUMNS if c != "pareto"])
    df.insert(FRONTIER_COLUMNS.index("pareto"), "pareto", _pareto(df))
    return df


def _pareto(df: pd.DataFrame) -> np.ndarray:
    """Whether each row is on its mode's frontier: no row of the same mode has more tokens/s per card at a
    TPOT as short or shorter."""
    out = np.zeros(len(df), dtype=bool)
    if df.empty:
        return out
    for mode in MODES:
        idx = np.flatnonzero((df["mode"] == mode).to_numpy() & np.isfinite(df["tpot_s"].to_numpy(dtype=float))
                             & np.isfinite(df["tokens_per_s_per_card"].to_numpy(dtype=float)))
        if not idx.size:
            continue
        tpot = df["tpot_s"].to_numpy(dtype=float)[idx]
        tpc = df["tokens_per_s_per_card"].to_numpy(dtype=float)[idx]
        order = np.lexsort((-tpc, tpot))          # shortest TPOT first, the most tokens first among equals
        best = -np.inf
        for j in order:
            if tpc[j] > best:
                out[idx[j]] = True
                best = tpc[j]
    return out


def frontier_at_target(front: pd.DataFrame | None) -> dict:
    """Per mode, the most output tokens/s per card that the frontier ``front`` (:func:`frontier`) reaches
    while meeting every target: ``{mode: {"tokens_per_s_per_card", "concurrency", "option", "cards",
    "tpot_s", "ttft_s"} or None}``."""
    out = {m: None for m in MODES}
    if front is None or front.empty:
        return out
    for mode in MODES:
        f = front[(front["mode"] == mode) & front["meets_targets"].astype(bool)]
        if f.empty:
            continue
        r = f.sort_values(["tokens_per_s_per_card", "concurrency"], ascending=[False, True], kind="stable").iloc[0]
        out[mode] = {"tokens_per_s_per_card": float(r["tokens_per_s_per_card"]),
                     "concurrency": int(r["concurrency"]), "option": str(r["option"]),
                     "cards": int(r["cards"]), "tpot_s": float(r["tpot_s"]), "ttft_s": float(r["ttft_s"])}
    return out


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


def aggregated_label(row) -> str:
    """A co-located option as people write it, ``"4 x 16 co-located"`` (TP added when above 1); ``"none"``
    for ``None``."""
    if row is None:
        return "none"
    tp = f", TP {int(row['tp'])}" if int(row["tp"]) > 1 else ""
    return f"{int(row['instances'])} x {int(row['size'])} co-located{tp}"


def option_label(row, mode: str) -> str:
    """:func:`split_label` or :func:`aggregated_label`, by ``mode``."""
    return aggregated_label(row) if mode == "aggregated" else split_label(row)


def aggregated_card_plan(setup: Setup, work: Workload, row):
    """Memory of one card of a co-located option (a row of :attr:`Plan.aggregated`): weights, the KV cache
    of its rank's sequences of ``prompt + output`` tokens plus the prompt being prefilled, and the larger
    of the P and D overheads, as a :class:`pdcalc.memory.MemoryPlan`."""
    from pdcalc.memory import memory_plan

    c = get_card(setup.card)
    base = c.usable_base_bytes if setup.base == "visible" else c.hbm_bytes
    size, tp, n = int(row["size"]), int(row["tp"]), int(row["instances"])
    per_rank = float(row["concurrency"]) / (n * (size // tp))
    kv = (per_rank * float(seq_kv_bytes(setup, work.prompt_tokens + work.output_tokens))
          + float(seq_kv_bytes(setup, work.prompt_tokens)))
    return memory_plan(f"co-located card ({n} x {size} cards, tp {tp})", usable_bytes=setup.utilization * base,
                       capacity_bytes=base, weights=layout_weights(setup, size, tp), kv_cache=kv,
                       overhead=setup.a_overhead_bytes)


#: Names of a card's memory parts in the JSON (:meth:`Plan.answer`) and in the table (:meth:`Plan.memory`).
_JSON_NAMES = {"weights": "weights", "kv_cache": "kv_cache", "overhead": "activations_and_framework",
               "headroom": "headroom", "usable": "usable"}
_TABLE_NAMES = {"weights": "weights", "kv_cache": "KV cache in use", "overhead": "activations and framework",
                "headroom": "headroom", "usable": "usable (utilization x memory)"}


def _gib_parts(mp, names: dict = _JSON_NAMES) -> dict:
    """A :class:`pdcalc.memory.MemoryPlan` in GiB: weights, KV cache, activations and framework, headroom,
    usable, under ``names``."""
    out = {names.get(k, k): v / GiB for k, v in mp.parts.items()}
    out.update({names["headroom"]: mp.free_bytes / GiB, names["usable"]: mp.usable_bytes / GiB})
    return out
