"""What a benchmark client reports for a served deployment (:class:`pdcalc.layout.served.ServedSpec`): output
tokens/s over the run, mean TPOT and mean TTFT, from the published-cost step (:func:`pdcalc.perf.step.step`)
and what a served run pays beyond its kernels.

A served step takes ``k`` times its published kernel time plus a fixed host time per scheduler step
(:class:`ServedTerms`: scheduler, sampling, launch gaps; estimated from served benchmarks by
:mod:`pdcalc.reality.calibration`); a role whose DP ranks step together pays ``f`` times that host time
(:data:`DP_SYNC_SOURCES`: the ranks agree on every step's batch on the host); a request pays a fixed time
``delta`` outside the engine's steps (:data:`REQUEST_SOURCES`: the front end's processes and the stream). Per DP
rank, with ``b`` sequences
decoding, ``a`` tokens emitted per step (MTP: ``1 + sum_i acc^i``) and ``tau`` seconds of prefill per prompt token
at the scheduler's token budget:

.. math::

   s(b) = k_d\\,t_\\text{dec}(b) + h, \\qquad
   \\text{TPOT} = \\frac{s(b)}{a\\,(1 - u)}, \\qquad u = \\frac{\\lambda}{R} P\\,\\tau \\;(\\text{co-located}),
   \\; 0 \\;(\\text{disaggregated})

with ``lambda`` requests per second over ``R`` ranks of ``P``-token prompts (a co-located rank shares its time
between prefill chunks and decode steps). The decode batch follows from Little's law, ``b = lambda (O - 1)
TPOT / R``, and the closed loop of ``C`` concurrent requests from ``C = lambda (TTFT + (O - 1) TPOT)``;
an open loop sets ``lambda`` to its request rate. TTFT is the request's time outside the engine's steps
``delta`` (:data:`REQUEST_SOURCES`), the prefill of one prompt, the KV transfer
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
from pdcalc.layout.memory import budget, card_weights
from pdcalc.layout.served import SERVING_ENGINES, Role, ServedSpec
from pdcalc.model.config import load_config
from pdcalc.model.kv_cache import kv_bytes
from pdcalc.model.kv_layout import default_engine
from pdcalc.model.kv_sglang import (SGLANG_SWA_RATIO, SGLANG_V4_PAGE, SglangV4Pool, sglang_v4_pool,
                                    window_tokens_held)
from pdcalc.model.quant import default_scheme_on
from pdcalc.perf.engine_limits import engine_limits, sglang_mem_fraction
from pdcalc.perf.speculative import accepted_tokens, dataset_acceptance
from pdcalc.perf.step import step
from pdcalc.perf.traffic import kv_step_kwargs
from pdcalc.perf.transfer import exposed_seconds, fit_link

#: Tokens per scheduler step per DP rank where a spec gives no ``max_num_batched_tokens`` and its engine's
#: default is not known here (:func:`engine_limits`): vLLM's and SGLang's chunked-prefill default on 70-160 GiB
#: GPUs (``max_num_batched_tokens`` / ``--chunked-prefill-size`` 8192).
DEFAULT_TOKEN_BUDGET = 8192
#: Sequences per DP rank where a spec gives no ``max_num_seqs`` and its engine's default is not known here.
DEFAULT_MAX_SEQS = 256
#: ``gpu_memory_utilization`` (vLLM's default) and activations plus framework memory per card (the planner's
#: D-card figure, :class:`pdcalc.plan.workload.Setup`).
UTILIZATION = 0.9
OVERHEAD_BYTES = 4.0e9
#: Where SGLang's ``--mem-fraction-static`` is stated, the KV pool is what that share of the memory free before
#: the weights load leaves after them, activations and graphs being held in the rest (sgl-project/sglang
#: python/sglang/srt/mem_cache/kv_cache_configurator.py, ``_profile_available_bytes``: "slack_gb =
#: pre_model_load_memory * (1 - self.mem_fraction_static)", "rest_memory = available_gpu_memory - slack_gb").
FRACTION_ENGINES = ("sglang",)
#: Batch sizes per rank at which the decode step is timed (interpolated between).
BATCH_GRID = 40


#: Why ranks that step together pay more host time per step: before every step the engines gather each DP
#: rank's batch on the host (a collective over the CPU process group), and a rank with nothing to run takes an
#: idle step. How long this takes is published nowhere, so its factor is estimated with the other terms.
DP_SYNC_SOURCES = (
    "sgl-project/sglang, python/sglang/srt/managers/scheduler.py, Scheduler.prepare_mlp_sync_batch_raw (DP "
    "attention): 'torch.distributed.all_gather_into_tensor(global_info.flatten(), local_info, "
    "group=tp_cpu_group)' ... "
    "'if local_batch is None and max(global_num_tokens) > 0: local_batch = get_idle_batch()'",
    "vllm-project/vllm, vllm/forward_context.py, DPMetadata.num_tokens_across_dp: "
    "'dist.all_reduce(num_tokens_tensor, group=get_dp_group().cpu_group)'",
    "vllm-project/vllm-ascend, vllm_ascend/worker/model_runner_v1.py, "
    "NPUModelRunner._get_forward_metadata_across_dp: 'dist.all_reduce(forward_metadata, op=ReduceOp.MAX, "
    "group=get_dp_group().cpu_group)'",
)


#: Why a request pays a fixed time outside the engine's steps, which adds to its TTFT and, in a closed loop, holds
#: the client's slot without occupying the cards: between the client and the scheduler a request passes the
#: HTTP server, the tokenizer and the scheduler's receive loop, and its first token the detokenizer and the
#: stream back, each in its own process. How long this takes is published nowhere, so it is estimated with the
#: other terms; a single request's TTFT that barely changes with its prompt or the card is its signature.
REQUEST_SOURCES = (
    "sgl-project/sglang v0.5.15, python/sglang/srt/managers/tokenizer_manager.py: 'TokenizerManager is a process "
    "that tokenizes the text.' ... 'sock_send(self.send_to_scheduler, obj)'; "
    "python/sglang/srt/managers/detokenizer_manager.py: 'DetokenizerManager is a process that detokenizes the "
    "token ids.'",
    "sgl-project/sglang v0.5.15, python/sglang/benchmark/serving.py (the client): 'st = time.perf_counter()' "
    "before the request is sent ... 'ttft = timestamp - st' at its first streamed chunk",
)


@dataclass(frozen=True)
class ServedTerms:
    """What a served step pays beyond the published kernel costs: its kernel time ``x k`` per phase and a fixed
    host time per scheduler step, ``dp_host_factor`` times that where a role's DP ranks step together
    (:data:`DP_SYNC_SOURCES`); and what a request pays outside the engine's steps (``request_s``:
    :data:`REQUEST_SOURCES`). ``ServedTerms()`` is the kernels alone."""

    k_decode: float = 1.0
    k_prefill: float = 1.0
    host_s: float = 0.0
    label: str = "published kernel costs alone"
    dp_host_factor: float = 1.0
    request_s: float = 0.0

    def as_dict(self) -> dict:
        """The terms as the CLI's JSON prints them (host and request times in milliseconds)."""
        return {"k_decode": self.k_decode, "k_prefill": self.k_prefill, "host_ms": self.host_s * 1e3,
                "dp_host_factor": self.dp_host_factor, "request_ms": self.request_s * 1e3, "from": self.label}

    @classmethod
    def from_dict(cls, d, label: str | None = None) -> ServedTerms:
        """Terms from a mapping in :meth:`as_dict`'s fields (host and request times in milliseconds; a missing
        ``dp_host_factor`` reads as 1 and a missing ``request_ms`` as 0): a calibration file, the stored corpus
        fit or a held-out row."""
        return cls(k_decode=d["k_decode"], k_prefill=d["k_prefill"], host_s=d["host_ms"] / 1e3,
                   dp_host_factor=d.get("dp_host_factor", 1.0), request_s=d.get("request_ms", 0.0) / 1e3,
                   label=cls.label if label is None else label)

    def host_text(self) -> str:
        """The host time in words: per step, and where DP ranks step together."""
        ms = f"{self.host_s * 1e3:.3g} ms per step"
        if self.dp_host_factor == 1.0:
            return ms
        return f"{ms} (x {self.dp_host_factor:.3g} where DP ranks step together)"

    def request_text(self) -> str:
        """The per-request latency outside the engine's steps, in words."""
        return f"{self.request_s * 1e3:.3g} ms per request outside the engine's steps"

    def host_for(self, dp: int) -> float:
        """Host seconds per step of a role with ``dp`` DP ranks (stepping together when more than one)."""
        return self.host_s * (self.dp_host_factor if dp > 1 else 1.0)


