"""Per-card weights and memory budgets under EP and TP.

Per card, a tensor sharded by EP contributes the experts the card holds, one sharded by TP its
``1/t`` slice, and a replicated one all of it:

.. math:: W_\\text{card} = \\sum_\\text{repl} W + \\sum_\\text{tp} \\frac{W}{t} + \\frac{n_\\text{card}}{E} \\sum_\\text{ep} W

The usable memory is the engine's utilisation fraction of what the card exposes (vLLM and
vllm-ascend: ``gpu_memory_utilization`` x the device's total memory as the runtime reports it).
What is left after weights, activations and framework overhead is the KV cache budget; a negative
budget is a result ("does not fit, short by ..."), not an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdcalc.core.errors import LayoutError
from pdcalc.core.units import GiB, dtype_bytes
from pdcalc.hardware.cards import get_card
from pdcalc.layout.parallel import place_experts
from pdcalc.model.inventory import CATEGORIES, get_inventory
from pdcalc.model.quant import get_scheme

# Activations and framework per card when nothing else is known: the V4 article's P card (§6.2: 2.0 GB
# activations + 1.5 GB framework) and D card (§6.3: 2.0 GB + 2.0 GB), bytes; the planner's defaults and
# `pdcalc memory --overhead-gb` (tests/test_cli.py holds them to the article's printed figures).
P_OVERHEAD_BYTES = 3.5e9
D_OVERHEAD_BYTES = 4.0e9
#: The activations in those figures: 2.0 GB on the P card (V4 article §6.2) and on the D card (§6.3), bytes.
ACTIVATION_BYTES = 2.0e9
#: The published deployment whose P step the article's P card is sized for (its KV "4096 × 44 KB", §6.2): the
#: vllm-ascend tutorial's P ``--max-num-batched-tokens`` (deployments.toml).
ACTIVATION_DEPLOYMENT = "v4-flash-910b-pd"


def activation_tokens() -> int:
    """Tokens per step of the P card the article's :data:`ACTIVATION_BYTES` belong to (the tutorial's P
    ``--max-num-batched-tokens``, read from deployments.toml)."""
    from pdcalc.layout.deployment import get_deployment

    return int(get_deployment(ACTIVATION_DEPLOYMENT)["prefill_max_num_batched_tokens"])


def activation_bytes(tokens_per_step: float) -> float:
    """Activation memory of a card whose engine steps up to ``tokens_per_step`` tokens
    (``--max-num-batched-tokens``): the article's figure up to the step it sizes, in proportion to the tokens
    above it (the engine sizes its activations by profiling one step of that many tokens).

    .. math:: A(T) = A_0 \\max(1, T / T_0)

    with :math:`A_0` = :data:`ACTIVATION_BYTES` and :math:`T_0` = :func:`activation_tokens`.
    Source: V4 article §6.2 and §6.3 (2.0 GB on a P card stepping 4,096 tokens and on a D card stepping 60)."""
    return ACTIVATION_BYTES * max(1.0, float(tokens_per_step) / activation_tokens())


def step_tokens(activation_budget_bytes: float) -> int:
    """The largest ``--max-num-batched-tokens`` whose activations (:func:`activation_bytes`) fit
    ``activation_budget_bytes``; :func:`activation_tokens` when the budget is the article's figure or less."""
    return int(activation_tokens() * max(1.0, float(activation_budget_bytes) / ACTIVATION_BYTES) + 1e-9)


@dataclass(frozen=True)
class CardWeights:
    """Weight bytes on the fullest card of an EP x TP layout."""

    model: str
    scheme: str
    ep: int | None                  # None: no expert parallelism, experts split over TP
    tp: int
    mtp: bool
    experts_per_card: int           # routed experts per layer on the fullest card (copies included)
    by_category: dict = field(repr=False)  # bytes per category on that card
    total_bytes: float = 0.0
    class_i_bytes: float = 0.0      # EP-split routed experts
    class_ii_bytes: float = 0.0     # everything replicated or TP-split


