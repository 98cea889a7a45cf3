"""FLOPs of a DeepSeek-V4 prefill: the weight matmuls plus the hybrid attention.

A prompt of ``L`` tokens costs two FLOPs per activated parameter per token for the weight matmuls,
plus the attention, whose keys per query depend on the layer kind (``compress_ratios`` of
``config.json``; reference ``inference/model.py`` at 60d8d707, ``Attention.forward`` and
``Indexer.forward``):

- every layer attends to the last ``w = sliding_window`` raw tokens (query ``i`` sees ``min(i, w)``);
- a ratio-4 layer attends to the ``index_topk`` compressed entries its indexer selects (at most
  ``i / 4``), and the indexer scores all ``i / 4`` entries with ``index_n_heads`` heads of
  ``index_head_dim``;
- a layer of any other ratio ``r`` (128 in DeepSeek-V4-Flash) has no indexer and attends to all
  ``i / r`` compressed entries (``get_compress_topk_idxs``).

Scores and the weighted sum each cost ``2 n_h d`` FLOPs per key (MQA over one latent of ``d =
head_dim``), the indexer ``2 n_I d_I`` per key. Summed over queries ``i = 1..L`` (causal):

.. math::

   F(L) = 2 N_\\text{act} L + \\sum_\\text{layers} \\Big[ 4 n_h d \\sum_i k(i) + 2 n_I d_I \\sum_i
   \\lfloor i / 4 \\rfloor [r = 4] \\Big]

with ``k(i)`` the keys of query ``i``. The position sums have closed forms (:func:`sum_capped_floor`),
so any prompt length costs the same. Small terms are left out: the compressors' own pooling, the
mHC mixing (``hc_mult`` x ``hidden_size`` per token) and the softmaxes.

:func:`hybrid_attention_flops` is the one implementation of the attention terms; the step model
(:mod:`pdcalc.perf.step`) uses it for one decode query and for prefill.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pdcalc.core.errors import ConfigError, LayoutError
from pdcalc.model.config import ModelConfig, load_config
from pdcalc.model.inventory import get_inventory
from pdcalc.perf.shape import as_array, check_phase, layer_ratios, model_shape, scalar_or_array

PHASES = ("prefill", "decode")


def _sum_floor(n: np.ndarray, step: float) -> np.ndarray:
    """``sum_{i=1..n} floor(i / step)`` for whole ``n >= 0``."""
    q = np.floor(n / step)
    r = n - q * step
    return step * q * (q - 1) / 2 + q * (r + 1)


def sum_capped_floor(n, step: int = 1, cap: float = np.inf):
    """``sum_{i=1..n} min(floor(i / step), cap)`` in closed form (whole ``n >= 0``, arrays welcome).

    With ``q = floor(n / s)`` and ``n = q s + r``, the uncapped sum counts ``s`` positions for each value
    ``0 .. q-1`` and ``r + 1`` for ``q``; the cap holds from position ``c s`` on:

    .. math::

       S(n) = s \\frac{q (q - 1)}{2} + q (r + 1), \\qquad
       \\sum_{i=1}^{n} \\min(\\lfloor i/s \\rfloor, c) = S(\\min(n, c s - 1)) + c \\max(0, n - c s + 1)

    Source: arithmetic; checked against a plain loop in ``tests/test_flops.py``.
    """
    n = np.floor(np.asarray(n, dtype=np.float64))
    if not np.isfinite(cap):
        return _sum_floor(n, step)
    edge = cap * step - 1
    return _sum_floor(np.minimum(n, edge), step) + cap * np.maximum(0.0, n - edge)


def _config(model) -> ModelConfig:
    cfg = model if isinstance(model, ModelConfig) else load_config(model)
    if cfg.model_type != "deepseek_v4":
        raise ConfigError(cfg.source, "model_type", f"the hybrid attention model covers deepseek_v4, "
                                                    f"not {cfg.model_type!r}")
    return cfg


def hybrid_attention_flops(model: str | Path | ModelConfig, context, *, phase: str = "prefill"):
    """Attention-core and indexer FLOPs of DeepSeek-V4 hybrid attention, summed over the main layers.

    ``phase="decode"``: one query at position ``L`` (``L`` tokens in the cache, the new one included).
    ``phase="prefill"``: all queries ``i = 1..L`` of one prompt of ``L`` tokens. Per layer of ratio
    ``r``, with ``w`` the window, ``K`` = ``index_topk``:

    .. math::

       k(i) = \\min(i, w) + \\begin{cases} 0 & r = 0 \\\\ \\min(\\lfloor i/4 \\rfloor, K) & r = 4 \\\\
       \\lfloor i/r \\rfloor & \\text{otherwise} \\end{cases}

       F_\\text{attn} = 4 n_h d \\sum_\\text{layers} \\sum_i k(i), \\qquad
       F_\\text{index} = 2 n_I d_I \\, n_{r=4} \\sum_i \\lfloor i/4 \\rfloor

    with the sums over ``i = L`` alone in decode. ``context`` counts whole tokens (rounded down).
    Returns ``(attention, indexer)`` as floats or arrays.

    Source: deepseek-ai/DeepSeek-V4-Flash ``inference/model.py`` (60d8d707): ``get_window_topk_idxs``,
    ``get_compress_topk_idxs``, ``Indexer.forward`` (``topk(min(index_topk, end_pos // ratio))``),
    ``Attention.forward`` (``sparse_attn`` over the window and the selected entries).
    """
    if phase not in PHASES:
        raise LayoutError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    cfg = _config(model)
    L = np.floor(np.asarray(context, dtype=np.float64))
    scalar = L.ndim == 0
    if phase == "decode":
        def pos(step=1, cap=np.inf):
            return np.minimum(np.floor(L / step), cap)
    else:
        def pos(step=1, cap=np.inf):
            return sum_capped_floor(L, step, cap)
    window = pos(1, cfg.sliding_window)
    keys = np.zeros(L.shape)
    scored = np.zeros(L.shape)
    for r, n in layer_ratios(cfg):
        k = window
        if r == 4:
            k = k + pos(4, cfg.index_topk)
            scored = scored + n * pos(4)
        elif r:
            k = k + pos(r)
        keys = keys + n * k
    attn = 4.0 * cfg.num_attention_heads * cfg.head_dim * keys
    index = 2.0 * cfg.index_n_heads * cfg.index_head_dim * scored
    return (float(attn), float(index)) if scalar else (attn, index)


def prefill_flops(model: str | Path | ModelConfig, prompt_tokens, *, include_attention: bool = True):
    """FLOPs to prefill one prompt of ``prompt_tokens`` tokens (an int or an array of ints).

    Returns a dict of float or arrays: ``matmul`` (2 x activated parameters x tokens), ``attention``
    (window, compressed and selected keys), ``indexer`` (scoring the ratio-4 entries) and ``total``.

    Source: module docstring; activated parameters from :meth:`pdcalc.model.inventory.Inventory.activated`;
    attention from :func:`hybrid_attention_flops`.
    """
    cfg = model if isinstance(model, ModelConfig) else load_config(model)
    if cfg.model_type != "deepseek_v4":
        raise ConfigError(cfg.source, "model_type", f"prefill_flops models deepseek_v4 hybrid attention, "
                                                    f"not {cfg.model_type!r}")
    n = np.asarray(prompt_tokens)
    scalar = n.ndim == 0
    if not np.issubdtype(n.dtype, np.integer) or np.any(n < 1):
        raise LayoutError(f"prompt_tokens must be whole numbers >= 1, got {prompt_tokens!r}")
    n = np.atleast_1d(n).astype(np.int64)
    act = get_inventory(cfg).activated()
    matmul = 2.0 * act * n
    if include_attention:
        attn, index = hybrid_attention_flops(cfg, n, phase="prefill")
    else:
        attn, index = np.zeros(n.shape), np.zeros(n.shape)
    total = matmul + attn + index
    out = {"matmul": matmul, "attention": attn, "indexer": index, "total": total}
    return {k: float(v[0]) for k, v in out.items()} if scalar else out


def prefill_compute_seconds(model, card, prompt_tokens, *, mfu: float, matmul_dtype: str = "int8",
                            attn_dtype: str = "bf16"):
    """Compute time of one prefill on one card: the weight matmuls at the ``matmul_dtype`` peak (W8A8
    multiplies int8), attention and indexer at the ``attn_dtype`` peak, both at a share ``mfu`` of peak.

    .. math:: t_p = \\frac{F_\\text{matmul}}{\\mu P_\\text{matmul}} + \\frac{F_\\text{attn} + F_\\text{indexer}}{\\mu P_\\text{attn}}

    Source: :func:`prefill_flops`; peaks from :func:`pdcalc.hardware.cards.get_card`.
    """
    from pdcalc.hardware.cards import get_card

    if not 0 < mfu <= 1:
        raise LayoutError(f"mfu must be in (0, 1], got {mfu!r}")
    dev = get_card(card)
    f = prefill_flops(model, prompt_tokens)
    attention = f["attention"] + f["indexer"]
    return f["matmul"] / (mfu * dev.flops(matmul_dtype)) + attention / (mfu * dev.flops(attn_dtype))


def attention_flops_per_token(model, context, *, phase: str = "decode"):
    """Attention-core FLOPs of one token, summed over layers (projections excluded).

    DeepSeek-V3 (MLA). Decode uses the absorbed form (reference ``attn_impl = "absorb"``): the query is
    scored against the latent cache (``d_c``) and the RoPE key cache (``d_R``), and the softmax weights are
    applied to the latent cache; the absorbed up-projections cost exactly the ``wkv_b`` matmul and are
    counted with the parameters. Prefill uses the naive form on per-head keys (``d_nope + d_R``) and values (``d_v``)
    under a causal mask, where token ``i`` of a prompt of ``L`` tokens attends to ``i`` positions:

    .. math::

       F_\\text{decode}(L) = n_\\text{layers} \\cdot 2 h L (2 d_c + d_R), \\qquad
       F_\\text{prefill}(L) = n_\\text{layers} \\cdot 2 h \\frac{L + 1}{2} (d_\\text{nope} + d_R + d_v)

    ``context`` is the KV length ``L`` in decode and the prompt length in prefill (arrays welcome).

    DeepSeek-V3.2 (DeepSeek Sparse Attention): the lightning indexer scores all ``L`` cached index keys with
    ``n_I`` heads of width ``d_I``, and MLA attends in the absorbed (MQA) form to the ``K = index_topk`` keys
    it selects. In prefill a query ``i`` takes the cheaper of that and the masked MHA mode DeepSeek runs
    for short sequences (the naive form over all ``i`` keys):

    .. math::

       F_\\text{decode}(L) = n_\\text{layers} \\bigl[b \\min(L, K) + 2 n_I d_I L\\bigr],
       \\qquad
       F_\\text{prefill}(L) = \\frac{n_\\text{layers}}{L} \\sum_{i=1}^{L} \\bigl[\\min\\bigl(a\\,i,\\;
       b \\min(i, K)\\bigr) + 2 n_I d_I\\, i\\bigr]

    with ``b = 2h(2 d_c + d_R)`` and ``a = 2h(d_\\text{nope} + d_R + d_v)``.

    DeepSeek-V4 (hybrid attention, :func:`pdcalc.perf.flops.hybrid_attention_flops`): the query attends to
    ``k(L)`` keys of one shared 512-wide latent on every layer (window, selected or all compressed
    entries), and on ratio-4 layers the indexer scores all ``L / 4`` compressed entries. Decode counts
    the one query at position ``L``; prefill averages over the ``L`` queries of the prompt:

    .. math::

       F_\\text{decode}(L) = \\sum_\\text{layers} 4 h d \\, k(L) + n_{r=4} \\, 2 n_I d_I \\lfloor L/4 \\rfloor,
       \\qquad
       F_\\text{prefill}(L) = \\frac{1}{L} \\sum_{i=1}^{L} F_\\text{decode}(i)

    (``L`` in whole tokens for V4.)

    Source: deepseek-ai/DeepSeek-V3 ``inference/model.py``, ``MLA.forward`` (the einsums of both branches);
    deepseek-ai/DeepSeek-V3.2-Exp ``inference/model.py``, ``Indexer.forward`` (``index_score`` over
    ``k_cache[:bsz, :end_pos]``, ``topk(min(index_topk, end_pos))``) and ``MLA.forward`` (the index mask);
    the DeepSeek-V3.2-Exp report (deepseek-ai/DeepSeek-V3.2-Exp ``DeepSeek_V3_2.pdf``): DSA is instantiated
    on MLA's MQA mode, and "for short-sequence prefilling, we specially implement a masked MHA mode";
    deepseek-ai/DeepSeek-V4-Flash ``inference/model.py``, ``Attention.forward``, ``Indexer.forward``.
    """
    s, phase = model_shape(model), check_phase(phase)
    L = as_array(context, "context", 1)
    if s.v4:
        attn, index = hybrid_attention_flops(s.config, L, phase=phase)
        f = attn + index if phase == "decode" else (attn + index) / L
    elif s.sparse:
        K = float(s.index_topk)
        b = 2 * s.heads * (2 * s.kv_lora_rank + s.rope)       # absorbed (MQA) form, per selected key
        per_index_key = 2 * s.index_heads * s.index_dim
        if phase == "decode":
            f = s.layers * (b * np.minimum(L, K) + per_index_key * L)
        else:
            f = s.layers * (_sparse_prefill_mean(np.floor(L), K, b, 2 * s.heads * (s.nope + s.rope + s.v_head))
                            + per_index_key * (np.floor(L) + 1) / 2)
    elif phase == "decode":
        f = s.layers * 2 * s.heads * L * (2 * s.kv_lora_rank + s.rope)
    else:
        f = s.layers * 2 * s.heads * (L + 1) / 2 * (s.nope + s.rope + s.v_head)
    return scalar_or_array(f, np.ndim(context) == 0)


def indexer_flops_per_token(model, context, *, phase: str = "decode"):
    """DeepSeek-V3.2: the lightning indexer's share of :func:`attention_flops_per_token` (0 for other models):
    ``n_layers 2 n_I d_I L`` in decode, the mean over the prompt in prefill. Every card of a TP group computes
    it whole: the reference ``Indexer`` builds plain ``Linear`` layers (deepseek-ai/DeepSeek-V3.2-Exp
    ``inference/model.py`` L441-444), and vLLM, SGLang and vllm-ascend replicate it."""
    s, phase = model_shape(model), check_phase(phase)
    L = as_array(context, "context", 1)
    if not s.sparse:
        return scalar_or_array(np.zeros_like(L), np.ndim(context) == 0)
    per_index_key = 2 * s.index_heads * s.index_dim
    f = s.layers * per_index_key * (L if phase == "decode" else (np.floor(L) + 1) / 2)
    return scalar_or_array(f, np.ndim(context) == 0)


def attention_flops_per_card(model, context, *, phase: str = "decode", tp: int = 1):
    """Attention-core FLOPs of one token on one card of a TP group of ``tp``: the heads split ``1/tp``, the
    V3.2 indexer whole on every card (:func:`indexer_flops_per_token`)."""
    attn = attention_flops_per_token(model, context, phase=phase)
    index = indexer_flops_per_token(model, context, phase=phase)
    return (attn - index) / tp + index


def _sparse_prefill_mean(n, K: float, b: float, a: float):
    """Mean over queries ``i = 1..n`` of ``min(a i, b min(i, K))``: the cheaper of masked MHA over all ``i``
    keys (``a`` per key) and sparse MQA over the ``min(i, K)`` selected keys (``b`` per key)."""
    m = np.minimum(n, K)
    head = min(a, b) * m * (m + 1) / 2                       # i <= K: every key is selected
    i_star = max(K, np.floor(b * K / a))                      # beyond K, MHA is cheaper up to i*
    u = np.clip(n, K, i_star)
    mid = a * (u * (u + 1) / 2 - K * (K + 1) / 2)             # K < i <= min(n, i*): masked MHA
    tail = b * K * np.maximum(n - np.maximum(u, K), 0)        # i > i*: sparse MQA on K keys
    return (head + mid + tail) / n


def flops_per_token(model, context, *, phase: str = "decode"):
    """FLOPs of one token on one card holding the whole model.

    Two FLOPs per multiply-accumulate of every activated parameter (``Inventory.activated``: the
    embedding lookup excluded, routed experts at ``k / E``), plus the attention core. In prefill only
    the last position of a prompt needs logits, so the output head counts once per prompt:

    .. math::

       F_\\text{decode} = 2 N_\\text{act} + F_\\text{attn}(L), \\qquad
       F_\\text{prefill} = 2 (N_\\text{act} - N_\\text{head}) + \\frac{2 N_\\text{head}}{L} + F_\\text{attn}(L)

    Source: the tensor inventory (:mod:`pdcalc.model.inventory`); :func:`attention_flops_per_token`.
    """
    s = model_shape(model)
    attn = attention_flops_per_token(model, context, phase=phase)
    if phase == "decode":
        return 2 * s.activated + attn
    L = as_array(context, "context", 1)
    return scalar_or_array(2 * (s.activated - s.head) + 2 * s.head / L + attn, np.ndim(context) == 0)