def role_dp(spec: ServedSpec, role: str) -> int:
    """DP ranks of ``spec``'s ``role`` (``decode`` or ``prefill``; a co-located deployment serves both)."""
    r = getattr(spec, role) if spec.disaggregated else spec.serve
    return max(int(r.dp), 1)


@dataclass(frozen=True)
class RoleTables:
    """One role's kernel times and capacity, per DP rank (ranks of every instance counted)."""

    name: str
    ranks: int
    dp: int                        # DP ranks of one instance (they step together)
    batch: np.ndarray              # sequences per rank at which the decode step was timed
    decode_s: np.ndarray           # kernel seconds of one decode step at each batch
    chunk_tokens: np.ndarray       # prompt tokens per rank at which a prefill step was timed
    chunk_s: np.ndarray            # kernel seconds of a prefill step of that many tokens
    token_s: float                 # kernel seconds per prompt token at the token budget
    prompt_s: float                # kernel seconds of one whole prompt on a rank (chunked at the budget)
    budget: int                    # tokens per step per rank
    max_batch: float               # sequences a rank may decode: max_num_seqs and its KV room
    kv_seqs: float                 # sequences the KV room holds per rank
    cap: str                       # what sets max_batch: the running-request cap, the KV cache or SGLang's window pool
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
    schedule: str = "mixed"        # how a co-located rank runs prefill beside decode (SERVING_ENGINES)
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
    """The step's KV arguments: the engine's layout in the spec's cache format (refused where the engine's
    layout does not store it, as ``pdcalc kv`` refuses it)."""
    return kv_step_kwargs(spec.model, engine, spec.kv_dtype)