def tensor_card_bytes(t, scheme, *, experts_per_card: int, tp: int, experts_tp_split: bool = False) -> float:
    """Bytes of tensor ``t`` (all its instances) on one card: whole if replicated, ``1/tp`` if TP-split, the
    card's ``experts_per_card`` of its ``t.count`` experts if EP-split (each ``1/tp`` of itself when
    ``experts_tp_split``: no expert parallelism, the experts split over TP like the dense layers)."""
    b = scheme.tensor_bytes(t)
    if t.shard == "ep":
        return b / t.count * experts_per_card / (tp if experts_tp_split else 1)
    if t.shard == "tp":
        return b / tp
    return b


def check_tp(inv, tp) -> int:
    """``tp`` as a TP degree the model's attention can be split by (:func:`pdcalc.core.checks.tp_problem`).

    The same rule as :func:`pdcalc.perf.step.step`: TP splits attention by head (and DeepSeek-V4's grouped
    output projection by group, its indexer by head), so it must divide each of them. An inventory without
    a config (an article's own architecture) is checked only for ``tp >= 1``.
    """
    from pdcalc.core.checks import integer, tp_problem

    tp = integer("tp", tp, low=1)
    cfg = inv.config
    if cfg is not None:
        v4 = cfg.model_type == "deepseek_v4"
        problem = tp_problem(tp, heads=cfg.num_attention_heads, o_groups=cfg.o_groups if v4 else None,
                             index_heads=cfg.index_n_heads if v4 else None)
        if problem:
            raise LayoutError(f"TP degree {problem}")
    return tp


def card_weights(model, scheme: str = "w8a8", *, ep: int | None = 1, tp: int = 1, mtp: bool = False,
                 redundant: int = 0) -> CardWeights:
    """Weight bytes on one card of an EP group of ``ep`` cards with TP degree ``tp``.

    ``ep=None``: no expert parallelism; every card of a TP group holds ``1/tp`` of every routed expert (as
    :func:`pdcalc.perf.step.step` with ``ep=None``). ``tp`` must split the attention heads
    (:func:`check_tp`).
    """
    inv, sch = get_inventory(model), get_scheme(scheme)
    tp = check_tp(inv, tp)
    if ep is None:
        if redundant:
            raise LayoutError("redundant expert copies need expert parallelism (an EP group)")
        n_card = inv.n_routed_experts
    else:
        n_card = place_experts(inv.n_routed_experts, ep, redundant).max_experts_per_card
    out = dict.fromkeys(CATEGORIES, 0.0)
    for t in inv.tensors:
        if t.part == "mtp" and not mtp:
            continue
        out[t.category] += tensor_card_bytes(t, sch, experts_per_card=n_card, tp=tp, experts_tp_split=ep is None)
    if mtp and sch.mtp_vocab_copies and inv.config is not None and inv.config.num_nextn_predict_layers:
        # the MTP draft's own embedding and head (vocab x hidden each), split like the main ones
        vocab = inv.config.vocab_size * inv.config.hidden_size * dtype_bytes(sch.vocab_dtype)
        out["embedding"] += vocab / tp
        out["lm_head"] += vocab / tp
    by_cat = {k: v for k, v in out.items() if v}
    one = by_cat.get("routed_experts", 0.0)
    total = sum(by_cat.values())
    loaded = bool(mtp) and any(t.part == "mtp" for t in inv.tensors)     # a model without MTP layers loads none
    return CardWeights(model=inv.name, scheme=sch.name, ep=ep, tp=tp, mtp=loaded, experts_per_card=n_card,
                       by_category=by_cat, total_bytes=total, class_i_bytes=one, class_ii_bytes=total - one)


