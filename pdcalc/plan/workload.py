"""What the planner is asked: the cluster and checkpoint (:class:`Setup`), the load
(:class:`Workload`), the latency targets and their sources (:class:`Targets`), and the constraints a split
must meet.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pdcalc.core.checks import InputError, boolean, fraction, integer, number, show, text
from pdcalc.core.errors import LayoutError, PdcalcError
from pdcalc.layout.memory import D_OVERHEAD_BYTES, P_OVERHEAD_BYTES
from pdcalc.perf import step as tput
from pdcalc.reality import measurements

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
STAGES = {"P memory": 0, "D memory": 0, "KV capacity": 1, "prefill load": 2, "TTFT": 3, "TPOT": 4}
AGG_STAGES = {k: i for i, k in enumerate(AGG_CONSTRAINTS)}


def _positive_ints(name: str, value, *, allow_none: bool = False) -> tuple[int, ...] | None:
    """A non-empty sequence of integers >= 1 as a tuple, duplicates removed, order kept."""
    if value is None and allow_none:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray) or len(value) == 0:
        raise InputError(name, f"must be a non-empty list of integers >= 1, got {show(value)}")
    return tuple(dict.fromkeys(integer(f"{name}[{i}]", v, low=1) for i, v in enumerate(value)))


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What the deployment must serve. Invalid values raise :class:`pdcalc.core.checks.InputError`."""

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


#: The planner's step models: the served model (published kernels x served terms), the published kernel
#: costs alone, the roofline (the hardware's bound).
PLAN_COSTS = ("served", "published", "roofline")


class _Served:
    """The served model's side of a :class:`Setup`: its terms, their class and MTP's tokens per step."""

    def _check_served(self, put) -> None:
        put(self, "costs", text("costs", self.step_kwargs.get("costs", self.costs)))
        if self.costs not in PLAN_COSTS:
            raise InputError("costs", f"must be one of {', '.join(PLAN_COSTS)}, got {show(self.costs)}")
        from pdcalc.layout.served import DATASETS, MAX_DRAFT_TOKENS, SERVING_ENGINES

        if self.serving_engine is not None and self.serving_engine not in SERVING_ENGINES:
            raise InputError("serving_engine", f"must be one of {', '.join(SERVING_ENGINES)}, got "
                             f"{show(self.serving_engine)}")
        put(self, "draft_tokens", integer("draft_tokens", self.draft_tokens, low=0, high=MAX_DRAFT_TOKENS))
        if text("dataset", self.dataset) not in DATASETS:
            raise InputError("dataset", f"must be one of {', '.join(DATASETS)}, got {show(self.dataset)}")

    @property
    def engine_served(self) -> str:
        """The serving engine whose terms apply."""
        if self.serving_engine is not None:
            return self.serving_engine
        from pdcalc.hardware.cards import get_card

        return "vllm-ascend" if get_card(self.card).family == "ascend" else "vllm"

    @property
    def served_class(self) -> tuple[str, str, str]:
        """(vendor, engine, model family): the class of the served terms and of the ranges."""
        from pdcalc.hardware.cards import get_card
        from pdcalc.reality.predict import family_of

        return get_card(self.card).family, self.engine_served, family_of(self.model)

    @property
    def terms(self):
        """The served terms the plan's steps take: the user's calibration, else the served corpus's."""
        if self.served_terms is not None:
            return self.served_terms
        from pdcalc.reality.predict import stored_terms

        return stored_terms(self.served_class)

    @property
    def request_s(self) -> float:
        """Seconds a request pays outside the engine's steps, which its TTFT includes: the served terms' (none
        under the published kernel costs or the roofline)."""
        return self.terms.request_s if self.costs == "served" else 0.0

    @property
    def acceptance(self) -> float:
        """Per-draft MTP acceptance: the dataset's published rate."""
        from pdcalc.perf.speculative import dataset_acceptance

        return dataset_acceptance(self.dataset)[0]

    @property
    def emitted(self) -> float:
        """Tokens a sequence advances per decode step (1 + accepted drafts)."""
        from pdcalc.perf.speculative import accepted_tokens

        return 1.0 + accepted_tokens(self.draft_tokens, self.acceptance) if self.draft_tokens else 1.0