def memory_share(spec: ServedSpec, name: str, role: Role) -> dict:
    """The share of a card's memory role ``name`` of ``spec`` takes and what it holds beside weights and KV cache:
    the role's ``memory_utilization`` where stated (vLLM's ``--gpu-memory-utilization``, activations and framework
    inside it; SGLang's ``--mem-fraction-static``, activations outside it, :data:`FRACTION_ENGINES`); unstated,
    SGLang's own default on NVIDIA cards (:func:`pdcalc.perf.engine_limits.sglang_mem_fraction`), else
    :data:`UTILIZATION` with :data:`OVERHEAD_BYTES`."""
    if role.memory_utilization is None:
        fraction = sglang_mem_fraction(spec, name, role) if spec.engine in FRACTION_ENGINES else None
        if fraction is not None:
            return {"utilization": fraction, "overhead_bytes": 0.0}
        return {"utilization": UTILIZATION, "overhead_bytes": OVERHEAD_BYTES}
    return {"utilization": role.memory_utilization,
            "overhead_bytes": 0.0 if spec.engine in FRACTION_ENGINES else OVERHEAD_BYTES}


#: What caps a role's decode batch where SGLang's DeepSeek-V4 window pool holds fewer requests than its full pool.
WINDOW_POOL = "SGLang's window pool"