@dataclass(frozen=True)
class Budget:
    """One card's memory budget."""

    card: str
    base_bytes: float               # memory the utilisation fraction applies to
    utilization: float
    usable_bytes: float
    weights_bytes: float
    activation_bytes: float
    overhead_bytes: float
    kv_bytes: float                 # left for the KV cache (negative: does not fit)

    @property
    def fits(self) -> bool:
        return self.kv_bytes >= 0

    def verdict(self, unit: float = GiB, unit_name: str = "GiB") -> str:
        if self.fits:
            return f"fits, {self.kv_bytes / unit:.2f} {unit_name} left for KV cache"
        return f"does not fit, short by {-self.kv_bytes / unit:.2f} {unit_name}"


def budget(card, weights_bytes: float, *, utilization: float = 0.9, activation_bytes: float = 0.0,
           overhead_bytes: float = 0.0, base: str = "visible") -> Budget:
    """Memory left for KV on ``card`` after weights, activations and overhead.

    ``base`` is "visible" (what the runtime reports, where documented) or "installed" (the HBM size).

    .. math:: M_\\text{KV} = u\\,M_\\text{base} - W - A - F
    """
    c = get_card(card)
    if not 0 < utilization <= 1:
        raise LayoutError(f"utilization must be in (0, 1], got {utilization}")
    if base not in ("visible", "installed"):
        raise LayoutError(f"base must be 'visible' or 'installed', got {base!r}")
    base_bytes = c.usable_base_bytes if base == "visible" else c.hbm_bytes
    usable = utilization * base_bytes
    kv = usable - weights_bytes - activation_bytes - overhead_bytes
    return Budget(card=c.name, base_bytes=base_bytes, utilization=utilization, usable_bytes=usable,
                  weights_bytes=weights_bytes, activation_bytes=activation_bytes, overhead_bytes=overhead_bytes,
                  kv_bytes=kv)


@dataclass(frozen=True)
class MemoryPlan:
    """One card's memory, part by part, against what the engine may use.

    ``parts`` maps a part name (weights, KV cache, activations, framework ...) to bytes; ``usable_bytes``
    is what the engine may fill (utilisation x the memory it sees), ``capacity_bytes`` the card's
    memory that percentages are taken of (the installed or visible memory).
    """

    label: str
    usable_bytes: float
    capacity_bytes: float
    parts: dict = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        return float(sum(self.parts.values()))

    @property
    def free_bytes(self) -> float:
        """Usable memory left after every part (negative: over budget)."""
        return self.usable_bytes - self.total_bytes

    @property
    def fits(self) -> bool:
        return self.free_bytes >= 0

    def room_bytes(self, part: str = "kv_cache") -> float:
        """Usable memory left for ``part`` once every other part is in (what a KV cache may grow to)."""
        return self.usable_bytes - sum(v for k, v in self.parts.items() if k != part)

    def verdict(self, unit: float = GiB, unit_name: str = "GiB") -> str:
        if self.fits:
            return f"fits, {self.free_bytes / unit:.2f} {unit_name} to spare"
        return f"does not fit, short by {-self.free_bytes / unit:.2f} {unit_name}"

    def shares(self) -> dict:
        """Each part, and what is left of the usable memory, as a fraction of ``capacity_bytes``."""
        out = {k: v / self.capacity_bytes for k, v in self.parts.items()}
        out["free"] = self.free_bytes / self.capacity_bytes
        return out


def memory_plan(label: str, *, usable_bytes: float, capacity_bytes: float, **parts: float) -> MemoryPlan:
    """A :class:`MemoryPlan` from named parts in bytes.

    .. math:: M_\\text{free} = M_\\text{usable} - \\sum_i M_i

    Raises :class:`~pdcalc.core.errors.LayoutError` for a negative part or a non-positive capacity.
    """
    if not capacity_bytes > 0 or not usable_bytes > 0:
        raise LayoutError(f"{label}: usable and capacity bytes must be positive")
    for name, v in parts.items():
        if not v >= 0:
            raise LayoutError(f"{label}: part {name!r} must be a non-negative number of bytes, got {v!r}")
    return MemoryPlan(label=label, usable_bytes=float(usable_bytes), capacity_bytes=float(capacity_bytes),
                      parts={k: float(v) for k, v in parts.items()})


