"""KV cache per sequence as an engine lays it out (fixed and per-token parts), the article's own KV
formula, and how many sequences or how long a context fit in a card's room.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pdcalc.core.errors import ConfigError, LayoutError
from pdcalc.model.config import ModelConfig
from pdcalc.model.kv_layout import engine_layout, model_config

#: The V4 article's per-token KV figures, KB per token (§6.1: 86 "保守上界" = 43 layers x 2 KB,
#: 44 "保守估计", 22 "乐观估计"; §6.2, §6.3 and §7.2 use 44).
ARTICLE_PER_TOKEN_KB: dict[str, float] = {"upper": 86.0, "conservative": 44.0, "optimistic": 22.0}

#: Named assumptions: details the sources above do not settle. A layout lists the names it uses.
ASSUMPTIONS: dict[str, str] = {
    "reference-buffer-sized-to-context": (
        "The reference allocates max_seq_len entries per batch slot up front; we size that buffer to "
        "the sequence's context (max_seq_len = L), so its bytes are what the sequence uses."),
    "reference-bf16": (
        "Reference buffers are created under torch's default dtype, set to bfloat16 by the launcher; "
        "model.py's comments say the KV 'current implementation uses bf16'."),
    "window-full-at-any-context": (
        "Window and compressor-state caches are charged in full even when L is shorter than the "
        "window (a steady-state decode view); below ~256 tokens this overstates."),
    "decode-one-new-token": (
        "Paged windows hold ceil(w / b) + 1 pages: vLLM's sliding-window bound with one scheduled "
        "token; MTP drafts or prefill chunks can hold more."),
    "no-prefix-sharing": "No prefix caching: no page is shared between sequences.",
    "no-pool-tuple-padding": (
        "vLLM sizes its DeepSeek-V4 block pool in 'layer tuples' (kv_cache_utils."
        "_get_kv_cache_config_deepseek_v4): every block id costs the sum of the full-attention page "
        "sizes times the number of tuples, whichever group takes it. Not modelled: we count each "
        "layer's own (padded) pages. The engine's pool reserves somewhat more per sequence."),
    "ascend-a2": (
        "vllm-ascend on 910B is AscendDeviceType.A2: BF16 attention KV, int8 indexer keys with fp16 "
        "scales, the non-A5 block table; TurboQuant latent cache (enable_dsa_tq_latent) off."),
    "v3-vllm-block-64": (
        "vLLM pages DeepSeek-V3's MLA cache in 64-token blocks (FlashMLA's page size); not confirmed "
        "in source here, and any block size changes the total by at most one page per layer."),
}


# ---------------------------------------------------------------------------------------------
# bytes per sequence
# ---------------------------------------------------------------------------------------------
def _context_array(context_tokens, *, minimum: int) -> tuple[np.ndarray, bool]:
    arr = np.asarray(context_tokens)
    scalar = arr.ndim == 0
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise LayoutError(f"context_tokens must be a number of tokens, got {context_tokens!r}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            raise LayoutError("context_tokens must be whole numbers of tokens")
    if np.any(arr < minimum):
        raise LayoutError(f"context_tokens must be at least {minimum}, got {np.min(arr)}")
    return arr.astype(np.int64), scalar


def _out(x: np.ndarray, scalar: bool):
    return float(x) if scalar else x


@dataclass(frozen=True, kw_only=True, eq=False)
class KVResult:
    """KV cache of one sequence (or an array of contexts) in one engine.

    Array-valued fields are ``numpy`` arrays when the context was an array, floats otherwise.
    """

    engine: str
    model: str
    include_mtp: bool
    block_size: int | None
    context_tokens: int | np.ndarray          # tokens in the cache
    fixed_bytes: float                         # independent of context: windows, compressor states
    per_token_bytes_asymptotic: float          # slope d(total)/d(context), page rounding aside
    total_bytes: float | np.ndarray            # per sequence
    per_token_bytes_average: float | np.ndarray  # total / context
    by_layer_kind: dict = field(default_factory=dict)  # "swa", "c4", "c128", "mla", "mtp:swa" ... -> bytes
    by_cache: dict = field(default_factory=dict)       # "window", "compressed", "indexer", "state", ... -> bytes
    mla_bytes_per_token_bf16: float | None = None      # V3 only: plain MLA, (kv_lora_rank + rope) x 2 B x layers


def mla_bytes_per_token(model: str | Path | ModelConfig, *, dtype_bytes: float = 2.0,
                        include_mtp: bool = False) -> float:
    """Plain MLA cache bytes per token of a DeepSeek-V3-type model, summed over layers.

    .. math:: b_\\text{token} = n_\\text{layers} \\, (d_c + d_h^R) \\, s_\\text{dtype}

    with ``d_c = kv_lora_rank`` and ``d_h^R = qk_rope_head_dim``. DeepSeek-V3 in BF16: 61 x 576 x 2 =
    70,272 B.

    Source: arXiv 2505.09343 (Insights into DeepSeek-V3), Table 1; deepseek-ai/DeepSeek-V3
    ``inference/model.py`` ``MLA.__init__`` (kv_cache + pe_cache).
    """
    cfg = model_config(model)
    if cfg.kv_lora_rank is None:
        raise ConfigError(cfg.source, "kv_lora_rank", f"model_type {cfg.model_type!r} has no MLA latent cache")
    if dtype_bytes <= 0:
        raise LayoutError(f"dtype_bytes must be positive, got {dtype_bytes}")
    layers = cfg.num_hidden_layers + (cfg.num_nextn_predict_layers if include_mtp else 0)
    return layers * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * dtype_bytes


def kv_bytes(model: str | Path | ModelConfig, context_tokens, engine: str = "vllm-ascend", *,
             include_mtp: bool = True, block_size: int | None = None,
             kv_cache_dtype: str | None = None) -> KVResult:
    """KV cache bytes of one sequence holding ``context_tokens`` tokens.

    Parameters
    ----------
    model : str, Path or ModelConfig
        Preset name, ``config.json`` path or config.
    context_tokens : int or array of int
        Tokens in the cache (at least 1). An array gives array results (one pass, no Python loop).
    engine : str
        One of :data:`ENGINES` (default ``"vllm-ascend"``, the V4 article's engine).
    include_mtp : bool
        Count the MTP layers' caches (needed when MTP speculative decoding is on).
    block_size, kv_cache_dtype
        As in :func:`engine_layout`.

    Returns
    -------
    KVResult

    Notes
    -----
    .. math::

       B_\\text{seq}(L) = \\sum_\\text{kinds} n_\\text{layers} \\sum_\\text{caches} B_\\text{cache}(L),
       \\qquad \\bar b(L) = B_\\text{seq}(L) / L

    Source: :func:`engine_layout`.
    """
    cfg = model_config(model)
    layout = engine_layout(engine, cfg, block_size=block_size, kv_cache_dtype=kv_cache_dtype)
    ctx, scalar = _context_array(context_tokens, minimum=1)
    by_kind: dict[str, np.ndarray] = {}
    by_cache: dict[str, np.ndarray] = {}
    total = np.zeros(ctx.shape, dtype=np.float64)
    for kind in layout.kinds(include_mtp):
        kind_bytes = np.zeros(ctx.shape, dtype=np.float64)
        for cache in kind.caches:
            b = kind.n_layers * cache.bytes_at(ctx)
            kind_bytes = kind_bytes + b
            by_cache[cache.name] = by_cache.get(cache.name, 0.0) + b
        by_kind[kind.key] = by_kind.get(kind.key, 0.0) + kind_bytes
        total = total + kind_bytes
    mla = mla_bytes_per_token(cfg, include_mtp=include_mtp) if cfg.mla else None
    return KVResult(
        engine=engine, model=layout.model, include_mtp=include_mtp, block_size=layout.block_size,
        context_tokens=int(ctx) if scalar else ctx,
        fixed_bytes=layout.fixed_bytes(include_mtp),
        per_token_bytes_asymptotic=layout.per_token_bytes(include_mtp),
        total_bytes=_out(total, scalar),
        per_token_bytes_average=_out(total / ctx, scalar),
        by_layer_kind={k: _out(v, scalar) for k, v in by_kind.items()},
        by_cache={k: _out(v, scalar) for k, v in by_cache.items()},
        mla_bytes_per_token_bf16=mla,
    )


def article_kv_bytes(context_tokens, per_token_kb: float = 44.0, kb: int = 1000):
    """The V4 article's KV model: a constant number of KB per token, whatever the context.

    .. math:: B = L \\, k \\, u_\\text{KB}

    with ``k`` = 44 (§6.2, §6.3, §7.2; §6.1 also gives 86 and 22, see :data:`ARTICLE_PER_TOKEN_KB`) and
    ``u_KB`` = 1000 or 1024 bytes: the article computes with both (``4096 x 44KB = 180 MB`` and
    ``8000 x 44KB = 352 MB`` hold with 1000; its GB totals mix conventions).

    Parameters
    ----------
    context_tokens : int or array of int
        Tokens (>= 0); multiply by the number of sequences yourself.
    per_token_kb : float
        KB per token.
    kb : {1000, 1024}
        Bytes per KB.

    Returns
    -------
    float or numpy.ndarray
        Bytes.

    Source: deepseek-v4-flash-910b-pd-analysis.zh.txt §6.1 ("保守估计: ~44 KB/token"), §6.3, §7.2.
    """
    if kb not in (1000, 1024):
        raise LayoutError(f"kb must be 1000 or 1024 bytes, got {kb!r}")
    if not per_token_kb > 0:
        raise LayoutError(f"per_token_kb must be positive, got {per_token_kb!r}")
    ctx, scalar = _context_array(context_tokens, minimum=0)
    return _out(ctx * float(per_token_kb) * kb, scalar)


#: Longest context :func:`max_context` searches when the config declares no ``max_position_embeddings``.
CONTEXT_LIMIT_TOKENS = 2**24


def sequences_that_fit(kv_budget_bytes, context_tokens, model: str | Path | ModelConfig,
                       engine: str = "vllm-ascend", block_size: int | None = None, *,
                       include_mtp: bool = True, kv_cache_dtype: str | None = None):
    """How many sequences of ``context_tokens`` fit in a KV budget of ``kv_budget_bytes``.

    Each sequence takes whole pages per cache of each layer (paged engines) or its own buffer
    (reference), so:

    .. math:: N = \\left\\lfloor \\frac{B_\\text{budget}}{B_\\text{seq}(L)} \\right\\rfloor

    with :math:`B_\\text{seq}` from :func:`kv_bytes` (pages already rounded up per layer group).
    Broadcasts over arrays of budgets and contexts.

    Parameters
    ----------
    kv_budget_bytes : float or array
        Bytes available for the KV cache, e.g. per card. A negative budget (the weights alone do not
        fit) holds no sequence: the answer is 0, not an error.
    context_tokens : int or array of int
        Context of every sequence (>= 1).
    model, engine, block_size, include_mtp, kv_cache_dtype
        As in :func:`kv_bytes`; ``block_size=None`` takes the engine default (128 for vllm-ascend).

    Returns
    -------
    int or numpy.ndarray of int

    Source: :func:`kv_bytes`; assumption ``no-prefix-sharing``.
    """
    budget = np.asarray(kv_budget_bytes, dtype=np.float64)
    if not np.all(np.isfinite(budget)):
        raise LayoutError("the KV budget must be a finite number of bytes")
    budget = np.maximum(budget, 0.0)
    per_seq = np.asarray(kv_bytes(model, context_tokens, engine, include_mtp=include_mtp,
                                  block_size=block_size, kv_cache_dtype=kv_cache_dtype).total_bytes)
    n = np.floor(budget / per_seq).astype(np.int64)
    return int(n) if n.ndim == 0 else n


def max_context(kv_budget_bytes: float, n_sequences: int, model: str | Path | ModelConfig,
                engine: str = "vllm-ascend", block_size: int | None = None, *, include_mtp: bool = True,
                limit_tokens: int | None = None) -> int:
    """The longest context at which ``n_sequences`` sequences still fit in ``kv_budget_bytes``.

    .. math:: L^* = \\max \\{ L : n \\, B_\\text{seq}(L) \\le B_\\text{budget} \\}

    found by bisection (``B_seq`` is non-decreasing in ``L``), up to ``limit_tokens`` (default: the
    model's ``max_position_embeddings``, or :data:`CONTEXT_LIMIT_TOKENS` if the config has none). Returns 0
    when not even one token per sequence fits, a negative budget (weights that do not fit) included, and
    the limit when the limit itself fits.
    """
    cfg = model_config(model)
    if isinstance(n_sequences, bool) or not isinstance(n_sequences, (int, np.integer)) or n_sequences < 1:
        raise LayoutError(f"n_sequences must be an integer >= 1, got {n_sequences!r}")
    if not np.isfinite(kv_budget_bytes):
        raise LayoutError("the KV budget must be a finite number of bytes")
    hi = int(limit_tokens or cfg.max_position_embeddings or CONTEXT_LIMIT_TOKENS)

    def fits(n_tokens: int) -> bool:
        return n_sequences * kv_bytes(cfg, n_tokens, engine, include_mtp=include_mtp,
                                      block_size=block_size).total_bytes <= kv_budget_bytes

    if not fits(1):
        return 0
    if fits(hi):
        return hi
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