def _memory(spec: ServedSpec, name: str, role: Role, quant: str, engine: str, *, emitted: float,
            chunk: int) -> tuple[float, float, bool, float, str]:
    """Weights per card, KV sequences per rank, whether it fits, by how much it is short, and which pool bounds
    the sequences (``emitted``: tokens a decode step writes per sequence; ``chunk``: prompt tokens per step)."""
    c = get_card(spec.card)
    mtp = spec.mtp is not None
    if role.ep:
        w = card_weights(spec.model, quant, ep=role.ep, tp=role.tp, mtp=mtp).total_bytes
    else:
        cw = card_weights(spec.model, quant, ep=None, tp=role.tp, mtp=mtp)
        w = cw.total_bytes
    room = budget(spec.card, w, **memory_share(spec, name, role)).kv_bytes
    ctx = spec.workload.mean_prompt + spec.workload.mean_output
    pool = sglang_pool(spec, role)
    if pool is not None:                 # the pool's request slots come first (SGLang: "Not enough memory")
        held = window_tokens_held(spec.model, locked_prompt=_locked_prompt(spec, name, role, chunk), emitted=emitted,
                                  page=SGLANG_V4_PAGE[c.family])
        seqs = pool.requests(room, context=ctx, window_held=held)
        what = "KV cache" if seqs >= pool.tokens(room) / ctx else WINDOW_POOL
        return w, seqs, room > pool.fixed_bytes, max(0.0, pool.fixed_bytes - room), what
    kv_dtype = spec.kv_dtype if spec.kv_dtype not in (None, "auto") else None
    seq = kv_bytes(spec.model, round(ctx), engine, include_mtp=mtp, kv_cache_dtype=kv_dtype).total_bytes
    return w, max(room, 0.0) / seq, room > 0, max(0.0, -room), "KV cache"


def _locked_prompt(spec: ServedSpec, name: str, role: Role, chunk: int) -> float:
    """Tokens of a running request's prompt SGLang's radix cache locks in the window pool
    (:mod:`pdcalc.model.kv_sglang`): the last node it inserted, the mean prompt or its last ``chunk`` (with the one
    before where that is shorter than the window), on a co-located server; none on a disaggregated one, whose
    decode keeps only the window's tail and whose prefill lets the request go, nor without the radix cache."""
    if name != "serve" or not role.radix_cache:
        return 0.0
    P = spec.workload.mean_prompt
    last = P - chunk * math.floor((P - 1) / chunk) if P > chunk else P
    return last + chunk if P > chunk and last < load_config(spec.model).sliding_window else last


def sizes_sglang_v4_pool(spec: ServedSpec) -> bool:
    """Whether ``spec`` runs DeepSeek-V4 on SGLang, whose KV pool :func:`sglang_pool` sizes."""
    return spec.engine == "sglang" and load_config(spec.model).model_type == "deepseek_v4"


def sglang_pool(spec: ServedSpec, role: Role) -> SglangV4Pool | None:
    """SGLang's DeepSeek-V4 pool for a role (None for any other engine or model): SGLang charges every token
    of it for the window pool and the 4:1 compressor states, and sets the 128:1 states aside per request slot
    (:mod:`pdcalc.model.kv_sglang`)."""
    if not sizes_sglang_v4_pool(spec):
        return None
    ratio = role.swa_full_tokens_ratio if role.swa_full_tokens_ratio is not None else SGLANG_SWA_RATIO
    lim = engine_limits(spec, role, fallback_seqs=DEFAULT_MAX_SEQS, fallback_budget=DEFAULT_TOKEN_BUDGET)
    return sglang_v4_pool(spec.model, swa_ratio=ratio, speculative=spec.mtp is not None,
                          max_running_requests=lim.max_seqs)