def card_plan(label: str, model, scheme: str, card, *, ep: int, tp: int = 1, mtp: bool = True,
              utilization: float = 0.9, kv_cache_bytes: float = 0.0, activation_bytes: float = 0.0,
              framework_bytes: float = 0.0, base: str = "visible") -> MemoryPlan:
    """One card of a real deployment: the model's weights on an EP x TP layout, a KV cache, activations
    and framework overhead, against ``utilization`` x the card's memory (``base`` as in :func:`budget`).

    Percentages (:meth:`MemoryPlan.shares`) are of the same ``base`` memory.
    """
    w = card_weights(model, scheme, ep=ep, tp=tp, mtp=mtp)
    b = budget(card, w.total_bytes, utilization=utilization, base=base)
    return memory_plan(label, usable_bytes=b.usable_bytes, capacity_bytes=b.base_bytes, weights=w.total_bytes,
                       kv_cache=kv_cache_bytes, activations=activation_bytes, framework=framework_bytes)


def ep_sweep(model, scheme: str, card, sizes, *, tp: int = 1, mtp: bool = True, utilization: float = 0.9,
             activation_bytes: float = 0.0, framework_bytes: float = 0.0, base: str = "visible"):
    """Per-card weights and the room left for KV cache for each EP group size in ``sizes``.

    Returns a DataFrame ``ep, experts_per_card, weights_bytes, usable_bytes, kv_room_bytes, fits`` (one
    row per size; sizes that cannot hold the experts raise :class:`~pdcalc.core.errors.LayoutError`).

    .. math:: M_\\text{KV}(N) = u\\,M - W(N) - A - F
    """
    import pandas as pd

    rows = []
    for n in sizes:
        w = card_weights(model, scheme, ep=int(n), tp=tp, mtp=mtp)
        b = budget(card, w.total_bytes, utilization=utilization, activation_bytes=activation_bytes,
                   overhead_bytes=framework_bytes, base=base)
        rows.append({"ep": int(n), "experts_per_card": w.experts_per_card, "weights_bytes": w.total_bytes,
                     "usable_bytes": b.usable_bytes, "kv_room_bytes": b.kv_bytes, "fits": b.fits})
    return pd.DataFrame(rows)



def load_buffers(model, engine: str = "vllm-ascend", *, max_num_batched_tokens: int) -> dict[str, float]:
    """Device buffers an engine allocates while it builds the model, in bytes per card, by name.

    vllm-ascend counts them in the weights it logs ("Actual usage: ... GiB for weights" is the memory
    allocated during ``load_model``, target and MTP draft together). Modelled for DeepSeek-V4 on
    vllm-ascend; other models and engines give an empty dict (no source sizes them):

    - ``rope cache``: the full cos/sin table of every RoPE configuration, fp32
      ``[original_max_position_embeddings x factor, qk_rope_head_dim]`` each, one configuration for the
      uncompressed layers (``rope_theta``) and one for the compressed ones (``compress_rope_theta``);
    - ``rope runtime``: per scheduled token, cos and sin of four layer groups for the target and the
      draft, fp32;
    - ``MTP hidden buffer``: ``[max_num_batched_tokens, hc_mult x hidden_size]`` in BF16;
    - ``top-k indices``: ``[max_num_batched_tokens, index_topk]`` int32 (the draft shares the target's).

    .. math:: B = 2\\,n_\\text{rope}\\,P\\,d_R \\cdot 4 + T\\,(16\\,d_R \\cdot 4 + 2\\,h_c d + 4 K)

    Source: vllm-project/vllm-ascend@182b75ea ``vllm_ascend/ops/rope_dsv4.py`` L195-241 (the full cache
    per config key, the runtime buffers), ``vllm_ascend/models/deepseek_v4/model.py`` L663 (the original
    positions), L755-760 (``topk_indices_buffer``), L823-832 (``_mtp_hidden_buffer``);
    ``worker/model_runner_v1.py`` L3507-3570 and ``platform.py`` L184-186 (what the logged figure measures).
    """
    from pdcalc.core.checks import integer
    from pdcalc.model.config import load_config

    cfg = load_config(model) if isinstance(model, str) else get_inventory(model).config
    tokens = integer("max_num_batched_tokens", max_num_batched_tokens, low=1)
    if cfg is None or cfg.model_type != "deepseek_v4" or engine != "vllm-ascend":
        return {}
    scaling = cfg.extra.get("rope_scaling") or {}
    positions = int(scaling.get("original_max_position_embeddings", cfg.max_position_embeddings or 0)
                    * scaling.get("factor", 1))
    ratios = cfg.compress_ratios[:cfg.num_hidden_layers]
    configs = 1 + (("compress_rope_theta" in cfg.extra) and any(ratios) and not all(ratios))
    d_r = cfg.qk_rope_head_dim
    return {"rope cache": 2.0 * configs * positions * d_r * 4,
            "rope runtime": tokens * 4 * 2 * 2 * d_r * 4.0,
            "MTP hidden buffer": (tokens * cfg.hc_mult * cfg.hidden_size * 2.0
                                  if cfg.num_nextn_predict_layers else 0.0),
            "top-k indices": tokens * cfg.index_topk * 4.0}


