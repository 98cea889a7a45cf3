"""What a benchmark client reports for a served deployment (:class:`pdcalc.layout.served.ServedSpec`): output
tokens/s over the run, mean TPOT and mean TTFT, from the published-cost step (:func:`pdcalc.perf.step.step`)
and what a served run pays beyond its kernels.

A served step takes ``k`` times its published kernel time plus a fixed host time per scheduler step
(:class:`ServedTerms`: scheduler, sampling, launch gaps; estimated from served benchmarks by
:mod:`pdcalc.reality.calibration`). Per DP rank, with ``b`` sequences decoding, ``a`` tokens emitted per step
(MTP: ``1 + sum_i acc^i``) and ``tau`` seconds of prefill per prompt token at the scheduler's token budget:

.. math::

   s(b) = k_d\\,t_\\text{dec}(b) + h, \\qquad
   \\text{TPOT} = \\frac{s(b)}{a\\,(1 - u)}, \\qquad u = \\frac{\\lambda}{R} P\\,\\tau \\;(\\text{co-located}),
   \\; 0 \\;(\\text{disaggregated})

with ``lambda`` requests per second over ``R`` ranks of ``P``-token prompts (a co-located rank shares its time
between prefill chunks and decode steps). The decode batch follows from Little's law, ``b = lambda (O - 1)
TPOT / R``, and the closed loop of ``C`` concurrent requests from ``C = lambda (TTFT + (O - 1) TPOT)``;
an open loop sets ``lambda`` to its request rate. TTFT is the prefill of one prompt, the KV transfer
(disaggregated, layer-wise overlap) and an M/D/1 wait for the prefill ranks at utilisation ``rho``. The batch
is capped by ``max_num_seqs`` and the KV cache a card holds; ``lambda`` by what the prefill ranks serve. This is
the steady state (:func:`steady_state`, vectorised over terms for calibration); a run of few prompts is
simulated as the client runs it (:mod:`pdcalc.perf.scheduler`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from pdcalc.core.units import GiB
from pdcalc.hardware.cards import get_card
from pdcalc.layout.memory import card_weights
from pdcalc.layout.served import SERVING_ENGINES, Role, ServedSpec
from pdcalc.model.config import load_config
from pdcalc.model.kv_cache import kv_bytes
from pdcalc.model.kv_layout import default_engine
from pdcalc.model.quant import default_scheme_on
from pdcalc.perf.speculative import accepted_tokens, dataset_acceptance
from pdcalc.perf.step import step
from pdcalc.perf.transfer import exposed_seconds, fit_link

#: Tokens per scheduler step per DP rank where a spec gives no ``max_num_batched_tokens`` (vLLM's and SGLang's
#: chunked-prefill default on large GPUs: ``max_num_batched_tokens`` / ``--chunked-prefill-size`` 8192).
DEFAULT_TOKEN_BUDGET = 8192
#: Sequences per DP rank where a spec gives no ``max_num_seqs`` (vLLM's default ``max_num_seqs``).
DEFAULT_MAX_SEQS = 256
#: ``gpu_memory_utilization`` (vLLM's default) and activations plus framework memory per card (the planner's
#: D-card figure, :class:`pdcalc.plan.workload.Setup`).
UTILIZATION = 0.9
OVERHEAD_BYTES = 4.0e9
#: Batch sizes per rank at which the decode step is timed (interpolated between).
BATCH_GRID = 40


@dataclass(frozen=True)
class ServedTerms:
    """What a served step pays beyond the published kernel costs: its kernel time ``x k`` per phase and a fixed
    host time per scheduler step. ``ServedTerms()`` is the kernels alone."""

    k_decode: float = 1.0
    k_prefill: float = 1.0
    host_s: float = 0.0
    label: str = "published kernel costs alone"


@dataclass(frozen=True)
class RoleTables:
    """One role's kernel times and capacity, per DP rank (ranks of every instance counted)."""

    name: str
    ranks: int
    batch: np.ndarray              # sequences per rank at which the decode step was timed
    decode_s: np.ndarray           # kernel seconds of one decode step at each batch
    chunk_tokens: np.ndarray       # prompt tokens per rank at which a prefill step was timed
    chunk_s: np.ndarray            # kernel seconds of a prefill step of that many tokens
    token_s: float                 # kernel seconds per prompt token at the token budget
    prompt_s: float                # kernel seconds of one whole prompt on a rank (chunked at the budget)
    budget: int                    # tokens per step per rank
    max_batch: float               # sequences a rank may decode: max_num_seqs and its KV room
    kv_seqs: float                 # sequences the KV room holds per rank
    fits: bool                     # weights and overhead fit under the utilisation cap
    short_bytes: float             # by how much a card is short when it does not fit
    weights_bytes: float