def _role_tables(spec: ServedSpec, name: str, role: Role, *, quant: str, engine: str, mtp_steps: int,
                 acceptance: float) -> RoleTables:
    w = spec.workload
    kw = dict(tp=role.tp, dp=role.dp, ep=role.ep, quant=quant, costs="published", graph=spec.graph,
              **_kv_kwargs(spec, engine))
    emitted = 1.0 + accepted_tokens(mtp_steps, acceptance) if mtp_steps else 1.0
    lim = engine_limits(spec, role, fallback_seqs=DEFAULT_MAX_SEQS, fallback_budget=DEFAULT_TOKEN_BUDGET)
    weights, kv_seqs, fits, short, kv_bound = _memory(spec, name, role, quant, engine, emitted=emitted,
                                                      chunk=lim.budget)
    room = max(kv_seqs, 1.0)
    max_batch = float(room if lim.max_seqs is None else min(lim.max_seqs, room))
    cap = "running-request cap" if lim.max_seqs is not None and lim.max_seqs <= room else kv_bound
    batch = np.unique(np.round(np.geomspace(1, max(max_batch, 1.0), BATCH_GRID), 3))
    P = w.mean_prompt
    dec = step(spec.model, spec.card, context=round(P + w.mean_output / 2), concurrency=batch * role.dp, phase="decode",
               mtp_steps=mtp_steps, mtp_acceptance=acceptance, **kw)
    budget = lim.budget
    chunks = np.unique(np.round(np.geomspace(16, budget, 24)))
    pf = step(spec.model, spec.card, context=round(P), concurrency=role.dp * chunks / P, phase="prefill",
              whole_prompts=False, **kw)
    chunk_s = np.asarray(pf.time_s)
    at_budget = float(chunk_s[-1])
    prompt_s = float(np.interp(P, chunks, chunk_s)) if P <= budget else P / budget * at_budget
    return RoleTables(name=name, ranks=role.instances * role.dp, dp=role.dp, batch=batch, decode_s=np.asarray(dec.time_s),
                      chunk_tokens=chunks, chunk_s=chunk_s, token_s=at_budget / budget, prompt_s=prompt_s,
                      budget=int(budget), max_batch=max_batch, kv_seqs=kv_seqs, cap=cap, fits=fits, short_bytes=short,
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
        acc, acc_ids = dataset_acceptance(spec.workload.dataset, exclude_sources=exclude,
                                             temperature=spec.workload.temperature)
    else:
        acc, acc_ids = 0.0, ()
    kw = dict(quant=quant, engine=engine, mtp_steps=d, acceptance=acc)
    if spec.disaggregated:
        dec = _role_tables(spec, "decode", spec.decode, **kw)
        pre = _role_tables(spec, "prefill", spec.prefill, **{**kw, "mtp_steps": 0})
        c = get_card(spec.card)
        nbytes = kv_bytes(spec.model, round(spec.workload.mean_prompt), engine, include_mtp=d > 0).total_bytes
        cfg = load_config(spec.model)
        xfer = float(exposed_seconds(fit_link().scaled(c.scale_out_bytes_per_s), nbytes, pre.prompt_s,
                                     cfg.num_hidden_layers))
    else:
        dec = pre = _role_tables(spec, "serve", spec.serve, **kw)
        xfer = 0.0
    return ServedTables(spec=spec, quant=quant, kv_engine=engine, acceptance=acc,
                        emitted=1.0 + accepted_tokens(d, acc) if d else 1.0, decode=dec, prefill=pre,
                        transfer_s=xfer, schedule=SERVING_ENGINES[spec.engine]["schedule"], sources=acc_ids)


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


def _terms(terms, spec: ServedSpec) -> tuple[np.ndarray, ...]:
    """Kernel factors, host seconds per step of the decode and the prefill role, and the seconds a request pays
    outside the engine's steps, one per set of terms."""
    if isinstance(terms, ServedTerms):
        terms = [terms]
    dd, dpf = role_dp(spec, "decode"), role_dp(spec, "prefill")
    return (np.array([t.k_decode for t in terms], float), np.array([t.k_prefill for t in terms], float),
            np.array([t.host_for(dd) for t in terms], float), np.array([t.host_for(dpf) for t in terms], float),
            np.array([t.request_s for t in terms], float))


def _bisect(f, lo, hi, n: int = 48):
    """The root of an increasing ``f`` in ``[lo, hi]``, elementwise (``hi`` where ``f(hi) < 0``)."""
    lo, hi = np.array(lo, float), np.array(hi, float)
    for _ in range(n):
        mid = (lo + hi) / 2
        neg = f(mid) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
    return (lo + hi) / 2


def chunk_s(r: RoleTables, tokens, *, mixed: bool):
    """Kernel seconds of ``tokens`` prompt tokens in one step of role ``r``: a prefill step's own time, or in a
    step that also decodes (``mixed``) what they add beyond the weights that step reads anyway."""
    tokens = np.asarray(tokens, dtype=float)
    full = np.where(tokens <= r.budget, np.interp(tokens, r.chunk_tokens, r.chunk_s), tokens / r.budget * r.chunk_s[-1])
    if mixed:
        full = np.maximum(full - r.chunk_s[0], 0.0)
    return np.where(tokens > 0, full, 0.0)


def _colocated(t: ServedTables, kd, kp, h, lam):
    """Per rank of a co-located deployment at ``lam`` requests/s: the step time ``s`` that carries the decode
    batch ``b = c_b s`` and the prefill chunk ``p = c_p s`` the arrivals need (``s = k_d t_dec(b) + k_p
    t_chunk(p) + h``), and whether the step's token budget or the batch cap is exceeded."""
    w, r = t.spec.workload, t.decode
    lam_r = lam / r.ranks
    c_b = lam_r * max(w.mean_output - 1, 0) / t.emitted
    c_p = lam_r * w.mean_prompt

    def g(s):
        b = np.minimum(c_b * s, r.max_batch)
        return s - (kd * np.interp(b, r.batch, r.decode_s) + kp * chunk_s(r, c_p * s, mixed=True) + h)

    s = _bisect(g, np.zeros_like(lam), np.full_like(lam, 1e3))
    b, p = c_b * s, c_p * s
    over = (b + p > r.budget) | (b > r.max_batch * 1.0001) | (g(np.full_like(lam, 1e3)) < 0)
    return s, np.minimum(b, r.max_batch), p, over


def _waves(t: ServedTables, kd, kp, h, dl) -> SteadyState:
    r"""A co-located closed loop of fixed-length requests runs in waves: the ``c`` requests of a rank start
    together, so they finish together and the next ``c`` arrive at once. A wave's prompts reach the engine
    ``delta`` after they are sent, are prefilled in a burst of full-budget chunks, then its sequences decode
    together:

    .. math:: T = \delta + k_p\,t_\text{chunk}(c P) + n_b h + \frac{O - 1}{a} s(c), \qquad
       \text{output} = \frac{R\,c\,O}{T}, \qquad \text{TTFT} = \delta + \frac{T_b}{2} + s(c)

    with ``n_b`` the burst's steps; ``c`` is capped at the rank's batch cap (the rest wait a wave)."""
    w, d, pr = t.spec.workload, t.decode, t.prefill
    O, P, a = w.mean_output, w.mean_prompt, t.emitted
    c_all = float(w.concurrency) / d.ranks
    c = min(max(c_all, 1.0), d.max_batch)
    n_b = math.ceil(c * P / pr.budget)
    burst = kp * chunk_s(pr, c * P, mixed=False) + n_b * h
    s_d = kd * np.interp(c, d.batch, d.decode_s) + h
    cycle = dl + burst + (O - 1) / a * s_d
    waves = max(c_all / c, 1.0)                                  # requests beyond the cap wait whole waves
    out = d.ranks * c * O / cycle
    ttft = dl + burst / 2 + s_d + (waves - 1) * cycle
    binds = np.full(kd.shape, f"decode batch ({d.cap})" if c_all > d.max_batch else "closed-loop concurrency")
    return SteadyState(output_tokens_per_s=out, tpot_s=s_d / a, ttft_s=ttft, requests_per_s=out / O,
                       batch=np.full_like(kd, c), prefill_load=burst / cycle, binds=binds)


def steady_state(t: ServedTables, terms) -> SteadyState:
    """Output tokens/s, TPOT and TTFT of ``t``'s spec under ``terms`` (one :class:`ServedTerms` or a list of
    them: the results are arrays, one per set); see the module docstring."""
    kd, kp, h, h_p, dl = _terms(terms, t.spec)
    w, d, pr = t.spec.workload, t.decode, t.prefill
    O, P, a = w.mean_output, w.mean_prompt, t.emitted
    colo = not t.spec.disaggregated
    steps_per_prompt = np.ceil(P / pr.budget)
    if colo and w.concurrency is not None and (w.request_rate in (None, math.inf)):
        return _waves(t, kd, kp, h, dl)
    if colo:
        def state(lam):
            s, b, p, over = _colocated(t, kd, kp, h, lam)
            room = np.maximum(pr.budget - b, 1.0)
            service = np.ceil(P / room) * s                      # one prompt's prefill, chunk by chunk
            rho = np.minimum(p / room, 0.999)
            ttft = dl + service + rho / (1 - rho) * service / 2
            return s / a, ttft, b, over, np.minimum(p / room, 1.0)

        def feasible(lam):
            return ~state(lam)[3]

        lam_hi = np.full_like(kd, d.ranks * pr.budget / (P * 1e-6))
        lam_cap = _bisect(lambda lam: np.where(feasible(lam), -1.0, 1.0), np.zeros_like(kd), lam_hi)
    else:
        batch_tokens = max(min(float(pr.budget), max(pr.max_batch, 1.0) * P), P)   # prompts up to budget and cap
        pf_step = kp * chunk_s(pr, batch_tokens, mixed=False) + h_p * np.ceil(batch_tokens / pr.budget)
        mu = pr.ranks * (batch_tokens / P) / pf_step             # prompts per second the prefill ranks serve
        first = kp * pr.prompt_s + h_p * steps_per_prompt

        def step_s(b):
            return kd * np.interp(b, d.batch, d.decode_s) + h

        def batch(lam):                                         # Little: b = lam (O - 1) TPOT / R
            f = (lambda b: b - lam * max(O - 1, 1e-9) * step_s(b) / (a * d.ranks))
            return _bisect(f, np.zeros_like(lam), np.full_like(lam, d.max_batch))

        def state(lam):
            b = batch(lam)
            rho = np.minimum(lam / mu, 0.999)
            ttft = dl + first + rho / (2 * mu * (1 - rho)) + t.transfer_s
            return step_s(b) / a, ttft, b, lam > 0.999 * mu, np.minimum(lam / mu, 1.0)

        lam_dec = d.max_batch * d.ranks * a / (max(O - 1, 1e-9) * step_s(np.full_like(kd, d.max_batch)))
        lam_cap = np.minimum(0.999 * mu, lam_dec)
    if w.concurrency is not None:                               # a closed loop of C requests
        C = float(w.concurrency)

        def e2e_load(lam):
            tp_s, tt_s = state(lam)[:2]
            return lam * (tt_s + (O - 1) * tp_s) - C

        lam = _bisect(e2e_load, np.zeros_like(kd), lam_cap)
    else:
        lam = lam_cap
    if w.request_rate is not None and w.request_rate != math.inf:   # an open loop: no more than its rate
        lam = np.minimum(float(w.request_rate), lam)
    tp_s, tt_s, b, _, load = state(lam)
    if w.concurrency is not None:                               # a saturated closed loop queues the rest
        tt_s = np.maximum(tt_s, float(w.concurrency) / np.maximum(lam, 1e-12) - (O - 1) * tp_s)
    rate_bound = w.request_rate is not None and w.request_rate != math.inf
    other = np.where(rate_bound & (lam >= 0.999 * float(w.request_rate or 0)), "request rate",
                     "closed-loop concurrency" if w.concurrency is not None else "request rate")
    capped = np.where(b >= 0.999 * d.max_batch, f"decode batch ({d.cap})", "prefill capacity")
    binds = np.where(lam >= 0.999 * lam_cap, capped, other)
    return SteadyState(output_tokens_per_s=lam * O, tpot_s=tp_s, ttft_s=tt_s, requests_per_s=lam, batch=b,
                       prefill_load=load, binds=binds)


def steady_prediction(spec: ServedSpec, terms: ServedTerms = ServedTerms(), **kw) -> dict:
    """The steady state of ``spec`` under ``terms`` as plain numbers (what :func:`steady_state` returns for one
    set of terms), with the memory verdict."""
    t = served_tables(spec, **kw)
    s = steady_state(t, terms)
    return {"output_tokens_per_s": float(s.output_tokens_per_s[0]), "tpot_s": float(s.tpot_s[0]),
            "ttft_s": float(s.ttft_s[0]), "batch": float(s.batch[0]), "binds": str(s.binds[0]), "fits": t.fits,
            "short_gib": max(t.decode.short_bytes, t.prefill.short_bytes) / GiB}