@dataclass(frozen=True, kw_only=True)
class Setup(_Served):
    """Model, hardware and engine assumptions of a plan. Invalid values raise
    :class:`pdcalc.core.checks.InputError`; names (model, card, scheme, engine) are resolved when planning."""

    model: str | Path = "deepseek-v4-flash"   # preset or config.json
    quant: str | None = None                  # weights as stored (pdcalc.model.quant); None: quant.default_scheme_on
    weights_model: str | Path | None = None   # inventory that sizes the weights (e.g. an article preset); None: model
    weights_quant: str | None = None          # scheme for weights_model; None: quant
    card: str | Path = "ascend-910b2"         # card preset or hardware TOML
    cards: int = 64                           # cluster size, 2..MAX_CARDS
    mtp: bool = True                          # MTP module loaded (weights)
    utilization: float = 0.9                  # gpu-memory-utilization
    base: str = "visible"                     # memory utilisation applies to: "visible" or "installed"
    engine: str | None = None                 # KV layout (pdcalc.model.kv_layout.ENGINES); None: the card's family's
                                              # engine (pdcalc.model.kv_layout.default_engine: vLLM on NVIDIA,
                                              # vllm-ascend on Ascend)
    kv_cache_dtype: str | None = None         # the engine's KV cache format (kv_cache.kv_bytes); None: its default
    kv_bytes_per_token: float | None = None   # constant KV bytes per token instead of the engine layout
    p_overhead_bytes: float = P_OVERHEAD_BYTES  # activations + framework per P card (the V4 article's)
    d_overhead_bytes: float = D_OVERHEAD_BYTES  # activations + framework per D card (the V4 article's)
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
    costs: str = "served"                     # step model: served (default), published or roofline (the bound);
                                              # step_kwargs["costs"] overrides it
    serving_engine: str | None = None         # the engine whose served terms apply (pdcalc.layout.served
                                              # SERVING_ENGINES); None: vllm-ascend on Ascend, vllm elsewhere
    served_terms: object = None               # pdcalc.perf.served.ServedTerms of a user's calibration; None: the
                                              # served corpus's for the card's vendor, the engine and the model
    draft_tokens: int = 0                     # MTP draft tokens per decode step (0: no speculative decoding)
    dataset: str = "random"                   # what the prompts are: MTP acceptance is the dataset's published one
    measured_weights: bool = False            # size weights from a logged figure where one matches the layout
    aggregated: bool = True                   # also evaluate co-located (aggregated) layouts
    frontier_points: int = 16                 # concurrency levels of the frontier; 0: no frontier

    def __post_init__(self):
        put = object.__setattr__
        if self.quant is None:
            from pdcalc.model.quant import default_scheme_on

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
            from pdcalc.model.kv_layout import default_engine

            put(self, "engine", default_engine(self.card))
        put(self, "frontier_points", integer("frontier_points", self.frontier_points, low=0,
                                             high=MAX_FRONTIER_POINTS))
        put(self, "sizes", _positive_ints("sizes", self.sizes, allow_none=True))
        put(self, "decode_grid", integer("decode_grid", self.decode_grid, low=2, high=MAX_DECODE_GRID))
        if not isinstance(self.step_kwargs, dict):
            raise InputError("step_kwargs", f"must be a dict of keyword arguments, got {show(self.step_kwargs)}")
        self._check_served(put)

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
        return "none" if v is None else latency_text(v)

    def short_source(self, which: str) -> str:
        """A target's source in a few words: "given", or the name of the service level it comes from."""
        src = {"TTFT": self.ttft_source, "TPOT": self.tpot_source}[which]
        m = re.search(r"\(([^()]*)\)", src)
        return src if src == "given" or not m else m.group(1)

    def as_dict(self) -> dict:
        """``{"TPOT": {"seconds", "stated", "source"}, "TTFT": {...}}``."""
        return {k: {"seconds": v, "stated": self.stated(k), "source": src}
                for k, v, src in (("TPOT", self.tpot_s, self.tpot_source), ("TTFT", self.ttft_s, self.ttft_source))}


def default_targets(level: str | None = None) -> Targets:
    """The published service level applied where a workload gives no target (:mod:`pdcalc.reality.service_levels`,
    by default MLPerf Inference's DeepSeek-R1 Server scenario: TTFT and TPOT limits at the 99th percentile of its
    requests). The planner holds its mean TTFT and TPOT to them: a p99 limit held by the mean, which flatters a
    layout whose latencies spread."""
    from pdcalc.reality import service_levels

    lv = service_levels.get(level or service_levels.DEFAULT_LEVEL)
    note = "; the planner holds its mean to this 99th-percentile limit"

    def src(which: str) -> str:
        return f"{lv.stated(which)}, {lv.source}{note if lv.percentile > 50 else ''}"

    return Targets(ttft_s=lv.ttft_s, tpot_s=lv.tpot_s, ttft_source=src("TTFT"), tpot_source=src("TPOT"))


def resolve_targets(work: "Workload", targets: Targets | None = None) -> Targets:
    """The targets a plan applies: ``targets`` as given, else the workload's where it has one (source
    "given") and the published service level of :func:`default_targets` where it has none
    (its source)."""
    if targets is not None:
        if not isinstance(targets, Targets):
            raise InputError("targets", f"must be a pdcalc.plan.workload.Targets or None, got {show(targets)}")
        return targets
    d = default_targets()
    return Targets(ttft_s=work.ttft_s if work.ttft_s is not None else d.ttft_s,
                   tpot_s=work.tpot_s if work.tpot_s is not None else d.tpot_s,
                   ttft_source="given" if work.ttft_s is not None else d.ttft_source,
                   tpot_source="given" if work.tpot_s is not None else d.tpot_source)


def latency_text(seconds: float) -> str:
    """A latency in ms: one decimal, three significant figures below 1 ms (a target of 1 us reads 0.001 ms)."""
    if not math.isfinite(seconds):
        return "unbounded (prefill saturated)"
    ms = 1e3 * seconds
    return f"{ms:,.1f} ms" if ms >= 1 else f"{ms:.3g} ms"