@dataclass(frozen=True)
class ServedTables:
    """Everything :func:`steady_state` needs of a spec, computed once (the expensive part)."""

    spec: ServedSpec
    quant: str
    kv_engine: str
    acceptance: float
    emitted: float                 # tokens a sequence advances per decode step (1 + accepted drafts)
    decode: RoleTables
    prefill: RoleTables
    transfer_s: float              # exposed KV transfer per request (disaggregated), seconds
    sources: tuple = field(default=(), compare=False)

    @property
    def fits(self) -> bool:
        return self.decode.fits and self.prefill.fits


def kv_engine_of(spec: ServedSpec) -> str:
    """The KV-cache layout a spec's engine keeps (its card family's where the engine names none)."""
    return SERVING_ENGINES[spec.engine]["kv_layout"] or default_engine(spec.card)


def quant_of(spec: ServedSpec) -> str:
    return spec.quant or default_scheme_on(spec.model, spec.card)


def _kv_kwargs(spec: ServedSpec, engine: str) -> dict:
    cfg = load_config(spec.model)
    if cfg.model_type in ("deepseek_v4", "deepseek_v32"):
        return {"engine": engine}
    return {"kv_bytes": 1.0} if spec.kv_dtype in ("fp8", "fp8_ds_mla", "int8") else {}


def _memory(spec: ServedSpec, role: Role, quant: str, engine: str) -> tuple[float, float, bool, float]:
    """Weights per card, KV sequences per rank, whether it fits, and by how much it is short."""
    c = get_card(spec.card)
    mtp = spec.mtp is not None
    if role.ep:
        w = card_weights(spec.model, quant, ep=role.ep, tp=role.tp, mtp=mtp).total_bytes
    else:
        cw = card_weights(spec.model, quant, ep=None, tp=role.tp, mtp=mtp)
        w = cw.total_bytes
    room = UTILIZATION * c.usable_base_bytes - w - OVERHEAD_BYTES
    ctx = spec.workload.prompt + spec.workload.output
    kv_dtype = spec.kv_dtype if spec.kv_dtype not in (None, "auto", "int8") else None
    try:
        seq = kv_bytes(spec.model, ctx, engine, include_mtp=mtp, kv_cache_dtype=kv_dtype).total_bytes
    except Exception:       # a KV format the engine's layout does not store: its default
        seq = kv_bytes(spec.model, ctx, engine, include_mtp=mtp).total_bytes
    return w, max(room, 0.0) / seq, room > 0, max(0.0, -room)


def _role_tables(spec: ServedSpec, name: str, role: Role, *, quant: str, engine: str, mtp_steps: int,
                 acceptance: float) -> RoleTables:
    w = spec.workload
    kw = dict(tp=role.tp, dp=role.dp, ep=role.ep, quant=quant, costs="published", graph=spec.graph,
              **_kv_kwargs(spec, engine))
    weights, kv_seqs, fits, short = _memory(spec, role, quant, engine)
    max_batch = float(min(role.max_num_seqs or DEFAULT_MAX_SEQS, max(kv_seqs, 1.0)))
    batch = np.unique(np.round(np.geomspace(1, max(max_batch, 1.0), BATCH_GRID), 3))
    dec = step(spec.model, spec.card, context=w.prompt + w.output / 2, concurrency=batch * role.dp, phase="decode",
               mtp_steps=mtp_steps, mtp_acceptance=acceptance, **kw)
    budget = role.max_num_batched_tokens or DEFAULT_TOKEN_BUDGET
    chunks = np.unique(np.round(np.geomspace(16, budget, 24)))
    pf = step(spec.model, spec.card, context=w.prompt, concurrency=role.dp * chunks / w.prompt, phase="prefill",
              whole_prompts=False, **kw)
    chunk_s = np.asarray(pf.time_s)
    at_budget = float(chunk_s[-1])
    prompt_s = (float(np.interp(w.prompt, chunks, chunk_s)) if w.prompt <= budget
                else w.prompt / budget * at_budget)
    return RoleTables(name=name, ranks=role.instances * role.dp, batch=batch, decode_s=np.asarray(dec.time_s),
                      chunk_tokens=chunks, chunk_s=chunk_s, token_s=at_budget / budget, prompt_s=prompt_s,
                      budget=int(budget), max_batch=max_batch, kv_seqs=kv_seqs, fits=fits, short_bytes=short,
                      weights_bytes=weights)