def memory_report(model, card, *, quant: str | None = None, ep: int | None = None, tp: int = 1, mtp: bool = True,
                  redundant: int = 0, utilization: float = 0.9, overhead_bytes: float = D_OVERHEAD_BYTES,
                  max_num_batched_tokens: int | None = None, context: int | None = None, engine: str | None = None,
                  kv_dtype: str | None = None) -> dict:
    """One card of an EP x TP layout as ``pdcalc memory --json`` reports it: weights by category, the buffers the
    engine builds at ``max_num_batched_tokens``, usable memory, activations and framework, what is left for the KV
    cache and, with ``context``, the KV cache of one such sequence and how many fit (book pages with live
    parameters read the same dict)."""
    from pdcalc.model.kv_cache import kv_bytes, sequences_that_fit
    from pdcalc.model.kv_layout import default_engine

    w = card_weights(model, quant, ep=ep, tp=tp, mtp=mtp, redundant=redundant)
    buffers = ({} if max_num_batched_tokens is None else
               load_buffers(model, default_engine(card), max_num_batched_tokens=max_num_batched_tokens))
    loaded = w.total_bytes + sum(buffers.values())
    b = budget(card, loaded, utilization=utilization, overhead_bytes=overhead_bytes)
    out = {
        "model": model, "card": card, "quant": w.scheme, "ep": w.ep, "tp": w.tp, "mtp": w.mtp,
        "experts_per_card": w.experts_per_card,
        "weights_bytes": w.total_bytes, "weights_by_category_bytes": w.by_category,
        "load_buffers_bytes": buffers, "loaded_bytes": loaded,
        "class_i_bytes": w.class_i_bytes, "class_ii_bytes": w.class_ii_bytes,
        "usable_bytes": b.usable_bytes, "usable_basis": f"{b.utilization} x {b.base_bytes:.0f} B visible",
        "activations_and_framework_bytes": b.overhead_bytes, "left_for_kv_bytes": b.kv_bytes, "fits": b.fits,
        "verdict": b.verdict(),
    }
    if context is not None:
        eng = engine or default_engine(card)
        r = kv_bytes(model, context, eng, include_mtp=mtp, kv_cache_dtype=kv_dtype)
        out["kv"] = {"engine": eng, "kv_cache_dtype": kv_dtype or "auto", "context_tokens": context,
                     "bytes_per_sequence": float(r.total_bytes),
                     "sequences_that_fit": sequences_that_fit(b.kv_bytes, context, model, eng, include_mtp=mtp,
                                                              kv_cache_dtype=kv_dtype)}
    return out