@cache
def _tables_cached(spec: ServedSpec, exclude: tuple) -> ServedTables:
    return _build_tables(spec, exclude)


def served_tables(spec: ServedSpec, *, exclude_sources: tuple[str, ...] = ()) -> ServedTables:
    """The kernel times and capacities of ``spec`` (cached per spec); MTP acceptance from the spec, else the
    published figures for its dataset, leaving out ``exclude_sources``."""
    return _tables_cached(spec, tuple(exclude_sources))


def _build_tables(spec: ServedSpec, exclude: tuple) -> ServedTables:
    quant, engine = quant_of(spec), kv_engine_of(spec)
    d = spec.draft_tokens
    if d and spec.mtp.acceptance is not None:
        acc, acc_ids = spec.mtp.acceptance, ("the spec's",)
    elif d:
        acc, acc_ids = dataset_acceptance(spec.workload.dataset, exclude_sources=exclude)
    else:
        acc, acc_ids = 0.0, ()
    kw = dict(quant=quant, engine=engine, mtp_steps=d, acceptance=acc)
    if spec.disaggregated:
        dec = _role_tables(spec, "decode", spec.decode, **kw)
        pre = _role_tables(spec, "prefill", spec.prefill, **{**kw, "mtp_steps": 0})
        c = get_card(spec.card)
        nbytes = kv_bytes(spec.model, spec.workload.prompt, engine, include_mtp=d > 0).total_bytes
        cfg = load_config(spec.model)
        xfer = float(exposed_seconds(fit_link().scaled(c.scale_out_bytes_per_s), nbytes, pre.prompt_s,
                                     cfg.num_hidden_layers))
    else:
        dec = pre = _role_tables(spec, "serve", spec.serve, **kw)
        xfer = 0.0
    return ServedTables(spec=spec, quant=quant, kv_engine=engine, acceptance=acc,
                        emitted=1.0 + accepted_tokens(d, acc) if d else 1.0, decode=dec, prefill=pre,
                        transfer_s=xfer, sources=acc_ids)


# ------------------------------------------------------------------------------ the steady state
@dataclass(frozen=True)
class SteadyState:
    """The client's figures in steady state, one per set of terms (arrays where terms were arrays)."""

    output_tokens_per_s: np.ndarray
    tpot_s: np.ndarray
    ttft_s: np.ndarray
    requests_per_s: np.ndarray
    batch: np.ndarray              # sequences decoding per rank
    prefill_load: np.ndarray       # utilisation of the prefill ranks (co-located: share of a rank's time)
    binds: np.ndarray              # what limits the throughput


def _terms(terms) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if isinstance(terms, ServedTerms):
        terms = [terms]
    return (np.array([t.k_decode for t in terms], float), np.array([t.k_prefill for t in terms], float),
            np.array([t.host_s for t in terms], float))


def _bisect(f, lo, hi, n: int = 48):
    """The root of an increasing ``f`` in ``[lo, hi]``, elementwise (``hi`` where ``f(hi) < 0``)."""
    lo, hi = np.array(lo, float), np.array(hi, float)
    for _ in range(n):
        mid = (lo + hi) / 2
        neg = f(mid) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
    return (lo + hi) / 2


def steady_state(t: ServedTables, terms) -> SteadyState:
    """Output tokens/s, TPOT and TTFT of ``t``'s spec under ``terms`` (one :class:`ServedTerms` or a list of
    them: the results are arrays, one per set); see the module docstring."""
    kd, kp, h = _terms(terms)
    w, d, p = t.spec.workload, t.decode, t.prefill
    O, P, a = float(w.output), float(w.prompt), t.emitted
    colo = not t.spec.disaggregated
    tau = kp * p.token_s                                   # prefill seconds per prompt token, per rank
    steps_per_prompt = P / p.budget
    mu = p.ranks / (P * tau + steps_per_prompt * h)        # prompts per second the prefill ranks serve

    def step_s(b):
        return kd * np.interp(b, d.batch, d.decode_s) + h

    def share(lam):                                        # share of a co-located rank's time in prefill
        return np.minimum(lam / mu, 0.999) if colo else np.zeros_like(lam)

    def tpot(lam, b):
        return step_s(b) / (a * (1 - share(lam)))

    def batch(lam):                                        # Little: b = lam (O - 1) TPOT / R
        f = (lambda b: b - lam * max(O - 1, 1e-9) * tpot(lam, b) / d.ranks)
        return _bisect(f, np.zeros_like(lam), np.full_like(lam, d.max_batch))

    def ttft(lam, b):
        rho = np.minimum(lam / mu, 0.999)
        service = 1 / mu * p.ranks                          # one prompt's prefill on a rank
        wait = rho / (2 * mu * (1 - rho))
        first = kp * p.prompt_s + h * np.ceil(steps_per_prompt)
        if colo:
            first = first + np.ceil(steps_per_prompt) * kd * np.interp(b, d.batch, d.decode_s)
        return first + wait + t.transfer_s + 0 * service

    # the most requests per second the ranks serve: prefill capacity, and the decode batch cap
    lam_dec = d.max_batch * d.ranks * a / (max(O - 1, 1e-9) * step_s(np.full_like(kd, d.max_batch)))
    # co-located: the decode cap holds on the share of time prefill leaves, lam = lam_dec (1 - lam / mu)
    lam_cap = np.minimum(0.999 * mu, lam_dec * mu / (mu + lam_dec) if colo else lam_dec)
    if w.concurrency is not None:                           # a closed loop of C requests
        C = float(w.concurrency)

        def e2e_load(lam):
            b = batch(lam)
            return lam * (ttft(lam, b) + (O - 1) * tpot(lam, b)) - C

        lam = _bisect(e2e_load, np.zeros_like(kd), lam_cap)
    else:
        lam = lam_cap
    if w.request_rate is not None and w.request_rate != math.inf:   # an open loop: no more than its rate
        lam = np.minimum(float(w.request_rate), lam)
    b = batch(lam)
    tp_s, tt_s = tpot(lam, b), ttft(lam, b)
    if w.concurrency is not None:                           # a saturated closed loop queues the rest
        tt_s = np.maximum(tt_s, float(w.concurrency) / lam - (O - 1) * tp_s)
    rate_bound = w.request_rate is not None and w.request_rate != math.inf
    other = np.where(rate_bound & (lam >= 0.999 * float(w.request_rate or 0)), "request rate",
                     "closed-loop concurrency" if w.concurrency is not None else "request rate")
    binds = np.where(lam >= 0.999 * lam_cap, np.where(lam_cap >= 0.999 * 0.999 * mu, "prefill capacity",
                                                       "decode batch cap"), other)
    return SteadyState(output_tokens_per_s=lam * O, tpot_s=tp_s, ttft_s=tt_s, requests_per_s=lam, batch=b,
                       prefill_load=np.minimum(lam / mu, 1.0), binds=binds)


def steady_prediction(spec: ServedSpec, terms: ServedTerms = ServedTerms(), **kw) -> dict:
    """The steady state of ``spec`` under ``terms`` as plain numbers (what :func:`steady_state` returns for one
    set of terms), with the memory verdict."""
    t = served_tables(spec, **kw)
    s = steady_state(t, terms)
    return {"output_tokens_per_s": float(s.output_tokens_per_s[0]), "tpot_s": float(s.tpot_s[0]),
            "ttft_s": float(s.ttft_s[0]), "batch": float(s.batch[0]), "binds": str(s.binds[0]), "fits": t.fits,
            "short_gib": max(t.decode.short_bytes, t.prefill.short_bytes) / GiB}
